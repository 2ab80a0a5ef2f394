//! `kvsim replay PLAN --backend gpu --out FILE`: lower the plan (`kvsim_core::device`, block
//! tables from the simulator's engine in lock-step, host work on the wall clock), run it on CUDA
//! device 0 with every read verified and every step timed, and write a `kvsim-replay/1` result with backend "gpu".
//!
//! Exit codes: 0 the device verified every read (and the plan matches the model), 1 a content
//! violation or a plan/model mismatch, 2 no CUDA device (`no CUDA device: ...`), an unsupported
//! scenario or a CUDA error.

use std::collections::BTreeMap;
use std::process::ExitCode;

use kvsim_core::plan::Plan;
use kvsim_gpu::executor::{median, ExecOptions, ExecReport, ExecutorOptions};
use kvsim_gpu::layout::DeviceLayout;
use kvsim_gpu::lower::AttnKernel;
use kvsim_gpu::program::MoeOp;
use kvsim_gpu::{lower_plan_measured, no_device_reason, DeviceInfo, GpuError, GpuExecutor, LowerOptions, LoweredPlan};
use serde_json::{json, Value};

use super::{say, CliError};
use kvsim_sim::cost::desc::{describe, DescSource, DESC_VERSION};
use kvsim_sim::cost::{routing, run_json, RunOptions};
use kvsim_sim::exec::{plan_hash, run_plan, Outcome};

/// How `kvsim replay --backend gpu` lowers and times a plan.
#[derive(Clone, Debug)]
pub struct GpuReplayOptions {
    pub lowering: LowerOptions,
    /// Untimed runs before the timed ones (module loading, first-touch effects).
    pub warmup: u32,
    /// Timed runs; every reported time is the median over them.
    pub repeat: u32,
    /// Time every launching op with its own events.
    pub time_ops: bool,
    /// `--devices N`: every rank on its own executor, in lock-step (issue 23).
    pub ranks: Option<super::replay_ranks::RanksReplay>,
}

impl Default for GpuReplayOptions {
    fn default() -> Self {
        GpuReplayOptions {
            lowering: LowerOptions::default(),
            warmup: 0,
            repeat: 1,
            time_ops: false,
            ranks: None,
        }
    }
}

/// What the device did, for the cost description: its resident CTAs and the routing counts of
/// the first timed run.
struct DeviceSource<'a> {
    resident: &'a BTreeMap<String, u64>,
    routes: BTreeMap<(usize, usize), Vec<u32>>,
}

impl DescSource for DeviceSource<'_> {
    fn resident(&self, module: &str) -> u64 {
        self.resident.get(module).copied().unwrap_or(1)
    }

    fn routing(&mut self, step: usize, op: usize, m: &MoeOp, layout: &DeviceLayout) -> routing::Routing {
        match self.routes.get(&(step, op)) {
            Some(c) => routing::Routing::from_counts(c, "measured"),
            None => {
                let e = layout.moe.map_or(1, |l| l.experts);
                routing::expected_routing(m.tokens.len() as u64, m.top_k, e)
            }
        }
    }
}

/// Every SM spins this long before each timed run, so clocks are up at step 0.
const WARM_UP_MS: u32 = 30;

/// Bytes of the device-to-device copy that gives the reference bandwidth.
const COPY_BYTES: usize = 512 << 20;

pub(super) fn gpu_err(e: GpuError) -> CliError {
    match e {
        GpuError::NoDevice(reason) => CliError::Input(format!("no CUDA device: {reason}")),
        other => CliError::Input(format!("gpu backend: {other}")),
    }
}

