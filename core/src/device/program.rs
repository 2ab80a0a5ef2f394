//! The lowered instruction set a plan is translated into before it runs on the GPU.
//!
//! A [`GpuProgram`] is a [`DeviceLayout`] plus steps; a step is a list of ops run in order on
//! one stream and timed as a whole with CUDA events. Ops carry everything the device needs and
//! everything the verifier needs: a `DecodeAttention` names, per request, the token at every
//! position, so each K/V row read can be checked against what the plan says it holds.
//!
//! Plain Rust data on purpose: the plan format (kvsim-core) is still moving, and the lowering
//! from a plan to this will live beside it.

use crate::device::ids::{BlockId, GroupId, PointId, ReqId};
use crate::device::layout::{DeviceLayout, GroupLayout, MOE_MAX_TOP_K};
use std::collections::BTreeSet;

/// A layout and the steps to run over it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GpuProgram {
    /// The pools the program needs.
    pub layout: DeviceLayout,
    /// The steps, in order.
    pub steps: Vec<GpuStep>,
}

/// One step: ops run in order, timed together.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GpuStep {
    /// Ops of the step, in order.
    pub ops: Vec<GpuOp>,
}

/// One lowered operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuOp {
    /// Write K/V of `tokens` at positions `start_pos..` into an attention group.
    Prefill(PrefillOp),
    /// Paged decode attention for a batch of requests over their attention groups.
    DecodeAttention(DecodeOp),
    /// Consume tokens into a recurrent-state block (Mamba / KDA).
    StateUpdate(StateUpdateOp),
    /// Zero blocks (what a freed-and-reset block holds).
    ZeroBlocks {
        /// The cache group.
        group: GroupId,
        /// Blocks to zero.
        blocks: Vec<BlockId>,
    },
    /// Copy whole blocks (copy-on-write); all copies of one op run in parallel.
    CopyBlocks {
        /// The cache group.
        group: GroupId,
        /// Source and destination of each copy.
        copies: Vec<BlockCopy>,
    },
    /// A mixture-of-experts layer over `tokens` (router, top-k, expert GEMMs).
    Moe(MoeOp),
    /// Start of a measurement window (device events and host clock).
    BeginTimed {
        /// The benchmark point measured.
        point: PointId,
    },
    /// End of the window opened by `BeginTimed` with the same point.
    EndTimed {
        /// The benchmark point measured.
        point: PointId,
    },
    /// Host-side work inside a window, modelled as a busy wait of `nanos`.
    HostWork {
        /// Nanoseconds of host work.
        nanos: u64,
    },
}

/// Prefill of one request into one attention group.
///
/// `block_table[i]` holds positions `i * block_size .. (i + 1) * block_size`; an entry that is
/// the null block means "not kept" (a sliding-window position already out of the window) and
/// is skipped, as vLLM skips slot `-1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefillOp {
    /// The request.
    pub req: ReqId,
    /// The attention group.
    pub group: GroupId,
    /// Position of the first token written.
    pub start_pos: u32,
    /// Token ids written (their content tags).
    pub tokens: Vec<u32>,
    /// The request's block table in the group.
    pub block_table: Vec<BlockId>,
}

/// A decode batch.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DecodeOp {
    /// The requests of the batch.
    pub seqs: Vec<DecodeSeq>,
}

/// How many ops at the start of `ops` are prefills: the executor writes such a run
/// in one launch per group, and the cost model describes it as that launch.
pub fn prefill_run(ops: &[GpuOp]) -> usize {
    ops.iter().take_while(|op| matches!(op, GpuOp::Prefill(_))).count()
}

/// One request of a decode batch.
///
/// `tokens[p]` is the token the plan says is at position `p`, for every position in cache, the
/// current token's included (its K/V written by an earlier `Prefill`): the context length is
/// `tokens.len()`. Each attention group the request reads has one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeSeq {
    /// The request.
    pub req: ReqId,
    /// Token at each position in cache, the current one included.
    pub tokens: Vec<u32>,
    /// One table per attention group the request reads.
    pub tables: Vec<GroupTable>,
}

/// A request's block table in one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupTable {
    /// The cache group.
    pub group: GroupId,
    /// Block ids in table order (the null block for positions not kept).
    pub blocks: Vec<BlockId>,
}

