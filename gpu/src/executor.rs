//! The executor: device pools, kernels, and a run of a [`GpuProgram`] step by step, each step
//! timed with CUDA events, each read checked against what the program says the block holds.
//!
//! A run has three phases, so that timings hold device work only:
//! 1. *prepare*: validate, upload every op's arguments, compute what every read must return;
//! 2. *run*: per step an event before and after its ops; `BeginTimed`/`EndTimed` add events
//!    and host-clock readings (the host work inside a window, `HostWork` included);
//! 3. *check*: read the verification records back and turn mismatches into [`Violation`]s.

use crate::content::{query_bits, StateDigest};
use crate::device::{compile, open_device, CompiledModule, DeviceInfo};
use crate::error::GpuError;
use crate::ids::{BlockId, GroupId, PointId, ReqId};
use crate::kernels::{specialised, COMMON_KERNELS, RECORD_WORDS, SOURCE};
use crate::layout::{DeviceLayout, GroupKind, GroupLayout};
use crate::lower::{aligned_lo, choose_split, decode_expect, state_expect, AttnKernel, DecodeExpect, SplitPlan};
use crate::program::{DecodeOp, GpuOp, GpuProgram, MoeOp};
use cudarc::driver::{
    sys::{CUevent_flags, CUfunction_attribute},
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

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
    pub step: usize,
    pub device_ms: f32,
    pub host_ns: u64,
}

/// One measurement window.
#[derive(Clone, Debug, PartialEq)]
pub struct PointTiming {
    pub point: PointId,
    pub step_begin: usize,
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
    pub step: usize,
    /// Index in the step's op list. A run of consecutive `Prefill` ops is issued as one
    /// `write_kv` launch per group, timed at the run's first indices (one per group).
    pub op: usize,
    /// What it launched: `write_kv`, `decode`, `state_update`, `zero_blocks`, `copy_blocks`, `moe`.
    pub kind: &'static str,
    pub device_ms: f32,
}

/// The output of one request's decode over one group.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeOutput {
    pub step: usize,
    pub op: usize,
    pub group: GroupId,
    pub req: ReqId,
    /// Attention output, `[layer][q_head][dim]`.
    pub out: Vec<f32>,
    /// The bf16 queries it used, same layout.
    pub q_bits: Vec<u16>,
}

/// How a MoE op routed its tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoeRouting {
    pub step: usize,
    pub op: usize,
    pub tokens_per_expert: Vec<u32>,
}

/// A read that did not return what the program says the block holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub step: usize,
    pub op: usize,
    pub req: ReqId,
    pub group: GroupId,
    /// The block holding the first mismatched position (the state block for state reads).
    pub block: Option<BlockId>,
    /// The first mismatched position.
    pub position: Option<u32>,
    pub kind: ViolationKind,
}

/// What went wrong with a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViolationKind {
    /// K/V rows whose tag is not the one of the planned token at that position.
    KvContent { mismatched_reads: u32, expected_token: u32 },
    /// The kernel read another number of rows than the attended range holds.
    ReadCount { expected: u64, actual: u64 },
    /// Every row matched its tag, but the sum of the tags read differs (rows read twice or
    /// from outside the range).
    Checksum { expected: u64, actual: u64 },
    /// State rows whose digest is not the one of the planned history.
    StateDigest { mismatched_rows: u32, expected_tokens: u32 },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {} op {} {} {}", self.step, self.op, self.req, self.group)?;
        if let Some(b) = self.block {
            write!(f, " block {b}")?;
        }
        if let Some(p) = self.position {
            write!(f, " pos {p}")?;
        }
        match &self.kind {
            ViolationKind::KvContent {
                mismatched_reads,
                expected_token,
            } => {
                write!(
                    f,
                    ": K/V content mismatch ({mismatched_reads} reads; expected token {expected_token})"
                )
            }
            ViolationKind::ReadCount { expected, actual } => write!(f, ": read {actual} rows, expected {expected}"),
            ViolationKind::Checksum { expected, actual } => {
                write!(f, ": tag checksum {actual:#x}, expected {expected:#x}")
            }
            ViolationKind::StateDigest {
                mismatched_rows,
                expected_tokens,
            } => write!(
                f,
                ": state digest mismatch in {mismatched_rows} rows (expected a state of {expected_tokens} tokens)"
            ),
        }
    }
}

/// What a run returns.
#[derive(Clone, Debug, Default)]
pub struct ExecReport {
    pub steps: Vec<StepTiming>,
    pub points: Vec<PointTiming>,
    pub violations: Vec<Violation>,
    /// K/V rows and state rows whose content was checked.
    pub rows_verified: u64,
    pub decode_outputs: Vec<DecodeOutput>,
    pub moe_routes: Vec<MoeRouting>,
    /// With `ExecOptions::time_ops`: every launching op's device time.
    pub op_timings: Vec<OpTiming>,
}

/// Registers, local memory (spills) and static shared memory of one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelResources {
    pub name: String,
    pub regs: i32,
    pub local_bytes: i32,
    pub shared_bytes: i32,
}

/// Compiles every module `layout` needs (no device needed, only NVRTC): the common module and
/// one decode module per distinct [`AttnKernel`]. Returns `(name, module)` pairs.
/// `extra_defines` go into every decode module, as [`ExecutorOptions::attn_defines`] do.
pub fn compile_modules(
    layout: &DeviceLayout,
    extra_defines: &str,
    verbose: bool,
) -> Result<Vec<(String, CompiledModule)>, GpuError> {
    let mut out = vec![("kvsim_common".to_string(), compile("kvsim_common", SOURCE, verbose)?)];
    for k in attn_kernels(layout, None) {
        let name = k.module_name();
        out.push((
            name.clone(),
            compile(&name, &specialised(&format!("{}{extra_defines}", k.defines())), verbose)?,
        ));
    }
    Ok(out)
}

