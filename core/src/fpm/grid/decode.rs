//! Decode grid: a CUDA-graph-aware batch axis × per-batch KV ladders mapped to steady-step
//! coordinates, filtered by feasibility.
//!
//! Source: `spec/research/dynamo_fpm.md` §1.5 (`_bench_generate_decode_grid`,
//! `_bench_decode_feasible_max_batch_size`, `_bench_decode_kv_read_points`,
//! `_bench_decode_steady_kv_tokens`, `_bench_decode_point_feasible`), §8.1 invariants 6–7.

use std::collections::BTreeSet;

use super::axis::{
    cudagraph_axis_points, limit_cudagraph_axis, powers_of_two_up_to, uniformly_limit_axis, AxisError, PartitionError,
    PartitionShape,
};
use super::config::{BlockNeed, BlockNeedQuery, GridConfig};
use super::cudagraph::{cudagraph_metadata, expected_cudagraph_mode};
use super::point::{BenchmarkPoint, PointType};

/// Decode captures the grid uses: the configured ones ≤ the negotiated `max_num_running_reqs`
/// (§1.2, re-filtered after negotiation, §1.7 step 1).
pub fn decode_capture_sizes(cfg: &GridConfig) -> Vec<u64> {
    cfg.cudagraph
        .decode_capture_sizes
        .iter()
        .copied()
        .filter(|&c| c <= cfg.capacity.max_num_running_reqs)
        .collect()
}

/// `_bench_feasible_max_decode_batch_size` (§1.5 step 2): 0 when `max_model_len < 3`; else
/// `min(max_running, max_scheduled, usable_with_watermark // blocks_per_req(2))` (a zero block
/// need leaves the pool term at `max_running`), and V-E's `max_batch_size` when set.
pub fn decode_feasible_max_batch_size(cfg: &GridConfig, need: &dyn BlockNeed) -> u64 {
    let cap = &cfg.capacity;
    if cap.max_model_len < 3 {
        return 0;
    }
    let min_blocks_per_request = need.blocks_per_req(BlockNeedQuery::plain(2));
    let pool_batch = if min_blocks_per_request < 1 {
        cap.max_num_running_reqs
    } else {
        cfg.grid_usable_blocks(cap.max_num_running_reqs, true) / min_blocks_per_request
    };
    let mut feasible = cap
        .max_num_running_reqs
        .min(cap.max_num_scheduled_tokens)
        .min(pool_batch);
    if let Some(max_batch_size) = cfg.max_batch_size {
        feasible = feasible.min(max_batch_size);
    }
    feasible
}

/// Per-request contexts of a decode point: balanced partition of the total, at least 1 each
/// (§1.5 step 5).
pub fn decode_context_lengths(total_kv_read_tokens: u64, batch_size: u64) -> Result<Vec<u64>, PartitionError> {
    PartitionShape::new(total_kv_read_tokens, batch_size, 1, 1).map(|shape| shape.to_vec())
}

/// The coordinate the steady step measures (§1.5 step 4): `Σ max(1, ctx_i − 1) + B` over the
/// balanced contexts. Every request is admitted one token short, ctx = 1 entries are clamped to 1,
/// so every total below 2B maps to 2B; totals ≥ 2B map to themselves.
pub fn decode_steady_kv_tokens(batch_size: u64, total_kv_read_tokens: u64) -> Result<u64, PartitionError> {
    let shape = PartitionShape::new(total_kv_read_tokens, batch_size, 1, 1)?;
    let admission: u64 = shape
        .runs()
        .into_iter()
        .map(|(ctx, requests)| ctx.saturating_sub(1).max(1) * requests)
        .sum();
    let steady = admission + batch_size;
    debug_assert!(steady >= 2 * batch_size);
    debug_assert!(total_kv_read_tokens < 2 * batch_size || steady == total_kv_read_tokens);
    Ok(steady)
}

