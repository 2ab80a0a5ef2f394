//! `kvsim predict PLAN --out FILE`: the cost model's device times for every step, timed window
//! and benchmark point of a plan, as the GPU backend would run it (docs/timing.md).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use kvsim_core::fpm::sweep::load_plan_checked;

use super::replay_cmd::{MoeInputArg, SyntheticKvArg};
use super::{read_file, say, CliError};
use kvsim_sim::cost::{load_profile, predict, RunOptions};
use kvsim_sim::exec::plan_hash;
use kvsim_sim::output::write_atomic;

#[derive(Args, Debug)]
pub struct PredictArgs {
    /// The plan (kvsim-plan/1 JSON).
    pub plan: PathBuf,
    /// Where to write the prediction (kvsim-predict/1 JSON).
    #[arg(long)]
    pub out: PathBuf,
    /// The hardware profile: `h200` (built-in roofline defaults) or a kvsim-profile/1 file
    /// (`kvsim calibrate` writes one).
    #[arg(long, default_value = "h200")]
    pub profile: String,
    /// Predict the GPU run with this synthetic-KV mode (as `kvsim replay --backend gpu`).
    #[arg(long, value_enum, default_value = "tokens")]
    pub synthetic_kv: SyntheticKvArg,
    /// Predict the GPU run with this MoE input (as `kvsim replay --backend gpu`).
    #[arg(long, value_enum, default_value = "token")]
    pub moe_input: MoeInputArg,
    /// Predict a run with per-op timing (`--time-ops`), whose events cost host time.
    #[arg(long)]
    pub time_ops: bool,
    /// Also write what the model costs per step: every op's description and predicted time.
    #[arg(long)]
    pub describe: bool,
    /// Also predict the attention-DP ranks in lock-step on this many devices (as
    /// `kvsim replay --backend gpu --devices N`): the `ranks` section.
    #[arg(long)]
    pub devices: Option<usize>,
    /// With `--devices`: what one exchange round costs (µs).
    #[arg(long, default_value_t = kvsim_sim::cost::ranks::DEFAULT_EXCHANGE_US)]
    pub exchange_us: f64,
    /// With `--devices`: the lagging rank's delay per step of `message_lag` (µs).
    #[arg(long, default_value_t = kvsim_sim::cost::ranks::DEFAULT_LAG_STEP_US)]
    pub lag_step_us: f64,
}

/// The run options of a prediction from the shared GPU flags.
pub fn run_options(synthetic_kv: SyntheticKvArg, moe_input: MoeInputArg, time_ops: bool) -> RunOptions {
    let mut o = RunOptions::default();
    o.lowering.synthetic_kv = match synthetic_kv {
        SyntheticKvArg::Tokens => kvsim_gpu::SyntheticKv::Tokens,
        SyntheticKvArg::Zero => kvsim_gpu::SyntheticKv::Zero,
    };
    o.lowering.moe_input = match moe_input {
        MoeInputArg::Token => kvsim_gpu::MoeInput::Token,
        MoeInputArg::Hidden => kvsim_gpu::MoeInput::Hidden,
    };
    o.time_ops = time_ops;
    o
}

pub fn run(a: PredictArgs) -> Result<ExitCode, CliError> {
    let text = read_file(&a.plan)?;
    let plan = load_plan_checked(&text).map_err(|e| CliError::Input(format!("{}: {e}", a.plan.display())))?;
    let profile = load_profile(&a.profile).map_err(CliError::Input)?;
    let opts = run_options(a.synthetic_kv, a.moe_input, a.time_ops);
    let hash = plan_hash(&plan);
    let mut v =
        predict(&plan, &hash, &profile, &opts).map_err(|e| CliError::Input(format!("{}: {e}", a.plan.display())))?;
    if let Some(devices) = a.devices {
        if !(a.exchange_us >= 0.0 && a.lag_step_us >= 0.0) {
            return Err(CliError::Input(
                "--exchange-us and --lag-step-us must be at least 0".into(),
            ));
        }
        let m = kvsim_sim::cost::ranks::RanksModel {
            devices,
            exchange_us: a.exchange_us,
            lag_step_us: a.lag_step_us,
        };
        v["ranks"] = kvsim_sim::cost::ranks::predict_ranks(&plan, &profile, &opts, &m)
            .map_err(|e| CliError::Input(format!("{}: {e}", a.plan.display())))?;
    }
    if a.describe {
        v["cost"] = kvsim_sim::cost::describe_json(&plan, &profile, &opts)
            .map_err(|e| CliError::Input(format!("{}: {e}", a.plan.display())))?;
    }
    let mut out = serde_json::to_string_pretty(&v).expect("predictions serialize");
    out.push('\n');
    write_atomic(&a.out, out.as_bytes())
        .map_err(|e| CliError::Input(format!("cannot write {}: {e}", a.out.display())))?;
    say(format_args!(
        "predicted {} steps, {} points: {:.1} µs of device time in all (profile {} {}, plan {hash})",
        v["totals"]["steps"],
        v["points"].as_array().map_or(0, Vec::len),
        v["totals"]["device_us"].as_f64().unwrap_or(0.0),
        profile.name,
        profile.hash()
    ))?;
    Ok(ExitCode::SUCCESS)
}
