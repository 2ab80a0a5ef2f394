//! The cost model on the CPU (issue 8, docs/timing.md): roofline monotonicity, calibration
//! recovering known parameters from synthetic measurements, `kvsim compare`'s MAPE and
//! divergence, determinism, and bad input answered with exit 2 and no file written.

use std::path::{Path, PathBuf};

use approx::assert_abs_diff_eq;

use kvsim_core::fpm::gate::Strategy;
use kvsim_core::fpm::scenarios::find_scenario;
use kvsim_core::plan::Plan;
use kvsim_sim::cost::compare::{compare_pair, mape_points, worst};
use kvsim_sim::cost::desc::{AttnDesc, Family, OpDesc, StepDesc, DESC_VERSION};
use kvsim_sim::cost::fit::{calibrate, mape, nnls_normal, rows, FitOptions, Measured, RowKind, Sample};
use kvsim_sim::cost::results::{read_gpu_results, read_prediction};
use kvsim_sim::cost::{
    describe_plan, load_profile, predict, run_json, simulate, HostWork, Params, Profile, RunOptions, RunShape,
};
use kvsim_sim::exec::plan_hash;
use kvsim_sim::sweep::run_sweep;
use kvsim_tests::run_cli as kvsim;
use kvsim_tests::schema::{assert_valid, assert_valid_file, closed_and_typed};
use serde_json::{json, Value};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kvsim-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn sweep_plan(name: &str) -> Plan {
    run_sweep(&find_scenario(name).unwrap(), Some(Strategy::Native))
        .unwrap()
        .plan
}

/// The built-in MLA scenario's plan (shared-prefix chains: it has no native strategy).
fn deepseek_chain_plan() -> Plan {
    run_sweep(&find_scenario("deepseek-mla").unwrap(), Some(Strategy::Chain))
        .unwrap()
        .plan
}

fn decode_step(bytes: u64, seqs: u64, ctas: u64) -> StepDesc {
    StepDesc {
        step: 0,
        batch: seqs,
        new_tokens: seqs,
        ctx_tokens: 0,
        kv_bytes: bytes,
        decode_only: true,
        ops: vec![
            OpDesc::WriteKv {
                group: 0,
                rows: seqs * 8,
                elems: seqs * 8 * 512,
                latent: false,
                row_iters: 4,
            },
            OpDesc::Decode {
                launches: vec![AttnDesc {
                    module: "attn_mma_d128_h4".into(),
                    family: Family::Mma,
                    seqs,
                    bytes,
                    ctas,
                    resident: 264,
                    nsplit: 1,
                    split_tokens: 128 * (bytes / (seqs * 8192 * 128)).max(1) as u32,
                    head_dim: 128,
                    head_tile: 4,
                }],
            },
        ],
    }
}

const PLAIN: RunShape = RunShape {
    time_ops: false,
    sync_windows: true,
    host_work: HostWork::Measured,
};

#[test]
fn roofline_time_grows_with_bytes_batch_and_context() {
    let p = Params::h200();
    let mut last = 0.0;
    for mb in [1u64, 4, 16, 64, 256, 1024] {
        let t = simulate(&[decode_step(mb << 20, 8, 128)], &p, PLAIN).steps[0].value;
        assert!(t >= last, "{mb} MB: {t} < {last}");
        last = t;
    }
    // Large reads are bandwidth bound: doubling the bytes nearly doubles the time.
    let t1 = simulate(&[decode_step(1 << 30, 8, 128)], &p, PLAIN).steps[0].value;
    let t2 = simulate(&[decode_step(2 << 30, 8, 128)], &p, PLAIN).steps[0].value;
    assert!(t2 / t1 > 1.9 && t2 / t1 < 2.0, "{t1} {t2}");
    // On a real sweep plan: for each batch size, points with more context cost no less. (With
    // hidden-state routing the model takes the expected routing, a function of the token count;
    // token routing follows the actual token ids, so two points' MoE work can differ.)
    let plan = sweep_plan("inkling-tp4");
    let mut opts = RunOptions::default();
    opts.lowering.moe_input = kvsim_gpu::MoeInput::Hidden;
    let v = predict(&plan, &plan_hash(&plan), &Profile::h200(), &opts).unwrap();
    let mut pts: Vec<(u64, u64, f64)> = v["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["batch"].as_u64().unwrap(),
                q["ctx_tokens"].as_u64().unwrap(),
                q["device_us"].as_f64().unwrap(),
            )
        })
        .collect();
    pts.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    assert!(pts.len() >= 10);
    for w in pts.windows(2) {
        if w[0].0 == w[1].0 {
            assert!(w[1].2 >= w[0].2 * 0.999, "batch {}: {:?} then {:?}", w[0].0, w[0], w[1]);
        }
    }
    // And more requests at the same context per request cost no less.
    let per_req = |b: u64| pts.iter().filter(|q| q.0 == b).map(|q| q.2).fold(0.0f64, f64::max);
    assert!(per_req(32) >= per_req(1));
}

