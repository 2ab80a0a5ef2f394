//! The rank artifact with Dynamo's field names and shapes (dynamo_fpm.md §6),
//! rebuilt from a sweep plan alone, so a replay reproduces it byte for byte.
//! Wall times come from the simulator's nominal step clock (`nominal_step_ns`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::grid::{BenchmarkPoint, RetainedFpm};
use super::sweep::{hex, BenchmarkMeta, CapacityFallback, ExecutionRecord};
use crate::plan::{nominal_step_ns, Plan};

use super::artifact_schema as shape;

/// The `kvwarm` block: the warm-up's gate verdict, strategy, stages and counts (dynamo_fpm.md §6.2).
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Kvwarm {
    /// The warm-up flag (`DYN_BENCH_KV_WARMUP`).
    pub enabled: bool,
    /// The gate's verdict (null when the flag is off).
    pub warm_eligible: Option<bool>,
    /// Why the gate refused (§5.1), when it did.
    pub skip_reason: Option<String>,
    /// `native_exact_context`, `shared_prefix_chain`, or null (seed 000).
    pub initialization_strategy: Option<String>,
    /// Always null: content is salted synthetic, no dataset is probed.
    #[schemars(with = "()")]
    pub dataset: Option<Value>,
    /// Per warm-up stage: batch, depth, build time, failures (§6.2).
    #[schemars(with = "Vec<shape::StageEntry>")]
    pub stages: Vec<Value>,
    /// Decode points measured on real KV.
    pub points_real_kv: u64,
    /// Decode points that fell back to synthetic KV.
    pub points_fake_fallback: u64,
    /// Decode points skipped by the gate.
    pub points_gate_skipped: u64,
    /// `DYN_BENCH_GIANT_KV_THRESHOLD`: from this KV read size a point repeats its steady step (§9.1).
    pub giant_kv_threshold: u64,
    /// Steady steps a giant point repeats (§9.1).
    pub giant_kv_repeats: u64,
    /// Points whose warm-up did not fit the pool and fell back (§3.1).
    pub capacity_fallbacks: Vec<CapacityFallback>,
    /// kvsim addition: untimed warm-up prefill tokens (≈ Σ total_kv_read_tokens, seed 000).
    pub untimed_prefill_tokens: u64,
}

/// `scheduled_requests` of an FPM: what the step scheduled (§6.4).
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ScheduledRequests {
    /// Requests with prefill tokens in the step.
    pub num_prefill_requests: u64,
    /// Prefill tokens scheduled.
    pub sum_prefill_tokens: u64,
    /// Variance of the prefill lengths.
    pub var_prefill_length: f64,
    /// KV tokens the prefills read.
    pub sum_prefill_kv_tokens: u64,
    /// Decoding requests in the step.
    pub num_decode_requests: u64,
    /// KV tokens the decodes read.
    pub sum_decode_kv_tokens: u64,
    /// Variance of the decodes' KV reads.
    pub var_decode_kv_tokens: f64,
}

/// One forward-pass metric (FPM): a scheduler step's shape and wall time (§6.4).
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Fpm {
    /// FPM format version.
    pub version: u32,
    /// The worker that measured it.
    pub worker_id: String,
    /// The attention-DP rank.
    pub dp_rank: u32,
    /// The step counter.
    pub counter_id: u64,
    /// Seconds the step took.
    pub wall_time: f64,
    /// What the step scheduled.
    pub scheduled_requests: ScheduledRequests,
    /// What waited in the queues.
    #[schemars(with = "shape::QueuedRequests")]
    pub queued_requests: Value,
    /// For a giant point: the steady samples its wall time is the upper median of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvwarm_giant_median_of: Option<u64>,
    /// Whether the FPM is a steady step (not the admission step).
    pub kvwarm_steady_sample: bool,
    /// The measurement record (estimate method, point key, prompt evidence; §6.6).
    #[schemars(with = "shape::BenchmarkMeasurement")]
    pub benchmark_measurement: Value,
}

/// One measured point with its FPMs (`results[]`).
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ResultRow {
    /// The benchmark point.
    pub point: BenchmarkPoint,
    /// How the point's KV was seeded (`real_kv`, `fake_fallback`, `skip:<reason>`, …; §5.2).
    pub kv_seed_regime: String,
    /// The FPMs kept for the point.
    pub fpms: Vec<Fpm>,
}

