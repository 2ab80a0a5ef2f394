//! A benchmark point as Dynamo writes it (`asdict(BenchmarkPoint)`), its reason vocabulary, and
//! the stable key kvsim uses to find a point again after the grid is reordered or renumbered.
//!
//! Source: `spec/research/dynamo_fpm.md` §6.1 (point fields), §5.4 (`sample_reasons`
//! vocabulary), §1.6–§1.7 (replicas, numbering); the seed PR "warm Inkling convolution caches
//! with native prefills" (plan lookups must survive the grid's public renumbering).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `point_type` (dynamo_fpm.md §6.1): `"prefill"` or `"decode"`. Also names a missing phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PointType {
    /// A prefill point.
    Prefill,
    /// A decode point.
    Decode,
}

impl PointType {
    /// The wire name (`"prefill"` / `"decode"`).
    pub fn as_str(self) -> &'static str {
        match self {
            PointType::Prefill => "prefill",
            PointType::Decode => "decode",
        }
    }
}

/// One `sample_reasons` entry; the full vocabulary of dynamo_fpm.md §5.4, wire names in
/// snake_case. The grid itself only emits the cudagraph reasons and `eager_warmup`; the rest are
/// stamped at run time by the measurement (§1.9–§1.10) or come from manifests (§1.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SampleReason {
    /// `explicit`: from a manifest.
    Explicit,
    /// `imbalance`: an imbalanced split.
    Imbalance,
    /// `capture`: at a CUDA-graph capture size.
    Capture,
    /// `post_capture`: just above a capture size.
    PostCapture,
    /// `cudagraph_disabled`: no capture applies.
    CudagraphDisabled,
    /// `geometric_axis`: on the geometric axis.
    GeometricAxis,
    /// `eager_tail`: the eager tail.
    EagerTail,
    /// `geometric_tail`: the geometric tail.
    GeometricTail,
    /// `engine_limit`: at an engine limit.
    EngineLimit,
    /// `eager_warmup`: a discarded eager warm-up replica (§1.6).
    EagerWarmup,
    /// `context_clamped`: its context was clamped to the model length.
    ContextClamped,
    /// `kvwarm_real_kv`: measured on real KV.
    KvwarmRealKv,
    /// `kvwarm_fake_fallback`: fell back to synthetic KV.
    KvwarmFakeFallback,
    /// `prefill_real_seed`: a prefill with a real seeded prefix.
    PrefillRealSeed,
    /// `prefill_fake_prefix`: a prefill with a synthetic prefix.
    PrefillFakePrefix,
    /// `giant_fake_off_by_batch`: a giant point off by its batch.
    GiantFakeOffByBatch,
}

/// `asdict(BenchmarkPoint)` (dynamo_fpm.md §6.1). Field order is Dynamo's dataclass order; the
/// grid digest sorts keys, so the order only matters for readability of artifacts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkPoint {
    /// `prefill` or `decode`.
    pub point_type: PointType,
    /// 0 until numbered (§1.7 step 5); then real points 1..N, replicas N+1…
    pub benchmark_id: u64,
    /// Prefill tokens.
    pub total_prefill_tokens: u64,
    /// Decode points: the steady-step coordinate `Σ max(1, ctx−1) + B` (§1.5 step 4).
    pub total_kv_read_tokens: u64,
    /// Requests in the batch.
    pub batch_size: u64,
    /// The phase's CUDA-graph mode when a capture size exists, else `"NONE"` (§1.2).
    pub expected_cudagraph_mode: String,
    /// The capture size expected, if any.
    pub expected_capture_size: Option<u64>,
    /// Padding up to it.
    pub padding_tokens: Option<u64>,
    /// Why the point is in the grid (§5.4).
    pub sample_reasons: Vec<SampleReason>,
    /// Manifest-only imbalanced split (`{axis, high_count, fraction}`); never set by the
    /// generated grid. Kept as raw JSON because the manifest schema was not verified (§0).
    #[schemars(with = "Option<crate::fpm::artifact_schema::Partition>")]
    pub partition: Option<serde_json::Value>,
    /// Manifest-only explicit per-request `[new_tokens, kv_read_tokens]`.
    pub rows: Option<Vec<[u64; 2]>>,
}

impl BenchmarkPoint {
    /// The point's canonical JSON (`canonical_json` of `asdict`: keys sorted, compact),
    /// written field by field: the grid digest hashes every point of every planned grid.
    pub fn write_canonical(&self, out: &mut String) {
        use std::fmt::Write;
        let text = |s: &str| serde_json::Value::from(s).to_string();
        let opt = |v: Option<u64>| v.map_or("null".to_string(), |n| n.to_string());
        let reasons: Vec<String> = self
            .sample_reasons
            .iter()
            .map(|r| serde_json::to_string(r).expect("reasons serialize"))
            .collect();
        let partition = self
            .partition
            .as_ref()
            .map_or("null".to_string(), super::json::canonical_json);
        let rows = self.rows.as_ref().map_or("null".to_string(), |rows| {
            let r: Vec<String> = rows.iter().map(|[a, b]| format!("[{a},{b}]")).collect();
            format!("[{}]", r.join(","))
        });
        let _ = write!(
            out,
            "{{\"batch_size\":{},\"benchmark_id\":{},\"expected_capture_size\":{},\"expected_cudagraph_mode\":{},\"padding_tokens\":{},\"partition\":{partition},\"point_type\":{},\"rows\":{rows},\"sample_reasons\":[{}],\"total_kv_read_tokens\":{},\"total_prefill_tokens\":{}}}",
            self.batch_size,
            self.benchmark_id,
            opt(self.expected_capture_size),
            text(&self.expected_cudagraph_mode),
            opt(self.padding_tokens),
            text(self.point_type.as_str()),
            reasons.join(","),
            self.total_kv_read_tokens,
            self.total_prefill_tokens,
        );
    }

