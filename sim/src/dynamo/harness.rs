//! Running the harness as a subprocess: one request file in, a plan, the
//! planner's artifact and a report out, all in a private temporary directory
//! that is removed whatever happens (nothing half-written reaches the caller).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kvsim_core::fpm::scenarios::BuiltinScenario;
use kvsim_core::plan::{load_plan, Plan};
use serde_json::{json, Value};

use super::env;

/// What to run.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Dynamo's KV warm-up (`DYN_BENCH_KV_WARMUP`).
    pub warmup: bool,
    /// `hybrid_live_state` (1.6.1).
    pub live_state: bool,
    /// A working copy of `instrumented_scheduler.py` to run instead of the installed one.
    pub planner_source: Option<PathBuf>,
    /// A sweep that has not ended after this many steps is a finding (DY-STALLED).
    pub max_steps: u64,
    /// Virtual seconds per nominal step second (a larger scale reaches the soft timeout sooner).
    pub clock_scale: f64,
    /// Wall-clock limit for the subprocess; past it the harness is killed.
    pub timeout: Duration,
    /// (step, by): from that step, `by` more batches stay in flight for `by`
    /// steps (async scheduling only; a pipelined engine's batch queue).
    pub delay_outputs: Option<(u64, u64)>,
    /// (rank, steps): attention-DP only: that rank's synchronizer messages are
    /// delivered `steps` lock-step ticks late (recorded as a `message_lag` fault).
    pub message_lag: Option<(u32, u64)>,
    /// The scheduler's `defer_block_free` on, as vLLM 0.31 sets it for async
    /// scheduling with a KV-consumer connector (Dynamo's disaggregated decode
    /// worker): frees of in-flight requests wait behind the deferred-free fence.
    pub defer_block_free: bool,
    /// At the start of this step every live warm-up chain is aborted
    /// (`finish_requests(FINISHED_ABORTED)`; recorded as `abort` faults).
    pub abort_chains: Option<u64>,
    /// (step, rank, blocks): before that step's schedule, that many free blocks
    /// of the rank's pool become unusable (held by the harness for the rest of
    /// the run: a rank whose pool is smaller than the one planned with;
    /// recorded as a `shrink_pool` fault).
    pub shrink_pool: Option<(u64, u32, u32)>,
    /// With `shrink_pool`: the blocks come back this many steps later (before
    /// that step's schedule, in the order they were taken).
    pub shrink_steps: Option<u64>,
    /// (step, after): single rank: from that step the (after+1)-th shadow
    /// registration fails, its last group's tail draw raising as a short pool
    /// does (recorded as a `stage_failure` fault).
    pub fail_registration: Option<(u64, u32)>,
}

impl RecordOptions {
    /// The `kvsim dynamo run` flags that give these options (besides the
    /// scenario and the planner source).
    pub fn run_flags(&self) -> Vec<String> {
        let o = self;
        let mut f = Vec::new();
        if !o.warmup {
            f.push("--no-warmup".into());
        }
        if o.live_state {
            f.push("--live-state".into());
        }
        if o.clock_scale != 1.0 {
            f.push(format!("--clock-scale {}", o.clock_scale));
        }
        if let Some((at, by)) = o.delay_outputs {
            f.push(format!("--delay-outputs {at}:{by}"));
        }
        if o.defer_block_free {
            f.push("--defer-block-free".into());
        }
        if let Some(step) = o.abort_chains {
            f.push(format!("--abort-chains {step}"));
        }
        if let Some((rank, ticks)) = o.message_lag {
            f.push(format!("--message-lag {rank}:{ticks}"));
        }
        if let Some((step, rank, blocks)) = o.shrink_pool {
            let back = o.shrink_steps.map(|k| format!(":{k}")).unwrap_or_default();
            f.push(format!("--shrink-pool {step}:{rank}:{blocks}{back}"));
        }
        if let Some((step, after)) = o.fail_registration {
            f.push(format!("--fail-registration {step}:{after}"));
        }
        f.push(format!("--max-steps {}", o.max_steps));
        f
    }
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            warmup: true,
            live_state: false,
            planner_source: None,
            max_steps: 20_000,
            clock_scale: 1.0,
            timeout: Duration::from_secs(900),
            delay_outputs: None,
            message_lag: None,
            defer_block_free: false,
            abort_chains: None,
            shrink_pool: None,
            shrink_steps: None,
            fail_registration: None,
        }
    }
}

/// A finished recording.
#[derive(Debug)]
pub struct Recording {
    /// The recorded plan.
    pub plan: Plan,
    /// The plan exactly as the harness wrote it.
    pub plan_text: String,
    /// The planner's own artifact (normalised), if it wrote one.
    pub artifact: Option<String>,
    /// The harness report (`kvsim-dynamo-report/1`) without its wall-clock fields.
    pub report: Value,
    /// Seconds the harness spent importing and constructing, then sweeping (stderr only).
    pub setup_seconds: f64,
    /// Wall seconds the harness ran.
    pub run_seconds: f64,
}

