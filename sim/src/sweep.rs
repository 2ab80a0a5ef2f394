//! A whole benchmark sweep on the simulator: plan it (the planner drives the
//! model and records a plan), run the plan with every invariant on, and build
//! the rank artifacts from the plan and the run.

use kvsim_core::fpm::artifact::{build_artifacts, RankArtifact};
use kvsim_core::fpm::gate::Strategy;
use kvsim_core::fpm::planner;
use kvsim_core::fpm::scenarios::BuiltinScenario;
use kvsim_core::fpm::sweep::{BenchmarkMeta, SweepError, SweepOptions};
use kvsim_core::plan::Plan;

use crate::exec::{plan_hash, run_plan_opts, RunOptions, RunReport};

/// A sweep planned and run.
pub struct SweepRun {
    /// The plan.
    pub plan: Plan,
    /// The planner's record.
    pub meta: BenchmarkMeta,
    /// The run's report.
    pub report: RunReport,
    /// One per attention-DP rank; empty when the run stopped at a violation.
    pub artifacts: Vec<RankArtifact>,
}

/// The artifacts of a finished run of a sweep plan (`None` if the plan is not a
/// sweep plan or the run did not pass).
pub fn artifacts_for(plan: &Plan, report: &RunReport) -> Option<Vec<RankArtifact>> {
    let meta: BenchmarkMeta = serde_json::from_value(plan.benchmark.clone()?).ok()?;
    report
        .passed()
        .then(|| build_artifacts(plan, &meta, &plan_hash(plan), report.sim_time_ns))
}

/// Plan and run `s`'s sweep with `strategy` (the gate's when `None`).
pub fn run_sweep(s: &BuiltinScenario, strategy: Option<Strategy>) -> Result<SweepRun, SweepError> {
    run_sweep_with(s, strategy, &SweepOptions::default(), &mut |_, _| {})
}

/// `run_sweep` with options (soft-timeout override, faults) and a progress
/// callback (ops done, ops total).
pub fn run_sweep_with(
    s: &BuiltinScenario,
    strategy: Option<Strategy>,
    opts: &SweepOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SweepRun, SweepError> {
    run_sweep_checked(s, strategy, opts, RunOptions::default(), progress)
}

/// `run_sweep_with`, the plan run with `run` (e.g. `paranoid`: the full model scan after
/// every op).
pub fn run_sweep_checked(
    s: &BuiltinScenario,
    strategy: Option<Strategy>,
    opts: &SweepOptions,
    run: RunOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SweepRun, SweepError> {
    let planned = planner::plan(strategy.map(planner::for_strategy), s, opts)?;
    let report = run_plan_opts(&planned.plan, run, progress);
    let artifacts = artifacts_for(&planned.plan, &report).unwrap_or_default();
    Ok(SweepRun {
        plan: planned.plan,
        meta: planned.meta,
        report,
        artifacts,
    })
}

/// Dynamo's per-rank output path: rank r > 0 gets `_dp{r}` before the extension (§1.1).
pub fn rank_path(path: &std::path::Path, rank: u32) -> std::path::PathBuf {
    if rank == 0 {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}_dp{rank}.{}", ext.to_string_lossy()),
        None => format!("{stem}_dp{rank}"),
    };
    path.with_file_name(name)
}
