//! One swarm case for the real planner: a small, near-capacity variant of a
//! built-in layout with a random subset of features switched on, plus the
//! harness options that drive it (soft timeout on the virtual clock, delayed
//! outputs). The planner is a black box: its faults are the scenario's and the
//! driver's, never edits of its plan.

use rand::Rng;
use serde::{Deserialize, Serialize};

use kvsim_core::fpm::scenarios::BuiltinScenario;
use kvsim_core::fpm::sweep::{plan_sweep_with, SweepOptions};
use kvsim_core::plan::GroupKindName;

use crate::check::case::{build_scenario, CaseSpec};
use crate::check::run::extent;
use crate::dynamo::RecordOptions;

/// The knobs of one real-planner case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealCase {
    /// The built-in layout it scales down.
    pub base: String,
    pub expert_parallel: bool,
    /// Dynamo's KV warm-up (`DYN_BENCH_KV_WARMUP`); off: synthetic KV only.
    pub warmup: bool,
    pub max_len: u64,
    pub max_seqs: u32,
    pub batched_tokens: u64,
    pub block_size: u64,
    pub window: u64,
    /// Usable pool as a percentage of `max_seqs` full-length requests.
    pub pool_pct: u32,
    pub repeats: u64,
    pub second_group: bool,
    pub giant: bool,
    pub async_scheduling: bool,
    /// Random KDA (layouts with a state group only).
    pub random_kda: bool,
    /// `hybrid_live_state` (layouts with a state group only).
    pub live_state: bool,
    pub capture: u8,
    pub kv_samples: usize,
    /// The soft timeout (1 s) lands near this step: the virtual clock runs
    /// 1000/k times the nominal step cost.
    pub timeout_step: Option<u32>,
    /// (step, by): async only; `by` more batches stay in flight from `step`.
    pub delay_outputs: Option<(u32, u32)>,
    /// Attention-DP with two real ranks over the real synchronizer.
    pub dp2: bool,
    /// (rank, ticks): with `dp2`, that rank's synchronizer messages arrive late.
    pub message_lag: Option<(u32, u64)>,
    /// Async, one rank: the deferred-free fence of a KV-consumer engine is on.
    pub defer_block_free: bool,
    /// One rank: every live warm-up chain is aborted at this step.
    pub abort_chains: Option<u32>,
}

/// The layouts the swarm scales down (single-rank built-ins).
pub fn bases() -> Vec<BuiltinScenario> {
    kvsim_core::fpm::scenarios::builtin_scenarios()
        .into_iter()
        .filter(|s| s.scenario.dp_ranks == 1)
        .collect()
}

fn pick<T: Copy>(rng: &mut impl Rng, xs: &[T]) -> T {
    xs[rng.gen_range(0..xs.len())]
}

impl RealCase {
    /// Draw a case on `base`: each feature is on with its own probability.
    pub fn draw(base: &BuiltinScenario, rng: &mut impl Rng) -> RealCase {
        let moe = base.scenario.model.experts > 0;
        let async_scheduling = rng.gen_bool(0.5);
        let random_kda = rng.gen_bool(0.5);
        let dp2 = rng.gen_bool(0.25);
        RealCase {
            base: base.name.clone(),
            // The chain gate needs expert parallelism: MoE layouts mostly get it.
            expert_parallel: moe && rng.gen_bool(0.85),
            warmup: rng.gen_bool(0.9),
            // 1.6.1's warm-up prefill is 256 tokens + 5 decodes whatever the model
            // length (a finding below 261): mostly lengths above it, so the rest
            // of the planner is exercised too.
            max_len: pick(rng, &[96, 272, 320, 384, 512, 768, 1024, 2048]),
            max_seqs: pick(rng, &[2, 3, 4, 5, 6, 8, 12, 16]),
            batched_tokens: pick(rng, &[32, 64, 128, 256, 512, 2048]),
            block_size: pick(rng, &[4, 8, 16]),
            window: pick(rng, &[4, 8, 16, 32]),
            pool_pct: rng.gen_range(15..=130),
            repeats: rng.gen_range(1..=6),
            second_group: rng.gen_bool(0.3),
            giant: rng.gen_bool(0.3),
            async_scheduling,
            random_kda,
            // 1.6.1 refuses hybrid_live_state together with randomize_kda_state.
            live_state: !random_kda && rng.gen_bool(0.4),
            capture: rng.gen(),
            kv_samples: rng.gen_range(2..=8),
            // Half the timeouts land early, where the first stage is still building.
            timeout_step: rng.gen_bool(0.3).then(|| {
                if rng.gen_bool(0.5) {
                    rng.gen_range(6..=60)
                } else {
                    rng.gen_range(1..=400)
                }
            }),
            delay_outputs: (async_scheduling && rng.gen_bool(0.3))
                .then(|| (rng.gen_range(0..300), rng.gen_range(1..=2))),
            dp2,
            message_lag: (dp2 && rng.gen_bool(0.3)).then(|| (rng.gen_range(0..2), rng.gen_range(1..=3))),
            defer_block_free: async_scheduling && !dp2 && rng.gen_bool(0.4),
            abort_chains: (!dp2 && rng.gen_bool(0.12)).then(|| rng.gen_range(8..=120)),
        }
    }

