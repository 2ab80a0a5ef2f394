//! Grid assembly: generated phases, eager warm-up replicas, phase order, stable keys, numbering
//! and the grid digest.
//!
//! Source: `spec/research/dynamo_fpm.md` §1.6 (`_bench_eager_warmup_points`), §1.7
//! (`_bench_build_grid`: missing phases, replica prepend, numbering after the kvwarm reorder,
//! `_bench_grid_digest`), §8.1 invariants 1–3.
//!
//! A caller that reorders the grid (kvwarm's `_kvwarm_prepare`, §3.1, or V-E's attention-DP drop,
//! §7.4) does so between [`assemble_phases`] and [`Grid::finalize`]: numbering and the digest
//! follow the final execution order, and [`PointKey`]s do not change.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::axis::AxisError;
use super::config::{BlockNeed, ConfigError, GridConfig};
use super::decode::{decode_feasible_max_batch_size, generate_decode_grid};
// Re-exported: `order::canonical_json` was its home before `json` (a leaf) took it.
pub use super::json::canonical_json;
use super::point::{BenchmarkPoint, PointCoordinate, PointKey, PointType, SampleReason};
use super::prefill::generate_prefill_grid;

/// Why a grid could not be built.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum GridError {
    /// The grid config is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An axis cannot be sampled.
    #[error(transparent)]
    Axis(#[from] AxisError),
}

/// The generated phases before replicas and numbering (§1.7 step 2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GeneratedPhases {
    /// Prefill points in execution order (already reversed, §1.4 step 6).
    pub prefill: Vec<BenchmarkPoint>,
    /// Decode points in generation order (§1.5).
    pub decode: Vec<BenchmarkPoint>,
    /// Selected phases that produced no points, in phase order (`"prefill"`, `"decode"`).
    pub missing_phases: Vec<PointType>,
    /// `_bench_feasible_max_decode_batch_size` when the decode phase was selected
    /// (artifact `limits.feasible_max_batch_size`).
    pub feasible_max_decode_batch_size: Option<u64>,
}

/// Generate the phases `cfg.mode` selects (§1.7 step 2), after validating the config.
pub fn generate_phases(cfg: &GridConfig, need: &dyn BlockNeed) -> Result<GeneratedPhases, GridError> {
    cfg.validate()?;
    let mut phases = GeneratedPhases {
        prefill: Vec::new(),
        decode: Vec::new(),
        missing_phases: Vec::new(),
        feasible_max_decode_batch_size: None,
    };
    if cfg.mode.runs_prefill() {
        phases.prefill = generate_prefill_grid(cfg, need)?;
        if phases.prefill.is_empty() {
            phases.missing_phases.push(PointType::Prefill);
        }
    }
    if cfg.mode.runs_decode() {
        phases.feasible_max_decode_batch_size = Some(decode_feasible_max_batch_size(cfg, need));
        phases.decode = generate_decode_grid(cfg, need)?;
        if phases.decode.is_empty() {
            phases.missing_phases.push(PointType::Decode);
        }
    }
    Ok(phases)
}

/// One replica per eager shape (§1.6): for each point without a capture size, deduplicated by
/// (point_type, total_prefill_tokens for prefill / batch_size for decode), a copy of the first
/// such point in `points` order with `sample_reasons = ["eager_warmup"]`.
pub fn eager_warmup_points(points: &[BenchmarkPoint]) -> Vec<BenchmarkPoint> {
    let mut seen: BTreeSet<(PointType, u64)> = BTreeSet::new();
    let mut replicas = Vec::new();
    for point in points.iter().filter(|p| p.expected_capture_size.is_none()) {
        let shape = match point.point_type {
            PointType::Prefill => point.total_prefill_tokens,
            PointType::Decode => point.batch_size,
        };
        if seen.insert((point.point_type, shape)) {
            replicas.push(BenchmarkPoint {
                sample_reasons: vec![SampleReason::EagerWarmup],
                ..point.clone()
            });
        }
    }
    replicas
}

/// One grid entry: the point as Dynamo would write it plus its stable key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GridEntry {
    /// Its stable key.
    pub key: PointKey,
    /// The point as Dynamo writes it.
    pub point: BenchmarkPoint,
}