/// Reads state block `src_block`, checks that it consumed exactly `history`, consumes `tokens`
/// and writes the result to `dst_block` (equal to `src_block` for an in-place update).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateUpdateOp {
    /// The request.
    pub req: ReqId,
    /// The state group.
    pub group: GroupId,
    /// Block read.
    pub src_block: BlockId,
    /// Block written.
    pub dst_block: BlockId,
    /// Tokens the read state must have consumed.
    pub history: Vec<u32>,
    /// Tokens consumed now.
    pub tokens: Vec<u32>,
}

/// One block copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockCopy {
    /// Source block.
    pub src: BlockId,
    /// Destination block.
    pub dst: BlockId,
}

/// A MoE layer over `tokens`.
///
/// With `hidden` empty the router's input is an embedding of the token id (routing depends on
/// the token ids only). Otherwise `hidden[i]` names the request (index into `seqs` of the
/// step's latest `DecodeAttention`) whose attention output feeds token `i`, or is
/// [`HIDDEN_NONE`] for a token routed on its id (a prefill token, whose own hidden state the
/// decode does not compute): the router's input
/// is that request's last-layer attention output over its first group plus a small bias shared
/// by every token ([`MOE_HIDDEN_BIAS`]), so routing depends on the K/V the attention read, as a
/// model's hidden state does; all-zero K/V collapses it onto the experts the bias picks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoeOp {
    /// Token ids routed.
    pub tokens: Vec<u32>,
    /// Experts per token.
    pub top_k: u32,
    /// Per token: the request whose attention output routes it, or `HIDDEN_NONE`.
    pub hidden: Vec<u32>,
}

/// A `MoeOp::hidden` entry for a token routed on its id.
pub const HIDDEN_NONE: u32 = u32::MAX;

/// Scale of the shared bias added to the attention output a hidden-state MoE routes on
/// (elements of the bias are in [-1, 1)). Real attention outputs over `n` positions are about
/// `0.58 / sqrt(n)` per element, well above it for the contexts kvsim plans reach; the output
/// of a decode over `n` zero positions is about `0.58 / n`, below it beyond ~1,000 positions.
pub const MOE_HIDDEN_BIAS: f32 = 5e-4;

impl DecodeSeq {
    /// Positions in cache.
    pub fn ctx_tokens(&self) -> u32 {
        self.tokens.len() as u32
    }

    /// This request's table in `group`, if it reads that group.
    pub fn table(&self, group: GroupId) -> Option<&GroupTable> {
        self.tables.iter().find(|t| t.group == group)
    }
}

impl GpuProgram {
    /// Every problem with the program; empty when it can run. Content mistakes (reading a
    /// block that does not hold what the plan says) are not problems here: they are what the
    /// run reports as violations.
    pub fn problems(&self) -> Vec<String> {
        let mut out = self.layout.problems();
        if !out.is_empty() {
            return out;
        }
        // A point may be timed in several windows (its admission and steady steps, when the
        // lowering times every window); windows never nest.
        let mut open: Option<PointId> = None;
        for (si, step) in self.steps.iter().enumerate() {
            // Requests of the step's latest decode (what a hidden-state MoE routes on).
            let mut decode_seqs: Option<usize> = None;
            for (oi, op) in step.ops.iter().enumerate() {
                let at = format!("step {si} op {oi}");
                match op {
                    GpuOp::DecodeAttention(d) => {
                        decode_seqs = Some(d.seqs.len());
                        self.op_problems(op, &at, &mut out);
                    }
                    GpuOp::Moe(m) if !m.hidden.is_empty() => {
                        if m.hidden.len() != m.tokens.len() {
                            out.push(format!(
                                "{at}: MoE names {} hidden rows for {} tokens",
                                m.hidden.len(),
                                m.tokens.len()
                            ));
                        }
                        match decode_seqs {
                            None => out.push(format!("{at}: hidden-state MoE without a decode before it in its step")),
                            Some(n) => {
                                if let Some(i) = m.hidden.iter().find(|&&i| i != HIDDEN_NONE && i as usize >= n) {
                                    out.push(format!("{at}: hidden row {i} but the decode has {n} requests"));
                                }
                            }
                        }
                        self.op_problems(op, &at, &mut out);
                    }
                    GpuOp::BeginTimed { point } => {
                        if let Some(p) = open {
                            out.push(format!("{at}: BeginTimed {point} while {p} is open"));
                        }
                        open = Some(*point);
                    }
                    GpuOp::EndTimed { point } => {
                        if open != Some(*point) {
                            out.push(format!("{at}: EndTimed {point} without its BeginTimed"));
                        }
                        open = None;
                    }
                    other => self.op_problems(other, &at, &mut out),
                }
            }
        }
        if let Some(p) = open {
            out.push(format!("point {p} is never closed"));
        }
        out
    }

