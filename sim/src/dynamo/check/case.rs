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
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::aim::Sites;
use crate::check::run::extent;
use crate::dynamo::RecordOptions;

/// The knobs of one real-planner case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealCase {
    /// The built-in layout it scales down.
    pub base: String,
    /// Expert parallelism.
    pub expert_parallel: bool,
    /// Dynamo's KV warm-up (`DYN_BENCH_KV_WARMUP`); off: synthetic KV only.
    pub warmup: bool,
    /// Model length.
    pub max_len: u64,
    /// Request slots.
    pub max_seqs: u32,
    /// Token budget.
    pub batched_tokens: u64,
    /// Block size cap.
    pub block_size: u64,
    /// Window cap.
    pub window: u64,
    /// Usable pool as a percentage of `max_seqs` full-length requests.
    pub pool_pct: u32,
    /// Giant-KV repeats.
    pub repeats: u64,
    /// A second group.
    pub second_group: bool,
    /// A low giant-KV threshold.
    pub giant: bool,
    /// Asynchronous scheduling.
    pub async_scheduling: bool,
    /// Random KDA (layouts with a state group only).
    pub random_kda: bool,
    /// `hybrid_live_state` (layouts with a state group only).
    pub live_state: bool,
    /// Capture sizes (bit b: batch b + 1).
    pub capture: u8,
    /// Decode KV samples.
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
    /// Aimed: before the case runs, its timeout, abort and delay steps are
    /// moved onto the chain builds of a fault-free probe recording, drawn
    /// from this seed (`resolve`). A resolved case has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aim: Option<u64>,
    /// (step, rank, percent): before that step, that share of the rank's pool
    /// becomes unusable (step 0: before the planner sizes its stages, so under
    /// DP the ranks' free pools differ; later: a local shortfall mid-sweep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrink_pool: Option<(u32, u32, u32)>,
    /// With a later `shrink_pool`: the blocks come back this many steps later
    /// (aimed at a point's injection: a failed eager warm-up replica, §8.2 bug 26).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrink_steps: Option<u32>,
    /// (step, after): one rank: from that step the (after+1)-th shadow
    /// registration fails (a `stage_failure` fault); aimed at the probe's
    /// registrations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_registration: Option<(u32, u32)>,
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
        let mut c = RealCase {
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
            aim: None,
            shrink_pool: None,
            shrink_steps: None,
            fail_registration: None,
        };
        // Drawn after every knob above, so those knobs keep their draws.
        let scene = c.widen(base, rng);
        // A full-scale scene always aims; a small draw's faults mostly.
        if c != c.probe() && (scene || rng.gen_bool(0.7)) {
            c.aim = Some(rng.gen());
        }
        // Under attention-DP mostly, and mostly before planning: the one fault
        // that makes the ranks' pools differ (§8.2 bug 17).
        if rng.gen_bool(if c.dp2 { 0.4 } else { 0.15 }) {
            let early = rng.gen_bool(if c.dp2 { 0.8 } else { 0.5 });
            let step = if early { 0 } else { rng.gen_range(1..=300) };
            let rank = if c.dp2 { rng.gen_range(0..2) } else { 0 };
            c.shrink_pool = Some((step, rank, rng.gen_range(5..=60)));
        }
        // Drawn last, so every knob above keeps its draw. Not behind the
        // deferred-free fence: 1.6.1's abort resets the prefix cache with frees
        // still fenced there by design (`_bench_clear_prefix_cache`).
        if !c.dp2 && !c.defer_block_free && c.warmup && rng.gen_bool(0.15) {
            c.fail_registration = Some((rng.gen_range(1..=300), rng.gen_range(0..=2)));
            c.aim = c.aim.or_else(|| Some(rng.gen()));
        }
        if let Some((step, rank, _)) = c.shrink_pool.filter(|s| s.0 > 0) {
            // Half the later shrinks are transient, mostly of every free block:
            // an injection fails and the next one need not.
            if rng.gen_bool(0.5) {
                c.shrink_steps = Some(rng.gen_range(1..=3));
                if rng.gen_bool(0.5) {
                    c.shrink_pool = Some((step, rank, 100));
                }
            }
            c.aim = c.aim.or_else(|| Some(rng.gen()));
        }
        c
    }

    /// Regimes a small draw never reaches. Full scale: thousands of tokens
    /// and 32 slots, so a stage is 2·B chains of thousands of tokens and (with
    /// a 256-token budget) one build spans many steps; the deadline, abort and
    /// fence paths act mid-build only there, so each full-scale case gets one
    /// of those scenes. Otherwise sometimes a model length whose chain cap
    /// (`max_len` − 4) sits on a block edge, and long steady runs, so a
    /// shadow's last block lies past the chain's (§8.2 bug 6). Returns
    /// whether the case became a full-scale scene.
    fn widen(&mut self, base: &BuiltinScenario, rng: &mut impl Rng) -> bool {
        if !rng.gen_bool(0.25) {
            if rng.gen_bool(0.15) {
                self.max_len += 4;
            }
            if rng.gen_bool(0.1) {
                self.repeats = 100;
            }
            return false;
        }
        let sch = &base.scenario.scheduler;
        let groups = &base.scenario.model.groups;
        // The scale of the witnesses (mm-async): far below the layouts' own
        // 64k tokens, which the planner on one CPU core would take minutes over.
        self.max_len = pick(rng, &[2048, 4096]).min(sch.max_model_len);
        self.max_seqs = 32.min(sch.max_num_seqs);
        self.block_size = groups.iter().map(|g| g.block_size).max().unwrap_or(16);
        self.window = groups
            .iter()
            .filter_map(|g| g.sliding_window)
            .max()
            .unwrap_or(self.window);
        // Mostly a 256-token budget: builds of many steps, several of them.
        self.batched_tokens = pick(rng, &[256, 256, 2048]);
        // A scene is about chain builds: the gate's conditions for them hold
        // (expert parallelism for MoE, random KDA for a state group; §3.1).
        self.warmup = true;
        if base.scenario.model.experts > 0 {
            self.expert_parallel = true;
        }
        if Self::has_state(base) {
            self.random_kda = true;
            self.live_state = false;
        }
        // Big enough for a stage, small enough to be near capacity.
        self.pool_pct = rng.gen_range(15..=60);
        self.repeats = self.repeats.min(3);
        // The scene's steps are drawn as a small case's, until `resolve` puts
        // them on a build (a layout the gate refuses has none).
        let single_rank = |c: &mut RealCase| {
            c.dp2 = false;
            c.message_lag = None;
        };
        match rng.gen_range(0..4) {
            // The deadline mid-build (§3.3 step 4; bugs 2, 5).
            0 => self.timeout_step = Some(rng.gen_range(6..=400)),
            // Every chain aborted mid-build (bug 3).
            1 => {
                single_rank(self);
                self.abort_chains = Some(rng.gen_range(8..=120));
            }
            // A build's last chunk held in flight (a deeper batch queue; bug 7).
            2 => {
                self.async_scheduling = true;
                self.delay_outputs = Some((rng.gen_range(0..300), rng.gen_range(2..=3)));
            }
            // The deadline mid-build behind the deferred-free fence, the shed
            // chain's chunk sometimes held over the cleanup (bugs 13, 14).
            _ => {
                single_rank(self);
                self.async_scheduling = true;
                self.defer_block_free = true;
                let t = rng.gen_range(6..=400);
                self.timeout_step = Some(t);
                self.delay_outputs = rng.gen_bool(0.5).then_some((t - 1, 3));
            }
        }
        true
    }

    /// The case without the faults `resolve` places: the probe an aimed case
    /// is resolved on.
    pub fn probe(&self) -> RealCase {
        RealCase {
            timeout_step: None,
            delay_outputs: None,
            abort_chains: None,
            aim: None,
            fail_registration: None,
            // A shrink before planning shapes the stages; a later one is placed.
            shrink_pool: self.shrink_pool.filter(|s| s.0 == 0),
            shrink_steps: None,
            ..self.clone()
        }
    }

    /// Move the drawn timeout, abort and delay onto `sites` (the probe's
    /// chain builds): a timeout or abort on a step mid-build, a delay on a
    /// build's last chunk, or with a timeout on the step before the deadline
    /// (the shed chain's chunk still in flight over the cleanup); a failed
    /// registration onto one of the probe's; a later pool shrink onto the step
    /// after a build closes (where 1.6.1 checks the rung's shadow tails fit:
    /// under DP a shortfall on one rank fails the stage for the group) or
    /// mid-build, a transient one onto a point's injection.
    /// Without sites (the gate refused warm-up) the drawn steps stay.
    pub fn resolve(&self, sites: &Sites) -> RealCase {
        let mut c = RealCase {
            aim: None,
            ..self.clone()
        };
        let (Some(seed), false) = (self.aim, sites.is_empty()) else {
            return c;
        };
        let rng = &mut ChaCha8Rng::seed_from_u64(seed);
        let step = |s: u64| u32::try_from(s).unwrap_or(u32::MAX).max(1);
        if c.timeout_step.is_some() {
            c.timeout_step = Some(step(sites.mid_build(rng)));
        }
        if c.abort_chains.is_some() {
            c.abort_chains = Some(step(sites.mid_build(rng)));
        }
        if let Some((_, by)) = c.delay_outputs {
            let at = match c.timeout_step {
                Some(t) => t.saturating_sub(1).max(1),
                None => step(sites.closing(rng)),
            };
            c.delay_outputs = Some((at, by));
        }
        if c.fail_registration.is_some() {
            if let Some((at, after)) = sites.registration(rng) {
                c.fail_registration = Some((step(at), after));
            }
        }
        if let Some((_, rank, pct)) = c.shrink_pool.filter(|s| s.0 > 0 && !sites.runs.is_empty()) {
            let s = if c.shrink_steps.is_some() {
                sites.injection(rng).unwrap_or(1)
            } else if rng.gen_bool(0.5) {
                sites.closing(rng) + 1
            } else {
                sites.mid_build(rng)
            };
            c.shrink_pool = Some((step(s), rank, pct));
        }
        c
    }

    fn spec(&self) -> CaseSpec {
        CaseSpec {
            strategy: None,
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
            shared_prompt_content: false,
            retire_in_flight: false,
            reset_probe: false,
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
            shrink_pool: self.shrink_pool.map(|(step, rank, pct)| {
                let blocks = u64::from(s.scenario.pool_blocks) * u64::from(pct) / 100;
                (u64::from(step), rank, u32::try_from(blocks).unwrap_or(u32::MAX))
            }),
            shrink_steps: self.shrink_steps.filter(|_| self.shrink_pool.is_some()).map(u64::from),
            fail_registration: self
                .fail_registration
                .filter(|_| !self.dp2)
                .map(|(step, after)| (u64::from(step), after)),
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
        push(&|c| {
            c.shrink_pool = None;
            c.shrink_steps = None;
        });
        push(&|c| c.shrink_steps = None);
        push(&|c| c.fail_registration = None);
        push(&|c| c.defer_block_free = false);
        push(&|c| c.message_lag = None);
        push(&|c| {
            c.dp2 = false;
            c.message_lag = None;
            if let Some((_, r, _)) = c.shrink_pool.as_mut() {
                *r = 0;
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn aimed() -> RealCase {
        let base = &bases()[0];
        let mut c = RealCase::draw(base, &mut ChaCha8Rng::seed_from_u64(1));
        c.timeout_step = Some(500);
        c.abort_chains = Some(500);
        c.delay_outputs = None;
        c.aim = Some(9);
        c
    }

    #[test]
    fn an_aimed_case_lands_its_faults_mid_build_and_resolves_the_same_way_twice() {
        let builds = Sites {
            runs: vec![(7, 100), (115, 132), (147, 147)],
            registrations: vec![(102, 8), (134, 4), (149, 1)],
            injections: vec![103, 135, 150],
        };
        let c = aimed();
        let r = c.resolve(&builds);
        assert_eq!(r, c.resolve(&builds), "same seed, same steps");
        assert_eq!(r.aim, None);
        for s in [r.timeout_step.unwrap(), r.abort_chains.unwrap()] {
            let s = u64::from(s);
            assert!(builds.runs.iter().any(|&(a, e)| (a < s || a == e) && s <= e), "{s}");
        }
        // A delay with a timeout sits on the step before the deadline; alone, on a build's last chunk.
        let mut d = c.clone();
        d.delay_outputs = Some((0, 3));
        let rd = d.resolve(&builds);
        assert_eq!(rd.delay_outputs.unwrap().0 + 1, rd.timeout_step.unwrap());
        d.timeout_step = None;
        let closing = d.resolve(&builds).delay_outputs.unwrap().0;
        assert!([100, 132, 147].contains(&closing), "{closing}");
        // A failed registration lands on a probe registration, past the first
        // of its step when the step registers several; a later shrink after a
        // build closes or mid-build; a shrink before planning stays there.
        let mut f = c.clone();
        f.fail_registration = Some((500, 0));
        f.shrink_pool = Some((500, 1, 30));
        for seed in 0..40 {
            f.aim = Some(seed);
            let r = f.resolve(&builds);
            let (at, after) = r.fail_registration.unwrap();
            let n = builds
                .registrations
                .iter()
                .find(|x| x.0 == u64::from(at))
                .expect("a registration step")
                .1;
            assert!(after < n && (n == 1 || after >= 1), "{at}:{after}");
            let s = u64::from(r.shrink_pool.unwrap().0);
            let mid = builds.runs.iter().any(|&(a, e)| (a < s || a == e) && s <= e);
            assert!(mid || [101, 133, 148].contains(&s), "{s}");
            assert_eq!(r.shrink_pool.unwrap().1, 1);
        }
        // A transient shrink lands on an injection.
        f.shrink_steps = Some(2);
        for seed in 0..10 {
            f.aim = Some(seed);
            let s = u64::from(f.resolve(&builds).shrink_pool.unwrap().0);
            assert!(builds.injections.contains(&s), "{s}");
        }
        assert_eq!(f.probe().shrink_steps, None);
        f.shrink_steps = None;
        f.shrink_pool = Some((0, 1, 30));
        assert_eq!(f.resolve(&builds).shrink_pool, Some((0, 1, 30)));
        assert_eq!(f.probe().shrink_pool, Some((0, 1, 30)));
        assert_eq!(
            (
                f.probe().fail_registration,
                RealCase {
                    shrink_pool: Some((9, 1, 30)),
                    ..f
                }
                .probe()
                .shrink_pool
            ),
            (None, None)
        );
    }

    #[test]
    fn without_builds_or_aim_the_drawn_steps_stay() {
        let c = aimed();
        let r = c.resolve(&Sites::default());
        assert_eq!((r.timeout_step, r.abort_chains, r.aim), (Some(500), Some(500), None));
        let plain = RealCase { aim: None, ..c.clone() };
        let builds = Sites {
            runs: vec![(1, 4)],
            registrations: vec![(6, 2)],
            injections: vec![7],
        };
        assert_eq!(plain.resolve(&builds), plain);
        assert_eq!(c.probe().timeout_step, None);
        assert_eq!(c.probe().abort_chains, None);
    }
}
