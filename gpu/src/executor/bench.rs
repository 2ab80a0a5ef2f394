//! Benchmarks outside a program: one decode op or a device-to-device copy timed many times.

use super::prepare::PreparedDecode;
use super::verify::{check_records, Violation};
use super::{DecodeOutput, ExecOptions, GpuExecutor};
use crate::error::GpuError;
use crate::layout::GroupLayout;
use crate::lower::SplitPlan;
use crate::program::{DecodeOp, GpuOp, GpuProgram};
use cudarc::driver::sys::CUevent_flags;

/// Result of timing one prepared decode op many times.
#[derive(Clone, Debug)]
pub struct DecodeBenchResult {
    /// Each launch's time (ms).
    pub times_ms: Vec<f32>,
    /// Their median (ms).
    pub median_ms: f32,
    /// K/V bytes read per launch.
    pub kv_bytes: u64,
    /// The split of each group.
    pub splits: Vec<SplitPlan>,
    /// Content violations.
    pub violations: Vec<Violation>,
    /// Rows verified.
    pub rows_verified: u64,
    /// With `keep_outputs`: every request's output of the last launch.
    pub outputs: Vec<DecodeOutput>,
    /// Median per launch of `iters` launches queued between one event pair (the launches'
    /// own start and tail costs, without an event pair's per launch).
    pub batch_median_ms: f32,
    /// Diagnostic builds with LAT_DIAG_TIMELINE only: per-CTA stamps of the last launch
    /// (8 words per CTA, see attn_latent_mma.cu).
    pub timeline: Vec<u64>,
}

/// Result of timing a device-to-device copy.
#[derive(Clone, Debug)]
pub struct CopyBenchResult {
    /// Bytes copied.
    pub bytes: u64,
    /// Each copy's time (ms).
    pub times_ms: Vec<f32>,
    /// Their median (ms).
    pub median_ms: f32,
    /// Per copy, `iters` copies between one event pair (as `DecodeBenchResult::batch_median_ms`).
    pub batch_median_ms: f32,
}

impl CopyBenchResult {
    /// Bytes read plus bytes written per second, in GB/s (1e9).
    pub fn gbps(&self) -> f64 {
        Self::rate(self.bytes, self.median_ms)
    }

    /// The same, from the batched time.
    pub fn batch_gbps(&self) -> f64 {
        Self::rate(self.bytes, self.batch_median_ms)
    }

    fn rate(bytes: u64, ms: f32) -> f64 {
        2.0 * bytes as f64 / (f64::from(ms) * 1e-3) / 1e9
    }
}

/// Median of a sample (for even lengths the mean of the two middle values: the upper one alone
/// made a two-run replay report its slower run); 0 for none.
pub fn median(xs: &[f32]) -> f32 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Bytes a decode of `group` reads for requests with these context lengths.
pub fn decode_kv_bytes(group: &GroupLayout, ctx_tokens: &[u32]) -> u64 {
    ctx_tokens
        .iter()
        .map(|&c| {
            let r = group.kind.attend_range(c);
            u64::from(r.end - r.start) * group.kv_bytes_per_position()
        })
        .sum()
}

impl GpuExecutor {
    /// Times one decode op `warmup + iters` times over the current pool content (each launch
    /// verified), with CUDA events around each launch.
    pub fn bench_decode(
        &mut self,
        op: &DecodeOp,
        warmup: u32,
        iters: u32,
        opts: &ExecOptions,
    ) -> Result<DecodeBenchResult, GpuError> {
        let program = GpuProgram {
            layout: self.layout.clone(),
            steps: vec![crate::program::GpuStep {
                ops: vec![GpuOp::DecodeAttention(op.clone())],
            }],
        };
        let problems = program.problems();
        if !problems.is_empty() {
            return Err(GpuError::InvalidProgram(problems));
        }
        let mut records = Vec::new();
        let prepared = self.prepare_decode_at(op, 0, 0, opts, &mut records)?;
        let verify = self.new_records(records.len())?;
        // Stamps of an earlier, larger launch must not show in this one's.
        if let Some(mut g) = self.timeline_global(&prepared) {
            self.stream.memset_zeros(&mut g)?;
        }
        let times_ms =
            self.timed_pairs(warmup + iters, 1, || self.launch_decode(&prepared, &verify))?[warmup as usize..].to_vec();
        let timeline = match self.timeline_global(&prepared) {
            Some(g) => self
                .stream
                .clone_dtoh(&g)?
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
            None => Vec::new(),
        };
        let batches = self.timed_pairs(3, iters, || self.launch_decode(&prepared, &verify))?;
        let batch_median_ms = median(&batches) / iters as f32;
        let words = self.stream.clone_dtoh(&verify)?;
        let runs = u64::from(warmup + iters) + 3 * u64::from(iters);
        let (violations, rows_verified) = check_records(&records, &words, runs);
        let outputs = if opts.keep_outputs {
            self.decode_outputs(&prepared, 0, 0)?
        } else {
            Vec::new()
        };
        Ok(DecodeBenchResult {
            outputs,
            median_ms: median(&times_ms),
            times_ms,
            kv_bytes: prepared.kv_bytes(),
            splits: prepared.splits(),
            violations,
            rows_verified,
            batch_median_ms,
            timeline,
        })
    }

