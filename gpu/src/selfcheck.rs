//! The device self-check: a clean program over every group kind whose decode outputs must match
//! the float64 CPU reference and which must verify clean, and a corrupted program whose bad
//! reads must be reported at exactly the planned steps, requests, groups and blocks.
//!
//! The programs are built here (pure, unit-tested without a GPU); [`run`] executes them.

use crate::content::{fmix32, StateDigest};
use crate::error::GpuError;
use crate::executor::{ExecOptions, ExecReport, GpuExecutor};
use crate::ids::{BlockId, GroupId, PointId, ReqId};
use crate::layout::{DeviceLayout, GroupKind, GroupLayout, MoeLayout};
use crate::program::{
    BlockCopy, DecodeOp, DecodeSeq, GpuOp, GpuProgram, GpuStep, GroupTable, MoeOp, PrefillOp, StateUpdateOp,
};
use crate::reference::{decode_attention, rel_error, state_value};
use std::collections::BTreeSet;

/// Largest relative error accepted against the f64 reference (bf16 operands, f32 accumulation).
pub const REL_TOL: f64 = 1e-2;

/// Group ids of [`layout`].
pub const G_FULL: GroupId = GroupId(0);
/// Sliding-window group.
pub const G_SWA: GroupId = GroupId(1);
/// Chunked-local group.
pub const G_CHUNKED: GroupId = GroupId(2);
/// MLA group.
pub const G_MLA: GroupId = GroupId(3);
/// Recurrent-state group.
pub const G_STATE: GroupId = GroupId(4);
/// Full attention, head dim 256.
pub const G_FULL_D256: GroupId = GroupId(5);
/// Full attention, 32 query heads per KV head.
pub const G_FULL_G32: GroupId = GroupId(6);
/// Sliding window over 4-token blocks with head dim 8 (the generic kernel's shape).
pub const G_SMALL: GroupId = GroupId(7);
/// MLA with a 96-wide latent (not a multiple of 64: the CUDA-core latent kernel) over 8-token
/// blocks (4 heads).
pub const G_MLA_NARROW: GroupId = GroupId(8);
/// Window of [`G_SMALL`].
pub const SMALL_WINDOW: u64 = 10;
/// Window of [`G_SWA`].
pub const WINDOW: u64 = 48;

fn attn(kind: GroupKind, bs: u32, layers: u32, kv: u32, q: u32, dim: u32, blocks: u32) -> GroupLayout {
    GroupLayout {
        kind,
        block_size_tokens: bs,
        layers,
        kv_heads: kv,
        q_heads: q,
        head_dim: dim,
        blocks_total: blocks,
    }
}

/// A small layout with every group kind and kernel shape.
pub fn layout() -> DeviceLayout {
    DeviceLayout {
        groups: vec![
            attn(GroupKind::FullAttention, 16, 2, 2, 8, 128, 48),
            attn(
                GroupKind::SlidingWindow { sliding_window: WINDOW },
                16,
                2,
                2,
                8,
                128,
                48,
            ),
            attn(
                GroupKind::ChunkedLocal {
                    attention_chunk_size: 64,
                },
                16,
                1,
                1,
                16,
                64,
                32,
            ),
            attn(GroupKind::Mla, 16, 2, 1, 16, 576, 32),
            GroupLayout {
                kind: GroupKind::MAMBA_STATE,
                block_size_tokens: 16,
                layers: 2,
                kv_heads: 4,
                q_heads: 4,
                head_dim: 64,
                blocks_total: 8,
            },
            attn(GroupKind::FullAttention, 32, 1, 2, 2, 256, 16),
            attn(GroupKind::FullAttention, 16, 1, 1, 32, 128, 16),
            attn(
                GroupKind::SlidingWindow {
                    sliding_window: SMALL_WINDOW,
                },
                4,
                2,
                2,
                8,
                8,
                64,
            ),
            attn(GroupKind::Mla, 8, 2, 1, 4, 96, 48),
        ],
        moe: Some(MoeLayout {
            hidden: 512,
            ffn: 256,
            experts: 16,
        }),
    }
}

/// Hands out fresh blocks per group (block 0 is never handed out).
struct Blocks {
    next: Vec<u32>,
    total: Vec<u32>,
}

