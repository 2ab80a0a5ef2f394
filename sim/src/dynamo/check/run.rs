//! Run one real-planner case: build its scenario, record the planner on a
//! worker, replay the recording with every invariant, and say what it showed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use kvsim_core::fpm::scenarios::BuiltinScenario;
use kvsim_core::plan::{Plan, PlanSource};

use super::aim::{probe_sites, Sites};
use super::case::RealCase;
use crate::dynamo::{audit_error, RecordError, RecordOptions, Worker};
use crate::exec::{run_plan, Outcome};

/// What one case showed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum RealVerdict {
    /// The draw gives no scenario the real planner can take (vLLM refuses it).
    NotApplicable {
        /// Why.
        reason: String,
    },
    /// Every invariant held and every table matched.
    Passed,
    /// A kvsim invariant failed on the recording (DY-RAISED: the planner
    /// raised; DY-STALLED: the sweep did not end within its step budget).
    Violation {
        /// The invariant.
        invariant: String,
        /// The step.
        step: u64,
        /// What broke.
        detail: String,
    },
    /// kvsim's model does not reproduce what the planner did to vLLM's KV.
    Mismatch {
        /// The step.
        step: u64,
        /// What differs.
        detail: String,
    },
    /// The harness failed before the sweep began (the planner's constructor or
    /// its vLLM set-up raised).
    SetupFailed {
        /// What raised.
        detail: String,
    },
    /// The recording is outside the plan language's bounds (e.g. a prompt
    /// longer than max_model_len): the planner did something no valid plan does.
    InvalidPlan {
        /// What is out of bounds.
        detail: String,
    },
    /// The case's child ran past its wall-clock limit and was killed.
    Hung {
        /// What happened.
        detail: String,
    },
    /// The case's child died (a signal) or its worker stopped answering.
    Crashed {
        /// What happened.
        detail: String,
    },
}

impl RealVerdict {
    /// A failure of the planner under test.
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

    /// The step of the first failure: None for a pass, 0 for a failure
    /// without a step (set-up, an invalid plan, a hung or dead child).
    pub fn fail_step(&self) -> Option<u64> {
        match self {
            RealVerdict::NotApplicable { .. } | RealVerdict::Passed => None,
            RealVerdict::Violation { step, .. } | RealVerdict::Mismatch { step, .. } => Some(*step),
            _ => Some(0),
        }
    }

    /// Whether this (a patched planner's verdict) shows the patch against
    /// `control` (the unpatched planner's on the same case): it fails, and
    /// the unpatched planner passes or fails only later (a finding 1.6.1
    /// itself has, further into the sweep, does not hide an earlier one the
    /// patch causes). A failure without a step never counts as earlier.
    pub fn kills(&self, control: Option<u64>) -> bool {
        match (self.fail_step(), control) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(_), Some(_)) if !matches!(self, RealVerdict::Violation { .. } | RealVerdict::Mismatch { .. }) => {
                false
            }
            (Some(mine), Some(theirs)) => mine < theirs,
        }
    }

    /// The detail, whatever the verdict.
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
    /// The verdict.
    pub verdict: RealVerdict,
    /// Ops recorded.
    pub ops: u64,
    /// Steps recorded.
    pub steps: u64,
    /// Coverage events.
    pub events: BTreeMap<String, u64>,
    /// The scenario and options it ran with (for the minimal repro files).
    pub scenario: Option<BuiltinScenario>,
    /// The recording options used.
    pub options: Option<RecordOptions>,
    /// The recorded plan, kept for failures.
    pub plan: Option<Plan>,
    /// Which planner made the recording.
    pub source: Option<PlanSource>,
    /// Whether the worker must be replaced before the next case.
    pub worker_lost: bool,
    /// The knobs it ran with (an aimed case resolved onto its probe's builds).
    pub case: Option<RealCase>,
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
            case: None,
        }
    }
}

/// How a case runs besides its knobs.
#[derive(Clone, Debug)]
pub struct CaseEnv {
    /// A working copy (or patched copy) of the planner instead of the installed module.
    pub planner_source: Option<PathBuf>,
    /// The planner an aimed case's probe records (a mutant hunt probes with
    /// the unpatched one, so the patched and unpatched runs get the same faults).
    pub probe_source: Option<PathBuf>,
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
    let resolved;
    let c = if c.aim.is_some() {
        resolved = c.resolve(&record_probe_sites(worker, base, c, env)?);
        &resolved
    } else {
        c
    };
    let mut out = record_and_replay(worker, base, c, env)?;
    out.case = Some(c.clone());
    Ok(out)
}

/// The chain builds of the case's fault-free probe (none when the probe
/// could not be recorded: the case then keeps its drawn steps).
fn record_probe_sites(
    worker: &mut Worker,
    base: &BuiltinScenario,
    c: &RealCase,
    env: &CaseEnv,
) -> Result<Sites, RecordError> {
    let probe = c.probe();
    let Ok(s) = probe.scenario(base) else {
        return Ok(Sites::default());
    };
    let mut o = probe.options(base, &s, env.wall);
    o.planner_source = env.probe_source.clone();
    match worker.record(&s, &o) {
        Ok(rec) => Ok(probe_sites(&rec.plan)),
        // The environment is unusable: the run stops (exit 2), as for a case.
        Err(
            e @ (RecordError::NoEnvironment
            | RecordError::NoHarness(_)
            | RecordError::NoPlannerSource(_)
            | RecordError::Io(_)),
        ) => Err(e),
        // A probe the planner fails leaves the drawn steps; the case itself
        // then shows the failure (a dead worker included: it is reported there).
        Err(_) => Ok(Sites::default()),
    }
}

fn record_and_replay(
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
        Outcome::Passed => match audit_error(&rec) {
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
        case: None,
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

    #[test]
    fn a_patch_kills_when_it_fails_before_the_unpatched_planner_does() {
        let at = |step| RealVerdict::Violation {
            invariant: "PL-DEADLINE".into(),
            step,
            detail: String::new(),
        };
        assert!(at(9).kills(None), "the unpatched planner passes");
        assert!(at(3).kills(Some(9)), "it fails later: a 1.6.1 finding further on");
        assert!(!at(9).kills(Some(9)));
        assert!(!at(12).kills(Some(9)));
        assert!(!RealVerdict::Passed.kills(None));
        let hung = RealVerdict::Hung { detail: String::new() };
        assert!(hung.kills(None));
        assert!(!hung.kills(Some(50)), "no step: never earlier");
        assert_eq!(hung.fail_step(), Some(0));
    }
}