/// The kernel driver's version line (`/proc/driver/nvidia/version`), when there is one.
fn driver_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let line = text.lines().next()?;
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue ..."
    line.split_whitespace()
        .find(|w| w.chars().filter(|&c| c == '.').count() >= 1 && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

fn us(ms: f32) -> f64 {
    f64::from(ms) * 1000.0
}

/// The first run's report (violations, routes) with every time replaced by the median over
/// `reports` (runs of one program: same steps, windows and timed ops).
fn median_report(reports: &[ExecReport]) -> ExecReport {
    let mut r = reports[0].clone();
    let med = |f: &dyn Fn(&ExecReport) -> Option<f32>| median(&reports.iter().filter_map(f).collect::<Vec<_>>());
    for (i, s) in r.steps.iter_mut().enumerate() {
        s.device_ms = med(&|x| x.steps.get(i).map(|t| t.device_ms));
        s.host_ns = med(&|x| x.steps.get(i).map(|t| t.host_ns as f32)) as u64;
    }
    for (i, p) in r.points.iter_mut().enumerate() {
        p.device_ms = med(&|x| x.points.get(i).map(|t| t.device_ms));
        p.host_ns = med(&|x| x.points.get(i).map(|t| t.host_ns as f32)) as u64;
        p.wall_ns = p
            .wall_ns
            .map(|_| med(&|x| x.points.get(i).and_then(|t| t.wall_ns).map(|w| w as f32)) as u64);
    }
    for (i, o) in r.op_timings.iter_mut().enumerate() {
        o.device_ms = med(&|x| x.op_timings.get(i).map(|t| t.device_ms));
    }
    r
}

fn gbps(bytes: u64, ms: f32) -> Option<f64> {
    (ms > 0.0 && bytes > 0).then(|| bytes as f64 / (f64::from(ms) * 1e-3) / 1e9)
}

fn kernel_name(k: Option<AttnKernel>) -> String {
    match k {
        None => "state_update".into(),
        Some(AttnKernel::Mma { head_dim, head_tile }) => format!("attn_mma (D {head_dim}, {head_tile} heads/CTA)"),
        Some(AttnKernel::Latent { latent_dim, head_tile }) => {
            format!("attn_latent (D {latent_dim}, {head_tile} heads/CTA)")
        }
        Some(AttnKernel::LatentMma {
            latent_dim,
            head_tile,
            stages,
        }) => format!("attn_latent_mma (D {latent_dim}, {head_tile} heads/CTA, {stages} stages)"),
        Some(AttnKernel::Generic { head_dim }) => format!("attn_generic (D {head_dim})"),
    }
}

fn violations_json(l: &LoweredPlan, report: &ExecReport) -> Vec<Value> {
    report
        .violations
        .iter()
        .map(|v| {
            let at = l.origins.get(v.step).and_then(|o| o.get(v.op)).copied();
            let (rank, group) = l.plan_group(v.group);
            let (_, req) = l.request(v.req);
            json!({
                "step": l.steps.get(v.step),
                "rank": rank,
                "op_index": at.map(|a| a.op_index),
                "req": req,
                "group": group,
                "block": v.block.map(|b| b.0),
                "position": v.position,
                "device_step": v.step,
                "device_op": v.op,
                "detail": v.to_string(),
            })
        })
        .collect()
}

/// Lowers `plan` and times it on a fresh executor (for `--against`'s fixed plan).
fn measure(plan: &Plan, ro: &GpuReplayOptions, opts: &ExecOptions) -> Result<(LoweredPlan, Vec<ExecReport>), CliError> {
    let lowered = lower_plan_measured(plan, &ro.lowering).map_err(|e| CliError::Input(e.to_string()))?;
    let exec_options = kvsim_gpu::executor::ExecutorOptions {
        spin_wait: true,
        ..Default::default()
    };
    let mut exec = GpuExecutor::with_options(lowered.program.layout.clone(), &exec_options).map_err(gpu_err)?;
    let reports = timed_runs(&mut exec, &lowered, opts, ro)?;
    Ok((lowered, reports))
}

/// Runs the plan on the GPU and writes the result; returns the exit code. With `against`
/// (a fixed counterpart of a plan the simulator flags), both run with windows synchronised
/// and the result gains the measured symptom at the finding's point.
pub fn run(
    plan: &Plan,
    out: &std::path::Path,
    ro: &GpuReplayOptions,
    against: Option<&Plan>,
) -> Result<ExitCode, CliError> {
    if let Some(r) = &ro.ranks {
        super::replay_ranks::check_args(r, plan)?;
    }
    if let Some(reason) = no_device_reason() {
        return Err(CliError::Input(format!("no CUDA device: {reason}")));
    }
    if ro.repeat == 0 {
        return Err(CliError::Input("--repeat must be at least 1".into()));
    }
    if ro.ranks.is_some() && against.is_some() {
        return Err(CliError::Input(
            "--against runs on one device; leave out --devices".into(),
        ));
    }
    // The benchmark records a steady window: compare every window of both plans. A poached
    // prefix hit runs as vLLM would run it after the finding (admitted with the hit, computing
    // the uncached rest; vllm_kv.md §6.4): no effect on a plan without that finding.
    let ro = &GpuReplayOptions {
        lowering: LowerOptions {
            every_window: ro.lowering.every_window || against.is_some(),
            admit_poached_hits: true,
            ..ro.lowering.clone()
        },
        ..ro.clone()
    };
    let hash = plan_hash(plan);
    let lowered = lower_plan_measured(plan, &ro.lowering).map_err(|e| CliError::Input(e.to_string()))?;
    let sim = run_plan(plan);
    let exec_options = kvsim_gpu::executor::ExecutorOptions {
        spin_wait: true,
        ..Default::default()
    };
    let opts = kvsim_gpu::ExecOptions {
        seed: plan.scenario.seed,
        time_ops: ro.time_ops,
        warm_up_ms: WARM_UP_MS,
        sync_windows: against.is_some() || kvsim_gpu::ExecOptions::default().sync_windows,
        ..kvsim_gpu::ExecOptions::default()
    };
    let (exec, reports, ranks) = match &ro.ranks {
        None => {
            let mut exec = GpuExecutor::with_options(lowered.program.layout.clone(), &exec_options).map_err(gpu_err)?;
            let reports = timed_runs(&mut exec, &lowered, &opts, ro)?;
            (exec, reports, None)
        }
        Some(r) => {
            let (reports, v) = super::replay_ranks::run(plan, &lowered, r, &opts, &exec_options, ro.warmup, ro.repeat)?;
            // The copy bandwidth and resident CTAs, once the ranks' pools are freed: one
            // rank's layout has every kernel shape (ranks share the model).
            let layout = kvsim_core::device::ranks::split_ranks(&lowered, 1)
                .pop()
                .map(|p| p.lowered.program.layout)
                .unwrap_or_else(|| lowered.program.layout.clone());
            let exec = GpuExecutor::with_options(layout, &exec_options).map_err(gpu_err)?;
            (exec, reports, Some(v))
        }
    };
    let report = median_report(&reports);
    let copy = exec.bench_copy(COPY_BYTES, 3, 10).map_err(gpu_err)?;
    let copy_gbps = copy.gbps();
    let info = exec.info().clone();

    let kv_bytes = lowered.decode_kv_bytes_per_step();
    let steps = steps_json(&lowered, &report, &reports, &kv_bytes);
    let points = points_json(&lowered, &report, &reports, &kv_bytes);
    let resident = resident_ctas(&exec, &lowered);
    let mut src = DeviceSource {
        resident: &resident,
        routes: reports[0]
            .moe_routes
            .iter()
            .map(|r| ((r.step, r.op), r.tokens_per_expert.clone()))
            .collect(),
    };
    let cost_steps = describe(plan, &lowered, info.sm_count, &mut src);
    let run_info = run_info_json(ro, &opts, &exec_options);
    let bandwidth = bandwidth_json(&lowered, &report, &kv_bytes, copy_gbps);
    let layout = layout_json(&lowered);
    let violations = violations_json(&lowered, &report);
    let verified = report.violations.is_empty();
    let sim_first = match &sim.outcome {
        Outcome::Passed => None,
        Outcome::Violation(f) | Outcome::Mismatch(f) => Some((f.step, f.invariant.clone())),
    };
    let gpu_first = violations.first().and_then(|v| v["step"].as_u64());
    let outcome = outcome_json(&lowered, verified, &violations);
    let symptom = match (against, &sim.outcome) {
        (Some(fixed), Outcome::Violation(f) | Outcome::Mismatch(f)) => {
            let (fl, fr) = measure(fixed, ro, &opts)?;
            let finding = super::replay_symptom::SimFinding {
                invariant: f.invariant.as_deref().unwrap_or("PLAN-MISMATCH"),
                step: f.step,
                detail: &f.detail,
            };
            let prefills = poaching_prefills(f, (plan, &lowered), (fixed, &fl));
            Some(super::replay_symptom::symptom(
                &finding,
                (&lowered, &reports),
                (&fl, &fr),
                prefills.as_ref(),
            ))
        }
        (Some(_), Outcome::Passed) => return Err(CliError::Input(
            "--against compares a plan the simulator flags with its fixed counterpart; this plan passes the simulator"
                .into(),
        )),
        (None, _) => None,
    };
    let mut result = json!({
        "format": "kvsim-replay/1",
        "backend": "gpu",
        "plan_hash": hash,
        "outcome": outcome,
        "device": device_json(&info),
        "verification": {
            "passed": verified,
            "rows_verified": report.rows_verified,
            "violations": violations,
        },
        "simulator": {
            "outcome": sim.outcome,
            "first_finding_step": sim_first.as_ref().map(|f| f.0),
            "first_finding_invariant": sim_first.as_ref().and_then(|f| f.1.clone()),
            "violations_seen_while_lowering": lowered.sim_violations.iter().map(|f| json!({
                "step": f.at.step, "rank": f.at.rank, "op_index": f.at.op_index,
                "invariant": f.invariant, "detail": f.detail})).collect::<Vec<_>>(),
        },
        "gpu_first_violation_step": gpu_first,
        "steps": steps,
        "points": points,
        "bandwidth": bandwidth,
        "layout": layout,
        "notes": lowered.notes,
        "run": run_info,
        "cost": {
            "desc_version": DESC_VERSION,
            "sm_count": info.sm_count,
            "resident_ctas": resident,
            "steps": cost_steps,
        },
    });
    if let Some((v, _)) = &symptom {
        result["symptom"] = v.clone();
    }
    let exchange_ok = ranks.as_ref().is_none_or(|v| v["exchange_verified"] == true);
    if let Some(v) = ranks {
        result["ranks"] = v;
    }
    let mut text = serde_json::to_string_pretty(&result).expect("results serialize");
    text.push('\n');
    kvsim_sim::output::write_atomic(out, text.as_bytes())
        .map_err(|e| CliError::Input(format!("cannot write {}: {e}", out.display())))?;
    let sim_line = match &sim_first {
        None => "simulator: passed".to_string(),
        Some((step, inv)) => format!(
            "simulator: {} at step {step}",
            inv.as_deref().unwrap_or("PLAN-MISMATCH")
        ),
    };
    let code = say_outcome(&lowered, &info.name, &report, &violations, &sim_line, &hash, verified)?;
    if let Some(v) = result.get("ranks") {
        say(super::replay_ranks::summary(v))?;
    }
    if !exchange_ok {
        say("FAILED rank exchange: the gathered messages differ from the simulator's (ranks.exchange_mismatches)")?;
        return Ok(ExitCode::from(1));
    }
    if code != ExitCode::SUCCESS || sim_first.is_none() {
        return Ok(code);
    }
    // The device verified every read, but the simulator flags the plan: not a content bug.
    // Never a plain pass: say what the GPU could observe and what it could not.
    match &symptom {
        Some((_, line)) => say(line)?,
        None => say(
            "the GPU checks content only: the simulator's finding is not a content violation; \
             replay with --against FIXED_PLAN to measure its timing symptom",
        )?,
    }
    Ok(ExitCode::from(1))
}

/// On a PL-NO-POACH finding: the poaching request (the finding's `schedule` op names it) and
/// its prompt chunks in both lowered plans, from the finding's step on.
fn poaching_prefills<'a>(
    f: &'a kvsim_sim::exec::Finding,
    failing: (&Plan, &LoweredPlan),
    fixed: (&Plan, &LoweredPlan),
) -> Option<super::replay_prefill::Prefills<'a>> {
    if f.invariant.as_deref() != Some("PL-NO-POACH") {
        return None;
    }
    let req = f.op.get("req")?.as_str()?;
    let prompt = kvsim_core::device::prompt_len(failing.0, f.rank, req, f.step)?;
    Some(super::replay_prefill::Prefills {
        req,
        prompt,
        failing: failing.1.prompt_chunks(Some(failing.0), f.rank, req, f.step, prompt),
        fixed: fixed.1.prompt_chunks(Some(fixed.0), f.rank, req, f.step, prompt),
    })
}

