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
mod chunks;
mod layout_of;
mod lowerer;
#[cfg(test)]
mod tests;

use crate::device::ids::{GroupId, PointId, ReqId};
use crate::device::program::{GpuOp, GpuProgram, GpuStep};
use crate::driver::{drive, Flow, Observer, OpAt};
use crate::engine::{Engine, Mismatch, OpOutcome};
use crate::plan::{Plan, PlanOp};
use lowerer::{EntryIn, Lowerer};

pub use chunks::{prompt_len, PromptChunk};
pub use layout_of::device_layout;

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
    /// Expert FFN size (a multiple of 256).
    pub moe_ffn: u32,
    /// How synthetic KV is held on the device.
    pub synthetic_kv: SyntheticKv,
    /// What routes MoE tokens: the token id or the attention output.
    pub moe_input: MoeInput,
    /// Time every window of a point (its admission and steady steps), not only its first: what
    /// `replay --against` compares, the benchmark's recorded sample being a steady one.
    pub every_window: bool,
    /// Lower a poached prefix hit (PL-NO-POACH) as vLLM would run it after the finding: the
    /// request admitted with the hit computes only the uncached rest of its prompt
    /// ([`Engine::admit_poached_hits`]). Off, the lowering stops there with a plan mismatch (the
    /// simulator leaves the request unscheduled). No effect on plans without that finding.
    pub admit_poached_hits: bool,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            q_per_kv: 4,
            mla_q_heads: 16,
            moe_hidden: 1024,
            moe_ffn: 512,
            synthetic_kv: SyntheticKv::Tokens,
            every_window: false,
            moe_input: MoeInput::Token,
            admit_poached_hits: false,
        }
    }
}

/// Where a lowered op came from: plan step, rank and op index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OpRef {
    /// Plan step.
    pub step: u64,
    /// Rank.
    pub rank: u32,
    /// Index of the op in the rank's step.
    pub op_index: usize,
}

/// A violation the simulator's engine reported while the plan was lowered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimFinding {
    /// The op.
    pub at: OpRef,
    /// The invariant's ID.
    pub invariant: String,
    /// What broke.
    pub detail: String,
}

/// A plan lowered for the device, with what maps results back to the plan.
#[derive(Clone, Debug)]
pub struct LoweredPlan {
    /// The device program.
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
    /// Per program step, per rank: what the rank sends at the step's exchange, from its
    /// engine at the end of the step ([`crate::device::ranks`]).
    pub exchange: Vec<Vec<crate::device::ranks::RankMsg>>,
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

/// Measures the host work of plan ops for `HostWork`. The lowering itself reads no clock.
pub trait HostClock {
    /// Start measuring (called before a host op).
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
    // Random KDA gives a shadow private random recurrent state, which the device has no
    // writer for: refusing beats reporting every read of it as corrupt.
    let random_state = plan
        .steps
        .iter()
        .flat_map(|st| &st.ops)
        .any(|op| matches!(op, PlanOp::RegisterShadow { random_state: true, .. }));
    if random_state {
        return Err(LowerError::Unsupported(
            "shadows with random KDA state (random_state, Dynamo's randomize_kda_state) are not lowered yet".into(),
        ));
    }
    let (layout, notes) = device_layout(plan, opts)?;
    let mut engines: Vec<Engine> = (0..s.dp_ranks)
        .map(|r| Engine::new(s, r))
        .collect::<Result<_, _>>()
        .map_err(|m| LowerError::Engine(m.0))?;
    for e in &mut engines {
        e.admit_poached_hits = opts.admit_poached_hits;
    }
    let mut lowering = Lowering {
        lw: Lowerer::new(plan, opts, layout.clone(), notes),
        clock,
        entries: Vec::new(),
        program: GpuProgram {
            layout,
            steps: Vec::new(),
        },
        steps: Vec::new(),
        origins: Vec::new(),
        mismatch: None,
        sim_violations: Vec::new(),
        exchange: Vec::new(),
    };
    drive(plan, &mut engines, &mut lowering);
    Ok(lowering.finish())
}

/// The lowering as a plan observer: the engine's state before each op gives the op's device
/// work, the engine's result whether the plan still matches the model.
struct Lowering<'a, 'c> {
    lw: Lowerer<'a>,
    clock: &'c mut dyn HostClock,
    /// The forward entries of the op being applied, as the engine saw them before it.
    entries: Vec<EntryIn>,
    program: GpuProgram,
    steps: Vec<u64>,
    origins: Vec<Vec<OpRef>>,
    mismatch: Option<(OpRef, String)>,
    sim_violations: Vec<SimFinding>,
    exchange: Vec<Vec<crate::device::ranks::RankMsg>>,
}

impl Observer for Lowering<'_, '_> {
    fn before_op(&mut self, at: OpAt, e: &Engine, op: &PlanOp) {
        self.lw.at = OpRef {
            step: at.step,
            rank: at.rank,
            op_index: at.index,
        };
        self.entries = match op {
            PlanOp::Forward { batch } => self.lw.capture_forward(at.rank, e, batch),
            // DECISION: by default synthetic ("fake") KV is materialised on the device as
            // if prefilled from the request's own tokens, so replays of plans with
            // capacity fallbacks verify; `SyntheticKv::Zero` zeroes it instead (issue 8's
            // content-sensitivity experiment, docs/timing-history.md).
            // Synthetic KV covers positions up to `tokens`: from 0, or after a poached hit
            // from the hit on (the engine's `fake_compute`).
            PlanOp::FakeCompute { req, tokens } => self.lw.capture_forward(
                at.rank,
                e,
                &[crate::plan::BatchEntry {
                    req: req.clone(),
                    tokens: tokens.saturating_sub(e.requests.get(req).map_or(0, |r| r.req.num_computed_tokens)),
                    output: Vec::new(),
                }],
            ),
            _ => Vec::new(),
        };
        self.clock.start();
    }

