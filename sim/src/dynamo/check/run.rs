//! Run one real-planner case: build its scenario, record the planner on a
//! worker, replay the recording with every invariant, and say what it showed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use kvsim_core::fpm::scenarios::BuiltinScenario;
use kvsim_core::plan::{Plan, PlanSource};

use super::case::RealCase;
use crate::dynamo::{audit_error, RecordError, RecordOptions, Worker};
use crate::exec::{run_plan, Outcome};

/// What one case showed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum RealVerdict {
    /// The draw gives no scenario the real planner can take (vLLM refuses it).
    NotApplicable {
        reason: String,
    },
    Passed,
    /// A kvsim invariant failed on the recording (DY-RAISED: the planner
    /// raised; DY-STALLED: the sweep did not end within its step budget).
    Violation {
        invariant: String,
        step: u64,
        detail: String,
    },
    /// kvsim's model does not reproduce what the planner did to vLLM's KV.
    Mismatch {
        step: u64,
        detail: String,
    },
    /// The harness failed before the sweep began (the planner's constructor or
    /// its vLLM set-up raised).
    SetupFailed {
        detail: String,
    },
    /// The recording is outside the plan language's bounds (e.g. a prompt
    /// longer than max_model_len): the planner did something no valid plan does.
    InvalidPlan {
        detail: String,
    },
    /// The case's child ran past its wall-clock limit and was killed.
    Hung {
        detail: String,
    },
    /// The case's child died (a signal) or its worker stopped answering.
    Crashed {
        detail: String,
    },
}

impl RealVerdict {
    pub fn failed(&self) -> bool {
        !matches!(self, RealVerdict::NotApplicable { .. } | RealVerdict::Passed)
    }

    /// The invariant ID or the failure kind.
    pub fn label(&self) -> &str {
        match self {
            RealVerdict::NotApplicable { .. } => "n/a",
            RealVerdict::Passed => "passed",
            RealVerdict::Violation { invariant, .. } => invariant,
            RealVerdict::Mismatch { .. } => "MISMATCH",
            RealVerdict::SetupFailed { .. } => "DY-SETUP",
            RealVerdict::InvalidPlan { .. } => "PLAN-INVALID",
            RealVerdict::Hung { .. } => "DY-HUNG",
            RealVerdict::Crashed { .. } => "DY-CRASHED",
        }
    }

    /// What makes two failures the same finding: the label, and for a Python
    /// exception its type.
    pub fn key(&self) -> String {
        match self {
            RealVerdict::Violation { invariant, detail, .. } if invariant == "DY-RAISED" => {
                // "the planner raised: KeyError: '…'; left behind: …"
                let kind = detail
                    .split_once("raised: ")
                    .map_or(detail.as_str(), |(_, rest)| rest)
                    .split([':', ' ', ';'])
                    .next()
                    .unwrap_or("");
                format!("DY-RAISED {kind}")
            }
            v => v.label().to_string(),
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            RealVerdict::NotApplicable { reason } => reason,
            RealVerdict::Passed => "",
            RealVerdict::Violation { detail, .. }
            | RealVerdict::Mismatch { detail, .. }
            | RealVerdict::SetupFailed { detail }
            | RealVerdict::InvalidPlan { detail }
            | RealVerdict::Hung { detail }
            | RealVerdict::Crashed { detail } => detail,
        }
    }
}

/// A case's result, with what a report and a shrinker need.
pub struct RealOutcome {
    pub verdict: RealVerdict,
    pub ops: u64,
    pub steps: u64,
    pub events: BTreeMap<String, u64>,
    /// The scenario and options it ran with (for the minimal repro files).
    pub scenario: Option<BuiltinScenario>,
    pub options: Option<RecordOptions>,
    /// The recorded plan, kept for failures.
    pub plan: Option<Plan>,
    /// Which planner made the recording.
    pub source: Option<PlanSource>,
    /// Whether the worker must be replaced before the next case.
    pub worker_lost: bool,
}

impl RealOutcome {
    fn bare(verdict: RealVerdict) -> Self {
        RealOutcome {
            verdict,
            ops: 0,
            steps: 0,
            events: BTreeMap::new(),
            scenario: None,
            options: None,
            plan: None,
            source: None,
            worker_lost: false,
        }
    }
}