/// Untimed warm-up runs, then the timed runs' reports.
fn timed_runs(
    exec: &mut GpuExecutor,
    lowered: &LoweredPlan,
    opts: &ExecOptions,
    ro: &GpuReplayOptions,
) -> Result<Vec<ExecReport>, CliError> {
    for _ in 0..ro.warmup {
        exec.execute(&lowered.program, opts).map_err(gpu_err)?;
    }
    let mut reports = Vec::with_capacity(ro.repeat as usize);
    for _ in 0..ro.repeat {
        reports.push(exec.execute(&lowered.program, opts).map_err(gpu_err)?);
    }
    Ok(reports)
}

/// Per step: its median times, their range over the runs, its decode K/V bytes and rate, and
/// (with `time_ops`) its ops' times.
fn steps_json(lowered: &LoweredPlan, report: &ExecReport, reports: &[ExecReport], kv_bytes: &[u64]) -> Vec<Value> {
    let spread = |f: &dyn Fn(&ExecReport) -> Option<f32>| -> Value {
        let v: Vec<f32> = reports.iter().filter_map(f).collect();
        let lo = v.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = v.iter().copied().fold(0.0, f32::max);
        json!([us(lo), us(hi)])
    };
    let mut op_times: BTreeMap<usize, Vec<Value>> = BTreeMap::new();
    for t in &report.op_timings {
        op_times
            .entry(t.step)
            .or_default()
            .push(json!({"op": t.op, "kind": t.kind, "device_us": us(t.device_ms)}));
    }
    report
        .steps
        .iter()
        .map(|t| {
            let bytes = kv_bytes.get(t.step).copied().unwrap_or(0);
            let mut v = json!({
                "step": lowered.steps.get(t.step),
                "device_us": us(t.device_ms),
                "device_us_range": spread(&|r| r.steps.get(t.step).map(|s| s.device_ms)),
                "host_us": t.host_ns as f64 / 1000.0,
                "decode_kv_bytes": bytes,
                "kv_gbps": gbps(bytes, t.device_ms),
            });
            if let Some(ops) = op_times.remove(&t.step) {
                v["ops"] = Value::Array(ops);
            }
            v
        })
        .collect()
}

