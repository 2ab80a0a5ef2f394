//! What each plan op becomes on the device: prefills, state updates, MoE passes and decodes
//! for a forward, zeroes and copies for shadow tails, with the bookkeeping that keeps one pool
//! per device group consistent with vLLM's one shared pool.

use std::collections::{BTreeMap, BTreeSet};

use super::{LowerOptions, MoeInput, OpRef, SyntheticKv};
use crate::device::content::ZERO_TOKEN;
use crate::device::ids::{BlockId, GroupId, PointId, ReqId};
use crate::device::layout::{DeviceLayout, MOE_MAX_TOP_K};
use crate::device::program::{BlockCopy, DecodeOp, DecodeSeq, GpuOp, GroupTable, MoeOp, PrefillOp, StateUpdateOp};
use crate::engine::Engine;
use crate::plan::{GroupKindName, Plan, PlanOp, TailMode};

/// Token ids on the device are `u32`; plans keep them below `vocab_size`. None maps to
/// [`ZERO_TOKEN`] (the marker of a zero position).
fn tok32(t: u64) -> u32 {
    let t = u32::try_from(t).unwrap_or((t ^ (t >> 32)) as u32);
    if t == ZERO_TOKEN {
        ZERO_TOKEN - 2
    } else {
        t
    }
}

/// One forward entry as the engine saw it before the op.
pub(super) struct EntryIn {
    req: ReqId,
    computed: u64,
    end: u64,
    /// Token at every known position (landed outputs and outputs still in flight included).
    tokens: Vec<u32>,
    tables: Vec<Vec<u32>>,
}

pub(super) struct Lowerer<'a> {
    pub(super) plan: &'a Plan,
    pub(super) opts: LowerOptions,
    /// `SyntheticKv::Zero`: per request, positions `0..n` hold zeros (synthetic KV).
    pub(super) zero_prefix: BTreeMap<ReqId, u64>,
    pub(super) layout: DeviceLayout,
    pub(super) ng: usize,
    pub(super) req_ids: BTreeMap<(u32, u32), ReqId>,
    pub(super) requests: Vec<(u32, String)>,
    /// Per rank, per block id: the plan group whose pool holds the block's current content.
    pub(super) owner: Vec<Vec<Option<u32>>>,
    /// The window open on the device: point, rank, program step it opened in.
    pub(super) open: Option<(u64, u32, usize)>,
    pub(super) measured: BTreeSet<u64>,
    pub(super) notes: Vec<String>,
    pub(super) ops: Vec<GpuOp>,
    pub(super) origins: Vec<OpRef>,
    pub(super) at: OpRef,
}

