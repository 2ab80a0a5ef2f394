//! The bandwidth benchmark: paged decode attention over large, scattered block tables against a
//! device-to-device copy measured in the same run. Every timed launch is also verified.
//!
//! Bytes counted for attention: the K/V (or latent) bytes of the attended positions, each read
//! once; tables, tags and partial results are not counted. Bytes counted for the copy: bytes
//! read plus bytes written.

use crate::content::fmix32;
use crate::error::GpuError;
use crate::executor::{ExecOptions, ExecutorOptions, GpuExecutor};
use crate::ids::{BlockId, GroupId, ReqId};
use crate::layout::{DeviceLayout, GroupKind, GroupLayout};
use crate::program::{DecodeOp, DecodeSeq, GpuOp, GpuProgram, GpuStep, GroupTable, PrefillOp};
use crate::reference::{decode_attention, rel_error};

/// One benchmark shape: one group, `batch` requests of `ctx_tokens` positions each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// The shape's name.
    pub name: &'static str,
    /// The group kind.
    pub kind: GroupKind,
    /// Requests.
    pub batch: u32,
    /// Context tokens per request.
    pub ctx_tokens: u32,
    /// Layers.
    pub layers: u32,
    /// KV heads.
    pub kv_heads: u32,
    /// Query heads.
    pub q_heads: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Tokens per block.
    pub block_size_tokens: u32,
}

/// Goal of the issue: decode attention at >= 85% of the measured copy bandwidth.
pub const GOAL_FRACTION: f64 = 0.85;
/// Bytes of the copy buffer (read and written once each per copy).
pub const COPY_BYTES: usize = 1 << 31;

/// The shapes the table reports (all at >= 4K attended tokens and batch >= 32).
pub fn shapes() -> Vec<Shape> {
    let base = Shape {
        name: "",
        kind: GroupKind::FullAttention,
        batch: 32,
        ctx_tokens: 4096,
        layers: 1,
        kv_heads: 8,
        q_heads: 32,
        head_dim: 128,
        block_size_tokens: 16,
    };
    vec![
        Shape {
            name: "full-gqa4",
            ..base.clone()
        },
        Shape {
            name: "full-gqa8",
            q_heads: 64,
            ..base.clone()
        },
        Shape {
            name: "full-gqa4-b64-8k",
            batch: 64,
            ctx_tokens: 8192,
            ..base.clone()
        },
        Shape {
            name: "full-mha",
            kv_heads: 32,
            ..base.clone()
        },
        Shape {
            name: "full-gqa4-bs64",
            block_size_tokens: 64,
            ..base.clone()
        },
        Shape {
            name: "swa4k-at-16k",
            kind: GroupKind::SlidingWindow { sliding_window: 4096 },
            ctx_tokens: 16384,
            ..base.clone()
        },
        Shape {
            name: "chunk8k-at-12k",
            kind: GroupKind::ChunkedLocal {
                attention_chunk_size: 8192,
            },
            ctx_tokens: 12288,
            ..base.clone()
        },
        Shape {
            name: "mla-576-h16",
            kind: GroupKind::Mla,
            kv_heads: 1,
            q_heads: 16,
            head_dim: 576,
            ..base.clone()
        },
        Shape {
            name: "mla-576-h16-bs64",
            kind: GroupKind::Mla,
            kv_heads: 1,
            q_heads: 16,
            head_dim: 576,
            block_size_tokens: 64,
            ..base.clone()
        },
        Shape {
            name: "mla-576-h16-b128-4k",
            kind: GroupKind::Mla,
            batch: 128,
            kv_heads: 1,
            q_heads: 16,
            head_dim: 576,
            ..base.clone()
        },
        Shape {
            name: "mla-576-h16-b64-8k",
            kind: GroupKind::Mla,
            batch: 64,
            ctx_tokens: 8192,
            kv_heads: 1,
            q_heads: 16,
            head_dim: 576,
            ..base.clone()
        },
        // The MLA group of the built-in `deepseek-mla` scenario (61 layers, block 64) as the
        // executor runs its decode: one launch over every layer (9.2 GB at 32 x 4K). The
        // single-layer MLA rows above are the same kernel on 1/61 of the bytes.
        Shape {
            name: "deepseek-mla-61l",
            kind: GroupKind::Mla,
            layers: 61,
            kv_heads: 1,
            q_heads: 16,
            head_dim: 576,
            block_size_tokens: 64,
            ..base
        },
    ]
}