/// How a case runs besides its knobs.
#[derive(Clone, Debug)]
pub struct CaseEnv {
    /// A working copy (or patched copy) of the planner instead of the installed module.
    pub planner_source: Option<PathBuf>,
    /// Wall-clock limit of one case.
    pub wall: Duration,
}

/// Run case `c` on `base` on `worker`. Errors that say the environment is
/// unusable (no venv, no harness) come back as `Err`: the run stops with exit 2.
pub fn run_real_case(
    worker: &mut Worker,
    base: &BuiltinScenario,
    c: &RealCase,
    env: &CaseEnv,
) -> Result<RealOutcome, RecordError> {
    let s = match c.scenario(base) {
        Ok(s) => s,
        Err(e) => return Ok(RealOutcome::bare(RealVerdict::NotApplicable { reason: e })),
    };
    let mut o = c.options(base, &s, env.wall);
    o.planner_source = env.planner_source.clone();
    let rec = match worker.record(&s, &o) {
        Ok(r) => r,
        Err(e) => {
            let (verdict, lost) = match e {
                RecordError::Layout { reason, .. } => (RealVerdict::NotApplicable { reason }, false),
                RecordError::Setup { stage, reason } => (
                    RealVerdict::SetupFailed {
                        detail: format!("{stage}: {reason}"),
                    },
                    false,
                ),
                RecordError::Timeout(secs) => (
                    RealVerdict::Hung {
                        detail: format!("the case ran past its {secs} s wall-clock limit and was killed"),
                    },
                    false,
                ),
                RecordError::Killed(how) => (
                    RealVerdict::Crashed {
                        detail: format!("the harness child died ({how})"),
                    },
                    false,
                ),
                RecordError::WorkerDied(why) => (RealVerdict::Crashed { detail: why }, true),
                RecordError::InvalidPlan(reason) => (RealVerdict::InvalidPlan { detail: reason }, false),
                RecordError::BadOutput { what, reason } => (
                    RealVerdict::Crashed {
                        detail: format!("the harness wrote an unusable {what}: {reason}"),
                    },
                    false,
                ),
                fatal => return Err(fatal),
            };
            let mut out = RealOutcome::bare(verdict);
            out.worker_lost = lost;
            out.scenario = Some(s);
            out.options = Some(o);
            return Ok(out);
        }
    };
    let report = run_plan(&rec.plan);
    let verdict = match &report.outcome {
        // A replay that holds leaves the planner's own artifact to the audit.
        Outcome::Passed => match audit_error(rec.artifact.as_deref()) {
            Some((id, detail)) => RealVerdict::Violation {
                invariant: id,
                step: report.last_step,
                detail,
            },
            None => RealVerdict::Passed,
        },
        Outcome::Violation(f) => RealVerdict::Violation {
            invariant: f.invariant.clone().unwrap_or_default(),
            step: f.step,
            detail: f.detail.clone(),
        },
        Outcome::Mismatch(f) => RealVerdict::Mismatch {
            step: f.step,
            detail: f.detail.clone(),
        },
    };
    let failed = verdict.failed();
    let source = rec.plan.source.clone();
    Ok(RealOutcome {
        verdict,
        ops: report.ops,
        steps: report.steps,
        events: report.events,
        scenario: Some(s),
        options: Some(o),
        plan: failed.then_some(rec.plan),
        source,
        worker_lost: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_exception_is_keyed_by_its_type() {
        let v = RealVerdict::Violation {
            invariant: "DY-RAISED".into(),
            step: 3,
            detail: "the planner raised: KeyError: '__kvwarm_chain_10'; left behind: 0 referenced blocks".into(),
        };
        assert_eq!(v.key(), "DY-RAISED KeyError");
        let w = RealVerdict::Violation {
            invariant: "PL-WINDOW".into(),
            step: 3,
            detail: "x".into(),
        };
        assert_eq!(w.key(), "PL-WINDOW");
        assert!(!RealVerdict::NotApplicable { reason: "r".into() }.failed());
    }
}