    /// Whether this is a discarded eager warm-up replica (§1.6: tagged `eager_warmup`).
    pub fn is_eager_warmup(&self) -> bool {
        self.sample_reasons.contains(&SampleReason::EagerWarmup)
    }

    /// The physical coordinate, independent of id, reasons and cudagraph metadata.
    pub fn coordinate(&self) -> PointCoordinate {
        PointCoordinate {
            point_type: self.point_type,
            batch_size: self.batch_size,
            total_prefill_tokens: self.total_prefill_tokens,
            total_kv_read_tokens: self.total_kv_read_tokens,
            partition: self.partition.as_ref().map(super::json::canonical_json),
            rows: self.rows.clone(),
        }
    }
}

/// What a point measures: the fields aisimulate hashes into its `point_key` (dynamo_fpm.md §5.5:
/// point_type, batch_size, total_prefill_tokens, total_kv_read_tokens, partition, rows), with
/// `partition` held as canonical JSON so the coordinate is totally ordered.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PointCoordinate {
    /// `prefill` or `decode`.
    pub point_type: PointType,
    /// Requests.
    pub batch_size: u64,
    /// Prefill tokens.
    pub total_prefill_tokens: u64,
    /// KV read tokens.
    pub total_kv_read_tokens: u64,
    /// The manifest partition, as canonical JSON.
    pub partition: Option<String>,
    /// Explicit per-request rows.
    pub rows: Option<Vec<[u64; 2]>>,
}

/// A stable identity for one *execution* of a grid point, assigned when the grid is assembled
/// (before any reorder or numbering) and never changed afterwards.
///
/// DECISION: the key is content-derived — the coordinate, whether the entry is an eager replica,
/// and an occurrence counter among entries with the same (coordinate, replica) pair in assembly
/// order. The research (§4, seed PR) only says "plan lookups survive the grid's public
/// renumbering" and that replicas and repeated coordinates each get their own requests; a
/// positional ordinal would be equally stable but would change for every later point if one point
/// were dropped before assembly, while this key does not. `benchmark_id` is deliberately absent.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PointKey {
    /// The physical coordinate.
    pub coordinate: PointCoordinate,
    /// Whether it is an eager warm-up replica.
    pub eager_warmup: bool,
    /// 0 for the first entry with this (coordinate, eager_warmup), 1 for the next, …
    pub occurrence: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_point() -> BenchmarkPoint {
        BenchmarkPoint {
            point_type: PointType::Decode,
            benchmark_id: 1,
            total_prefill_tokens: 0,
            total_kv_read_tokens: 262_144,
            batch_size: 64,
            expected_cudagraph_mode: "FULL".to_string(),
            expected_capture_size: Some(64),
            padding_tokens: Some(0),
            sample_reasons: vec![SampleReason::Capture, SampleReason::KvwarmRealKv],
            partition: None,
            rows: None,
        }
    }

    #[test]
    fn point_serializes_with_dynamo_field_names() {
        // The §6.8 example point, field for field.
        let json = serde_json::to_value(decode_point()).unwrap();
        let expected = serde_json::json!({
            "point_type": "decode", "benchmark_id": 1, "total_prefill_tokens": 0,
            "total_kv_read_tokens": 262144, "batch_size": 64, "expected_cudagraph_mode": "FULL",
            "expected_capture_size": 64, "padding_tokens": 0,
            "sample_reasons": ["capture", "kvwarm_real_kv"], "partition": null, "rows": null
        });
        assert_eq!(json, expected);
        let back: BenchmarkPoint = serde_json::from_value(expected).unwrap();
        assert_eq!(back, decode_point());
    }

    #[test]
    fn every_reason_round_trips_under_its_research_name() {
        let names = [
            "explicit",
            "imbalance",
            "capture",
            "post_capture",
            "cudagraph_disabled",
            "geometric_axis",
            "eager_tail",
            "geometric_tail",
            "engine_limit",
            "eager_warmup",
            "context_clamped",
            "kvwarm_real_kv",
            "kvwarm_fake_fallback",
            "prefill_real_seed",
            "prefill_fake_prefix",
            "giant_fake_off_by_batch",
        ];
        for name in names {
            let reason: SampleReason = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(serde_json::to_value(reason).unwrap(), serde_json::json!(name));
        }
    }

    #[test]
    fn unknown_point_fields_are_rejected() {
        let mut json = serde_json::to_value(decode_point()).unwrap();
        json["surprise"] = serde_json::json!(1);
        assert!(serde_json::from_value::<BenchmarkPoint>(json).is_err());
    }

    #[test]
    fn coordinate_ignores_id_reasons_and_metadata() {
        let a = decode_point();
        let mut b = decode_point();
        b.benchmark_id = 99;
        b.sample_reasons = vec![SampleReason::EagerWarmup];
        b.expected_capture_size = None;
        assert_eq!(a.coordinate(), b.coordinate());
        assert!(b.is_eager_warmup());
        assert!(!a.is_eager_warmup());
        b.total_kv_read_tokens += 1;
        assert_ne!(a.coordinate(), b.coordinate());
    }

    #[test]
    fn coordinate_partition_is_canonical_json() {
        let mut a = decode_point();
        a.partition = Some(serde_json::json!({"high_count": 1, "axis": "kv", "fraction": 0.5}));
        assert_eq!(
            a.coordinate().partition.as_deref(),
            Some(r#"{"axis":"kv","fraction":0.5,"high_count":1}"#)
        );
    }
}
