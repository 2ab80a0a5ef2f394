//! The 1.6.1 rank artifact's shape as a field table, and the walker that checks a JSON value
//! against it (AU-SCHEMA-*). The table follows `_bench_write_results` and the dataclasses it
//! serialises (`BenchmarkPoint`, `BenchmarkConfig`, `_BenchmarkCapacityEnvelope`,
//! `ForwardPassMetrics`, the kvwarm meta of `_kvwarm_meta_init`); `engine` is provenance whose
//! inner shape varies with the model, so only its keys are checked.

use serde_json::Value;

use super::Out;

/// A field's JSON type.
#[derive(Clone, Copy, Debug)]
pub enum Ty {
    /// An integer >= 0.
    Int,
    /// Any JSON number.
    Num,
    /// A JSON boolean.
    Bool,
    /// A JSON string.
    Str,
    /// A string from a closed vocabulary (AU-SCHEMA-ENUM).
    Enum(&'static [&'static str]),
    /// A SHA-256 hex digest (AU-SCHEMA-FORMAT).
    Digest,
    /// Any JSON value.
    Any,
    /// Any JSON object.
    AnyObject,
    /// Null or the type.
    Nullable(&'static Ty),
    /// An array of the type.
    Array(&'static Ty),
    /// An object with these fields.
    Object(&'static [Field]),
}

/// One field of an object type.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    /// The field's name.
    pub name: &'static str,
    /// Its type.
    pub ty: Ty,
    /// Written by every 1.6.1 artifact (an optional field may be absent).
    pub required: bool,
}

const fn req(name: &'static str, ty: Ty) -> Field {
    Field {
        name,
        ty,
        required: true,
    }
}

const fn opt(name: &'static str, ty: Ty) -> Field {
    Field {
        name,
        ty,
        required: false,
    }
}

/// `status` values.
pub const STATUSES: &[&str] = &["complete", "partial", "failed"];
/// `config.mode` values.
pub const MODES: &[&str] = &["prefill", "decode", "agg"];
/// `point_type` values.
pub const POINT_TYPES: &[&str] = &["prefill", "decode"];
/// `stop_reason` values.
pub const STOP_REASONS: &[&str] = &["timeout"];

const NULLABLE_INT: Ty = Ty::Nullable(&Ty::Int);
const NULLABLE_STR: Ty = Ty::Nullable(&Ty::Str);
const INTS: Ty = Ty::Array(&Ty::Int);

const TIMING: &[Field] = &[
    req("started_at", NULLABLE_STR),
    req("completed_at", NULLABLE_STR),
    req("benchmark_elapsed_seconds", Ty::Num),
    req("measured_iteration_seconds", Ty::Num),
];

const DP: &[Field] = &[req("rank", Ty::Int), req("size", Ty::Int)];

const SYNCHRONIZATION: &[Field] = &[
    req("enabled", Ty::Bool),
    req("coordinator_rank", Ty::Int),
    req("port", NULLABLE_INT),
];

const COVERAGE: &[Field] = &[
    req("expected_points", Ty::Int),
    req("completed_points", Ty::Int),
    req("skipped_points", Ty::Int),
];

/// `asdict(BenchmarkConfig)`.
const CONFIG: &[Field] = &[
    req("mode", Ty::Enum(MODES)),
    req("randomize_kda_state", Ty::Bool),
    req("hybrid_live_state", Ty::Bool),
    req("warmup_iterations", Ty::Int),
    req("output_path", Ty::Str),
    req("timeout", Ty::Num),
    req("prefill_max_new_token_samples", Ty::Int),
    req("prefill_max_kv_read_token_samples", Ty::Int),
    req("decode_max_kv_read_token_samples", Ty::Int),
    req("decode_max_batch_size_samples", Ty::Int),
    req("prefix_max_batch_size_samples", Ty::Int),
    req("max_batch_size", NULLABLE_INT),
    req("collect_imbalanced", Ty::Bool),
];

const LIMITS: &[Field] = &[
    req("max_num_scheduled_tokens", Ty::Int),
    req("max_num_running_reqs", Ty::Int),
    req("max_model_len", Ty::Int),
    req("block_size", Ty::Int),
    req("num_gpu_blocks", NULLABLE_INT),
    req("configured_max_batch_size", Ty::Int),
    req("feasible_max_batch_size", Ty::Int),
];

const RECURRENT_STATE: &[Field] = &[
    req("initialization", Ty::Enum(&["unchanged", "random"])),
    req("policy", Ty::Nullable(&Ty::Enum(&["uniform-request-layer-rank-v1"]))),
    req("uniform_bound", Ty::Nullable(&Ty::Num)),
];

const MEASUREMENT_POLICY: &[Field] = &[
    req("decode", Ty::Enum(&["steady_state_second_step"])),
    req("prefill", Ty::Enum(&["single_step"])),
];

const SYNTHETIC_PROMPTS: &[Field] = &[
    req("mode", Ty::Enum(&["salted_random", "zeros"])),
    req("vocab_size", Ty::Int),
];

/// `asdict(_BenchmarkCapacityEnvelope)`, the negotiated (group-wide) envelope.
const CAPACITY_COMMON: &[Field] = &[
    req("max_model_len", Ty::Int),
    req("max_num_scheduled_tokens", Ty::Int),
    req("max_num_running_reqs", Ty::Int),
    req("usable_blocks_without_watermark", Ty::Int),
    req("usable_blocks_with_watermark", Ty::Int),
    req("grid_invariants_digest", Ty::Digest),
    req("kvwarm_eligible", Ty::Bool),
];

const CAPACITY: &[Field] = &[req("common", Ty::Nullable(&Ty::Object(CAPACITY_COMMON)))];

const CUDAGRAPH: &[Field] = &[
    req("mode", Ty::Str),
    req("prefill_mode", Ty::Str),
    req("decode_mode", Ty::Str),
    req("max_capture_size", Ty::Int),
    req("capture_sizes", INTS),
    req("prefill_capture_sizes", INTS),
    req("decode_capture_sizes", INTS),
];

/// `_bench_capture_engine`: every key is optional (capture is defensive and may stop early,
/// recording `capture_error`); values are provenance of varying shape.
const ENGINE: &[Field] = &[
    opt("attention", Ty::Any),
    opt("kv_cache", Ty::Any),
    opt("quantization", Ty::Any),
    opt("scheduler", Ty::Any),
    opt("model", Ty::Any),
    opt("parallel", Ty::Any),
    opt("speculative", Ty::Any),
    opt("graph", Ty::Any),
    opt("versions", Ty::Any),
    opt("resolved", Ty::Any),
    opt("resolution", Ty::Any),
    opt("capture_error", Ty::Any),
];

const DATASET: &[Field] = &[
    req("path", Ty::Str),
    req("sha256", Ty::Digest),
    req("collection_pool", Ty::Str),
    req("conversations", Ty::Int),
];

/// `kvwarm.stages[]`: `{batch, depth, build_seconds}` when built, `{batch, failed: true, ...}`
/// with one detail key when not.
const STAGE: &[Field] = &[
    req("batch", NULLABLE_INT),
    opt("depth", Ty::Int),
    opt("build_seconds", Ty::Num),
    opt("failed", Ty::Bool),
    opt("vanished", Ty::Int),
    opt("pool_shortfall", Ty::Int),
    opt("soft_timeout", Ty::Bool),
    opt("group_fallback", Ty::Bool),
];

const CAPACITY_FALLBACK: &[Field] = &[
    req("batch", Ty::Int),
    req("depth", Ty::Int),
    req("required_blocks", Ty::Int),
    req("usable_blocks", Ty::Int),
];

const KVWARM: &[Field] = &[
    req("enabled", Ty::Bool),
    req("warm_eligible", Ty::Nullable(&Ty::Bool)),
    req("skip_reason", NULLABLE_STR),
    req("dataset", Ty::Nullable(&Ty::Object(DATASET))),
    req("stages", Ty::Array(&Ty::Object(STAGE))),
    req("points_real_kv", Ty::Int),
    req("points_fake_fallback", Ty::Int),
    req("giant_kv_threshold", Ty::Int),
    req("giant_kv_repeats", Ty::Int),
    opt("capacity_fallbacks", Ty::Array(&Ty::Object(CAPACITY_FALLBACK))),
];

/// `asdict(BenchmarkPoint)`.
const POINT: &[Field] = &[
    req("point_type", Ty::Enum(POINT_TYPES)),
    req("benchmark_id", Ty::Int),
    req("total_prefill_tokens", Ty::Int),
    req("total_kv_read_tokens", Ty::Int),
    req("batch_size", Ty::Int),
    req("expected_cudagraph_mode", Ty::Str),
    req("expected_capture_size", NULLABLE_INT),
    req("padding_tokens", NULLABLE_INT),
    req("sample_reasons", Ty::Array(&Ty::Str)),
    req("partition", Ty::Nullable(&Ty::AnyObject)),
    req("rows", Ty::Nullable(&Ty::Array(&INTS))),
];

const SCHEDULED: &[Field] = &[
    req("num_prefill_requests", Ty::Int),
    req("sum_prefill_tokens", Ty::Int),
    req("var_prefill_length", Ty::Num),
    req("sum_prefill_kv_tokens", Ty::Int),
    req("num_decode_requests", Ty::Int),
    req("sum_decode_kv_tokens", Ty::Int),
    req("var_decode_kv_tokens", Ty::Num),
];

const QUEUED: &[Field] = &[
    req("num_prefill_requests", Ty::Int),
    req("sum_prefill_tokens", Ty::Int),
    req("var_prefill_length", Ty::Num),
    req("num_decode_requests", Ty::Int),
    req("sum_decode_kv_tokens", Ty::Int),
    req("var_decode_kv_tokens", Ty::Num),
];

/// `ForwardPassMetrics` as a dict, plus the benchmark's two additions.
const FPM: &[Field] = &[
    req("version", Ty::Int),
    req("worker_id", Ty::Str),
    req("dp_rank", Ty::Int),
    req("counter_id", Ty::Int),
    req("wall_time", Ty::Num),
    req("scheduled_requests", Ty::Object(SCHEDULED)),
    req("queued_requests", Ty::Object(QUEUED)),
    opt("kvwarm_giant_median_of", Ty::Int),
    opt("kvwarm_steady_sample", Ty::Bool),
];

const FPMS: Ty = Ty::Array(&Ty::Object(FPM));

const RESULT: &[Field] = &[
    req("point", Ty::Object(POINT)),
    req("kv_seed_regime", Ty::Str),
    req("fpms", FPMS),
];

const RANK_RESULT: &[Field] = &[req("dp_rank", Ty::Int), req("fpms", FPMS)];

const ITERATION_GROUP: &[Field] = &[
    req("benchmark_id", Ty::Int),
    req("point", Ty::Object(POINT)),
    req("expected_dp_ranks", INTS),
    req("complete", Ty::Bool),
    req("wall_time", Ty::Num),
    req("rank_results", Ty::Array(&Ty::Object(RANK_RESULT))),
];

const SKIPPED: &[Field] = &[
    req("point", Ty::Object(POINT)),
    req("kv_seed_regime", Ty::Str),
    req("reason", Ty::Str),
];

/// The top level, in the order `_bench_write_results` writes it.
pub const TOP: &[Field] = &[
    req("schema_version", Ty::Int),
    opt("kvwarm", Ty::Object(KVWARM)),
    req("artifact_type", Ty::Enum(&["rank"])),
    req("status", Ty::Enum(STATUSES)),
    req("valid", Ty::Bool),
    req("usable", Ty::Bool),
    req("stop_reason", Ty::Nullable(&Ty::Enum(STOP_REASONS))),
    req("timing_valid", Ty::Bool),
    req("run_id", NULLABLE_STR),
    req("grid_digest", Ty::Nullable(&Ty::Digest)),
    req("timing", Ty::Object(TIMING)),
    req("dp", Ty::Object(DP)),
    req("synchronization", Ty::Object(SYNCHRONIZATION)),
    req("coverage", Ty::Object(COVERAGE)),
    req("config", Ty::Object(CONFIG)),
    req("limits", Ty::Object(LIMITS)),
    req("recurrent_state", Ty::Object(RECURRENT_STATE)),
    req("measurement_policy", Ty::Object(MEASUREMENT_POLICY)),
    req("synthetic_prompts", Ty::Object(SYNTHETIC_PROMPTS)),
    req("capacity", Ty::Object(CAPACITY)),
    req("cudagraph", Ty::Object(CUDAGRAPH)),
    opt("engine", Ty::Object(ENGINE)),
    req("results", Ty::Array(&Ty::Object(RESULT))),
    req("iteration_groups", Ty::Array(&Ty::Object(ITERATION_GROUP))),
    req("skipped_points", Ty::Array(&Ty::Object(SKIPPED))),
    req("missing_phases", Ty::Array(&Ty::Enum(POINT_TYPES))),
    req("error", NULLABLE_STR),
];

/// The JSON kind of a value, as messages name it.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() => "an integer",
        Value::Number(n) if n.is_i64() => "a negative integer",
        Value::Number(_) => "a fractional number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn describe(ty: &Ty) -> String {
    match ty {
        Ty::Int => "an integer >= 0".into(),
        Ty::Num => "a number".into(),
        Ty::Bool => "a boolean".into(),
        Ty::Str | Ty::Enum(_) | Ty::Digest => "a string".into(),
        Ty::Any => "any value".into(),
        Ty::AnyObject | Ty::Object(_) => "an object".into(),
        Ty::Nullable(t) => format!("{} or null", describe(t)),
        Ty::Array(_) => "an array".into(),
    }
}

