//! Prefill grid: new-token axis × batch presets × KV-read axis, filtered by feasibility and
//! appended reversed.
//!
//! Source: `spec/research/dynamo_fpm.md` §1.4 (`_bench_generate_prefill_grid`,
//! `_bench_prefill_batch_sizes`, `_bench_prefill_kv_read_points`,
//! `_bench_max_prefill_kv_read_tokens`, `_bench_prefill_point_feasible`,
//! `_bench_prefill_scheduled_tokens_per_req`), §2.2 (block need).

use std::collections::BTreeSet;

use super::axis::{
    cudagraph_axis_points, limit_cudagraph_axis, powers_of_two_up_to, uniformly_limit_axis, AxisError, PartitionShape,
};
use super::config::{BlockNeed, BlockNeedQuery, GridConfig};
use super::cudagraph::{cudagraph_metadata, expected_cudagraph_mode};
use super::point::{BenchmarkPoint, PointType};

/// Requests of one prefill point with identical (new, kv) lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RequestRun {
    new_tokens: u64,
    kv_read_tokens: u64,
    requests: u64,
}

/// Joins the new-token and KV partitions (both "larger slots first") into at most three runs of
/// identical requests, so feasibility costs O(1) in the batch size.
fn request_runs(new: &PartitionShape, kv: Option<&PartitionShape>) -> Vec<RequestRun> {
    let count = new.count;
    let mut cuts: BTreeSet<u64> = [0, new.high_slots, count].into_iter().collect();
    if let Some(kv) = kv {
        assert_eq!(kv.count, count, "prefill partitions must have the same batch");
        cuts.insert(kv.high_slots);
    }
    let cuts: Vec<u64> = cuts.into_iter().collect();
    let runs: Vec<RequestRun> = cuts
        .windows(2)
        .filter(|w| w[1] > w[0])
        .map(|w| RequestRun {
            new_tokens: new.value_at(w[0]),
            kv_read_tokens: kv.map_or(0, |kv| kv.value_at(w[0])),
            requests: w[1] - w[0],
        })
        .collect();
    debug_assert_eq!(runs.iter().map(|r| r.requests).sum::<u64>(), count);
    runs
}

/// Tokens vLLM's scheduler would schedule for a fresh prompt of `isl` tokens with `kv_read_tokens`
/// cached (dynamo_fpm.md §1.4, V-A `_bench_prefill_scheduled_tokens_per_req`): the uncached part
/// (≥ 1), cut to `long_prefill_token_threshold` when that is set and smaller, then — for hybrid
/// align-mode Mamba — rounded down to a block boundary before the last cacheable position, or cut
/// to end exactly at it.
pub fn prefill_scheduled_tokens_per_req(cfg: &GridConfig, isl: u64, kv_read_tokens: u64) -> u64 {
    let uncached = isl.saturating_sub(kv_read_tokens).max(1);
    let threshold = cfg.scheduler.long_prefill_token_threshold;
    let mut scheduled = if threshold > 0 && threshold < uncached {
        threshold
    } else {
        uncached
    };
    if cfg.scheduler.need_mamba_block_aligned_split {
        // DECISION: Dynamo uses `cache_config.block_size or self.block_size`; kvsim has one
        // scheduler block size, floored at 1 so a zero can never divide.
        let block = cfg.scheduler.block_size.max(1);
        let mut last_cache_position = isl - isl % block;
        if cfg.scheduler.use_eagle {
            last_cache_position = last_cache_position.saturating_sub(block);
        }
        let computed_after_schedule = kv_read_tokens + scheduled;
        if computed_after_schedule < last_cache_position {
            scheduled = scheduled / block * block;
        } else if kv_read_tokens < last_cache_position && last_cache_position < computed_after_schedule {
            scheduled = last_cache_position - kv_read_tokens;
        }
    }
    scheduled
}

