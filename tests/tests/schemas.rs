//! Every format's JSON Schema (`kvsim schema NAME`): a reviewed snapshot per schema
//! (`snapshots/schemas/`), the files kvsim writes valid against it, and every object of those
//! files closed: an unknown field or a value of the wrong type anywhere is rejected.
//!
//! Other suites validate what they write too (sweeps, check, cost model, exhaustive, the CLI's);
//! this one covers what no other suite writes and the negative cases.

use std::path::{Path, PathBuf};

use kvsim_cli::schemas::FORMATS;
use kvsim_core::fpm::scenarios::builtin_scenarios;
use kvsim_core::plan::load_plan;
use kvsim_sim::exec::run_plan;
use kvsim_tests::schema::{assert_valid, assert_valid_file, closed_and_typed};
use serde_json::{json, Value};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn json_files(dir: &str, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no {suffix} in {dir}");
    v
}

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

// --- one snapshot test per schema ---------------------------------------------------------

fn snapshot_schema(name: &str) {
    let schema = kvsim_cli::schemas::find(name).unwrap().schema();
    let text = serde_json::to_string_pretty(&schema).unwrap();
    insta::with_settings!({snapshot_path => "../../snapshots/schemas", prepend_module_to_snapshot => false,
                           omit_expression => true}, {
        insta::assert_snapshot!(name, text);
    });
}

macro_rules! schema_snapshots {
    ($($test:ident => $name:literal),* $(,)?) => {
        $( #[test] fn $test() { snapshot_schema($name) } )*
        const SNAPSHOTTED: &[&str] = &[$($name),*];
    };
}

schema_snapshots! {
    schema_plan => "plan",
    schema_artifact => "artifact",
    schema_scenario => "scenario",
    schema_replay => "replay",
    schema_replay_gpu => "replay-gpu",
    schema_predict => "predict",
    schema_profile => "profile",
    schema_compare => "compare",
    schema_check => "check",
    schema_mutants => "mutants",
    schema_kvtrace => "kvtrace",
}

#[test]
fn every_format_has_its_snapshot_test_and_a_valid_draft7_schema() {
    let names: Vec<&str> = FORMATS.iter().map(|f| f.name).collect();
    assert_eq!(SNAPSHOTTED, names.as_slice());
    for f in FORMATS {
        // Checked against the draft-07 meta-schema.
        jsonschema::draft7::meta::validate(&f.schema()).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    }
}

// --- what kvsim writes validates ----------------------------------------------------------

#[test]
fn plans_that_load_validate() {
    let mut files = json_files("tests/data/plans", ".json");
    files.extend(json_files("docs/dynamo/findings", ".plan.json"));
    files.extend(json_files("docs/dynamo/swarm", ".plan.json"));
    files.extend(json_files("docs/gpu-mutant-replays", ".json"));
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        if load_plan(&text).is_ok() {
            assert_valid_file("plan", &f);
        }
    }
}

#[test]
fn scenario_files_validate() {
    for s in builtin_scenarios() {
        assert_valid("scenario", &s.name, &serde_json::to_value(&s).unwrap());
    }
    let mut files = json_files("tests/data/dynamo", ".json");
    files.extend(json_files("tests/data/dynamo/mutants", ".json"));
    files.extend(json_files("docs/dynamo/findings", ".scenario.json"));
    files.extend(json_files("docs/dynamo/swarm", ".scenario.json"));
    for f in files {
        assert_valid_file("scenario", &f);
    }
}

/// The replay results of a passing plan, a violation and a mismatch.
fn replay_results() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for name in [
        "shadow_decode",
        "shadow_one_group",
        "bad_window_evicted",
        "native_full_swa",
    ] {
        let plan =
            load_plan(&std::fs::read_to_string(root().join(format!("tests/data/plans/{name}.json"))).unwrap()).unwrap();
        out.push((name.to_string(), run_plan(&plan).to_json()));
    }
    // A mismatch: the recorded allocation differs from the model's.
    let mut mismatch = read(&root().join("tests/data/plans/shadow_decode.json"));
    let first_schedule = mismatch["steps"][0]["ops"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|o| o["op"] == "schedule")
        .unwrap();
    first_schedule["expect"] = json!({"hit_tokens": 99});
    let plan = load_plan(&mismatch.to_string()).unwrap();
    out.push(("mismatch".into(), run_plan(&plan).to_json()));
    out
}

