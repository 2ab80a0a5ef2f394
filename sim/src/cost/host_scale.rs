//! Pricing the host per machine (issue 21; docs/timing.md, "The host of the machine measured").
//!
//! A profile carries the host rates of the machines it was fitted on (`host_*` parameters), but
//! machines of the same GPU issue launches at different speeds: on one H100 machine the steps
//! took a median 1.2-1.3x the host time they took on another, their device times unchanged, and the
//! first launch after a window's synchronisation over 3x (docs/timing-history.md, "Pricing the
//! host per machine"). Where launches take as long as the kernels, the GPU waits for them, so
//! one-request points and windows move with the host. Runs of other plans on the machine to be
//! predicted give each window's measured issue time (`host_us`); against the profile's
//! prediction of the same windows they price the machine's host in two parts, the wake and the
//! rest ([`host_scale`]), and [`rebase_host`] applies them.

use super::model::{ix, simulate, HostWork, RunShape};
use super::profile::Params;
use super::results::GpuResults;

/// Windows faster to issue than this (µs) are left out: their time is mostly the clock's reads.
const MIN_WINDOW_HOST_US: f64 = 5.0;

/// One reference window: measured and predicted issue time (µs).
#[derive(Clone, Debug, PartialEq)]
pub struct HostWindow {
    /// The reference run's label.
    pub run: String,
    /// The point.
    pub point: u64,
    /// Measured issue time.
    pub measured_us: f64,
    /// Predicted by the profile being rebased.
    pub predicted_us: f64,
    /// The part of `predicted_us` that is the first launch's wake after a long wait.
    pub wake_us: f64,
}

impl HostWindow {
    /// Measured over predicted.
    pub fn ratio(&self) -> f64 {
        self.measured_us / self.predicted_us
    }
}

/// The machine's host scales and the windows they came from.
#[derive(Clone, Debug, PartialEq)]
pub struct HostScale {
    /// Issuing (launches, events, steps, synchronisation, host work): the median ratio of
    /// measured to predicted issue time over the windows with no wake.
    pub scale: f64,
    /// The first launch's wake after a long wait (`host_wake_ns`, `host_deep_wake_ns`): the
    /// median over the windows with one of what is left of their measured time once the rest
    /// is priced at `scale`, over their predicted wake.
    pub wake_scale: f64,
    /// Every window used, in run then point order.
    pub windows: Vec<HostWindow>,
}