impl Blocks {
    fn new(layout: &DeviceLayout) -> Self {
        Blocks {
            next: vec![1; layout.groups.len()],
            total: layout.groups.iter().map(|g| g.blocks_total).collect(),
        }
    }

    fn take(&mut self, g: GroupId, n: u32) -> Vec<BlockId> {
        let i = g.0 as usize;
        let out: Vec<BlockId> = (self.next[i]..self.next[i] + n).map(BlockId).collect();
        self.next[i] += n;
        assert!(self.next[i] <= self.total[i], "self-check layout too small for {g}");
        out
    }
}

fn tokens(seed: u32, n: u32) -> Vec<u32> {
    (0..n)
        .map(|i| fmix32(seed.wrapping_mul(0x9E37_79B1) ^ i) % 50_000)
        .collect()
}

fn prefill(req: ReqId, group: GroupId, start_pos: u32, toks: &[u32], table: &[BlockId]) -> GpuOp {
    GpuOp::Prefill(PrefillOp {
        req,
        group,
        start_pos,
        tokens: toks.to_vec(),
        block_table: table.to_vec(),
    })
}

fn seq(req: ReqId, toks: &[u32], tables: &[(GroupId, Vec<BlockId>)]) -> DecodeSeq {
    DecodeSeq {
        req,
        tokens: toks.to_vec(),
        tables: tables
            .iter()
            .map(|(g, b)| GroupTable {
                group: *g,
                blocks: b.clone(),
            })
            .collect(),
    }
}

/// The table a request reads in `g` at `ctx`: blocks wholly before the attended range are the
/// null block, as vLLM's sliding-window manager leaves them.
fn windowed(g: &GroupLayout, table: &[BlockId], ctx: u32) -> Vec<BlockId> {
    let lo = g.kind.attend_range(ctx).start;
    let first = lo / g.block_size_tokens;
    table
        .iter()
        .enumerate()
        .map(|(i, &b)| if (i as u32) < first { BlockId::NULL } else { b })
        .collect()
}

const ATTN_GROUPS: [GroupId; 8] = [
    G_FULL,
    G_SWA,
    G_CHUNKED,
    G_MLA,
    G_FULL_D256,
    G_FULL_G32,
    G_SMALL,
    G_MLA_NARROW,
];
/// Decode outputs of the clean program (requests x groups read).
const CLEAN_OUTPUTS: usize = 20;

