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

/// The steps of a plan's chain builds: each run of consecutive steps that
/// schedule a chain prefill chunk is one build.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Builds {
    /// (first, last) step of each build, in order.
    pub runs: Vec<(u64, u64)>,
}

impl Builds {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
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

    /// The last chunk step of a build (the step it closes behind).
    pub fn closing(&self, rng: &mut dyn rand::RngCore) -> u64 {
        use rand::Rng;
        self.runs[rng.gen_range(0..self.runs.len())].1
    }
}

/// The chain builds of `plan`.
pub fn chain_builds(plan: &Plan) -> Builds {
    let mut chunks = BTreeSet::new();
    for st in &plan.steps {
        for op in &st.ops {
            if let PlanOp::Schedule {
                req, num_new_tokens, ..
            } = op
            {
                if *num_new_tokens > 0 && req.contains(CHAIN_MARK) {
                    chunks.insert(st.step);
                }
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
    Builds { runs }
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
        let b = chain_builds(&minimax_port_plan());
        assert!(!b.is_empty(), "minimax-m27-ep builds chains");
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
        assert!(chain_builds(&plan).is_empty());
    }
}
