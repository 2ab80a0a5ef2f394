//! Attention-DP ranks in lock-step (issue 23): what `kvsim predict --devices N` adds.
//!
//! Each rank's program (`split_ranks`) is priced alone with the profile, as the single-device
//! model prices a whole program. Then, per step:
//!
//! - ranks on one device share it: each takes the sum of that device's ranks' times (the
//!   decode is bandwidth-bound and the kernels overlap; an equal-share, pessimistic term);
//! - the lagging rank (`message_lag` of `k` steps) reaches the exchange `k x lag_step_us` late;
//! - `busy[r]` = the rank's share of its device + its lag; the step ends when the last rank
//!   arrives, plus `exchange_us` (the exchange itself);
//! - `skew` = max busy − min busy, `wait[r]` = max busy − busy[r] + exchange_us.
//!
//! `exchange_us` and `lag_step_us` are parameters, not fitted: a device run reports the
//! measured exchange time per step to set them from.

use kvsim_core::device::lower_plan;
use kvsim_core::device::ranks::{message_lags, split_ranks};
use kvsim_core::plan::Plan;
use serde_json::{json, Value};

use super::{desc, simulate, HostWork, PlanSource, Profile, RunOptions, RunShape};

/// The lock-step's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct RanksModel {
    /// Devices the ranks run on (rank `r` on device `r mod devices`).
    pub devices: usize,
    /// What one exchange round costs (µs).
    pub exchange_us: f64,
    /// The lagging rank's delay per step of lag (µs).
    pub lag_step_us: f64,
}

/// The default cost of one host exchange round (µs): the medians measured on one H200 with
/// `--devices 1` were 3.2-5.8 µs (docs/gpu.md, "Several devices"); NCCL over several devices
/// is unmeasured.
pub const DEFAULT_EXCHANGE_US: f64 = 4.0;

/// The default delay per step of `message_lag` (µs), the same default as the GPU replay's.
pub const DEFAULT_LAG_STEP_US: f64 = 100.0;

fn r4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// Per step of one lock-step: (busy per rank, wait per rank, skew, step time), µs.
pub fn lockstep_step(share_us: &[f64], lag_us: &[f64], exchange_us: f64) -> (Vec<f64>, Vec<f64>, f64, f64) {
    let busy: Vec<f64> = share_us.iter().zip(lag_us).map(|(s, l)| s + l).collect();
    let max = busy.iter().copied().fold(0.0, f64::max);
    let min = busy.iter().copied().fold(f64::INFINITY, f64::min).min(max);
    let wait = busy.iter().map(|b| max - b + exchange_us).collect();
    (busy, wait, max - min, max + exchange_us)
}

/// The `ranks` section of a prediction.
pub fn predict_ranks(plan: &Plan, profile: &Profile, opts: &RunOptions, m: &RanksModel) -> Result<Value, String> {
    let ranks = plan.scenario.dp_ranks as usize;
    if m.devices == 0 || m.devices > ranks {
        return Err(format!(
            "--devices {} for a plan of {ranks} ranks (1 to {ranks})",
            m.devices
        ));
    }
    let whole = lower_plan(plan, &opts.lowering).map_err(|e| e.to_string())?;
    let parts = split_ranks(&whole, ranks as u32);
    let shape = RunShape {
        time_ops: opts.time_ops,
        sync_windows: opts.sync_windows,
        host_work: HostWork::Predicted,
    };
    // Per rank, per step: the rank's program alone on a device (µs).
    let alone: Vec<Vec<f64>> = parts
        .iter()
        .map(|p| {
            let mut src = PlanSource::new(profile);
            let mut steps = desc::describe(plan, &p.lowered, profile.sm_count, &mut src);
            desc::forget_measurements(&mut steps);
            simulate(&steps, &profile.params, shape)
                .steps
                .iter()
                .map(|l| l.value * 1e-3)
                .collect()
        })
        .collect();
    let lags = message_lags(plan);
    let lag_us: Vec<f64> = lags.iter().map(|&k| k as f64 * m.lag_step_us).collect();
    let device_of: Vec<usize> = (0..ranks).map(|r| r % m.devices).collect();
    let (mut total, mut max_skew, mut max_at) = (0.0, 0.0, None);
    let mut wait_total = vec![0.0; ranks];
    let rows: Vec<Value> = (0..whole.program.steps.len())
        .map(|si| {
            let t: Vec<f64> = alone.iter().map(|a| a.get(si).copied().unwrap_or(0.0)).collect();
            let share: Vec<f64> = (0..ranks)
                .map(|r| (0..ranks).filter(|&q| device_of[q] == device_of[r]).map(|q| t[q]).sum())
                .collect();
            let (busy, wait, skew, step_us) = lockstep_step(&share, &lag_us, m.exchange_us);
            total += step_us;
            for (w, x) in wait_total.iter_mut().zip(&wait) {
                *w += x;
            }
            if max_at.is_none() || skew > max_skew {
                (max_skew, max_at) = (skew, Some(whole.steps[si]));
            }
            json!({
                "step": whole.steps[si],
                "rank_device_us": t.iter().map(|&x| r4(x)).collect::<Vec<_>>(),
                "rank_busy_us": busy.iter().map(|&x| r4(x)).collect::<Vec<_>>(),
                "rank_wait_us": wait.iter().map(|&x| r4(x)).collect::<Vec<_>>(),
                "skew_us": r4(skew),
                "step_us": r4(step_us),
            })
        })
        .collect();
    Ok(json!({
        "ranks": ranks,
        "devices": m.devices,
        "device_of_rank": device_of,
        "exchange_us": m.exchange_us,
        "lag_step_us": m.lag_step_us,
        "message_lag_steps": lags,
        "model": "each rank's program priced alone; ranks sharing a device each take the sum of its ranks' times; \
                  busy = share + message_lag x lag_step_us; step = max busy + exchange_us; skew = max - min busy",
        "steps": rows,
        "totals": {
            "step_us": r4(total),
            "max_skew_us": r4(max_skew),
            "max_skew_step": max_at,
            "rank_wait_us": wait_total.iter().map(|&x| r4(x)).collect::<Vec<_>>(),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::lockstep_step;

    #[test]
    fn the_lag_is_the_skew_and_the_others_wait_for_it() {
        // Two ranks of 100 µs each on their own devices; rank 1 lags 2 steps of 50 µs.
        let (busy, wait, skew, step) = lockstep_step(&[100.0, 100.0], &[0.0, 100.0], 30.0);
        assert_eq!(busy, vec![100.0, 200.0]);
        assert_eq!(wait, vec![130.0, 30.0]);
        assert_eq!((skew, step), (100.0, 230.0));
        // No lag, unequal work: the skew is the work's difference.
        let (_, _, skew, step) = lockstep_step(&[80.0, 120.0], &[0.0, 0.0], 10.0);
        assert_eq!((skew, step), (40.0, 130.0));
    }
}
