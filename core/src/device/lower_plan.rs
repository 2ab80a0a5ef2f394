//! Lowering a plan (`crate::plan::Plan`) into a [`GpuProgram`].
//!
//! The plan runs through the simulator's per-rank [`Engine`] in lock-step, op by op, exactly as
//! the simulator executor runs it (faults included), so the GPU replays the block tables the
//! model chose; the device then checks content physically. The engine's own content checks are
//! not consulted for the program: a plan the simulator flags still lowers completely (its
//! findings are kept in [`LoweredPlan::sim_violations`]), and only a plan/model mismatch stops
//! the lowering (the program then ends at the step before).
//!
//! What each plan op becomes (one [`GpuStep`] per plan step, every rank's ops in rank order;
//! rank `r`'s group `g` is device group `r * groups + g`, each with its own pool of
//! `pool_blocks` blocks):
//!
//! * `forward`: for every batch entry with `c` computed tokens and `n` new ones, a `Prefill` of
//!   positions `c..c+n` into every attention group (the request's table, nulls skipped) and a
//!   `StateUpdate` of every Mamba group (source = the state block after `c` tokens, checked
//!   against the digest of the first `c` tokens; `c = 0` zeroes the destination first); then a
//!   `Moe` over the batch's new tokens when the model has experts; then one `DecodeAttention`
//!   over the batch whose query is position `c` (context `c + 1`), so that every request reads
//!   exactly what `Engine::forward` checks: full and MLA all positions before `c`, sliding
//!   window the last `window - 1`, chunked-local the current chunk (plus position `c`, just
//!   written). As in vLLM, a forward writes every request's new K/V before any attention reads.
//! * `register_shadow`: tail blocks are zeroed, or `tail[0]` is copied from `cow_from`
//!   (and `tail[k]` from `cow_more[k - 1]`, as Dynamo 1.6.1 forks).
//! * `zero_blocks` / `copy_block`: `ZeroBlocks` / `CopyBlocks`.
//! * `begin_timed` / `end_timed`: timing marks (one window at a time on the device: a window
//!   another rank opens for a point already being timed is not timed again).
//! * host-only ops (`schedule`, `cache_blocks`, `finish`, ...) inside an open window: a
//!   `HostWork` as long as the engine took to apply the op, on the caller's [`HostClock`] (the
//!   GPU side passes a wall clock: the simulator's bookkeeping time stands in for the host's;
//!   [`lower_plan`] passes none, so its programs are a function of the plan alone).
//!
//! vLLM's groups share one block pool: a block id holds one group's content at a time. The
//! device keeps one pool per group, so when a block is written in one group after another group
//! last wrote it, the lowering zeroes the stale copy in the other group's pool first, and plan
//! `zero_blocks` also clears the copy of the group that last wrote the block (the simulator's
//! content map is per block id).

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::Engine;
use crate::plan::{GroupKindName, Plan, PlanOp, TailMode};

use crate::device::content::ZERO_TOKEN;
use crate::device::ids::{BlockId, GroupId, PointId, ReqId};
use crate::device::layout::{
    DeviceLayout, GroupKind, GroupLayout, MoeLayout, MLA_MAX_LATENT_DIM, MMA_MAX_HEAD_DIM, MOE_MAX_TOP_K,
};
use crate::device::program::{
    BlockCopy, DecodeOp, DecodeSeq, GpuOp, GpuProgram, GpuStep, GroupTable, MoeOp, PrefillOp, StateUpdateOp,
};

/// What synthetic ("fake") KV (`fake_compute`) holds on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum SyntheticKv {
    /// As if prefilled from the request's own tokens (K/V writes, state updates, a MoE pass):
    /// indistinguishable from real KV, so plans with capacity fallbacks verify.
    #[default]
    Tokens,
    /// Zeros, as a benchmark's synthetic injection leaves them: the blocks of the synthetic
    /// positions (and the state block) are zeroed and nothing is computed; decodes then read
    /// zero rows, and the verifier expects exactly that ([`crate::device::content::ZERO_TOKEN`]).
    Zero,
}