impl Lowerer<'_> {
    fn emit(&mut self, op: GpuOp) {
        self.ops.push(op);
        self.origins.push(self.at);
    }

    fn dev_group(&self, rank: u32, g: usize) -> GroupId {
        GroupId(rank * self.ng as u32 + g as u32)
    }

    fn req_id(&mut self, rank: u32, e: &Engine, name: &str) -> Option<ReqId> {
        let r = e.requests.get(name)?;
        let key = (rank, r.req.id);
        if let Some(id) = self.req_ids.get(&key) {
            return Some(*id);
        }
        let id = ReqId(self.requests.len() as u32);
        self.requests.push((rank, name.to_string()));
        self.req_ids.insert(key, id);
        Some(id)
    }

    /// Block `b` of `rank` is about to hold content of plan group `g`: clears the copy another
    /// group's pool holds (the block ids are shared across groups, as in vLLM's one pool).
    fn take_block(&mut self, rank: u32, g: usize, b: u32) {
        if b == 0 {
            return;
        }
        let prev = self.owner[rank as usize][b as usize];
        if let Some(h) = prev {
            if h as usize != g {
                let group = self.dev_group(rank, h as usize);
                self.emit(GpuOp::ZeroBlocks {
                    group,
                    blocks: vec![BlockId(b)],
                });
            }
        }
        self.owner[rank as usize][b as usize] = Some(g as u32);
    }

    pub(super) fn capture_forward(&mut self, rank: u32, e: &Engine, batch: &[crate::plan::BatchEntry]) -> Vec<EntryIn> {
        let mut out = Vec::new();
        for entry in batch {
            let Some(r) = e.requests.get(&entry.req) else { continue };
            let Some(id) = self.req_id(rank, e, &entry.req) else {
                continue;
            };
            let mut tokens: Vec<u32> = r.req.tokens.iter().map(|&t| tok32(t)).collect();
            for p in e.pending_outputs.iter().filter(|p| p.req == entry.req) {
                tokens.extend(p.tokens.iter().map(|&t| tok32(t)));
            }
            let computed = r.req.num_computed_tokens;
            // What the engine computes: the plan's count, cut after a poached hit.
            let end = computed + e.forward_tokens(entry);
            if end == computed && entry.tokens > 0 {
                self.notes.push(format!(
                    "step {} rank {rank}: {}'s {} planned tokens are all in its poached prefix hit: it computes nothing here \
                     (vLLM would have ended its prefill a step earlier)",
                    self.at.step, entry.req, entry.tokens
                ));
            }
            if (tokens.len() as u64) < end {
                self.notes.push(format!(
                    "step {} rank {rank}: {} computes positions up to {end} but only {} tokens are known; the rest use token {}",
                    self.at.step,
                    entry.req,
                    tokens.len(),
                    u32::MAX - 1
                ));
                tokens.resize(end as usize, u32::MAX - 1);
            }
            out.push(EntryIn {
                req: id,
                computed,
                end,
                tokens,
                tables: e.kv.get_block_ids(r.req.id),
            });
        }
        out
    }

    fn lower_forward(&mut self, rank: u32, entries: &[EntryIn]) {
        let plan: &Plan = self.plan;
        let s = &plan.scenario;
        let caching = s.scheduler.enable_caching;
        let mut moe_tokens = Vec::new();
        // Per MoE token, the index of its request in `seqs` (hidden-state routing).
        let mut moe_rows: Vec<Option<u32>> = Vec::new();
        let mut seqs = Vec::new();
        for en in entries.iter().filter(|en| en.end > en.computed) {
            let (c, end) = (en.computed, en.end);
            // Positions 0..z hold zeros (synthetic KV as zeros); the state restarted after them.
            let z = self.zero_prefix.get(&en.req).copied().unwrap_or(0).min(c);
            moe_tokens.extend_from_slice(&en.tokens[c as usize..end as usize]);
            let mut tables = Vec::new();
            for (g, grp) in s.model.groups.iter().enumerate() {
                let dg = self.dev_group(rank, g);
                let table = en.tables.get(g).cloned().unwrap_or_default();
                let bs = grp.block_size.max(1);
                if grp.kind == GroupKindName::Mamba {
                    // State index as Engine::forward: align mode (caching) keeps one state per
                    // block of tokens, none mode one state in block 0 of the table.
                    let idx = |n: u64| {
                        if caching {
                            (n.div_ceil(bs) as usize).saturating_sub(1)
                        } else {
                            0
                        }
                    };
                    let block_at = |i: usize| table.get(i).copied().unwrap_or(0);
                    let dst = block_at(idx(end));
                    let src = if c == 0 { dst } else { block_at(idx(c)) };
                    self.take_block(rank, g, dst);
                    if c == 0 {
                        self.emit(GpuOp::ZeroBlocks {
                            group: dg,
                            blocks: vec![BlockId(dst)],
                        });
                    }
                    self.emit(GpuOp::StateUpdate(StateUpdateOp {
                        req: en.req,
                        group: dg,
                        src_block: BlockId(src),
                        dst_block: BlockId(dst),
                        history: en.tokens[z as usize..c as usize].to_vec(),
                        tokens: en.tokens[c as usize..end as usize].to_vec(),
                    }));
                    continue;
                }
                for i in (c / bs) as usize..=((end - 1) / bs) as usize {
                    if let Some(&b) = table.get(i) {
                        self.take_block(rank, g, b);
                    }
                }
                self.emit(GpuOp::Prefill(PrefillOp {
                    req: en.req,
                    group: dg,
                    start_pos: c as u32,
                    tokens: en.tokens[c as usize..end as usize].to_vec(),
                    block_table: table.iter().map(|&b| BlockId(b)).collect(),
                }));
                tables.push(GroupTable {
                    group: dg,
                    blocks: table.iter().map(|&b| BlockId(b)).collect(),
                });
            }
            // A decode token routes on its request's attention output; prefill tokens (whose
            // own hidden states the decode does not compute) on their ids.
            let row = match (tables.is_empty(), end - c) {
                (true, _) => None,
                (false, 1) => Some(seqs.len() as u32),
                (false, _) => Some(crate::device::program::HIDDEN_NONE),
            };
            moe_rows.extend(std::iter::repeat_n(row, (end - c) as usize));
            if !tables.is_empty() {
                let mut tokens = en.tokens[..=c as usize].to_vec();
                tokens[..z as usize].fill(ZERO_TOKEN);
                seqs.push(DecodeSeq {
                    req: en.req,
                    tokens,
                    tables,
                });
            }
        }
        let moe = self.layout.moe.filter(|_| !moe_tokens.is_empty()).map(|moe| {
            let top_k = s.model.top_k.min(MOE_MAX_TOP_K).min(moe.experts);
            let hidden: Option<Vec<u32>> = match self.opts.moe_input {
                MoeInput::Token => None,
                MoeInput::Hidden => moe_rows.iter().copied().collect(),
            };
            MoeOp {
                tokens: moe_tokens,
                top_k,
                hidden: hidden.unwrap_or_default(),
            }
        });
        // Token routing runs before the attention (as issue 7 lowered it); hidden-state routing
        // needs the attention output first.
        let moe_first = moe.as_ref().is_some_and(|m| m.hidden.is_empty());
        if moe_first {
            self.emit(GpuOp::Moe(moe.clone().expect("checked")));
        }
        if !seqs.is_empty() {
            self.emit(GpuOp::DecodeAttention(DecodeOp { seqs }));
        }
        if let Some(m) = moe.filter(|_| !moe_first) {
            self.emit(GpuOp::Moe(m));
        }
    }

    /// Synthetic KV as zeros: zeroes the blocks holding positions `c..end` of every attention
    /// group (null entries skipped) and the state block after `end` tokens; computes nothing.
    fn lower_fake_zero(&mut self, rank: u32, entries: &[EntryIn]) {
        let s = &self.plan.scenario;
        let caching = s.scheduler.enable_caching;
        let groups = s.model.groups.clone();
        for en in entries.iter().filter(|en| en.end > en.computed) {
            let (c, end) = (en.computed, en.end);
            for (g, grp) in groups.iter().enumerate() {
                let table = en.tables.get(g).cloned().unwrap_or_default();
                let bs = grp.block_size.max(1);
                let blocks: Vec<u32> = if grp.kind == GroupKindName::Mamba {
                    let idx = if caching {
                        (end.div_ceil(bs) as usize).saturating_sub(1)
                    } else {
                        0
                    };
                    table.get(idx).copied().into_iter().filter(|&b| b != 0).collect()
                } else {
                    (c / bs..=(end - 1) / bs)
                        .filter_map(|i| table.get(i as usize).copied())
                        .filter(|&b| b != 0)
                        .collect()
                };
                self.zero(rank, g, &blocks);
            }
            let prev = self.zero_prefix.get(&en.req).copied().unwrap_or(0);
            if prev == c {
                self.zero_prefix.insert(en.req, end);
            } else {
                self.notes.push(format!(
                    "step {} rank {rank}: synthetic KV of positions {c}..{end} after computed ones; \
                     only positions 0..{prev} are expected to hold zeros",
                    self.at.step
                ));
            }
        }
    }

    fn zero(&mut self, rank: u32, g: usize, blocks: &[u32]) {
        let mut own = Vec::new();
        for &b in blocks {
            let prev = self.owner[rank as usize].get(b as usize).copied().flatten();
            if let Some(h) = prev.filter(|&h| h as usize != g) {
                let group = self.dev_group(rank, h as usize);
                self.emit(GpuOp::ZeroBlocks {
                    group,
                    blocks: vec![BlockId(b)],
                });
            }
            if let Some(o) = self.owner[rank as usize].get_mut(b as usize) {
                *o = Some(g as u32);
            }
            own.push(BlockId(b));
        }
        if !own.is_empty() {
            let group = self.dev_group(rank, g);
            self.emit(GpuOp::ZeroBlocks { group, blocks: own });
        }
    }

    fn copy(&mut self, rank: u32, g: usize, src: u32, dst: u32) {
        if src == dst {
            return;
        }
        let src_group = self.owner[rank as usize][src as usize].map_or(g, |h| h as usize);
        self.take_block(rank, src_group, dst);
        let group = self.dev_group(rank, src_group);
        self.emit(GpuOp::CopyBlocks {
            group,
            copies: vec![BlockCopy {
                src: BlockId(src),
                dst: BlockId(dst),
            }],
        });
    }
}

