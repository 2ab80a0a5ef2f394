//! Axis helpers of the benchmark grid: geometric candidate axes, uniform sampling with retained
//! endpoints, the CUDA-graph-aware sample limit and exact balanced partitions.
//!
//! Source: `spec/research/dynamo_fpm.md` §1.2 (module-level helpers of
//! `instrumented_scheduler.py`: `_powers_of_two_up_to`, `_uniformly_limit_axis`,
//! `_limit_cudagraph_axis`, `_cudagraph_axis_points`, `_balanced_partition`).

use std::collections::BTreeSet;

use thiserror::Error;

/// A sample limit that the uniform sampler cannot honour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum AxisError {
    /// dynamo_fpm.md §1.2: `_uniformly_limit_axis` requires `max_samples ≥ 2`.
    #[error("uniform axis sample limit must be at least 2, got {max_samples}")]
    SampleLimitTooSmall {
        /// The limit given.
        max_samples: usize,
    },
}

/// Why an exact balanced partition does not exist (dynamo_fpm.md §1.2 `_balanced_partition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum PartitionError {
    /// No slots.
    #[error("partition count must be positive")]
    ZeroCount,
    /// A unit of 0.
    #[error("partition unit must be positive")]
    ZeroUnit,
    /// The total is not a multiple of the unit.
    #[error("partition total {total} is not a multiple of unit {unit}")]
    NotMultipleOfUnit {
        /// The total.
        total: u64,
        /// The unit.
        unit: u64,
    },
    /// The total cannot give every slot its minimum.
    #[error(
        "partition total of {total_units} units is below the minimum of {required_units} units \
         ({count} slots x {minimum_units})"
    )]
    BelowMinimum {
        /// The total, in units.
        total_units: u64,
        /// Units the minimum needs.
        required_units: u64,
        /// Slots.
        count: u64,
        /// Minimum units per slot.
        minimum_units: u64,
    },
}

/// 1, 2, 4, … ≤ `limit`; empty when `limit < 1` (dynamo_fpm.md §1.2 `_powers_of_two_up_to`).
pub fn powers_of_two_up_to(limit: u64) -> Vec<u64> {
    let mut values = Vec::new();
    let mut value: u64 = 1;
    while value <= limit {
        values.push(value);
        match value.checked_mul(2) {
            Some(next) => value = next,
            None => break,
        }
    }
    debug_assert!(values.iter().all(|&v| v <= limit));
    values
}

/// At most `max_samples` values of `values`, uniformly spread, both endpoints retained.
///
/// dynamo_fpm.md §1.2: returned unchanged when it already fits; otherwise sample `s` takes index
/// `floor((s·(n−1) + floor((max_samples−1)/2)) / (max_samples−1))`. `max_samples < 2` is an
/// error even when the list fits (the Python raises before the length check).
pub fn uniformly_limit_axis(values: &[u64], max_samples: usize) -> Result<Vec<u64>, AxisError> {
    if max_samples < 2 {
        return Err(AxisError::SampleLimitTooSmall { max_samples });
    }
    if values.len() <= max_samples {
        return Ok(values.to_vec());
    }
    let last_index = values.len() - 1;
    let intervals = max_samples - 1;
    let limited: Vec<u64> = (0..max_samples)
        .map(|sample| values[(sample * last_index + intervals / 2) / intervals])
        .collect();
    debug_assert_eq!(limited.first(), values.first());
    debug_assert_eq!(limited.last(), values.last());
    Ok(limited)
}