/// The grid in phase order with keys, before numbering (§1.6–§1.7 step 3): prefill replicas,
/// real prefill, decode replicas, real decode — each phase contiguous because a type change at the
/// head of the grid ends a phase.
pub fn assemble_phases(phases: &GeneratedPhases) -> Vec<GridEntry> {
    let prefill_replicas = eager_warmup_points(&phases.prefill);
    let decode_replicas = eager_warmup_points(&phases.decode);
    let mut occurrences: BTreeMap<(PointCoordinate, bool), u32> = BTreeMap::new();
    let ordered = prefill_replicas
        .into_iter()
        .chain(phases.prefill.iter().cloned())
        .chain(decode_replicas)
        .chain(phases.decode.iter().cloned());
    let entries: Vec<GridEntry> = ordered
        .map(|point| {
            let coordinate = point.coordinate();
            let eager_warmup = point.is_eager_warmup();
            let counter = occurrences.entry((coordinate.clone(), eager_warmup)).or_insert(0);
            let key = PointKey {
                coordinate,
                eager_warmup,
                occurrence: *counter,
            };
            *counter += 1;
            GridEntry { key, point }
        })
        .collect();
    debug_assert!(entries
        .windows(2)
        .all(|w| w[0].point.point_type <= w[1].point.point_type));
    entries
}

/// Number the grid in its final execution order (§1.7 step 5): real points get `benchmark_id`
/// 1..N in order, eager replicas N+1, N+2, … in order. Returns N, the expected point count.
pub fn number_points(entries: &mut [GridEntry]) -> u64 {
    let expected_points = entries.iter().filter(|e| !e.point.is_eager_warmup()).count() as u64;
    let mut real_id = 0;
    let mut replica_id = expected_points;
    for entry in entries.iter_mut() {
        debug_assert_eq!(entry.key.eager_warmup, entry.point.is_eager_warmup());
        if entry.point.is_eager_warmup() {
            replica_id += 1;
            entry.point.benchmark_id = replica_id;
        } else {
            real_id += 1;
            entry.point.benchmark_id = real_id;
        }
    }
    assert_eq!(real_id, expected_points, "every real point numbered once");
    expected_points
}

fn xxh3_hex(canonical: &str) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(canonical.as_bytes()))
}

/// The grid digest (§1.7 step 6): a hash of the canonical JSON list of every point of the full
/// grid (replicas included, in execution order, ids included).
///
/// DECISION: Dynamo uses SHA-256 (64 hex chars); kvsim uses xxh3-128 (32 hex chars) over the same
/// canonical bytes, since `sha2` is not a dependency. Equality across ranks is what the digest is
/// for, and that property is the same; the values are not comparable with Dynamo's.
pub fn grid_digest(entries: &[GridEntry]) -> String {
    let mut json = String::from("[");
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        e.point.write_canonical(&mut json);
    }
    json.push(']');
    xxh3_hex(&json)
}

/// `_benchmark_point_digest` (§1.7, sent with READY/results): the same hash over one point.
pub fn point_digest(point: &BenchmarkPoint) -> String {
    let mut json = String::new();
    point.write_canonical(&mut json);
    xxh3_hex(&json)
}

/// A built grid: entries in execution order, numbered, digested.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Grid {
    /// Entries in execution order.
    pub entries: Vec<GridEntry>,
    /// Real (non-replica) points: `coverage.expected_points`.
    pub expected_points: u64,
    /// Phases with no point.
    pub missing_phases: Vec<PointType>,
    /// The grid digest.
    pub digest: String,
}

impl Grid {
    /// Number and digest `entries` in their final order (§1.7 steps 5–6).
    pub fn finalize(mut entries: Vec<GridEntry>, missing_phases: Vec<PointType>) -> Grid {
        let expected_points = number_points(&mut entries);
        let digest = grid_digest(&entries);
        Grid {
            entries,
            expected_points,
            missing_phases,
            digest,
        }
    }

    /// The entry with this stable key.
    pub fn find(&self, key: &PointKey) -> Option<&GridEntry> {
        self.entries.iter().find(|e| &e.key == key)
    }

    /// The entry with this public id.
    pub fn by_benchmark_id(&self, benchmark_id: u64) -> Option<&GridEntry> {
        self.entries.iter().find(|e| e.point.benchmark_id == benchmark_id)
    }

    /// Public id of every key (rebuild after any renumbering).
    pub fn ids_by_key(&self) -> BTreeMap<PointKey, u64> {
        self.entries
            .iter()
            .map(|e| (e.key.clone(), e.point.benchmark_id))
            .collect()
    }
}

