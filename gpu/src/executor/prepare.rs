//! The prepare phase: validated ops turned into [`Prepared`] launches (every argument uploaded)
//! and every read's expectation recorded, before anything is timed.

use super::modules::kernel_for;
use super::moe::PreparedMoe;
use super::verify::{RecordExpect, RecordWhat};
use super::{nonempty, ExecOptions, GpuExecutor};
use crate::content::{query_bits, StateDigest};
use crate::error::GpuError;
use crate::ids::{GroupId, PointId, ReqId};
use crate::kernels::RECORD_WORDS;
use crate::lower::{aligned_lo, choose_split, decode_expect, state_expect, AttnKernel, SplitPlan};
use crate::program::{DecodeOp, GpuOp, GpuProgram};
use cudarc::driver::{CudaSlice, DeviceRepr};

/// One group's decode launch: its arguments and scratch on the device.
pub(super) struct AttnLaunch {
    pub(super) group: usize,
    pub(super) kernel: AttnKernel,
    pub(super) reqs: Vec<ReqId>,
    pub(super) tables: CudaSlice<u32>,
    pub(super) table_stride: i32,
    pub(super) lo: CudaSlice<i32>,
    pub(super) hi: CudaSlice<i32>,
    pub(super) tags: CudaSlice<u64>,
    pub(super) tag_stride: i32,
    pub(super) q: CudaSlice<u16>,
    pub(super) q_host: Vec<u16>,
    pub(super) part_o: CudaSlice<f32>,
    pub(super) part_ml: CudaSlice<f32>,
    pub(super) out: CudaSlice<f32>,
    /// One counter per (request, layer x kv head, head tile): finds the CTA that combines splits.
    pub(super) counters: CudaSlice<u32>,
    pub(super) record_base: usize,
    pub(super) split: SplitPlan,
    pub(super) kv_bytes: u64,
}

/// A decode op with its arguments on the device.
pub struct PreparedDecode {
    pub(super) launches: Vec<AttnLaunch>,
}

impl PreparedDecode {
    /// K/V bytes one launch of the op reads (attended positions x bytes per position).
    pub fn kv_bytes(&self) -> u64 {
        self.launches.iter().map(|l| l.kv_bytes).sum()
    }

    /// The split each group's launch uses.
    pub fn splits(&self) -> Vec<SplitPlan> {
        self.launches.iter().map(|l| l.split).collect()
    }
}

/// One op of a step, ready to launch: its arguments on the device.
pub(super) enum Prepared {
    /// The K/V writes of a run of consecutive `Prefill` ops into one group, one launch.
    WriteKv {
        group: usize,
        tokens: CudaSlice<u32>,
        positions: CudaSlice<u32>,
        blocks: CudaSlice<u32>,
        ntok: u32,
    },
    /// A `Prefill` whose writes an earlier `WriteKv` of its run issues.
    Merged,
    Decode(PreparedDecode),
    State(PreparedState),
    Zero {
        group: usize,
        blocks: CudaSlice<u32>,
        n: u32,
    },
    Copy {
        group: usize,
        pairs: CudaSlice<u32>,
        n: u32,
    },
    Moe(PreparedMoe),
    Begin(PointId),
    End(PointId),
    HostWork(u64),
}

/// A `StateUpdate` with its tokens on the device.
pub(super) struct PreparedState {
    pub(super) group: usize,
    pub(super) tokens: CudaSlice<u32>,
    pub(super) ntok: i32,
    pub(super) src: u32,
    pub(super) dst: u32,
    pub(super) digest: StateDigest,
    pub(super) record: usize,
}

impl Prepared {
    /// What the op launches, for [`OpTiming`](super::OpTiming); `None` for ops that launch nothing.
    pub(super) fn kind(&self) -> Option<&'static str> {
        Some(match self {
            Prepared::WriteKv { .. } => "write_kv",
            Prepared::Decode(_) => "decode",
            Prepared::State(_) => "state_update",
            Prepared::Zero { .. } => "zero_blocks",
            Prepared::Copy { .. } => "copy_blocks",
            Prepared::Moe(_) => "moe",
            Prepared::Merged | Prepared::Begin(_) | Prepared::End(_) | Prepared::HostWork(_) => return None,
        })
    }
}