/// One rank's benchmark artifact (spec/artifact.md; Dynamo's schema version 2).
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RankArtifact {
    /// Always 2.
    pub schema_version: u32,
    /// The warm-up block.
    pub kvwarm: Kvwarm,
    /// The artifact's type tag.
    pub artifact_type: String,
    /// `complete`, `partial` or `failed`.
    pub status: String,
    /// Whether the artifact's measurements are valid.
    pub valid: bool,
    /// Whether a collector may use it.
    pub usable: bool,
    /// Why the sweep stopped early (`timeout`), if it did.
    pub stop_reason: Option<String>,
    /// Whether the timings are valid.
    pub timing_valid: bool,
    /// The run's id.
    pub run_id: String,
    /// SHA-256 of the grid.
    pub grid_digest: String,
    /// Start, end and elapsed times.
    #[schemars(with = "shape::Timing")]
    pub timing: Value,
    /// This rank and the attention-DP size.
    #[schemars(with = "shape::Dp")]
    pub dp: Value,
    /// The rank synchronizer's settings.
    #[schemars(with = "shape::Synchronization")]
    pub synchronization: Value,
    /// Expected, completed and skipped points.
    #[schemars(with = "shape::Coverage")]
    pub coverage: Value,
    /// The benchmark configuration.
    #[schemars(with = "shape::Config")]
    pub config: Value,
    /// The scheduler limits the grid was built for.
    #[schemars(with = "shape::Limits")]
    pub limits: Value,
    /// How recurrent state was initialized.
    #[schemars(with = "shape::RecurrentState")]
    pub recurrent_state: Value,
    /// How samples are retained.
    #[schemars(with = "shape::MeasurementPolicy")]
    pub measurement_policy: Value,
    /// How synthetic prompts are made.
    #[schemars(with = "shape::SyntheticPrompts")]
    pub synthetic_prompts: Value,
    /// Measured points.
    pub results: Vec<ResultRow>,
    /// Per point, every rank's FPMs (attention DP).
    #[schemars(with = "Vec<shape::IterationGroup>")]
    pub iteration_groups: Vec<Value>,
    /// Points not measured, with why.
    #[schemars(with = "Vec<shape::SkippedPoint>")]
    pub skipped_points: Vec<Value>,
    /// Phases with no point.
    pub missing_phases: Vec<String>,
    /// The error that failed the run, if any.
    pub error: Option<String>,
}

fn sha256_hex(s: &str) -> String {
    hex(&Sha256::digest(s.as_bytes()))
}

/// `point_key`: SHA-256 of the point's shape (§5.5).
fn point_key(p: &BenchmarkPoint) -> String {
    let shape = json!({"batch_size": p.batch_size, "partition": p.partition, "point_type": p.point_type,
        "rows": p.rows, "total_kv_read_tokens": p.total_kv_read_tokens, "total_prefill_tokens": p.total_prefill_tokens});
    sha256_hex(&shape.to_string())
}

/// Forward tokens per (step, rank): the nominal clock's input.
fn step_tokens(plan: &Plan) -> BTreeMap<(u64, u32), u64> {
    let mut m = BTreeMap::new();
    for st in &plan.steps {
        *m.entry((st.step, st.rank)).or_insert(0) += crate::plan::forward_tokens(&st.ops);
    }
    m
}

fn rfc3339(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    format!("1970-01-01T{h:02}:{m:02}:{s:02}.{:06}Z", ns % 1_000_000_000 / 1000)
}

