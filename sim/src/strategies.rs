//! proptest strategies for downstream property suites (feature `proptest`): the swarm's case
//! knobs, built-in scenarios, and a scenario's scaled-down variants. Each shrinks toward the
//! simplest case: the gate's own strategy, every feature and fault off, small numbers.
//!
//! ```
//! use kvsim_sim::api::{self, check_case};
//! use kvsim_sim::strategies::case_spec;
//! use proptest::prelude::*;
//!
//! let base = api::builtin("gpt-oss-tp").unwrap();
//! let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 2, ..Default::default() });
//! runner
//!     .run(&case_spec(), |spec| {
//!         check_case(&base, &spec, None).map_err(|f| TestCaseError::fail(f.to_string()))?;
//!         Ok(())
//!     })
//!     .unwrap();
//! ```

use proptest::prelude::*;

use kvsim_core::fpm::gate::Strategy::{Chain, Native, Synthetic};
use kvsim_core::fpm::scenarios::{builtin_scenarios, BuiltinScenario};

use crate::check::case::{build_scenario, CaseSpec};

/// The knobs of one swarm case ([`CaseSpec`]), every one drawn independently: proptest
/// shrinks toward `auto` (the gate's strategy), fewer features and faults, smaller pools.
/// A draw can ask for a strategy the scenario's gate refuses; [`crate::api::check_case`]
/// then reports it not applicable (`Verdict::NotApplicable`), as the planner refuses it.
pub fn case_spec() -> impl Strategy<Value = CaseSpec> {
    let shape = (
        // auto (the gate's choice) first: proptest shrinks toward it.
        prop::sample::select(vec![None, Some(Native), Some(Chain), Some(Synthetic)]),
        prop::sample::select(vec![24u64, 32, 48, 64, 96, 128]),
        2u32..=8,
        prop::sample::select(vec![8u64, 16, 32, 64, 512]),
        prop::sample::select(vec![4u64, 8, 16]),
        prop::sample::select(vec![4u64, 8, 16, 32]),
        15u32..=130,
        1u64..=6,
        any::<(bool, bool, bool, bool, bool, bool)>(),
    );
    let faults = (
        prop::option::of(1u32..100),
        prop::option::of((0u32..100, 1u64..=4, 0u32..2)),
        prop::option::of((0u32..70, 0u32..2, 0u32..4)),
        prop::option::of((0u32..100, 1u32..25, 0u32..2)),
        prop::option::of((0u32..2, 1u64..=2)),
        any::<u8>(),
        2usize..=8,
        any::<(bool, bool, bool)>(),
    );
    (shape, faults).prop_map(|(c, f)| {
        let (strategy, max_len, max_seqs, batched_tokens, block_size, window, pool_pct, repeats, b) = c;
        let (timeout_pct, delay_outputs, stage_failure, shrink_pool, message_lag, capture, kv_samples, late) = f;
        CaseSpec {
            strategy,
            max_len,
            max_seqs,
            batched_tokens,
            block_size,
            window,
            pool_pct,
            repeats,
            second_group: b.0,
            giant: b.1,
            async_scheduling: b.2,
            random_kda: b.3,
            dp2: b.4,
            timeout_pct,
            delay_outputs,
            stage_failure,
            shrink_pool,
            message_lag,
            capture,
            kv_samples,
            shared_prompt_content: late.0,
            retire_in_flight: late.1,
            reset_probe: late.2,
        }
    })
}

/// One of kvsim's built-in scenarios (shrinks toward the first, `inkling-tp4`).
pub fn builtin_scenario() -> impl Strategy<Value = BuiltinScenario> {
    prop::sample::select(builtin_scenarios())
}

/// Scaled-down, near-capacity variants of `base` as a swarm case makes them (block sizes,
/// windows, model length, slots, budget, pool, a second group, attention DP), each valid:
/// draws that give no valid scenario are filtered out.
pub fn scenario_variant(base: BuiltinScenario) -> impl Strategy<Value = BuiltinScenario> {
    case_spec().prop_filter_map("the draw gives no valid scenario", move |c| {
        build_scenario(&base, &c).ok()
    })
}

/// A built-in scenario and a case of it: the swarm over every layout kvsim knows.
pub fn builtin_case() -> impl Strategy<Value = (BuiltinScenario, CaseSpec)> {
    (builtin_scenario(), case_spec())
}
