//! The executor: device pools, kernels, and a run of a [`GpuProgram`] step by step, each step
//! timed with CUDA events, each read checked against what the program says the block holds.
//!
//! A run has three phases, so that timings hold device work only:
//! 1. *prepare*: validate, upload every op's arguments, compute what every read must return;
//! 2. *run*: per step an event before and after its ops; `BeginTimed`/`EndTimed` add events
//!    and host-clock readings (the host work inside a window, `HostWork` included);
//! 3. *check*: read the verification records back and turn mismatches into [`Violation`]s.
//!
//! The phases live in `prepare`, `run` (issuing through `launch` and `moe`) and `verify`;
//! `modules` builds the kernels, `bench` times single ops outside a program.

mod bench;
mod launch;
mod modules;
mod moe;
mod prepare;
mod run;
mod verify;

pub use bench::{decode_kv_bytes, median, CopyBenchResult, DecodeBenchResult};
pub use modules::{compile_modules, KernelResources};
pub use prepare::PreparedDecode;
pub use verify::{Violation, ViolationKind};

use crate::device::{compile, open_device_on, DeviceInfo};
use crate::error::GpuError;
use crate::ids::{BlockId, GroupId, PointId, ReqId};
use crate::kernels::{specialised, COMMON_KERNELS, SOURCE};
use crate::layout::{DeviceLayout, GroupKind};
use crate::lower::AttnKernel;
use crate::program::GpuProgram;
use cudarc::driver::{
    sys::CUfunction_attribute, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig,
};
use modules::{attn_kernels, load, AttnModule};
use moe::{max_moe_tokens, MoeDevice};
use std::collections::BTreeMap;
use std::sync::Arc;
use verify::check_records;

/// How a run behaves.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    /// Seed of the random queries.
    pub seed: u64,
    /// Keep every decode's output (and its queries) in the report, for reference checks.
    pub keep_outputs: bool,
    /// Zero every pool before the run (a plan replays from an empty cache).
    pub reset_pools: bool,
    /// Force the decode split length instead of the heuristic.
    pub split_tokens: Option<u32>,
    /// Time every launching op with its own pair of events ([`ExecReport::op_timings`]).
    /// The events cost host time, so step timings of such a run are not those of a plain one.
    pub time_ops: bool,
    /// Synchronise the stream before a window opens and after it closes, so a window starts
    /// on an idle device and [`PointTiming::wall_ns`] is its wall time (a benchmark's view).
    pub sync_windows: bool,
    /// Keep every SM busy this long right before the timed run, so that clocks that dropped
    /// while the host prepared the run are back up at step 0.
    pub warm_up_ms: u32,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            seed: 0x6b76_7369_6d00_0001,
            keep_outputs: false,
            reset_pools: true,
            split_tokens: None,
            time_ops: false,
            sync_windows: true,
            warm_up_ms: 0,
        }
    }
}

/// Device time of one step, and the host time spent issuing it.
#[derive(Clone, Debug, PartialEq)]
pub struct StepTiming {
    /// The program step.
    pub step: usize,
    /// Device time (ms).
    pub device_ms: f32,
    /// Host time issuing it (ns).
    pub host_ns: u64,
}

/// One measurement window.
#[derive(Clone, Debug, PartialEq)]
pub struct PointTiming {
    /// The point.
    pub point: PointId,
    /// First step of the window.
    pub step_begin: usize,
    /// Last step.
    pub step_end: usize,
    /// CUDA-event time between `BeginTimed` and `EndTimed`.
    pub device_ms: f32,
    /// Host clock between the two marks: issuing the window's work and its `HostWork`.
    pub host_ns: u64,
    /// With [`ExecOptions::sync_windows`]: host clock from the opening mark (taken on an idle
    /// device) until the device finished the window's work.
    pub wall_ns: Option<u64>,
}