    fn spec(&self) -> CaseSpec {
        CaseSpec {
            strategy: 0,
            max_len: self.max_len,
            max_seqs: self.max_seqs,
            batched_tokens: self.batched_tokens,
            block_size: self.block_size,
            window: self.window,
            pool_pct: self.pool_pct,
            repeats: self.repeats,
            second_group: self.second_group,
            giant: self.giant,
            async_scheduling: self.async_scheduling,
            random_kda: self.random_kda,
            dp2: self.dp2,
            timeout_pct: None,
            delay_outputs: None,
            stage_failure: None,
            kv_samples: self.kv_samples,
            capture: self.capture,
            shrink_pool: None,
            message_lag: None,
        }
    }

    /// The scenario file this case hands the harness.
    pub fn scenario(&self, base: &BuiltinScenario) -> Result<BuiltinScenario, String> {
        let mut s = build_scenario(base, &self.spec())?;
        s.bench.expert_parallel = self.expert_parallel;
        if self.timeout_step.is_some() {
            s.bench.timeout_seconds = 1;
        }
        Ok(s)
    }

    fn has_state(base: &BuiltinScenario) -> bool {
        base.scenario
            .model
            .groups
            .iter()
            .any(|g| g.kind == GroupKindName::Mamba)
    }

    /// The harness options; `max_steps` is the liveness budget derived from
    /// the grid (kvsim's port plans the same grid: four times its length plus
    /// slack, so a sweep past it is stuck, not slow).
    pub fn options(&self, base: &BuiltinScenario, s: &BuiltinScenario, wall: std::time::Duration) -> RecordOptions {
        let port_steps = plan_sweep_with(s, None, &SweepOptions::default())
            .map(|p| extent(&p.plan).0)
            .unwrap_or(5_000);
        RecordOptions {
            warmup: self.warmup,
            live_state: self.live_state && Self::has_state(base),
            planner_source: None,
            max_steps: 4 * port_steps + 500,
            clock_scale: self.timeout_step.map_or(1.0, |k| 1000.0 / f64::from(k)),
            timeout: wall,
            delay_outputs: self
                .delay_outputs
                .filter(|_| self.async_scheduling)
                .map(|(at, by)| (u64::from(at), u64::from(by))),
            message_lag: self.message_lag.filter(|_| self.dp2),
            defer_block_free: self.defer_block_free && self.async_scheduling && !self.dp2,
            abort_chains: self.abort_chains.filter(|_| !self.dp2).map(u64::from),
        }
    }

    /// Simpler variants, simplest first (the shrinker keeps the first that
    /// still fails the same way).
    pub fn simpler(&self) -> Vec<RealCase> {
        let mut out = Vec::new();
        let mut push = |f: &dyn Fn(&mut RealCase)| {
            let mut c = self.clone();
            f(&mut c);
            if c != *self && !out.contains(&c) {
                out.push(c);
            }
        };
        push(&|c| c.abort_chains = None);
        push(&|c| c.defer_block_free = false);
        push(&|c| c.message_lag = None);
        push(&|c| {
            c.dp2 = false;
            c.message_lag = None;
        });
        push(&|c| c.delay_outputs = None);
        push(&|c| c.timeout_step = None);
        push(&|c| c.second_group = false);
        push(&|c| c.giant = false);
        push(&|c| c.live_state = false);
        push(&|c| c.random_kda = false);
        push(&|c| c.async_scheduling = false);
        push(&|c| c.capture = 0);
        push(&|c| c.repeats = 1);
        push(&|c| c.kv_samples = 2);
        push(&|c| c.batched_tokens = 2048);
        for seqs in [2, self.max_seqs / 2] {
            push(&|c| c.max_seqs = seqs.max(2));
        }
        for len in [96, 272, 320, 384, 512] {
            if len < self.max_len {
                push(&|c| c.max_len = len);
            }
        }
        push(&|c| c.pool_pct = 100);
        if let Some(k) = self.timeout_step {
            push(&|c| c.timeout_step = Some(k.div_ceil(2)));
        }
        out
    }
}