/// Per measurement window: its median times, every run's device time, its decode K/V bytes
/// and rate.
fn points_json(lowered: &LoweredPlan, report: &ExecReport, reports: &[ExecReport], kv_bytes: &[u64]) -> Vec<Value> {
    report
        .points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let bytes: u64 = kv_bytes.get(p.step_begin..=p.step_end).map_or(0, |s| s.iter().sum());
            json!({
                "point": p.point.0,
                "step_begin": lowered.steps.get(p.step_begin),
                "step_end": lowered.steps.get(p.step_end),
                "device_us": us(p.device_ms),
                "device_us_runs": reports.iter().filter_map(|r| r.points.get(i)).map(|q| us(q.device_ms)).collect::<Vec<_>>(),
                "host_us": p.host_ns as f64 / 1000.0,
                "wall_us": p.wall_ns.map(|n| n as f64 / 1000.0),
                "decode_kv_bytes": bytes,
                "kv_gbps": gbps(bytes, p.device_ms),
            })
        })
        .collect()
}

/// CTAs resident on the whole device per decode module the layout uses.
fn resident_ctas(exec: &GpuExecutor, lowered: &LoweredPlan) -> BTreeMap<String, u64> {
    lowered
        .program
        .layout
        .groups
        .iter()
        .filter_map(AttnKernel::for_group)
        .filter_map(|k| exec.resident_ctas(k).map(|n| (k.module_name(), n)))
        .collect()
}

