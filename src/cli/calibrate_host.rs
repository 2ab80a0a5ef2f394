//! `kvsim calibrate REF... --start PROFILE --host-only --out PROFILE`: the start profile with
//! its host rates priced on the machine that ran the reference runs
//! (`kvsim_sim::cost::host_scale`; docs/timing.md, "The host of the machine measured").

use std::process::ExitCode;

use serde_json::{json, Value};

use super::calibrate_cmd::CalibrateArgs;
use super::{read_file, say, CliError};
use kvsim_sim::cost::host_scale::{host_scale, rebase_host};
use kvsim_sim::cost::load_profile;
use kvsim_sim::cost::results::read_gpu_results_with;

fn round4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

pub fn run(a: &CalibrateArgs) -> Result<ExitCode, CliError> {
    let mut profile = load_profile(&a.start).map_err(CliError::Input)?;
    let plans = super::load_plans(&a.plan)?;
    let mut runs = Vec::new();
    for path in &a.results {
        let name = path.display().to_string();
        let r = read_gpu_results_with(&name, &read_file(path)?, &plans).map_err(CliError::Input)?;
        if r.cost.sm_count != profile.sm_count {
            return Err(CliError::Input(format!(
                "{name}: measured on {} SMs, the profile {} is of {} (a host scale is priced on the profile's device)",
                r.cost.sm_count, profile.name, profile.sm_count
            )));
        }
        runs.push((name, r));
    }
    let hs = host_scale(&runs, &profile.params).map_err(CliError::Input)?;
    let start_name = profile.name.clone();
    let start_hash = profile.hash();
    profile.params = rebase_host(&profile.params, hs.scale, hs.wake_scale);
    profile.name = a.name.clone().unwrap_or_else(|| format!("{start_name}+host"));
    profile.description = format!(
        "{start_name} with its host rates x{:.4} and its wake x{:.4}, priced on {} reference run(s) of the machine measured",
        hs.scale,
        hs.wake_scale,
        runs.len()
    );
    let mut rebase = json!({
        "start": start_name,
        "start_hash": start_hash,
        "reference": runs.iter().map(|(n, r)| json!({"file": n, "plan_hash": r.plan_hash})).collect::<Vec<_>>(),
        "windows": hs.windows.len(),
        "scale": round4(hs.scale),
        "wake_scale": round4(hs.wake_scale),
        "ratio_q10": round4(hs.ratio_quantile(0.1)),
        "ratio_q90": round4(hs.ratio_quantile(0.9)),
    });
    // The start's provenance (its bands and calibrated ranges) stays; a rebase of a rebased
    // profile keeps the earlier one under `earlier`.
    let mut prov = match profile.provenance.take() {
        Some(p @ Value::Object(_)) => p,
        Some(other) => json!({ "start_provenance": other }),
        None => json!({}),
    };
    if let Some(e) = prov.get("host_rebase").cloned() {
        rebase["earlier"] = e;
    }
    prov["host_rebase"] = rebase;
    profile.provenance = Some(prov);
    super::calibrate_cmd::write_profile(&profile, &a.out)?;
    say(format_args!(
        "host rates of {start_name} x{:.4}, wake x{:.4} ({} windows; measured/rebased issue time 10-90 %: {:.3}-{:.3}); profile {} {}",
        hs.scale,
        hs.wake_scale,
        hs.windows.len(),
        hs.ratio_quantile(0.1),
        hs.ratio_quantile(0.9),
        profile.name,
        profile.hash()
    ))?;
    Ok(ExitCode::SUCCESS)
}