/// What a forward's MoE layer routes on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum MoeInput {
    /// An embedding of each new token's id: routing ignores the K/V content.
    #[default]
    Token,
    /// The request's attention output (the forward's decode runs first), plus a small shared
    /// bias ([`crate::device::program::MOE_HIDDEN_BIAS`]): routing follows the K/V the attention read,
    /// as a model's hidden state does, and collapses onto a few experts on all-zero K/V.
    Hidden,
}

/// Device shapes a scenario does not fix, and how synthetic content and MoE routing behave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LowerOptions {
    /// Query heads per KV head of attention groups (GQA group size).
    pub q_per_kv: u32,
    /// Query heads of MLA groups.
    pub mla_q_heads: u32,
    /// MoE hidden size and expert FFN size (multiples of 256).
    pub moe_hidden: u32,
    pub moe_ffn: u32,
    pub synthetic_kv: SyntheticKv,
    pub moe_input: MoeInput,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            q_per_kv: 4,
            mla_q_heads: 16,
            moe_hidden: 1024,
            moe_ffn: 512,
            synthetic_kv: SyntheticKv::Tokens,
            moe_input: MoeInput::Token,
        }
    }
}

/// Where a lowered op came from: plan step, rank and op index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OpRef {
    pub step: u64,
    pub rank: u32,
    pub op_index: usize,
}

/// A violation the simulator's engine reported while the plan was lowered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimFinding {
    pub at: OpRef,
    pub invariant: String,
    pub detail: String,
}

/// A plan lowered for the device, with what maps results back to the plan.
#[derive(Clone, Debug)]
pub struct LoweredPlan {
    pub program: GpuProgram,
    /// Plan step number of each program step.
    pub steps: Vec<u64>,
    /// Per program step, per op: the plan op it came from.
    pub origins: Vec<Vec<OpRef>>,
    /// Per [`ReqId`]: rank and request name.
    pub requests: Vec<(u32, String)>,
    /// Cache groups per rank in the plan.
    pub groups_per_rank: usize,
    /// The plan disagrees with the model here; the program stops before this step.
    pub mismatch: Option<(OpRef, String)>,
    /// Planner-invariant violations the engine reported on the way (not a stop).
    pub sim_violations: Vec<SimFinding>,
    /// Choices the lowering made that a reader of the results should know.
    pub notes: Vec<String>,
}

impl LoweredPlan {
    /// Rank and plan group of a device group.
    pub fn plan_group(&self, g: GroupId) -> (u32, u32) {
        let n = self.groups_per_rank.max(1) as u32;
        (g.0 / n, g.0 % n)
    }

    /// Rank and name of a request.
    pub fn request(&self, r: ReqId) -> (u32, &str) {
        self.requests
            .get(r.0 as usize)
            .map_or((0, "?"), |(rank, name)| (*rank, name.as_str()))
    }

    /// K/V bytes the decode ops of each program step read (attended positions x bytes per
    /// position, every layer, K and V; the MLA latent once).
    pub fn decode_kv_bytes_per_step(&self) -> Vec<u64> {
        decode_kv_bytes_per_step(&self.program)
    }
}

/// Per step of `program`: true when it decodes and every `Prefill` in it writes one token
/// (a decode-only step: its device time is mostly attention reads).
pub fn decode_only_steps(program: &GpuProgram) -> Vec<bool> {
    program
        .steps
        .iter()
        .map(|s| {
            s.ops.iter().any(|op| matches!(op, GpuOp::DecodeAttention(_)))
                && s.ops.iter().all(|op| match op {
                    GpuOp::Prefill(p) => p.tokens.len() == 1,
                    _ => true,
                })
        })
        .collect()
}

/// K/V bytes the decode ops of each step of `program` read.
pub fn decode_kv_bytes_per_step(program: &GpuProgram) -> Vec<u64> {
    program
        .steps
        .iter()
        .map(|s| {
            s.ops
                .iter()
                .map(|op| match op {
                    GpuOp::DecodeAttention(d) => d
                        .seqs
                        .iter()
                        .flat_map(|s| s.tables.iter().map(move |t| (s, t)))
                        .filter_map(|(s, t)| {
                            let g = program.layout.group(t.group)?;
                            let r = g.kind.attend_range(s.ctx_tokens());
                            Some(u64::from(r.end - r.start) * g.kv_bytes_per_position())
                        })
                        .sum::<u64>(),
                    _ => 0,
                })
                .sum()
        })
        .collect()
}