impl GpuExecutor {
    /// Prepares every step's ops in order; a hidden-state MoE op routes on the output of the
    /// latest decode before it in its step.
    pub(super) fn prepare_steps(
        &self,
        program: &GpuProgram,
        opts: &ExecOptions,
        records: &mut Vec<RecordExpect>,
        moe_counts_words: &mut usize,
    ) -> Result<Vec<Vec<Prepared>>, GpuError> {
        let mut prepared: Vec<Vec<Prepared>> = Vec::with_capacity(program.steps.len());
        for (si, step) in program.steps.iter().enumerate() {
            let mut ops = Vec::with_capacity(step.ops.len());
            let mut last_decode: Option<(usize, &DecodeOp)> = None;
            let mut oi = 0;
            while oi < step.ops.len() {
                let run = crate::program::prefill_run(&step.ops[oi..]);
                if run > 0 {
                    ops.extend(self.prepare_writes(&step.ops[oi..oi + run])?);
                    oi += run;
                    continue;
                }
                let mut p = self.prepare_op(&step.ops[oi], si, oi, opts, records, moe_counts_words)?;
                match (&step.ops[oi], &mut p) {
                    (GpuOp::DecodeAttention(d), _) => last_decode = Some((ops.len(), d)),
                    (GpuOp::Moe(m), Prepared::Moe(pm)) if !m.hidden.is_empty() => {
                        if let Some((at, d)) = last_decode {
                            if let Prepared::Decode(pd) = &ops[at] {
                                pm.hidden = self.hidden_rows(pd, d, m)?;
                            }
                        }
                    }
                    _ => {}
                }
                ops.push(p);
                oi += 1;
            }
            prepared.push(ops);
        }
        Ok(prepared)
    }

    pub(super) fn new_records(&self, n: usize) -> Result<CudaSlice<u32>, GpuError> {
        let mut init = vec![0u32; n.max(1) * RECORD_WORDS];
        for r in init.chunks_mut(RECORD_WORDS) {
            r[1] = u32::MAX;
        }
        Ok(self.stream.clone_htod(&init)?)
    }

    pub(super) fn upload<T: DeviceRepr + Clone + Default>(&self, v: Vec<T>) -> Result<CudaSlice<T>, GpuError> {
        Ok(self.stream.clone_htod(&nonempty(v))?)
    }

    fn prepare_op(
        &self,
        op: &GpuOp,
        step: usize,
        opi: usize,
        opts: &ExecOptions,
        records: &mut Vec<RecordExpect>,
        moe_counts_words: &mut usize,
    ) -> Result<Prepared, GpuError> {
        Ok(match op {
            GpuOp::Prefill(_) => self
                .prepare_writes(std::slice::from_ref(op))?
                .pop()
                .expect("one prefill gives one write"),
            GpuOp::DecodeAttention(d) => Prepared::Decode(self.prepare_decode_at(d, step, opi, opts, records)?),
            GpuOp::StateUpdate(u) => {
                let g = &self.layout.groups[u.group.0 as usize];
                let (digest, expect) = state_expect(g, &u.history);
                records.push(RecordExpect {
                    step,
                    op: opi,
                    req: u.req,
                    group: u.group,
                    expect,
                    what: RecordWhat::State {
                        src_block: u.src_block,
                        digest,
                    },
                });
                Prepared::State(PreparedState {
                    group: u.group.0 as usize,
                    tokens: self.upload(u.tokens.clone())?,
                    ntok: u.tokens.len() as i32,
                    src: u.src_block.0,
                    dst: u.dst_block.0,
                    digest,
                    record: records.len() - 1,
                })
            }
            GpuOp::ZeroBlocks { group, blocks } => Prepared::Zero {
                group: group.0 as usize,
                blocks: self.upload(blocks.iter().map(|b| b.0).collect())?,
                n: blocks.len() as u32,
            },
            GpuOp::CopyBlocks { group, copies } => Prepared::Copy {
                group: group.0 as usize,
                pairs: self.upload(copies.iter().flat_map(|c| [c.src.0, c.dst.0]).collect())?,
                n: copies.len() as u32,
            },
            GpuOp::Moe(m) => {
                let experts = self.layout.moe.map_or(0, |l| l.experts as usize);
                let counts_off = *moe_counts_words;
                *moe_counts_words += experts;
                Prepared::Moe(PreparedMoe {
                    tokens: self.upload(m.tokens.clone())?,
                    ntok: m.tokens.len() as u32,
                    top_k: m.top_k,
                    counts_off,
                    step,
                    op: opi,
                    hidden: None,
                })
            }
            GpuOp::BeginTimed { point } => Prepared::Begin(*point),
            GpuOp::EndTimed { point } => Prepared::End(*point),
            GpuOp::HostWork { nanos } => Prepared::HostWork(*nanos),
        })
    }

    /// One [`Prepared::WriteKv`] per group a run of consecutive `Prefill` ops writes (in order
    /// of first appearance), then [`Prepared::Merged`] for the rest: as many entries as ops.
    fn prepare_writes(&self, run: &[GpuOp]) -> Result<Vec<Prepared>, GpuError> {
        // (group, tokens, positions, blocks) per group, in order of first appearance.
        type Rows = (usize, Vec<u32>, Vec<u32>, Vec<u32>);
        let mut per_group: Vec<Rows> = Vec::new();
        for op in run {
            let GpuOp::Prefill(p) = op else {
                unreachable!("a run of prefills")
            };
            let group = p.group.0 as usize;
            let bs = self.layout.groups[group].block_size_tokens;
            let i = match per_group.iter().position(|e| e.0 == group) {
                Some(i) => i,
                None => {
                    per_group.push((group, Vec::new(), Vec::new(), Vec::new()));
                    per_group.len() - 1
                }
            };
            let e = &mut per_group[i];
            for (k, &t) in p.tokens.iter().enumerate() {
                let pos = p.start_pos + k as u32;
                e.1.push(t);
                e.2.push(pos);
                e.3.push(p.block_table[(pos / bs) as usize].0);
            }
        }
        let mut out = Vec::with_capacity(run.len());
        for (group, tokens, positions, blocks) in per_group {
            out.push(Prepared::WriteKv {
                group,
                ntok: tokens.len() as u32,
                tokens: self.upload(tokens)?,
                positions: self.upload(positions)?,
                blocks: self.upload(blocks)?,
            });
        }
        while out.len() < run.len() {
            out.push(Prepared::Merged);
        }
        Ok(out)
    }

