//! Where an aimed case's faults land: on the chain builds of a fault-free
//! probe recording of the same scenario (the planner is a black box; kvsim's
//! port builds its rungs in another order, spec/dynamo.md §6, so its plan
//! cannot say where the real builds are). Faults drawn uniformly over a sweep
//! mostly land between builds, where the planner's deadline, abort and fence
//! paths have nothing to do (conformance/dynamo/mutants/README.md).

use std::collections::BTreeSet;

use kvsim_core::plan::{Plan, PlanOp};

/// In chain request ids: kvsim's port names them `kvwarm_chain.g…`, 1.6.1
/// `__kvwarm_chain_…`.
const CHAIN_MARK: &str = "kvwarm_chain";

/// Where a probe acted: its chain builds (each run of consecutive steps that
/// schedule a chain prefill chunk is one build), the steps that registered
/// shadows and the steps that injected points.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sites {
    /// (first, last) step of each build, in order.
    pub runs: Vec<(u64, u64)>,
    /// (step, shadows registered there) of each step that registered one, in order.
    pub registrations: Vec<(u64, u32)>,
    /// Steps that injected a point, in order.
    pub injections: Vec<u64>,
}

impl Sites {
    /// No aim.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.registrations.is_empty()
    }

    /// A registration to fail, as (step, registrations let through first):
    /// half the time in a step that registers several shadows and past its
    /// first (the abort then meets shadows already registered: §8.2 bug 12),
    /// else any. None without registrations.
    pub fn registration(&self, rng: &mut dyn rand::RngCore) -> Option<(u64, u32)> {
        use rand::Rng;
        if self.registrations.is_empty() {
            return None;
        }
        let several: Vec<_> = self.registrations.iter().filter(|r| r.1 > 1).collect();
        let pool: Vec<_> = if !several.is_empty() && rng.gen_bool(0.5) {
            several
        } else {
            self.registrations.iter().collect()
        };
        let &(step, n) = pool[rng.gen_range(0..pool.len())];
        Some((step, if n > 1 { rng.gen_range(1..n) } else { 0 }))
    }

    /// A step mid-build, with the build's chains already admitted (an abort
    /// or deadline there meets live chains): a build first, uniformly (the
    /// first, largest rung would take most steps, and the fence and deadline
    /// paths need points measured before), then a step after its first.
    pub fn mid_build(&self, rng: &mut dyn rand::RngCore) -> u64 {
        use rand::Rng;
        let (a, b) = self.runs[rng.gen_range(0..self.runs.len())];
        if b > a {
            rng.gen_range(a + 1..=b)
        } else {
            a
        }
    }

    /// A step that injected a point.
    pub fn injection(&self, rng: &mut dyn rand::RngCore) -> Option<u64> {
        use rand::Rng;
        (!self.injections.is_empty()).then(|| self.injections[rng.gen_range(0..self.injections.len())])
    }

    /// The last chunk step of a build (the step it closes behind).
    pub fn closing(&self, rng: &mut dyn rand::RngCore) -> u64 {
        use rand::Rng;
        self.runs[rng.gen_range(0..self.runs.len())].1
    }
}

/// Where `plan` acted, on rank 0 (attention-DP ranks act in lock-step).
pub fn probe_sites(plan: &Plan) -> Sites {
    let mut chunks = BTreeSet::new();
    let mut registrations: Vec<(u64, u32)> = Vec::new();
    let mut injections: Vec<u64> = Vec::new();
    for st in plan.steps.iter().filter(|st| st.rank == 0) {
        for op in &st.ops {
            match op {
                PlanOp::Schedule {
                    req, num_new_tokens, ..
                } if *num_new_tokens > 0 && req.contains(CHAIN_MARK) => {
                    chunks.insert(st.step);
                }
                PlanOp::RegisterShadow { ok: true, .. } => match registrations.last_mut() {
                    Some((s, n)) if *s == st.step => *n += 1,
                    _ => registrations.push((st.step, 1)),
                },
                PlanOp::InjectPoint { .. } if injections.last() != Some(&st.step) => injections.push(st.step),
                _ => {}
            }
        }
    }
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for s in chunks {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == s => *end = s,
            _ => runs.push((s, s)),
        }
    }
    Sites {
        runs,
        registrations,
        injections,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvsim_core::fpm::scenarios::builtin_scenarios;
    use kvsim_core::fpm::sweep::{plan_sweep_with, SweepOptions};
    use rand::SeedableRng;

    /// kvsim's port plan of a chain layout (its chain ids carry the same mark).
    fn minimax_port_plan() -> Plan {
        let s = builtin_scenarios()
            .into_iter()
            .find(|s| s.name == "minimax-m27-ep")
            .expect("minimax-m27-ep");
        plan_sweep_with(&s, None, &SweepOptions::default()).expect("plans").plan
    }

    #[test]
    fn the_port_plan_of_a_chain_layout_has_builds_and_each_closes_on_a_chunk() {
        let plan = minimax_port_plan();
        let b = probe_sites(&plan);
        assert!(!b.is_empty(), "minimax-m27-ep builds chains");
        // Every successful registration is counted once, at its step.
        let registered = plan
            .steps
            .iter()
            .flat_map(|st| &st.ops)
            .filter(|op| matches!(op, PlanOp::RegisterShadow { ok: true, .. }))
            .count();
        assert!(registered > 0);
        assert_eq!(b.registrations.iter().map(|r| r.1 as usize).sum::<usize>(), registered);
        assert!(
            b.registrations.windows(2).all(|w| w[0].0 < w[1].0),
            "{:?}",
            b.registrations
        );
        // More than one stage: separate runs of steps, in order.
        assert!(b.runs.len() > 1, "{:?}", b.runs);
        assert!(b.runs.windows(2).all(|w| w[0].1 + 1 < w[1].0), "{:?}", b.runs);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..50 {
            let m = b.mid_build(&mut rng);
            assert!(b.runs.iter().any(|&(a, e)| (a < m || a == e) && m <= e), "{m}");
            let c = b.closing(&mut rng);
            assert!(b.runs.iter().any(|&(_, e)| e == c), "{c}");
        }
    }

    #[test]
    fn a_plan_without_chain_schedules_has_no_builds() {
        let mut plan = minimax_port_plan();
        plan.steps.retain(|st| {
            !st.ops
                .iter()
                .any(|op| matches!(op, PlanOp::Schedule { req, .. } if req.contains(CHAIN_MARK)))
        });
        assert!(probe_sites(&plan).runs.is_empty());
    }
}