    fn after_op(&mut self, at: OpAt, _e: &Engine, op: &PlanOp, outcome: Result<OpOutcome, Mismatch>) -> Flow {
        let host_ns = self.clock.elapsed_ns();
        let lw = &mut self.lw;
        match outcome {
            Err(m) => {
                self.mismatch = Some((lw.at, m.0));
                lw.ops.clear();
                lw.origins.clear();
                if lw.open.is_some_and(|(_, _, opened)| opened == self.steps.len()) {
                    lw.open = None;
                }
                return Flow::Stop;
            }
            Ok(out) => {
                for v in out.violations {
                    if v.id == crate::invariants::InvariantId::PlNoPoach && lw.opts.admit_poached_hits {
                        lw.notes.push(format!(
                            "step {} rank {}: {}: admitted with the hit, as vLLM would; it computes only the uncached rest of its prompt",
                            lw.at.step, lw.at.rank, v.detail
                        ));
                    }
                    self.sim_violations.push(SimFinding {
                        at: lw.at,
                        invariant: v.id.to_string(),
                        detail: v.detail,
                    });
                }
            }
        }
        let entries = std::mem::take(&mut self.entries);
        lw.lower_op(at.rank, op, &entries, self.steps.len(), host_ns);
        Flow::Continue
    }

    fn end_step(&mut self, step: u64, engines: &[Engine]) -> Flow {
        self.exchange
            .push(engines.iter().map(crate::device::ranks::RankMsg::of_engine).collect());
        self.steps.push(step);
        self.origins.push(std::mem::take(&mut self.lw.origins));
        self.program.steps.push(GpuStep {
            ops: std::mem::take(&mut self.lw.ops),
        });
        Flow::Continue
    }
}

impl Lowering<'_, '_> {
    /// Closes a window left open and hands the program over.
    fn finish(mut self) -> LoweredPlan {
        let lw = &mut self.lw;
        if let Some((point, _, _)) = lw.open.take() {
            lw.notes.push(format!(
                "window of point {point} never closed: closed at the end of the program"
            ));
            if let (Some(last), Some(o)) = (self.program.steps.last_mut(), self.origins.last_mut()) {
                last.ops.push(GpuOp::EndTimed {
                    point: PointId(point as u32),
                });
                o.push(lw.at);
            }
        }
        LoweredPlan {
            program: self.program,
            steps: self.steps,
            origins: self.origins,
            requests: std::mem::take(&mut self.lw.requests),
            groups_per_rank: self.lw.ng,
            mismatch: self.mismatch,
            sim_violations: self.sim_violations,
            notes: std::mem::take(&mut self.lw.notes),
            exchange: self.exchange,
        }
    }
}
