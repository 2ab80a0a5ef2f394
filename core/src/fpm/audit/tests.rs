//! The audit on the real 1.6.1 fixtures (`tests/data/dynamo_artifacts/`), and every check shown
//! to fail on a mutated fixture with its exact finding id.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::{audit, parse, schema, Report, Severity, CHECKS};

const CHAIN: &str = include_str!("../../../../tests/data/dynamo_artifacts/minimax-m27-ep.chain.art.json");
const MLA: &str = include_str!("../../../../tests/data/dynamo_artifacts/deepseek-mla.chain.art.json");
const GATED: &str = include_str!("../../../../tests/data/dynamo_artifacts/llama31-8b.gate-skipped.art.json");
const FAILED: &str = include_str!("../../../../tests/data/dynamo_artifacts/inkling-tp4-dp2.failed.art.json");
const SPEC: &str = include_str!("../../../../spec/dynamo-artifact.md");

fn fx(text: &str) -> Value {
    parse(text).expect("fixtures are JSON objects")
}

fn ids(r: &Report, s: Severity) -> BTreeSet<&'static str> {
    r.findings.iter().filter(|f| f.severity == s).map(|f| f.id).collect()
}

fn paths(r: &Report, id: &str) -> Vec<String> {
    r.findings
        .iter()
        .filter(|f| f.id == id)
        .map(|f| f.path.clone())
        .collect()
}

/// Asserts the exact sets of error and warning ids.
fn expect(name: &str, v: &Value, errors: &[&str], warnings: &[&str]) -> Report {
    let r = audit(v);
    let want_e: BTreeSet<&str> = errors.iter().copied().collect();
    let want_w: BTreeSet<&str> = warnings.iter().copied().collect();
    assert_eq!(ids(&r, Severity::Error), want_e, "{name}: errors\n{:#?}", r.findings);
    assert_eq!(
        ids(&r, Severity::Warning),
        want_w,
        "{name}: warnings\n{:#?}",
        r.findings
    );
    r
}

fn at<'a>(v: &'a mut Value, ptr: &str) -> &'a mut Value {
    v.pointer_mut(ptr).unwrap_or_else(|| panic!("no {ptr}"))
}

/// Applies `f` to `results[i].point` and to the same point in `iteration_groups[i]`.
fn point(v: &mut Value, i: usize, f: impl Fn(&mut Value)) {
    f(at(v, &format!("/results/{i}/point")));
    f(at(v, &format!("/iteration_groups/{i}/point")));
}

/// Applies `f` to `results[i]`'s FPM and to the same FPM in `iteration_groups[i]`.
fn fpm(v: &mut Value, i: usize, f: impl Fn(&mut Value)) {
    f(at(v, &format!("/results/{i}/fpms/0")));
    f(at(v, &format!("/iteration_groups/{i}/rank_results/0/fpms/0")));
}

fn num(v: &Value) -> f64 {
    v.as_f64().expect("a number")
}

/// Moves the last result to `skipped_points` with `reason`, the way the writer records a skip.
fn skip_last(v: &mut Value, reason: &str) {
    let row = at(v, "/results").as_array_mut().unwrap().pop().unwrap();
    let group = at(v, "/iteration_groups").as_array_mut().unwrap().pop().unwrap();
    *at(v, "/timing/measured_iteration_seconds") =
        json!(num(&v["timing"]["measured_iteration_seconds"]) - num(&group["wall_time"]));
    at(v, "/skipped_points")
        .as_array_mut()
        .unwrap()
        .push(json!({"point": row["point"], "kv_seed_regime": row["kv_seed_regime"], "reason": reason}));
    let n = v["results"].as_array().unwrap().len();
    *at(v, "/coverage/completed_points") = json!(n);
    *at(v, "/coverage/skipped_points") = json!(1);
    *at(v, "/valid") = json!(false);
    *at(v, "/usable") = json!(false);
}

#[test]
fn every_complete_fixture_passes_with_no_finding() {
    for (name, text) in [("chain", CHAIN), ("mla", MLA), ("gate-skipped", GATED)] {
        let r = expect(name, &fx(text), &[], &[]);
        assert!(r.schema_ok && r.consistency_checked && r.passed(), "{name}");
        assert_eq!(r.status.as_deref(), Some("complete"));
    }
}