impl Shape {
    fn group(&self, blocks_total: u32) -> GroupLayout {
        GroupLayout {
            kind: self.kind,
            block_size_tokens: self.block_size_tokens,
            layers: self.layers,
            kv_heads: self.kv_heads,
            q_heads: self.q_heads,
            head_dim: self.head_dim,
            blocks_total,
        }
    }

    /// First table entry a request keeps (entries before it are the null block).
    fn first_kept_block(&self) -> u32 {
        self.kind.attend_range(self.ctx_tokens).start / self.block_size_tokens
    }

    /// Blocks each request holds.
    pub fn blocks_per_seq(&self) -> u32 {
        self.ctx_tokens.div_ceil(self.block_size_tokens) - self.first_kept_block()
    }

    /// Positions each decode attends to.
    /// K/V (or latent) bytes one decode of the shape reads.
    pub fn kv_bytes(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.attended_tokens()) * self.group(1).kv_bytes_per_position()
    }

    /// Positions each request attends.
    pub fn attended_tokens(&self) -> u32 {
        let r = self.kind.attend_range(self.ctx_tokens);
        r.end - r.start
    }

    /// The one-group layout: the null block plus every request's blocks.
    pub fn layout(&self) -> DeviceLayout {
        DeviceLayout {
            groups: vec![self.group(1 + self.batch * self.blocks_per_seq())],
            moe: None,
        }
    }

    /// The fill program (a prefill of every kept position of every request) and the decode op,
    /// with block ids shuffled over the pool so that tables are really paged.
    pub fn programs(&self, seed: u32) -> (GpuProgram, DecodeOp) {
        let layout = self.layout();
        let total = layout.groups[0].blocks_total;
        let mut ids: Vec<u32> = (1..total).collect();
        for i in (1..ids.len()).rev() {
            let j = (fmix32(seed ^ fmix32(i as u32)) as usize) % (i + 1);
            ids.swap(i, j);
        }
        let (first, per_seq) = (self.first_kept_block(), self.blocks_per_seq());
        let mut fill = Vec::new();
        let mut seqs = Vec::new();
        for r in 0..self.batch {
            let mut table = vec![BlockId::NULL; first as usize];
            table.extend(
                ids[(r * per_seq) as usize..((r + 1) * per_seq) as usize]
                    .iter()
                    .map(|&b| BlockId(b)),
            );
            let tokens: Vec<u32> = (0..self.ctx_tokens)
                .map(|p| fmix32(seed.wrapping_add(r) ^ fmix32(p)) % 128_000)
                .collect();
            let start = first * self.block_size_tokens;
            fill.push(GpuOp::Prefill(PrefillOp {
                req: ReqId(r),
                group: GroupId(0),
                start_pos: start,
                tokens: tokens[start as usize..].to_vec(),
                block_table: table.clone(),
            }));
            seqs.push(DecodeSeq {
                req: ReqId(r),
                tokens,
                tables: vec![GroupTable {
                    group: GroupId(0),
                    blocks: table,
                }],
            });
        }
        (
            GpuProgram {
                layout,
                steps: vec![GpuStep { ops: fill }],
            },
            DecodeOp { seqs },
        )
    }
}

/// Build variants of the decode kernel the benchmark compares: (name, extra defines, stages of
/// the tensor-core latent kernel). `l2-256` is the default build (K/V loads ask L2 for 256-byte
/// fetches), `plain` drops that hint (K/V kernels only); the `stages-N`
/// variants (MLA shapes only) pin the latent kernel's pipeline depth instead of the deepest
/// that fits.
pub const VARIANTS: [(&str, &str, Option<u32>); 3] = [
    ("l2-256", "", None),
    ("plain", "#define KV_PLAIN\n", None),
    ("stages-2", "", Some(2)),
];