#[test]
fn replay_results_validate_passed_violation_and_mismatch() {
    let results = replay_results();
    let kinds: Vec<&str> = results
        .iter()
        .map(|(_, r)| r["outcome"]["result"].as_str().unwrap())
        .collect();
    for k in ["passed", "violation", "mismatch"] {
        assert!(kinds.contains(&k), "no {k} among {kinds:?}");
    }
    for (name, r) in &results {
        assert_valid("replay", name, r);
    }
}

#[test]
fn kvtraces_kvsim_generates_validate() {
    for i in 0..40 {
        let t = kvsim_core::kvtrace::gen::generate(7, i);
        assert_valid("kvtrace", &format!("generated trace {i}"), &t);
    }
    for f in json_files("tests/data/kvtrace_examples", ".json") {
        assert_valid_file("kvtrace", &f);
    }
}

#[test]
fn profiles_validate_the_builtin_and_the_calibrated() {
    let h200 = serde_json::to_value(kvsim_sim::cost::Profile::h200()).unwrap();
    assert_valid("profile", "h200", &h200);
    assert_valid_file("profile", &root().join("docs/timing/h200-calibrated.json"));
    assert_valid_file("profile", &root().join("tests/data/profiles/h200-calibrated-s2.json"));
}

// --- every object is closed and typed (kvsim_tests::schema::closed_and_typed) ---------------

#[test]
fn plans_reject_unknown_fields_and_wrong_types_in_every_object() {
    let sweep =
        kvsim_sim::sweep::run_sweep(&kvsim_core::fpm::scenarios::find_scenario("glm53-flash").unwrap(), None).unwrap();
    let sweep_plan = serde_json::to_value(&sweep.plan).unwrap();
    let (o, s) = closed_and_typed("plan", "a sweep plan", &sweep_plan);
    assert!(o >= 15 && s >= 60, "{o} objects, {s} scalars");
    for f in [
        "docs/dynamo/findings/pl-window.plan.json",
        "tests/data/plans/shadow_decode.json",
    ] {
        closed_and_typed("plan", f, &read(&root().join(f)));
    }
}

#[test]
fn artifacts_reject_unknown_fields_and_wrong_types_in_every_object() {
    let run = kvsim_sim::sweep::run_sweep(
        &kvsim_core::fpm::scenarios::find_scenario("minimax-m27-ep").unwrap(),
        None,
    )
    .unwrap();
    let art = serde_json::to_value(&run.artifacts[0]).unwrap();
    let (o, s) = closed_and_typed("artifact", "minimax-m27-ep", &art);
    assert!(o > 20 && s > 80, "{o} objects, {s} scalars");
}

#[test]
fn scenarios_replays_profiles_and_kvtraces_reject_unknown_fields_and_wrong_types() {
    let s = serde_json::to_value(kvsim_core::fpm::scenarios::find_scenario("glm53-flash").unwrap()).unwrap();
    closed_and_typed("scenario", "glm53-flash", &s);
    for (name, r) in replay_results() {
        closed_and_typed("replay", &name, &r);
    }
    closed_and_typed(
        "profile",
        "h200-calibrated",
        &read(&root().join("docs/timing/h200-calibrated.json")),
    );
    closed_and_typed("kvtrace", "generated", &kvsim_core::kvtrace::gen::generate(3, 5));
}

#[test]
fn check_reports_reject_unknown_fields_and_wrong_types_in_every_object() {
    use kvsim_sim::check::suite::{check, CheckConfig, ExhaustiveSummary, Failure};
    let base = kvsim_core::fpm::scenarios::find_scenario("glm53-flash").unwrap();
    let cfg = CheckConfig {
        seed: 1,
        cases: 1,
        shard: (1, 1),
        scenarios: vec![base.clone()],
        only: Some(0),
        jobs: 1,
    };
    let mut report = check(&cfg, &mut |_, _| {});
    // A report with every optional part: a failure (its case knobs and verdict) and the
    // exhaustive pass's summary.
    let spec = kvsim_sim::check::case::CaseSpec::draw(
        &mut <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(3),
        &base,
    );
    report.failures.push(Failure {
        case: 0,
        scenario: base.name.clone(),
        spec,
        verdict: kvsim_sim::check::run::Verdict::Violation {
            invariant: "KV-REF".into(),
            detail: "made up".into(),
        },
        original_ops: 10,
        shrunk_ops: 2,
        plan: None,
    });
    report.exhaustive = Some(ExhaustiveSummary {
        states: 1,
        sequences: "1".into(),
        depth: 1,
        violation: None,
    });
    let (o, s) = closed_and_typed("check", "a check report", &serde_json::to_value(&report).unwrap());
    assert!(o >= 6 && s >= 25, "{o} objects, {s} scalars");
}