#[test]
fn the_failed_fixture_passes_the_schema_and_is_reported_as_a_failed_run() {
    let r = expect("failed", &fx(FAILED), &["AU-RUN-FAILED"], &[]);
    assert!(r.schema_ok && r.consistency_checked && !r.passed());
    assert_eq!(r.status.as_deref(), Some("failed"));
    assert_eq!(paths(&r, "AU-RUN-FAILED"), ["$.status"]);
    assert!(
        r.findings[0]
            .message
            .contains("timed out waiting for attention-DP ranks"),
        "{:?}",
        r.findings
    );
}

#[test]
fn dropping_any_required_top_level_field_is_a_missing_field_at_its_path() {
    for f in schema::TOP.iter().filter(|f| f.required) {
        let mut v = fx(CHAIN);
        v.as_object_mut().unwrap().remove(f.name);
        let r = expect(f.name, &v, &["AU-SCHEMA-MISSING"], &[]);
        assert_eq!(paths(&r, "AU-SCHEMA-MISSING"), [format!("$.{}", f.name)]);
        assert!(!r.schema_ok && !r.consistency_checked, "{}", f.name);
    }
}

#[test]
fn a_dropped_nested_field_and_a_wrong_type_name_their_paths() {
    let mut v = fx(CHAIN);
    at(&mut v, "/results/3/fpms/0/scheduled_requests")
        .as_object_mut()
        .unwrap()
        .remove("sum_decode_kv_tokens");
    let r = expect("nested", &v, &["AU-SCHEMA-MISSING"], &[]);
    assert_eq!(
        paths(&r, "AU-SCHEMA-MISSING"),
        ["$.results[3].fpms[0].scheduled_requests.sum_decode_kv_tokens"]
    );

    let mut v = fx(CHAIN);
    *at(&mut v, "/results/0/point/batch_size") = json!("16");
    *at(&mut v, "/kvwarm/points_real_kv") = json!(-1);
    *at(&mut v, "/limits/block_size") = json!(16.5);
    let r = expect("types", &v, &["AU-SCHEMA-TYPE"], &[]);
    assert_eq!(
        paths(&r, "AU-SCHEMA-TYPE"),
        [
            "$.kvwarm.points_real_kv",
            "$.limits.block_size",
            "$.results[0].point.batch_size"
        ]
    );
    assert!(
        r.findings
            .iter()
            .any(|f| f.message == "expected an integer >= 0, found a string"),
        "{:#?}",
        r.findings
    );
}

#[test]
fn unknown_fields_are_warnings_not_failures() {
    let mut v = fx(CHAIN);
    v["measurement_protocol"] = json!({"schema_version": 1});
    v["kvwarm"]["points_gate_skipped"] = json!(0);
    let r = expect("unknown", &v, &[], &["AU-SCHEMA-UNKNOWN"]);
    assert_eq!(
        paths(&r, "AU-SCHEMA-UNKNOWN"),
        ["$.kvwarm.points_gate_skipped", "$.measurement_protocol"]
    );
    assert!(r.passed() && r.consistency_checked);
}

#[test]
fn inconsistent_coverage_counts_and_an_unknown_regime_are_named() {
    let mut v = fx(CHAIN);
    *at(&mut v, "/coverage/skipped_points") = json!(2);
    *at(&mut v, "/results/4/kv_seed_regime") = json!("warm");
    let r = expect("counts+regime", &v, &["AU-COVERAGE-COUNTS", "AU-REGIME-VOCAB"], &[]);
    assert_eq!(paths(&r, "AU-COVERAGE-COUNTS"), ["$.coverage.skipped_points"]);
    assert_eq!(paths(&r, "AU-REGIME-VOCAB"), ["$.results[4].kv_seed_regime"]);
}

#[test]
fn seed_000s_skip_label_is_not_1_6_1_vocabulary() {
    let mut v = fx(GATED);
    *at(&mut v, "/results/0/kv_seed_regime") = json!("skip:dense_model_content_insensitive");
    let r = expect("skip label", &v, &["AU-REGIME-VOCAB"], &[]);
    assert!(
        r.findings[0]
            .message
            .contains("1.6.1 stamps and labels it fake_fallback"),
        "{:?}",
        r.findings
    );
}