impl<'a> Lowerer<'a> {
    pub(super) fn new(plan: &'a Plan, opts: &LowerOptions, layout: DeviceLayout, notes: Vec<String>) -> Self {
        let s = &plan.scenario;
        Lowerer {
            plan,
            opts: opts.clone(),
            zero_prefix: BTreeMap::new(),
            layout,
            ng: s.model.groups.len(),
            req_ids: BTreeMap::new(),
            requests: Vec::new(),
            owner: vec![vec![None; s.pool_blocks as usize]; s.dp_ranks as usize],
            open: None,
            measured: BTreeSet::new(),
            notes,
            ops: Vec::new(),
            origins: Vec::new(),
            at: OpRef {
                step: 0,
                rank: 0,
                op_index: 0,
            },
        }
    }

    /// The device work of plan op `op` of `rank`, applied on the engine: `entries` are its
    /// forward entries as the engine saw them before, `program_step` the program step being
    /// built, `host_ns` what the op took on the host clock.
    pub(super) fn lower_op(&mut self, rank: u32, op: &PlanOp, entries: &[EntryIn], program_step: usize, host_ns: u64) {
        let step = self.at.step;
        match op {
            PlanOp::FakeCompute { .. } if self.opts.synthetic_kv == SyntheticKv::Zero => {
                self.lower_fake_zero(rank, entries)
            }
            PlanOp::Forward { .. } | PlanOp::FakeCompute { .. } => self.lower_forward(rank, entries),
            PlanOp::RegisterShadow { tail, groups, .. } => {
                let ng = self.ng;
                for (g, grp) in groups.iter().enumerate().filter(|(g, _)| *g < ng) {
                    let mut zero = Vec::new();
                    for (k, &b) in grp.tail.iter().enumerate() {
                        match (k, tail, grp.cow_from) {
                            (0, TailMode::Cow, Some(src)) => self.copy(rank, g, src, b),
                            // Dynamo 1.6.1 forks every tail block (`cow_more`).
                            (k, TailMode::Cow, _) if k >= 1 && k <= grp.cow_more.len() => {
                                self.copy(rank, g, grp.cow_more[k - 1], b)
                            }
                            _ => zero.push(b),
                        }
                    }
                    self.zero(rank, g, &zero);
                }
            }
            PlanOp::ZeroBlocks { group, blocks } => self.zero(rank, *group as usize, blocks),
            PlanOp::CopyBlock { group, src, dst } => self.copy(rank, *group as usize, *src, *dst),
            PlanOp::BeginTimed { point } => {
                if self.open.is_none() && (self.opts.every_window || !self.measured.contains(point)) {
                    self.open = Some((*point, rank, program_step));
                    self.emit(GpuOp::BeginTimed {
                        point: PointId(*point as u32),
                    });
                } else {
                    self.notes.push(format!(
                        "step {step} rank {rank}: window of point {point} not timed on the device (another window is open or the point was timed)"
                    ));
                }
            }
            PlanOp::EndTimed { point } => {
                if self.open.is_some_and(|(p, r, _)| (p, r) == (*point, rank)) {
                    self.open = None;
                    self.measured.insert(*point);
                    self.emit(GpuOp::EndTimed {
                        point: PointId(*point as u32),
                    });
                }
            }
            _ => {
                if self.open.is_some_and(|(_, r, _)| r == rank) {
                    self.emit(GpuOp::HostWork { nanos: host_ns });
                }
            }
        }
    }
}