/// How the runs were made (the result's "run").
fn run_info_json(ro: &GpuReplayOptions, opts: &ExecOptions, exec_options: &ExecutorOptions) -> Value {
    let run_opts = RunOptions {
        lowering: ro.lowering.clone(),
        time_ops: ro.time_ops,
        sync_windows: opts.sync_windows,
    };
    let mut run_info = run_json(&run_opts);
    run_info["warmup"] = json!(ro.warmup);
    run_info["repeat"] = json!(ro.repeat);
    run_info["spin_wait"] = json!(exec_options.spin_wait);
    run_info["warm_up_ms"] = json!(WARM_UP_MS);
    run_info
}

/// Decode K/V bytes over the device time of the decode-only steps, against the copy bandwidth.
fn bandwidth_json(lowered: &LoweredPlan, report: &ExecReport, kv_bytes: &[u64], copy_gbps: f64) -> Value {
    let decode_only = kvsim_gpu::lower_plan::decode_only_steps(&lowered.program);
    let (mut total_bytes, mut decode_ms, mut decode_steps) = (0u64, 0f32, 0usize);
    for t in &report.steps {
        if decode_only.get(t.step).copied().unwrap_or(false) {
            total_bytes += kv_bytes.get(t.step).copied().unwrap_or(0);
            decode_ms += t.device_ms;
            decode_steps += 1;
        }
    }
    let achieved = gbps(total_bytes, decode_ms);
    json!({
        "decode_only_steps": decode_steps,
        "decode_kv_bytes": total_bytes,
        "decode_steps_device_us": us(decode_ms),
        "achieved_gbps": achieved,
        "copy_gbps": copy_gbps,
        "percent_of_copy": achieved.map(|a| 100.0 * a / copy_gbps),
        "note": "K/V bytes the decode attention reads over the device time of the decode-only steps (every prefill in them writes one token; their K/V writes, zero/copy and MoE are in the time); copy = cuMemcpyDtoD of 512 MiB, read + write, median of 10",
    })
}

