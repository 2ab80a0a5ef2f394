//! `kvsim replay PLAN --backend gpu --devices N` (issue 23): every attention-DP rank on its own
//! thread and executor, rank `r` on device `r mod N`, in lock-step over an exchange; the
//! result's `ranks` section holds per step each rank's device time, busy time, lag and wait,
//! and the skew between ranks.

use kvsim_core::device::ranks::{message_lags, split_ranks};
use kvsim_core::plan::Plan;
use kvsim_gpu::executor::{median, ExecOptions, ExecReport, ExecutorOptions};
use kvsim_gpu::ranks::{merge_reports, run_ranks, ExchangeKind, RankRun, RanksOptions};
use kvsim_gpu::LoweredPlan;
use serde_json::{json, Value};
use std::time::Duration;

use super::CliError;

/// What `--devices`, `--exchange` and `--lag-step-us` ask for.
#[derive(Clone, Debug)]
pub struct RanksReplay {
    /// Devices (rank `r` on device `r mod devices`).
    pub devices: usize,
    /// The exchange.
    pub exchange: ExchangeKind,
    /// The lagging rank's delay per step of `message_lag` (µs).
    pub lag_step_us: f64,
}

/// The default `--lag-step-us` (the cost model's default too).
pub const DEFAULT_LAG_STEP_US: f64 = kvsim_sim::cost::ranks::DEFAULT_LAG_STEP_US;

/// A round waits this long for the other ranks before the run fails (no hang).
const ROUND_TIMEOUT: Duration = Duration::from_secs(120);

/// The flags' problems that need no device: `--devices 0`, more devices than ranks.
pub fn check_args(r: &RanksReplay, plan: &Plan) -> Result<(), CliError> {
    let ranks = plan.scenario.dp_ranks as usize;
    if r.devices == 0 {
        return Err(CliError::Input("--devices must be at least 1".into()));
    }
    if r.devices > ranks {
        return Err(CliError::Input(format!(
            "--devices {} but the plan has {ranks} attention-DP ranks (one rank per device at most)",
            r.devices
        )));
    }
    if !(r.lag_step_us >= 0.0 && r.lag_step_us.is_finite()) {
        return Err(CliError::Input("--lag-step-us must be a number of at least 0".into()));
    }
    Ok(())
}

/// Runs the ranks (warm-up, then `repeat` timed runs); returns one merged report per timed run
/// (as the single-device replay's) and the `ranks` section.
pub fn run(
    plan: &Plan,
    lowered: &LoweredPlan,
    r: &RanksReplay,
    opts: &ExecOptions,
    executor: &ExecutorOptions,
    warmup: u32,
    repeat: u32,
) -> Result<(Vec<ExecReport>, Value), CliError> {
    let ranks = plan.scenario.dp_ranks;
    let parts = split_ranks(lowered, ranks);
    let lags = message_lags(plan);
    let o = RanksOptions {
        devices: r.devices,
        exchange: r.exchange,
        lag_ns: lags.iter().map(|&k| (k as f64 * r.lag_step_us * 1e3) as u64).collect(),
        warmup,
        repeat,
        exec: opts.clone(),
        executor: executor.clone(),
        timeout: ROUND_TIMEOUT,
    };
    let runs = run_ranks(&parts, &o).map_err(super::replay_gpu::gpu_err)?;
    let reports = (0..repeat as usize)
        .map(|i| {
            let per_rank: Vec<&ExecReport> = runs.iter().map(|x| &x.reports[i]).collect();
            merge_reports(&parts, &per_rank)
        })
        .collect();
    Ok((reports, ranks_json(lowered, r, &lags, &runs)))
}

fn us(ns: f32) -> f64 {
    (f64::from(ns) / 1e3 * 1e3).round() / 1e3
}