/// Why there is no recording. Every variant is bad input or a broken
/// environment to the CLI (exit 2); a planner that raised is a recording.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The environment is missing.
    #[error(
        "the real planner's environment is not installed ({venv}); install it with: {cmd}",
        venv = env::venv_dir().display(),
        cmd = env::INSTALL_COMMAND
    )]
    NoEnvironment,
    /// The harness script is missing.
    #[error("the harness script {0} does not exist")]
    NoHarness(PathBuf),
    /// The planner source is missing.
    #[error("the planner source {0} does not exist")]
    NoPlannerSource(PathBuf),
    /// A layout the real planner cannot take.
    #[error("the real planner cannot take scenario {scenario}: {reason}")]
    Layout {
        /// The scenario.
        scenario: String,
        /// Why.
        reason: String,
    },
    /// The harness failed before the planner ran.
    #[error("the harness failed before the planner ran ({stage}): {reason}")]
    Setup {
        /// The stage.
        stage: String,
        /// Why.
        reason: String,
    },
    /// Killed by a signal.
    #[error("the harness was killed ({0}); nothing was recorded")]
    Killed(String),
    /// Past its time limit (s).
    #[error("the harness did not finish within {0} s and was killed; nothing was recorded")]
    Timeout(u64),
    /// The harness wrote something unusable.
    #[error("the harness wrote an unusable {what}: {reason}")]
    BadOutput {
        /// Which output.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The recording breaks the plan format's bounds (e.g. a prompt longer than
    /// max_model_len): the planner did what no valid plan does — a finding.
    #[error("FINDING PLAN-INVALID: the real planner's recording is outside the plan format: {0}")]
    InvalidPlan(String),
    /// The persistent worker failed.
    #[error("the harness worker failed: {0}")]
    WorkerDied(String),
    /// An I/O error.
    #[error("{0}")]
    Io(String),
}

/// Removes the directory when dropped.
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh temporary directory.
pub fn temp_dir() -> Result<TempDir, RecordError> {
    let base = std::env::temp_dir();
    for i in 0..1000u32 {
        let p = base.join(format!("kvsim-dynamo-{}-{i}", std::process::id()));
        if std::fs::create_dir(&p).is_ok() {
            return Ok(TempDir(p));
        }
    }
    Err(RecordError::Io(format!(
        "cannot create a temporary directory in {}",
        base.display()
    )))
}

pub(super) fn request(s: &BuiltinScenario, o: &RecordOptions) -> Value {
    json!({
        "format": "kvsim-dynamo-request/1",
        "scenario": s,
        "options": {
            "warmup": o.warmup,
            "live_state": o.live_state,
            "max_steps": o.max_steps,
            "clock_scale": o.clock_scale,
            "planner_source": o.planner_source.as_ref().map(|p| p.display().to_string()),
            "delay_outputs": o.delay_outputs.map(|(step, by)| json!({"step": step, "by": by})),
            "message_lag": o.message_lag.map(|(rank, steps)| json!({"rank": rank, "steps": steps})),
            "defer_block_free": o.defer_block_free,
            "abort": o.abort_chains.map(|step| json!({"step": step, "prefix": "__kvwarm_chain_"})),
            "shrink_pool": o.shrink_pool.map(|(step, rank, blocks)| json!({"step": step, "rank": rank, "blocks": blocks, "steps": o.shrink_steps})),
            "fail_registration": o.fail_registration.map(|(step, after)| json!({"step": step, "after": after})),
        }
    })
}

/// `o` with its planner source made absolute (the harness runs elsewhere).
pub(super) fn absolute_source(o: &RecordOptions) -> Result<RecordOptions, RecordError> {
    let mut o = o.clone();
    if let Some(src) = &o.planner_source {
        let abs = std::fs::canonicalize(src).map_err(|_| RecordError::NoPlannerSource(src.clone()))?;
        o.planner_source = Some(abs);
    }
    Ok(o)
}

/// Run the real planner over `s` and return its recording.
pub fn record(s: &BuiltinScenario, o: &RecordOptions) -> Result<Recording, RecordError> {
    let python = env::ready_python().ok_or(RecordError::NoEnvironment)?;
    let script = env::harness_script();
    if !script.is_file() {
        return Err(RecordError::NoHarness(script));
    }
    let o = absolute_source(o)?;
    let dir = temp_dir()?;
    let req_path = dir.0.join("request.json");
    let out = dir.0.join("out");
    std::fs::write(
        &req_path,
        serde_json::to_vec(&request(s, &o)).expect("requests serialize"),
    )
    .map_err(|e| RecordError::Io(format!("cannot write {}: {e}", req_path.display())))?;
    let log = dir.0.join("harness.log");
    let log_file = std::fs::File::create(&log).map_err(|e| RecordError::Io(e.to_string()))?;
    let mut child = Command::new(&python)
        .arg(&script)
        .arg("--request")
        .arg(&req_path)
        .arg("--out-dir")
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().map_err(|e| RecordError::Io(e.to_string()))?)
        .stderr(log_file)
        .spawn()
        .map_err(|e| RecordError::Io(format!("cannot start {}: {e}", python.display())))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait().map_err(|e| RecordError::Io(e.to_string()))? {
            Some(status) => break status,
            None if started.elapsed() > o.timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RecordError::Timeout(o.timeout.as_secs()));
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    read_outputs(&s.name, status.code(), &out, &log, &format!("{status}"))
}

