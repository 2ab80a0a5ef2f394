//! A committed profile is reproducible from committed measurements (issue 21, docs/timing-history.md
//! "One session's corpus"): `h100-c1` and `h100-c2` were fitted on the GPU results packed in
//! `docs/timing/data/h100-2026-12-06.tar.xz`, `h100-c3`, `h100-c4` and `h100-c5` on those and the
//! calibration layouts drawn at random in `h100-2026-12-06-t17.tar.xz`, and each one's provenance (files, start
//! profile, fitted parameters, step balance, prior) is enough to fit it again, parameter for
//! parameter.

use std::path::Path;
use std::process::Command;

use kvsim_tests::{committed_prediction, params_as_committed, repo_root, run_cli as kvsim, unpacked_timing_data};
use serde_json::Value;

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

const CORPUS: &str = "h100-2026-12-06.tar.xz";

#[test]
fn h100_c1_refits_from_its_committed_measurements() {
    refits("h100-c1", &[CORPUS], 45);
}

/// `h100-c1`'s files and parameters with the MoE walk's cold share fitted too.
#[test]
fn h100_c2_refits_from_its_committed_measurements() {
    refits("h100-c2", &[CORPUS], 45);
}

/// `h100-c2`'s recipe with six calibration layouts of at most 24 experts and blind16 measured
/// again (`t17/`, measured in a later session than the corpus).
#[test]
fn h100_c3_refits_from_its_committed_measurements() {
    refits("h100-c3", &[CORPUS, "h100-2026-12-06-t17.tar.xz"], 54);
}

/// `h100-c3`'s files and parameters with the MoE GEMMs' per-SM form (`moe_sm_share_norm` 4 in
/// its start) and the walk's L1 miss rate fitted too.
#[test]
fn h100_c4_refits_from_its_committed_measurements() {
    refits("h100-c4", &[CORPUS, "h100-2026-12-06-t17.tar.xz"], 54);
}

/// `h100-c4`'s recipe with the MoE GEMMs' dealing 60 % balanced random (`moe_deal_random_share`
/// in its start).
#[test]
fn h100_c5_refits_from_its_committed_measurements() {
    refits("h100-c5", &[CORPUS, "h100-2026-12-06-t17.tar.xz"], 54);
}

/// `h100-c5`'s recipe with the MoE GEMMs dealt where the H100 probe placed them
/// (`moe_deal_probed_share` 1 in its start, docs/timing/h100-probed-start.json).
#[test]
fn h100_c6_refits_from_its_committed_measurements() {
    refits("h100-c6", &[CORPUS, "h100-2026-12-06-t17.tar.xz"], 54);
}

/// `h100-c5-probed` is `h100-c5` with the probed dealing set afterwards: the same fitted
/// parameters, bands and provenance, and `moe_deal_probed_share` 1.
#[test]
fn h100_c5_probed_is_h100_c5_with_the_probed_dealing() {
    let docs = repo_root().join("docs/timing");
    let c5 = read(&docs.join("h100-c5.json"));
    let probed = read(&docs.join("h100-c5-probed.json"));
    let mut params = probed["params"].as_object().unwrap().clone();
    assert_eq!(params.remove("moe_deal_probed_share"), Some(Value::from(1.0)));
    assert_eq!(Value::Object(params), c5["params"]);
    assert_eq!(probed["provenance"], c5["provenance"]);
    assert_eq!(probed["resident_ctas"], c5["resident_ctas"]);
}

/// The H200 protocol's recipe rehearsed on the H100's runs of the same 21 plans
/// (`scripts/timing/h200_rehearsal.sh`; docs/timing-history.md, "blind23-blind26 predicted").
#[test]
fn h100_g21_refits_from_its_committed_measurements() {
    refits("h100-g21", &[CORPUS, "h100-2026-12-06-t17.tar.xz"], 21);
}

