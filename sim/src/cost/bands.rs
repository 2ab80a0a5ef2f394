//! What a calibration says about a prediction it did not see (issue 21): an uncertainty band per
//! step and point from the calibration's own residuals, and whether a step's kernel shapes lie
//! inside the shapes the calibration measured or are extrapolated.
//!
//! `kvsim calibrate` stores both in the profile's `provenance` (`bands`, `ranges`; not hashed);
//! `kvsim predict` attaches them; `kvsim compare` counts how many measurements fall inside.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::desc::{OpDesc, StepDesc};
use super::fit::{Row, RowKind, Sample};
use super::model::simulate;
use super::profile::{Params, Profile};

/// The residual quantile a band covers unless `kvsim calibrate --band-quantile` says otherwise.
pub const DEFAULT_QUANTILE: f64 = 0.9;

/// Fewer residuals than this give no band of their own (the kind's overall band is used).
const MIN_ROWS: usize = 5;

/// Per kernel shape key (`decode attn_mma_d128_h4`, `moe e64 k4 h2048 f768`, ...), per feature,
/// the smallest and largest value the calibration measured.
pub type Ranges = BTreeMap<String, BTreeMap<String, [u64; 2]>>;

/// One band: the residual quantile of a class of rows, in percent of the measured time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Band {
    /// `|predicted - measured| / measured` at the quantile, in percent.
    pub pct: f64,
    /// Residuals it was taken over.
    pub rows: usize,
}

/// What `kvsim calibrate` records: the quantile, the bands per class, the calibrated ranges.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The residual quantile every band covers.
    pub quantile: f64,
    /// Per class (`step decode`, `step other`, `window decode`, `window other`, and the
    /// kinds overall, `step` and `window`).
    pub bands: BTreeMap<String, Band>,
    /// The kernel shapes measured.
    pub ranges: Ranges,
}

/// The shape keys and features of one op (ops that launch nothing have none).
pub fn op_shapes(op: &OpDesc) -> Vec<(String, Vec<(&'static str, u64)>)> {
    match op {
        OpDesc::WriteKv { rows, latent, .. } => {
            let key = if *latent { "write_kv latent" } else { "write_kv" };
            vec![(key.into(), vec![("rows", *rows)])]
        }
        OpDesc::Decode { launches } => launches
            .iter()
            .map(|l| {
                let positions = u64::from(l.nsplit) * u64::from(l.split_tokens);
                (
                    format!("decode {}", l.module),
                    vec![("seqs", l.seqs), ("positions", positions)],
                )
            })
            .collect(),
        OpDesc::StateUpdate { serial, .. } => vec![("state_update".into(), vec![("serial", *serial)])],
        OpDesc::ZeroBlocks { blocks, .. } if *blocks > 0 => vec![("zero_blocks".into(), vec![("blocks", *blocks)])],
        OpDesc::CopyBlocks { blocks, .. } if *blocks > 0 => vec![("copy_blocks".into(), vec![("blocks", *blocks)])],
        OpDesc::Moe {
            tokens,
            top_k,
            experts,
            hidden,
            ffn,
            ..
        } => vec![(
            format!("moe e{experts} k{top_k} h{hidden} f{ffn}"),
            vec![("tokens", *tokens)],
        )],
        _ => Vec::new(),
    }
}

/// The ranges of every kernel shape in `steps`.
pub fn ranges<'a>(steps: impl IntoIterator<Item = &'a StepDesc>) -> Ranges {
    let mut out = Ranges::new();
    for op in steps.into_iter().flat_map(|s| &s.ops) {
        for (key, features) in op_shapes(op) {
            let entry = out.entry(key).or_default();
            for (f, v) in features {
                let r = entry.entry(f.to_string()).or_insert([v, v]);
                r[0] = r[0].min(v);
                r[1] = r[1].max(v);
            }
        }
    }
    out
}

/// Why `step`'s shapes are extrapolated (empty: every one lies inside `ranges`).
pub fn outside(step: &StepDesc, ranges: &Ranges) -> BTreeSet<String> {
    let mut why = BTreeSet::new();
    for op in &step.ops {
        for (key, features) in op_shapes(op) {
            let Some(known) = ranges.get(&key) else {
                why.insert(format!("{key}: never calibrated"));
                continue;
            };
            for (f, v) in features {
                match known.get(f) {
                    Some(&[lo, hi]) if (lo..=hi).contains(&v) => {}
                    Some(&[lo, hi]) => {
                        why.insert(format!("{key}: {f} {v} outside [{lo}, {hi}]"));
                    }
                    None => {
                        why.insert(format!("{key}: {f} never calibrated"));
                    }
                }
            }
        }
    }
    why
}

