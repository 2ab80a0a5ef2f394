//! Every point inside the artifact's own `limits` / `capacity`, and the point-level metadata the
//! grid builder derives (AU-LIMITS-*, AU-POINT-ROWS, AU-POINT-MODE, AU-POINT-CUDAGRAPH,
//! AU-POINT-REASON). Bounds use the negotiated envelope where the writer does
//! (`_bench_capacity_limit`).

use serde_json::Value;

use super::model::{Artifact, Point};
use super::Out;
use crate::fpm::grid::SampleReason;

/// Whether a recorded 1.6.1 result row may carry this sample reason: the grid's own vocabulary
/// (`SampleReason`), less `eager_warmup`, which marks the replicas dropped at save time.
fn recorded_reason(name: &str) -> bool {
    name != "eager_warmup" && serde_json::from_value::<SampleReason>(Value::from(name)).is_ok()
}

fn self_consistent(a: &Artifact, out: &mut Out) {
    let l = &a.limits;
    if l.configured_max_batch_size != l.max_num_running_reqs {
        out.push(
            "AU-LIMITS-SELF",
            "$.limits.configured_max_batch_size",
            format!(
                "{} but max_num_running_reqs is {}",
                l.configured_max_batch_size, l.max_num_running_reqs
            ),
        );
    }
    let mut cap = a.max_num_running_reqs().min(a.max_num_scheduled_tokens());
    if let Some(m) = a.config.max_batch_size {
        cap = cap.min(m);
    }
    if l.feasible_max_batch_size > cap {
        out.push(
            "AU-LIMITS-SELF",
            "$.limits.feasible_max_batch_size",
            format!(
                "{} exceeds min(max_num_running_reqs, max_num_scheduled_tokens, max_batch_size) = {cap}",
                l.feasible_max_batch_size
            ),
        );
    }
    let Some(c) = &a.capacity.common else { return };
    for (key, negotiated, local) in [
        ("max_model_len", c.max_model_len, l.max_model_len),
        ("max_num_running_reqs", c.max_num_running_reqs, l.max_num_running_reqs),
        (
            "max_num_scheduled_tokens",
            c.max_num_scheduled_tokens,
            l.max_num_scheduled_tokens,
        ),
    ] {
        if negotiated > local || negotiated == 0 {
            out.push(
                "AU-LIMITS-SELF",
                format!("$.capacity.common.{key}"),
                format!("negotiated {negotiated} but this rank's limit is {local} (the envelope is the ranks' minimum, >= 1)"),
            );
        }
    }
    if c.usable_blocks_with_watermark > c.usable_blocks_without_watermark {
        out.push(
            "AU-LIMITS-SELF",
            "$.capacity.common.usable_blocks_with_watermark",
            format!(
                "{} exceeds usable_blocks_without_watermark {}",
                c.usable_blocks_with_watermark, c.usable_blocks_without_watermark
            ),
        );
    }
    if let Some(n) = l.num_gpu_blocks {
        // Free blocks exclude the null block.
        if c.usable_blocks_without_watermark > n.saturating_sub(1) {
            out.push(
                "AU-LIMITS-SELF",
                "$.capacity.common.usable_blocks_without_watermark",
                format!(
                    "{} usable blocks in a pool of {n} (one is the null block)",
                    c.usable_blocks_without_watermark
                ),
            );
        }
    }
}

/// The single KV-cache group's block size, when the layout is one full-attention group (the case
/// where a decode point's block footprint is exactly Σ ceil(tokens / block size)).
fn single_full_attention_block_size(a: &Artifact) -> Option<u64> {
    let groups = a.engine.as_ref()?.get("kv_cache")?.get("groups")?.as_array()?;
    let [g] = groups.as_slice() else { return None };
    let ty = g.get("type")?.as_str()?;
    let unset = |k: &str| g.get(k).is_none_or(Value::is_null);
    let full = matches!(ty, "FullAttentionSpec" | "MLAAttentionSpec");
    (full && unset("sliding_window") && unset("attention_chunk_size")).then(|| g.get("block_size")?.as_u64())?
}

/// Every check of one point, findings in the order the report lists them.
fn point(a: &Artifact, path: &str, p: &Point, block_size: Option<u64>, out: &mut Out) {
    batch_bounds(a, path, p, out);
    if p.is_decode() {
        decode_context(a, path, p, block_size, out);
    } else {
        prefill_context(a, path, p, out);
    }
    rows(path, p, out);
    phase_mode(a, path, p, out);
    cudagraph(a, path, p, out);
    reasons(path, p, out);
}

