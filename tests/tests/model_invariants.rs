//! Property tests of the KV model's own invariants (spec/invariants.md, KV-*):
//! random realistic traces keep every invariant after every op, and each
//! deliberate model mutation is caught by the invariant it breaks.

use kvsim_core::invariants::model::check_model;
use kvsim_core::invariants::watch::ModelWatch;
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

/// Replay `trace` with the incremental watch and the full scan side by side: until the
/// first violation both give the same verdict after every op. Returns that first op.
fn watch_agrees_with_full_scan(trace: &serde_json::Value, mutant: Option<ModelMutant>) -> Option<usize> {
    let (config, ops) = split_trace(trace).expect("generated traces are kvtraces");
    let mut s = Session::with_mutant(config, mutant).expect("generated configs are valid");
    let mut w = ModelWatch::new(s.kv_mut(), &[]);
    for (i, op) in ops.iter().enumerate() {
        let step = s.apply(i, op);
        let changes = s.kv_mut().take_changes();
        let full = check_model(s.kv(), &[]);
        let watched = w.check(s.kv(), &[], &changes);
        assert_eq!(watched, full, "op {i}: the watch and the full scan disagree");
        if !full.is_empty() {
            return Some(i);
        }
        if step.error.is_some() {
            return None;
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn the_incremental_watch_agrees_with_the_full_scan(
        seed in any::<u64>(),
        index in 0usize..gen::LAYOUTS.len(),
        mutant in prop::option::of(prop::sample::select(ModelMutant::ALL.to_vec())),
    ) {
        let trace = gen::generate(seed, index);
        let first = watch_agrees_with_full_scan(&trace, mutant);
        if mutant.is_none() {
            prop_assert_eq!(first, None);
        }
    }
}

#[test]
fn the_watch_catches_every_corruption_hook_at_once() {
    let trace = gen::generate(3, 0);
    let (config, ops) = split_trace(&trace).unwrap();
    type Corrupt = fn(&mut kvsim_core::kv::BlockPool, u32);
    let corruptions: [(&str, Corrupt); 3] = [
        ("ref count", |p, b| p.corrupt_ref_cnt(b, p.ref_cnt(b) + 1)),
        ("free queue", |p, b| p.corrupt_push_free(b)),
        ("stale key", |p, b| {
            p.corrupt_insert_key(kvsim_core::kv::hash::BlockKey { hash: 99, group: 0 }, b)
        }),
    ];
    for (what, corrupt) in corruptions {
        let mut s = Session::new(config).unwrap();
        let mut w = ModelWatch::new(s.kv_mut(), &[]);
        // Run until some block is referenced, then corrupt it.
        let mut held = None;
        for (i, op) in ops.iter().enumerate() {
            s.apply(i, op);
            let changes = s.kv_mut().take_changes();
            assert!(w.check(s.kv(), &[], &changes).is_empty());
            held = (1..s.kv().pool.num_blocks()).find(|&b| s.kv().pool.ref_cnt(b) > 0);
            if held.is_some() {
                break;
            }
        }
        let b = held.expect("the trace references a block");
        corrupt(&mut s.kv_mut().pool, b);
        let changes = s.kv_mut().take_changes();
        assert!(
            !w.check(s.kv(), &[], &changes).is_empty(),
            "{what} corruption not caught"
        );
    }
}