/// The clean program: prefills, decodes over every attention group (with sliding-window and
/// chunked tables nulled below the range), a copy-on-write prefix share, a zeroed finished
/// request, state updates in place and into a copy, a MoE layer and a timed window.
pub fn clean_program(seed: u32) -> GpuProgram {
    let layout = layout();
    let mut blocks = Blocks::new(&layout);
    let (r0, r1, r2) = (ReqId(0), ReqId(1), ReqId(2));
    let t0 = tokens(seed, 151);
    let t1 = tokens(seed + 1, 77);
    let mut t2 = t0[..70].to_vec();
    t2.extend(tokens(seed + 2, 30));
    let g = |id: GroupId| layout.groups[id.0 as usize].clone();
    let tab0: Vec<(GroupId, Vec<BlockId>)> = ATTN_GROUPS
        .iter()
        .map(|&id| (id, blocks.take(id, g(id).blocks_for(151))))
        .collect();
    let tab1: Vec<(GroupId, Vec<BlockId>)> = ATTN_GROUPS
        .iter()
        .map(|&id| (id, blocks.take(id, g(id).blocks_for(77))))
        .collect();
    let mut step0 = Vec::new();
    for (id, t) in &tab0 {
        step0.push(prefill(r0, *id, 0, &t0[..150], t));
    }
    for (id, t) in &tab1 {
        step0.push(prefill(r1, *id, 0, &t1, t));
    }
    let state = |req, src, dst, history: &[u32], toks: &[u32]| {
        GpuOp::StateUpdate(StateUpdateOp {
            req,
            group: G_STATE,
            src_block: BlockId(src),
            dst_block: BlockId(dst),
            history: history.to_vec(),
            tokens: toks.to_vec(),
        })
    };
    step0.push(state(r0, 1, 1, &[], &t0[..150]));
    step0.push(state(r1, 2, 2, &[], &t1));
    let win = |ts: &[(GroupId, Vec<BlockId>)], ctx: u32| -> Vec<(GroupId, Vec<BlockId>)> {
        ts.iter().map(|(id, t)| (*id, windowed(&g(*id), t, ctx))).collect()
    };
    let step1 = vec![
        GpuOp::BeginTimed { point: PointId(0) },
        GpuOp::DecodeAttention(DecodeOp {
            seqs: vec![seq(r0, &t0[..150], &win(&tab0, 150)), seq(r1, &t1, &win(&tab1, 77))],
        }),
        state(r0, 1, 3, &t0[..150], &t0[150..151]),
        GpuOp::Moe(MoeOp {
            tokens: t0[..32].to_vec(),
            top_k: 2,
            hidden: vec![],
        }),
        // Routed on the decode's attention outputs (hidden state) of r0 and r1.
        GpuOp::Moe(MoeOp {
            tokens: vec![t0[150], t1[76]],
            top_k: 2,
            hidden: vec![0, 1],
        }),
        GpuOp::HostWork { nanos: 20_000 },
        GpuOp::EndTimed { point: PointId(0) },
    ];
    // r2 shares r0's first 64 positions (4 blocks), copies block 4 (positions 64..79, r2 keeps
    // 64..69) and writes its own 70..99 (into the copy and two fresh blocks).
    let full0 = &tab0[0].1;
    let cow = blocks.take(G_FULL, 3);
    let mut tab2 = full0[..4].to_vec();
    tab2.extend(&cow);
    let step2 = vec![
        GpuOp::CopyBlocks {
            group: G_FULL,
            copies: vec![BlockCopy {
                src: full0[4],
                dst: cow[0],
            }],
        },
        prefill(r2, G_FULL, 70, &t2[70..], &tab2),
        GpuOp::DecodeAttention(DecodeOp {
            seqs: vec![
                seq(r2, &t2, &[(G_FULL, tab2.clone())]),
                seq(r0, &t0[..150], &[(G_FULL, full0.clone())]),
            ],
        }),
    ];
    let swa0 = &tab0[1].1;
    let step3 = vec![
        GpuOp::ZeroBlocks {
            group: G_FULL,
            blocks: tab1[0].1.clone(),
        },
        prefill(r0, G_FULL, 150, &t0[150..151], full0),
        prefill(r0, G_SWA, 150, &t0[150..151], swa0),
        GpuOp::DecodeAttention(DecodeOp {
            seqs: vec![seq(
                r0,
                &t0,
                &[(G_FULL, full0.clone()), (G_SWA, windowed(&g(G_SWA), swa0, 151))],
            )],
        }),
    ];
    GpuProgram {
        layout,
        steps: vec![
            GpuStep { ops: step0 },
            GpuStep { ops: step1 },
            GpuStep { ops: step2 },
            GpuStep { ops: step3 },
        ],
    }
}

/// A violation the corrupted program must produce: (step, request, group, block, position).
pub type ExpectedViolation = (usize, ReqId, GroupId, BlockId, Option<u32>);