    fn op_problems(&self, op: &GpuOp, at: &str, out: &mut Vec<String>) {
        match op {
            GpuOp::Prefill(p) => match self.group_of(p.group, at, out) {
                Some(g) if !g.kind.is_attention() => out.push(format!("{at}: prefill into state group {}", p.group)),
                Some(g) => {
                    if p.tokens.is_empty() {
                        out.push(format!("{at}: prefill of no tokens"));
                    }
                    let end = u64::from(p.start_pos) + p.tokens.len() as u64;
                    let need = end.div_ceil(u64::from(g.block_size_tokens));
                    if (p.block_table.len() as u64) < need {
                        out.push(format!(
                            "{at}: {} table has {} blocks, positions up to {end} need {need}",
                            p.req,
                            p.block_table.len()
                        ));
                    }
                    self.blocks_in_range(g, p.group, &p.block_table, at, out);
                }
                None => {}
            },
            GpuOp::DecodeAttention(d) => {
                if d.seqs.is_empty() {
                    out.push(format!("{at}: decode of no requests"));
                }
                for s in &d.seqs {
                    if s.tokens.is_empty() {
                        out.push(format!("{at}: {} has no context", s.req));
                    }
                    if s.tables.is_empty() {
                        out.push(format!("{at}: {} reads no group", s.req));
                    }
                    let mut groups = BTreeSet::new();
                    for t in &s.tables {
                        if !groups.insert(t.group) {
                            out.push(format!("{at}: {} has two tables for {}", s.req, t.group));
                        }
                        let Some(g) = self.group_of(t.group, at, out) else {
                            continue;
                        };
                        if !g.kind.is_attention() {
                            out.push(format!("{at}: decode attention over state group {}", t.group));
                            continue;
                        }
                        let need = g.blocks_for(s.ctx_tokens());
                        if (t.blocks.len() as u32) < need {
                            out.push(format!(
                                "{at}: {} table in {} has {} blocks, context {} needs {need}",
                                s.req,
                                t.group,
                                t.blocks.len(),
                                s.ctx_tokens()
                            ));
                        }
                        self.blocks_in_range(g, t.group, &t.blocks, at, out);
                    }
                }
            }
            GpuOp::StateUpdate(u) => match self.group_of(u.group, at, out) {
                Some(g) if g.kind.is_attention() => {
                    out.push(format!("{at}: state update in attention group {}", u.group))
                }
                Some(g) => {
                    self.blocks_in_range(g, u.group, &[u.src_block, u.dst_block], at, out);
                    if u.tokens.is_empty() {
                        out.push(format!("{at}: state update of no tokens"));
                    }
                }
                None => {}
            },
            GpuOp::ZeroBlocks { group, blocks } => {
                if let Some(g) = self.group_of(*group, at, out) {
                    self.blocks_in_range(g, *group, blocks, at, out);
                }
            }
            GpuOp::CopyBlocks { group, copies } => {
                if let Some(g) = self.group_of(*group, at, out) {
                    let srcs: Vec<BlockId> = copies.iter().map(|c| c.src).collect();
                    let dsts: Vec<BlockId> = copies.iter().map(|c| c.dst).collect();
                    self.blocks_in_range(g, *group, &srcs, at, out);
                    self.blocks_in_range(g, *group, &dsts, at, out);
                    let dst_set: BTreeSet<BlockId> = dsts.iter().copied().collect();
                    if dst_set.len() != dsts.len() {
                        out.push(format!("{at}: a block is copied into twice"));
                    }
                    if srcs.iter().any(|s| dst_set.contains(s)) {
                        out.push(format!("{at}: a copy reads a block another copy of the op writes"));
                    }
                }
            }
            GpuOp::Moe(m) => match &self.layout.moe {
                None => out.push(format!("{at}: MoE op but the layout has no MoE layer")),
                Some(moe) => {
                    if m.tokens.is_empty() {
                        out.push(format!("{at}: MoE over no tokens"));
                    }
                    if m.top_k == 0 || m.top_k > MOE_MAX_TOP_K || m.top_k > moe.experts {
                        out.push(format!(
                            "{at}: top_k {} not in 1..={}",
                            m.top_k,
                            MOE_MAX_TOP_K.min(moe.experts)
                        ));
                    }
                }
            },
            GpuOp::HostWork { .. } | GpuOp::BeginTimed { .. } | GpuOp::EndTimed { .. } => {}
        }
    }