/// Limit a CUDA-graph-aware axis to `max_samples`, keeping a small eager tail whole.
///
/// dynamo_fpm.md §1.2 `_limit_cudagraph_axis`: a list that fits is returned as is. Values above the
/// largest capture form the eager tail. When the tail is non-empty and at most 20 % of all
/// candidates (`5·len(tail) ≤ len(all)`, inclusive, compared as integers), graph points exist and
/// the graph budget `max_samples − len(tail)` is ≥ 1, the tail is kept whole and the graph part is
/// uniformly limited to the budget (budget 1 → the first graph point only). Otherwise the whole
/// axis is uniformly limited.
pub fn limit_cudagraph_axis(values: &[u64], capture_sizes: &[u64], max_samples: usize) -> Result<Vec<u64>, AxisError> {
    if values.len() <= max_samples {
        return Ok(values.to_vec());
    }
    let Some(max_capture) = capture_sizes.iter().copied().filter(|&c| c >= 1).max() else {
        return uniformly_limit_axis(values, max_samples);
    };
    let graph_points: Vec<u64> = values.iter().copied().filter(|&v| v <= max_capture).collect();
    let eager_tail: Vec<u64> = values.iter().copied().filter(|&v| v > max_capture).collect();
    // Integer comparison keeps the inclusive 20 % boundary exact (§1.2).
    let protect_eager_tail = !eager_tail.is_empty() && eager_tail.len() * 5 <= values.len();
    let graph_budget = max_samples.saturating_sub(eager_tail.len());
    if !protect_eager_tail || graph_points.is_empty() || graph_budget < 1 {
        return uniformly_limit_axis(values, max_samples);
    }
    let mut limited = if graph_budget == 1 {
        vec![graph_points[0]]
    } else {
        uniformly_limit_axis(&graph_points, graph_budget)?
    };
    limited.extend_from_slice(&eager_tail);
    debug_assert!(limited.len() <= max_samples);
    Ok(limited)
}

/// Candidate points of a CUDA-graph-aware axis up to `limit`, sorted and deduplicated.
///
/// dynamo_fpm.md §1.2 `_cudagraph_axis_points`: no captures → powers of two up to `limit` plus
/// `limit`. Otherwise every capture `C ≤ limit`, plus `C+1` when `C < limit`; when the largest
/// configured capture is ≤ `limit`, the geometric eager tail `2·Cmax, 4·Cmax, …` strictly below
/// `limit`; always `limit` itself. `limit < 1` → empty.
pub fn cudagraph_axis_points(capture_sizes: &[u64], limit: u64) -> Vec<u64> {
    if limit < 1 {
        return Vec::new();
    }
    let configured: BTreeSet<u64> = capture_sizes.iter().copied().filter(|&c| c >= 1).collect();
    let Some(&largest_configured) = configured.last() else {
        let mut points: BTreeSet<u64> = powers_of_two_up_to(limit).into_iter().collect();
        points.insert(limit);
        return points.into_iter().collect();
    };
    let mut points = BTreeSet::new();
    for &capture in configured.iter().filter(|&&c| c <= limit) {
        points.insert(capture);
        if capture < limit {
            points.insert(capture + 1);
        }
    }
    if largest_configured <= limit {
        let mut value = largest_configured.checked_mul(2);
        while let Some(v) = value.filter(|&v| v < limit) {
            points.insert(v);
            value = v.checked_mul(2);
        }
    }
    points.insert(limit);
    debug_assert_eq!(points.last(), Some(&limit));
    points.into_iter().collect()
}

/// A balanced partition in closed form: `count` slots, the first `high_slots` hold `high()`,
/// the rest hold `base`. Lets feasibility checks price B requests in O(1) instead of O(B).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionShape {
    /// Slots.
    pub count: u64,
    /// The granularity.
    pub unit: u64,
    /// Value of the low slots (a multiple of `unit`, ≥ `minimum_units·unit`).
    pub base: u64,
    /// How many leading slots hold `base + unit`.
    pub high_slots: u64,
}

