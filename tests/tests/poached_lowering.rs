//! Issue 21 item 4: the `shared-salts` plan pairs of docs/gpu-mutant-replays.md (the sweep of
//! gpt-oss-tp native with and without the mutant, and the seed-0 case pair of `kvsim check
//! --pairs`) lower for the GPU. With `admit_poached_hits` the poaching request is admitted with
//! its hit, as vLLM would, and its prefill computes fewer tokens than in the fixed plan; without
//! it the lowering stops where it always did. Lowering passing plans is unchanged by the option.

use std::path::{Path, PathBuf};

use kvsim_core::device::{lower_plan, prompt_len, LowerOptions, LoweredPlan, PromptChunk};
use kvsim_core::plan::Plan;
use kvsim_tests::run_cli;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kvsim-poached-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn load(p: &Path) -> Plan {
    kvsim_core::plan::load_plan(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// `kvsim sweep --scenario gpt-oss-tp --strategy native [--mutant shared-salts]`.
fn sweep_pair() -> (Plan, Plan) {
    let d = dir("sweep");
    let (failing, fixed) = (d.join("failing.json"), d.join("fixed.json"));
    let base = [
        "sweep",
        "--scenario",
        "gpt-oss-tp",
        "--strategy",
        "native",
        "--out",
        "/dev/null",
    ];
    let mut args = base.to_vec();
    args.extend(["--mutant", "shared-salts", "--plan-out", failing.to_str().unwrap()]);
    let stopped = run_cli(&args).expect_err("the mutant's sweep stops on PL-NO-POACH");
    assert!(stopped.to_string().contains("PL-NO-POACH"), "{stopped}");
    assert_eq!(stopped.exit_code(), 1);
    let mut args = base.to_vec();
    args.extend(["--plan-out", fixed.to_str().unwrap()]);
    assert_eq!(run_cli(&args).unwrap(), 0);
    let pair = (load(&failing), load(&fixed));
    let _ = std::fs::remove_dir_all(&d);
    pair
}

/// `kvsim check --mutant shared-salts --pairs` (seed 0; `--mutant all` writes the same pair).
fn case_pair() -> (Plan, Plan) {
    let d = dir("case");
    let args = [
        "check",
        "--mutant",
        "shared-salts",
        "--pairs",
        "--plans-dir",
        d.to_str().unwrap(),
    ];
    assert_eq!(run_cli(&args).unwrap(), 0, "the mutant is killed");
    let pair = (
        load(&d.join("shared-salts.failing.json")),
        load(&d.join("shared-salts.fixed.json")),
    );
    let _ = std::fs::remove_dir_all(&d);
    pair
}

fn admitting() -> LowerOptions {
    LowerOptions {
        admit_poached_hits: true,
        ..LowerOptions::default()
    }
}

/// The first PL-NO-POACH the lowering saw: (step, rank, request).
fn poach(l: &LoweredPlan) -> (u64, u32, String) {
    let f = l
        .sim_violations
        .iter()
        .find(|f| f.invariant == "PL-NO-POACH")
        .expect("the finding is still reported");
    let req = f.detail.split_whitespace().next().unwrap().to_string();
    (f.at.step, f.at.rank, req)
}

fn computed(chunks: &[PromptChunk]) -> u64 {
    chunks.iter().map(|c| c.tokens).sum()
}

/// Lowers both plans and returns the poaching request's prompt chunks in each.
fn lowered_prefills(failing: &Plan, fixed: &Plan, mismatch_off: &str) -> (Vec<PromptChunk>, Vec<PromptChunk>, u64) {
    // Off (the default): the lowering stops at the poaching request, as before.
    let off = lower_plan(failing, &LowerOptions::default()).unwrap();
    let (_, detail) = off.mismatch.as_ref().expect("a plan mismatch without the option");
    assert!(detail.contains(mismatch_off), "{detail}");

    let on = lower_plan(failing, &admitting()).unwrap();
    assert_eq!(on.mismatch, None, "{:?}", on.mismatch);
    let (step, rank, req) = poach(&on);
    let fx = lower_plan(fixed, &admitting()).unwrap();
    assert_eq!(fx.mismatch, None);
    assert!(
        fx.sim_violations.is_empty(),
        "the fixed plan passes: {:?}",
        fx.sim_violations
    );
    // The option changes nothing on a plan without the finding.
    let fx_off = lower_plan(fixed, &LowerOptions::default()).unwrap();
    assert_eq!(fx.program, fx_off.program);

    let prompt = prompt_len(failing, rank, &req, step).unwrap();
    assert_eq!(prompt_len(fixed, rank, &req, step), Some(prompt));
    let a = on.prompt_chunks(Some(failing), rank, &req, step, prompt);
    let b = fx.prompt_chunks(Some(fixed), rank, &req, step, prompt);
    assert_eq!(a[0].plan_step, step, "the first chunk is the finding's step: {a:?}");
    assert_eq!(b[0].plan_step, step, "{b:?}");
    assert_eq!(b[0].start, 0);
    assert!(a[0].start > 0, "the failing prefill starts after its hit: {a:?}");
    assert_eq!(
        a[0].start + computed(&a),
        prompt,
        "it computes the rest of the prompt: {a:?}"
    );
    assert_eq!(computed(&b), prompt, "{b:?}");
    (a, b, prompt)
}

#[test]
fn the_sweep_pair_lowers_and_the_poaching_prefill_computes_less() {
    let (failing, fixed) = sweep_pair();
    let (a, b, prompt) = lowered_prefills(&failing, &fixed, "forward of p3.r0.s0 which is not scheduled");
    // gpt-oss-tp: 4093 prompt tokens in chunks of 2048; the 112-token hit shortens the last.
    assert_eq!(prompt, 4093);
    assert_eq!((a.len(), b.len()), (2, 2));
    assert_eq!((a[0].start, a[0].tokens, a[1].tokens), (112, 2048, 1933));
    assert_eq!((b[0].tokens, b[1].tokens), (2048, 2045));
    assert!(a[1].step_tokens < b[1].step_tokens);
    assert!(!a[0].synthetic && !b[0].synthetic);
}

#[test]
fn the_shrunk_plan_of_the_docs_still_lowers() {
    // docs/gpu-mutant-replays/shared-salts.json ends at the poaching `schedule`: admitted now.
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/gpu-mutant-replays/shared-salts.json");
    let plan = load(&p);
    let (off, on) = (
        lower_plan(&plan, &LowerOptions::default()).unwrap(),
        lower_plan(&plan, &admitting()).unwrap(),
    );
    assert_eq!((&off.mismatch, &on.mismatch), (&None, &None));
    assert_eq!(off.program, on.program, "no device work follows the finding");
    assert_eq!(poach(&on).2, "p10.r0.s0");
}

#[test]
fn the_case_pair_lowers_and_the_poaching_prefill_computes_less() {
    let (failing, fixed) = case_pair();
    let (a, b, _) = lowered_prefills(
        &failing,
        &fixed,
        "synthetic KV for 102 tokens needs a freshly scheduled request",
    );
    // The case's poaching request is a fake decode: synthetic KV then its admission token.
    // inkling-tp4, p4.r0.s0 (103 tokens): a 96-token hit leaves 6 of the 102 synthetic ones;
    // its step's other three requests (no hit) compute 102 each.
    assert!(a[0].synthetic && b[0].synthetic, "{a:?} {b:?}");
    assert_eq!(
        (a[0].plan_step, a[0].start, a[0].tokens, a[0].step_tokens),
        (20, 96, 6, 312)
    );
    assert_eq!((b[0].tokens, b[0].step_tokens), (102, 408));
    // The admission token (point 4's timed admission step) is the same in both.
    assert_eq!((a[1].plan_step, a[1].start, a[1].tokens), (21, 102, 1));
    assert_eq!((b[1].plan_step, b[1].start, b[1].tokens), (21, 102, 1));
}
