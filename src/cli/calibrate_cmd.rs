//! `kvsim calibrate RESULTS... --out PROFILE`: fits the cost model's parameters to GPU results
//! (`kvsim replay --backend gpu` output) and writes the profile (docs/timing.md).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use super::{read_file, say, CliError};
use kvsim_sim::cost::bands::{bands, ranges, Calibration};
use kvsim_sim::cost::families::family_residuals;
use kvsim_sim::cost::fit::{calibrate, fit_host_work, mape, rows, FitOptions, RowKind, Sample};
use kvsim_sim::cost::load_profile;
use kvsim_sim::cost::profile::NOT_FITTED_PARAMS;
use kvsim_sim::cost::results::read_gpu_results_with;
use kvsim_sim::output::write_atomic;

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// GPU results (kvsim-replay/1 with backend gpu), one or more.
    #[arg(required = true)]
    pub results: Vec<PathBuf>,
    /// Where to write the fitted profile (kvsim-profile/1).
    #[arg(long)]
    pub out: PathBuf,
    /// The profile to start from (and whose values unexercised parameters keep).
    #[arg(long, default_value = "h200")]
    pub start: String,
    /// The fitted profile's name (default `calibrated`; with --host-only, the start's name and
    /// `+host`).
    #[arg(long)]
    pub name: Option<String>,
    /// Weight of the prior that keeps each parameter near its starting value (relative).
    #[arg(long, default_value_t = 0.01)]
    pub prior: f64,
    /// Most fitting iterations (each re-simulates every run).
    #[arg(long, default_value_t = 60)]
    pub iterations: usize,
    /// Weigh decode-only steps (what a benchmark point retains) as much as all steps with
    /// prefill together; without it every step weighs the same.
    #[arg(long)]
    pub balance_steps: bool,
    /// Plans of the results (repeatable): results of a matching plan are described anew with
    /// this kvsim's model (needed for results made by an older description version).
    #[arg(long)]
    pub plan: Vec<PathBuf>,
    /// Fit only these parameters (comma-separated names, `kvsim-profile/1` params); every other
    /// parameter keeps the start profile's value exactly. Default: all.
    #[arg(long, value_delimiter = ',')]
    pub fit: Vec<String>,
    /// The share of the fitted steps' and windows' errors a predicted band covers (the residual
    /// quantile, in (0, 1]): `kvsim predict` gives every step and point this band.
    #[arg(long, default_value_t = kvsim_sim::cost::bands::DEFAULT_QUANTILE)]
    pub band_quantile: f64,
    /// Fit nothing: price the host of the machine that ran RESULTS (runs of other plans on the
    /// machine to be predicted) in two parts: the first launch's wake after a window's
    /// synchronisation, and every other host rate but the closing event's, each by the median
    /// ratio of the windows' measured issue times to the start profile's prediction of them
    /// (docs/timing.md, "The host of the machine measured"). Bands, ranges and every other
    /// parameter stay the start profile's.
    #[arg(long, conflicts_with_all = ["fit", "balance_steps", "prior", "iterations", "band_quantile"])]
    pub host_only: bool,
}

/// Writes `profile` to `out` whole (pretty JSON, a closing newline) or not at all.
pub(super) fn write_profile(profile: &kvsim_sim::cost::Profile, out: &std::path::Path) -> Result<(), CliError> {
    let mut text = serde_json::to_string_pretty(profile).expect("profiles serialize");
    text.push('\n');
    write_atomic(out, text.as_bytes()).map_err(|e| CliError::Input(format!("cannot write {}: {e}", out.display())))
}

/// One flag per parameter: free to move (all but the settings when `names` is empty).
fn free_params(names: &[String]) -> Result<Vec<bool>, CliError> {
    let all = kvsim_sim::cost::Params::NAMES;
    if let Some(bad) = names.iter().find(|n| !all.contains(&n.as_str())) {
        return Err(CliError::Input(format!(
            "--fit {bad}: not a profile parameter (one of: {})",
            all.join(", ")
        )));
    }
    if let Some(bad) = names.iter().find(|n| NOT_FITTED_PARAMS.contains(&n.as_str())) {
        return Err(CliError::Input(format!(
            "--fit {bad}: a setting, not a rate (set it in the --start profile)"
        )));
    }
    Ok(all
        .iter()
        .map(|n| !NOT_FITTED_PARAMS.contains(n) && (names.is_empty() || names.iter().any(|m| m == n)))
        .collect())
}

