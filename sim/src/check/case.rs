//! One swarm case: a small, near-capacity variant of a built-in scenario with a
//! random subset of features and faults switched on (swarm testing: each case
//! leaves some features out, so rare interactions are not drowned by the rest).
//!
//! A case is plain data (`CaseSpec`), drawn from a seeded RNG by `kvsim check` and
//! from proptest strategies by the property suites; `build` turns it into the
//! scenario, strategy and sweep options the planner gets.

use rand::Rng;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kvsim_core::fpm::capacity::LayoutNeed;
use kvsim_core::fpm::gate::gate;
use kvsim_core::fpm::gate::Strategy::{self, Chain, Native, Synthetic};
use kvsim_core::fpm::grid::{BlockNeed, BlockNeedQuery};
use kvsim_core::fpm::scenarios::{validate_scenario, BuiltinScenario};
use kvsim_core::plan::{FaultSpec, GroupKindName};

/// The knobs of one case. Percentages place faults relative to the length of
/// the case's fault-free plan (steps) or its nominal duration (timeout).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaseSpec {
    /// The planner's strategy; `None` leaves it to the gate (`auto`).
    pub strategy: Option<Strategy>,
    /// Model length (`max_model_len`).
    pub max_len: u64,
    /// Request slots (`max_num_seqs`).
    pub max_seqs: u32,
    /// Token budget per step (`max_num_batched_tokens`).
    pub batched_tokens: u64,
    /// Cap on every group's block size.
    pub block_size: u64,
    /// Cap on sliding windows.
    pub window: u64,
    /// Usable pool as a percentage of `max_seqs` full-length requests.
    pub pool_pct: u32,
    /// Steady steps a giant point repeats.
    pub repeats: u64,
    /// A single-group layout gets a second group of the same kind (attention layers
    /// of two shapes form two cache groups).
    pub second_group: bool,
    /// A low giant-KV threshold (most points giant).
    pub giant: bool,
    /// Asynchronous scheduling.
    pub async_scheduling: bool,
    /// Random KDA (layouts with a state group only).
    pub random_kda: bool,
    /// Attention data parallelism with two ranks.
    pub dp2: bool,
    /// Soft timeout at this percentage of the fault-free nominal duration.
    pub timeout_pct: Option<u32>,
    /// (step %, by, rank): outputs of that step land late.
    pub delay_outputs: Option<(u32, u64, u32)>,
    /// (step %, rank, after): a shadow registration fails locally once `after` more succeeded.
    pub stage_failure: Option<(u32, u32, u32)>,
    /// Decode KV samples per batch (`decode_max_kv_read_token_samples`).
    pub kv_samples: usize,
    /// Decode batch sizes to capture (bit b = batch b + 1; batch 1 always).
    pub capture: u8,
    /// (step % or 0 for a smaller profiled pool, blocks as % of the pool, rank).
    pub shrink_pool: Option<(u32, u32, u32)>,
    /// (rank, steps): that rank's messages arrive late.
    pub message_lag: Option<(u32, u64)>,
    /// Every point's slot-k request draws the same prompt under its own cache salt, so only
    /// the salt keeps their blocks apart (drawn last: earlier knobs keep their draws).
    pub shared_prompt_content: bool,
    /// Under async scheduling, each point's requests retire in its last timed step while that
    /// step's outputs are in flight: the fence must hold them a step (drawn last).
    #[serde(default)]
    pub retire_in_flight: bool,
    /// A prefix-cache reset is requested in every point's admission step (drawn last).
    #[serde(default)]
    pub reset_probe: bool,
}

fn pick<T: Copy>(rng: &mut impl Rng, xs: &[T]) -> T {
    xs[rng.gen_range(0..xs.len())]
}

/// Strategies by weight: chains (the planner with the most moving parts) most often.
const STRATEGIES: [Option<Strategy>; 7] = [
    None,
    None,
    Some(Native),
    Some(Chain),
    Some(Chain),
    Some(Chain),
    Some(Synthetic),
];
/// The share of cases that probe the gate with a strategy it refuses (n/a when the
/// planner is right).
const GATE_PROBE: f64 = 0.04;
const BATCHED_TOKENS: [u64; 5] = [8, 16, 32, 64, 512];

/// What the planner accepts for `base`, so that every draw applies.
struct Limits {
    /// Strategies the gate allows, without and with random KDA.
    allowed: [Vec<Option<Strategy>>; 2],
    /// Align-mode state groups: the token budget must cover one scheduler block.
    align: bool,
}