/// `_bench_decode_point_feasible` (§1.5 step 5, §8.1 invariant 7): 1 ≤ B ≤ max_running; contexts
/// partition (≥ 1 each); every `max(ctx, 2) + 2 ≤ max_model_len`; and
/// `Σ blocks_per_req(max(ctx, 2) + 1) ≤ usable blocks with watermark`.
pub fn decode_point_feasible(
    cfg: &GridConfig,
    need: &dyn BlockNeed,
    batch_size: u64,
    total_kv_read_tokens: u64,
) -> bool {
    let cap = &cfg.capacity;
    if batch_size < 1 || batch_size > cap.max_num_running_reqs {
        return false;
    }
    let Ok(shape) = PartitionShape::new(total_kv_read_tokens, batch_size, 1, 1) else {
        return false;
    };
    let runs = shape.runs();
    // A request admits at max(1, ctx−1) and measures one position later, so it occupies
    // max(ctx, 2) + 1 slots and the runner's bookkeeping writes through max(ctx, 2) + 2.
    if runs
        .iter()
        .any(|&(ctx, _)| ctx.max(2).saturating_add(2) > cap.max_model_len)
    {
        return false;
    }
    let required = runs
        .iter()
        .map(|&(ctx, requests)| {
            need.blocks_per_req(BlockNeedQuery::plain(ctx.max(2) + 1))
                .saturating_mul(requests)
        })
        .fold(0, u64::saturating_add);
    required <= cfg.grid_usable_blocks(batch_size, true)
}

/// Largest feasible total KV for batch B (§1.5 step 4): binary search in [B, B·(max_model_len−2)];
/// 0 when none is feasible.
pub fn max_decode_kv_read_tokens(cfg: &GridConfig, need: &dyn BlockNeed, batch_size: u64) -> u64 {
    if batch_size < 1 {
        return 0;
    }
    let mut low = batch_size;
    let mut high = batch_size.saturating_mul(cfg.capacity.max_model_len.saturating_sub(2));
    let mut best = 0;
    while low <= high {
        let mid = low + (high - low) / 2;
        if decode_point_feasible(cfg, need, batch_size, mid) {
            best = mid;
            low = mid + 1;
        } else {
            // mid ≥ low ≥ 1, so this cannot underflow.
            high = mid - 1;
        }
    }
    best
}

/// KV ladder of batch B in steady coordinates (§1.5 step 4, §8.1 invariant 6): presets
/// {B, powers of two ≥ B, max}, each mapped to its steady coordinate, deduplicated and sorted;
/// empty when max < B.
pub fn decode_kv_read_points(cfg: &GridConfig, need: &dyn BlockNeed, batch_size: u64) -> Vec<u64> {
    let max_kv = max_decode_kv_read_tokens(cfg, need, batch_size);
    if max_kv < batch_size {
        return Vec::new();
    }
    let mut presets = vec![batch_size, max_kv];
    presets.extend(powers_of_two_up_to(max_kv).into_iter().filter(|&v| v >= batch_size));
    // Presets are ≥ B by construction, so the partition exists; a failure would be a kvsim bug.
    let steady: BTreeSet<u64> = presets
        .into_iter()
        .map(|v| decode_steady_kv_tokens(batch_size, v).expect("decode presets are ≥ batch size"))
        .collect();
    steady.into_iter().collect()
}