    /// Queues `pairs` event pairs back to back, `per_pair` calls of `launch` inside each, with
    /// one synchronisation at the end; each pair's elapsed ms. With one call per pair, a pair
    /// brackets that launch alone (its opening event completes when the previous launch ends),
    /// not the host's launch latency into an idle stream, and the device never idles between
    /// launches.
    fn timed_pairs(
        &self,
        pairs: u32,
        per_pair: u32,
        mut launch: impl FnMut() -> Result<(), GpuError>,
    ) -> Result<Vec<f32>, GpuError> {
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let mut events = Vec::with_capacity(pairs as usize);
        for _ in 0..pairs {
            let e0 = self.ctx.new_event(timing)?;
            let e1 = self.ctx.new_event(timing)?;
            e0.record(&self.stream)?;
            for _ in 0..per_pair {
                launch()?;
            }
            e1.record(&self.stream)?;
            events.push((e0, e1));
        }
        self.stream.synchronize()?;
        events.iter().map(|(e0, e1)| Ok(e0.elapsed_ms(e1)?)).collect()
    }

    /// The LAT_DIAG_TIMELINE stamps (`lat_timeline`) of the first launch's module, in builds
    /// that have them.
    fn timeline_global(&self, d: &PreparedDecode) -> Option<cudarc::driver::CudaViewMut<'_, u8>> {
        let l = d.launches.first()?;
        self.attn[&l.kernel]
            .module
            .get_global("lat_timeline", &self.stream)
            .ok()
    }

    /// Times a device-to-device copy of `bytes` (`cuMemcpyDtoDAsync`), `warmup + iters` times.
    pub fn bench_copy(&self, bytes: usize, warmup: u32, iters: u32) -> Result<CopyBenchResult, GpuError> {
        let words = bytes / 4;
        let mut src = self.stream.alloc_zeros::<u32>(words)?;
        let mut dst = self.stream.alloc_zeros::<u32>(words)?;
        // Non-zero source content (a byte pattern), so nothing is special-cased.
        {
            use cudarc::driver::DevicePtrMut;
            let (ptr, _guard) = src.device_ptr_mut(&self.stream);
            // SAFETY: ptr covers words * 4 bytes of a live allocation on this stream.
            unsafe { cudarc::driver::result::memset_d8_async(ptr, 0x5a, words * 4, self.stream.cu_stream()) }?;
        }
        // Timed as bench_decode times its launches.
        let mut copy = || Ok(self.stream.memcpy_dtod(&src, &mut dst)?);
        let times_ms = self.timed_pairs(warmup + iters, 1, &mut copy)?[warmup as usize..].to_vec();
        let batch_median_ms = median(&self.timed_pairs(3, iters, &mut copy)?) / iters as f32;
        Ok(CopyBenchResult {
            bytes: (words * 4) as u64,
            median_ms: median(&times_ms),
            times_ms,
            batch_median_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::GroupKind;

    #[test]
    fn median_and_bytes() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[160.0, 245.0]), 202.5);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        let g = GroupLayout {
            kind: GroupKind::SlidingWindow { sliding_window: 100 },
            block_size_tokens: 16,
            layers: 1,
            kv_heads: 8,
            q_heads: 32,
            head_dim: 128,
            blocks_total: 4,
        };
        assert_eq!(decode_kv_bytes(&g, &[50, 4096]), (50 + 100) * 8 * 128 * 2 * 2);
        let c = CopyBenchResult {
            bytes: 1_000_000_000,
            times_ms: vec![],
            median_ms: 1000.0,
            batch_median_ms: 500.0,
        };
        assert!((c.gbps() - 2.0).abs() < 1e-9);
        assert!((c.batch_gbps() - 4.0).abs() < 1e-9);
    }
}