impl HostScale {
    /// The `q` quantile of the windows' ratios after the rebase (nearest rank): how far one
    /// window's issue time still is from its rebased prediction.
    pub fn ratio_quantile(&self, q: f64) -> f64 {
        let mut r: Vec<f64> = self
            .windows
            .iter()
            .map(|w| w.measured_us / (self.scale * (w.predicted_us - w.wake_us) + self.wake_scale * w.wake_us))
            .collect();
        r.sort_by(f64::total_cmp);
        quantile(&r, q)
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Each reference run's windows, measured against `params`' prediction of the same windows
/// (host work priced by the profile, as `kvsim predict` prices it).
pub fn host_windows(runs: &[(String, GpuResults)], params: &Params) -> Result<Vec<HostWindow>, String> {
    let mut out = Vec::new();
    for (label, r) in runs {
        let shape = RunShape {
            time_ops: r.run.time_ops,
            sync_windows: r.run.sync_windows,
            host_work: HostWork::Predicted,
        };
        let t = simulate(&r.cost.steps, params, shape);
        let mut with_host = 0;
        for p in &r.points {
            let Some(measured_us) = p.host_us else { continue };
            with_host += 1;
            let Some(w) = t.windows.iter().find(|w| w.point == p.point) else {
                return Err(format!(
                    "{label}: point {} has no window in the plan's description",
                    p.point
                ));
            };
            let predicted_us = w.host.value / 1000.0;
            let wake_us = (w.host.coef[ix::HOST_WAKE] * params.host_wake_ns
                + w.host.coef[ix::HOST_DEEP_WAKE] * params.host_deep_wake_ns)
                / 1000.0;
            if measured_us >= MIN_WINDOW_HOST_US && predicted_us > wake_us {
                out.push(HostWindow {
                    run: label.clone(),
                    point: p.point,
                    measured_us,
                    predicted_us,
                    wake_us,
                });
            }
        }
        if with_host == 0 {
            return Err(format!(
                "{label}: no window carries host_us (results written before host times were recorded)"
            ));
        }
    }
    Ok(out)
}

/// The machine's host scales from reference runs ([`HostScale`]).
pub fn host_scale(runs: &[(String, GpuResults)], params: &Params) -> Result<HostScale, String> {
    scales_of(host_windows(runs, params)?)
}

/// The two scales of [`HostScale`] from its windows: the rest first, from the windows with no
/// wake (all windows if none lacks one), then the wake from what the rest leaves of the others.
fn scales_of(windows: Vec<HostWindow>) -> Result<HostScale, String> {
    let no_wake: Vec<f64> = windows
        .iter()
        .filter(|w| w.wake_us == 0.0)
        .map(HostWindow::ratio)
        .collect();
    let scale = median(no_wake)
        .or_else(|| median(windows.iter().map(HostWindow::ratio).collect()))
        .ok_or_else(|| format!("no reference window takes {MIN_WINDOW_HOST_US} µs or more to issue"))?;
    let wake: Vec<f64> = windows
        .iter()
        .filter(|w| w.wake_us > 0.0)
        .map(|w| ((w.measured_us - scale * (w.predicted_us - w.wake_us)) / w.wake_us).max(0.0))
        .collect();
    let wake_scale = median(wake).unwrap_or(scale);
    Ok(HostScale {
        scale,
        wake_scale,
        windows,
    })
}

/// The parameters with the host's wake rates (`host_wake_ns`, `host_deep_wake_ns`) multiplied
/// by `wake_scale` and every other host rate (`host_*`) by `scale`, but `host_step_end_ns`: the
/// closing event is also processed on the device, where it is all an empty step measures (a
/// rebase that scaled it priced blind27-chain's empty steps 40 % slow).
pub fn rebase_host(params: &Params, scale: f64, wake_scale: f64) -> Params {
    let mut v = params.to_vec();
    for (i, (x, name)) in v.iter_mut().zip(Params::NAMES).enumerate() {
        if i == ix::HOST_WAKE || i == ix::HOST_DEEP_WAKE {
            *x *= wake_scale;
        } else if name.starts_with("host_") && i != ix::HOST_STEP_END {
            *x *= scale;
        }
    }
    Params::from_vec(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebasing_scales_the_wake_and_the_other_host_rates_but_the_closing_event() {
        let p = Params::h200();
        let q = rebase_host(&p, 1.5, 3.0);
        let mut host = 0;
        for ((a, b), name) in p.to_vec().iter().zip(q.to_vec()).zip(Params::NAMES) {
            if *name == "host_step_end_ns" {
                assert_eq!(*a, b, "{name}");
            } else if *name == "host_wake_ns" || *name == "host_deep_wake_ns" {
                host += 1;
                assert!((b - a * 3.0).abs() < 1e-9, "{name}");
            } else if name.starts_with("host_") {
                host += 1;
                assert!((b - a * 1.5).abs() < 1e-9, "{name}");
            } else {
                assert_eq!(*a, b, "{name}");
            }
        }
        assert_eq!(host, 8, "every host rate of profile.rs but the closing event");
    }

    fn window(point: u64, measured_us: f64, predicted_us: f64, wake_us: f64) -> HostWindow {
        HostWindow {
            run: "ref".into(),
            point,
            measured_us,
            predicted_us,
            wake_us,
        }
    }

    /// Issue 1.2x the profile's, the wake 3x: both come back, and the windows then sit at 1.
    #[test]
    fn the_rest_comes_from_windows_without_a_wake_and_the_wake_from_what_it_leaves() {
        let ws = vec![
            window(1, 24.0, 20.0, 0.0),
            window(2, 12.0, 10.0, 0.0),
            window(3, 30.0, 20.0, 0.0), // an outlier the median ignores
            window(4, 1.2 * 20.0 + 3.0 * 8.0, 28.0, 8.0),
            window(5, 1.2 * 10.0 + 3.0 * 8.0, 18.0, 8.0),
        ];
        let s = scales_of(ws).unwrap();
        assert!((s.scale - 1.2).abs() < 1e-12, "{}", s.scale);
        assert!((s.wake_scale - 3.0).abs() < 1e-12, "{}", s.wake_scale);
        assert!((s.ratio_quantile(0.5) - 1.0).abs() < 1e-12);
        assert!(s.ratio_quantile(1.0) > 1.2, "the outlier stays visible");
    }

    #[test]
    fn without_windows_free_of_a_wake_the_rest_is_every_windows_ratio_and_none_is_an_error() {
        let s = scales_of(vec![window(1, 20.0, 10.0, 4.0)]).unwrap();
        assert_eq!(s.scale, 2.0);
        assert_eq!(s.wake_scale, 2.0);
        assert!(scales_of(Vec::new()).unwrap_err().contains("no reference window"));
    }

    #[test]
    fn the_quantile_is_the_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 2.0);
        assert_eq!(quantile(&v, 0.9), 4.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