/// A window's class: decode-only when every step with a batch decodes one token per request.
pub fn window_decode_only(span: &[StepDesc]) -> bool {
    span.iter().all(|s| s.decode_only || s.batch == 0) && span.iter().any(|s| s.batch > 0)
}

fn class(kind: &str, decode_only: bool) -> String {
    format!("{kind} {}", if decode_only { "decode" } else { "other" })
}

/// The nearest-rank `q` quantile of `xs` (not empty).
pub(crate) fn quantile(mut xs: Vec<f64>, q: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    xs[rank - 1]
}

/// The bands of `rows` (the fitted rows of `samples` under `params`) at quantile `q`. Bands
/// describe plain runs, what `predict` predicts by default: a per-op run's steps and windows
/// carry its events' host cost, so they count only when no plain run was fitted.
pub fn bands(samples: &[Sample], rows: &[Row], params: &Params, q: f64) -> BTreeMap<String, Band> {
    let any_plain = rows
        .iter()
        .any(|r| r.kind != RowKind::Op && !samples[r.sample].shape.time_ops);
    let mut by_class: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let windows: Vec<BTreeMap<u64, bool>> = samples
        .iter()
        .map(|s| {
            let t = simulate(&s.steps, params, s.shape);
            t.windows
                .iter()
                .map(|w| {
                    (
                        w.point,
                        window_decode_only(&s.steps[w.step_begin..=w.step_end.min(s.steps.len() - 1)]),
                    )
                })
                .collect()
        })
        .collect();
    for r in rows {
        if any_plain && samples[r.sample].shape.time_ops {
            continue;
        }
        let err = 100.0 * (r.lin.value - r.measured_ns).abs() / r.measured_ns;
        let (kind, decode) = match r.kind {
            RowKind::Step => ("step", samples[r.sample].steps[r.at.0].decode_only),
            RowKind::Window => (
                "window",
                windows[r.sample].get(&(r.at.0 as u64)).copied().unwrap_or(false),
            ),
            RowKind::Op => continue,
        };
        by_class.entry(kind.to_string()).or_default().push(err);
        by_class.entry(class(kind, decode)).or_default().push(err);
    }
    by_class
        .into_iter()
        .filter(|(_, v)| v.len() >= MIN_ROWS)
        .map(|(k, v)| {
            let rows = v.len();
            (
                k,
                Band {
                    pct: quantile(v, q),
                    rows,
                },
            )
        })
        .collect()
}

/// A band as the profile's provenance lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandRow {
    /// The class (`step`, `step decode`, `window other`, ...).
    pub class: String,
    /// The error at the quantile (%).
    pub pct: f64,
    /// Residuals it was taken over.
    pub rows: usize,
}

/// A calibrated range as the profile's provenance lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeRow {
    /// The kernel shape key (`decode attn_mma_d128_h4`, ...).
    pub kernel: String,
    /// The feature (`seqs`, `positions`, `tokens`, ...).
    pub feature: String,
    /// Smallest value measured.
    pub min: u64,
    /// Largest value measured.
    pub max: u64,
}

impl Calibration {
    /// What `profile` was calibrated with; `None` for an uncalibrated profile or one calibrated
    /// before bands existed.
    pub fn of(profile: &Profile) -> Option<Calibration> {
        let p = profile.provenance.as_ref()?;
        let bands: Vec<BandRow> = serde_json::from_value(p.get("bands")?.clone()).ok()?;
        let ranges: Vec<RangeRow> = serde_json::from_value(p.get("ranges")?.clone()).ok()?;
        let mut c = Calibration {
            quantile: p.get("band_quantile")?.as_f64()?,
            ..Default::default()
        };
        for b in bands {
            c.bands.insert(
                b.class,
                Band {
                    pct: b.pct,
                    rows: b.rows,
                },
            );
        }
        for r in ranges {
            c.ranges.entry(r.kernel).or_default().insert(r.feature, [r.min, r.max]);
        }
        Some(c)
    }

    /// The bands as the provenance lists them.
    pub fn band_rows(&self) -> Vec<BandRow> {
        self.bands
            .iter()
            .map(|(class, b)| BandRow {
                class: class.clone(),
                pct: b.pct,
                rows: b.rows,
            })
            .collect()
    }