/// Device time of one launching op (`ExecOptions::time_ops`).
#[derive(Clone, Debug, PartialEq)]
pub struct OpTiming {
    /// The program step.
    pub step: usize,
    /// Index in the step's op list. A run of consecutive `Prefill` ops is issued as one
    /// `write_kv` launch per group, timed at the run's first indices (one per group).
    pub op: usize,
    /// What it launched: `write_kv`, `decode`, `state_update`, `zero_blocks`, `copy_blocks`, `moe`.
    pub kind: &'static str,
    /// Device time (ms).
    pub device_ms: f32,
}

/// The output of one request's decode over one group.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeOutput {
    /// The program step.
    pub step: usize,
    /// The op.
    pub op: usize,
    /// The group.
    pub group: GroupId,
    /// The request.
    pub req: ReqId,
    /// Attention output, `[layer][q_head][dim]`.
    pub out: Vec<f32>,
    /// The bf16 queries it used, same layout.
    pub q_bits: Vec<u16>,
}

/// How a MoE op routed its tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoeRouting {
    /// The program step.
    pub step: usize,
    /// The op.
    pub op: usize,
    /// Tokens each expert got.
    pub tokens_per_expert: Vec<u32>,
}

/// What a run returns.
#[derive(Clone, Debug, Default)]
pub struct ExecReport {
    /// Per step.
    pub steps: Vec<StepTiming>,
    /// Per window.
    pub points: Vec<PointTiming>,
    /// Content violations.
    pub violations: Vec<Violation>,
    /// K/V rows and state rows whose content was checked.
    pub rows_verified: u64,
    /// Decode outputs (when kept).
    pub decode_outputs: Vec<DecodeOutput>,
    /// MoE routings.
    pub moe_routes: Vec<MoeRouting>,
    /// With `ExecOptions::time_ops`: every launching op's device time.
    pub op_timings: Vec<OpTiming>,
}

/// How an executor builds its kernels and waits for the device.
#[derive(Clone, Debug, Default)]
pub struct ExecutorOptions {
    /// Extra `#define` lines for the decode modules (tuning variants, e.g. `#define KV_L2_256`).
    pub attn_defines: String,
    /// Spin while synchronising (`CU_CTX_SCHED_SPIN`) instead of the driver's automatic
    /// choice, so the issuing thread stays hot across the long waits before timed windows.
    pub spin_wait: bool,
    /// Pipeline depth of the tensor-core latent kernel instead of the deepest that fits,
    /// rounded up to even (a tuning knob for the bandwidth benchmark).
    pub latent_stages: Option<u32>,
}

/// What an executor calls to keep in lock-step with others (`crate::ranks`).
pub trait StepSync {
    /// The device is idle and every op uploaded: the run is about to start.
    fn start(&mut self) -> Result<(), GpuError>;
    /// Step `step`'s work finished on the device.
    fn after_step(&mut self, step: usize) -> Result<(), GpuError>;
}

/// Runs programs over one layout on one device (device 0 unless built with `on_device`).
pub struct GpuExecutor {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    layout: DeviceLayout,
    pools: Vec<CudaSlice<u8>>,
    common: BTreeMap<&'static str, CudaFunction>,
    /// Decode kernels, one module per distinct shape.
    attn: BTreeMap<AttnKernel, AttnModule>,
    /// `ExecutorOptions::latent_stages`.
    latent_stages: Option<u32>,
    moe: Option<MoeDevice>,
    _modules: Vec<Arc<CudaModule>>,
}

impl GpuExecutor {
    /// Opens device 0, allocates and zeroes every pool, compiles the kernels.
    pub fn new(layout: DeviceLayout) -> Result<Self, GpuError> {
        Self::with_options(layout, &ExecutorOptions::default())
    }

    /// [`GpuExecutor::new`] with build options.
    pub fn with_options(layout: DeviceLayout, options: &ExecutorOptions) -> Result<Self, GpuError> {
        Self::on_device(0, layout, options)
    }