/// AU-LIMITS-BATCH: the batch inside the running-request limit (and, for decode, the feasible
/// batch).
fn batch_bounds(a: &Artifact, path: &str, p: &Point, out: &mut Out) {
    let running = a.max_num_running_reqs().min(a.limits.max_num_running_reqs);
    let b = p.batch_size;
    if b == 0 || b > running {
        out.push(
            "AU-LIMITS-BATCH",
            format!("{path}.batch_size"),
            format!("batch {b} outside 1..={running}"),
        );
    } else if p.is_decode() && b > a.limits.feasible_max_batch_size {
        out.push(
            "AU-LIMITS-BATCH",
            format!("{path}.batch_size"),
            format!(
                "decode batch {b} above feasible_max_batch_size {}",
                a.limits.feasible_max_batch_size
            ),
        );
    }
}

/// AU-LIMITS-CONTEXT and AU-LIMITS-BLOCKS of a decode point: no prefill, at least 2 tokens read
/// per request, every request inside max_model_len, the footprint inside the usable pool.
fn decode_context(a: &Artifact, path: &str, p: &Point, block_size: Option<u64>, out: &mut Out) {
    let b = p.batch_size;
    let mml = a.max_model_len();
    let floor = if p.has("giant_fake_off_by_batch") { b } else { 2 * b };
    if p.total_prefill_tokens != 0 {
        out.push(
            "AU-LIMITS-CONTEXT",
            format!("{path}.total_prefill_tokens"),
            "a decode point prefills nothing",
        );
    }
    if p.total_kv_read_tokens < floor {
        out.push(
            "AU-LIMITS-CONTEXT",
            format!("{path}.total_kv_read_tokens"),
            format!(
                "{} below {floor}: the steady step reads at least 2 tokens per request",
                p.total_kv_read_tokens
            ),
        );
    } else if b > 0 && p.max_context() + 2 > mml {
        out.push(
            "AU-LIMITS-CONTEXT",
            format!("{path}.total_kv_read_tokens"),
            format!(
                "a request of {} tokens (+2 written) does not fit max_model_len {mml}",
                p.max_context()
            ),
        );
    }
    if let (Some(bs), Some(c)) = (block_size, &a.capacity.common) {
        let need: u64 = p.contexts().map(|ctx| (ctx.max(2) + 1).div_ceil(bs.max(1))).sum();
        if b > 0 && need > c.usable_blocks_with_watermark {
            out.push(
                "AU-LIMITS-BLOCKS",
                format!("{path}.total_kv_read_tokens"),
                format!(
                    "needs {need} blocks of {bs} tokens; {} usable",
                    c.usable_blocks_with_watermark
                ),
            );
        }
    }
}

/// AU-LIMITS-CONTEXT of a prefill point: the new tokens inside the step budget, every request
/// inside max_model_len.
fn prefill_context(a: &Artifact, path: &str, p: &Point, out: &mut Out) {
    let b = p.batch_size;
    let mml = a.max_model_len();
    let sched = a.max_num_scheduled_tokens();
    if p.total_prefill_tokens < b || p.total_prefill_tokens > sched {
        out.push(
            "AU-LIMITS-CONTEXT",
            format!("{path}.total_prefill_tokens"),
            format!(
                "{} prefill tokens for {b} request(s) in a step budget of {sched}",
                p.total_prefill_tokens
            ),
        );
    } else if p.total_prefill_tokens + p.total_kv_read_tokens > b * mml {
        out.push(
            "AU-LIMITS-CONTEXT",
            format!("{path}.total_kv_read_tokens"),
            format!(
                "{b} request(s) cannot hold {} tokens within max_model_len {mml}",
                p.total_prefill_tokens + p.total_kv_read_tokens
            ),
        );
    }
}