/// The decode phase in execution order (§1.5): empty when `max_model_len < 3` or no batch fits;
/// otherwise per batch of the limited CUDA-graph axis (ascending) its limited steady KV ladder
/// (ascending), each re-checked for feasibility.
pub fn generate_decode_grid(cfg: &GridConfig, need: &dyn BlockNeed) -> Result<Vec<BenchmarkPoint>, AxisError> {
    if cfg.capacity.max_model_len < 3 {
        return Ok(Vec::new());
    }
    let feasible_max_batch = decode_feasible_max_batch_size(cfg, need);
    if feasible_max_batch < 1 {
        return Ok(Vec::new());
    }
    let captures = decode_capture_sizes(cfg);
    let batch_sizes = limit_cudagraph_axis(
        &cudagraph_axis_points(&captures, feasible_max_batch),
        &captures,
        cfg.samples.decode_max_batch_size_samples,
    )?;
    let mut points = Vec::new();
    for batch_size in batch_sizes {
        let meta = cudagraph_metadata(batch_size, &captures, feasible_max_batch);
        let kv_points = uniformly_limit_axis(
            &decode_kv_read_points(cfg, need, batch_size),
            cfg.samples.decode_max_kv_read_token_samples,
        )?;
        for total_kv_read_tokens in kv_points {
            if !decode_point_feasible(cfg, need, batch_size, total_kv_read_tokens) {
                continue;
            }
            points.push(BenchmarkPoint {
                point_type: PointType::Decode,
                benchmark_id: 0,
                total_prefill_tokens: 0,
                total_kv_read_tokens,
                batch_size,
                expected_cudagraph_mode: expected_cudagraph_mode(
                    meta.expected_capture_size,
                    &cfg.cudagraph.decode_mode,
                ),
                expected_capture_size: meta.expected_capture_size,
                padding_tokens: meta.padding_tokens,
                sample_reasons: meta.sample_reasons.clone(),
                partition: None,
                rows: None,
            });
        }
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::super::config::{BenchmarkMode, GridConfig};
    use super::super::point::SampleReason;
    use super::super::testutil::{ceil_need, small_config};
    use super::*;
    use proptest::prelude::*;

    /// max_model_len 100, 16-token blocks, 1000 usable blocks, 4 running, captures 1,2,4 (FULL).
    fn decode_config() -> GridConfig {
        let mut cfg = small_config(BenchmarkMode::Decode);
        cfg.capacity.max_num_scheduled_tokens = 8192;
        cfg.capacity.max_num_running_reqs = 4;
        cfg.capacity.max_model_len = 100;
        cfg.capacity.usable_blocks_with_watermark = 1000;
        cfg.capacity.usable_blocks_without_watermark = 1010;
        cfg.scheduler = super::super::config::SchedulerShape::with_block_size(16);
        cfg.cudagraph.decode_capture_sizes = vec![1, 2, 4, 8];
        cfg.cudagraph.decode_mode = "FULL".to_string();
        cfg
    }

    #[test]
    fn steady_coordinate_collapses_presets_below_two_b() {
        // B=4: 4 → [1,1,1,1] → 4·1 + 4 = 8; 5 → [2,1,1,1] → 8; 8 → [2,2,2,2] → 8.
        assert_eq!(decode_steady_kv_tokens(4, 4), Ok(8));
        assert_eq!(decode_steady_kv_tokens(4, 5), Ok(8));
        assert_eq!(decode_steady_kv_tokens(4, 7), Ok(8));
        assert_eq!(decode_steady_kv_tokens(4, 8), Ok(8));
        // At and above 2B the coordinate is its own steady coordinate.
        assert_eq!(decode_steady_kv_tokens(4, 9), Ok(9));
        assert_eq!(decode_steady_kv_tokens(2, 128), Ok(128));
        assert_eq!(decode_steady_kv_tokens(1, 1), Ok(2));
        assert!(decode_steady_kv_tokens(4, 3).is_err());
        assert!(decode_steady_kv_tokens(0, 3).is_err());
    }

    #[test]
    fn feasible_max_batch_takes_every_minimum() {
        let need = ceil_need(16);
        let mut cfg = decode_config();
        // min(4, 8192, 1000 / ceil(2/16)=1000) = 4.
        assert_eq!(decode_feasible_max_batch_size(&cfg, &need), 4);
        cfg.capacity.usable_blocks_with_watermark = 3;
        assert_eq!(decode_feasible_max_batch_size(&cfg, &need), 3);
        cfg.max_batch_size = Some(2);
        assert_eq!(decode_feasible_max_batch_size(&cfg, &need), 2);
        cfg.capacity.max_model_len = 2;
        assert_eq!(decode_feasible_max_batch_size(&cfg, &need), 0);
        // A zero block need leaves the pool out of it.
        let free = |_: BlockNeedQuery| 0;
        let mut cfg = decode_config();
        cfg.capacity.usable_blocks_with_watermark = 0;
        assert_eq!(decode_feasible_max_batch_size(&cfg, &free), 4);
    }

    #[test]
    fn feasibility_checks_model_length_and_pool() {
        let need = ceil_need(16);
        let cfg = decode_config();
        // B=1: max(ctx,2)+2 ≤ 100 → ctx ≤ 98.
        assert!(decode_point_feasible(&cfg, &need, 1, 98));
        assert!(!decode_point_feasible(&cfg, &need, 1, 99));
        assert!(!decode_point_feasible(&cfg, &need, 5, 10), "B above max_running");
        assert!(!decode_point_feasible(&cfg, &need, 4, 3), "fewer tokens than requests");
        // Pool of 10 blocks, B=4: 126 → [32,32,31,31] → 3+3+2+2 = 10 fits; 127 → 11 does not.
        let mut tight = decode_config();
        tight.capacity.usable_blocks_with_watermark = 10;
        assert!(decode_point_feasible(&tight, &need, 4, 126));
        assert!(!decode_point_feasible(&tight, &need, 4, 127));
        assert_eq!(max_decode_kv_read_tokens(&tight, &need, 4), 126);
        // Presets {4, 4, 8, 16, 32, 64, 126} → steady {8, 8, 8, 16, 32, 64, 126}.
        assert_eq!(decode_kv_read_points(&tight, &need, 4), vec![8, 16, 32, 64, 126]);
    }

    #[test]
    fn kv_ladders_are_steady_and_deduplicated() {
        let need = ceil_need(16);
        let cfg = decode_config();
        // B=1: max 98; presets {1,1,2,4,…,64,98} → steady 1→2, 2→2, 4→4, …
        assert_eq!(decode_kv_read_points(&cfg, &need, 1), vec![2, 4, 8, 16, 32, 64, 98]);
        // B=3: max 294 ([98,98,98]); 3 → [1,1,1] → 6; 4 → [2,1,1] → 6; 8 → [3,3,2] → 8.
        assert_eq!(
            decode_kv_read_points(&cfg, &need, 3),
            vec![6, 8, 16, 32, 64, 128, 256, 294]
        );
        // Nothing fits a model of length 3 with B=1? ctx 1 → max(1,2)+2 = 4 > 3 → empty.
        let mut short = decode_config();
        short.capacity.max_model_len = 3;
        assert!(decode_kv_read_points(&short, &need, 1).is_empty());
    }

    #[test]
    fn decode_grid_worked_example() {
        let need = ceil_need(16);
        let cfg = decode_config();
        let points = generate_decode_grid(&cfg, &need).unwrap();
        // Captures ≤ 4 running: 1, 2, 4 → axis {1,2,3,4} (8 is filtered out).
        let batches: BTreeSet<u64> = points.iter().map(|p| p.batch_size).collect();
        assert_eq!(batches.into_iter().collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        let b3: Vec<&BenchmarkPoint> = points.iter().filter(|p| p.batch_size == 3).collect();
        assert_eq!(
            b3.iter().map(|p| p.total_kv_read_tokens).collect::<Vec<_>>(),
            vec![6, 8, 16, 32, 64, 128, 256, 294]
        );
        assert_eq!(b3[0].expected_capture_size, Some(4));
        assert_eq!(b3[0].padding_tokens, Some(1));
        assert_eq!(b3[0].expected_cudagraph_mode, "FULL");
        assert_eq!(b3[0].sample_reasons, vec![SampleReason::PostCapture]);
        let b4 = points.iter().find(|p| p.batch_size == 4).unwrap();
        assert_eq!(
            b4.sample_reasons,
            vec![SampleReason::Capture, SampleReason::EngineLimit]
        );
        // Execution order: batch ascending, then KV ascending.
        let order: Vec<(u64, u64)> = points.iter().map(|p| (p.batch_size, p.total_kv_read_tokens)).collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted);
    }

    #[test]
    fn decode_ladder_is_limited_uniformly() {
        let need = ceil_need(16);
        let mut cfg = decode_config();
        cfg.samples.decode_max_kv_read_token_samples = 3;
        let points = generate_decode_grid(&cfg, &need).unwrap();
        let b3: Vec<u64> = points
            .iter()
            .filter(|p| p.batch_size == 3)
            .map(|p| p.total_kv_read_tokens)
            .collect();
        // 8 rungs, m=3: intervals 2, half 1 → indices 0, (7+1)/2=4, 7 → 6, 64, 294.
        assert_eq!(b3, vec![6, 64, 294]);
    }

    #[test]
    fn no_decode_phase_for_tiny_models_or_pools() {
        let need = ceil_need(16);
        let mut cfg = decode_config();
        cfg.capacity.max_model_len = 2;
        assert!(generate_decode_grid(&cfg, &need).unwrap().is_empty());
        let mut cfg = decode_config();
        cfg.capacity.usable_blocks_with_watermark = 0;
        assert!(generate_decode_grid(&cfg, &need).unwrap().is_empty());
    }

    proptest! {
        #[test]
        fn steady_coordinate_is_idempotent(batch in 1u64..200, extra in 0u64..5_000) {
            let v = batch + extra;
            let steady = decode_steady_kv_tokens(batch, v).unwrap();
            prop_assert!(steady >= 2 * batch);
            prop_assert_eq!(decode_steady_kv_tokens(batch, steady).unwrap(), steady);
            if v >= 2 * batch {
                prop_assert_eq!(steady, v);
            } else {
                prop_assert_eq!(steady, 2 * batch);
            }
            // Same as summing over the explicit list.
            let explicit: u64 = decode_context_lengths(v, batch)
                .unwrap()
                .iter()
                .map(|&c| c.saturating_sub(1).max(1))
                .sum::<u64>()
                + batch;
            prop_assert_eq!(steady, explicit);
        }

        #[test]
        fn generated_decode_points_hold_invariants_6_and_7(
            max_running in 1u64..40,
            max_model_len in 0u64..300,
            block in 1u64..33,
            pool in 0u64..400,
            watermark in 0u64..20,
            batch_samples in 2usize..10,
            kv_samples in 2usize..10,
            captures in proptest::collection::vec(1u64..48, 0..5),
        ) {
            let need = ceil_need(block);
            let mut cfg = small_config(BenchmarkMode::Decode);
            cfg.capacity.max_num_running_reqs = max_running;
            cfg.capacity.max_num_scheduled_tokens = 64;
            cfg.capacity.max_model_len = max_model_len;
            cfg.capacity.usable_blocks_without_watermark = pool;
            cfg.capacity.usable_blocks_with_watermark = pool.saturating_sub(watermark);
            cfg.cudagraph.decode_capture_sizes = captures;
            cfg.cudagraph.decode_mode = "FULL".to_string();
            cfg.samples.decode_max_batch_size_samples = batch_samples;
            cfg.samples.decode_max_kv_read_token_samples = kv_samples;
            let points = generate_decode_grid(&cfg, &need).unwrap();
            let max_batch = decode_feasible_max_batch_size(&cfg, &need);
            let mut seen = BTreeSet::new();
            let mut per_batch = std::collections::BTreeMap::<u64, usize>::new();
            for p in &points {
                // Invariant 6: steady coordinates, no duplicate per batch.
                prop_assert_eq!(
                    decode_steady_kv_tokens(p.batch_size, p.total_kv_read_tokens).unwrap(),
                    p.total_kv_read_tokens
                );
                prop_assert!(seen.insert((p.batch_size, p.total_kv_read_tokens)));
                // Invariant 7: model length and pool.
                prop_assert!(decode_point_feasible(&cfg, &need, p.batch_size, p.total_kv_read_tokens));
                prop_assert!(p.batch_size <= max_batch);
                *per_batch.entry(p.batch_size).or_default() += 1;
            }
            prop_assert!(per_batch.len() <= batch_samples);
            prop_assert!(per_batch.values().all(|&n| n <= kv_samples));
        }
    }
}