/// `_bench_prefill_point_feasible` for a generated (balanced) point, dynamo_fpm.md §1.4:
/// T and B within limits; balanced new-token partition (≥ 1 each) and KV partition in hash-block
/// units (≥ 1 unit each when KV > 0); EAGLE needs new > drop for every request with KV; every
/// prompt + 1 ≤ max_model_len; the scheduler's own chunking yields exactly the planned new tokens;
/// and max(measured footprint, seed footprint) ≤ usable blocks for B.
pub fn prefill_point_feasible(
    cfg: &GridConfig,
    need: &dyn BlockNeed,
    total_prefill_tokens: u64,
    batch_size: u64,
    total_kv_read_tokens: u64,
) -> bool {
    let cap = &cfg.capacity;
    if total_prefill_tokens < 1
        || total_prefill_tokens > cap.max_num_scheduled_tokens
        || batch_size < 1
        || batch_size > cap.max_num_running_reqs
    {
        return false;
    }
    let Ok(new) = PartitionShape::new(total_prefill_tokens, batch_size, 1, 1) else {
        return false;
    };
    let kv = if total_kv_read_tokens == 0 {
        None
    } else {
        match PartitionShape::new(total_kv_read_tokens, batch_size, cfg.scheduler.hash_unit(), 1) {
            Ok(shape) => Some(shape),
            Err(_) => return false,
        }
    };
    let runs = request_runs(&new, kv.as_ref());
    let drop_tokens = cfg.scheduler.eagle_cache_drop_tokens;
    if drop_tokens > 0 && runs.iter().any(|r| r.kv_read_tokens > 0 && r.new_tokens <= drop_tokens) {
        return false;
    }
    let max_model_len = cap.max_model_len;
    for run in &runs {
        let prompt = run.new_tokens.saturating_add(run.kv_read_tokens);
        if prompt.saturating_add(1) > max_model_len {
            return false;
        }
        if prefill_scheduled_tokens_per_req(cfg, prompt, run.kv_read_tokens) != run.new_tokens {
            return false;
        }
    }
    let lookahead = cfg.scheduler.num_lookahead_tokens;
    let mut required: u64 = runs
        .iter()
        .map(|r| {
            let query = BlockNeedQuery {
                num_tokens: r.new_tokens + r.kv_read_tokens + lookahead,
                has_cache_hit: r.kv_read_tokens > 0,
                apply_admission_cap: true,
            };
            need.blocks_per_req(query).saturating_mul(r.requests)
        })
        .fold(0, u64::saturating_add);
    if total_kv_read_tokens > 0 {
        // Seed requests (KV + EAGLE drop tokens) are allocated uncapped, then freed (§1.9).
        let mut seed_required: u64 = 0;
        for run in &runs {
            let seed_len = run.kv_read_tokens.saturating_add(drop_tokens);
            if seed_len.saturating_add(1) > max_model_len {
                return false;
            }
            let blocks = need.blocks_per_req(BlockNeedQuery::plain(seed_len));
            seed_required = seed_required.saturating_add(blocks.saturating_mul(run.requests));
        }
        required = required.max(seed_required);
    }
    required <= cfg.grid_usable_blocks(batch_size, false)
}

/// Batch presets for total `T` (§1.4 step 3): legal batches are 1..min(T, max_running,
/// max_scheduled) feasible with zero KV; presets = legal powers of two plus the largest legal
/// batch, sorted, first `prefix_max_batch_size_samples`.
pub fn prefill_batch_sizes(cfg: &GridConfig, need: &dyn BlockNeed, total_tokens: u64) -> Vec<u64> {
    let cap = &cfg.capacity;
    let upper_bound = total_tokens
        .min(cap.max_num_running_reqs)
        .min(cap.max_num_scheduled_tokens);
    let legal: Vec<u64> = (1..=upper_bound)
        .filter(|&b| prefill_point_feasible(cfg, need, total_tokens, b, 0))
        .collect();
    let Some(&max_batch) = legal.last() else {
        return Vec::new();
    };
    let mut presets: BTreeSet<u64> = powers_of_two_up_to(max_batch)
        .into_iter()
        .filter(|b| legal.binary_search(b).is_ok())
        .collect();
    presets.insert(max_batch);
    presets
        .into_iter()
        .take(cfg.samples.prefix_max_batch_size_samples)
        .collect()
}

