//! kvsim's warm-up planners behind one trait. A planner turns a built-in scenario into a
//! plan (data); executors run plans whatever their source. kvsim ports three (synthetic KV,
//! native exact-context, shared-prefix chains); the real Dynamo planner, recorded, is the other
//! source (`kvsim dynamo`, spec/dynamo.md). `kvsim sweep --strategy` and `kvsim check`'s cases
//! pick a planner by name, and `auto` leaves the choice to the gate.

use super::gate::Strategy;
use super::scenarios::BuiltinScenario;
use super::sweep::{plan_sweep_with, SweepError, SweepOptions, SweepPlan};

/// A source of sweep plans.
pub trait Planner: Sync {
    /// The name `--strategy` takes.
    fn name(&self) -> &'static str;
    /// The strategy it stands for in the gate and the artifact (`kvwarm`).
    fn strategy(&self) -> Strategy;
    /// Plans a whole decode sweep of `s`; `Err` says why it does not apply or failed.
    fn plan(&self, s: &BuiltinScenario, opts: &SweepOptions) -> Result<SweepPlan, SweepError> {
        plan_sweep_with(s, Some(self.strategy()), opts)
    }
}

/// Synthetic ("fake") KV only: the warm-up flag is off.
pub struct SyntheticPlanner;
/// Native exact-context warm-up: each point prefills its own requests to ctx − 1.
pub struct NativePlanner;
/// Shared-prefix chains that decode points borrow through registered shadows.
pub struct ChainPlanner;

impl Planner for SyntheticPlanner {
    fn name(&self) -> &'static str {
        "synthetic"
    }
    fn strategy(&self) -> Strategy {
        Strategy::Synthetic
    }
}

impl Planner for NativePlanner {
    fn name(&self) -> &'static str {
        "native"
    }
    fn strategy(&self) -> Strategy {
        Strategy::Native
    }
}

impl Planner for ChainPlanner {
    fn name(&self) -> &'static str {
        "chain"
    }
    fn strategy(&self) -> Strategy {
        Strategy::Chain
    }
}

/// Every planner kvsim ports.
pub static PLANNERS: [&dyn Planner; 3] = [&SyntheticPlanner, &NativePlanner, &ChainPlanner];

/// The planner called `name`; `Some(None)` for `auto` (the gate chooses).
pub fn by_name(name: &str) -> Option<Option<&'static dyn Planner>> {
    if name == "auto" {
        return Some(None);
    }
    PLANNERS.iter().copied().find(|p| p.name() == name).map(Some)
}

/// The planner for `strategy`.
pub fn for_strategy(strategy: Strategy) -> &'static dyn Planner {
    *PLANNERS
        .iter()
        .find(|p| p.strategy() == strategy)
        .expect("every strategy has a planner")
}

/// Plans `s` with `planner`, or with the gate's choice when `None`.
pub fn plan(planner: Option<&dyn Planner>, s: &BuiltinScenario, opts: &SweepOptions) -> Result<SweepPlan, SweepError> {
    match planner {
        Some(p) => p.plan(s, opts),
        None => plan_sweep_with(s, None, opts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_auto_is_the_gate() {
        for p in PLANNERS {
            assert_eq!(by_name(p.name()).flatten().map(|q| q.name()), Some(p.name()));
            assert_eq!(for_strategy(p.strategy()).name(), p.name());
        }
        assert!(matches!(by_name("auto"), Some(None)));
        assert!(by_name("fifo").is_none());
    }
}