/// The recording the harness left in `out` after exiting with `code`
/// (`None`: killed by a signal, described by `how`).
pub(super) fn read_outputs(
    scenario: &str,
    code: Option<i32>,
    out: &Path,
    log: &Path,
    how: &str,
) -> Result<Recording, RecordError> {
    let report_text = std::fs::read_to_string(out.join("report.json")).ok();
    let report: Option<Value> = report_text.as_deref().and_then(|t| serde_json::from_str(t).ok());
    match code {
        Some(0) => {}
        Some(code) => {
            let (stage, reason) = report
                .as_ref()
                .map(|r| {
                    (
                        r["stage"].as_str().unwrap_or("unknown").to_string(),
                        r["error"].as_str().unwrap_or("no reason given").to_string(),
                    )
                })
                .unwrap_or_else(|| ("start".into(), log_tail(log)));
            return Err(if code == 3 {
                RecordError::Layout {
                    scenario: scenario.to_string(),
                    reason,
                }
            } else {
                RecordError::Setup { stage, reason }
            });
        }
        None => return Err(RecordError::Killed(how.to_string())),
    }
    let mut report = report.ok_or(RecordError::BadOutput {
        what: "report",
        reason: "report.json missing or not JSON".into(),
    })?;
    let plan_text = std::fs::read_to_string(out.join("plan.json")).map_err(|e| RecordError::BadOutput {
        what: "plan",
        reason: e.to_string(),
    })?;
    let plan = load_plan(&plan_text).map_err(|e| RecordError::InvalidPlan(e.to_string()))?;
    let artifact = std::fs::read_to_string(out.join("artifact.json")).ok();
    let seconds = |r: &mut Value, k: &str| {
        r.as_object_mut()
            .and_then(|m| m.remove(k))
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0)
    };
    let setup_seconds = seconds(&mut report, "setup_seconds");
    let run_seconds = seconds(&mut report, "run_seconds");
    Ok(Recording {
        plan,
        plan_text,
        artifact,
        report,
        setup_seconds,
        run_seconds,
    })
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// The first error the artifact audit (`kvsim audit`, the planner's own
/// artifact against its schema and invariants) finds: (check id, where: what).
pub fn audit_error(rec: &Recording) -> Option<(String, String)> {
    let v = kvsim_core::fpm::audit::parse(rec.artifact.as_deref()?).ok()?;
    let report = kvsim_core::fpm::audit::audit(&v);
    // A run the planner aborted on an injected registration failure wrote a
    // failed artifact by design: that failure is the fault's, not a finding.
    let fault_abort = rec.plan.steps.iter().flat_map(|s| &s.ops).any(|op| {
        matches!(
            op,
            kvsim_core::plan::PlanOp::PlannerFailed {
                kind: kvsim_core::plan::FailureKind::Fault,
                ..
            }
        )
    });
    report
        .findings
        .iter()
        .filter(|f| !(fault_abort && f.id == "AU-RUN-FAILED" && f.message.contains(INJECTED_FAULT_MARK)))
        .find(|f| f.severity == kvsim_core::fpm::audit::Severity::Error)
        .map(|f| (f.id.to_string(), format!("artifact {}: {}", f.path, f.message)))
}

/// `STEP:RANK:BLOCKS[:STEPS]`, the `--shrink-pool` flag (and a witness's
/// `shrink_pool`): (step, rank, blocks, steps until the blocks come back).
pub fn parse_shrink(s: &str) -> Result<(u64, u32, u32, Option<u64>), String> {
    let bad = || format!("{s:?}: expected STEP:RANK:BLOCKS or STEP:RANK:BLOCKS:STEPS with whole numbers");
    let n: Vec<u64> = s
        .split(':')
        .map(|x| x.trim().parse::<u64>().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let small = |v: u64| u32::try_from(v).map_err(|_| bad());
    match n[..] {
        [a, b, c] => Ok((a, small(b)?, small(c)?, None)),
        [_, _, _, 0] => Err(format!("{s:?}: STEPS must be at least 1")),
        [a, b, c, k] => Ok((a, small(b)?, small(c)?, Some(k))),
        _ => Err(bad()),
    }
}

/// In the message of the failure `--fail-registration` injects (recorder.py).
pub const INJECTED_FAULT_MARK: &str = "(kvsim stage_failure fault)";