/// Largest feasible total KV read for (T, B), in tokens (§1.4 step 4): binary search over whole
/// hash blocks between B and Σ floor((max_model_len − new_i − 1) / hash_block); 0 when even B
/// blocks do not fit.
pub fn max_prefill_kv_read_tokens(
    cfg: &GridConfig,
    need: &dyn BlockNeed,
    total_prefill_tokens: u64,
    batch_size: u64,
) -> u64 {
    let Ok(new) = PartitionShape::new(total_prefill_tokens, batch_size, 1, 1) else {
        return 0;
    };
    let hash_unit = cfg.scheduler.hash_unit();
    let max_model_len = cfg.capacity.max_model_len;
    let max_blocks = new
        .runs()
        .into_iter()
        .map(|(new_tokens, requests)| {
            let room = max_model_len.saturating_sub(new_tokens.saturating_add(1));
            (room / hash_unit).saturating_mul(requests)
        })
        .fold(0, u64::saturating_add);
    if max_blocks < batch_size {
        return 0;
    }
    let (mut low, mut high, mut best) = (batch_size, max_blocks, 0);
    while low <= high {
        let mid = low + (high - low) / 2;
        if prefill_point_feasible(
            cfg,
            need,
            total_prefill_tokens,
            batch_size,
            mid.saturating_mul(hash_unit),
        ) {
            best = mid;
            low = mid + 1;
        } else {
            // mid ≥ low ≥ batch_size ≥ 1, so this cannot underflow.
            high = mid - 1;
        }
    }
    best * hash_unit
}

/// KV-read axis for (T, B) (§1.4 step 4): `[0]` without prefix caching or when fewer than B
/// blocks fit; else block presets {0, B, powers of two ≥ B, max} × hash block, uniformly limited.
pub fn prefill_kv_read_points(
    cfg: &GridConfig,
    need: &dyn BlockNeed,
    total_prefill_tokens: u64,
    batch_size: u64,
) -> Result<Vec<u64>, AxisError> {
    if !cfg.scheduler.enable_prefix_caching {
        return Ok(vec![0]);
    }
    let hash_unit = cfg.scheduler.hash_unit();
    let max_blocks = max_prefill_kv_read_tokens(cfg, need, total_prefill_tokens, batch_size) / hash_unit;
    if max_blocks < batch_size {
        return Ok(vec![0]);
    }
    let mut presets: BTreeSet<u64> = [0, batch_size, max_blocks].into_iter().collect();
    presets.extend(powers_of_two_up_to(max_blocks).into_iter().filter(|&b| b >= batch_size));
    let points: Vec<u64> = presets.into_iter().map(|b| b * hash_unit).collect();
    uniformly_limit_axis(&points, cfg.samples.prefill_max_kv_read_token_samples)
}

/// New-token axis (§1.4 step 2). V-E's block-aligned union for hybrid align mode is not modelled.
pub fn prefill_new_token_axis(cfg: &GridConfig) -> Result<Vec<u64>, AxisError> {
    let max_tokens = cfg.capacity.max_num_scheduled_tokens;
    let captures = &cfg.cudagraph.prefill_capture_sizes;
    limit_cudagraph_axis(
        &cudagraph_axis_points(captures, max_tokens),
        captures,
        cfg.samples.prefill_max_new_token_samples,
    )
}