fn attn_kernels(layout: &DeviceLayout, latent_stages: Option<u32>) -> Vec<AttnKernel> {
    let mut ks: Vec<AttnKernel> = layout
        .groups
        .iter()
        .filter_map(|g| kernel_for(g, latent_stages))
        .collect();
    ks.sort();
    ks.dedup();
    ks
}

/// The decode kernel of group `g`, with the latent kernel's stage count overridden.
fn kernel_for(g: &GroupLayout, latent_stages: Option<u32>) -> Option<AttnKernel> {
    match (AttnKernel::for_group(g)?, latent_stages) {
        (
            AttnKernel::LatentMma {
                latent_dim, head_tile, ..
            },
            Some(stages),
        ) => Some(AttnKernel::LatentMma {
            latent_dim,
            head_tile,
            stages: stages.max(2).div_ceil(2) * 2, // even: see lower::latent_mma_stages
        }),
        (k, _) => Some(k),
    }
}

/// One compiled decode module.
struct AttnModule {
    name: String,
    /// Kept for the diagnostic `lat_timeline` global (LAT_DIAG_TIMELINE builds).
    module: Arc<CudaModule>,
    decode: CudaFunction,
    /// CTAs of `decode` resident per SM.
    per_sm: u32,
}

struct MoeDevice {
    router: CudaSlice<u16>,
    w1: CudaSlice<u16>,
    w2: CudaSlice<u16>,
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

/// Runs programs over one layout on device 0.
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

struct AttnLaunch {
    group: usize,
    kernel: AttnKernel,
    reqs: Vec<ReqId>,
    tables: CudaSlice<u32>,
    table_stride: i32,
    lo: CudaSlice<i32>,
    hi: CudaSlice<i32>,
    tags: CudaSlice<u64>,
    tag_stride: i32,
    q: CudaSlice<u16>,
    q_host: Vec<u16>,
    part_o: CudaSlice<f32>,
    part_ml: CudaSlice<f32>,
    out: CudaSlice<f32>,
    /// One counter per (request, layer x kv head, head tile): finds the CTA that combines splits.
    counters: CudaSlice<u32>,
    record_base: usize,
    split: SplitPlan,
    kv_bytes: u64,
}

/// A decode op with its arguments on the device.
pub struct PreparedDecode {
    launches: Vec<AttnLaunch>,
}

impl PreparedDecode {
    /// K/V bytes one launch of the op reads (attended positions x bytes per position).
    pub fn kv_bytes(&self) -> u64 {
        self.launches.iter().map(|l| l.kv_bytes).sum()
    }

    /// The split each group's launch uses.
    pub fn splits(&self) -> Vec<SplitPlan> {
        self.launches.iter().map(|l| l.split).collect()
    }
}

enum Prepared {
    /// The K/V writes of a run of consecutive `Prefill` ops into one group, one launch.
    WriteKv {
        group: usize,
        tokens: CudaSlice<u32>,
        positions: CudaSlice<u32>,
        blocks: CudaSlice<u32>,
        ntok: u32,
    },
    /// A `Prefill` whose writes an earlier `WriteKv` of its run issues.
    Merged,
    Decode(PreparedDecode),
    State {
        group: usize,
        tokens: CudaSlice<u32>,
        ntok: i32,
        src: u32,
        dst: u32,
        digest: StateDigest,
        record: usize,
    },
    Zero {
        group: usize,
        blocks: CudaSlice<u32>,
        n: u32,
    },
    Copy {
        group: usize,
        pairs: CudaSlice<u32>,
        n: u32,
    },
    Moe {
        tokens: CudaSlice<u32>,
        ntok: u32,
        top_k: u32,
        counts_off: usize,
        step: usize,
        op: usize,
        /// Hidden-state routing: per token the offset of its row in the output of the step's
        /// latest decode (first launch), and the row length; `None` routes on token ids.
        hidden: Option<(CudaSlice<u32>, i32)>,
    },
    Begin(PointId),
    End(PointId),
    HostWork(u64),
}

impl Prepared {
    /// What the op launches, for [`OpTiming`]; `None` for ops that launch nothing.
    fn kind(&self) -> Option<&'static str> {
        Some(match self {
            Prepared::WriteKv { .. } => "write_kv",
            Prepared::Decode(_) => "decode",
            Prepared::State { .. } => "state_update",
            Prepared::Zero { .. } => "zero_blocks",
            Prepared::Copy { .. } => "copy_blocks",
            Prepared::Moe { .. } => "moe",
            Prepared::Merged | Prepared::Begin(_) | Prepared::End(_) | Prepared::HostWork(_) => return None,
        })
    }
}

struct RecordExpect {
    step: usize,
    op: usize,
    req: ReqId,
    group: GroupId,
    expect: DecodeExpect,
    what: RecordWhat,
}

enum RecordWhat {
    Decode {
        table: Vec<BlockId>,
        block_size: u32,
        tokens: Vec<u32>,
    },
    State {
        src_block: BlockId,
        digest: StateDigest,
    },
}

struct MoeScratch {
    x: CudaSlice<f32>,
    hb: CudaSlice<f32>,
    y: CudaSlice<f32>,
    lists: CudaSlice<u32>,
    wlist: CudaSlice<f32>,
    counts: CudaSlice<u32>,
}

/// Result of timing one prepared decode op many times.
#[derive(Clone, Debug)]
pub struct DecodeBenchResult {
    pub times_ms: Vec<f32>,
    pub median_ms: f32,
    pub kv_bytes: u64,
    pub splits: Vec<SplitPlan>,
    pub violations: Vec<Violation>,
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
    pub bytes: u64,
    pub times_ms: Vec<f32>,
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

/// Median of a sample (upper median for even lengths); 0 for none.
pub fn median(xs: &[f32]) -> f32 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
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

impl GpuExecutor {
    /// Opens device 0, allocates and zeroes every pool, compiles the kernels.
    pub fn new(layout: DeviceLayout) -> Result<Self, GpuError> {
        Self::with_options(layout, &ExecutorOptions::default())
    }