/// One row of the table.
#[derive(Clone, Debug)]
pub struct BandwidthRow {
    /// The shape.
    pub shape: Shape,
    /// The kernel variant.
    pub variant: &'static str,
    /// Tokens per split.
    pub split_tokens: u32,
    /// Splits.
    pub nsplit: u32,
    /// K/V bytes read.
    pub kv_bytes: u64,
    /// Median time (µs).
    pub median_us: f64,
    /// Bandwidth (GB/s).
    pub gbps: f64,
    /// A device copy's bandwidth (GB/s).
    pub copy_gbps: f64,
    /// Bandwidth of a copy moving as many bytes (read + written) as the decode reads.
    pub same_copy_gbps: f64,
    /// Content violations.
    pub violations: usize,
    /// Rows verified.
    pub rows_verified: u64,
    /// Relative error of request 0's output against the f64 reference (heuristic split only).
    pub ref_rel_err: Option<f64>,
    /// Per launch, with many launches queued between one event pair (no event pair per launch).
    pub batch_us: f64,
    /// The 2 GiB copy timed the same way.
    pub copy_batch_gbps: f64,
}

impl BandwidthRow {
    /// Attention bandwidth over the bandwidth of a same-bytes copy.
    pub fn same_fraction(&self) -> f64 {
        if self.same_copy_gbps > 0.0 {
            self.gbps / self.same_copy_gbps
        } else {
            0.0
        }
    }

    /// Batched attention bandwidth over batched copy bandwidth.
    pub fn batch_fraction(&self) -> f64 {
        if self.copy_batch_gbps > 0.0 && self.batch_us > 0.0 {
            self.kv_bytes as f64 / (self.batch_us * 1e-6) / 1e9 / self.copy_batch_gbps
        } else {
            0.0
        }
    }

    /// Attention bandwidth over copy bandwidth.
    pub fn fraction(&self) -> f64 {
        if self.copy_gbps > 0.0 {
            self.gbps / self.copy_gbps
        } else {
            0.0
        }
    }
}