impl PartitionShape {
    /// dynamo_fpm.md §1.2 `_balanced_partition`: `total` must be a non-negative multiple of `unit`
    /// and ≥ `count·minimum_units·unit`; each slot gets `minimum + q` units and the first `r` one
    /// more, where `(q, r) = divmod(total/unit − count·minimum, count)`.
    pub fn new(total: u64, count: u64, unit: u64, minimum_units: u64) -> Result<Self, PartitionError> {
        if count < 1 {
            return Err(PartitionError::ZeroCount);
        }
        if unit < 1 {
            return Err(PartitionError::ZeroUnit);
        }
        // Floor division, then check nothing was rounded away.
        let total_units = total / unit;
        if total_units * unit != total {
            return Err(PartitionError::NotMultipleOfUnit { total, unit });
        }
        let required_units = count.saturating_mul(minimum_units);
        if total_units < required_units {
            return Err(PartitionError::BelowMinimum {
                total_units,
                required_units,
                count,
                minimum_units,
            });
        }
        let spare_units = total_units - required_units;
        let (quotient, remainder) = (spare_units / count, spare_units % count);
        // (minimum + q)·count ≤ total_units, so neither product below can overflow.
        let shape = PartitionShape {
            count,
            unit,
            base: (minimum_units + quotient) * unit,
            high_slots: remainder,
        };
        debug_assert!(shape.high_slots < shape.count);
        debug_assert_eq!(shape.base * shape.count + shape.high_slots * shape.unit, total);
        Ok(shape)
    }

    /// Value of the first `high_slots` slots.
    pub fn high(&self) -> u64 {
        self.base + self.unit
    }

    /// Value of slot `index` (`index < count`).
    pub fn value_at(&self, index: u64) -> u64 {
        assert!(index < self.count, "partition slot {index} out of {}", self.count);
        if index < self.high_slots {
            self.high()
        } else {
            self.base
        }
    }

    /// `(value, slots)` runs in slot order, empty runs omitted.
    pub fn runs(&self) -> Vec<(u64, u64)> {
        let mut runs = Vec::with_capacity(2);
        if self.high_slots > 0 {
            runs.push((self.high(), self.high_slots));
        }
        if self.count > self.high_slots {
            runs.push((self.base, self.count - self.high_slots));
        }
        runs
    }

    /// The partition as an explicit list (slot order).
    pub fn to_vec(&self) -> Vec<u64> {
        (0..self.count).map(|index| self.value_at(index)).collect()
    }
}