/// Why a plan cannot be lowered at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LowerError {
    /// A scenario shape the device kernels do not take.
    #[error("unsupported scenario for the GPU backend: {0}")]
    Unsupported(String),
    /// The scenario's engines cannot be built.
    #[error("plan mismatch: {0}")]
    Engine(String),
}

fn round_up(x: u32, m: u32) -> u32 {
    x.div_ceil(m) * m
}

/// The device layout for a plan's scenario: one group per (rank, plan group).
pub fn device_layout(plan: &Plan, opts: &LowerOptions) -> Result<(DeviceLayout, Vec<String>), LowerError> {
    let s = &plan.scenario;
    let mut notes = Vec::new();
    let mut groups = Vec::new();
    for rank in 0..s.dp_ranks {
        for (i, g) in s.model.groups.iter().enumerate() {
            let bs = u32::try_from(g.block_size)
                .map_err(|_| LowerError::Unsupported(format!("group {i}: block size {}", g.block_size)))?;
            let kind = match g.kind {
                GroupKindName::FullAttention => GroupKind::Full,
                GroupKindName::Mla => GroupKind::Mla,
                GroupKindName::SlidingWindow => GroupKind::SlidingWindow {
                    window_tokens: g.sliding_window.unwrap_or(0).min(u64::from(u32::MAX)) as u32,
                },
                GroupKindName::ChunkedLocal => GroupKind::ChunkedLocal {
                    chunk_tokens: g.attention_chunk_size.unwrap_or(0).min(u64::from(u32::MAX)) as u32,
                },
                GroupKindName::Mamba => GroupKind::MambaState,
            };
            let (kv_heads, q_heads, head_dim) = match kind {
                GroupKind::Mla => {
                    let d = round_up(g.head_dim.max(8), 8);
                    if d > MLA_MAX_LATENT_DIM {
                        return Err(LowerError::Unsupported(format!(
                            "group {i}: MLA latent dim {} > {MLA_MAX_LATENT_DIM}",
                            g.head_dim
                        )));
                    }
                    (1, opts.mla_q_heads, d)
                }
                GroupKind::MambaState => (g.kv_heads, g.kv_heads, round_up(g.head_dim.max(4), 4)),
                _ => {
                    let d = round_up(g.head_dim.max(4), 4);
                    if d > MMA_MAX_HEAD_DIM {
                        return Err(LowerError::Unsupported(format!(
                            "group {i}: head dim {} > {MMA_MAX_HEAD_DIM}",
                            g.head_dim
                        )));
                    }
                    (g.kv_heads, g.kv_heads * opts.q_per_kv, d)
                }
            };
            if rank == 0 && head_dim != g.head_dim {
                notes.push(format!(
                    "group {i}: device head dim {head_dim} for the plan's {} (rows carry a 4-dim tag)",
                    g.head_dim
                ));
            }
            if rank == 0 && kind == GroupKind::Mla && g.kv_heads != 1 {
                notes.push(format!("group {i}: MLA has one latent head (plan says {})", g.kv_heads));
            }
            groups.push(GroupLayout {
                kind,
                block_size_tokens: bs,
                layers: g.layers,
                kv_heads,
                q_heads,
                head_dim,
                blocks_total: s.pool_blocks,
            });
        }
    }
    let moe = (s.model.experts > 0 && s.model.top_k > 0).then_some(MoeLayout {
        hidden: opts.moe_hidden,
        ffn: opts.moe_ffn,
        experts: s.model.experts,
    });
    let layout = DeviceLayout { groups, moe };
    let problems = layout.problems();
    if !problems.is_empty() {
        return Err(LowerError::Unsupported(problems.join("; ")));
    }
    Ok((layout, notes))
}

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

/// The simulator executor's fault injection (`Engine::apply_fault`), so that the engines here
/// see the same state.
fn apply_faults(plan: &Plan, step: u64, e: &mut Engine) {
    for f in &plan.faults {
        let _ = e.apply_fault(f, step);
    }
}