impl Limits {
    fn of(base: &BuiltinScenario) -> Limits {
        let has_state = base
            .scenario
            .model
            .groups
            .iter()
            .any(|g| g.kind == GroupKindName::Mamba);
        let allowed = [false, true].map(|kda| {
            let mut s = base.clone();
            s.bench.random_kda = kda && has_state;
            let v = gate(&s);
            STRATEGIES
                .iter()
                .copied()
                .filter(|st| match st {
                    Some(Native) => v.native,
                    Some(Chain) => v.chain,
                    None | Some(Synthetic) => true,
                })
                .collect()
        });
        let align = base.scenario.scheduler.enable_caching && has_state;
        Limits { allowed, align }
    }

    /// The scheduler block size with every group capped at `cap` (the LCM of the sizes).
    fn scheduler_block(base: &BuiltinScenario, cap: u64) -> u64 {
        let mut s = base.scenario.clone();
        for g in &mut s.model.groups {
            g.block_size = g.block_size.min(cap);
        }
        s.kv_config().scheduler_block_size()
    }
}

impl CaseSpec {
    /// Draw a case for `base`: each feature and fault is on with its own probability,
    /// within what the planner accepts for `base` (the strategy its gate allows, a
    /// token budget its scheduler can chunk by), so that every case applies.
    pub fn draw(rng: &mut impl Rng, base: &BuiltinScenario) -> CaseSpec {
        let on = |rng: &mut dyn rand::RngCore, p: f64| rng.gen_bool(p);
        let rank = |rng: &mut dyn rand::RngCore| rng.gen_range(0..2u32);
        let limits = Limits::of(base);
        let union: Vec<_> = STRATEGIES
            .iter()
            .copied()
            .filter(|s| limits.allowed.iter().any(|a| a.contains(s)))
            .collect();
        let strategy = pick(rng, &union);
        let max_len = pick(rng, &[24, 32, 48, 64, 96, 128]);
        let max_seqs = rng.gen_range(2..=8);
        let block_size = pick(rng, &[4, 8, 16]);
        let min_tokens = if limits.align {
            Limits::scheduler_block(base, block_size)
        } else {
            0
        };
        let budgets: Vec<u64> = BATCHED_TOKENS.iter().copied().filter(|&t| t >= min_tokens).collect();
        let batched_tokens = pick(
            rng,
            if budgets.is_empty() {
                &BATCHED_TOKENS[4..]
            } else {
                &budgets
            },
        );
        let window = pick(rng, &[4, 8, 16, 32]);
        let pool_pct = rng.gen_range(15..=130);
        let repeats = rng.gen_range(1..=6);
        let second_group = on(rng, 0.4);
        let giant = on(rng, 0.3);
        let async_scheduling = on(rng, 0.5);
        let mut random_kda = on(rng, 0.4);
        // Random KDA moves a state layout from native to chains (the gate's order).
        if !limits.allowed[usize::from(random_kda)].contains(&strategy) {
            random_kda = !random_kda;
        }
        let mut c = CaseSpec {
            strategy,
            max_len,
            max_seqs,
            batched_tokens,
            block_size,
            window,
            pool_pct,
            repeats,
            second_group,
            giant,
            async_scheduling,
            random_kda,
            dp2: on(rng, 0.3),
            timeout_pct: on(rng, 0.35).then(|| rng.gen_range(1..100)),
            delay_outputs: on(rng, 0.35).then(|| (rng.gen_range(0..100), rng.gen_range(1..=4), rank(rng))),
            stage_failure: on(rng, 0.3).then(|| (rng.gen_range(0..70), rank(rng), rng.gen_range(0..4))),
            capture: rng.gen(),
            kv_samples: rng.gen_range(2..=8),
            shrink_pool: on(rng, 0.3).then(|| {
                let at = if rng.gen_bool(0.5) { 0 } else { rng.gen_range(1..100) };
                (at, rng.gen_range(1..25), rank(rng))
            }),
            message_lag: on(rng, 0.2).then(|| (rank(rng), rng.gen_range(1..=2))),
            shared_prompt_content: false,
            retire_in_flight: false,
            reset_probe: false,
        };
        // A few cases ask for what the gate refuses: the planner must refuse it too (a
        // gate that admits it is bug 8, `recurrent-state-borrowed`). Drawn after the
        // other knobs, so that theirs do not depend on it.
        let refused: Vec<(Option<Strategy>, bool)> = [false, true]
            .into_iter()
            .flat_map(|kda| {
                let allowed = &limits.allowed[usize::from(kda)];
                STRATEGIES
                    .iter()
                    .filter(|s| !allowed.contains(s))
                    .map(move |&s| (s, kda))
            })
            .collect();
        if on(rng, GATE_PROBE) && !refused.is_empty() {
            (c.strategy, c.random_kda) = pick(rng, &refused);
        }
        // Drawn last: earlier knobs keep their draws.
        c.shared_prompt_content = on(rng, 0.3);
        c.retire_in_flight = on(rng, 0.3);
        c.reset_probe = on(rng, 0.2);
        c
    }
}