/// The corrupted program and the violations it must produce, and nothing else:
/// a sliding-window read after its block was zeroed (evicted) and after it was reused by
/// another request, a read of a block never written, a read of a half-written block (an
/// unfinished chain), and a state read of a block that never consumed the planned history.
pub fn corrupted_program(seed: u32) -> (GpuProgram, Vec<ExpectedViolation>) {
    let layout = layout();
    let mut blocks = Blocks::new(&layout);
    let (ra, rb, rc, rd, re) = (ReqId(10), ReqId(11), ReqId(12), ReqId(13), ReqId(14));
    let (ta, tb, tc, td, te) = (
        tokens(seed, 64),
        tokens(seed + 1, 64),
        tokens(seed + 2, 48),
        tokens(seed + 3, 20),
        tokens(seed + 4, 16),
    );
    let a = blocks.take(G_SWA, 4);
    let b = blocks.take(G_FULL, 4);
    let c = blocks.take(G_MLA, 3);
    let swa = layout.groups[G_SWA.0 as usize].clone();
    let a_read = windowed(&swa, &a, 64); // window 48 at ctx 64: positions 16..63, blocks 1..3
    let decode_a = GpuOp::DecodeAttention(DecodeOp {
        seqs: vec![seq(ra, &ta, &[(G_SWA, a_read.clone())])],
    });
    let steps = vec![
        vec![
            prefill(ra, G_SWA, 0, &ta, &a),
            prefill(rb, G_FULL, 0, &tb[..48], &b[..3]),
            prefill(rc, G_MLA, 0, &tc[..40], &c),
            GpuOp::StateUpdate(StateUpdateOp {
                req: rd,
                group: G_STATE,
                src_block: BlockId(1),
                dst_block: BlockId(1),
                history: vec![],
                tokens: td.clone(),
            }),
        ],
        vec![decode_a.clone()], // 1: clean
        vec![GpuOp::ZeroBlocks {
            group: G_SWA,
            blocks: vec![a[3]],
        }], // 2: evict a[3]
        vec![decode_a.clone()], // 3: reads zeroed a[3] at 48
        vec![prefill(re, G_SWA, 0, &te, &[a[2]])], // 4: a[2] reused by re
        vec![decode_a],         // 5: reads re's a[2] at 32
        vec![GpuOp::DecodeAttention(DecodeOp {
            seqs: vec![seq(rb, &tb, &[(G_FULL, b.clone())])],
        })], // 6: b[3] never written
        vec![GpuOp::DecodeAttention(DecodeOp {
            seqs: vec![seq(rc, &tc, &[(G_MLA, c.clone())])],
        })], // 7: c[2] half written
        vec![GpuOp::StateUpdate(StateUpdateOp {
            req: rd,
            group: G_STATE,
            src_block: BlockId(2),
            dst_block: BlockId(2),
            history: td.clone(),
            tokens: vec![1],
        })], // 8: state block 2 never consumed td
        vec![GpuOp::DecodeAttention(DecodeOp {
            seqs: vec![seq(rb, &tb[..48], &[(G_FULL, b[..3].to_vec())])],
        })], // 9: clean
    ];
    let expected = vec![
        (3, ra, G_SWA, a[3], Some(48)),
        (5, ra, G_SWA, a[2], Some(32)),
        (6, rb, G_FULL, b[3], Some(48)),
        (7, rc, G_MLA, c[2], Some(40)),
        (8, rd, G_STATE, BlockId(2), None),
    ];
    (
        GpuProgram {
            layout,
            steps: steps.into_iter().map(|ops| GpuStep { ops }).collect(),
        },
        expected,
    )
}

/// What the self-check found.
#[derive(Clone, Debug, Default)]
pub struct SelfCheckOutcome {
    /// The report's lines.
    pub lines: Vec<String>,
    /// Failures.
    pub failures: Vec<String>,
}