/// The whole §1.7 build without a reorder hook: validate, generate, assemble with replicas,
/// number, digest.
pub fn build_grid(cfg: &GridConfig, need: &dyn BlockNeed) -> Result<Grid, GridError> {
    let phases = generate_phases(cfg, need)?;
    let entries = assemble_phases(&phases);
    Ok(Grid::finalize(entries, phases.missing_phases))
}

#[cfg(test)]
mod tests {
    use super::super::config::BenchmarkMode;
    use super::super::testutil::{ceil_need, small_config};
    use super::*;
    use proptest::prelude::*;

    /// Small agg engine: all prefill points eager (no prefill captures); decode captures {1}, so
    /// of the decode batches {1, 2} only B=2 is eager.
    fn agg_config() -> GridConfig {
        let mut cfg = small_config(BenchmarkMode::Agg);
        cfg.cudagraph.decode_capture_sizes = vec![1];
        cfg.cudagraph.decode_mode = "FULL".to_string();
        cfg
    }

    fn summary(e: &GridEntry) -> (PointType, u64, u64, u64, bool) {
        let p = &e.point;
        (
            p.point_type,
            p.total_prefill_tokens,
            p.batch_size,
            p.total_kv_read_tokens,
            p.is_eager_warmup(),
        )
    }

    #[test]
    fn agg_grid_phase_order_and_numbering() {
        let grid = build_grid(&agg_config(), &ceil_need(4)).unwrap();
        // 4 prefill replicas + 42 prefill + 1 decode replica + 12 decode.
        assert_eq!(grid.entries.len(), 59);
        assert_eq!(grid.expected_points, 54);
        assert!(grid.missing_phases.is_empty());
        let s: Vec<_> = grid.entries.iter().map(summary).collect();
        use PointType::{Decode, Prefill};
        // Prefill replicas: one per T, copies of the first point with that T in reversed order.
        assert_eq!(
            &s[..4],
            &[
                (Prefill, 8, 2, 112, true),
                (Prefill, 4, 2, 120, true),
                (Prefill, 2, 2, 120, true),
                (Prefill, 1, 1, 60, true),
            ]
        );
        assert_eq!(s[4], (Prefill, 8, 2, 112, false));
        assert_eq!(s[45], (Prefill, 1, 1, 0, false));
        // Decode replica for the eager batch 2 (copy of its first point, KV 4), then B=1, B=2.
        assert_eq!(s[46], (Decode, 0, 2, 4, true));
        assert_eq!(s[47], (Decode, 0, 1, 2, false));
        assert_eq!(s[53], (Decode, 0, 2, 4, false));
        assert_eq!(s[58], (Decode, 0, 2, 124, false));
        // Real ids 1..54 in execution order; replicas 55..58 (prefill) and 59 (decode).
        let ids: Vec<u64> = grid.entries.iter().map(|e| e.point.benchmark_id).collect();
        assert_eq!(&ids[..5], &[55, 56, 57, 58, 1]);
        assert_eq!(ids[45], 42);
        assert_eq!(ids[46], 59);
        assert_eq!(&ids[47..], &(43..=54).collect::<Vec<u64>>()[..]);
        // Replicas carry only the eager_warmup reason.
        assert_eq!(grid.entries[46].point.sample_reasons, vec![SampleReason::EagerWarmup]);
    }

    #[test]
    fn replicas_dedupe_by_shape_driver_and_skip_captured_points() {
        let need = ceil_need(4);
        let phases = generate_phases(&agg_config(), &need).unwrap();
        let replicas = eager_warmup_points(&phases.decode);
        // Decode B=1 is captured (no replica); six eager B=2 points collapse to one.
        assert_eq!(replicas.len(), 1);
        assert_eq!(replicas[0].batch_size, 2);
        assert_eq!(replicas[0].expected_capture_size, None);
        let all: Vec<BenchmarkPoint> = phases.prefill.iter().chain(phases.decode.iter()).cloned().collect();
        let replicas = eager_warmup_points(&all);
        let shapes: Vec<(PointType, u64)> = replicas
            .iter()
            .map(|r| match r.point_type {
                PointType::Prefill => (r.point_type, r.total_prefill_tokens),
                PointType::Decode => (r.point_type, r.batch_size),
            })
            .collect();
        assert_eq!(
            shapes,
            vec![
                (PointType::Prefill, 8),
                (PointType::Prefill, 4),
                (PointType::Prefill, 2),
                (PointType::Prefill, 1),
                (PointType::Decode, 2),
            ]
        );
    }