    /// The ranges as the provenance lists them.
    pub fn range_rows(&self) -> Vec<RangeRow> {
        self.ranges
            .iter()
            .flat_map(|(kernel, fs)| {
                fs.iter().map(move |(feature, &[min, max])| RangeRow {
                    kernel: kernel.clone(),
                    feature: feature.clone(),
                    min,
                    max,
                })
            })
            .collect()
    }

    /// The band of a step or window (`kind`), falling back to the kind's overall band.
    pub fn band(&self, kind: &str, decode_only: bool) -> Option<f64> {
        self.bands
            .get(&class(kind, decode_only))
            .or_else(|| self.bands.get(kind))
            .map(|b| b.pct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::desc::{AttnDesc, Family};

    fn decode(module: &str, seqs: u64, split_tokens: u32) -> StepDesc {
        StepDesc {
            step: 0,
            batch: seqs,
            new_tokens: seqs,
            ctx_tokens: seqs * u64::from(split_tokens),
            kv_bytes: 0,
            decode_only: true,
            ops: vec![OpDesc::Decode {
                launches: vec![AttnDesc {
                    module: module.into(),
                    family: Family::Mma,
                    seqs,
                    bytes: 0,
                    ctas: seqs,
                    resident: 264,
                    nsplit: 1,
                    split_tokens,
                    head_dim: 128,
                    head_tile: 4,
                }],
            }],
        }
    }

    #[test]
    fn a_shape_inside_the_measured_ranges_is_calibrated_and_others_say_why_not() {
        let r = ranges(&[decode("attn_mma_d128_h4", 8, 512), decode("attn_mma_d128_h4", 64, 4096)]);
        assert_eq!(r["decode attn_mma_d128_h4"]["seqs"], [8, 64]);
        assert!(outside(&decode("attn_mma_d128_h4", 32, 1024), &r).is_empty());
        let far = outside(&decode("attn_mma_d128_h4", 128, 1024), &r);
        assert_eq!(
            far.into_iter().collect::<Vec<_>>(),
            ["decode attn_mma_d128_h4: seqs 128 outside [8, 64]"]
        );
        let new = outside(&decode("attn_mma_d64_h8", 32, 1024), &r);
        assert_eq!(
            new.into_iter().collect::<Vec<_>>(),
            ["decode attn_mma_d64_h8: never calibrated"]
        );
    }

    #[test]
    fn the_quantile_is_the_nearest_rank() {
        let xs: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile(xs.clone(), 0.9), 9.0);
        assert_eq!(quantile(xs.clone(), 0.95), 10.0);
        assert_eq!(quantile(xs, 0.0), 1.0);
    }

    /// A per-op run's steps (slowed by its events) widen no band when plain runs were fitted.
    #[test]
    fn bands_come_from_plain_runs_when_there_are_any() {
        use crate::cost::fit::{rows, Measured, Sample};
        use crate::cost::model::{simulate, HostWork, RunShape};
        let params = Params::h200();
        let steps: Vec<StepDesc> = (1..=8).map(|i| decode("attn_mma_d128_h4", i, 512)).collect();
        let sample = |time_ops: bool, off: f64| {
            let shape = RunShape {
                time_ops,
                sync_windows: true,
                host_work: HostWork::Predicted,
            };
            let t = simulate(&steps, &params, shape);
            Sample {
                name: format!("time_ops {time_ops}"),
                steps: steps.clone(),
                shape,
                measured: Measured {
                    steps: t.steps.iter().map(|l| Some(l.value * off)).collect(),
                    ..Default::default()
                },
            }
        };
        let both = [sample(false, 1.02), sample(true, 2.0)];
        let b = bands(&both, &rows(&both, &params), &params, 0.9);
        assert!((b["step decode"].pct - 100.0 * 0.02 / 1.02).abs() < 1e-6, "{b:?}");
        assert_eq!(b["step decode"].rows, 8);
        let alone = [sample(true, 2.0)];
        let b = bands(&alone, &rows(&alone, &params), &params, 0.9);
        assert!((b["step decode"].pct - 50.0).abs() < 1e-6, "{b:?}");
    }

    #[test]
    fn a_class_without_enough_rows_falls_back_to_its_kind() {
        let mut c = Calibration {
            quantile: 0.9,
            ..Default::default()
        };
        c.bands.insert("step".into(), Band { pct: 4.0, rows: 20 });
        c.bands.insert("step decode".into(), Band { pct: 2.0, rows: 12 });
        assert_eq!(c.band("step", true), Some(2.0));
        assert_eq!(c.band("step", false), Some(4.0));
        assert_eq!(c.band("window", true), None);
    }
}