    fn group_of(&self, id: GroupId, at: &str, out: &mut Vec<String>) -> Option<&GroupLayout> {
        let g = self.layout.group(id);
        if g.is_none() {
            out.push(format!("{at}: no group {id}"));
        }
        g
    }

    fn blocks_in_range(&self, g: &GroupLayout, id: GroupId, blocks: &[BlockId], at: &str, out: &mut Vec<String>) {
        if let Some(b) = blocks.iter().find(|b| b.0 >= g.blocks_total) {
            out.push(format!("{at}: block {b} outside {id}'s pool of {}", g.blocks_total));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::layout::{GroupKind, MoeLayout};

    fn layout() -> DeviceLayout {
        DeviceLayout {
            groups: vec![
                GroupLayout {
                    kind: GroupKind::FullAttention,
                    block_size_tokens: 16,
                    layers: 1,
                    kv_heads: 1,
                    q_heads: 4,
                    head_dim: 64,
                    blocks_total: 8,
                },
                GroupLayout {
                    kind: GroupKind::MAMBA_STATE,
                    block_size_tokens: 16,
                    layers: 1,
                    kv_heads: 2,
                    q_heads: 2,
                    head_dim: 16,
                    blocks_total: 4,
                },
            ],
            moe: Some(MoeLayout {
                hidden: 256,
                ffn: 256,
                experts: 4,
            }),
        }
    }

    fn prefill(tokens: u32, table: &[u32]) -> GpuOp {
        GpuOp::Prefill(PrefillOp {
            req: ReqId(0),
            group: GroupId(0),
            start_pos: 0,
            tokens: (0..tokens).collect(),
            block_table: table.iter().map(|&b| BlockId(b)).collect(),
        })
    }

    #[test]
    fn valid_program_has_no_problems() {
        let p = GpuProgram {
            layout: layout(),
            steps: vec![GpuStep {
                ops: vec![
                    GpuOp::BeginTimed { point: PointId(0) },
                    prefill(20, &[1, 2]),
                    GpuOp::DecodeAttention(DecodeOp {
                        seqs: vec![DecodeSeq {
                            req: ReqId(0),
                            tokens: (0..20).collect(),
                            tables: vec![GroupTable {
                                group: GroupId(0),
                                blocks: vec![BlockId(1), BlockId(2)],
                            }],
                        }],
                    }),
                    GpuOp::EndTimed { point: PointId(0) },
                    GpuOp::Moe(MoeOp {
                        tokens: vec![1, 2, 3],
                        top_k: 2,
                        hidden: vec![],
                    }),
                    GpuOp::Moe(MoeOp {
                        tokens: vec![1],
                        top_k: 2,
                        hidden: vec![0],
                    }),
                ],
            }],
        };
        assert_eq!(p.problems(), Vec::<String>::new());
    }

    #[test]
    fn problems_are_all_reported() {
        let p = GpuProgram {
            layout: layout(),
            steps: vec![GpuStep {
                ops: vec![
                    prefill(20, &[1]),                     // table too short
                    prefill(4, &[9]),                      // block outside the pool
                    GpuOp::EndTimed { point: PointId(1) }, // unbalanced
                    GpuOp::CopyBlocks {
                        group: GroupId(0),
                        copies: vec![
                            BlockCopy {
                                src: BlockId(1),
                                dst: BlockId(2),
                            },
                            BlockCopy {
                                src: BlockId(2),
                                dst: BlockId(3),
                            },
                        ],
                    },
                    GpuOp::Moe(MoeOp {
                        tokens: vec![1],
                        top_k: 9,
                        hidden: vec![],
                    }),
                    // hidden rows without a decode before them in the step
                    GpuOp::Moe(MoeOp {
                        tokens: vec![1],
                        top_k: 1,
                        hidden: vec![0],
                    }),
                    GpuOp::StateUpdate(StateUpdateOp {
                        req: ReqId(0),
                        group: GroupId(0),
                        src_block: BlockId(1),
                        dst_block: BlockId(1),
                        history: vec![],
                        tokens: vec![1],
                    }),
                ],
            }],
        };
        let problems = p.problems();
        assert_eq!(problems.len(), 7, "{problems:#?}");
        assert!(problems[0].starts_with("step 0 op 0"));
    }
}