#[test]
fn input_that_is_not_json_or_not_an_object_is_refused_with_a_path() {
    let e = parse("{\"schema_version\": 2,").unwrap_err();
    assert_eq!(e.path, "$");
    assert!(
        e.message.starts_with("not valid JSON: ") && e.message.contains("line 1 column"),
        "{e}"
    );
    let e = parse("[1, 2]").unwrap_err();
    assert_eq!(e.to_string(), "$: the top level must be an object, found an array");
    assert!(parse("NaN").is_err());
}

#[test]
fn the_catalog_has_unique_ids_and_the_spec_lists_every_one() {
    let ids: BTreeSet<&str> = CHECKS.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), CHECKS.len(), "duplicate check id");
    for c in CHECKS {
        assert!(
            SPEC.contains(&format!("`{}`", c.id)),
            "spec/dynamo-artifact.md does not list {}",
            c.id
        );
    }
}

type Mutation = fn(&mut Value);

/// (name, fixture, mutation, errors, warnings).
type Case = (
    &'static str,
    &'static str,
    Mutation,
    &'static [&'static str],
    &'static [&'static str],
);

/// One mutation per check (some checks have more).
fn cases() -> Vec<Case> {
    vec![
        (
            "drop coverage",
            CHAIN,
            |v| drop(v.as_object_mut().unwrap().remove("coverage")),
            &["AU-SCHEMA-MISSING"],
            &[],
        ),
        (
            "batch as string",
            CHAIN,
            |v| *at(v, "/results/0/point/batch_size") = json!("16"),
            &["AU-SCHEMA-TYPE"],
            &[],
        ),
        (
            "null dp",
            CHAIN,
            |v| *at(v, "/dp") = json!(null),
            &["AU-SCHEMA-TYPE"],
            &[],
        ),
        (
            "extra field",
            CHAIN,
            |v| v["warmup_evidence"] = json!({}),
            &[],
            &["AU-SCHEMA-UNKNOWN"],
        ),
        (
            "schema 3",
            CHAIN,
            |v| *at(v, "/schema_version") = json!(3),
            &["AU-SCHEMA-VERSION"],
            &[],
        ),
        (
            "status done",
            CHAIN,
            |v| *at(v, "/status") = json!("done"),
            &["AU-SCHEMA-ENUM"],
            &[],
        ),
        (
            "policy",
            CHAIN,
            |v| *at(v, "/measurement_policy/decode") = json!("single_step"),
            &["AU-SCHEMA-ENUM"],
            &[],
        ),
        (
            "short digest",
            CHAIN,
            |v| *at(v, "/grid_digest") = json!("82a2864b77d4ef55e9c5397c50e666bb"),
            &["AU-SCHEMA-FORMAT"],
            &[],
        ),
        ("failed run", FAILED, |_| {}, &["AU-RUN-FAILED"], &[]),
        (
            "partial run",
            CHAIN,
            |v| {
                skip_last(v, "decode_injection_failed");
                // A timeout instead of a skip: nothing was skipped, the last point never ran.
                at(v, "/skipped_points").as_array_mut().unwrap().clear();
                *at(v, "/coverage/skipped_points") = json!(0);
                *at(v, "/status") = json!("partial");
                *at(v, "/stop_reason") = json!("timeout");
                *at(v, "/usable") = json!(true);
            },
            &[],
            &["AU-RUN-PARTIAL"],
        ),
        (
            "complete with a skip",
            CHAIN,
            |v| skip_last(v, "measured_decode_context_mismatch"),
            &[],
            &["AU-RUN-INVALID"],
        ),
        (
            "a failed warm-up replica recorded as a skip (§8.2 bug 26)",
            CHAIN,
            |v| {
                skip_last(v, "decode_injection_failed");
                at(v, "/skipped_points/0/point/sample_reasons")
                    .as_array_mut()
                    .unwrap()
                    .push(json!("eager_warmup"));
            },
            &["AU-REPLICA-KEPT"],
            &["AU-POINT-REASON", "AU-RUN-INVALID"],
        ),
        (
            "error on a complete run",
            CHAIN,
            |v| {
                *at(v, "/error") = json!("boom");
                *at(v, "/valid") = json!(false);
                *at(v, "/usable") = json!(false);
            },
            &["AU-STATUS-ERROR"],
            &["AU-RUN-INVALID"],
        ),
        (
            "failed without error",
            FAILED,
            |v| *at(v, "/error") = json!(null),
            &["AU-RUN-FAILED", "AU-STATUS-ERROR", "AU-STATUS-VALID"],
            &[],
        ),
        (
            "stop reason on complete",
            CHAIN,
            |v| *at(v, "/stop_reason") = json!("timeout"),
            &["AU-STATUS-STOP"],
            &[],
        ),
        (
            "partial without stop reason",
            CHAIN,
            |v| {
                skip_last(v, "x");
                at(v, "/skipped_points").as_array_mut().unwrap().clear();
                *at(v, "/coverage/skipped_points") = json!(0);
                *at(v, "/status") = json!("partial");
                *at(v, "/usable") = json!(true);
            },
            &["AU-STATUS-STOP"],
            &["AU-RUN-PARTIAL"],
        ),
        (
            "valid flipped",
            CHAIN,
            |v| *at(v, "/valid") = json!(false),
            &["AU-STATUS-VALID"],
            &["AU-RUN-INVALID"],
        ),
        (
            "usable flipped",
            CHAIN,
            |v| *at(v, "/usable") = json!(false),
            &["AU-STATUS-USABLE"],
            &["AU-RUN-INVALID"],
        ),
        (
            "no start time",
            CHAIN,
            |v| *at(v, "/timing/started_at") = json!(null),
            &["AU-TIMING-VALID"],
            &[],
        ),
        (
            "measured doubled",
            CHAIN,
            |v| {
                let m = num(&v["timing"]["measured_iteration_seconds"]);
                *at(v, "/timing/measured_iteration_seconds") = json!(2.0 * m);
            },
            &["AU-TIMING-SUM"],
            &[],
        ),
        (
            "completed count",
            CHAIN,
            |v| *at(v, "/coverage/completed_points") = json!(11),
            &["AU-COVERAGE-COUNTS"],
            &[],
        ),
        (
            "expected 13",
            CHAIN,
            |v| {
                *at(v, "/coverage/expected_points") = json!(13);
                *at(v, "/valid") = json!(false);
            },
            &["AU-COVERAGE-TOTAL"],
            &["AU-RUN-INVALID"],
        ),
        (
            "expected 11",
            CHAIN,
            |v| {
                *at(v, "/coverage/expected_points") = json!(11);
                *at(v, "/valid") = json!(false);
            },
            &["AU-COVERAGE-TOTAL"],
            &["AU-RUN-INVALID"],
        ),
        (
            "ids swapped",
            CHAIN,
            |v| {
                for (i, id) in [(0, 2), (1, 1)] {
                    point(v, i, |p| p["benchmark_id"] = json!(id));
                    fpm(v, i, |f| f["counter_id"] = json!(id));
                    *at(v, &format!("/iteration_groups/{i}/benchmark_id")) = json!(id);
                }
            },
            &["AU-POINT-IDS"],
            &[],
        ),
        (
            "id gap",
            CHAIN,
            |v| {
                point(v, 11, |p| p["benchmark_id"] = json!(13));
                fpm(v, 11, |f| f["counter_id"] = json!(13));
                *at(v, "/iteration_groups/11/benchmark_id") = json!(13);
            },
            &["AU-POINT-IDS"],
            &[],
        ),
        (
            "group point",
            CHAIN,
            |v| *at(v, "/iteration_groups/0/point/total_kv_read_tokens") = json!(8193),
            &["AU-GROUP-MATCH"],
            &[],
        ),
        (
            "group ranks",
            CHAIN,
            |v| *at(v, "/iteration_groups/0/expected_dp_ranks") = json!([0, 1]),
            &["AU-GROUP-RANKS"],
            &[],
        ),
        (
            "group wall",
            CHAIN,
            |v| {
                let w = num(&v["iteration_groups"][0]["wall_time"]);
                let m = num(&v["timing"]["measured_iteration_seconds"]);
                *at(v, "/iteration_groups/0/wall_time") = json!(2.0 * w);
                *at(v, "/timing/measured_iteration_seconds") = json!(m + w);
            },
            &["AU-GROUP-WALL"],
            &[],
        ),
        (
            "sync without dp",
            CHAIN,
            |v| *at(v, "/synchronization/enabled") = json!(true),
            &["AU-DP-SYNC"],
            &[],
        ),
        (
            "engine dp rank",
            FAILED,
            |v| *at(v, "/engine/parallel/data_parallel_rank") = json!(1),
            &["AU-RUN-FAILED", "AU-DP-SYNC"],
            &[],
        ),
        (
            "configured batch",
            CHAIN,
            |v| *at(v, "/limits/configured_max_batch_size") = json!(32),
            &["AU-LIMITS-SELF"],
            &[],
        ),
        (
            "negotiated above local",
            CHAIN,
            |v| *at(v, "/capacity/common/max_num_running_reqs") = json!(128),
            &["AU-LIMITS-SELF"],
            &[],
        ),
        (
            "feasible 32",
            CHAIN,
            |v| *at(v, "/limits/feasible_max_batch_size") = json!(32),
            &["AU-LIMITS-BATCH"],
            &[],
        ),
        (
            "model length",
            GATED,
            |v| *at(v, "/capacity/common/max_model_len") = json!(8191),
            &["AU-LIMITS-CONTEXT"],
            &[],
        ),
        (
            "one block short",
            CHAIN,
            |v| *at(v, "/capacity/common/usable_blocks_with_watermark") = json!(217998),
            &["AU-LIMITS-BLOCKS"],
            &[],
        ),
        (
            "rows",
            CHAIN,
            |v| point(v, 0, |p| p["rows"] = json!([[0, 8192]])),
            &["AU-POINT-ROWS"],
            &[],
        ),
        (
            "prefill mode",
            CHAIN,
            |v| *at(v, "/config/mode") = json!("prefill"),
            &["AU-POINT-MODE"],
            &[],
        ),
        (
            "capture size",
            CHAIN,
            |v| point(v, 0, |p| p["expected_capture_size"] = json!(16)),
            &["AU-POINT-CUDAGRAPH"],
            &[],
        ),
        (
            "odd reason",
            CHAIN,
            |v| {
                point(v, 0, |p| {
                    p["sample_reasons"].as_array_mut().unwrap().push(json!("mystery"))
                })
            },
            &[],
            &["AU-POINT-REASON"],
        ),
        (
            "unknown regime",
            CHAIN,
            |v| *at(v, "/results/0/kv_seed_regime") = json!("warm"),
            &["AU-REGIME-VOCAB"],
            &[],
        ),
        (
            "fake row labelled real",
            CHAIN,
            |v| *at(v, "/results/6/kv_seed_regime") = json!("real_kv"),
            &["AU-REGIME-STAMP"],
            &[],
        ),
        (
            "decode row labelled prefix",
            GATED,
            |v| *at(v, "/results/0/kv_seed_regime") = json!("fake_prefix"),
            &["AU-REGIME-STAMP"],
            &[],
        ),
        (
            "skip reason",
            CHAIN,
            |v| skip_last(v, "bored"),
            &["AU-SKIP-REASON"],
            &["AU-RUN-INVALID"],
        ),
        (
            "ineligible without reason",
            GATED,
            |v| *at(v, "/kvwarm/skip_reason") = json!(null),
            &["AU-KVWARM-GATE"],
            &[],
        ),
        (
            "envelope verdict",
            GATED,
            |v| *at(v, "/capacity/common/kvwarm_eligible") = json!(true),
            &["AU-KVWARM-GATE"],
            &[],
        ),
        (
            "no kvwarm block",
            GATED,
            |v| drop(v.as_object_mut().unwrap().remove("kvwarm")),
            &["AU-KVWARM-GATE"],
            &[],
        ),
        (
            "real count on a gated run",
            GATED,
            |v| {
                *at(v, "/kvwarm/points_real_kv") = json!(1);
                *at(v, "/kvwarm/points_fake_fallback") = json!(15);
            },
            &["AU-KVWARM-REAL"],
            &[],
        ),
        (
            "fake count",
            CHAIN,
            |v| *at(v, "/kvwarm/points_fake_fallback") = json!(8),
            &["AU-KVWARM-COUNTS"],
            &[],
        ),
        (
            "fake count below rows",
            CHAIN,
            |v| *at(v, "/kvwarm/points_fake_fallback") = json!(5),
            &["AU-KVWARM-COUNTS"],
            &[],
        ),
        (
            "stage over slots",
            CHAIN,
            |v| *at(v, "/kvwarm/stages/0/batch") = json!(40),
            &["AU-KVWARM-STAGES"],
            &[],
        ),
        (
            "stage over depth cap",
            MLA,
            |v| *at(v, "/kvwarm/stages/2/depth") = json!(16381),
            &["AU-KVWARM-STAGES"],
            &[],
        ),
        (
            "shallow stage",
            CHAIN,
            |v| *at(v, "/kvwarm/stages/2/depth") = json!(100),
            &["AU-KVWARM-COVER"],
            &[],
        ),
        (
            "two fpms",
            CHAIN,
            |v| {
                let f = v["results"][0]["fpms"][0].clone();
                at(v, "/results/0/fpms").as_array_mut().unwrap().push(f);
            },
            &["AU-FPM-COUNT", "AU-GROUP-MATCH"],
            &[],
        ),
        (
            "fpm version",
            CHAIN,
            |v| fpm(v, 0, |f| f["version"] = json!(2)),
            &["AU-FPM-IDENTITY"],
            &[],
        ),
        (
            "fpm batch",
            CHAIN,
            |v| fpm(v, 0, |f| f["scheduled_requests"]["num_decode_requests"] = json!(15)),
            &["AU-FPM-SHAPE"],
            &[],
        ),
        (
            "fpm variance",
            CHAIN,
            |v| fpm(v, 6, |f| f["scheduled_requests"]["var_decode_kv_tokens"] = json!(0.0)),
            &["AU-FPM-VARIANCE"],
            &[],
        ),
        (
            "fpm wall",
            CHAIN,
            |v| {
                let w = num(&v["iteration_groups"][0]["wall_time"]);
                let m = num(&v["timing"]["measured_iteration_seconds"]);
                fpm(v, 0, |f| f["wall_time"] = json!(0.0));
                *at(v, "/iteration_groups/0/wall_time") = json!(0.0);
                *at(v, "/timing/measured_iteration_seconds") = json!(m - w);
            },
            &["AU-FPM-WALL"],
            &[],
        ),
        (
            "not steady",
            CHAIN,
            |v| fpm(v, 6, |f| f["kvwarm_steady_sample"] = json!(false)),
            &["AU-FPM-STEADY"],
            &[],
        ),
        (
            "real without median",
            CHAIN,
            |v| {
                fpm(v, 0, |f| {
                    drop(f.as_object_mut().unwrap().remove("kvwarm_giant_median_of"))
                })
            },
            &["AU-FPM-STEADY"],
            &[],
        ),
        (
            "median on a small fake",
            CHAIN,
            |v| fpm(v, 8, |f| f["kvwarm_giant_median_of"] = json!(3)),
            &["AU-FPM-STEADY"],
            &[],
        ),
    ]
}