fn fpms_for(
    e: &ExecutionRecord,
    tokens: &BTreeMap<(u64, u32), u64>,
    meta: &BenchmarkMeta,
    plan_hash: &str,
) -> Vec<Fpm> {
    let mut raw: Vec<Fpm> = e
        .timed_steps
        .iter()
        .enumerate()
        .map(|(k, step)| Fpm {
            version: 1,
            worker_id: String::new(),
            dp_rank: e.rank,
            counter_id: e.point.benchmark_id,
            // The step's duration on every rank: lock-step means the slowest rank.
            wall_time: tokens
                .range((*step, 0)..=(*step, u32::MAX))
                .map(|(_, &t)| nominal_step_ns(t))
                .max()
                .unwrap_or(0) as f64
                / 1e9,
            scheduled_requests: ScheduledRequests {
                num_prefill_requests: 0,
                sum_prefill_tokens: 0,
                var_prefill_length: 0.0,
                sum_prefill_kv_tokens: 0,
                num_decode_requests: e.point.batch_size,
                sum_decode_kv_tokens: e.decode_kv_tokens[k],
                var_decode_kv_tokens: e.decode_kv_variance[k],
            },
            queued_requests: json!({"num_prefill_requests": 0, "sum_prefill_tokens": 0, "var_prefill_length": 0.0,
                "num_decode_requests": 0, "sum_decode_kv_tokens": 0, "var_decode_kv_tokens": 0.0}),
            kvwarm_giant_median_of: None,
            kvwarm_steady_sample: k > 0,
            benchmark_measurement: Value::Null,
        })
        .collect();
    let walls: Vec<f64> = raw.iter().map(|f| f.wall_time).collect();
    let retained = super::grid::select_retained(raw.len(), &walls);
    let indices = retained.raw_sample_indices();
    // §1.11: the retained FPM is the first steady sample (with the upper-median wall
    // time), the last sample, or what arrived.
    let keep = match retained {
        RetainedFpm::UpperMedian { steady_start, .. } => steady_start,
        RetainedFpm::LastStep { index } => index,
        RetainedFpm::AsArrived { .. } => 0,
    };
    let mut fpm = raw.remove(keep.min(raw.len() - 1));
    if let RetainedFpm::UpperMedian { wall_time, .. } = retained {
        fpm.wall_time = wall_time;
        fpm.kvwarm_giant_median_of = retained.median_of().map(|n| n as u64);
    }
    let requests: Vec<Value> = e
        .prompts
        .iter()
        .map(|p| json!({"slot": p.slot, "num_tokens": p.num_tokens, "sha256": p.sha256}))
        .collect();
    let aggregate = sha256_hex(&Value::Array(requests.clone()).to_string());
    fpm.benchmark_measurement = json!({
        "schema_version": 1,
        "point_key": point_key(&e.point),
        "dp_rank": e.rank,
        "prompts": {"status": "recorded", "sha256": aggregate, "requests": requests},
        "preparation": {"grid_digest": meta.grid_digest, "kv_seed_regime": e.kv_seed_regime, "plan": plan_hash},
        "expected_internal_samples": e.timed_steps.len(),
        "estimate": {"method": retained.method(), "raw_sample_indices": indices},
    });
    vec![fpm]
}