/// Runs every shape, each with every build variant and with the heuristic split and forced
/// ones, with a copy measured in the same executor right after the fill. `log` receives
/// progress lines. `only` keeps the shapes whose name starts with it.
/// `extra_defines` go into every decode module (diagnostic builds).
pub fn run(
    quick: bool,
    seed: u32,
    only: Option<&str>,
    extra_defines: &str,
    log: &mut dyn FnMut(String),
) -> Result<Vec<BandwidthRow>, GpuError> {
    let (warmup, iters) = if quick { (2, 5) } else { (5, 30) };
    let mut rows: Vec<BandwidthRow> = Vec::new();
    for shape in shapes()
        .into_iter()
        .filter(|s| only.is_none_or(|p| s.name.starts_with(p)))
    {
        for (variant, defines, latent_stages) in VARIANTS {
            if shape.kind != GroupKind::Mla && latent_stages.is_some() {
                continue; // a knob of the latent kernel only
            }
            if shape.kind == GroupKind::Mla && !defines.is_empty() {
                continue; // the latent kernel's bulk copies take no load hint
            }
            let options = ExecutorOptions {
                attn_defines: format!("{defines}{extra_defines}"),
                latent_stages,
                ..ExecutorOptions::default()
            };
            let mut exec = GpuExecutor::with_options(shape.layout(), &options)?;
            for k in exec.kernel_resources()?.iter().filter(|k| k.name.starts_with("attn_")) {
                log(format!(
                    "kernel {} [{variant}]: {} regs, {} B local (spill), {} B shared",
                    k.name, k.regs, k.local_bytes, k.shared_bytes
                ));
            }
            let (fill, decode) = shape.programs(seed);
            let report = exec.execute(&fill, &ExecOptions::default())?;
            log(format!(
                "{} [{variant}]: pool {:.2} GB filled in {:.1} ms",
                shape.name,
                shape.layout().pool_bytes() as f64 / 1e9,
                report.steps.iter().map(|s| s.device_ms).sum::<f32>()
            ));
            let copy = exec.bench_copy(COPY_BYTES, 3, if quick { 5 } else { 20 })?;
            // A copy that moves as many bytes (read + written) as the decode reads: the same
            // launch, start-up and tail costs over the same traffic.
            let same = exec.bench_copy((shape.kv_bytes() / 2) as usize, 3, if quick { 5 } else { 20 })?;
            let mut seen = Vec::new();
            // MLA shapes also try finer splits (two waves of CTAs: shorter tails).
            let forced: &[u32] = if shape.kind == GroupKind::Mla {
                &[512, 1024, 2048, 4096]
            } else {
                &[2048, 4096]
            };
            for split in std::iter::once(None).chain(forced.iter().map(|&t| Some(t))) {
                let opts = ExecOptions {
                    seed: u64::from(seed),
                    reset_pools: false,
                    split_tokens: split,
                    keep_outputs: split.is_none(),
                    ..ExecOptions::default()
                };
                let r = exec.bench_decode(&decode, warmup, iters, &opts)?;
                let plan = r.splits[0];
                if seen.contains(&plan) {
                    continue;
                }
                seen.push(plan);
                for v in &r.violations {
                    log(format!("  VIOLATION {v}"));
                }
                let ref_rel_err = r.outputs.first().map(|o| {
                    let g = &shape.layout().groups[0];
                    rel_error(&o.out, &decode_attention(g, &decode.seqs[0].tokens, &o.q_bits))
                });
                let row = BandwidthRow {
                    ref_rel_err,
                    shape: shape.clone(),
                    variant,
                    split_tokens: plan.split_tokens,
                    nsplit: plan.nsplit,
                    kv_bytes: r.kv_bytes,
                    median_us: f64::from(r.median_ms) * 1e3,
                    gbps: r.kv_bytes as f64 / (f64::from(r.median_ms) * 1e-3) / 1e9,
                    copy_gbps: copy.gbps(),
                    same_copy_gbps: same.gbps(),
                    violations: r.violations.len(),
                    rows_verified: r.rows_verified,
                    batch_us: f64::from(r.batch_median_ms) * 1e3,
                    copy_batch_gbps: copy.batch_gbps(),
                };
                log(format!(
                    "  {} split {:>5} x{:<3} {:>9.1} us {:>7.1} GB/s = {:>5.1}% of copy {:.1} GB/s (min {:.1} max {:.1} us), {} rows verified",
                    if split.is_none() { "auto  " } else { "forced" },
                    row.split_tokens,
                    row.nsplit,
                    row.median_us,
                    row.gbps,
                    100.0 * row.fraction(),
                    row.copy_gbps,
                    r.times_ms.iter().copied().fold(f32::INFINITY, f32::min) * 1e3,
                    r.times_ms.iter().copied().fold(0.0, f32::max) * 1e3,
                    row.rows_verified
                ));
                log(format!(
                    "    batched: {:.1} us per launch = {:.1}% of the batched copy ({:.1} GB/s)",
                    row.batch_us,
                    100.0 * row.batch_fraction(),
                    row.copy_batch_gbps
                ));
                if !r.timeline.is_empty() {
                    log(timeline_summary(&r.timeline));
                    log(timeline_per_sm(&r.timeline));
                }
                if let Some(e) = row.ref_rel_err {
                    log(format!("    request 0 vs f64 reference: rel err {e:.2e}"));
                }
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

/// A summary of LAT_DIAG_TIMELINE stamps (8 words per CTA: globaltimer at entry, SM id with
/// the last-split flag in bit 32, clock64 at entry, first tile, loop end, before the split
/// counter and exit, globaltimer at exit). Times in us; clock spans use each CTA's own
/// clock rate over its globaltimer span.
pub fn timeline_summary(words: &[u64]) -> String {
    let ctas: Vec<&[u64]> = words.chunks_exact(8).filter(|c| c[0] != 0 && c[7] >= c[0]).collect();
    if ctas.is_empty() {
        return "    timeline: no stamps".to_string();
    }
    let t0 = ctas.iter().map(|c| c[0]).min().unwrap_or(0);
    let us = |ns: u64| ns as f64 / 1e3;
    let pct = |mut v: Vec<f64>| -> String {
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        format!(
            "min {:.2} p50 {:.2} p90 {:.2} max {:.2}",
            at(0.0),
            at(0.5),
            at(0.9),
            at(1.0)
        )
    };
    let starts: Vec<f64> = ctas.iter().map(|c| us(c[0] - t0)).collect();
    let ends: Vec<f64> = ctas.iter().map(|c| us(c[7] - t0)).collect();
    let phase = |a: usize, b: usize, only_last: bool| -> Vec<f64> {
        ctas.iter()
            .filter(|c| !only_last || c[1] >> 32 != 0)
            .filter(|c| c[b] >= c[a] && c[a] != 0)
            .map(|c| (c[b] - c[a]) as f64 / cycles_per_us(c))
            .collect()
    };
    let mut s = format!(
        "    timeline of {} CTAs, span {:.2} us (first entry to last exit)
",
        ctas.len(),
        ends.iter().fold(0.0f64, |m, &x| m.max(x))
    );
    s += &format!(
        "      entry    {}
",
        pct(starts)
    );
    s += &format!(
        "      exit     {}
",
        pct(ends)
    );
    s += &format!(
        "      clock    {} cycles/us
",
        pct(ctas.iter().map(|c| cycles_per_us(c)).collect())
    );
    for (name, a, b, last) in [
        ("first tile", 2, 3, false),
        ("loop", 3, 4, false),
        ("epilogue", 4, 5, false),
        ("combine", 5, 6, true),
        ("cta total", 2, 6, false),
    ] {
        let v = phase(a, b, last);
        if !v.is_empty() {
            s += &format!(
                "      {name:<9} {}
",
                pct(v)
            );
        }
    }
    s.trim_end().to_string()
}

/// Cycles per us of one CTA's stamps: its clock64 span over its globaltimer span.
fn cycles_per_us(c: &[u64]) -> f64 {
    (c[6] - c[2]) as f64 / ((c[7] - c[0]) as f64 / 1e3).max(1e-3)
}

/// The loop time of every CTA of LAT_DIAG_TIMELINE stamps by SM, as `sm:cta:us` entries in SM
/// order, so that runs can be compared SM by SM (is a slow SM slow in every launch?).
pub fn timeline_per_sm(words: &[u64]) -> String {
    let mut by_sm: Vec<(u64, usize, f64)> = words
        .chunks_exact(8)
        .enumerate()
        .filter(|(_, c)| c[0] != 0 && c[7] > c[0] && c[4] >= c[3] && c[3] != 0)
        .map(|(i, c)| (c[1] & 0xffff_ffff, i, (c[4] - c[3]) as f64 / cycles_per_us(c)))
        .collect();
    by_sm.sort_by_key(|&(sm, cta, _)| (sm, cta));
    let entries: Vec<String> = by_sm
        .iter()
        .map(|(sm, cta, us)| format!("{sm}:{cta}:{us:.2}"))
        .collect();
    format!("      loop by sm {}", entries.join(" "))
}

/// The table in Markdown.
pub fn markdown(rows: &[BandwidthRow]) -> String {
    let mut s = String::from(
        "| shape | kind | batch | ctx | attended | layers | kv/q heads | dim | block | variant | split | KV MB | median us | GB/s | copy GB/s | % of copy | % of same-bytes copy | batched us | % of copy, batched | verified | ref err |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let sh = &r.shape;
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {}/{} | {} | {} | {} | {}x{} | {:.0} | {:.1} | {:.0} | {:.0} | {:.1}% | {:.1}% | {:.1} | {:.1}% | {} | {} |\n",
            sh.name,
            sh.kind.device_name(),
            sh.batch,
            sh.ctx_tokens,
            sh.attended_tokens(),
            sh.layers,
            sh.kv_heads,
            sh.q_heads,
            sh.head_dim,
            sh.block_size_tokens,
            r.variant,
            r.split_tokens,
            r.nsplit,
            r.kv_bytes as f64 / 1e6,
            r.median_us,
            r.gbps,
            r.copy_gbps,
            100.0 * r.fraction(),
            100.0 * r.same_fraction(),
            r.batch_us,
            100.0 * r.batch_fraction(),
            if r.violations == 0 { "ok".to_string() } else { format!("{} violations", r.violations) },
            r.ref_rel_err.map_or("-".to_string(), |e| format!("{e:.1e}")),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_meet_the_issue_minimums() {
        for s in shapes() {
            assert!(s.batch >= 32, "{}", s.name);
            assert!(s.attended_tokens() >= 4096, "{}", s.name);
            assert!(
                s.layout().problems().is_empty(),
                "{}: {:?}",
                s.name,
                s.layout().problems()
            );
        }
    }

    #[test]
    fn programs_are_valid_and_paged() {
        let s = Shape {
            batch: 3,
            ctx_tokens: 100,
            ..shapes()[5].clone()
        }; // window 4096 > ctx
        let (fill, decode) = s.programs(1);
        assert!(fill.problems().is_empty(), "{:?}", fill.problems());
        assert_eq!(decode.seqs.len(), 3);
        let sw = Shape {
            batch: 2,
            ctx_tokens: 5000,
            kind: GroupKind::SlidingWindow { sliding_window: 1000 },
            ..shapes()[0].clone()
        };
        let (fill, decode) = sw.programs(2);
        assert!(fill.problems().is_empty());
        let t = &decode.seqs[0].tables[0].blocks;
        // lo = 4000 -> first kept block 250; 313 blocks in the table.
        assert_eq!(t.len(), 313);
        assert!(t[..250].iter().all(|b| b.is_null()));
        assert!(t[250..].iter().all(|b| !b.is_null()));
        let all: std::collections::BTreeSet<_> = decode
            .seqs
            .iter()
            .flat_map(|s| s.tables[0].blocks.iter().filter(|b| !b.is_null()))
            .collect();
        assert_eq!(
            all.len() as u32,
            2 * sw.blocks_per_seq(),
            "no block shared between requests"
        );
    }

    #[test]
    fn timeline_summary_reads_the_stamps() {
        // Two CTAs at 1000 cycles per us: entries 0 and 1 us apart, one combines the splits.
        let cta = |entry_ns: u64, last: bool, phases_us: [u64; 4], exit_ns: u64| {
            let c0 = 5_000u64;
            let mut c = [entry_ns, 7 | (u64::from(last) << 32), c0, 0, 0, 0, 0, exit_ns];
            let mut at = c0;
            for (i, us) in phases_us.iter().enumerate() {
                at += us * 1000;
                c[3 + i] = at;
            }
            c
        };
        let mut words = Vec::new();
        words.extend(cta(1_000_000, false, [2, 30, 3, 0], 1_035_000));
        words.extend(cta(1_001_000, true, [4, 30, 2, 4], 1_041_000));
        words.extend([0u64; 8]); // a CTA that left no stamps
        let s = timeline_summary(&words);
        assert!(s.contains("timeline of 2 CTAs, span 41.00 us"), "{s}");
        assert!(s.contains("entry    min 0.00 p50 1.00 p90 1.00 max 1.00"), "{s}");
        assert!(s.contains("first tile min 2.00 p50 4.00"), "{s}");
        assert!(s.contains("loop      min 30.00 p50 30.00"), "{s}");
        // Only the combining CTA has a combine phase.
        assert!(s.contains("combine   min 4.00 p50 4.00 p90 4.00 max 4.00"), "{s}");
        assert!(s.contains("cta total min 35.00 p50 40.00"), "{s}");
        assert_eq!(timeline_summary(&[0; 8]), "    timeline: no stamps");
        assert_eq!(timeline_per_sm(&words), "      loop by sm 7:0:30.00 7:1:30.00");
    }

    #[test]
    fn markdown_has_one_line_per_row() {
        let row = BandwidthRow {
            shape: shapes()[0].clone(),
            variant: "base",
            split_tokens: 1024,
            nsplit: 4,
            kv_bytes: 536_870_912,
            median_us: 140.0,
            gbps: 3834.8,
            copy_gbps: 4300.0,
            same_copy_gbps: 4000.0,
            violations: 0,
            rows_verified: 1,
            ref_rel_err: None,
            batch_us: 134.2,
            copy_batch_gbps: 4300.0,
        };
        let md = markdown(std::slice::from_ref(&row));
        assert_eq!(md.lines().count(), 3);
        assert!(md.contains("| full-gqa4 | full | 32 | 4096 | 4096 | 1 | 8/32 | 128 | 16 | base | 1024x4 |"));
        assert!(md.contains("| 89.2% | 95.9% | 134.2 | 93.0% |"), "{md}");
        assert!((row.fraction() - 0.8918).abs() < 1e-3);
    }
}
