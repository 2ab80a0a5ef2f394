//! CUDA-graph metadata of a grid point: the capture size that would serve it, the padding, and
//! the sample reasons that say why the coordinate is on the axis.
//!
//! Source: `spec/research/dynamo_fpm.md` §1.2 (`_bench_cudagraph_metadata`,
//! `expected_cudagraph_mode`).

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::point::SampleReason;

/// The mode name Dynamo writes when no capture size serves a point (§1.2).
pub const CUDAGRAPH_MODE_NONE: &str = "NONE";

/// Captures as Dynamo reads them: positive sizes only, sorted, deduplicated (§1.2).
pub fn normalize_capture_sizes(capture_sizes: &[u64]) -> Vec<u64> {
    let captures: BTreeSet<u64> = capture_sizes.iter().copied().filter(|&c| c > 0).collect();
    captures.into_iter().collect()
}

/// `(expected_capture_size, padding_tokens, reasons)` of dynamo_fpm.md §1.2.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CudagraphMetadata {
    /// Smallest capture ≥ n, if any.
    pub expected_capture_size: Option<u64>,
    /// `capture − n` when a capture exists.
    pub padding_tokens: Option<u64>,
    /// Cudagraph reasons (`capture`, `post_capture`, `cudagraph_disabled`).
    pub sample_reasons: Vec<SampleReason>,
}

/// Metadata of coordinate `n` (prefill: total new tokens; decode: batch size) on an axis whose
/// engine limit is `axis_limit`.
///
/// dynamo_fpm.md §1.2, reasons in this order: `capture` (n is a capture), `post_capture` (n > 1 and
/// n−1 is a capture), then either `cudagraph_disabled` (+ `geometric_axis` if n ≠ limit) when there
/// are no captures, or `eager_tail` (+ `geometric_tail` if n ≠ limit) when n exceeds the largest
/// capture; finally `engine_limit` when n == limit.
pub fn cudagraph_metadata(n: u64, capture_sizes: &[u64], axis_limit: u64) -> CudagraphMetadata {
    let captures = normalize_capture_sizes(capture_sizes);
    let expected_capture_size = captures.iter().copied().find(|&c| c >= n);
    let mut reasons = Vec::new();
    if captures.binary_search(&n).is_ok() {
        reasons.push(SampleReason::Capture);
    }
    if n > 1 && captures.binary_search(&(n - 1)).is_ok() {
        reasons.push(SampleReason::PostCapture);
    }
    match captures.last() {
        None => {
            reasons.push(SampleReason::CudagraphDisabled);
            if n != axis_limit {
                reasons.push(SampleReason::GeometricAxis);
            }
        }
        Some(&largest) if n > largest => {
            reasons.push(SampleReason::EagerTail);
            if n != axis_limit {
                reasons.push(SampleReason::GeometricTail);
            }
        }
        Some(_) => {}
    }
    if n == axis_limit {
        reasons.push(SampleReason::EngineLimit);
    }
    let padding_tokens = expected_capture_size.map(|capture| capture - n);
    debug_assert_eq!(expected_capture_size.is_some(), padding_tokens.is_some());
    CudagraphMetadata {
        expected_capture_size,
        padding_tokens,
        sample_reasons: reasons,
    }
}

/// `expected_cudagraph_mode` (§1.2): the phase's mode (prefill: mixed mode, decode: decode mode)
/// when a capture size exists, else `"NONE"`.
pub fn expected_cudagraph_mode(expected_capture_size: Option<u64>, phase_mode: &str) -> String {
    match expected_capture_size {
        Some(_) => phase_mode.to_string(),
        None => CUDAGRAPH_MODE_NONE.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SampleReason::*;

    fn meta(n: u64, captures: &[u64], limit: u64) -> (Option<u64>, Option<u64>, Vec<SampleReason>) {
        let m = cudagraph_metadata(n, captures, limit);
        (m.expected_capture_size, m.padding_tokens, m.sample_reasons)
    }

    #[test]
    fn captured_and_post_capture_points() {
        let caps = [8, 4, 2, 1, 4];
        assert_eq!(meta(1, &caps, 64), (Some(1), Some(0), vec![Capture]));
        // 2 is a capture and 1 is one too.
        assert_eq!(meta(2, &caps, 64), (Some(2), Some(0), vec![Capture, PostCapture]));
        assert_eq!(meta(4, &caps, 64), (Some(4), Some(0), vec![Capture]));
        // 5 pads up to 8; 4 is a capture → post_capture.
        assert_eq!(meta(5, &caps, 64), (Some(8), Some(3), vec![PostCapture]));
        assert_eq!(meta(3, &caps, 64), (Some(4), Some(1), vec![PostCapture]));
        assert_eq!(meta(6, &caps, 64), (Some(8), Some(2), vec![]));
    }

    #[test]
    fn eager_tail_points() {
        let caps = [1, 2, 4, 8];
        assert_eq!(
            meta(9, &caps, 64),
            (None, None, vec![PostCapture, EagerTail, GeometricTail])
        );
        assert_eq!(meta(16, &caps, 64), (None, None, vec![EagerTail, GeometricTail]));
        assert_eq!(meta(64, &caps, 64), (None, None, vec![EagerTail, EngineLimit]));
        // A capture at the limit is a capture and the engine limit.
        assert_eq!(meta(8, &caps, 8), (Some(8), Some(0), vec![Capture, EngineLimit]));
    }

    #[test]
    fn disabled_graphs() {
        assert_eq!(meta(32, &[], 100), (None, None, vec![CudagraphDisabled, GeometricAxis]));
        assert_eq!(meta(100, &[0], 100), (None, None, vec![CudagraphDisabled, EngineLimit]));
    }

    #[test]
    fn mode_follows_the_capture() {
        assert_eq!(expected_cudagraph_mode(Some(8), "FULL"), "FULL");
        assert_eq!(expected_cudagraph_mode(None, "FULL"), "NONE");
    }
}