#[test]
fn every_check_fails_on_its_mutation_with_its_exact_id() {
    let mut shown = BTreeSet::new();
    let mut wrong = Vec::new();
    for (name, text, mutate, errors, warnings) in cases() {
        let mut v = fx(text);
        mutate(&mut v);
        let r = audit(&v);
        let (e, w) = (ids(&r, Severity::Error), ids(&r, Severity::Warning));
        if e != errors.iter().copied().collect() || w != warnings.iter().copied().collect() {
            wrong.push(format!("{name}: errors {e:?} warnings {w:?}\n{:#?}", r.findings));
        }
        shown.extend(errors.iter().chain(warnings.iter()).copied());
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let catalog: BTreeSet<&str> = CHECKS.iter().map(|c| c.id).collect();
    let unshown: Vec<&&str> = catalog.difference(&shown).collect();
    assert!(unshown.is_empty(), "checks never shown to fail: {unshown:?}");
}

#[test]
fn the_report_is_deterministic_and_grouped_in_catalog_order() {
    let mut v = fx(CHAIN);
    *at(&mut v, "/kvwarm/points_fake_fallback") = json!(8);
    *at(&mut v, "/coverage/completed_points") = json!(11);
    v["zzz"] = json!(1);
    let a = audit(&v);
    let b = audit(&v.clone());
    assert_eq!(a.findings, b.findings);
    let order: Vec<&str> = a.findings.iter().map(|f| f.id).collect();
    assert_eq!(order, ["AU-SCHEMA-UNKNOWN", "AU-COVERAGE-COUNTS", "AU-KVWARM-COUNTS"]);
}