    /// [`GpuExecutor::with_options`] on device `ordinal`. Executors on one device share its
    /// primary context; each has its own stream, pools and modules.
    pub fn on_device(ordinal: usize, layout: DeviceLayout, options: &ExecutorOptions) -> Result<Self, GpuError> {
        let problems = layout.problems();
        if !problems.is_empty() {
            return Err(GpuError::InvalidLayout(problems));
        }
        let (ctx, info) = open_device_on(ordinal)?;
        if options.spin_wait {
            // The context is current on this thread (CudaContext::new binds it).
            cudarc::driver::result::ctx::set_flags(cudarc::driver::sys::CUctx_flags::CU_CTX_SCHED_SPIN)?;
        }
        // One stream, ordered by construction: cudarc's per-buffer event tracking is not needed.
        // SAFETY: every buffer below is used on `stream` only.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let (free, _) = ctx.mem_get_info()?;
        let need = layout.pool_bytes() + layout.moe.map_or(0, |m| m.weight_bytes());
        if need > free as u64 {
            return Err(GpuError::OutOfMemory {
                need_bytes: need,
                free_bytes: free as u64,
            });
        }
        let pools = layout
            .groups
            .iter()
            .map(|g| stream.alloc_zeros::<u8>(g.pool_bytes() as usize))
            .collect::<Result<Vec<_>, _>>()?;
        let mut modules = Vec::new();
        let mut common = BTreeMap::new();
        let cm = load(&ctx, compile("kvsim_common", SOURCE, false)?)?;
        for name in COMMON_KERNELS {
            common.insert(name, cm.load_function(name)?);
        }
        modules.push(cm);
        let mut attn = BTreeMap::new();
        for k in attn_kernels(&layout, options.latent_stages) {
            let name = k.module_name();
            let defines = format!("{}{}", k.defines(), options.attn_defines);
            let m = load(&ctx, compile(&name, &specialised(&defines), false)?)?;
            let f = m.load_function(k.function_name())?;
            let smem = k.dynamic_smem();
            if smem > 0 {
                // Opt in to more than the default 48 KiB of dynamic shared memory.
                f.set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )?;
            }
            let per_sm = f
                .occupancy_max_active_blocks_per_multiprocessor(k.threads(), smem as usize, None)?
                .max(1);
            attn.insert(
                k,
                AttnModule {
                    name,
                    module: m.clone(),
                    decode: f,
                    per_sm,
                },
            );
            modules.push(m);
        }
        let mut exec = GpuExecutor {
            ctx,
            stream,
            info,
            layout,
            pools,
            common,
            attn,
            latent_stages: options.latent_stages,
            moe: None,
            _modules: modules,
        };
        exec.init_moe()?;
        exec.stream.synchronize()?;
        Ok(exec)
    }

    /// The device this executor runs on.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The layout its pools were built for.
    pub fn layout(&self) -> &DeviceLayout {
        &self.layout
    }

    /// CTAs of decode kernel `k` resident on the whole device at once (what the split
    /// heuristic fills); `None` for a kernel this layout does not use.
    pub fn resident_ctas(&self, k: AttnKernel) -> Option<u64> {
        self.attn
            .get(&k)
            .map(|a| u64::from(self.info.sm_count) * u64::from(a.per_sm))
    }

    /// Zeroes every pool.
    pub fn reset_pools(&mut self) -> Result<(), GpuError> {
        for p in &mut self.pools {
            self.stream.memset_zeros(p)?;
        }
        Ok(())
    }

    /// Runs `program`: see the module doc for the phases.
    pub fn execute(&mut self, program: &GpuProgram, opts: &ExecOptions) -> Result<ExecReport, GpuError> {
        self.execute_synced(program, opts, None)
    }

    /// [`GpuExecutor::execute`] in lock-step with other executors: `sync.start()` once the
    /// device is ready, and after every step the stream is synchronised (the step's work is
    /// done) and `sync.after_step(step)` runs. Without `sync`, exactly `execute`.
    pub fn execute_synced(
        &mut self,
        program: &GpuProgram,
        opts: &ExecOptions,
        mut sync: Option<&mut dyn StepSync>,
    ) -> Result<ExecReport, GpuError> {
        let problems = program.problems();
        if !problems.is_empty() {
            return Err(GpuError::InvalidProgram(problems));
        }
        if program.layout != self.layout {
            return Err(GpuError::LayoutMismatch);
        }
        // 1. prepare
        let mut records = Vec::new();
        let mut moe_counts_words = 0usize;
        let prepared = self.prepare_steps(program, opts, &mut records, &mut moe_counts_words)?;
        let mut moe_scratch = self.moe_scratch(max_moe_tokens(program), moe_counts_words)?;
        let verify = self.new_records(records.len())?;
        self.ready_device(opts)?;
        if let Some(s) = sync.as_deref_mut() {
            s.start()?;
        }

        // 2. run
        let events = self.run_steps(&prepared, opts, &verify, &mut moe_scratch, sync)?;
        self.stream.synchronize()?;

        // 3. check
        let mut report = events.timings()?;
        let words = self.stream.clone_dtoh(&verify)?;
        let (violations, rows) = check_records(&records, &words, 1);
        report.violations = violations;
        report.rows_verified = rows;
        if opts.keep_outputs {
            report.decode_outputs = self.all_decode_outputs(&prepared)?;
        }
        if let Some(s) = &moe_scratch {
            report.moe_routes = self.moe_routes(s, &prepared)?;
        }
        Ok(report)
    }

    /// Reads a state block back (`[layer][head][state_dim]` f32; elements 0 and 1 are the digest).
    pub fn read_state_block(&self, group: GroupId, block: BlockId) -> Result<Vec<f32>, GpuError> {
        let g = &self.layout.groups[group.0 as usize];
        assert!(
            matches!(g.kind, GroupKind::Mamba { .. }),
            "state blocks live in state groups"
        );
        let bytes = g.block_bytes() as usize;
        let view = self.pools[group.0 as usize].slice(block.0 as usize * bytes..(block.0 as usize + 1) * bytes);
        let raw = self.stream.clone_dtoh(&view)?;
        Ok(raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

fn cfg(grid: (u32, u32, u32), block: u32, shared: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (block, 1, 1),
        shared_mem_bytes: shared,
    }
}

fn nonempty<T: Clone + Default>(v: Vec<T>) -> Vec<T> {
    if v.is_empty() {
        vec![T::default()]
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::GroupLayout;
    use crate::program::{DecodeOp, GpuOp};

    #[test]
    fn executor_runs_or_skips() {
        let layout = DeviceLayout {
            groups: vec![GroupLayout {
                kind: GroupKind::FullAttention,
                block_size_tokens: 16,
                layers: 1,
                kv_heads: 1,
                q_heads: 4,
                head_dim: 64,
                blocks_total: 4,
            }],
            moe: None,
        };
        if crate::device::skip_without_device("executor::executor_runs_or_skips") {
            return;
        }
        let mut exec = GpuExecutor::new(layout.clone()).expect("device present");
        let tokens: Vec<u32> = (0..40).map(|i| i * 11 + 3).collect();
        let table = vec![BlockId(1), BlockId(2), BlockId(3)];
        let program = GpuProgram {
            layout,
            steps: vec![crate::program::GpuStep {
                ops: vec![
                    GpuOp::Prefill(crate::program::PrefillOp {
                        req: ReqId(0),
                        group: GroupId(0),
                        start_pos: 0,
                        tokens: tokens.clone(),
                        block_table: table.clone(),
                    }),
                    GpuOp::DecodeAttention(DecodeOp {
                        seqs: vec![crate::program::DecodeSeq {
                            req: ReqId(0),
                            tokens,
                            tables: vec![crate::program::GroupTable {
                                group: GroupId(0),
                                blocks: table,
                            }],
                        }],
                    }),
                ],
            }],
        };
        let report = exec.execute(&program, &ExecOptions::default()).expect("runs");
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.rows_verified, 40);
    }
}