/// The prefill phase in execution order (§1.4): empty when `max_num_scheduled_tokens < 1`;
/// otherwise every feasible (T, B, KV) with cudagraph metadata keyed by T, generated with
/// ascending axes and returned **reversed** (largest coordinates first, step 6).
pub fn generate_prefill_grid(cfg: &GridConfig, need: &dyn BlockNeed) -> Result<Vec<BenchmarkPoint>, AxisError> {
    let max_tokens = cfg.capacity.max_num_scheduled_tokens;
    if max_tokens < 1 {
        return Ok(Vec::new());
    }
    let captures = &cfg.cudagraph.prefill_capture_sizes;
    let mut points = Vec::new();
    for total_tokens in prefill_new_token_axis(cfg)? {
        let meta = cudagraph_metadata(total_tokens, captures, max_tokens);
        for batch_size in prefill_batch_sizes(cfg, need, total_tokens) {
            for kv in prefill_kv_read_points(cfg, need, total_tokens, batch_size)? {
                if !prefill_point_feasible(cfg, need, total_tokens, batch_size, kv) {
                    continue;
                }
                points.push(BenchmarkPoint {
                    point_type: PointType::Prefill,
                    benchmark_id: 0,
                    total_prefill_tokens: total_tokens,
                    total_kv_read_tokens: kv,
                    batch_size,
                    expected_cudagraph_mode: expected_cudagraph_mode(
                        meta.expected_capture_size,
                        &cfg.cudagraph.prefill_mode,
                    ),
                    expected_capture_size: meta.expected_capture_size,
                    padding_tokens: meta.padding_tokens,
                    sample_reasons: meta.sample_reasons.clone(),
                    partition: None,
                    rows: None,
                });
            }
        }
    }
    // dynamo_fpm.md §1.4 step 6: the prefill phase runs largest coordinates first.
    points.reverse();
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::super::config::BenchmarkMode;
    use super::super::point::SampleReason;
    use super::super::testutil::{ceil_need, small_config};
    use super::*;
    use proptest::prelude::*;

    fn coords(points: &[BenchmarkPoint]) -> Vec<(u64, u64, u64)> {
        points
            .iter()
            .map(|p| (p.total_prefill_tokens, p.batch_size, p.total_kv_read_tokens))
            .collect()
    }

    #[test]
    fn request_runs_split_at_both_partitions() {
        let new = PartitionShape::new(10, 4, 1, 1).unwrap(); // 3,3,2,2
        let kv = PartitionShape::new(20, 4, 4, 1).unwrap(); // 8,4,4,4
        assert_eq!(
            request_runs(&new, Some(&kv)),
            vec![
                RequestRun {
                    new_tokens: 3,
                    kv_read_tokens: 8,
                    requests: 1
                },
                RequestRun {
                    new_tokens: 3,
                    kv_read_tokens: 4,
                    requests: 1
                },
                RequestRun {
                    new_tokens: 2,
                    kv_read_tokens: 4,
                    requests: 2
                },
            ]
        );
        assert_eq!(
            request_runs(&new, None),
            vec![
                RequestRun {
                    new_tokens: 3,
                    kv_read_tokens: 0,
                    requests: 2
                },
                RequestRun {
                    new_tokens: 2,
                    kv_read_tokens: 0,
                    requests: 2
                },
            ]
        );
    }

    #[test]
    fn scheduled_tokens_follow_threshold_and_block_aligned_split() {
        let mut cfg = small_config(BenchmarkMode::Prefill);
        assert_eq!(prefill_scheduled_tokens_per_req(&cfg, 10, 0), 10);
        assert_eq!(prefill_scheduled_tokens_per_req(&cfg, 10, 10), 1);
        cfg.scheduler.long_prefill_token_threshold = 3;
        assert_eq!(prefill_scheduled_tokens_per_req(&cfg, 10, 4), 3);
        assert_eq!(prefill_scheduled_tokens_per_req(&cfg, 10, 8), 2);
        cfg.scheduler.long_prefill_token_threshold = 0;
        cfg.scheduler.need_mamba_block_aligned_split = true;
        // isl 10, block 4: last cache position 8. kv 0 → 10 crosses 8 → cut to 8.
        assert_eq!(prefill_scheduled_tokens_per_req(&cfg, 10, 0), 8);
        // kv 8 → computed 10, last 8 not strictly inside (8, 10) → unchanged 2.
        assert_eq!(prefill_scheduled_tokens_per_req(&cfg, 10, 8), 2);
        cfg.scheduler.long_prefill_token_threshold = 3;
        // isl 20, kv 0: scheduled 3, computed 3 < 20 → rounded down to 0 (one block is 4).
        assert_eq!(prefill_scheduled_tokens_per_req(&cfg, 20, 0), 0);
        cfg.scheduler.long_prefill_token_threshold = 6;
        // 6 → 4 (block multiple).
        assert_eq!(prefill_scheduled_tokens_per_req(&cfg, 20, 0), 4);
        cfg.scheduler.use_eagle = true;
        cfg.scheduler.long_prefill_token_threshold = 0;
        // EAGLE moves the last cache position back a block: 20 → 16; kv 0 → cut to 16.
        assert_eq!(prefill_scheduled_tokens_per_req(&cfg, 20, 0), 16);
    }

    #[test]
    fn batch_presets_are_the_first_three_legal_powers_or_max() {
        let need = ceil_need(4);
        let mut cfg = small_config(BenchmarkMode::Prefill);
        cfg.capacity.max_num_running_reqs = 8;
        // T=8: legal 1..=8 → powers {1,2,4,8} ∪ {8} → first three.
        assert_eq!(prefill_batch_sizes(&cfg, &need, 8), vec![1, 2, 4]);
        // T=6: legal 1..=6 → {1,2,4} ∪ {6}.
        assert_eq!(prefill_batch_sizes(&cfg, &need, 6), vec![1, 2, 4]);
        cfg.samples.prefix_max_batch_size_samples = 5;
        assert_eq!(prefill_batch_sizes(&cfg, &need, 6), vec![1, 2, 4, 6]);
        // Threshold 3 makes B < 3 illegal for T=8 (a request would be chunked): legal 3..=8,
        // legal powers {4, 8}, max 8.
        cfg.scheduler.long_prefill_token_threshold = 3;
        assert_eq!(prefill_batch_sizes(&cfg, &need, 8), vec![4, 8]);
    }

    #[test]
    fn kv_read_points_worked_examples() {
        let need = ceil_need(4);
        let cfg = small_config(BenchmarkMode::Prefill);
        // T=1,B=1: (64−1−1)/4 = 15 blocks; 60 tokens: prompt 61, 16 blocks ≤ 100 → max 15.
        assert_eq!(max_prefill_kv_read_tokens(&cfg, &need, 1, 1), 60);
        assert_eq!(
            prefill_kv_read_points(&cfg, &need, 1, 1).unwrap(),
            vec![0, 4, 8, 16, 32, 60]
        );
        // T=2,B=2: 15 blocks per request → 30 blocks = 120 tokens; presets {0,2,4,8,16,30}.
        assert_eq!(
            prefill_kv_read_points(&cfg, &need, 2, 2).unwrap(),
            vec![0, 8, 16, 32, 64, 120]
        );
        // T=8,B=1: (64−8−1)/4 = 13 blocks.
        assert_eq!(
            prefill_kv_read_points(&cfg, &need, 8, 1).unwrap(),
            vec![0, 4, 8, 16, 32, 52]
        );
    }

    #[test]
    fn kv_read_points_collapse_to_zero_without_prefix_caching_or_room() {
        let need = ceil_need(4);
        let mut cfg = small_config(BenchmarkMode::Prefill);
        cfg.scheduler.enable_prefix_caching = false;
        assert_eq!(prefill_kv_read_points(&cfg, &need, 2, 2).unwrap(), vec![0]);
        cfg.scheduler.enable_prefix_caching = true;
        // EAGLE drop 4: a request with KV needs more than 4 new tokens; T=4,B=1 has 4 → no KV.
        cfg.scheduler.eagle_cache_drop_tokens = 4;
        assert!(!prefill_point_feasible(&cfg, &need, 4, 1, 4));
        assert_eq!(prefill_kv_read_points(&cfg, &need, 4, 1).unwrap(), vec![0]);
        // T=8 (new 8 > 4) stays feasible; seed length kv+4 must leave room: (kv+4)+1 ≤ 64.
        assert!(prefill_point_feasible(&cfg, &need, 8, 1, 52));
    }

    #[test]
    fn kv_read_points_are_limited_uniformly() {
        let need = ceil_need(1);
        let mut cfg = small_config(BenchmarkMode::Prefill);
        cfg.capacity.max_model_len = 4096;
        cfg.capacity.usable_blocks_with_watermark = 10_000;
        cfg.capacity.usable_blocks_without_watermark = 10_000;
        cfg.scheduler = super::super::config::SchedulerShape::with_block_size(1);
        cfg.samples.prefill_max_kv_read_token_samples = 4;
        // T=1,B=1: 4094 blocks of 1; presets {0,1,2,4,…,2048,4094} (14) → 4 uniform samples:
        // intervals 3, half 1 → indices 0, (13+1)/3=4, (26+1)/3=9, 13 → 0, 8, 256, 4094.
        assert_eq!(
            prefill_kv_read_points(&cfg, &need, 1, 1).unwrap(),
            vec![0, 8, 256, 4094]
        );
    }

    #[test]
    fn pool_bound_prefill_points_use_the_seed_footprint_too() {
        let mut cfg = small_config(BenchmarkMode::Prefill);
        cfg.capacity.usable_blocks_without_watermark = 10;
        cfg.capacity.usable_blocks_with_watermark = 10;
        // Measured request with a hit priced at 1 block; the seed is priced normally.
        let need = |q: BlockNeedQuery| {
            if q.has_cache_hit {
                1
            } else {
                q.num_tokens.div_ceil(4)
            }
        };
        // T=1,B=1,KV=40: measured 1 block, seed ceil(40/4) = 10 ≤ 10 → feasible; 44 → 11 > 10.
        assert!(prefill_point_feasible(&cfg, &need, 1, 1, 40));
        assert!(!prefill_point_feasible(&cfg, &need, 1, 1, 44));
        assert_eq!(max_prefill_kv_read_tokens(&cfg, &need, 1, 1), 40);
    }

    #[test]
    fn small_prefill_grid_is_reversed_with_disabled_graph_reasons() {
        let need = ceil_need(4);
        let cfg = small_config(BenchmarkMode::Prefill);
        assert_eq!(prefill_new_token_axis(&cfg).unwrap(), vec![1, 2, 4, 8]);
        let points = generate_prefill_grid(&cfg, &need).unwrap();
        // T=1: B=1 (6 KV points); T=2,4,8: B∈{1,2} (6 each) → 6 + 3·12 = 42.
        assert_eq!(points.len(), 42);
        let c = coords(&points);
        // Reversed: the largest coordinate first, the smallest last.
        assert_eq!(c[0], (8, 2, 112));
        assert_eq!(c[5], (8, 2, 0));
        assert_eq!(c[6], (8, 1, 52));
        assert_eq!(c[41], (1, 1, 0));
        let mut ascending = c.clone();
        ascending.reverse();
        let mut sorted = ascending.clone();
        sorted.sort_unstable();
        assert_eq!(ascending, sorted, "generated ascending, appended reversed");
        assert!(points.iter().all(|p| p.expected_cudagraph_mode == "NONE"
            && p.expected_capture_size.is_none()
            && p.padding_tokens.is_none()
            && p.benchmark_id == 0));
        assert_eq!(
            points[0].sample_reasons,
            vec![SampleReason::CudagraphDisabled, SampleReason::EngineLimit]
        );
        assert_eq!(
            points[41].sample_reasons,
            vec![SampleReason::CudagraphDisabled, SampleReason::GeometricAxis]
        );
    }

    #[test]
    fn prefill_with_captures_carries_the_phase_mode() {
        let need = ceil_need(4);
        let mut cfg = small_config(BenchmarkMode::Prefill);
        cfg.cudagraph.prefill_capture_sizes = vec![4];
        cfg.cudagraph.prefill_mode = "PIECEWISE".to_string();
        // Axis: 4, 5, then tail 8 is the limit → [4, 5, 8].
        assert_eq!(prefill_new_token_axis(&cfg).unwrap(), vec![4, 5, 8]);
        let points = generate_prefill_grid(&cfg, &need).unwrap();
        let four = points.iter().find(|p| p.total_prefill_tokens == 4).unwrap();
        assert_eq!(four.expected_cudagraph_mode, "PIECEWISE");
        assert_eq!(four.expected_capture_size, Some(4));
        assert_eq!(four.padding_tokens, Some(0));
        let eight = points.iter().find(|p| p.total_prefill_tokens == 8).unwrap();
        assert_eq!(eight.expected_cudagraph_mode, "NONE");
        assert_eq!(
            eight.sample_reasons,
            vec![SampleReason::EagerTail, SampleReason::EngineLimit]
        );
    }

    #[test]
    fn no_scheduled_tokens_means_no_prefill_phase() {
        let mut cfg = small_config(BenchmarkMode::Prefill);
        cfg.capacity.max_num_scheduled_tokens = 0;
        assert!(generate_prefill_grid(&cfg, &ceil_need(4)).unwrap().is_empty());
    }

    proptest! {
        #[test]
        fn every_generated_prefill_point_is_feasible_and_unique(
            max_tokens in 1u64..96,
            max_running in 1u64..6,
            max_model_len in 2u64..200,
            block in 1u64..9,
            pool in 0u64..80,
            caching in any::<bool>(),
        ) {
            let need = ceil_need(block);
            let mut cfg = small_config(BenchmarkMode::Prefill);
            cfg.capacity.max_num_scheduled_tokens = max_tokens;
            cfg.capacity.max_num_running_reqs = max_running;
            cfg.capacity.max_model_len = max_model_len;
            cfg.capacity.usable_blocks_without_watermark = pool;
            cfg.capacity.usable_blocks_with_watermark = pool;
            cfg.scheduler = super::super::config::SchedulerShape::with_block_size(block);
            cfg.scheduler.enable_prefix_caching = caching;
            let points = generate_prefill_grid(&cfg, &need).unwrap();
            let mut seen = BTreeSet::new();
            for p in &points {
                prop_assert!(prefill_point_feasible(
                    &cfg, &need, p.total_prefill_tokens, p.batch_size, p.total_kv_read_tokens
                ));
                prop_assert_eq!(p.total_kv_read_tokens % block, 0);
                prop_assert!(caching || p.total_kv_read_tokens == 0);
                prop_assert!(seen.insert((p.total_prefill_tokens, p.batch_size, p.total_kv_read_tokens)));
            }
        }
    }
}
