//! Residuals per kernel family: how well the fitted profile prices each kind of kernel, from
//! the per-op times of `--time-ops` runs (what `kvsim calibrate` reports, issue 21 item 2).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use super::bands::quantile;
use super::desc::{Family, OpDesc};
use super::fit::{Row, RowKind, Sample};

/// One kernel family's residuals over its per-op rows.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct FamilyResidual {
    /// `decode mma`, `decode generic`, `decode latent_mma`, `moe`, `write_kv`, `state_update`, ...
    pub family: String,
    /// Ops measured.
    pub ops: usize,
    /// Mean absolute percentage error.
    pub mape_pct: f64,
    /// Median signed error, (predicted - measured) / measured: negative = priced short.
    pub median_error_pct: f64,
    /// 90th percentile of the absolute error.
    pub p90_abs_error_pct: f64,
}

fn family_name(f: Family) -> &'static str {
    match f {
        Family::Mma => "mma",
        Family::Generic => "generic",
        Family::Latent => "latent",
        Family::LatentMma => "latent_mma",
    }
}

/// The family an op's time belongs to (`None` for ops that launch nothing).
pub fn op_family(op: &OpDesc) -> Option<String> {
    Some(match op {
        OpDesc::Decode { launches } => {
            let mut names: Vec<&str> = launches.iter().map(|l| family_name(l.family)).collect();
            names.sort_unstable();
            names.dedup();
            format!("decode {}", names.join("+"))
        }
        OpDesc::WriteKv { latent: true, .. } => "write_kv latent".into(),
        other => other.timing_kind()?.into(),
    })
}

/// Residuals per family over the op rows of `rows` (the fitted rows of `samples`).
pub fn family_residuals(samples: &[Sample], rows: &[Row]) -> Vec<FamilyResidual> {
    let mut errors: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.kind == RowKind::Op) {
        let op = samples
            .get(r.sample)
            .and_then(|s| s.steps.get(r.at.0))
            .and_then(|st| st.ops.get(r.at.1));
        if let Some(family) = op.and_then(op_family) {
            errors
                .entry(family)
                .or_default()
                .push(100.0 * (r.lin.value - r.measured_ns) / r.measured_ns);
        }
    }
    errors
        .into_iter()
        .map(|(family, e)| {
            let abs: Vec<f64> = e.iter().map(|x| x.abs()).collect();
            FamilyResidual {
                family,
                ops: e.len(),
                mape_pct: abs.iter().sum::<f64>() / abs.len() as f64,
                median_error_pct: quantile(e, 0.5),
                p90_abs_error_pct: quantile(abs, 0.9),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::desc::StepDesc;
    use crate::cost::fit::Measured;
    use crate::cost::model::{HostWork, Lin, RunShape};

    fn row(step: usize, predicted: f64, measured: f64) -> Row {
        let lin = Lin {
            value: predicted,
            ..Lin::zero()
        };
        Row {
            sample: 0,
            kind: RowKind::Op,
            at: (step, 0),
            measured_ns: measured,
            lin,
            op_kind: "",
        }
    }

    #[test]
    fn residuals_are_grouped_by_family_with_their_signs() {
        let step = |op: OpDesc| StepDesc {
            step: 0,
            batch: 1,
            new_tokens: 1,
            ctx_tokens: 1,
            kv_bytes: 0,
            decode_only: true,
            ops: vec![op],
        };
        let state = OpDesc::StateUpdate {
            serial: 1,
            tokens: 1,
            bytes: 0,
        };
        let zero = OpDesc::ZeroBlocks { blocks: 1, bytes: 1 };
        let sample = Sample {
            name: "s".into(),
            steps: vec![step(state.clone()), step(state.clone()), step(state), step(zero)],
            shape: RunShape {
                time_ops: true,
                sync_windows: true,
                host_work: HostWork::Measured,
            },
            measured: Measured::default(),
        };
        // State updates priced -10 %, +20 %, -30 %; the zeroing +50 %; a step row is ignored.
        let mut rows = vec![
            row(0, 90.0, 100.0),
            row(1, 120.0, 100.0),
            row(2, 70.0, 100.0),
            row(3, 150.0, 100.0),
        ];
        rows.push(Row {
            kind: RowKind::Step,
            ..row(0, 1.0, 100.0)
        });
        let r = family_residuals(&[sample], &rows);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].family, "state_update");
        assert_eq!(r[0].ops, 3);
        assert!((r[0].mape_pct - 20.0).abs() < 1e-9);
        assert!((r[0].median_error_pct + 10.0).abs() < 1e-9);
        assert!((r[0].p90_abs_error_pct - 30.0).abs() < 1e-9);
        assert_eq!(r[1].family, "zero_blocks");
        assert!((r[1].median_error_pct - 50.0).abs() < 1e-9);
    }
}