    #[test]
    fn lookups_by_key_survive_reorder_and_renumbering() {
        let need = ceil_need(4);
        let cfg = agg_config();
        let phases = generate_phases(&cfg, &need).unwrap();
        let original = Grid::finalize(assemble_phases(&phases), phases.missing_phases.clone());
        // A kvwarm-style reorder: decode replicas pinned first, real decode batch-desc, KV-desc.
        let mut entries = assemble_phases(&phases);
        let first_decode = entries
            .iter()
            .position(|e| e.point.point_type == PointType::Decode)
            .unwrap();
        let decode = entries.split_off(first_decode);
        let (mut pinned, mut sortable): (Vec<_>, Vec<_>) = decode.into_iter().partition(|e| e.point.is_eager_warmup());
        sortable.sort_by_key(|e| {
            (
                std::cmp::Reverse(e.point.batch_size),
                std::cmp::Reverse(e.point.total_kv_read_tokens),
            )
        });
        entries.append(&mut pinned);
        entries.append(&mut sortable);
        let reordered = Grid::finalize(entries, phases.missing_phases.clone());
        assert_eq!(reordered.expected_points, original.expected_points);
        assert_ne!(reordered.digest, original.digest, "digest covers execution order");
        // Ids still follow execution order.
        let real: Vec<u64> = reordered
            .entries
            .iter()
            .filter(|e| !e.point.is_eager_warmup())
            .map(|e| e.point.benchmark_id)
            .collect();
        assert_eq!(real, (1..=54).collect::<Vec<u64>>());
        // The first decode real point is now (B=2, KV=124) with id 43; in the original grid the
        // same key had id 54. Every key still finds the same coordinate.
        let moved = &reordered.entries[47];
        assert_eq!((moved.point.batch_size, moved.point.total_kv_read_tokens), (2, 124));
        assert_eq!(moved.point.benchmark_id, 43);
        assert_eq!(original.find(&moved.key).unwrap().point.benchmark_id, 54);
        for entry in &original.entries {
            let found = reordered.find(&entry.key).unwrap();
            assert_eq!(found.point.coordinate(), entry.point.coordinate());
            assert_eq!(found.point.is_eager_warmup(), entry.point.is_eager_warmup());
        }
        assert_eq!(reordered.ids_by_key().len(), reordered.entries.len());
        assert_eq!(reordered.by_benchmark_id(43).unwrap().key, moved.key);
    }

    #[test]
    fn keys_distinguish_replicas_and_repeated_coordinates() {
        let need = ceil_need(4);
        let mut phases = generate_phases(&agg_config(), &need).unwrap();
        // A repeated coordinate (as an explicit manifest may carry) gets occurrence 1.
        let repeated = phases.decode[0].clone();
        phases.decode.push(repeated);
        let entries = assemble_phases(&phases);
        let keys: BTreeSet<&PointKey> = entries.iter().map(|e| &e.key).collect();
        assert_eq!(keys.len(), entries.len(), "keys are unique");
        let last = entries.last().unwrap();
        assert_eq!(last.key.occurrence, 1);
        let replica = &entries[46];
        let real = &entries[53];
        assert_eq!(replica.key.coordinate, real.key.coordinate);
        assert!(replica.key.eager_warmup && !real.key.eager_warmup);
        assert_eq!((replica.key.occurrence, real.key.occurrence), (0, 0));
    }

    #[test]
    fn missing_phases_and_single_mode_grids() {
        let need = ceil_need(4);
        let mut cfg = small_config(BenchmarkMode::Decode);
        cfg.capacity.max_model_len = 2;
        let grid = build_grid(&cfg, &need).unwrap();
        assert!(grid.entries.is_empty());
        assert_eq!(grid.missing_phases, vec![PointType::Decode]);
        let mut cfg = small_config(BenchmarkMode::Agg);
        cfg.capacity.max_num_scheduled_tokens = 0;
        let grid = build_grid(&cfg, &need).unwrap();
        // No prefill (no tokens) and no decode (feasible max batch is min(…, 0 tokens) = 0).
        assert_eq!(grid.missing_phases, vec![PointType::Prefill, PointType::Decode]);
        let grid = build_grid(&small_config(BenchmarkMode::Prefill), &need).unwrap();
        assert!(grid.entries.iter().all(|e| e.point.point_type == PointType::Prefill));
        assert_eq!(grid.expected_points, 42);
    }

    #[test]
    fn invalid_config_is_refused() {
        let mut cfg = small_config(BenchmarkMode::Agg);
        cfg.samples.decode_max_batch_size_samples = 1;
        assert!(matches!(build_grid(&cfg, &ceil_need(4)), Err(GridError::Config(_))));
    }