/// `base.key`, or `base["key"]` for a key that is not a plain identifier.
pub fn key_path(base: &str, key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        format!("{base}.{key}")
    } else {
        format!("{base}[{}]", Value::String(key.to_string()))
    }
}

/// A `serde_path_to_error` path as the audit's JSON path (`$.results[0].point`).
pub fn display_path(p: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut s = String::from("$");
    for seg in p {
        s = match seg {
            Segment::Seq { index } => format!("{s}[{index}]"),
            Segment::Map { key } => key_path(&s, key),
            Segment::Enum { variant } => key_path(&s, variant),
            Segment::Unknown => format!("{s}.?"),
        };
    }
    s
}

/// Whether `s` is a SHA-256 hex digest.
pub fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn walk(v: &Value, ty: &Ty, path: &str, out: &mut Out) {
    let mismatch = |out: &mut Out| {
        out.push(
            "AU-SCHEMA-TYPE",
            path,
            format!("expected {}, found {}", describe(ty), kind(v)),
        );
    };
    match ty {
        Ty::Any => {}
        Ty::Nullable(inner) if !v.is_null() => walk(v, inner, path, out),
        Ty::Int if !v.is_u64() => mismatch(out),
        Ty::Num if !v.is_number() => mismatch(out),
        Ty::Bool if !v.is_boolean() => mismatch(out),
        Ty::Str if !v.is_string() => mismatch(out),
        Ty::Enum(allowed) => match v.as_str() {
            None => mismatch(out),
            Some(s) if !allowed.contains(&s) => out.push(
                "AU-SCHEMA-ENUM",
                path,
                format!("{v} is not one of {}", allowed.join(", ")),
            ),
            Some(_) => {}
        },
        Ty::Digest => match v.as_str() {
            None => mismatch(out),
            Some(s) if !is_digest(s) => out.push(
                "AU-SCHEMA-FORMAT",
                path,
                format!("{v} is not a SHA-256 digest (64 lowercase hex digits)"),
            ),
            Some(_) => {}
        },
        Ty::AnyObject if !v.is_object() => mismatch(out),
        Ty::Array(item) => match v.as_array() {
            None => mismatch(out),
            Some(items) => {
                for (i, x) in items.iter().enumerate() {
                    walk(x, item, &format!("{path}[{i}]"), out);
                }
            }
        },
        Ty::Object(fields) => match v.as_object() {
            None => mismatch(out),
            Some(map) => {
                for f in fields.iter() {
                    match map.get(f.name) {
                        Some(x) => walk(x, &f.ty, &key_path(path, f.name), out),
                        None if f.required => out.push(
                            "AU-SCHEMA-MISSING",
                            key_path(path, f.name),
                            format!("required field `{}` is absent", f.name),
                        ),
                        None => {}
                    }
                }
                for k in map.keys() {
                    if !fields.iter().any(|f| f.name == k) {
                        out.push(
                            "AU-SCHEMA-UNKNOWN",
                            key_path(path, k),
                            format!("`{k}` is not a field 1.6.1 writes"),
                        );
                    }
                }
            }
        },
        _ => {}
    }
}

/// AU-SCHEMA-*: the value against the 1.6.1 field table, then the schema version.
pub(crate) fn check(v: &Value, out: &mut Out) {
    walk(v, &Ty::Object(TOP), "$", out);
    if let Some(n) = v.get("schema_version").and_then(Value::as_u64) {
        if n != 2 {
            out.push(
                "AU-SCHEMA-VERSION",
                "$.schema_version",
                format!("schema_version is {n}; 1.6.1 writes 2"),
            );
        }
    }
}