#[test]
fn nnls_recovers_known_coefficients_of_linear_data() {
    // y = 3 a + 0.5 b + 0 c + 7 (the intercept as a column of ones), 40 noiseless rows.
    let truth = [3.0, 0.5, 0.0, 7.0];
    let mut g = vec![vec![0.0; 4]; 4];
    let mut c = vec![0.0; 4];
    for i in 0..40u32 {
        let x = [
            f64::from(i % 7) + 1.0,
            f64::from((i * 13) % 11) * 2.0,
            f64::from((i * 5) % 3),
            1.0,
        ];
        let y: f64 = x.iter().zip(&truth).map(|(a, b)| a * b).sum();
        for r in 0..4 {
            c[r] += x[r] * y;
            for k in 0..4 {
                g[r][k] += x[r] * x[k];
            }
        }
    }
    let fit = nnls_normal(&g, &c);
    for (f, t) in fit.iter().zip(&truth) {
        assert_abs_diff_eq!(*f, *t, epsilon = 1e-8);
    }
}

/// "True" parameters: the defaults, each scaled by a fixed factor in 0.5..2.3.
fn true_params() -> Params {
    let v: Vec<f64> = Params::h200()
        .to_vec()
        .iter()
        .enumerate()
        .map(|(i, x)| x * (0.5 + ((i * 7) % 10) as f64 * 0.2))
        .collect();
    Params::from_vec(&v)
}

fn sample_of(plan: &Plan, time_ops: bool, truth: &Params) -> Sample {
    let opts = RunOptions {
        time_ops,
        ..RunOptions::default()
    };
    let (_, steps) = describe_plan(plan, &Profile::h200(), &opts).unwrap();
    let shape = RunShape { time_ops, ..PLAIN };
    let t = simulate(&steps, truth, shape);
    Sample {
        name: format!("synthetic time_ops={time_ops}"),
        measured: Measured {
            steps: t.steps.iter().map(|l| Some(l.value)).collect(),
            windows: t.windows.iter().map(|w| (w.point, w.device.value)).collect(),
            ops: t.ops.iter().map(|o| (o.step, o.op, o.device.value)).collect(),
        },
        steps,
        shape,
    }
}

/// The fit the recovery tests use: a weak prior, every step weighing the same.
fn fit(samples: &[Sample], start: &Params, free: &[bool]) -> kvsim_sim::cost::fit::FitReport {
    let options = FitOptions {
        prior: 1e-4,
        max_iterations: 80,
        free,
        balance_steps: false,
    };
    calibrate(samples, start, &options)
}

#[test]
fn calibration_recovers_known_parameters_from_synthetic_measurements() {
    let plan = sweep_plan("inkling-tp4");
    let truth = true_params();
    let samples = vec![sample_of(&plan, true, &truth), sample_of(&plan, false, &truth)];
    let start = Params::h200();
    let before = mape(&rows(&samples, &start), None).unwrap();
    let report = fit(&samples, &start, &[true; Params::NAMES.len()]);
    let after = rows(&samples, &report.params);
    let m = mape(&after, None).unwrap();
    assert!(before > 3.0, "the start is off: {before}");
    assert!(m < 0.5, "MAPE after fitting {m}% (before {before}%)");
    assert!(mape(&after, Some(RowKind::Window)).unwrap() < 0.5);
    // The parameters that dominate these steps come back.
    for (name, fitted, t) in [
        ("host_launch_ns", report.params.host_launch_ns, truth.host_launch_ns),
        (
            "attn_mma_byte_ns",
            report.params.attn_mma_byte_ns,
            truth.attn_mma_byte_ns,
        ),
    ] {
        assert!((fitted - t).abs() / t < 0.05, "{name}: fitted {fitted}, true {t}");
    }
}

