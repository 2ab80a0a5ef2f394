//! `kvsim-replay/1` with backend `gpu` (`kvsim replay PLAN --backend gpu --out FILE`), as
//! `src/cli/replay_gpu.rs` builds it with `json!`. Schema only; `tests/data/gpu/` holds a result
//! an H200 wrote, validated against it.

#![allow(dead_code)] // never built, only described

use std::collections::BTreeMap;

use kvsim_sim::cost::desc::StepDesc;
use kvsim_sim::exec::Outcome;
use schemars::JsonSchema;

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct GpuResult {
    /// `kvsim-replay/1`.
    format: String,
    /// `gpu`.
    backend: String,
    plan_hash: String,
    outcome: GpuOutcome,
    device: Device,
    verification: Verification,
    simulator: Simulator,
    gpu_first_violation_step: Option<u64>,
    steps: Vec<Step>,
    points: Vec<Point>,
    bandwidth: Bandwidth,
    layout: Vec<LayoutGroup>,
    /// What the lowering could not model exactly.
    notes: Vec<String>,
    run: Run,
    cost: Cost,
    /// With `--against FIXED`: the bug's measured timing symptom at the finding's point.
    #[serde(default)]
    symptom: Option<Symptom>,
    /// With `--devices N`: the ranks in lock-step (issue 23).
    #[serde(default)]
    ranks: Option<Ranks>,
}

/// `--devices N`: every rank on its own executor, in lock-step over an exchange.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Ranks {
    ranks: u64,
    devices: u64,
    /// Rank r ran on device `device_of_rank[r]`.
    device_of_rank: Vec<u64>,
    device_names: Vec<String>,
    /// `host` (or `nccl`).
    exchange: String,
    lag_step_us: f64,
    /// Per rank: the plan's `message_lag` in steps.
    message_lag_steps: Vec<u64>,
    /// Every step's gathered messages were what the simulator says each rank sent.
    exchange_verified: bool,
    exchange_mismatches: Vec<RankMismatch>,
    steps: Vec<RankStep>,
    totals: RankTotals,
    note: String,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RankMismatch {
    step: Option<u64>,
    rank: u64,
    detail: String,
}

/// One step, per rank (medians over the timed runs, µs).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RankStep {
    step: Option<u64>,
    rank_device_us: Vec<f64>,
    /// From leaving the previous exchange to arriving at this one (lag included).
    rank_busy_us: Vec<f64>,
    rank_lag_us: Vec<f64>,
    rank_wait_us: Vec<f64>,
    /// Max minus min busy time.
    skew_us: f64,
    /// The last rank's wait: the exchange itself.
    exchange_us: f64,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RankTotals {
    max_skew_us: f64,
    max_skew_step: Option<u64>,
    exchange_us_median: f64,
    rank_wait_us: Vec<f64>,
}

/// `--against`: the failing and the fixed plan's recorded time of the finding's point.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Symptom {
    /// The point (null when the failing plan times no window at or after the finding).
    point: Option<u64>,
    /// The simulator's finding on the failing plan.
    #[serde(default)]
    finding: Option<SymptomFinding>,
    #[serde(default)]
    failing: Option<Recorded>,
    #[serde(default)]
    fixed: Option<Recorded>,
    #[serde(default)]
    difference_us: Option<f64>,
    #[serde(default)]
    difference_pct: Option<f64>,
    /// The larger run-to-run range of the two, relative to the fixed plan's time.
    #[serde(default)]
    spread_pct: Option<f64>,
    /// Whether the difference exceeds that spread.
    observed: bool,
    /// Why nothing could be measured.
    #[serde(default)]
    why: Option<String>,
    /// The point's window that holds the finding's step (or its next window), against the
    /// same window of the fixed plan.
    #[serde(default)]
    window: Option<SymptomWindow>,
    /// On a PL-NO-POACH finding: the poaching request's prefill (lowered as vLLM would run it
    /// after the finding) against the same request's prefill in the fixed plan.
    #[serde(default)]
    prefill: Option<SymptomPrefill>,
}

/// The poaching request's prompt chunks in both plans, each step timed by the executor.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SymptomPrefill {
    request: String,
    #[serde(default)]
    prompt_tokens: Option<u64>,
    /// Prompt tokens the failing plan's request took from the prefix cache.
    #[serde(default)]
    hit_tokens: Option<u64>,
    /// How the steps of the two plans are matched.
    #[serde(default)]
    matched_by: Option<String>,
    #[serde(default)]
    failing: Option<PrefillSide>,
    #[serde(default)]
    fixed: Option<PrefillSide>,
    #[serde(default)]
    difference_us: Option<f64>,
    #[serde(default)]
    difference_pct: Option<f64>,
    /// The larger run-to-run range of the two, relative to the fixed plan's time.
    #[serde(default)]
    spread_pct: Option<f64>,
    /// Whether the difference exceeds that spread.
    observed: bool,
    /// The finding's step alone (the first chunk in both plans).
    #[serde(default)]
    finding_step: Option<SymptomSteps>,
    /// Plan steps of the failing prefill that lie in a timed window.
    #[serde(default)]
    timed_steps: Option<Vec<u64>>,
    /// Why nothing could be measured.
    #[serde(default)]
    why: Option<String>,
}