/// The case's scenario: `base` scaled down to the case's knobs, or why the draw
/// gives no valid scenario.
pub fn build_scenario(base: &BuiltinScenario, c: &CaseSpec) -> Result<BuiltinScenario, String> {
    let mut s = base.clone();
    let has_state = s.scenario.model.groups.iter().any(|g| g.kind == GroupKindName::Mamba);
    for g in &mut s.scenario.model.groups {
        g.block_size = g.block_size.min(c.block_size);
        if let Some(w) = g.sliding_window.as_mut() {
            *w = (*w).min(c.window);
        }
    }
    if c.second_group && s.scenario.model.groups.len() == 1 {
        let mut g = s.scenario.model.groups[0].clone();
        g.head_dim = (g.head_dim / 2).max(1);
        g.layers = (g.layers / 4).max(1);
        s.scenario.model.groups.push(g);
    }
    let sch = &mut s.scenario.scheduler;
    sch.max_model_len = c.max_len;
    sch.max_num_seqs = c.max_seqs;
    sch.max_num_batched_tokens = c.batched_tokens;
    sch.async_scheduling = c.async_scheduling;
    if c.dp2 {
        s.scenario.dp_ranks = 2;
    }
    s.bench.decode_capture_sizes = (1..=8u64)
        .filter(|&b| b == 1 || c.capture & (1 << (b - 1)) != 0)
        .filter(|&b| b <= u64::from(c.max_seqs))
        .collect();
    s.bench.samples.decode_max_batch_size_samples = 3;
    s.bench.samples.decode_max_kv_read_token_samples = c.kv_samples;
    s.bench.giant_kv_repeats = c.repeats;
    s.bench.giant_kv_threshold = if c.giant { 2 * c.max_len } else { 1_000_000 };
    s.bench.random_kda = c.random_kda && has_state;
    s.bench.shared_prompt_content = c.shared_prompt_content;
    s.bench.retire_in_flight = c.retire_in_flight;
    s.bench.reset_probe = c.reset_probe;
    let need = LayoutNeed::new(s.scenario.kv_config());
    let per_req = need.blocks_per_req(BlockNeedQuery {
        num_tokens: c.max_len,
        has_cache_hit: false,
        apply_admission_cap: true,
    });
    let full = per_req * u64::from(c.max_seqs);
    let usable = (full * u64::from(c.pool_pct) / 100).max(per_req + 2);
    s.scenario.pool_blocks = u32::try_from(usable + 1).map_err(|_| "pool too large".to_string())?;
    s.name = format!("{}~", base.name);
    validate_scenario(&s)?;
    Ok(s)
}

/// The case's faults and soft timeout, placed on a fault-free plan of `steps`
/// steps and `duration_ns` nominal time.
pub fn build_faults(c: &CaseSpec, dp_ranks: u32, steps: u64, duration_ns: u64) -> (Vec<FaultSpec>, Option<f64>) {
    let at = |pct: u32| steps * u64::from(pct) / 100;
    let rank = |r: u32| r % dp_ranks.max(1);
    let mut faults = Vec::new();
    if let Some((pct, by, r)) = c.delay_outputs {
        faults.push(FaultSpec::DelayOutputs {
            step: at(pct),
            rank: rank(r),
            by,
        });
    }
    if let Some((pct, r, after)) = c.stage_failure {
        faults.push(FaultSpec::StageFailure {
            step: at(pct),
            rank: rank(r),
            after,
        });
    }
    if let Some((pct, _, r)) = c.shrink_pool {
        faults.push(FaultSpec::ShrinkPool {
            step: at(pct),
            rank: rank(r),
            blocks: 0,
            steps: None,
        });
    }
    if let (Some((r, lag)), true) = (c.message_lag, dp_ranks > 1) {
        faults.push(FaultSpec::MessageLag {
            rank: rank(r),
            steps: lag,
        });
    }
    let timeout = c
        .timeout_pct
        .map(|pct| (duration_ns as f64 * f64::from(pct) / 100.0).floor() / 1e9);
    (faults, timeout)
}