/// GPU results (`kvsim-replay/1`, backend gpu) as the device would write them, made by the
/// model with `truth`.
fn fake_gpu_results(plan: &Plan, truth: &Params) -> Value {
    let opts = RunOptions::default();
    let (_, steps) = describe_plan(plan, &Profile::h200(), &opts).unwrap();
    let t = simulate(&steps, truth, PLAIN);
    json!({
        "format": "kvsim-replay/1",
        "backend": "gpu",
        "plan_hash": plan_hash(plan),
        "run": run_json(&opts),
        "cost": {"desc_version": DESC_VERSION, "sm_count": 132, "resident_ctas": {}, "steps": steps},
        "steps": steps.iter().zip(&t.steps).map(|(s, l)| json!({"step": s.step, "device_us": l.value / 1000.0})).collect::<Vec<_>>(),
        "points": t.windows.iter().map(|w| json!({"point": w.point, "step_begin": steps[w.step_begin].step,
            "step_end": steps[w.step_end].step, "device_us": w.device.value / 1000.0})).collect::<Vec<_>>(),
    })
}

fn write(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

#[test]
fn calibrate_predict_compare_round_trip_on_the_cli() {
    let plan = sweep_plan("gpt-oss-tp");
    let truth = true_params();
    let (plan_f, gpu_f, prof_f, sim_f, svg_f, cmp_f) = (
        tmp("rt.plan.json"),
        tmp("rt.gpu.json"),
        tmp("rt.profile.json"),
        tmp("rt.sim.json"),
        tmp("rt.svg"),
        tmp("rt.cmp.json"),
    );
    write(&plan_f, &serde_json::to_value(&plan).unwrap());
    write(&gpu_f, &fake_gpu_results(&plan, &truth));
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    assert_eq!(
        kvsim(&["calibrate", &s(&gpu_f), "--out", &s(&prof_f), "--name", "rt"]).unwrap(),
        0
    );
    let prof: Value = serde_json::from_str(&std::fs::read_to_string(&prof_f).unwrap()).unwrap();
    assert_valid("profile", "calibrate --out", &prof);
    assert_valid_file("plan", &plan_f);
    assert_eq!(prof["name"], "rt");
    assert_eq!(prof["format"], "kvsim-profile/1");
    assert_eq!(
        kvsim(&["predict", &s(&plan_f), "--profile", &s(&prof_f), "--out", &s(&sim_f)]).unwrap(),
        0
    );
    let sim: Value = serde_json::from_str(&std::fs::read_to_string(&sim_f).unwrap()).unwrap();
    closed_and_typed("predict", "predict --out", &sim);
    assert_eq!(sim["profile"]["name"], "rt");
    assert_eq!(sim["profile"]["hash"].as_str().map(str::len), Some(16));
    assert_eq!(
        kvsim(&[
            "compare",
            &s(&sim_f),
            &s(&gpu_f),
            "--svg",
            &s(&svg_f),
            "--out",
            &s(&cmp_f),
            "--max-mape",
            "1"
        ])
        .unwrap(),
        0
    );
    let cmp: Value = serde_json::from_str(&std::fs::read_to_string(&cmp_f).unwrap()).unwrap();
    closed_and_typed("compare", "compare --out", &cmp);
    assert!(
        cmp["mape_decode_points_pct"].as_f64().unwrap() < 1.0,
        "{}",
        cmp["mape_decode_points_pct"]
    );
    let svg = std::fs::read_to_string(&svg_f).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("across batch and context"));
    // With the uncalibrated defaults the same comparison fails a 1% bound: exit 1.
    assert_eq!(
        kvsim(&["predict", &s(&plan_f), "--out", &s(&sim_f), "--describe"]).unwrap(),
        0
    );
    let described: Value = serde_json::from_str(&std::fs::read_to_string(&sim_f).unwrap()).unwrap();
    let (objects, _) = closed_and_typed("predict", "predict --describe", &described);
    assert!(
        described["cost"]["steps"][0]["ops"].is_array() && objects > 10,
        "{objects}"
    );
    assert_eq!(
        kvsim(&["compare", &s(&sim_f), &s(&gpu_f), "--max-mape", "1"]).unwrap(),
        1
    );
}

