//! Property tests of the KV model's own invariants (spec/invariants.md, KV-*):
//! random realistic traces keep every invariant after every op, and each
//! deliberate model mutation is caught by the invariant it breaks.

use kvsim_core::invariants::model::check_model;
use kvsim_core::invariants::InvariantId;
use kvsim_core::kv::ModelMutant;
use kvsim_core::kvtrace::{gen, split_trace, Session};
use proptest::prelude::*;

/// Replay `trace` on a (possibly mutated) model, checking after every op.
/// Returns the invariant IDs violated at the first op that violates any.
fn first_violation(trace: &serde_json::Value, mutant: Option<ModelMutant>) -> Option<(usize, Vec<InvariantId>)> {
    let (config, ops) = split_trace(trace).expect("generated traces are kvtraces");
    let mut s = Session::with_mutant(config, mutant).expect("generated configs are valid");
    for (i, op) in ops.iter().enumerate() {
        let step = s.apply(i, op);
        let v = check_model(s.kv(), &[]);
        if !v.is_empty() {
            return Some((i, v.iter().map(|x| x.id).collect()));
        }
        if step.error.is_some() {
            return None;
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_after_every_op(seed in any::<u64>(), index in 0usize..gen::LAYOUTS.len()) {
        let trace = gen::generate(seed, index);
        prop_assert_eq!(first_violation(&trace, None), None);
    }
}

#[test]
fn generated_traces_replay_without_errors_and_end_empty() {
    for index in 0..64 {
        let trace = gen::generate(7, index);
        let (config, ops) = split_trace(&trace).unwrap();
        let mut s = Session::new(config).unwrap();
        for (i, op) in ops.iter().enumerate() {
            assert_eq!(s.apply(i, op).error, None, "trace {index} op {i}");
        }
        assert_eq!(s.live().count(), 0);
        assert_eq!(s.kv().pool.num_free_blocks() as u32, s.kv().pool.num_blocks() - 1);
        assert_eq!(s.kv().pool.num_cached_keys(), 0, "the final reset succeeded");
    }
}

#[test]
fn every_model_mutant_is_caught_by_the_invariant_it_breaks() {
    for mutant in ModelMutant::ALL {
        let caught = (0..200).find_map(|index| {
            let trace = gen::generate(11, index);
            first_violation(&trace, Some(mutant)).filter(|(_, ids)| ids.contains(&mutant.breaks()))
        });
        assert!(caught.is_some(), "{mutant} was not caught by {}", mutant.breaks());
    }
}

#[test]
fn the_unmutated_model_passes_the_same_traces() {
    for index in 0..200 {
        assert_eq!(first_violation(&gen::generate(11, index), None), None, "trace {index}");
    }
}