    pub(super) fn prepare_decode_at(
        &self,
        d: &DecodeOp,
        step: usize,
        opi: usize,
        opts: &ExecOptions,
        records: &mut Vec<RecordExpect>,
    ) -> Result<PreparedDecode, GpuError> {
        let mut groups: Vec<GroupId> = d.seqs.iter().flat_map(|s| s.tables.iter().map(|t| t.group)).collect();
        groups.sort();
        groups.dedup();
        let mut launches = Vec::new();
        for gid in groups {
            let g = &self.layout.groups[gid.0 as usize];
            let kernel = kernel_for(g, self.latent_stages).expect("validated: decode reads attention groups only");
            let seqs: Vec<_> = d.seqs.iter().filter_map(|s| s.table(gid).map(|t| (s, t))).collect();
            let table_stride = seqs.iter().map(|(_, t)| t.blocks.len()).max().unwrap_or(1).max(1);
            let tag_stride = seqs.iter().map(|(s, _)| s.tokens.len()).max().unwrap_or(1).max(1);
            let mut tables = vec![0u32; seqs.len() * table_stride];
            let mut tags = vec![0u64; seqs.len() * tag_stride];
            let (mut lo, mut hi) = (Vec::new(), Vec::new());
            let (layers, qh, dim) = (g.layers as usize, g.q_heads as usize, g.head_dim as usize);
            let mut q_host = Vec::with_capacity(seqs.len() * layers * qh * dim);
            let record_base = records.len();
            let mut max_span = 0;
            let mut kv_bytes = 0;
            for (i, (s, t)) in seqs.iter().enumerate() {
                for (j, b) in t.blocks.iter().enumerate() {
                    tables[i * table_stride + j] = b.0;
                }
                let range = g.kind.attend_range(s.ctx_tokens());
                for p in range.clone() {
                    tags[i * tag_stride + p as usize] = crate::content::packed_tag(s.tokens[p as usize], p);
                }
                max_span = max_span.max(range.end - aligned_lo(range.start));
                kv_bytes += u64::from(range.end - range.start) * g.kv_bytes_per_position();
                lo.push(range.start as i32);
                hi.push(range.end as i32);
                let salt = ((step as u32) << 16) ^ ((opi as u32) << 8) ^ gid.0;
                for l in 0..layers as u32 {
                    for h in 0..qh as u32 {
                        for x in 0..dim as u32 {
                            q_host.push(query_bits(opts.seed, salt, s.req.0, l, h, x));
                        }
                    }
                }
                records.push(RecordExpect {
                    step,
                    op: opi,
                    req: s.req,
                    group: gid,
                    expect: decode_expect(g, &s.tokens),
                    what: RecordWhat::Decode {
                        table: t.blocks.clone(),
                        block_size: g.block_size_tokens,
                        tokens: s.tokens.clone(),
                    },
                });
            }
            let head_tiles = g.gqa_group() / kernel.head_tile();
            let ctas_per_split = (seqs.len() as u64) * u64::from(g.layers * g.kv_heads * head_tiles);
            let per_sm = self.attn.get(&kernel).map_or(1, |a| a.per_sm);
            let resident = u64::from(self.info.sm_count) * u64::from(per_sm);
            let split = choose_split(max_span, ctas_per_split, resident, opts.split_tokens);
            let rows = seqs.len() * layers * qh;
            let nsplit = split.nsplit as usize;
            launches.push(AttnLaunch {
                group: gid.0 as usize,
                kernel,
                reqs: seqs.iter().map(|(s, _)| s.req).collect(),
                tables: self.upload(tables)?,
                table_stride: table_stride as i32,
                lo: self.upload(lo)?,
                hi: self.upload(hi)?,
                tags: self.upload(tags)?,
                tag_stride: tag_stride as i32,
                q: self.upload(q_host.clone())?,
                q_host: if opts.keep_outputs { q_host } else { Vec::new() },
                part_o: self.stream.alloc_zeros(rows * nsplit * dim)?,
                part_ml: self.stream.alloc_zeros(rows * nsplit * 2)?,
                out: self.stream.alloc_zeros(rows * dim)?,
                counters: self
                    .stream
                    .alloc_zeros((seqs.len() * (g.layers * g.kv_heads * head_tiles) as usize).max(1))?,
                record_base,
                split,
                kv_bytes,
            });
        }
        Ok(PreparedDecode { launches })
    }
}