impl SelfCheckOutcome {
    /// True when nothing failed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

fn decode_tokens(program: &GpuProgram, step: usize, op: usize, req: ReqId) -> Option<Vec<u32>> {
    match program.steps.get(step)?.ops.get(op)? {
        GpuOp::DecodeAttention(d) => d.seqs.iter().find(|s| s.req == req).map(|s| s.tokens.clone()),
        _ => None,
    }
}

/// Decode outputs (bit for bit) and MoE routings of two runs that differ, counting a missing
/// or extra one as a difference.
fn repeat_differences(a: &ExecReport, b: &ExecReport) -> usize {
    let bits = |r: &ExecReport| -> Vec<(usize, usize, Vec<u32>)> {
        r.decode_outputs
            .iter()
            .map(|d| (d.step, d.op, d.out.iter().map(|x| x.to_bits()).collect()))
            .collect()
    };
    let (da, db) = (bits(a), bits(b));
    let outputs = da.iter().zip(&db).filter(|(x, y)| x != y).count() + da.len().abs_diff(db.len());
    let routes =
        |r: &ExecReport| -> Vec<Vec<u32>> { r.moe_routes.iter().map(|m| m.tokens_per_expert.clone()).collect() };
    let (ra, rb) = (routes(a), routes(b));
    outputs + ra.iter().zip(&rb).filter(|(x, y)| x != y).count() + ra.len().abs_diff(rb.len())
}

/// Runs both programs on the device (twice each, with fresh random queries) and compares.
pub fn run(seed: u64) -> Result<SelfCheckOutcome, GpuError> {
    let mut o = SelfCheckOutcome::default();
    let mut exec = GpuExecutor::new(layout())?;
    for round in 0..2u64 {
        let seed_r = seed ^ (round.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        check_clean_round(&mut exec, round, seed_r, &mut o)?;
        check_corrupted_round(&mut exec, round, seed_r, &mut o)?;
    }
    Ok(o)
}

/// One round of the clean program: no violation, the same bits when repeated (round 0), host
/// work inside its windows, outputs as the reference's, state blocks and MoE routings as
/// planned, and (round 1) every launching op timed.
fn check_clean_round(
    exec: &mut GpuExecutor,
    round: u64,
    seed_r: u64,
    o: &mut SelfCheckOutcome,
) -> Result<(), GpuError> {
    let program = clean_program(seed_r as u32);
    // Round 0 lets the heuristic split (short contexts: several splits, combined in-kernel);
    // round 1 forces one split per request (the kernel normalises its own output).
    let opts = ExecOptions {
        seed: seed_r,
        keep_outputs: true,
        split_tokens: if round == 0 { None } else { Some(4096) },
        time_ops: round == 1,
        ..ExecOptions::default()
    };
    let report = exec.execute(&program, &opts)?;
    o.lines.push(format!(
        "clean program round {round} ({}): {} steps, {} rows verified, {} violations, step ms {:?}",
        if round == 0 { "heuristic splits" } else { "one split" },
        report.steps.len(),
        report.rows_verified,
        report.violations.len(),
        report
            .steps
            .iter()
            .map(|s| (s.device_ms * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>()
    ));
    for v in &report.violations {
        o.failures.push(format!("clean program reported a violation: {v}"));
    }
    if round == 0 {
        check_repeat(exec, &program, &opts, &report, o)?;
    }
    check_points(&report, o);
    check_outputs(&program, &report, o);
    o.lines.extend(check_state(exec, &program, &mut o.failures)?);
    check_routes(&program, &report, o);
    if round == 1 {
        check_op_timings(&program, &report, o);
    }
    Ok(())
}

/// Runs the clean program again: the same decode outputs and routings, bit for bit.
fn check_repeat(
    exec: &mut GpuExecutor,
    program: &GpuProgram,
    opts: &ExecOptions,
    report: &ExecReport,
    o: &mut SelfCheckOutcome,
) -> Result<(), GpuError> {
    // The kernels split work statically, so the same program gives the same bits
    // (hidden-state MoE routing reads them: docs/gpu-bandwidth.md, session 6).
    let again = exec.execute(program, opts)?;
    let differing = repeat_differences(report, &again);
    o.lines.push(format!(
        "  repeated: {} decode outputs and {} MoE routings, {differing} differing",
        again.decode_outputs.len(),
        again.moe_routes.len()
    ));
    if differing > 0 {
        o.failures.push(format!(
            "the same program run twice gave {differing} different decode outputs or routings"
        ));
    }
    Ok(())
}

/// Every measurement window holds at least its host work.
fn check_points(report: &ExecReport, o: &mut SelfCheckOutcome) {
    for p in &report.points {
        o.lines.push(format!(
            "  point {}: steps {}..={}, device {:.3} ms, host {} ns (>= 20000 of host work)",
            p.point, p.step_begin, p.step_end, p.device_ms, p.host_ns
        ));
        if p.host_ns < 20_000 {
            o.failures.push(format!(
                "point {} host time {} ns < its 20000 ns of host work",
                p.point, p.host_ns
            ));
        }
    }
}

/// Every decode output against the float64 reference, and the number of outputs.
fn check_outputs(program: &GpuProgram, report: &ExecReport, o: &mut SelfCheckOutcome) {
    let mut worst = 0.0f64;
    for out in &report.decode_outputs {
        let g = &program.layout.groups[out.group.0 as usize];
        let Some(tokens) = decode_tokens(program, out.step, out.op, out.req) else {
            o.failures
                .push(format!("no tokens for output step {} op {}", out.step, out.op));
            continue;
        };
        let reference = decode_attention(g, &tokens, &out.q_bits);
        let err = rel_error(&out.out, &reference);
        worst = worst.max(err);
        let line = format!(
            "  ref step {} {} {} ({}, ctx {}, D {}, G {}): rel err {:.2e}",
            out.step,
            out.req,
            out.group,
            g.kind.device_name(),
            tokens.len(),
            g.head_dim,
            g.gqa_group(),
            err
        );
        if err.is_nan() || err > REL_TOL {
            o.failures.push(format!("{line} > {REL_TOL}"));
        }
        o.lines.push(line);
    }
    o.lines.push(format!(
        "  {} decode outputs vs f64 reference, worst rel err {worst:.2e} (tol {REL_TOL})",
        report.decode_outputs.len()
    ));
    if report.decode_outputs.len() != CLEAN_OUTPUTS {
        o.failures.push(format!(
            "expected {CLEAN_OUTPUTS} decode outputs, got {}",
            report.decode_outputs.len()
        ));
    }
}

/// Every MoE op routed tokens x top-k pairs, and both MoE ops were routed.
fn check_routes(program: &GpuProgram, report: &ExecReport, o: &mut SelfCheckOutcome) {
    for r in &report.moe_routes {
        let routed: u32 = r.tokens_per_expert.iter().sum();
        o.lines.push(format!(
            "  moe step {} op {} routed {routed} (token, expert) pairs: {:?}",
            r.step, r.op, r.tokens_per_expert
        ));
        let expected = match &program.steps[r.step].ops[r.op] {
            GpuOp::Moe(m) => m.tokens.len() as u32 * m.top_k,
            _ => 0,
        };
        if routed != expected {
            o.failures.push(format!(
                "MoE routed {routed} pairs, expected tokens x top-k = {expected}"
            ));
        }
    }
    if report.moe_routes.len() != 2 {
        o.failures
            .push(format!("expected 2 MoE ops routed, got {}", report.moe_routes.len()));
    }
}

/// Launching ops were timed one by one (prefill runs merged), each with a positive time.
fn check_op_timings(program: &GpuProgram, report: &ExecReport, o: &mut SelfCheckOutcome) {
    let launching = program
        .steps
        .iter()
        .flat_map(|s| &s.ops)
        .filter(|op| {
            !matches!(
                op,
                GpuOp::BeginTimed { .. } | GpuOp::EndTimed { .. } | GpuOp::HostWork { .. }
            )
        })
        .count();
    let timed = report.op_timings.len();
    o.lines.push(format!(
        "  {timed} ops timed one by one ({launching} launching ops, prefill runs merged)"
    ));
    if timed == 0 || timed > launching || report.op_timings.iter().any(|t| t.device_ms <= 0.0) {
        o.failures.push(format!(
            "op timings: {timed} timed of {launching}, or a non-positive time"
        ));
    }
}

/// One round of the corrupted program: exactly the planned violations, each once.
fn check_corrupted_round(
    exec: &mut GpuExecutor,
    round: u64,
    seed_r: u64,
    o: &mut SelfCheckOutcome,
) -> Result<(), GpuError> {
    let (bad, expected) = corrupted_program(seed_r as u32);
    let report = exec.execute(
        &bad,
        &ExecOptions {
            seed: seed_r,
            ..ExecOptions::default()
        },
    )?;
    o.lines.push(format!(
        "corrupted program round {round}: {} violations reported",
        report.violations.len()
    ));
    let got: BTreeSet<ExpectedViolation> = report
        .violations
        .iter()
        .map(|v| (v.step, v.req, v.group, v.block.unwrap_or(BlockId::NULL), v.position))
        .collect();
    for v in &report.violations {
        o.lines.push(format!("  {v}"));
    }
    let want: BTreeSet<ExpectedViolation> = expected.into_iter().collect();
    if got != want {
        o.failures.push(format!(
            "corrupted program: violations {got:?}, expected exactly {want:?}"
        ));
    }
    if report.violations.len() != want.len() {
        o.failures.push(format!(
            "corrupted program: {} violations, expected {}",
            report.violations.len(),
            want.len()
        ));
    }
    Ok(())
}

/// State blocks after the clean program: block 1 consumed r0's 150 tokens, block 3 (a copy
/// written by the decode-time update) 151, block 2 r1's 77; values equal the f32 mirror.
fn check_state(exec: &GpuExecutor, program: &GpuProgram, failures: &mut Vec<String>) -> Result<Vec<String>, GpuError> {
    let mut lines = Vec::new();
    let g = &program.layout.groups[G_STATE.0 as usize];
    let mut histories = Vec::new();
    for step in &program.steps {
        for op in &step.ops {
            if let GpuOp::StateUpdate(u) = op {
                let mut all = u.history.clone();
                all.extend(&u.tokens);
                histories.push((u.dst_block, all));
            }
        }
    }
    for (block, history) in histories {
        let data = exec.read_state_block(G_STATE, block)?;
        let want = StateDigest::of(&history);
        let mut bad_values = 0;
        for layer in 0..g.layers {
            for head in 0..g.kv_heads {
                let row = &data[((layer * g.kv_heads + head) * g.head_dim) as usize..][..g.head_dim as usize];
                let got = StateDigest {
                    tokens: row[0].to_bits(),
                    checksum: row[1].to_bits(),
                };
                if got != want {
                    failures.push(format!(
                        "state block {block} layer {layer} head {head}: digest {got:?}, want {want:?}"
                    ));
                }
                for d in 2..g.head_dim {
                    let r = state_value(&history, layer, head, d);
                    if (row[d as usize] - r).abs() > 1e-5 * r.abs().max(1.0) {
                        bad_values += 1;
                    }
                }
            }
        }
        if bad_values > 0 {
            failures.push(format!(
                "state block {block}: {bad_values} values differ from the f32 reference"
            ));
        }
        lines.push(format!(
            "  state block {block}: {} tokens consumed, digest and values match: {}",
            history.len(),
            bad_values == 0
        ));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_differences_counts_changed_bits_and_routings() {
        use crate::executor::{DecodeOutput, MoeRouting};
        let output = |x: f32| DecodeOutput {
            step: 1,
            op: 0,
            group: GroupId(0),
            req: ReqId(0),
            out: vec![1.0, x],
            q_bits: Vec::new(),
        };
        let report = |x: f32, route: u32| ExecReport {
            decode_outputs: vec![output(0.5), output(x)],
            moe_routes: vec![MoeRouting {
                step: 1,
                op: 1,
                tokens_per_expert: vec![route, 2],
            }],
            ..ExecReport::default()
        };
        assert_eq!(repeat_differences(&report(0.25, 3), &report(0.25, 3)), 0);
        // One ulp is a difference; so is a different routing, and a missing output.
        assert_eq!(
            repeat_differences(&report(0.25, 3), &report(f32::from_bits(0.25f32.to_bits() + 1), 3)),
            1
        );
        assert_eq!(repeat_differences(&report(0.25, 3), &report(0.25, 4)), 1);
        let mut short = report(0.25, 3);
        short.decode_outputs.pop();
        assert_eq!(repeat_differences(&report(0.25, 3), &short), 1);
    }

    #[test]
    fn programs_are_valid() {
        assert_eq!(layout().problems(), Vec::<String>::new());
        assert_eq!(clean_program(1).problems(), Vec::<String>::new());
        let (bad, expected) = corrupted_program(1);
        assert_eq!(bad.problems(), Vec::<String>::new());
        assert_eq!(expected.len(), 5);
    }

    #[test]
    fn clean_program_has_clean_outputs_decodes() {
        let p = clean_program(3);
        let outputs: usize = p
            .steps
            .iter()
            .flat_map(|s| &s.ops)
            .map(|op| match op {
                GpuOp::DecodeAttention(d) => d.seqs.iter().map(|s| s.tables.len()).sum(),
                _ => 0,
            })
            .sum();
        assert_eq!(outputs, CLEAN_OUTPUTS);
    }

    #[test]
    fn windowed_tables_null_blocks_before_the_range() {
        let g = &layout().groups[G_SWA.0 as usize];
        let t: Vec<BlockId> = (1..=10).map(BlockId).collect();
        let w = windowed(g, &t, 151); // lo = 103 -> first kept block 6
        assert_eq!(w[..6], [BlockId::NULL; 6]);
        assert_eq!(w[6], BlockId(7));
    }

    #[test]
    fn runs_or_skips() {
        if crate::device::skip_without_device("selfcheck::runs_or_skips") {
            return;
        }
        let o = run(7).expect("self-check runs");
        assert!(o.passed(), "{:#?}", o.failures);
    }
}