/// Every rank's artifact for a sweep plan that ran to the end without violation.
pub fn build_artifacts(plan: &Plan, meta: &BenchmarkMeta, plan_hash: &str, sim_time_ns: u64) -> Vec<RankArtifact> {
    let tokens = step_tokens(plan);
    let ranks = plan.scenario.dp_ranks;
    let count = |regime: &str, rank: u32| {
        meta.executions
            .iter()
            .filter(|e| e.rank == rank && e.kv_seed_regime == regime)
            .count() as u64
    };
    let mut fpms: BTreeMap<(u64, u32), Vec<Fpm>> = BTreeMap::new();
    for e in &meta.executions {
        fpms.insert((e.point.benchmark_id, e.rank), fpms_for(e, &tokens, meta, plan_hash));
    }
    let measured: Vec<&ExecutionRecord> = meta.executions.iter().filter(|e| !e.point.is_eager_warmup()).collect();
    (0..ranks)
        .map(|rank| {
            let mine: Vec<&&ExecutionRecord> = measured.iter().filter(|e| e.rank == rank).collect();
            let results: Vec<ResultRow> = mine
                .iter()
                .map(|e| ResultRow {
                    point: e.point.clone(),
                    kv_seed_regime: e.kv_seed_regime.clone(),
                    fpms: fpms[&(e.point.benchmark_id, rank)].clone(),
                })
                .collect();
            let groups: Vec<Value> = mine
                .iter()
                .map(|e| {
                    let id = e.point.benchmark_id;
                    let per_rank: Vec<Value> =
                        (0..ranks).map(|r| json!({"dp_rank": r, "fpms": fpms.get(&(id, r)).cloned().unwrap_or_default()})).collect();
                    let wall = (0..ranks).filter_map(|r| fpms.get(&(id, r))).map(|f| f[0].wall_time).fold(0.0, f64::max);
                    json!({"benchmark_id": id, "point": e.point, "expected_dp_ranks": (0..ranks).collect::<Vec<_>>(),
                           "complete": true, "wall_time": wall, "rank_results": per_rank})
                })
                .collect();
            let measured_s: f64 = groups.iter().map(|g| g["wall_time"].as_f64().unwrap_or(0.0)).sum();
            let elapsed = sim_time_ns as f64 / 1e9;
            let timing_valid = measured_s <= elapsed + 1e-12;
            let complete = (results.len() + meta.skipped.len()) as u64 == meta.expected_points;
            let stages = meta
                .stages
                .iter()
                .filter(|s| s.rank == rank)
                .map(|s| {
                    let mut v = json!({"batch": s.batch, "depth": s.depth, "benchmark_id": s.benchmark_id, "build_steps": s.steps});
                    if s.soft_timeout {
                        // §5.3 stage detail key.
                        v["soft_timeout"] = json!(true);
                    }
                    if s.group_fallback {
                        v["group_fallback"] = json!(true);
                    }
                    v
                })
                .collect();
            let s = &plan.scenario;
            RankArtifact {
                schema_version: 2,
                kvwarm: Kvwarm {
                    enabled: meta.enabled,
                    warm_eligible: meta.warm_eligible,
                    skip_reason: meta.skip_reason.clone(),
                    initialization_strategy: meta.initialization_strategy.clone(),
                    dataset: None,
                    stages,
                    points_real_kv: count("real_kv", rank) + count("real_attention_kv_random_kda", rank),
                    points_fake_fallback: count("fake_fallback", rank) + count("fake_attention_kv_random_kda", rank),
                    points_gate_skipped: meta.executions.iter().filter(|e| e.rank == rank && e.kv_seed_regime.starts_with("skip:")).count() as u64,
                    giant_kv_threshold: meta.giant_kv_threshold,
                    giant_kv_repeats: meta.giant_kv_repeats,
                    capacity_fallbacks: meta.capacity_fallbacks.clone(),
                    untimed_prefill_tokens: meta.untimed_prefill_tokens,
                },
                artifact_type: "rank".into(),
                status: if complete { "complete".into() } else { "partial".into() },
                valid: complete && timing_valid,
                usable: !results.is_empty() && timing_valid,
                // §1.12, §6.1: `"timeout"` only when the status is partial.
                stop_reason: if complete { None } else { meta.stop_reason.clone() },
                timing_valid,
                run_id: plan_hash.to_string(),
                grid_digest: meta.grid_digest.clone(),
                timing: json!({"started_at": rfc3339(0), "completed_at": rfc3339(sim_time_ns),
                    "benchmark_elapsed_seconds": elapsed, "measured_iteration_seconds": measured_s,
                    "clock": "simulated (nominal step durations)"}),
                dp: json!({"rank": rank, "size": ranks}),
                synchronization: json!({"enabled": ranks > 1, "coordinator_rank": 0, "port": if ranks > 1 { json!(20380 + ranks) } else { Value::Null }}),
                coverage: json!({"expected_points": meta.expected_points, "completed_points": results.len(), "skipped_points": meta.skipped.len()}),
                config: meta.config.clone(),
                limits: json!({"max_num_scheduled_tokens": s.scheduler.max_num_batched_tokens, "max_num_running_reqs": s.scheduler.max_num_seqs,
                    "max_model_len": s.scheduler.max_model_len, "block_size": s.kv_config().scheduler_block_size(),
                    "num_gpu_blocks": s.pool_blocks}),
                // §6.1: random KDA fills shadows' state with uniform values in [−0.01, 0.01].
                recurrent_state: if meta.config["random_kda"] == json!(true) {
                    json!({"initialization": "random", "policy": "uniform-request-layer-rank-v1", "uniform_bound": 0.01})
                } else {
                    json!({"initialization": "unchanged", "policy": null, "uniform_bound": null})
                },
                measurement_policy: json!({"decode": "steady_state_second_step", "prefill": "single_step"}),
                synthetic_prompts: json!({"mode": if s.model.vocab_size > 1 { "salted_random" } else { "zeros" }, "vocab_size": s.model.vocab_size}),
                results,
                iteration_groups: groups,
                skipped_points: meta.skipped.iter().map(|k| json!({"benchmark_id": k.benchmark_id, "reason": k.reason})).collect(),
                missing_phases: meta.missing_phases.clone(),
                error: None,
            }
        })
        .collect()
}