    #[test]
    fn canonical_json_matches_python_sorted_compact_dumps() {
        let point = BenchmarkPoint {
            point_type: PointType::Decode,
            benchmark_id: 3,
            total_prefill_tokens: 0,
            total_kv_read_tokens: 8,
            batch_size: 4,
            expected_cudagraph_mode: "FULL".to_string(),
            expected_capture_size: Some(4),
            padding_tokens: Some(0),
            sample_reasons: vec![SampleReason::Capture],
            partition: None,
            rows: None,
        };
        let json = canonical_json(&serde_json::to_value(&point).unwrap());
        assert_eq!(
            json,
            concat!(
                r#"{"batch_size":4,"benchmark_id":3,"expected_capture_size":4,"#,
                r#""expected_cudagraph_mode":"FULL","padding_tokens":0,"partition":null,"#,
                r#""point_type":"decode","rows":null,"sample_reasons":["capture"],"#,
                r#""total_kv_read_tokens":8,"total_prefill_tokens":0}"#
            )
        );
        assert_eq!(point_digest(&point).len(), 32);
    }

    #[test]
    fn digest_is_deterministic_and_sensitive() {
        let need = ceil_need(4);
        let a = build_grid(&agg_config(), &need).unwrap();
        let b = build_grid(&agg_config(), &need).unwrap();
        assert_eq!(a.digest, b.digest);
        assert_eq!(a.digest.len(), 32);
        let mut entries = a.entries.clone();
        entries[10].point.sample_reasons.push(SampleReason::Explicit);
        assert_ne!(grid_digest(&entries), a.digest);
        let mut entries = a.entries.clone();
        entries[10].point.benchmark_id += 100;
        assert_ne!(grid_digest(&entries), a.digest);
    }

    proptest! {
        #[test]
        fn numbering_is_contiguous_for_any_entry_order(
            seed in proptest::collection::vec(any::<u32>(), 59),
        ) {
            let need = ceil_need(4);
            let phases = generate_phases(&agg_config(), &need).unwrap();
            let mut entries = assemble_phases(&phases);
            // Shuffle deterministically by the generated keys.
            let mut order: Vec<(u32, GridEntry)> = seed.into_iter().zip(entries.drain(..)).collect();
            order.sort_by_key(|(k, _)| *k);
            let entries: Vec<GridEntry> = order.into_iter().map(|(_, e)| e).collect();
            let grid = Grid::finalize(entries, Vec::new());
            let real: Vec<u64> = grid.entries.iter()
                .filter(|e| !e.point.is_eager_warmup())
                .map(|e| e.point.benchmark_id)
                .collect();
            prop_assert_eq!(real, (1..=54).collect::<Vec<u64>>());
            let replicas: Vec<u64> = grid.entries.iter()
                .filter(|e| e.point.is_eager_warmup())
                .map(|e| e.point.benchmark_id)
                .collect();
            prop_assert_eq!(replicas, (55..=59).collect::<Vec<u64>>());
        }
    }
}

#[cfg(test)]
mod canonical_tests {
    use super::*;
    use crate::fpm::scenarios::builtin_scenarios;

    /// The generic form the digest was defined on: `asdict` through serde, keys sorted.
    fn generic(p: &BenchmarkPoint) -> String {
        canonical_json(&serde_json::to_value(p).unwrap())
    }

    #[test]
    fn the_written_canonical_form_is_the_generic_one() {
        let mut seen = 0;
        for s in builtin_scenarios() {
            let need = crate::fpm::capacity::LayoutNeed::new(s.scenario.kv_config());
            let grid = build_grid(&s.grid_config(), &need).unwrap();
            for e in &grid.entries {
                let mut p = e.point.clone();
                let mut out = String::new();
                p.write_canonical(&mut out);
                assert_eq!(out, generic(&p));
                // The optional fields a generated grid leaves empty.
                p.partition = Some(serde_json::json!({"axis": "kv", "fraction": 0.5, "high_count": 1}));
                p.rows = Some(vec![[3, 4], [5, 6]]);
                p.padding_tokens = Some(7);
                p.expected_capture_size = None;
                p.expected_cudagraph_mode = "a \"quoted\" mode".into();
                p.sample_reasons.push(SampleReason::KvwarmRealKv);
                let mut out = String::new();
                p.write_canonical(&mut out);
                assert_eq!(out, generic(&p));
                seen += 1;
            }
        }
        assert!(seen > 50, "{seen} points");
    }
}