/// One forward entry as the engine saw it before the op.
struct EntryIn {
    req: ReqId,
    computed: u64,
    end: u64,
    /// Token at every known position (landed outputs and outputs still in flight included).
    tokens: Vec<u32>,
    tables: Vec<Vec<u32>>,
}

struct Lowerer<'a> {
    plan: &'a Plan,
    opts: LowerOptions,
    /// `SyntheticKv::Zero`: per request, positions `0..n` hold zeros (synthetic KV).
    zero_prefix: BTreeMap<ReqId, u64>,
    layout: DeviceLayout,
    ng: usize,
    req_ids: BTreeMap<(u32, u32), ReqId>,
    requests: Vec<(u32, String)>,
    /// Per rank, per block id: the plan group whose pool holds the block's current content.
    owner: Vec<Vec<Option<u32>>>,
    /// The window open on the device: point, rank, program step it opened in.
    open: Option<(u64, u32, usize)>,
    measured: BTreeSet<u64>,
    notes: Vec<String>,
    ops: Vec<GpuOp>,
    origins: Vec<OpRef>,
    at: OpRef,
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

    fn capture_forward(&mut self, rank: u32, e: &Engine, batch: &[crate::plan::BatchEntry]) -> Vec<EntryIn> {
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
            let end = computed + entry.tokens;
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

/// Measures the host work of plan ops for `HostWork`. The lowering itself reads no clock.
pub trait HostClock {
    fn start(&mut self);
    /// Nanoseconds since the last `start`.
    fn elapsed_ns(&mut self) -> u64;
}

/// No clock: every `HostWork` lasts 0 ns.
pub struct NoClock;

impl HostClock for NoClock {
    fn start(&mut self) {}
    fn elapsed_ns(&mut self) -> u64 {
        0
    }
}

/// Lowers `plan` (already validated by `load_plan`) for the device, with no host clock.
pub fn lower_plan(plan: &Plan, opts: &LowerOptions) -> Result<LoweredPlan, LowerError> {
    lower_plan_timed(plan, opts, &mut NoClock)
}

/// Lowers `plan`, timing each host-only op inside a window on `clock`.
pub fn lower_plan_timed(
    plan: &Plan,
    opts: &LowerOptions,
    clock: &mut dyn HostClock,
) -> Result<LoweredPlan, LowerError> {
    let s = &plan.scenario;
    let (layout, notes) = device_layout(plan, opts)?;
    let mut engines: Vec<Engine> = (0..s.dp_ranks)
        .map(|r| Engine::new(s, r))
        .collect::<Result<_, _>>()
        .map_err(|m| LowerError::Engine(m.0))?;
    let ng = s.model.groups.len();
    let mut lw = Lowerer {
        plan,
        opts: opts.clone(),
        zero_prefix: BTreeMap::new(),
        layout: layout.clone(),
        ng,
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
    };
    let mut by_step: BTreeMap<u64, BTreeMap<u32, &Vec<PlanOp>>> = BTreeMap::new();
    for st in &plan.steps {
        by_step.entry(st.step).or_default().insert(st.rank, &st.ops);
    }
    let mut program = GpuProgram {
        layout,
        steps: Vec::new(),
    };
    let (mut steps, mut origins) = (Vec::new(), Vec::new());
    let mut mismatch = None;
    let mut sim_violations = Vec::new();
    'steps: for (&step, ranks) in &by_step {
        for rank in 0..s.dp_ranks {
            let e = &mut engines[rank as usize];
            e.begin_step();
            apply_faults(plan, step, e);
            let Some(ops) = ranks.get(&rank) else { continue };
            for (i, op) in ops.iter().enumerate() {
                lw.at = OpRef {
                    step,
                    rank,
                    op_index: i,
                };
                let entries = match op {
                    PlanOp::Forward { batch } => lw.capture_forward(rank, e, batch),
                    // DECISION: by default synthetic ("fake") KV is materialised on the device as
                    // if prefilled from the request's own tokens, so replays of plans with
                    // capacity fallbacks verify; `SyntheticKv::Zero` zeroes it instead (issue 8's
                    // content-sensitivity experiment, docs/timing.md).
                    PlanOp::FakeCompute { req, tokens } => lw.capture_forward(
                        rank,
                        e,
                        &[crate::plan::BatchEntry {
                            req: req.clone(),
                            tokens: *tokens,
                            output: Vec::new(),
                        }],
                    ),
                    _ => Vec::new(),
                };
                clock.start();
                let applied = e.apply(op);
                let host_ns = clock.elapsed_ns();
                match applied {
                    Err(m) => {
                        mismatch = Some((lw.at, m.0));
                        lw.ops.clear();
                        lw.origins.clear();
                        if lw.open.is_some_and(|(_, _, at)| at == steps.len()) {
                            lw.open = None;
                        }
                        break 'steps;
                    }
                    Ok(out) => sim_violations.extend(out.violations.into_iter().map(|v| SimFinding {
                        at: lw.at,
                        invariant: v.id.to_string(),
                        detail: v.detail,
                    })),
                }
                match op {
                    PlanOp::FakeCompute { .. } if opts.synthetic_kv == SyntheticKv::Zero => {
                        lw.lower_fake_zero(rank, &entries)
                    }
                    PlanOp::Forward { .. } | PlanOp::FakeCompute { .. } => lw.lower_forward(rank, &entries),
                    PlanOp::RegisterShadow { tail, groups, .. } => {
                        for (g, grp) in groups.iter().enumerate().filter(|(g, _)| *g < ng) {
                            let mut zero = Vec::new();
                            for (k, &b) in grp.tail.iter().enumerate() {
                                match (k, tail, grp.cow_from) {
                                    (0, TailMode::Cow, Some(src)) => lw.copy(rank, g, src, b),
                                    // Dynamo 1.6.1 forks every tail block (`cow_more`).
                                    (k, TailMode::Cow, _) if k >= 1 && k <= grp.cow_more.len() => {
                                        lw.copy(rank, g, grp.cow_more[k - 1], b)
                                    }
                                    _ => zero.push(b),
                                }
                            }
                            lw.zero(rank, g, &zero);
                        }
                    }
                    PlanOp::ZeroBlocks { group, blocks } => lw.zero(rank, *group as usize, blocks),
                    PlanOp::CopyBlock { group, src, dst } => lw.copy(rank, *group as usize, *src, *dst),
                    PlanOp::BeginTimed { point } => {
                        if lw.open.is_none() && !lw.measured.contains(point) {
                            lw.open = Some((*point, rank, steps.len()));
                            lw.emit(GpuOp::BeginTimed {
                                point: PointId(*point as u32),
                            });
                        } else {
                            lw.notes.push(format!(
                                "step {step} rank {rank}: window of point {point} not timed on the device (another window is open or the point was timed)"
                            ));
                        }
                    }
                    PlanOp::EndTimed { point } => {
                        if lw.open.is_some_and(|(p, r, _)| (p, r) == (*point, rank)) {
                            lw.open = None;
                            lw.measured.insert(*point);
                            lw.emit(GpuOp::EndTimed {
                                point: PointId(*point as u32),
                            });
                        }
                    }
                    _ => {
                        if lw.open.is_some_and(|(_, r, _)| r == rank) {
                            lw.emit(GpuOp::HostWork { nanos: host_ns });
                        }
                    }
                }
            }
        }
        steps.push(step);
        origins.push(std::mem::take(&mut lw.origins));
        program.steps.push(GpuStep {
            ops: std::mem::take(&mut lw.ops),
        });
    }
    if let Some((point, _, _)) = lw.open.take() {
        lw.notes.push(format!(
            "window of point {point} never closed: closed at the end of the program"
        ));
        if let (Some(last), Some(o)) = (program.steps.last_mut(), origins.last_mut()) {
            last.ops.push(GpuOp::EndTimed {
                point: PointId(point as u32),
            });
            o.push(lw.at);
        }
    }
    Ok(LoweredPlan {
        program,
        steps,
        origins,
        requests: lw.requests,
        groups_per_rank: ng,
        mismatch,
        sim_violations,
        notes: lw.notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::load_plan;

    fn load(name: &str) -> Plan {
        let path = format!("{}/../tests/data/plans/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        load_plan(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn shadow_plan_lowers_to_a_valid_program() {
        let l = lower_plan(&load("shadow_decode.json"), &LowerOptions::default()).expect("lowers");
        assert_eq!(l.mismatch, None);
        assert_eq!(l.program.problems(), Vec::<String>::new());
        assert_eq!(l.steps, vec![0, 1, 2, 3]);
        // Two groups of one rank; bs 4 and head dim 8 run on the generic kernel.
        assert_eq!(l.program.layout.groups.len(), 2);
        assert!(l
            .program
            .layout
            .groups
            .iter()
            .all(|g| !crate::device::lower::mma_takes(g)));
        // Step 1 zeroes the shadow's tail blocks; step 2 decodes the shadow at position 8 over
        // the chain's blocks and its own tail, inside the timed window of point 1.
        let zeroed: Vec<_> = l.program.steps[1]
            .ops
            .iter()
            .filter_map(|op| match op {
                GpuOp::ZeroBlocks { group, blocks } => Some((group.0, blocks.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(zeroed, vec![(0, vec![BlockId(5)]), (1, vec![BlockId(6)])]);
        let step2 = &l.program.steps[2].ops;
        assert!(matches!(step2[0], GpuOp::BeginTimed { point: PointId(1) }));
        let decode = step2
            .iter()
            .find_map(|op| match op {
                GpuOp::DecodeAttention(d) => Some(d),
                _ => None,
            })
            .expect("a decode");
        let s = &decode.seqs[0];
        assert_eq!(l.request(s.req).1, "point1");
        assert_eq!(s.tokens.len(), 9);
        assert_eq!(s.tokens[8], 42);
        assert_eq!(
            s.tables[0].blocks,
            vec![BlockId(1), BlockId(2), BlockId(5)],
            "full group: the chain's blocks, then the tail"
        );
        assert!(l.sim_violations.is_empty(), "{:?}", l.sim_violations);
        assert!(decode_kv_bytes_per_step(&l.program)[2] > 0);
        assert_eq!(decode_only_steps(&l.program), vec![false, false, true, false]);
    }

    /// A first bad read: (plan step, request, plan group, block, position).
    type Bad = (u64, String, u32, u32, Option<u32>);

    /// What the device will report, predicted on the host: replays the program's writes over
    /// per-(group, block) slot contents and checks every read as the kernels do.
    fn predict(l: &LoweredPlan) -> Vec<Bad> {
        use std::collections::HashMap;
        let layout = &l.program.layout;
        // (group, block) -> per slot: (token, position) written there.
        type Slots = Vec<Option<(u32, u32)>>;
        let mut kv: HashMap<(u32, u32), Slots> = HashMap::new();
        let mut state: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
        let mut out = Vec::new();
        for (si, step) in l.program.steps.iter().enumerate() {
            for op in &step.ops {
                match op {
                    GpuOp::Prefill(p) => {
                        let bs = layout.groups[p.group.0 as usize].block_size_tokens;
                        for (i, &t) in p.tokens.iter().enumerate() {
                            let pos = p.start_pos + i as u32;
                            let b = p.block_table[(pos / bs) as usize].0;
                            if b != 0 {
                                kv.entry((p.group.0, b)).or_insert_with(|| vec![None; bs as usize])
                                    [(pos % bs) as usize] = Some((t, pos));
                            }
                        }
                    }
                    GpuOp::ZeroBlocks { group, blocks } => {
                        for b in blocks {
                            kv.remove(&(group.0, b.0));
                            state.insert((group.0, b.0), Vec::new());
                        }
                    }
                    GpuOp::CopyBlocks { group, copies } => {
                        for c in copies {
                            match kv.get(&(group.0, c.src.0)).cloned() {
                                Some(v) => kv.insert((group.0, c.dst.0), v),
                                None => kv.remove(&(group.0, c.dst.0)),
                            };
                            let st = state.get(&(group.0, c.src.0)).cloned().unwrap_or_default();
                            state.insert((group.0, c.dst.0), st);
                        }
                    }
                    GpuOp::StateUpdate(u) => {
                        let have = state.get(&(u.group.0, u.src_block.0)).cloned().unwrap_or_default();
                        if have != u.history {
                            let (_, g) = l.plan_group(u.group);
                            out.push((l.steps[si], l.request(u.req).1.to_string(), g, u.src_block.0, None));
                        }
                        let mut h = u.history.clone();
                        h.extend(&u.tokens);
                        state.insert((u.group.0, u.dst_block.0), h);
                    }
                    GpuOp::DecodeAttention(d) => {
                        for s in &d.seqs {
                            for t in &s.tables {
                                let g = &layout.groups[t.group.0 as usize];
                                let bs = g.block_size_tokens;
                                let bad = g.kind.attend_range(s.ctx_tokens()).find(|&p| {
                                    let b = t.blocks[(p / bs) as usize].0;
                                    let got = kv.get(&(t.group.0, b)).and_then(|v| v[(p % bs) as usize]);
                                    let want = s.tokens[p as usize];
                                    // A zero position must hold zeros (zeroed or never written).
                                    (want == ZERO_TOKEN && got.is_some())
                                        || (want != ZERO_TOKEN && got != Some((want, p)))
                                });
                                if let Some(p) = bad {
                                    let (_, pg) = l.plan_group(t.group);
                                    let b = t.blocks[(p / bs) as usize].0;
                                    out.push((l.steps[si], l.request(s.req).1.to_string(), pg, b, Some(p)));
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        out
    }

    #[test]
    fn good_plans_read_what_they_wrote() {
        for name in ["shadow_decode.json", "native_full_swa.json"] {
            let l = lower_plan(&load(name), &LowerOptions::default()).expect("lowers");
            assert_eq!(l.mismatch, None, "{name}");
            assert!(l.sim_violations.is_empty(), "{name}: {:?}", l.sim_violations);
            assert_eq!(predict(&l), Vec::<Bad>::new(), "{name}");
        }
    }

    #[test]
    fn bad_plans_fail_where_the_simulator_fails() {
        // The sliding-window block of positions 3568..3583 is zeroed before r0's decode reads it.
        let l = lower_plan(&load("bad_window_evicted.json"), &LowerOptions::default()).expect("lowers");
        assert_eq!(l.sim_violations[0].invariant, "PL-WINDOW");
        assert_eq!(l.sim_violations[0].at.step, 1);
        // It stays bad for every later decode (nothing rewrites it); the first is at step 1.
        let bad = predict(&l);
        assert_eq!(bad[0], (1, "r0".to_string(), 1, 480, Some(3568)));
        assert!(bad.iter().all(|b| (b.1.as_str(), b.3) == ("r0", 480)), "{bad:?}");
        // The shadow reads positions 4..7 of a chain that computed only 4 tokens.
        let l = lower_plan(&load("bad_shadow_unfinished.json"), &LowerOptions::default()).expect("lowers");
        assert_eq!(l.sim_violations[0].invariant, "PL-SHADOW-PARKED");
        assert_eq!(l.sim_violations[0].at.step, 2);
        assert_eq!(
            predict(&l),
            vec![
                (2, "point1".to_string(), 0, 2, Some(4)),
                (2, "point1".to_string(), 1, 4, Some(5))
            ]
        );
    }

    /// Full attention + sliding window 8, 4-token blocks, 4 experts (top 2); request `a` gets
    /// 9 synthetic positions, then decodes twice (positions 9 and 10).
    fn synthetic_plan() -> Plan {
        let text = r#"{"format": "kvsim-plan/1",
          "scenario": {"name": "tiny-moe", "model": {"groups": [
              {"kind": "full_attention", "block_size": 4, "layers": 2, "kv_heads": 2, "head_dim": 8},
              {"kind": "sliding_window", "sliding_window": 8, "block_size": 4, "layers": 2, "kv_heads": 2, "head_dim": 8}],
            "experts": 4, "top_k": 2, "vocab_size": 100},
            "pool_blocks": 32,
            "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 64, "max_model_len": 64, "enable_caching": true},
            "seed": 1},
          "steps": [
            {"step": 0, "ops": [
              {"op": "add_request", "req": "a", "prompt": {"source": "ids", "ids": [1,2,3,4,5,6,7,8,9,10]}},
              {"op": "schedule", "req": "a", "num_new_tokens": 10, "delay_cache_blocks": true},
              {"op": "fake_compute", "req": "a", "tokens": 9},
              {"op": "cache_blocks", "req": "a", "num_tokens": 9}]},
            {"step": 1, "ops": [
              {"op": "begin_timed", "point": 0},
              {"op": "forward", "batch": [{"req": "a", "tokens": 1, "output": [11]}]},
              {"op": "end_timed", "point": 0},
              {"op": "process_outputs"}]},
            {"step": 2, "ops": [
              {"op": "schedule", "req": "a", "num_new_tokens": 1},
              {"op": "forward", "batch": [{"req": "a", "tokens": 1, "output": [12]}]},
              {"op": "process_outputs"}]}]}"#;
        load_plan(text).expect("valid plan")
    }

    #[test]
    fn synthetic_kv_as_zeros_reads_zeros() {
        let plan = synthetic_plan();
        let opts = LowerOptions {
            synthetic_kv: SyntheticKv::Zero,
            ..LowerOptions::default()
        };
        let l = lower_plan(&plan, &opts).expect("lowers");
        assert_eq!(l.mismatch, None);
        assert_eq!(l.program.problems(), Vec::<String>::new());
        // Step 0 zeroes the blocks of positions 0..8 (3 blocks per group) and computes nothing.
        assert!(l.program.steps[0]
            .ops
            .iter()
            .all(|op| matches!(op, GpuOp::ZeroBlocks { .. })));
        let decode = |step: usize| {
            l.program.steps[step]
                .ops
                .iter()
                .find_map(|op| match op {
                    GpuOp::DecodeAttention(d) => Some(d.seqs[0].tokens.clone()),
                    _ => None,
                })
                .expect("a decode")
        };
        let t1 = decode(1);
        assert_eq!(t1.len(), 10);
        assert!(t1[..9].iter().all(|&t| t == ZERO_TOKEN));
        assert_eq!(t1[9], 10);
        let t2 = decode(2);
        assert!(t2[..9].iter().all(|&t| t == ZERO_TOKEN));
        assert_eq!(&t2[9..], &[10, 11]);
        assert_eq!(predict(&l), Vec::<Bad>::new());
        // The default materialises the same positions from the prompt: no zero positions.
        let l = lower_plan(&plan, &LowerOptions::default()).expect("lowers");
        assert!(l.program.steps.iter().flat_map(|s| &s.ops).all(
            |op| !matches!(op, GpuOp::DecodeAttention(d) if d.seqs.iter().any(|s| s.tokens.contains(&ZERO_TOKEN)))
        ));
        assert_eq!(predict(&l), Vec::<Bad>::new());
    }

    #[test]
    fn hidden_state_moe_runs_after_the_attention() {
        let plan = synthetic_plan();
        let kinds = |opts: &LowerOptions| -> Vec<&'static str> {
            let l = lower_plan(&plan, opts).expect("lowers");
            assert_eq!(l.program.problems(), Vec::<String>::new());
            l.program.steps[2]
                .ops
                .iter()
                .filter_map(|op| match op {
                    GpuOp::DecodeAttention(_) => Some("decode"),
                    GpuOp::Moe(m) if m.hidden.is_empty() => Some("moe"),
                    GpuOp::Moe(m) => {
                        assert_eq!(m.hidden, vec![0]);
                        Some("moe_hidden")
                    }
                    _ => None,
                })
                .collect()
        };
        assert_eq!(kinds(&LowerOptions::default()), vec!["moe", "decode"]);
        let hidden = LowerOptions {
            moe_input: MoeInput::Hidden,
            ..LowerOptions::default()
        };
        assert_eq!(kinds(&hidden), vec!["decode", "moe_hidden"]);
    }

    #[test]
    fn every_plan_in_the_data_directory_lowers() {
        let dir = format!("{}/../tests/data/plans", env!("CARGO_MANIFEST_DIR"));
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).expect("plans directory") {
            let path = entry.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let name = path.file_name().and_then(|f| f.to_str()).expect("name").to_string();
            // Bad plans lower too (up to a mismatch, if any): the program must still be valid.
            let l = lower_plan(&load(&name), &LowerOptions::default()).expect("lowers");
            assert_eq!(l.program.problems(), Vec::<String>::new(), "{name}");
            assert_eq!(l.steps.len(), l.program.steps.len(), "{name}");
            n += 1;
        }
        assert!(n >= 2);
    }
}
