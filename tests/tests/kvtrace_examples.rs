//! `kvsim trace` reproduces, byte for byte, the observations real vLLM 0.33.0
//! printed for the kvtrace/1 examples in tests/data/kvtrace_examples/
//! (spec/kvtrace-format.md §6 names them).

use std::path::{Path, PathBuf};

use kvsim_core::kvtrace;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/kvtrace_examples")
}

fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_example_matches_vllm_byte_for_byte() {
    let ex = examples();
    assert_eq!(ex.len(), 4);
    for trace in ex {
        let expected = std::fs::read_to_string(trace.with_extension("obs.jsonl")).unwrap();
        let replay = kvtrace::replay(&std::fs::read_to_string(&trace).unwrap()).unwrap();
        let mut printed = replay.lines.join("\n");
        printed.push('\n');
        assert_eq!(printed, expected, "{}", trace.display());
    }
}

/// Edge cases with the observations real vLLM 0.33.0 printed (from the conformance
/// generator's corpus): every ConfigError and InvalidOp rule, valid-but-unusual
/// ops, the full2x+swa partial-tail keys and the Mamba same-step refusal by hash.
#[test]
fn reference_edge_cases_match_vllm() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/kvtrace_reference");
    let pairs = kvsim_sim::conformance::trace_pairs(&dir).unwrap();
    assert!(pairs.len() >= 40, "{} reference traces", pairs.len());
    for (trace, obs) in pairs {
        let (t, o) = (
            std::fs::read_to_string(&trace).unwrap(),
            std::fs::read_to_string(&obs).unwrap(),
        );
        let d = kvsim_sim::conformance::compare(&trace, &t, &o).unwrap();
        assert!(d.is_none(), "{d:?}");
    }
}