    /// [`GpuExecutor::new`] with build options.
    pub fn with_options(layout: DeviceLayout, options: &ExecutorOptions) -> Result<Self, GpuError> {
        let problems = layout.problems();
        if !problems.is_empty() {
            return Err(GpuError::InvalidLayout(problems));
        }
        let (ctx, info) = open_device()?;
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

    /// Resource usage of every kernel (registers, spills, shared memory).
    pub fn kernel_resources(&self) -> Result<Vec<KernelResources>, GpuError> {
        let one = |name: String, f: &CudaFunction| -> Result<KernelResources, GpuError> {
            Ok(KernelResources {
                name,
                regs: f.num_regs()?,
                local_bytes: f.local_size_bytes()?,
                shared_bytes: f.shared_size_bytes()?,
            })
        };
        let mut out = Vec::new();
        for (name, f) in &self.common {
            out.push(one((*name).to_string(), f)?);
        }
        for AttnModule { name, decode: f, .. } in self.attn.values() {
            out.push(one(name.clone(), f)?);
        }
        Ok(out)
    }

    fn init_moe(&mut self) -> Result<(), GpuError> {
        let Some(m) = self.layout.moe else {
            return Ok(());
        };
        let (h, f, e) = (m.hidden as usize, m.ffn as usize, m.experts as usize);
        let router = self.stream.alloc_zeros::<u16>(e * h)?;
        let w1 = self.stream.alloc_zeros::<u16>(e * f * h)?;
        let w2 = self.stream.alloc_zeros::<u16>(e * h * f)?;
        let init = &self.common["moe_init"];
        for (salt, w) in [(1u32, &router), (2, &w1), (3, &w2)] {
            let n = w.len() as u64;
            // SAFETY: moe_init(u16*, u64, u32) writes n elements of w.
            unsafe {
                self.stream
                    .launch_builder(init)
                    .arg(w)
                    .arg(&n)
                    .arg(&salt)
                    .launch(cfg((1024, 1, 1), 256, 0))
            }?;
        }
        self.moe = Some(MoeDevice { router, w1, w2 });
        Ok(())
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
        let mut prepared: Vec<Vec<Prepared>> = Vec::with_capacity(program.steps.len());
        for (si, step) in program.steps.iter().enumerate() {
            let mut ops = Vec::with_capacity(step.ops.len());
            let mut last_decode: Option<(usize, &DecodeOp)> = None;
            let mut oi = 0;
            while oi < step.ops.len() {
                let run = crate::program::prefill_run(&step.ops[oi..]);
                if run > 0 {
                    ops.extend(self.prepare_writes(&step.ops[oi..oi + run])?);
                    oi += run;
                    continue;
                }
                let mut p = self.prepare_op(&step.ops[oi], si, oi, opts, &mut records, &mut moe_counts_words)?;
                match (&step.ops[oi], &mut p) {
                    (GpuOp::DecodeAttention(d), _) => last_decode = Some((ops.len(), d)),
                    (GpuOp::Moe(m), Prepared::Moe { hidden, .. }) if !m.hidden.is_empty() => {
                        if let Some((at, d)) = last_decode {
                            if let Prepared::Decode(pd) = &ops[at] {
                                *hidden = self.hidden_rows(pd, d, m)?;
                            }
                        }
                    }
                    _ => {}
                }
                ops.push(p);
                oi += 1;
            }
            prepared.push(ops);
        }
        let max_moe_tokens = program
            .steps
            .iter()
            .flat_map(|s| &s.ops)
            .filter_map(|op| match op {
                GpuOp::Moe(MoeOp { tokens, .. }) => Some(tokens.len()),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let mut moe_scratch = self.moe_scratch(max_moe_tokens, moe_counts_words)?;
        let verify = self.new_records(records.len())?;
        if opts.reset_pools {
            self.reset_pools()?;
        }
        if opts.warm_up_ms > 0 {
            let ns = u64::from(opts.warm_up_ms) * 1_000_000;
            // SAFETY: spin(u64) reads nothing and writes nothing.
            unsafe {
                self.stream.launch_builder(&self.common["spin"]).arg(&ns).launch(cfg(
                    (4 * self.info.sm_count, 1, 1),
                    128,
                    0,
                ))
            }?;
        }
        self.stream.synchronize()?;

        // 2. run
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let mut step_events: Vec<(CudaEvent, CudaEvent, u64)> = Vec::with_capacity(prepared.len());
        let mut open: Option<(PointId, usize, CudaEvent, Instant)> = None;
        type Window = (PointId, usize, usize, CudaEvent, CudaEvent, u64, Option<u64>);
        let mut points: Vec<Window> = Vec::new();
        let mut op_events: Vec<(usize, usize, &'static str, CudaEvent, CudaEvent)> = Vec::new();
        for (si, ops) in prepared.iter().enumerate() {
            let host_start = Instant::now();
            let e0 = self.ctx.new_event(timing)?;
            e0.record(&self.stream)?;
            let mut last_out: Option<&CudaSlice<f32>> = None;
            for (oi, p) in ops.iter().enumerate() {
                match p {
                    Prepared::Begin(point) => {
                        if opts.sync_windows {
                            self.stream.synchronize()?;
                        }
                        let e = self.ctx.new_event(timing)?;
                        e.record(&self.stream)?;
                        open = Some((*point, si, e, Instant::now()));
                    }
                    Prepared::End(point) => {
                        let e = self.ctx.new_event(timing)?;
                        e.record(&self.stream)?;
                        let (begin_point, begin_step, b, t) =
                            open.take().expect("validated: EndTimed follows its BeginTimed");
                        assert_eq!(begin_point, *point, "validated: windows do not nest");
                        let host_ns = t.elapsed().as_nanos() as u64;
                        let wall_ns = if opts.sync_windows {
                            self.stream.synchronize()?;
                            Some(t.elapsed().as_nanos() as u64)
                        } else {
                            None
                        };
                        points.push((*point, begin_step, si, b, e, host_ns, wall_ns));
                    }
                    other => {
                        let kind = other.kind();
                        let timed = opts.time_ops && kind.is_some();
                        let before = if timed {
                            let e = self.ctx.new_event(timing)?;
                            e.record(&self.stream)?;
                            Some(e)
                        } else {
                            None
                        };
                        self.launch(other, &verify, moe_scratch.as_mut(), last_out)?;
                        if let (Some(b), Some(kind)) = (before, kind) {
                            let e = self.ctx.new_event(timing)?;
                            e.record(&self.stream)?;
                            op_events.push((si, oi, kind, b, e));
                        }
                        if let Prepared::Decode(d) = other {
                            last_out = d.launches.first().map(|l| &l.out);
                        }
                    }
                }
            }
            let e1 = self.ctx.new_event(timing)?;
            e1.record(&self.stream)?;
            step_events.push((e0, e1, host_start.elapsed().as_nanos() as u64));
        }
        self.stream.synchronize()?;

        // 3. check
        let mut report = ExecReport::default();
        for (i, (e0, e1, host_ns)) in step_events.iter().enumerate() {
            report.steps.push(StepTiming {
                step: i,
                device_ms: e0.elapsed_ms(e1)?,
                host_ns: *host_ns,
            });
        }
        for (point, step_begin, step_end, b, e, host_ns, wall_ns) in &points {
            report.points.push(PointTiming {
                point: *point,
                step_begin: *step_begin,
                step_end: *step_end,
                device_ms: b.elapsed_ms(e)?,
                host_ns: *host_ns,
                wall_ns: *wall_ns,
            });
        }
        for (step, op, kind, b, e) in &op_events {
            report.op_timings.push(OpTiming {
                step: *step,
                op: *op,
                kind,
                device_ms: b.elapsed_ms(e)?,
            });
        }
        let words = self.stream.clone_dtoh(&verify)?;
        let (violations, rows) = check_records(&records, &words, 1);
        report.violations = violations;
        report.rows_verified = rows;
        if opts.keep_outputs {
            for (si, ops) in prepared.iter().enumerate() {
                for (oi, p) in ops.iter().enumerate() {
                    if let Prepared::Decode(d) = p {
                        report.decode_outputs.extend(self.decode_outputs(d, si, oi)?);
                    }
                }
            }
        }
        if let Some(s) = &moe_scratch {
            let counts = self.stream.clone_dtoh(&s.counts)?;
            let experts = self.layout.moe.map_or(0, |m| m.experts as usize);
            for ops in &prepared {
                for p in ops {
                    if let Prepared::Moe {
                        counts_off, step, op, ..
                    } = p
                    {
                        report.moe_routes.push(MoeRouting {
                            step: *step,
                            op: *op,
                            tokens_per_expert: counts[*counts_off..*counts_off + experts].to_vec(),
                        });
                    }
                }
            }
        }
        Ok(report)
    }

    fn new_records(&self, n: usize) -> Result<CudaSlice<u32>, GpuError> {
        let mut init = vec![0u32; n.max(1) * RECORD_WORDS];
        for r in init.chunks_mut(RECORD_WORDS) {
            r[1] = u32::MAX;
        }
        Ok(self.stream.clone_htod(&init)?)
    }

    fn moe_scratch(&self, max_tokens: usize, counts_words: usize) -> Result<Option<MoeScratch>, GpuError> {
        let Some(m) = self.layout.moe else {
            return Ok(None);
        };
        if max_tokens == 0 {
            return Ok(None);
        }
        let (h, f, e) = (m.hidden as usize, m.ffn as usize, m.experts as usize);
        Ok(Some(MoeScratch {
            x: self.stream.alloc_zeros(max_tokens * h)?,
            hb: self.stream.alloc_zeros(e * max_tokens * f)?,
            y: self.stream.alloc_zeros(max_tokens * h)?,
            lists: self.stream.alloc_zeros(e * max_tokens)?,
            wlist: self.stream.alloc_zeros(e * max_tokens)?,
            counts: self.stream.alloc_zeros(counts_words.max(1))?,
        }))
    }

    fn upload<T: DeviceRepr + Clone + Default>(&self, v: Vec<T>) -> Result<CudaSlice<T>, GpuError> {
        Ok(self.stream.clone_htod(&nonempty(v))?)
    }

    fn prepare_op(
        &self,
        op: &GpuOp,
        step: usize,
        opi: usize,
        opts: &ExecOptions,
        records: &mut Vec<RecordExpect>,
        moe_counts_words: &mut usize,
    ) -> Result<Prepared, GpuError> {
        Ok(match op {
            GpuOp::Prefill(_) => self
                .prepare_writes(std::slice::from_ref(op))?
                .pop()
                .expect("one prefill gives one write"),
            GpuOp::DecodeAttention(d) => Prepared::Decode(self.prepare_decode_at(d, step, opi, opts, records)?),
            GpuOp::StateUpdate(u) => {
                let g = &self.layout.groups[u.group.0 as usize];
                let (digest, expect) = state_expect(g, &u.history);
                records.push(RecordExpect {
                    step,
                    op: opi,
                    req: u.req,
                    group: u.group,
                    expect,
                    what: RecordWhat::State {
                        src_block: u.src_block,
                        digest,
                    },
                });
                Prepared::State {
                    group: u.group.0 as usize,
                    tokens: self.upload(u.tokens.clone())?,
                    ntok: u.tokens.len() as i32,
                    src: u.src_block.0,
                    dst: u.dst_block.0,
                    digest,
                    record: records.len() - 1,
                }
            }
            GpuOp::ZeroBlocks { group, blocks } => Prepared::Zero {
                group: group.0 as usize,
                blocks: self.upload(blocks.iter().map(|b| b.0).collect())?,
                n: blocks.len() as u32,
            },
            GpuOp::CopyBlocks { group, copies } => Prepared::Copy {
                group: group.0 as usize,
                pairs: self.upload(copies.iter().flat_map(|c| [c.src.0, c.dst.0]).collect())?,
                n: copies.len() as u32,
            },
            GpuOp::Moe(m) => {
                let experts = self.layout.moe.map_or(0, |l| l.experts as usize);
                let counts_off = *moe_counts_words;
                *moe_counts_words += experts;
                Prepared::Moe {
                    tokens: self.upload(m.tokens.clone())?,
                    ntok: m.tokens.len() as u32,
                    top_k: m.top_k,
                    counts_off,
                    step,
                    op: opi,
                    hidden: None,
                }
            }
            GpuOp::BeginTimed { point } => Prepared::Begin(*point),
            GpuOp::EndTimed { point } => Prepared::End(*point),
            GpuOp::HostWork { nanos } => Prepared::HostWork(*nanos),
        })
    }

    /// One [`Prepared::WriteKv`] per group a run of consecutive `Prefill` ops writes (in order
    /// of first appearance), then [`Prepared::Merged`] for the rest: as many entries as ops.
    fn prepare_writes(&self, run: &[GpuOp]) -> Result<Vec<Prepared>, GpuError> {
        // (group, tokens, positions, blocks) per group, in order of first appearance.
        type Rows = (usize, Vec<u32>, Vec<u32>, Vec<u32>);
        let mut per_group: Vec<Rows> = Vec::new();
        for op in run {
            let GpuOp::Prefill(p) = op else {
                unreachable!("a run of prefills")
            };
            let group = p.group.0 as usize;
            let bs = self.layout.groups[group].block_size_tokens;
            let i = match per_group.iter().position(|e| e.0 == group) {
                Some(i) => i,
                None => {
                    per_group.push((group, Vec::new(), Vec::new(), Vec::new()));
                    per_group.len() - 1
                }
            };
            let e = &mut per_group[i];
            for (k, &t) in p.tokens.iter().enumerate() {
                let pos = p.start_pos + k as u32;
                e.1.push(t);
                e.2.push(pos);
                e.3.push(p.block_table[(pos / bs) as usize].0);
            }
        }
        let mut out = Vec::with_capacity(run.len());
        for (group, tokens, positions, blocks) in per_group {
            out.push(Prepared::WriteKv {
                group,
                ntok: tokens.len() as u32,
                tokens: self.upload(tokens)?,
                positions: self.upload(positions)?,
                blocks: self.upload(blocks)?,
            });
        }
        while out.len() < run.len() {
            out.push(Prepared::Merged);
        }
        Ok(out)
    }

    fn prepare_decode_at(
        &self,
        d: &DecodeOp,
        step: usize,
        opi: usize,
        opts: &ExecOptions,
        records: &mut Vec<RecordExpect>,
    ) -> Result<PreparedDecode, GpuError> {
        let mut groups: Vec<GroupId> = d.seqs.iter().flat_map(|s| s.tables.iter().map(|t| t.group)).collect();
        groups.sort();
        groups.dedup();
        let mut launches = Vec::new();
        for gid in groups {
            let g = &self.layout.groups[gid.0 as usize];
            let kernel = kernel_for(g, self.latent_stages).expect("validated: decode reads attention groups only");
            let seqs: Vec<_> = d.seqs.iter().filter_map(|s| s.table(gid).map(|t| (s, t))).collect();
            let table_stride = seqs.iter().map(|(_, t)| t.blocks.len()).max().unwrap_or(1).max(1);
            let tag_stride = seqs.iter().map(|(s, _)| s.tokens.len()).max().unwrap_or(1).max(1);
            let mut tables = vec![0u32; seqs.len() * table_stride];
            let mut tags = vec![0u64; seqs.len() * tag_stride];
            let (mut lo, mut hi) = (Vec::new(), Vec::new());
            let (layers, qh, dim) = (g.layers as usize, g.q_heads as usize, g.head_dim as usize);
            let mut q_host = Vec::with_capacity(seqs.len() * layers * qh * dim);
            let record_base = records.len();
            let mut max_span = 0;
            let mut kv_bytes = 0;
            for (i, (s, t)) in seqs.iter().enumerate() {
                for (j, b) in t.blocks.iter().enumerate() {
                    tables[i * table_stride + j] = b.0;
                }
                let range = g.kind.attend_range(s.ctx_tokens());
                for p in range.clone() {
                    tags[i * tag_stride + p as usize] = crate::content::packed_tag(s.tokens[p as usize], p);
                }
                max_span = max_span.max(range.end - aligned_lo(range.start));
                kv_bytes += u64::from(range.end - range.start) * g.kv_bytes_per_position();
                lo.push(range.start as i32);
                hi.push(range.end as i32);
                let salt = ((step as u32) << 16) ^ ((opi as u32) << 8) ^ gid.0;
                for l in 0..layers as u32 {
                    for h in 0..qh as u32 {
                        for x in 0..dim as u32 {
                            q_host.push(query_bits(opts.seed, salt, s.req.0, l, h, x));
                        }
                    }
                }
                records.push(RecordExpect {
                    step,
                    op: opi,
                    req: s.req,
                    group: gid,
                    expect: decode_expect(g, &s.tokens),
                    what: RecordWhat::Decode {
                        table: t.blocks.clone(),
                        block_size: g.block_size_tokens,
                        tokens: s.tokens.clone(),
                    },
                });
            }
            let head_tiles = g.gqa_group() / kernel.head_tile();
            let ctas_per_split = (seqs.len() as u64) * u64::from(g.layers * g.kv_heads * head_tiles);
            let per_sm = self.attn.get(&kernel).map_or(1, |a| a.per_sm);
            let resident = u64::from(self.info.sm_count) * u64::from(per_sm);
            let split = choose_split(max_span, ctas_per_split, resident, opts.split_tokens);
            let rows = seqs.len() * layers * qh;
            let nsplit = split.nsplit as usize;
            launches.push(AttnLaunch {
                group: gid.0 as usize,
                kernel,
                reqs: seqs.iter().map(|(s, _)| s.req).collect(),
                tables: self.upload(tables)?,
                table_stride: table_stride as i32,
                lo: self.upload(lo)?,
                hi: self.upload(hi)?,
                tags: self.upload(tags)?,
                tag_stride: tag_stride as i32,
                q: self.upload(q_host.clone())?,
                q_host: if opts.keep_outputs { q_host } else { Vec::new() },
                part_o: self.stream.alloc_zeros(rows * nsplit * dim)?,
                part_ml: self.stream.alloc_zeros(rows * nsplit * 2)?,
                out: self.stream.alloc_zeros(rows * dim)?,
                counters: self
                    .stream
                    .alloc_zeros((seqs.len() * (g.layers * g.kv_heads * head_tiles) as usize).max(1))?,
                record_base,
                split,
                kv_bytes,
            });
        }
        Ok(PreparedDecode { launches })
    }

    fn launch_decode(&self, d: &PreparedDecode, verify: &CudaSlice<u32>) -> Result<(), GpuError> {
        for l in &d.launches {
            let g = &self.layout.groups[l.group];
            let module = &self.attn[&l.kernel];
            let head_tiles = g.gqa_group() / l.kernel.head_tile();
            let nseq = l.reqs.len() as u32;
            let rec = verify.slice(l.record_base * RECORD_WORDS..);
            let (layers, kv_heads, group) = (g.layers as i32, g.kv_heads as i32, g.gqa_group() as i32);
            let (bs, split_tokens, nsplit) = (
                g.block_size_tokens as i32,
                l.split.split_tokens as i32,
                l.split.nsplit as i32,
            );
            let scale_log2 = std::f32::consts::LOG2_E / (g.head_dim as f32).sqrt();
            let grid = (l.split.nsplit * head_tiles, nseq, g.layers * g.kv_heads);
            // SAFETY: argument list matches every attn_* kernel; every index stays inside the
            // buffers sized in prepare_decode_at (tables, tags, q, partials) and the pool (block
            // ids checked by validation).
            unsafe {
                self.stream
                    .launch_builder(&module.decode)
                    .arg(&self.pools[l.group])
                    .arg(&l.tables)
                    .arg(&l.table_stride)
                    .arg(&l.lo)
                    .arg(&l.hi)
                    .arg(&l.tags)
                    .arg(&l.tag_stride)
                    .arg(&l.q)
                    .arg(&l.part_o)
                    .arg(&l.part_ml)
                    .arg(&l.out)
                    .arg(&l.counters)
                    .arg(&rec)
                    .arg(&layers)
                    .arg(&kv_heads)
                    .arg(&group)
                    .arg(&bs)
                    .arg(&split_tokens)
                    .arg(&nsplit)
                    .arg(&scale_log2)
                    .launch(cfg(grid, l.kernel.threads(), l.kernel.dynamic_smem()))
            }?;
        }
        Ok(())
    }

    /// Row offsets (into the first launch's output of decode `pd`, prepared from `d`) of the
    /// attention output each token of hidden-state MoE `m` routes on: the request's last layer,
    /// every query head. `None` when the decode has no launch.
    fn hidden_rows(
        &self,
        pd: &PreparedDecode,
        d: &DecodeOp,
        m: &MoeOp,
    ) -> Result<Option<(CudaSlice<u32>, i32)>, GpuError> {
        let Some(l) = pd.launches.first() else {
            return Ok(None);
        };
        let g = &self.layout.groups[l.group];
        let (layers, row) = (g.layers as usize, (g.q_heads * g.head_dim) as usize);
        let rows: Vec<u32> = m
            .hidden
            .iter()
            .map(|&s| {
                if s == crate::program::HIDDEN_NONE {
                    return crate::program::HIDDEN_NONE;
                }
                let req = d.seqs[s as usize].req;
                let j = l.reqs.iter().position(|&r| r == req).unwrap_or(0);
                ((j * layers + layers - 1) * row) as u32
            })
            .collect();
        Ok(Some((self.upload(rows)?, row as i32)))
    }

    fn launch(
        &self,
        p: &Prepared,
        verify: &CudaSlice<u32>,
        moe: Option<&mut MoeScratch>,
        last_out: Option<&CudaSlice<f32>>,
    ) -> Result<(), GpuError> {
        match p {
            Prepared::Merged => {}
            Prepared::WriteKv {
                group,
                tokens,
                positions,
                blocks,
                ntok,
            } => {
                let g = &self.layout.groups[*group];
                let (layers, heads, dim, bs) = (
                    g.layers as i32,
                    g.kv_heads as i32,
                    g.head_dim as i32,
                    g.block_size_tokens as i32,
                );
                let planes = g.planes() as i32;
                let block_elems = g.block_elems();
                // SAFETY: write_kv writes one row per token into its (validated) block.
                unsafe {
                    self.stream
                        .launch_builder(&self.common["write_kv"])
                        .arg(&self.pools[*group])
                        .arg(tokens)
                        .arg(positions)
                        .arg(blocks)
                        .arg(&layers)
                        .arg(&heads)
                        .arg(&dim)
                        .arg(&bs)
                        .arg(&planes)
                        .arg(&block_elems)
                        .launch(cfg((*ntok, g.layers, 1), 128, 0))
                }?;
            }
            Prepared::Decode(d) => self.launch_decode(d, verify)?,
            Prepared::State {
                group,
                tokens,
                ntok,
                src,
                dst,
                digest,
                record,
            } => {
                let g = &self.layout.groups[*group];
                let (heads, state_dim) = (g.kv_heads as i32, g.head_dim as i32);
                let rec = verify.slice(record * RECORD_WORDS..);
                // SAFETY: state_update touches rows of blocks src and dst (validated).
                unsafe {
                    self.stream
                        .launch_builder(&self.common["state_update"])
                        .arg(&self.pools[*group])
                        .arg(tokens)
                        .arg(ntok)
                        .arg(src)
                        .arg(dst)
                        .arg(&heads)
                        .arg(&state_dim)
                        .arg(&digest.tokens)
                        .arg(&digest.checksum)
                        .arg(&rec)
                        .launch(cfg((g.layers * g.kv_heads, 1, 1), 128, 0))
                }?;
            }
            Prepared::Zero { group, blocks, n }
            | Prepared::Copy {
                group,
                pairs: blocks,
                n,
            } => {
                if *n == 0 {
                    return Ok(());
                }
                let g = &self.layout.groups[*group];
                let block_vecs = g.block_bytes() / 16;
                let chunks = (block_vecs / 2048).clamp(1, 64) as u32;
                let name = if matches!(p, Prepared::Zero { .. }) {
                    "zero_blocks"
                } else {
                    "copy_blocks"
                };
                // SAFETY: whole blocks of the (validated) ids.
                unsafe {
                    self.stream
                        .launch_builder(&self.common[name])
                        .arg(&self.pools[*group])
                        .arg(blocks)
                        .arg(&block_vecs)
                        .launch(cfg((*n, chunks, 1), 256, 0))
                }?;
            }
            Prepared::Moe {
                tokens,
                ntok,
                top_k,
                counts_off,
                hidden,
                ..
            } => {
                let (Some(m), Some(w), Some(s)) = (self.layout.moe, &self.moe, moe) else {
                    unreachable!("validated: MoE ops need a MoE layout")
                };
                let (h, f, e) = (m.hidden as i32, m.ffn as i32, m.experts as i32);
                let (nt, k) = (*ntok as i32, *top_k as i32);
                let mut y = s.y.slice_mut(..(*ntok as usize) * m.hidden as usize);
                self.stream.memset_zeros(&mut y)?;
                let counts = s.counts.slice(*counts_off..*counts_off + m.experts as usize);
                let (a, arow, an) = match (hidden, last_out) {
                    (Some((rows, n)), Some(out)) => (out, rows, *n),
                    _ => (&s.x, &s.lists, 0i32),
                };
                let beta = crate::program::MOE_HIDDEN_BIAS;
                // SAFETY: MoE kernels index X/Hb/Y/lists by token < ntok and expert < E, all sized
                // for the largest MoE op of the program.
                unsafe {
                    self.stream
                        .launch_builder(&self.common["moe_route"])
                        .arg(tokens)
                        .arg(&w.router)
                        .arg(&h)
                        .arg(&e)
                        .arg(&k)
                        .arg(&nt)
                        .arg(&s.x)
                        .arg(&counts)
                        .arg(&s.lists)
                        .arg(&s.wlist)
                        .arg(a)
                        .arg(arow)
                        .arg(&an)
                        .arg(&beta)
                        .launch(cfg((*ntok, 1, 1), 128, 4 * m.experts))?;
                    self.stream
                        .launch_builder(&self.common["moe_up"])
                        .arg(&w.w1)
                        .arg(&s.x)
                        .arg(&counts)
                        .arg(&s.lists)
                        .arg(&s.hb)
                        .arg(&h)
                        .arg(&f)
                        .arg(&nt)
                        .launch(cfg((m.experts, m.ffn / 64, 1), 128, 0))?;
                    self.stream
                        .launch_builder(&self.common["moe_down"])
                        .arg(&w.w2)
                        .arg(&s.hb)
                        .arg(&counts)
                        .arg(&s.lists)
                        .arg(&s.wlist)
                        .arg(&s.y)
                        .arg(&h)
                        .arg(&f)
                        .arg(&nt)
                        .launch(cfg((m.experts, m.hidden / 64, 1), 128, 0))?;
                }
            }
            Prepared::HostWork(nanos) => {
                let t = Instant::now();
                while (t.elapsed().as_nanos() as u64) < *nanos {
                    std::hint::spin_loop();
                }
            }
            Prepared::Begin(_) | Prepared::End(_) => unreachable!("marks are handled by execute"),
        }
        Ok(())
    }

    fn decode_outputs(&self, d: &PreparedDecode, step: usize, op: usize) -> Result<Vec<DecodeOutput>, GpuError> {
        let mut out = Vec::new();
        for l in &d.launches {
            let g = &self.layout.groups[l.group];
            let per_seq = (g.layers * g.q_heads * g.head_dim) as usize;
            let all = self.stream.clone_dtoh(&l.out)?;
            for (i, req) in l.reqs.iter().enumerate() {
                out.push(DecodeOutput {
                    step,
                    op,
                    group: GroupId(l.group as u32),
                    req: *req,
                    out: all[i * per_seq..(i + 1) * per_seq].to_vec(),
                    q_bits: l
                        .q_host
                        .get(i * per_seq..(i + 1) * per_seq)
                        .map(<[u16]>::to_vec)
                        .unwrap_or_default(),
                });
            }
        }
        Ok(out)
    }

    /// Reads a state block back (`[layer][head][state_dim]` f32; elements 0 and 1 are the digest).
    pub fn read_state_block(&self, group: GroupId, block: BlockId) -> Result<Vec<f32>, GpuError> {
        let g = &self.layout.groups[group.0 as usize];
        assert_eq!(g.kind, GroupKind::MambaState, "state blocks live in state groups");
        let bytes = g.block_bytes() as usize;
        let view = self.pools[group.0 as usize].slice(block.0 as usize * bytes..(block.0 as usize + 1) * bytes);
        let raw = self.stream.clone_dtoh(&view)?;
        Ok(raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

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

fn load(ctx: &Arc<CudaContext>, m: CompiledModule) -> Result<Arc<CudaModule>, GpuError> {
    Ok(ctx.load_module(Ptx::from_binary(m.image))?)
}

/// Turns verification records into violations. `runs` is how many times each record's op ran
/// (its counters accumulate). Returns the violations and the rows verified.
fn check_records(records: &[RecordExpect], words: &[u32], runs: u64) -> (Vec<Violation>, u64) {
    let mut violations = Vec::new();
    let mut rows = 0u64;
    for (i, r) in records.iter().enumerate() {
        let w = &words[i * RECORD_WORDS..(i + 1) * RECORD_WORDS];
        let (mism, first_bad, reads) = (w[0], w[1], u64::from(w[2]));
        let checksum = u64::from(w[4]) | (u64::from(w[5]) << 32);
        rows += reads;
        let expected_reads = r.expect.reads * runs;
        let expected_checksum = r.expect.checksum.wrapping_mul(runs);
        let base = |block, position, kind| Violation {
            step: r.step,
            op: r.op,
            req: r.req,
            group: r.group,
            block,
            position,
            kind,
        };
        match &r.what {
            RecordWhat::Decode {
                table,
                block_size,
                tokens,
            } => {
                if mism > 0 {
                    let block = table.get((first_bad / block_size) as usize).copied();
                    let expected_token = tokens.get(first_bad as usize).copied().unwrap_or(u32::MAX);
                    violations.push(base(
                        block,
                        Some(first_bad),
                        ViolationKind::KvContent {
                            mismatched_reads: mism,
                            expected_token,
                        },
                    ));
                } else if reads != expected_reads {
                    violations.push(base(
                        None,
                        None,
                        ViolationKind::ReadCount {
                            expected: expected_reads,
                            actual: reads,
                        },
                    ));
                } else if checksum != expected_checksum {
                    violations.push(base(
                        None,
                        None,
                        ViolationKind::Checksum {
                            expected: expected_checksum,
                            actual: checksum,
                        },
                    ));
                }
            }
            RecordWhat::State { src_block, digest } => {
                if mism > 0 {
                    violations.push(base(
                        Some(*src_block),
                        None,
                        ViolationKind::StateDigest {
                            mismatched_rows: mism,
                            expected_tokens: digest.tokens,
                        },
                    ));
                } else if reads != expected_reads {
                    violations.push(base(
                        Some(*src_block),
                        None,
                        ViolationKind::ReadCount {
                            expected: expected_reads,
                            actual: reads,
                        },
                    ));
                } else if checksum != expected_checksum {
                    violations.push(base(
                        Some(*src_block),
                        None,
                        ViolationKind::Checksum {
                            expected: expected_checksum,
                            actual: checksum,
                        },
                    ));
                }
            }
        }
    }
    (violations, rows)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::GroupLayout;

    fn record(what: RecordWhat, reads: u64, checksum: u64) -> RecordExpect {
        RecordExpect {
            step: 3,
            op: 1,
            req: ReqId(7),
            group: GroupId(2),
            expect: DecodeExpect { reads, checksum },
            what,
        }
    }

    fn words(mism: u32, first_bad: u32, reads: u32, checksum: u64) -> Vec<u32> {
        vec![
            mism,
            first_bad,
            reads,
            0,
            checksum as u32,
            (checksum >> 32) as u32,
            0,
            0,
        ]
    }

    fn decode_what() -> RecordWhat {
        RecordWhat::Decode {
            table: vec![BlockId(0), BlockId(0), BlockId(5), BlockId(9)],
            block_size: 16,
            tokens: (100..164).collect(),
        }
    }

    #[test]
    fn clean_records_give_no_violation() {
        let (v, rows) = check_records(&[record(decode_what(), 32, 0xabc)], &words(0, u32::MAX, 64, 0x1578), 2);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(rows, 64);
    }

    #[test]
    fn mismatch_names_block_and_position() {
        let (v, _) = check_records(&[record(decode_what(), 32, 1)], &words(16, 48, 32, 5), 1);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].block, Some(BlockId(9)));
        assert_eq!(v[0].position, Some(48));
        assert_eq!(v[0].step, 3);
        assert_eq!(
            v[0].kind,
            ViolationKind::KvContent {
                mismatched_reads: 16,
                expected_token: 148
            }
        );
        assert!(v[0].to_string().contains("block b9 pos 48"));
    }

    #[test]
    fn count_and_checksum_mismatches() {
        let (v, _) = check_records(&[record(decode_what(), 32, 1)], &words(0, u32::MAX, 31, 1), 1);
        assert_eq!(
            v[0].kind,
            ViolationKind::ReadCount {
                expected: 32,
                actual: 31
            }
        );
        let (v, _) = check_records(&[record(decode_what(), 32, 1)], &words(0, u32::MAX, 32, 2), 1);
        assert_eq!(v[0].kind, ViolationKind::Checksum { expected: 1, actual: 2 });
        let state = RecordWhat::State {
            src_block: BlockId(3),
            digest: StateDigest { tokens: 4, checksum: 9 },
        };
        let (v, _) = check_records(&[record(state, 8, 72)], &words(8, 0, 8, 0), 1);
        assert_eq!(v[0].block, Some(BlockId(3)));
        assert_eq!(
            v[0].kind,
            ViolationKind::StateDigest {
                mismatched_rows: 8,
                expected_tokens: 4
            }
        );
    }

    #[test]
    fn median_and_bytes() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[]), 0.0);
        let g = GroupLayout {
            kind: GroupKind::SlidingWindow { window_tokens: 100 },
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

    #[test]
    fn executor_runs_or_skips() {
        let layout = DeviceLayout {
            groups: vec![GroupLayout {
                kind: GroupKind::Full,
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