fn refits(name: &str, archives: &[&str], runs: usize) {
    let dir = unpacked_timing_data(&format!("kvsim-timing-data-{name}"), archives);

    let committed = read(&repo_root().join(format!("docs/timing/{name}.json")));
    let prov = &committed["provenance"];
    let files: Vec<String> = prov["fitted_on"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| dir.join(f["file"].as_str().unwrap()).display().to_string())
        .collect();
    assert_eq!(
        files.len(),
        runs,
        "the suite, the calibration plans, blind2-blind10 and blind11 (and from h100-c3 on t17/); h100-g21 the H200 protocol's 21"
    );
    let fit: Vec<&str> = prov["fitted_params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let start = repo_root().join(prov["start"].as_str().unwrap()).display().to_string();
    let prior = prov["prior"].as_f64().unwrap().to_string();
    let out = dir.join(format!("{name}.refit.json"));
    let fit_list = fit.join(",");
    let out_s = out.display().to_string();
    let mut args: Vec<&str> = vec!["calibrate"];
    args.extend(files.iter().map(String::as_str));
    args.extend(["--start", &start, "--fit", &fit_list, "--prior", &prior]);
    args.extend(["--name", name, "--out", &out_s]);
    assert!(prov["balance_steps"].as_bool().unwrap());
    args.push("--balance-steps");
    assert_eq!(kvsim(&args).unwrap(), 0);

    let refit = read(&out);
    // A parameter added after the profile was written loads as 0 and is not written back.
    assert_eq!(
        params_as_committed(&refit["params"], &committed["params"]),
        committed["params"],
        "every fitted parameter, exactly"
    );
    assert_eq!(refit["provenance"]["bands"], prov["bands"]);
    assert_eq!(refit["provenance"]["mape_after_pct"], prov["mape_after_pct"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A blind set's held-out figures (docs/timing-history.md, "blind19 and blind20 measured") come
/// from the predictions committed before the measurement and the committed runs: comparing them
/// again gives the committed comparison, number for number.
#[test]
fn blind19_and_blind20_comparisons_reproduce_from_committed_predictions_and_runs() {
    blind_sets_reproduce([19, 20], "h100-c4", "h100-c3");
}

/// The same for blind21 and blind22 (docs/timing-history.md, "The MoE GEMMs' dealing partly
/// random"): predicted by `h100-c5` and `h100-c4` before their measurement.
#[test]
fn blind21_and_blind22_comparisons_reproduce_from_committed_predictions_and_runs() {
    blind_sets_reproduce([21, 22], "h100-c5", "h100-c4");
}

/// The same for blind23 and blind24 (docs/timing-history.md, "blind23-blind26 predicted"): predicted
/// by `h100-c5` and `h100-c4` before their measurement.
#[test]
fn blind23_and_blind24_comparisons_reproduce_from_committed_predictions_and_runs() {
    blind_sets_reproduce([23, 24], "h100-c5", "h100-c4");
}

/// The same for blind25 and blind26 (docs/timing-history.md, "blind23-blind26 predicted"): predicted
/// by `h100-c5` and by `h100-g21`, the H200 protocol's recipe on the H100, before their measurement.
#[test]
fn blind25_and_blind26_comparisons_reproduce_from_committed_predictions_and_runs() {
    blind_sets_reproduce([25, 26], "h100-c5", "h100-g21");
}

/// The same for blind27 and blind28 (docs/timing-history.md, "blind27 and blind28"): predicted by
/// `h100-c5` and `h100-g21` before their measurement on an H100 in the eighteenth session.
#[test]
fn blind27_and_blind28_comparisons_reproduce_from_committed_predictions_and_runs() {
    blind_sets_reproduce([27, 28], "h100-c5", "h100-g21");
}

/// The same for blind29 and blind30 (docs/timing-history.md, "blind29 and blind30"): predicted by
/// `h100-c5` and `h100-g21` before their measurement on an H100 in the twentieth session.
#[test]
fn blind29_and_blind30_comparisons_reproduce_from_committed_predictions_and_runs() {
    blind_sets_reproduce([29, 30], "h100-c5", "h100-g21");
}

/// Each of `sets` compared again under `main` (its committed `blindN-compare.json`) and under
/// `also` (`blindN-compare.ALSO.json`).
fn blind_sets_reproduce(sets: [u32; 2], main: &str, also: &str) {
    for set in sets {
        let profiles = [
            (main, format!("blind{set}-compare.json")),
            (also, format!("blind{set}-compare.{also}.json")),
        ];
        comparisons_reproduce(set, &format!("blind{set}-2026-12-07.tar.xz"), &profiles);
    }
}

/// `kvsim compare` of blind set `set`'s committed predictions by each profile and its archived
/// runs writes the committed comparison, byte for byte as JSON.
fn comparisons_reproduce(set: u32, archive: &str, profiles: &[(&str, String)]) {
    let dir = unpacked_timing_data(&format!("kvsim-blind{set}"), &[archive]);
    let docs = repo_root().join(format!("docs/timing/blind{set}"));
    for (profile, committed) in profiles {
        let mut args: Vec<String> = vec!["compare".into()];
        for layout in ["swa", "mamba", "chain"] {
            let rel = format!("blind{set}/blind{set}-{layout}.{profile}");
            args.push(committed_prediction(&rel, &dir).display().to_string());
            args.push(
                dir.join(format!("s{set}/s{set}-{layout}.gpu.json"))
                    .display()
                    .to_string(),
            );
        }
        let out = dir.join(format!("{profile}.compare.json"));
        args.extend(["--out".into(), out.display().to_string()]);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        // The committed comparisons were written without --max-mape: 0 whatever the error.
        assert_eq!(kvsim(&argv).unwrap(), 0);
        assert_eq!(read(&out), read(&docs.join(committed)), "blind{set}, {profile}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The MoE dealing the cost model embeds (`sim/src/cost/deal_table.rs`) is the committed probe's:
/// launch 0 of every `deal2d` grid of docs/timing/data/deal2d-h100-2026-12-07.csv.xz, CTA for
/// CTA, and the probe grouped each grid's CTAs on SMs alike in all three launches.
#[test]
fn the_embedded_moe_dealing_is_the_committed_probes() {
    use kvsim_sim::cost::deal_table::{placement, EXPERTS};
    let csv = Command::new("xz")
        .arg("-dc")
        .arg(repo_root().join("docs/timing/data/deal2d-h100-2026-12-07.csv.xz"))
        .output()
        .expect("xz unpacks the committed probe");
    assert!(csv.status.success());
    let text = String::from_utf8(csv.stdout).unwrap();
    let sharing = |sms: &[u8]| {
        let mut pairs = std::collections::BTreeSet::new();
        for (a, x) in sms.iter().enumerate() {
            for (b, y) in sms.iter().enumerate().skip(a + 1) {
                if x == y {
                    pairs.insert((a, b));
                }
            }
        }
        pairs
    };
    let mut grids = 0;
    for line in text.lines().filter(|l| l.starts_with("deal2d,")) {
        let f: Vec<&str> = line.split(',').collect();
        let (experts, rows): (usize, usize) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        let sms: Vec<u8> = f[4].split(' ').map(|s| s.parse().unwrap()).collect();
        let embedded = placement(experts, rows).expect("every probed grid is embedded");
        if f[3] == "0" {
            assert_eq!(embedded, &sms[..], "grid ({experts}, {rows})");
            grids += 1;
        } else {
            assert_eq!(
                sharing(embedded),
                sharing(&sms),
                "grid ({experts}, {rows}) launch {}",
                f[3]
            );
        }
    }
    assert_eq!(grids, 2 * EXPERTS);
}