/// `total` split as evenly as possible into `count` multiples of `unit`, each at least
/// `minimum_units·unit`, larger slots first (dynamo_fpm.md §1.2 `_balanced_partition`; decode
/// contexts use unit 1, minimum 1). Infeasible input is a typed error, never a panic.
pub fn balanced_partition(total: u64, count: u64, unit: u64, minimum_units: u64) -> Result<Vec<u64>, PartitionError> {
    PartitionShape::new(total, count, unit, minimum_units).map(|shape| shape.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn powers_of_two_stop_at_the_limit() {
        assert_eq!(powers_of_two_up_to(0), Vec::<u64>::new());
        assert_eq!(powers_of_two_up_to(1), vec![1]);
        assert_eq!(powers_of_two_up_to(100), vec![1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(powers_of_two_up_to(64), vec![1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(powers_of_two_up_to(u64::MAX).len(), 64);
    }

    #[test]
    fn uniform_limit_uses_the_rounded_index_formula() {
        // n = 10, m = 4: intervals 3, half 1 → indices (0+1)/3=0, (9+1)/3=3, (18+1)/3=6, (27+1)/3=9.
        let values: Vec<u64> = (0..10).map(|v| v * 10).collect();
        assert_eq!(uniformly_limit_axis(&values, 4).unwrap(), vec![0, 30, 60, 90]);
        // n = 6, m = 4: indices 0, (5+1)/3=2, (10+1)/3=3, (15+1)/3=5.
        assert_eq!(uniformly_limit_axis(&[1, 2, 3, 4, 5, 6], 4).unwrap(), vec![1, 3, 4, 6]);
        // n = 5, m = 3: intervals 2, half 1 → 0, (4+1)/2=2, (8+1)/2=4.
        assert_eq!(uniformly_limit_axis(&[7, 8, 9, 10, 11], 3).unwrap(), vec![7, 9, 11]);
        // m = 2 keeps exactly the endpoints.
        assert_eq!(uniformly_limit_axis(&[3, 5, 8, 13], 2).unwrap(), vec![3, 13]);
    }

    #[test]
    fn uniform_limit_returns_a_fitting_list_unchanged_and_rejects_tiny_limits() {
        assert_eq!(uniformly_limit_axis(&[1, 2, 3], 3).unwrap(), vec![1, 2, 3]);
        assert_eq!(uniformly_limit_axis(&[], 2).unwrap(), Vec::<u64>::new());
        assert_eq!(
            uniformly_limit_axis(&[1], 1),
            Err(AxisError::SampleLimitTooSmall { max_samples: 1 })
        );
        assert_eq!(
            uniformly_limit_axis(&[1, 2, 3], 0),
            Err(AxisError::SampleLimitTooSmall { max_samples: 0 })
        );
    }

    #[test]
    fn axis_points_without_captures_are_powers_of_two_plus_the_limit() {
        assert_eq!(cudagraph_axis_points(&[], 100), vec![1, 2, 4, 8, 16, 32, 64, 100]);
        assert_eq!(cudagraph_axis_points(&[], 8), vec![1, 2, 4, 8]);
        assert_eq!(cudagraph_axis_points(&[0], 3), vec![1, 2, 3]);
        assert_eq!(cudagraph_axis_points(&[1, 2], 0), Vec::<u64>::new());
    }

    #[test]
    fn axis_points_with_captures_add_boundaries_and_a_geometric_tail() {
        // Captures 1,2,4,8 and their +1 boundaries, then 16, 32 (< 64), then 64.
        assert_eq!(
            cudagraph_axis_points(&[8, 4, 2, 1], 64),
            vec![1, 2, 3, 4, 5, 8, 9, 16, 32, 64]
        );
        // The largest capture is above the limit: no tail; captures above the limit drop out.
        assert_eq!(cudagraph_axis_points(&[1, 2, 4, 8], 6), vec![1, 2, 3, 4, 5, 6]);
        // A capture equal to the limit gets no +1 and the tail starts at 16, not below 8.
        assert_eq!(cudagraph_axis_points(&[1, 2, 4, 8], 8), vec![1, 2, 3, 4, 5, 8]);
        // Tail is strictly below the limit: 2·4 = 8 = limit is not a tail point (limit is).
        assert_eq!(cudagraph_axis_points(&[4], 8), vec![4, 5, 8]);
    }

    #[test]
    fn cudagraph_limit_spreads_the_whole_axis_when_the_tail_is_large() {
        let axis = cudagraph_axis_points(&[1, 2, 4, 8], 64);
        // Tail {9,16,32,64}: 5·4 = 20 > 10 → whole-axis uniform, n=10, m=6: indices 0,2,4,5,7,9.
        assert_eq!(
            limit_cudagraph_axis(&axis, &[1, 2, 4, 8], 6).unwrap(),
            vec![1, 3, 5, 8, 16, 64]
        );
    }

    #[test]
    fn cudagraph_limit_keeps_a_small_tail_whole() {
        let captures: Vec<u64> = powers_of_two_up_to(512);
        let axis = cudagraph_axis_points(&captures, 1024);
        assert_eq!(axis.len(), 20);
        // Tail {513, 1024}: 5·2 = 10 ≤ 20; budget 8 − 2 = 6 over 18 graph points:
        // intervals 5, half 2 → indices 0, 3, 7, 10, 14, 17.
        assert_eq!(
            limit_cudagraph_axis(&axis, &captures, 8).unwrap(),
            vec![1, 4, 16, 33, 129, 512, 513, 1024]
        );
    }

    #[test]
    fn cudagraph_limit_twenty_percent_boundary_is_inclusive() {
        let ten: Vec<u64> = (1..=10).collect();
        // Tail {9, 10} is exactly 20 % of 10 → protected; graph budget 3 over 1..=8 → 1, 5, 8.
        assert_eq!(limit_cudagraph_axis(&ten, &[8], 5).unwrap(), vec![1, 5, 8, 9, 10]);
        // Tail {9, 10, 11} is 27 % of 11 → whole-axis uniform, n=11, m=5: 0, 3, 5, 8, 10.
        let eleven: Vec<u64> = (1..=11).collect();
        assert_eq!(limit_cudagraph_axis(&eleven, &[8], 5).unwrap(), vec![1, 4, 6, 9, 11]);
    }

    #[test]
    fn cudagraph_limit_budget_rules() {
        let ten: Vec<u64> = (1..=10).collect();
        // Budget 1 → only the first graph point before the tail.
        assert_eq!(limit_cudagraph_axis(&ten, &[8], 3).unwrap(), vec![1, 9, 10]);
        // Budget 0 → whole-axis uniform with m = 2: the endpoints.
        assert_eq!(limit_cudagraph_axis(&ten, &[8], 2).unwrap(), vec![1, 10]);
        // No graph points at all (every value above the capture) → whole-axis uniform.
        let high: Vec<u64> = (20..30).collect();
        assert_eq!(limit_cudagraph_axis(&high, &[8], 2).unwrap(), vec![20, 29]);
        // No captures → whole-axis uniform.
        assert_eq!(limit_cudagraph_axis(&ten, &[], 2).unwrap(), vec![1, 10]);
        // Fits → unchanged, even with a limit the uniform sampler would reject.
        assert_eq!(limit_cudagraph_axis(&[5], &[8], 1).unwrap(), vec![5]);
        assert_eq!(
            limit_cudagraph_axis(&ten, &[], 1),
            Err(AxisError::SampleLimitTooSmall { max_samples: 1 })
        );
    }

    #[test]
    fn balanced_partition_worked_examples() {
        assert_eq!(balanced_partition(10, 3, 1, 0).unwrap(), vec![4, 3, 3]);
        // 10 tokens in units of 2: 5 units over 3 slots → 2,2,1 units.
        assert_eq!(balanced_partition(10, 3, 2, 0).unwrap(), vec![4, 4, 2]);
        // minimum 1: 10 − 4 = 6 spare, q=1 r=2 → 3,3,2,2.
        assert_eq!(balanced_partition(10, 4, 1, 1).unwrap(), vec![3, 3, 2, 2]);
        // Decode test numbers (§10.1): 128/2 → [64,64]; 48/3 → [16,16,16]; 4/4 → ones.
        assert_eq!(balanced_partition(128, 2, 1, 1).unwrap(), vec![64, 64]);
        assert_eq!(balanced_partition(48, 3, 1, 1).unwrap(), vec![16, 16, 16]);
        assert_eq!(balanced_partition(4, 4, 1, 1).unwrap(), vec![1, 1, 1, 1]);
        assert_eq!(balanced_partition(0, 3, 4, 0).unwrap(), vec![0, 0, 0]);
    }

    #[test]
    fn balanced_partition_rejects_infeasible_input() {
        assert_eq!(balanced_partition(5, 0, 1, 0), Err(PartitionError::ZeroCount));
        assert_eq!(balanced_partition(5, 2, 0, 0), Err(PartitionError::ZeroUnit));
        assert_eq!(
            balanced_partition(7, 2, 2, 0),
            Err(PartitionError::NotMultipleOfUnit { total: 7, unit: 2 })
        );
        assert_eq!(
            balanced_partition(3, 4, 1, 1),
            Err(PartitionError::BelowMinimum {
                total_units: 3,
                required_units: 4,
                count: 4,
                minimum_units: 1,
            })
        );
        // A huge minimum saturates instead of overflowing.
        assert!(matches!(
            balanced_partition(8, u64::MAX, 1, 2),
            Err(PartitionError::BelowMinimum { .. })
        ));
    }

    #[test]
    fn partition_shape_runs_match_the_list() {
        let shape = PartitionShape::new(10, 4, 1, 1).unwrap();
        assert_eq!(shape.base, 2);
        assert_eq!(shape.high_slots, 2);
        assert_eq!(shape.runs(), vec![(3, 2), (2, 2)]);
        let even = PartitionShape::new(12, 4, 1, 1).unwrap();
        assert_eq!(even.runs(), vec![(3, 4)]);
    }

    proptest! {
        #[test]
        fn balanced_partition_sums_to_total_and_is_balanced(
            count in 1u64..64,
            unit in 1u64..16,
            minimum_units in 0u64..4,
            extra_units in 0u64..2_000,
        ) {
            let total = (count * minimum_units + extra_units) * unit;
            let parts = balanced_partition(total, count, unit, minimum_units).unwrap();
            prop_assert_eq!(parts.len() as u64, count);
            prop_assert_eq!(parts.iter().sum::<u64>(), total);
            let max = *parts.iter().max().unwrap();
            let min = *parts.iter().min().unwrap();
            prop_assert!(max - min <= unit);
            prop_assert!(parts.iter().all(|p| p % unit == 0 && *p >= minimum_units * unit));
            prop_assert!(parts.windows(2).all(|w| w[0] >= w[1]));
            let shape = PartitionShape::new(total, count, unit, minimum_units).unwrap();
            let expanded: Vec<u64> = shape
                .runs()
                .into_iter()
                .flat_map(|(value, slots)| (0..slots).map(move |_| value))
                .collect();
            prop_assert_eq!(expanded, parts);
        }

        #[test]
        fn balanced_partition_never_panics(
            total in 0u64..10_000,
            count in 0u64..100,
            unit in 0u64..8,
            minimum_units in 0u64..8,
        ) {
            if let Ok(parts) = balanced_partition(total, count, unit, minimum_units) {
                prop_assert_eq!(parts.iter().sum::<u64>(), total);
            }
        }

        #[test]
        fn uniform_limit_keeps_endpoints_and_order(
            mut values in proptest::collection::vec(0u64..100_000, 1..300),
            max_samples in 2usize..80,
        ) {
            values.sort_unstable();
            values.dedup();
            let limited = uniformly_limit_axis(&values, max_samples).unwrap();
            prop_assert_eq!(limited.len(), values.len().min(max_samples));
            prop_assert_eq!(limited.first(), values.first());
            prop_assert_eq!(limited.last(), values.last());
            // Strictly increasing: a subsequence of a strictly increasing list, no repeats.
            prop_assert!(limited.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(limited.iter().all(|v| values.binary_search(v).is_ok()));
        }

        #[test]
        fn axis_points_are_sorted_bounded_and_end_at_the_limit(
            captures in proptest::collection::vec(0u64..600, 0..12),
            limit in 1u64..5_000,
        ) {
            let points = cudagraph_axis_points(&captures, limit);
            prop_assert!(points.windows(2).all(|w| w[0] < w[1]));
            prop_assert_eq!(points.last(), Some(&limit));
            prop_assert!(points.iter().all(|&p| (1..=limit).contains(&p)));
            for &c in captures.iter().filter(|&&c| (1..=limit).contains(&c)) {
                prop_assert!(points.contains(&c));
            }
        }

        #[test]
        fn cudagraph_limit_is_a_bounded_subsequence_keeping_endpoints(
            captures in proptest::collection::vec(1u64..600, 0..12),
            limit in 1u64..5_000,
            max_samples in 2usize..40,
        ) {
            let axis = cudagraph_axis_points(&captures, limit);
            let limited = limit_cudagraph_axis(&axis, &captures, max_samples).unwrap();
            prop_assert!(limited.len() <= max_samples);
            prop_assert!(limited.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(limited.iter().all(|v| axis.binary_search(v).is_ok()));
            prop_assert_eq!(limited.first(), axis.first());
            prop_assert_eq!(limited.last(), axis.last());
        }
    }
}