/// Per step and rank, the medians over the timed runs; the skew and the exchange's own time.
fn ranks_json(lowered: &LoweredPlan, r: &RanksReplay, lags: &[u64], runs: &[RankRun]) -> Value {
    let med =
        |x: &RankRun, f: &dyn Fn(usize) -> Option<f32>| median(&(0..x.records.len()).filter_map(f).collect::<Vec<_>>());
    let steps = lowered.program.steps.len();
    let (mut max_skew, mut max_at) = (0.0f64, None);
    let mut wait_total = vec![0.0f64; runs.len()];
    let rows: Vec<Value> = (0..steps)
        .map(|si| {
            let rec = |x: &RankRun, f: fn(&kvsim_gpu::ranks::StepRecord) -> u64| {
                us(med(x, &|i| x.records[i].get(si).map(|s| f(s) as f32)))
            };
            let device: Vec<f64> = runs
                .iter()
                .map(|x| us(med(x, &|i| x.reports[i].steps.get(si).map(|s| s.device_ms * 1e6))))
                .collect();
            let busy: Vec<f64> = runs.iter().map(|x| rec(x, |s| s.busy_ns)).collect();
            let lag: Vec<f64> = runs.iter().map(|x| rec(x, |s| s.lag_ns)).collect();
            let wait: Vec<f64> = runs.iter().map(|x| rec(x, |s| s.wait_ns)).collect();
            let hi = busy.iter().copied().fold(0.0, f64::max);
            let lo = busy.iter().copied().fold(f64::INFINITY, f64::min).min(hi);
            let skew = hi - lo;
            for (t, w) in wait_total.iter_mut().zip(&wait) {
                *t += w;
            }
            if max_at.is_none() || skew > max_skew {
                (max_skew, max_at) = (skew, lowered.steps.get(si).copied());
            }
            json!({
                "step": lowered.steps.get(si),
                "rank_device_us": device,
                "rank_busy_us": busy,
                "rank_lag_us": lag,
                "rank_wait_us": wait,
                "skew_us": skew,
                // The last rank to arrive waits only for the exchange itself.
                "exchange_us": wait.iter().copied().fold(f64::INFINITY, f64::min),
            })
        })
        .collect();
    let mismatches: Vec<Value> = runs
        .iter()
        .flat_map(|x| &x.mismatches)
        .map(|m| json!({"step": lowered.steps.get(m.step), "rank": m.rank, "detail": m.detail}))
        .collect();
    let exchange: Vec<f64> = rows.iter().filter_map(|v| v["exchange_us"].as_f64()).collect();
    json!({
        "ranks": runs.len(),
        "devices": r.devices,
        "device_of_rank": runs.iter().map(|x| x.device).collect::<Vec<_>>(),
        "device_names": runs.iter().map(|x| x.info.name.clone()).collect::<Vec<_>>(),
        "exchange": match r.exchange { ExchangeKind::Host => "host", ExchangeKind::Nccl => "nccl" },
        "lag_step_us": r.lag_step_us,
        "message_lag_steps": lags,
        "exchange_verified": mismatches.is_empty(),
        "exchange_mismatches": mismatches,
        "steps": rows,
        "totals": {
            "max_skew_us": max_skew,
            "max_skew_step": max_at,
            "exchange_us_median": median(&exchange.iter().map(|&x| x as f32).collect::<Vec<_>>()) as f64,
            "rank_wait_us": wait_total,
        },
        "note": "host clock per rank: busy = leaving the previous exchange to arriving at this one (issuing the step, \
                 waiting for its stream, the message_lag delay); wait = in the exchange; medians over the timed runs; \
                 ranks sharing a device share its SMs",
    })
}

/// One line about the lock-step for the terminal.
pub fn summary(v: &Value) -> String {
    format!(
        "ranks: {} on {} device(s), {} exchange: max skew {:.1} µs at step {}, exchange {:.1} µs per step (median), \
         gathered messages {}",
        v["ranks"],
        v["devices"],
        v["exchange"].as_str().unwrap_or("?"),
        v["totals"]["max_skew_us"].as_f64().unwrap_or(0.0),
        v["totals"]["max_skew_step"],
        v["totals"]["exchange_us_median"].as_f64().unwrap_or(0.0),
        if v["exchange_verified"] == true {
            "verified at every step"
        } else {
            "MISMATCHED"
        }
    )
}