pub fn run(a: CalibrateArgs) -> Result<ExitCode, CliError> {
    if !(a.prior.is_finite() && a.prior >= 0.0) {
        return Err(CliError::Input(format!("--prior {} must be finite and >= 0", a.prior)));
    }
    if !(a.band_quantile > 0.0 && a.band_quantile <= 1.0) {
        return Err(CliError::Input(format!(
            "--band-quantile {} must be in (0, 1]",
            a.band_quantile
        )));
    }
    let free = free_params(&a.fit)?;
    if a.host_only {
        return super::calibrate_host::run(&a);
    }
    let mut profile = load_profile(&a.start).map_err(CliError::Input)?;
    let start_provenance = profile.provenance.take();
    let plans = super::load_plans(&a.plan)?;
    let mut samples: Vec<Sample> = Vec::new();
    let mut fitted_on = Vec::new();
    let mut sm_count: Option<u32> = None;
    let mut resident: BTreeMap<String, u64> = BTreeMap::new();
    for path in &a.results {
        let name = path.display().to_string();
        let r = read_gpu_results_with(&name, &read_file(path)?, &plans).map_err(CliError::Input)?;
        if sm_count.is_some_and(|n| n != r.cost.sm_count) {
            return Err(CliError::Input(format!(
                "{name}: {} SMs, but an earlier file was measured on {} (one device per profile)",
                r.cost.sm_count,
                sm_count.unwrap_or(0)
            )));
        }
        sm_count = Some(r.cost.sm_count);
        resident.extend(r.cost.resident_ctas.clone());
        fitted_on.push(json!({"file": name, "plan_hash": r.plan_hash, "run": {
            "synthetic_kv": r.run.synthetic_kv, "moe_input": r.run.moe_input, "time_ops": r.run.time_ops}}));
        samples.push(r.sample(&name));
    }
    if let Some(n) = sm_count {
        profile.sm_count = n;
    }
    profile.resident_ctas.extend(resident);
    let names = kvsim_sim::cost::Params::NAMES;
    let is_free = |name: &str| names.iter().zip(&free).any(|(n, f)| *n == name && *f);
    if is_free("host_work_op_ns") && is_free("host_work_token_ns") {
        if let Some((op, token)) = fit_host_work(&samples) {
            profile.params.host_work_op_ns = op;
            profile.params.host_work_token_ns = token;
        }
    }
    let options = FitOptions {
        prior: a.prior,
        max_iterations: a.iterations,
        free: &free,
        balance_steps: a.balance_steps,
    };
    let report = calibrate(&samples, &profile.params, &options);
    profile.params = report.params.clone();
    profile.name = a.name.clone().unwrap_or_else(|| "calibrated".to_string());
    profile.description = format!(
        "fitted by kvsim calibrate to {} GPU run(s), starting from {}",
        samples.len(),
        a.start
    );
    let fitted = rows(&samples, &profile.params);
    let cal = Calibration {
        quantile: a.band_quantile,
        bands: bands(&samples, &fitted, &profile.params, a.band_quantile),
        ranges: ranges(samples.iter().flat_map(|s| &s.steps)),
    };
    let families = family_residuals(&samples, &fitted);
    let per_file: Vec<serde_json::Value> = samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mine: Vec<_> = fitted.iter().filter(|r| r.sample == i).cloned().collect();
            json!({"file": s.name, "mape_steps_pct": mape(&mine, Some(RowKind::Step)),
                "mape_windows_pct": mape(&mine, Some(RowKind::Window)), "mape_ops_pct": mape(&mine, Some(RowKind::Op))})
        })
        .collect();
    profile.provenance = Some(json!({
        "fitted_on": fitted_on,
        "start": a.start,
        "prior": a.prior,
        "balance_steps": a.balance_steps,
        "iterations": report.iterations,
        "rows": report.rows,
        "mape_before_pct": report.before.iter().cloned().collect::<BTreeMap<_, _>>(),
        "mape_after_pct": report.after.iter().cloned().collect::<BTreeMap<_, _>>(),
        "per_file": per_file,
        "families": families,
        "fitted_params": names.iter().zip(&free).filter(|(_, f)| **f).map(|(n, _)| *n).collect::<Vec<_>>(),
        "band_quantile": cal.quantile,
        "bands": cal.band_rows(),
        "ranges": cal.range_rows(),
    }));
    if let (Some(p), Some(earlier)) = (profile.provenance.as_mut(), start_provenance) {
        p["start_provenance"] = earlier;
    }
    write_profile(&profile, &a.out)?;
    say(format_args!(
        "fitted {} parameters to {} measurements of {} run(s) in {} iterations; profile {} {}",
        free.iter().filter(|f| **f).count(),
        report.rows,
        samples.len(),
        report.iterations,
        profile.name,
        profile.hash()
    ))?;
    for ((k, b), (_, f)) in report.before.iter().zip(&report.after) {
        say(format_args!("  MAPE {k:<8} {b:8.2}% -> {f:6.2}%"))?;
    }
    if !families.is_empty() {
        say("  per-op residuals by kernel family (after the fit):")?;
    }
    for f in &families {
        say(format_args!(
            "    {:<22} {:>6} ops  MAPE {:6.2}%  median {:+6.2}%  p90 |err| {:6.2}%",
            f.family, f.ops, f.mape_pct, f.median_error_pct, f.p90_abs_error_pct
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-SM norm is an exponent no time is linear in: naming it is an input error, and a
    /// fit of every parameter leaves it where the start profile set it.
    #[test]
    fn settings_are_never_fitted() {
        let norm = kvsim_sim::cost::Params::NAMES
            .iter()
            .position(|n| *n == "moe_sm_share_norm")
            .unwrap();
        assert!(matches!(
            free_params(&["moe_sm_share_norm".to_string()]),
            Err(CliError::Input(_))
        ));
        let all = free_params(&[]).unwrap();
        assert!(!all[norm]);
        assert_eq!(all.iter().filter(|f| !**f).count(), NOT_FITTED_PARAMS.len());
        let some = free_params(&["moe_sm_elem_ns".to_string()]).unwrap();
        assert_eq!(some.iter().filter(|f| **f).count(), 1);
    }
}