/// Every group of the device layout: its plan rank and group, shape and decode kernel.
fn layout_json(lowered: &LoweredPlan) -> Vec<Value> {
    lowered
        .program
        .layout
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let (rank, group) = lowered.plan_group(kvsim_gpu::GroupId(i as u32));
            json!({
                "rank": rank, "group": group, "kind": g.kind.device_name(), "block_size": g.block_size_tokens,
                "layers": g.layers, "kv_heads": g.kv_heads, "q_heads": g.q_heads, "head_dim": g.head_dim,
                "blocks": g.blocks_total, "pool_bytes": g.pool_bytes(),
                "kernel": kernel_name(AttnKernel::for_group(g)),
            })
        })
        .collect()
}

/// The result's "outcome": a plan/model mismatch first, else passed or the first violation.
fn outcome_json(lowered: &LoweredPlan, verified: bool, violations: &[Value]) -> Value {
    match (&lowered.mismatch, verified) {
        (Some((at, detail)), _) => json!({"result": "mismatch", "step": at.step, "rank": at.rank,
            "op_index": at.op_index, "detail": detail}),
        (None, true) => json!({"result": "passed"}),
        (None, false) => json!({"result": "violation", "first": violations[0]}),
    }
}

/// The device, its driver and NVRTC.
fn device_json(info: &DeviceInfo) -> Value {
    json!({
        "name": info.name,
        "compute_capability": format!("{}.{}", info.compute_capability.0, info.compute_capability.1),
        "sm_count": info.sm_count,
        "l2_bytes": info.l2_bytes,
        "memory_bytes": info.total_mem_bytes,
        "driver_version": driver_version(),
        "driver_cuda_version": format!("{}.{}", info.driver_cuda_version / 1000, info.driver_cuda_version % 1000 / 10),
        "nvrtc_version": format!("{}.{}", info.nvrtc_version.0, info.nvrtc_version.1),
    })
}

/// Prints the outcome (and every violation) and gives the exit code.
fn say_outcome(
    lowered: &LoweredPlan,
    device: &str,
    report: &ExecReport,
    violations: &[Value],
    sim_line: &str,
    hash: &str,
    verified: bool,
) -> Result<ExitCode, CliError> {
    if let Some((at, detail)) = &lowered.mismatch {
        say(format_args!(
            "FAILED PLAN-MISMATCH at step {} rank {} op {}: {detail} ({sim_line})",
            at.step, at.rank, at.op_index
        ))?;
        return Ok(ExitCode::from(1));
    }
    if verified {
        say(format_args!(
            "{} on {}: {} steps, {} rows verified, plan {hash} ({sim_line})",
            if sim_line == "simulator: passed" {
                "passed"
            } else {
                "content verified"
            },
            device,
            report.steps.len(),
            report.rows_verified
        ))?;
        Ok(ExitCode::SUCCESS)
    } else {
        say(format_args!(
            "FAILED content verification on {}: {} violations, first: {} ({sim_line})",
            device,
            report.violations.len(),
            violations[0]["detail"].as_str().unwrap_or("")
        ))?;
        for v in violations {
            say(format_args!(
                "  plan step {} rank {} op {} req {} group {} block {} pos {}: {}",
                v["step"], v["rank"], v["op_index"], v["req"], v["group"], v["block"], v["position"], v["detail"]
            ))?;
        }
        Ok(ExitCode::from(1))
    }
}