/// One plan's prompt chunks of the poaching request.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PrefillSide {
    prompt_tokens_computed: u64,
    /// The first position computed (the hit, in the failing plan).
    first_position: u64,
    /// Plan step of each chunk.
    steps: Vec<u64>,
    chunk_tokens: Vec<u64>,
    /// New tokens of each chunk's whole step (every request of the batch).
    step_tokens: Vec<u64>,
    /// Chunks of synthetic KV (`fake_compute`), materialised as a prefill of the tokens.
    synthetic: Vec<bool>,
    /// Summed device time of the chunks' steps: median over the runs, then least and most.
    us: f64,
    range_us: [f64; 2],
}

/// Two plans' times (summed steps, or a window), over the timed runs.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SymptomSteps {
    /// The failing plan's median over the runs.
    failing_us: f64,
    failing_range_us: [f64; 2],
    /// The fixed plan's median over the runs.
    fixed_us: f64,
    fixed_range_us: [f64; 2],
    difference_us: f64,
    difference_pct: f64,
    /// The larger run-to-run range of the two, relative to the fixed plan's time.
    spread_pct: f64,
    /// Whether the difference exceeds that spread.
    observed: bool,
}

/// The finding's window in both plans, over the timed runs.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SymptomWindow {
    /// Its ordinal among the point's windows (0: the admission window).
    ordinal: u64,
    /// The window's time in both plans, compared.
    #[serde(flatten)]
    compared: SymptomSteps,
}

/// The simulator's finding a symptom is measured for.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SymptomFinding {
    invariant: String,
    step: u64,
    detail: String,
}

/// What the benchmark would record for the point in one plan, over the timed runs.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Recorded {
    /// Median over the runs.
    recorded_us: f64,
    /// Least and most over the runs.
    range_us: [f64; 2],
    /// Which windows give it (the upper median of the steady windows, the one steady window,
    /// or the admission window).
    how: String,
    /// The point's windows.
    windows: u64,
}

#[derive(JsonSchema)]
#[serde(tag = "result", rename_all = "snake_case", deny_unknown_fields)]
pub enum GpuOutcome {
    Passed,
    Mismatch {
        step: u64,
        rank: u32,
        op_index: u64,
        detail: String,
    },
    Violation {
        first: Violation,
    },
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Violation {
    step: Option<u64>,
    rank: u32,
    op_index: Option<u64>,
    req: String,
    group: u32,
    block: Option<u32>,
    position: Option<u64>,
    device_step: u64,
    device_op: u64,
    detail: String,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Device {
    name: String,
    compute_capability: String,
    sm_count: u32,
    l2_bytes: u64,
    memory_bytes: u64,
    driver_version: Option<String>,
    driver_cuda_version: String,
    nvrtc_version: String,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Verification {
    passed: bool,
    rows_verified: u64,
    violations: Vec<Violation>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Simulator {
    outcome: Outcome,
    first_finding_step: Option<u64>,
    first_finding_invariant: Option<String>,
    violations_seen_while_lowering: Vec<LoweringViolation>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LoweringViolation {
    step: u64,
    rank: u32,
    op_index: u64,
    invariant: String,
    detail: String,
}

/// One step: median device time, its range over the runs, decode K/V bytes and rate.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Step {
    step: Option<u64>,
    device_us: f64,
    /// [lowest, highest] over the timed runs.
    device_us_range: [f64; 2],
    host_us: f64,
    decode_kv_bytes: u64,
    kv_gbps: Option<f64>,
    /// With `--time-ops`: each launching op's time.
    ops: Option<Vec<OpTime>>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct OpTime {
    op: u64,
    kind: String,
    device_us: f64,
}

/// One measurement window.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Point {
    point: u64,
    step_begin: Option<u64>,
    step_end: Option<u64>,
    device_us: f64,
    device_us_runs: Vec<f64>,
    host_us: f64,
    wall_us: Option<f64>,
    decode_kv_bytes: u64,
    kv_gbps: Option<f64>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Bandwidth {
    decode_only_steps: u64,
    decode_kv_bytes: u64,
    decode_steps_device_us: f64,
    achieved_gbps: Option<f64>,
    copy_gbps: f64,
    percent_of_copy: Option<f64>,
    note: String,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LayoutGroup {
    rank: u32,
    group: u32,
    kind: String,
    block_size: u64,
    layers: u32,
    kv_heads: u32,
    q_heads: u32,
    head_dim: u32,
    blocks: u64,
    pool_bytes: u64,
    kernel: String,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Run {
    synthetic_kv: String,
    moe_input: String,
    time_ops: bool,
    sync_windows: bool,
    warmup: u32,
    repeat: u32,
    spin_wait: bool,
    warm_up_ms: u32,
}

/// The cost model's description of the program, for `kvsim calibrate`.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Cost {
    desc_version: u32,
    sm_count: u32,
    resident_ctas: BTreeMap<String, u64>,
    steps: Vec<StepDesc>,
}