fn prediction(points: &[(u64, f64)], steps: &[f64]) -> Value {
    json!({
        "format": "kvsim-predict/1", "plan_hash": "h", "scenario": "s", "profile": {"name": "p"},
        "run": {"synthetic_kv": "tokens", "moe_input": "token", "time_ops": false, "sync_windows": true},
        "steps": steps.iter().enumerate().map(|(i, t)| json!({"step": i, "device_us": t, "batch": 2,
            "ctx_tokens": 100, "decode_only": true})).collect::<Vec<_>>(),
        "points": points.iter().map(|(p, t)| json!({"point": p, "step_begin": p, "step_end": p, "device_us": t,
            "wall_us": t, "batch": 2, "ctx_tokens": 100 * p, "kv_bytes": 0, "decode_only": true})).collect::<Vec<_>>(),
    })
}

fn measurement(points: &[(u64, f64)], steps: &[f64]) -> Value {
    json!({
        "format": "kvsim-replay/1", "backend": "gpu", "plan_hash": "h",
        "run": {"synthetic_kv": "tokens", "moe_input": "token", "time_ops": false, "sync_windows": true},
        "cost": {"desc_version": DESC_VERSION, "sm_count": 132, "steps": steps.iter().enumerate().map(|(i, _)| json!({
            "step": i, "batch": 0, "new_tokens": 0, "ctx_tokens": 0, "kv_bytes": 0, "decode_only": false, "ops": []})).collect::<Vec<_>>()},
        "steps": steps.iter().enumerate().map(|(i, t)| json!({"step": i, "device_us": t})).collect::<Vec<_>>(),
        "points": points.iter().map(|(p, t)| json!({"point": p, "step_begin": p, "step_end": p, "device_us": t})).collect::<Vec<_>>(),
    })
}

#[test]
fn compare_computes_mape_worst_points_and_the_first_divergence() {
    // Points: +10%, -5%, 0% -> MAPE 5%. Steps: 0%, +2%, -20%, +50% -> first beyond 10% is index 2.
    let pred = prediction(&[(1, 110.0), (2, 95.0), (3, 50.0)], &[10.0, 10.2, 8.0, 15.0]);
    let gpu = measurement(&[(1, 100.0), (2, 100.0), (3, 50.0)], &[10.0, 10.0, 10.0, 10.0]);
    let p = read_prediction("p", &pred.to_string()).unwrap();
    let g = read_gpu_results("g", &gpu.to_string()).unwrap();
    let c = compare_pair("s", &p, &g, 10.0);
    let m = mape_points(&c.points, |_| true).unwrap();
    assert_abs_diff_eq!(m, 5.0, epsilon = 1e-9);
    let w = worst(&c.points, 2);
    assert_eq!((w[0].point, w[1].point), (1, 2));
    assert_abs_diff_eq!(w[0].error_pct, 10.0, epsilon = 1e-9);
    let d = c.first_divergence.expect("a divergence");
    assert_eq!((d.index, d.step), (2, 2));
    assert_abs_diff_eq!(d.error_pct, -20.0, epsilon = 1e-9);
    assert_abs_diff_eq!(c.mape_steps.unwrap(), 18.0, epsilon = 1e-9);
    // The same through the CLI, with its JSON report.
    let (pf, gf, out) = (tmp("c.sim.json"), tmp("c.gpu.json"), tmp("c.out.json"));
    write(&pf, &pred);
    write(&gf, &gpu);
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    assert_eq!(kvsim(&["compare", &s(&pf), &s(&gf), "--out", &s(&out)]).unwrap(), 0);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_abs_diff_eq!(v["mape_points_pct"].as_f64().unwrap(), 5.0, epsilon = 1e-9);
    assert_valid("compare", "compare --out", &v);
    assert_eq!(v["pairs"][0]["first_divergence"]["step"], 2);
    assert_eq!(kvsim(&["compare", &s(&pf), &s(&gf), "--max-mape", "4"]).unwrap(), 1);
    assert_eq!(
        kvsim(&["compare", &s(&pf), &s(&gf), "--max-mape", "4", "--tolerance", "60"]).unwrap(),
        1
    );
}