/// AU-POINT-ROWS: one `[new, kv]` row per request, summing to the point's totals.
fn rows(path: &str, p: &Point, out: &mut Out) {
    let b = p.batch_size;
    if let Some(rows) = &p.rows {
        let well_formed = rows.len() as u64 == b && rows.iter().all(|r| r.len() == 2);
        let new: u64 = rows.iter().filter_map(|r| r.first()).sum();
        let kv: u64 = rows.iter().filter_map(|r| r.get(1)).sum();
        if !well_formed || new != p.total_prefill_tokens || kv != p.total_kv_read_tokens {
            out.push(
                "AU-POINT-ROWS",
                format!("{path}.rows"),
                format!(
                    "{} row(s) summing to [{new}, {kv}] for batch {b}, totals [{}, {}]",
                    rows.len(),
                    p.total_prefill_tokens,
                    p.total_kv_read_tokens
                ),
            );
        }
    }
}

/// AU-POINT-MODE: the point's phase is run in this mode and not missing.
fn phase_mode(a: &Artifact, path: &str, p: &Point, out: &mut Out) {
    let mode = a.config.mode.as_str();
    if !(mode == "agg" || mode == p.point_type) {
        out.push(
            "AU-POINT-MODE",
            format!("{path}.point_type"),
            format!("a {} point in a {mode} run", p.point_type),
        );
    }
    if a.missing_phases.contains(&p.point_type) {
        out.push(
            "AU-POINT-MODE",
            format!("{path}.point_type"),
            format!("a {} point but that phase is missing", p.point_type),
        );
    }
}

/// AU-POINT-CUDAGRAPH: the point's capture metadata is what the run's cudagraph block gives.
fn cudagraph(a: &Artifact, path: &str, p: &Point, out: &mut Out) {
    let b = p.batch_size;
    // `_bench_cudagraph_metadata`: the driver is the batch (decode) or the new tokens (prefill).
    let g = &a.cudagraph;
    let (driver, sizes, graph_mode) = if p.is_decode() {
        (b, &g.decode_capture_sizes, &g.decode_mode)
    } else {
        (p.total_prefill_tokens, &g.prefill_capture_sizes, &g.prefill_mode)
    };
    let mut captures: Vec<u64> = sizes.iter().copied().filter(|&s| s > 0).collect();
    captures.sort_unstable();
    captures.dedup();
    let capture = captures.iter().copied().find(|&s| s >= driver);
    let padding = capture.map(|c| c - driver);
    let mode_want = if capture.is_some() { graph_mode.as_str() } else { "NONE" };
    let mut wrong = Vec::new();
    if p.expected_capture_size != capture {
        wrong.push(format!(
            "expected_capture_size {:?} (cudagraph block gives {capture:?})",
            p.expected_capture_size
        ));
    }
    if p.padding_tokens != padding {
        wrong.push(format!("padding_tokens {:?} (gives {padding:?})", p.padding_tokens));
    }
    if p.expected_cudagraph_mode != mode_want {
        wrong.push(format!(
            "expected_cudagraph_mode {:?} (gives {mode_want:?})",
            p.expected_cudagraph_mode
        ));
    }
    if captures.is_empty() != p.has("cudagraph_disabled") {
        wrong.push(format!(
            "`cudagraph_disabled` {} with {} capture size(s)",
            if p.has("cudagraph_disabled") { "set" } else { "unset" },
            captures.len()
        ));
    }
    if captures.contains(&driver) != p.has("capture") {
        wrong.push(format!(
            "`capture` {} for driver {driver}",
            if p.has("capture") { "set" } else { "unset" }
        ));
    }
    if !wrong.is_empty() {
        out.push("AU-POINT-CUDAGRAPH", path.to_string(), wrong.join("; "));
    }
}

/// AU-POINT-REASON: every sample reason is one a 1.6.1 result row records.
fn reasons(path: &str, p: &Point, out: &mut Out) {
    for (i, r) in p.sample_reasons.iter().enumerate() {
        if !recorded_reason(r) {
            out.push(
                "AU-POINT-REASON",
                format!("{path}.sample_reasons[{i}]"),
                format!("{r:?} is not a sample reason 1.6.1 records"),
            );
        }
    }
}

pub(crate) fn check(a: &Artifact, out: &mut Out) {
    self_consistent(a, out);
    for (i, phase) in a.missing_phases.iter().enumerate() {
        let mode = a.config.mode.as_str();
        if !(mode == "agg" || mode == phase) {
            out.push(
                "AU-POINT-MODE",
                format!("$.missing_phases[{i}]"),
                format!("phase {phase} is not run in {mode} mode"),
            );
        }
    }
    let block_size = single_full_attention_block_size(a);
    for (path, p) in a.points() {
        point(a, &path, p, block_size, out);
    }
}