#[test]
fn predictions_are_deterministic() {
    let plan = sweep_plan("glm53-flash");
    let pf = tmp("det.plan.json");
    write(&pf, &serde_json::to_value(&plan).unwrap());
    let (a, b) = (tmp("det.a.json"), tmp("det.b.json"));
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    for o in [&a, &b] {
        assert_eq!(
            kvsim(&["predict", &s(&pf), "--moe-input", "hidden", "--out", &s(o)]).unwrap(),
            0
        );
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_valid_file("predict", &a);
}

#[test]
fn bad_input_exits_2_and_writes_nothing() {
    let plan = sweep_plan("inkling-tp4");
    let pf = tmp("bad.plan.json");
    write(&pf, &serde_json::to_value(&plan).unwrap());
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    let mut bad_profile = serde_json::to_value(Profile::h200()).unwrap();
    bad_profile["params"]["gpu_kernel_ns"] = json!(-1.0);
    let neg = tmp("neg.profile.json");
    write(&neg, &bad_profile);
    let mut unknown = serde_json::to_value(Profile::h200()).unwrap();
    unknown["params"]["warp_speed_ns"] = json!(1.0);
    let unk = tmp("unknown.profile.json");
    write(&unk, &unknown);
    let not_gpu = tmp("notgpu.json");
    write(&not_gpu, &json!({"format": "kvsim-replay/1", "backend": "sim"}));
    let garbage = tmp("garbage.json");
    std::fs::write(&garbage, "{not json").unwrap();
    let pred = tmp("bad.pred.json");
    write(&pred, &prediction(&[(1, 1.0)], &[1.0]));
    let mut other = measurement(&[(1, 1.0)], &[1.0]);
    other["plan_hash"] = json!("another");
    let other_f = tmp("other.gpu.json");
    write(&other_f, &other);
    let mut zero_kv = measurement(&[(1, 1.0)], &[1.0]);
    zero_kv["run"]["synthetic_kv"] = json!("zero");
    let zero_f = tmp("zero.gpu.json");
    write(&zero_f, &zero_kv);
    let out = tmp("never-written.json");
    let cases: Vec<Vec<String>> = vec![
        vec![
            "predict".into(),
            "/nonexistent/plan.json".into(),
            "--out".into(),
            s(&out),
        ],
        vec!["predict".into(), s(&garbage), "--out".into(), s(&out)],
        vec![
            "predict".into(),
            s(&pf),
            "--profile".into(),
            s(&neg),
            "--out".into(),
            s(&out),
        ],
        vec![
            "predict".into(),
            s(&pf),
            "--profile".into(),
            s(&unk),
            "--out".into(),
            s(&out),
        ],
        vec![
            "predict".into(),
            s(&pf),
            "--profile".into(),
            "/nonexistent.json".into(),
            "--out".into(),
            s(&out),
        ],
        vec!["calibrate".into(), s(&not_gpu), "--out".into(), s(&out)],
        vec!["calibrate".into(), s(&garbage), "--out".into(), s(&out)],
        vec![
            "calibrate".into(),
            s(&not_gpu),
            "--fit".into(),
            "attn_mma_byte_ns,warp_speed_ns".into(),
            "--out".into(),
            s(&out),
        ],
        vec!["calibrate".into(), s(&pred), "--out".into(), s(&out)],
        vec![
            "calibrate".into(),
            s(&other_f),
            "--out".into(),
            s(&out),
            "--prior".into(),
            "-1".into(),
        ],
        vec!["compare".into(), s(&pred), "--out".into(), s(&out)],
        vec!["compare".into(), s(&pred), s(&other_f), "--out".into(), s(&out)],
        vec!["compare".into(), s(&pred), s(&zero_f), "--out".into(), s(&out)],
        vec!["compare".into(), s(&pred), s(&pred), "--out".into(), s(&out)],
        vec![
            "compare".into(),
            s(&pred),
            s(&garbage),
            s(&pred),
            "--out".into(),
            s(&out),
        ],
        vec![
            "replay".into(),
            s(&pf),
            "--out".into(),
            s(&out),
            "--synthetic-kv".into(),
            "zero".into(),
        ],
    ];
    for args in cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        match kvsim(&argv) {
            Err(e) => assert_eq!(e.exit_code(), 2, "{args:?}: {e}"),
            Ok(code) => panic!("{args:?}: exit {code}, expected an input error"),
        }
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

#[test]
fn mla_decodes_are_described_with_the_tensor_core_latent_kernel_one_cta_per_sm() {
    // The built-in profile knows no resident count for the latent module; the kernel's own
    // bound (one CTA of two warp groups per SM) caps the default of two per SM, so the
    // predicted split matches what the executor picks on the device.
    let plan = deepseek_chain_plan();
    let profile = Profile::h200();
    let (_, steps) = describe_plan(&plan, &profile, &RunOptions::default()).unwrap();
    let latent: Vec<&AttnDesc> = steps
        .iter()
        .flat_map(|s| &s.ops)
        .filter_map(|o| match o {
            OpDesc::Decode { launches } => Some(launches),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(!latent.is_empty());
    // Its writes are all latent rows, priced by their own element rate.
    let writes: Vec<bool> = steps
        .iter()
        .flat_map(|s| &s.ops)
        .filter_map(|o| match o {
            OpDesc::WriteKv { latent, .. } => Some(*latent),
            _ => None,
        })
        .collect();
    assert!(!writes.is_empty() && writes.iter().all(|&latent| latent));
    for a in latent {
        assert!(a.module.starts_with("attn_latent_mma_d576_h16_s"), "{}", a.module);
        assert_eq!(a.family, Family::LatentMma);
        assert_eq!(a.resident, u64::from(profile.sm_count));
    }
}

#[test]
fn a_fit_of_named_parameters_moves_only_those() {
    // Measurements made with the MLA kernel's rates off by a known factor: fitting only those
    // two recovers them and leaves every other parameter exactly at the start.
    let plan = deepseek_chain_plan();
    let start = Params::h200();
    let mut truth = start.clone();
    truth.attn_latent_mma_byte_ns *= 1.6;
    truth.attn_latent_mma_iter_ns *= 0.7;
    truth.gpu_kernel_ns *= 1.3; // off too, but not free: the fit must not touch it
    let samples = vec![sample_of(&plan, true, &truth)];
    let free: Vec<bool> = Params::NAMES
        .iter()
        .map(|n| n.starts_with("attn_latent_mma_"))
        .collect();
    let report = fit(&samples, &start, &free);
    let fitted = report.params.to_vec();
    for ((name, f), s) in Params::NAMES.iter().zip(&fitted).zip(start.to_vec()) {
        if !name.starts_with("attn_latent_mma_") {
            assert_eq!(*f, s, "{name} moved");
        }
    }
    let byte = report.params.attn_latent_mma_byte_ns;
    assert!(
        (byte - truth.attn_latent_mma_byte_ns).abs() / truth.attn_latent_mma_byte_ns < 0.1,
        "fitted {byte}, true {}",
        truth.attn_latent_mma_byte_ns
    );
    let before = mape(&rows(&samples, &start), Some(RowKind::Op)).unwrap();
    let after = mape(&rows(&samples, &report.params), Some(RowKind::Op)).unwrap();
    assert!(after < before, "op MAPE {before}% -> {after}%");
}

#[test]
fn a_profile_written_before_the_mla_rates_keeps_its_hash_and_meaning() {
    // Session 2's calibrated profile, as committed then (32 parameters, hash d5778622ea5b0e4c).
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/profiles/h200-calibrated-s2.json");
    let p = load_profile(path.to_str().unwrap()).unwrap();
    assert_eq!(p.hash(), "d5778622ea5b0e4c");
    assert_eq!(p.params.attn_latent_mma_byte_ns, p.params.attn_mma_byte_ns);
    assert_eq!(p.params.attn_latent_mma_iter_ns, p.params.attn_mma_iter_ns);
    assert_eq!(p.params.write_latent_elem_ns, p.params.write_elem_ns);
}

/// `fake_gpu_results` with every step and window off by a deterministic -6..+6 %.
fn noisy_gpu_results(plan: &Plan, truth: &Params) -> Value {
    let mut v = fake_gpu_results(plan, truth);
    for key in ["steps", "points"] {
        for (i, row) in v[key].as_array_mut().unwrap().iter_mut().enumerate() {
            let us = row["device_us"].as_f64().unwrap();
            row["device_us"] = json!(us * (1.0 + 0.06 * ((i as f64) * 1.7).sin()));
        }
    }
    v
}

#[test]
fn calibration_bands_cover_their_quantile_and_unseen_shapes_are_flagged_extrapolated() {
    let plan = sweep_plan("gpt-oss-tp");
    let other = deepseek_chain_plan();
    let f = |n: &str| tmp(&format!("bands.{n}"));
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    write(&f("plan.json"), &serde_json::to_value(&plan).unwrap());
    write(&f("other.json"), &serde_json::to_value(&other).unwrap());
    write(&f("gpu.json"), &noisy_gpu_results(&plan, &true_params()));
    // Runs kvsim, which must succeed, and reads the file it wrote to `out`.
    let ok_then_read = |args: &[&str], out: &str| -> Value {
        let mut argv = args.to_vec();
        let out = s(&f(out));
        argv.extend(["--out", &out]);
        assert_eq!(kvsim(&argv).unwrap(), 0, "{argv:?}");
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
    };
    let (gpu, prof_f) = (s(&f("gpu.json")), s(&f("prof.json")));
    let prof = ok_then_read(&["calibrate", &gpu], "prof.json");
    assert_valid("profile", "calibrate --out", &prof);
    assert_eq!(prof["provenance"]["band_quantile"], 0.9);
    let bands = prof["provenance"]["bands"].as_array().unwrap();
    let step_band = bands.iter().find(|b| b["class"] == "step").unwrap()["pct"]
        .as_f64()
        .unwrap();
    assert!(step_band > 0.5 && step_band < 12.0, "{step_band}");
    let ranges = prof["provenance"]["ranges"].as_array().unwrap();
    assert!(ranges
        .iter()
        .any(|r| r["kernel"].as_str().unwrap().starts_with("decode ")));

    // The calibrated plan: every step's shapes are inside the ranges, every step has a band,
    // and at least the quantile's share of the measured steps falls inside.
    let sim = ok_then_read(&["predict", &s(&f("plan.json")), "--profile", &prof_f], "sim.json");
    closed_and_typed("predict", "predict --out (calibrated profile)", &sim);
    let steps = sim["steps"].as_array().unwrap();
    assert!(steps
        .iter()
        .all(|x| x["shapes"] == "calibrated" && x["band_pct"].is_number()));
    let c = ok_then_read(&["compare", &s(&f("sim.json")), &gpu], "cmp.json");
    closed_and_typed("compare", "compare --out (bands)", &c);
    let cov = &c["band_coverage"]["steps"];
    assert_eq!(cov["total"].as_u64(), Some(steps.len() as u64));
    assert!(cov["pct"].as_f64().unwrap() >= 85.0, "{cov}");

    // A layout the calibration never measured: its kernels are flagged, with why.
    let o = ok_then_read(
        &["predict", &s(&f("other.json")), "--profile", &prof_f],
        "other.sim.json",
    );
    let flagged: Vec<&Value> = o["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["shapes"] == "extrapolated")
        .collect();
    assert!(!flagged.is_empty());
    assert!(flagged
        .iter()
        .all(|x| x["outside"].as_array().is_some_and(|w| !w.is_empty())));
    assert!(o["points"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["shapes"] == "extrapolated"));

    // An uncalibrated profile has no bands and says it cannot judge the shapes.
    let h = ok_then_read(&["predict", &s(&f("plan.json"))], "h200.sim.json");
    assert!(h["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["shapes"] == "unknown" && x.get("band_pct").is_none()));
    let bad = ["calibrate", &gpu, "--out", &s(&f("bad.json")), "--band-quantile", "1.5"];
    assert_eq!(kvsim(&bad).unwrap_err().exit_code(), 2);
    assert!(!f("bad.json").exists());
}
