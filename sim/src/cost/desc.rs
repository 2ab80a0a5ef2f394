//! What the GPU backend executes per step, described for the cost model: one [`OpDesc`] per op
//! of a lowered program, with the bytes, CTAs and work each kernel really has.
//!
//! The description mirrors `kvsim_core::device::executor`'s prepare phase launch for launch: a run of
//! consecutive `Prefill` ops is one `write_kv` launch per group (in order of first appearance,
//! the rest of the run `merged`), a decode is one launch per attention group with the split the
//! executor's heuristic picks for the device's resident CTAs, a MoE is a memset and three
//! kernels. Indices line up with the program's ops, so a description and a run's per-op timings
//! join by (step, op). `kvsim replay --backend gpu` embeds the description in its results
//! (with the device's routing counts and host-work times); `kvsim predict` builds it from the
//! plan alone.

use std::collections::BTreeMap;

use kvsim_core::device::layout::{DeviceLayout, GroupKind, GroupLayout};
use kvsim_core::device::lower::{aligned_lo, choose_split, AttnKernel};
use kvsim_core::device::program::{GpuOp, MoeOp};
use kvsim_core::device::LoweredPlan;
use kvsim_core::plan::{Plan, PlanOp};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::routing::{ExpertCache, Routing};

/// The description format version (bumped when a field's meaning changes).
pub const DESC_VERSION: u32 = 7;

/// Cache that expert weights of one MoE op can stay in for the next (the H200's L2 is 60 MiB;
/// K/V streams through it between MoE ops).
pub const L2_BYTES: f64 = 40.0 * 1024.0 * 1024.0;

/// Threads of a `write_kv` CTA (one CTA per row: `gpu/src/executor/launch.rs`).
pub const WRITE_KV_THREADS: u64 = 128;

/// Decode kernel families (each has its own rates in the profile).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Tensor-core kernel.
    Mma,
    /// CUDA-core kernel.
    Generic,
    /// CUDA-core MLA latent kernel.
    Latent,
    /// Tensor-core MLA latent kernel.
    LatentMma,
}

/// One decode kernel launch (one attention group of a decode op).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttnDesc {
    /// The kernel module (`attn_mma_d128_h4`, ...).
    pub module: String,
    /// Its kernel family.
    pub family: Family,
    /// Requests in the launch.
    pub seqs: u64,
    /// K/V bytes read (attended positions x bytes per position).
    pub bytes: u64,
    /// CTAs launched (splits x head tiles x requests x layers x KV heads).
    pub ctas: u64,
    /// CTAs resident on the device at once.
    pub resident: u64,
    /// Splits per request.
    pub nsplit: u32,
    /// Tokens per split.
    pub split_tokens: u32,
    /// Head dim the kernel was built for (a CTA's work per position grows with it);
    /// 0 in descriptions before version 5.
    #[serde(default)]
    pub head_dim: u32,
    /// Query heads (rows) one CTA computes and, with splits, its last CTA combines;
    /// 0 in descriptions before version 6.
    #[serde(default)]
    pub head_tile: u32,
}

impl AttnDesc {
    /// Waves of CTAs: `ceil(ctas / resident)`.
    pub fn waves(&self) -> u64 {
        self.ctas.div_ceil(self.resident.max(1))
    }

    /// 128-position iterations of one CTA's split (four warps walk 32-position tiles).
    pub fn iters(&self) -> f64 {
        f64::from(self.split_tokens) / 128.0
    }

    /// The CTA's work per position relative to a head dim of 128: the K/V kernels' dot
    /// products and their tiles' loads grow with the head dim (measured by the microbenchmarks:
    /// d256 decodes took twice a d128 walk, d64 less). MLA kernels' rates are their own.
    pub fn head_dim_scale(&self) -> f64 {
        match self.family {
            Family::Mma | Family::Generic if self.head_dim > 0 => f64::from(self.head_dim) / 128.0,
            _ => 1.0,
        }
    }

    /// Head dims beyond 128, in units of 128: where the tensor-core kernel's register tiles
    /// spill (0 at 128 and below).
    pub fn spilled_dims(&self) -> f64 {
        f64::from(self.head_dim.saturating_sub(128)) / 128.0
    }

    /// Output elements each thread of the combining CTA folds the splits into (its rows x the
    /// head dim over the CTA's 128 threads): the combine's loop count.
    pub fn combine_elems_per_thread(&self) -> f64 {
        let elems = u64::from(self.head_tile.max(1)) * u64::from(self.head_dim);
        elems.div_ceil(u64::from(kvsim_core::device::lower::DECODE_THREADS)) as f64
    }
}

/// One op of a step, as the cost model sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum OpDesc {
    /// One `write_kv` launch: `rows` CTAs (tokens x layers), `elems` K/V elements written;
    /// `latent` for an MLA group (whole latent rows, no transposed V plane).
    WriteKv {
        /// The group.
        group: u32,
        /// CTAs (tokens × layers).
        rows: u64,
        /// K/V elements written.
        elems: u64,
        /// An MLA group.
        #[serde(default)]
        latent: bool,
        /// Iterations one of the kernel's 128 threads walks over a row (ceil(kv_heads x
        /// head_dim / 128)); 0 in descriptions made before it, which then price no walk.
        #[serde(default, skip_serializing_if = "kvsim_core::serde_skip::is_zero")]
        row_iters: u64,
    },
    /// A `Prefill` written by an earlier `write_kv` of its run.
    Merged,
    /// Paged decode attention: one launch per group.
    Decode {
        /// One per group.
        launches: Vec<AttnDesc>,
    },
    /// `state_update`: `serial` = ceil((state dim - 2) / 128) x tokens steps per thread, times
    /// the waves of its (layers x heads) CTAs; `tokens` = tokens x waves, the walk's fixed part
    /// per token (the microbenchmarks: 8 189 tokens of one step each took as long as 1.5x
    /// 4 093 tokens of two).
    StateUpdate {
        /// Serial steps per thread.
        serial: u64,
        /// Tokens one thread walks, times the waves (0 before description version 5).
        #[serde(default)]
        tokens: u64,
        /// Bytes moved.
        bytes: u64,
    },
    /// Zeroing blocks.
    ZeroBlocks {
        /// Blocks.
        blocks: u64,
        /// Bytes written.
        bytes: u64,
    },
    /// `bytes` counts reads and writes.
    CopyBlocks {
        /// Blocks.
        blocks: u64,
        /// Bytes.
        bytes: u64,
    },
    /// A MoE layer: memset, router, up and down GEMMs.
    Moe {
        /// Tokens routed.
        tokens: u64,
        /// Experts per token.
        top_k: u32,
        /// Experts.
        experts: u32,
        /// Hidden size.
        hidden: u32,
        /// Expert FFN size.
        ffn: u32,
        /// Routed on the attention output (hidden state) rather than token ids.
        hidden_state: bool,
        /// How tokens were routed.
        routing: Routing,
    },
    /// A window opens.
    BeginTimed {
        /// The point.
        point: u64,
    },
    /// A window closes.
    EndTimed {
        /// The point.
        point: u64,
    },
    /// Host-side work inside a window (a busy wait on the device machine): the plan op it came
    /// from, the tokens it registers (`cache_blocks`), and the time the lowering measured.
    HostWork {
        /// The plan op.
        origin: String,
        /// Tokens it registers.
        tokens: u64,
        /// Host time the lowering measured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured_ns: Option<u64>,
    },
}

impl OpDesc {
    /// Kernel launches (memsets included) the op issues.
    pub fn launches(&self) -> u64 {
        match self {
            OpDesc::WriteKv { .. } | OpDesc::StateUpdate { .. } => 1,
            OpDesc::Decode { launches } => launches.len() as u64,
            OpDesc::ZeroBlocks { blocks, .. } | OpDesc::CopyBlocks { blocks, .. } => u64::from(*blocks > 0),
            OpDesc::Moe { .. } => 4,
            OpDesc::Merged | OpDesc::BeginTimed { .. } | OpDesc::EndTimed { .. } | OpDesc::HostWork { .. } => 0,
        }
    }

    /// The executor's name for the op's launches (`OpTiming::kind`); `None` for ops that
    /// launch nothing.
    pub fn timing_kind(&self) -> Option<&'static str> {
        Some(match self {
            OpDesc::WriteKv { .. } => "write_kv",
            OpDesc::Decode { .. } => "decode",
            OpDesc::StateUpdate { .. } => "state_update",
            OpDesc::ZeroBlocks { .. } => "zero_blocks",
            OpDesc::CopyBlocks { .. } => "copy_blocks",
            OpDesc::Moe { .. } => "moe",
            OpDesc::Merged | OpDesc::BeginTimed { .. } | OpDesc::EndTimed { .. } | OpDesc::HostWork { .. } => {
                return None
            }
        })
    }
}

/// One step of a lowered program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepDesc {
    /// The plan step.
    pub step: u64,
    /// Requests the step's decodes attend for (the batch).
    pub batch: u64,
    /// Tokens the step computes (written K/V positions of the first group, or MoE tokens).
    pub new_tokens: u64,
    /// Sum of the decoded requests' contexts (the step's total KV read, in tokens).
    pub ctx_tokens: u64,
    /// K/V bytes its decodes read.
    pub kv_bytes: u64,
    /// Decodes and writes only one token per request.
    pub decode_only: bool,
    /// The ops, in order.
    pub ops: Vec<OpDesc>,
}

fn family(k: AttnKernel) -> Family {
    match k {
        AttnKernel::Mma { .. } => Family::Mma,
        AttnKernel::Generic { .. } => Family::Generic,
        AttnKernel::Latent { .. } => Family::Latent,
        // Its own rates: on the H200 the MLA decode streams at 4.1-4.5 TB/s where the K/V
        // kernel reaches 3.7 (docs/timing-history.md, MLA).
        AttnKernel::LatentMma { .. } => Family::LatentMma,
    }
}

/// Where host work and routing come from when describing a program.
pub trait DescSource {
    /// Resident CTAs of decode kernel module `module`.
    fn resident(&self, module: &str) -> u64;
    /// Routing of MoE op `op` of program step `step`.
    fn routing(&mut self, step: usize, op: usize, m: &MoeOp, layout: &DeviceLayout) -> Routing;
}

fn attn_launches(
    layout: &DeviceLayout,
    d: &kvsim_core::device::DecodeOp,
    src: &dyn DescSource,
    sm_count: u32,
) -> Vec<AttnDesc> {
    let mut groups: Vec<kvsim_core::device::GroupId> =
        d.seqs.iter().flat_map(|s| s.tables.iter().map(|t| t.group)).collect();
    groups.sort();
    groups.dedup();
    let mut out = Vec::new();
    for gid in groups {
        let Some(g) = layout.group(gid) else { continue };
        let Some(kernel) = AttnKernel::for_group(g) else {
            continue;
        };
        let seqs: Vec<_> = d.seqs.iter().filter(|s| s.table(gid).is_some()).collect();
        let (mut max_span, mut bytes) = (0u32, 0u64);
        for s in &seqs {
            let r = g.kind.attend_range(s.ctx_tokens());
            max_span = max_span.max(r.end - aligned_lo(r.start));
            bytes += u64::from(r.end - r.start) * g.kv_bytes_per_position();
        }
        let head_tiles = g.gqa_group() / kernel.head_tile();
        let per_split = seqs.len() as u64 * u64::from(g.layers * g.kv_heads * head_tiles);
        let module = kernel.module_name();
        // A kernel built for one CTA per SM never has more resident, whatever the source says.
        let resident = match kernel.max_ctas_per_sm() {
            Some(cap) => src.resident(&module).min(u64::from(cap) * u64::from(sm_count)),
            None => src.resident(&module),
        }
        .max(1);
        let split = choose_split(max_span, per_split, resident, None);
        out.push(AttnDesc {
            module,
            family: family(kernel),
            seqs: seqs.len() as u64,
            bytes,
            ctas: per_split * u64::from(split.nsplit),
            resident,
            nsplit: split.nsplit,
            split_tokens: split.split_tokens,
            head_dim: g.head_dim,
            head_tile: kernel.head_tile(),
        });
    }
    out
}

/// Bytes a (non-MoE) op moves through L2: what evicts expert weights between MoE ops.
fn streamed_bytes(op: &OpDesc) -> f64 {
    match op {
        OpDesc::Decode { launches } => launches.iter().map(|l| l.bytes as f64).sum(),
        OpDesc::StateUpdate { bytes, .. } | OpDesc::ZeroBlocks { bytes, .. } | OpDesc::CopyBlocks { bytes, .. } => {
            *bytes as f64
        }
        _ => 0.0,
    }
}

fn state_desc(g: &GroupLayout, ntok: u64, sm_count: u64) -> OpDesc {
    let ctas = u64::from(g.layers * g.kv_heads);
    let per_thread = u64::from(g.head_dim.saturating_sub(2)).div_ceil(128);
    // 128-thread CTAs: up to 16 resident per SM.
    let waves = ctas.div_ceil(16 * sm_count.max(1));
    OpDesc::StateUpdate {
        serial: per_thread * ntok * waves,
        tokens: ntok * waves,
        bytes: 2 * g.block_bytes(),
    }
}

/// Describes every step of `lowered` (a lowering of `plan`).
pub fn describe(plan: &Plan, lowered: &LoweredPlan, sm_count: u32, src: &mut dyn DescSource) -> Vec<StepDesc> {
    let layout = &lowered.program.layout;
    let mut plan_ops: BTreeMap<(u64, u32), &Vec<PlanOp>> = BTreeMap::new();
    for st in &plan.steps {
        plan_ops.insert((st.step, st.rank), &st.ops);
    }
    let mut out = Vec::with_capacity(lowered.program.steps.len());
    let mut prev_routing: Option<Routing> = None;
    let mut expert_cache = ExpertCache::default();
    for (si, step) in lowered.program.steps.iter().enumerate() {
        let mut ops: Vec<OpDesc> = Vec::with_capacity(step.ops.len());
        let (mut batch, mut new_tokens, mut ctx_tokens, mut kv_bytes) = (0u64, 0u64, 0u64, 0u64);
        let mut first_group_written: Option<kvsim_core::device::GroupId> = None;
        let mut oi = 0;
        while oi < step.ops.len() {
            let run = kvsim_core::device::program::prefill_run(&step.ops[oi..]);
            if run > 0 {
                // (group, tokens, non-null tokens) in order of first appearance.
                let mut per_group: Vec<(kvsim_core::device::GroupId, u64, u64)> = Vec::new();
                for op in &step.ops[oi..oi + run] {
                    let GpuOp::Prefill(p) = op else {
                        unreachable!("a run of prefills")
                    };
                    let bs = layout.group(p.group).map_or(1, |g| g.block_size_tokens.max(1));
                    let kept = (0..p.tokens.len() as u32)
                        .filter(|k| {
                            p.block_table
                                .get(((p.start_pos + k) / bs) as usize)
                                .is_some_and(|b| b.0 != 0)
                        })
                        .count() as u64;
                    let first = *first_group_written.get_or_insert(p.group);
                    if p.group == first {
                        new_tokens += p.tokens.len() as u64;
                    }
                    match per_group.iter_mut().find(|e| e.0 == p.group) {
                        Some(e) => {
                            e.1 += p.tokens.len() as u64;
                            e.2 += kept;
                        }
                        None => per_group.push((p.group, p.tokens.len() as u64, kept)),
                    }
                }
                for (gid, ntok, kept) in &per_group {
                    let g = layout.group(*gid).expect("validated program");
                    let per_token = u64::from(g.planes()) * u64::from(g.kv_heads) * u64::from(g.head_dim);
                    let elems = kept * per_token * u64::from(g.layers);
                    expert_cache.stream(2.0 * elems as f64);
                    ops.push(OpDesc::WriteKv {
                        group: gid.0,
                        rows: ntok * u64::from(g.layers),
                        elems,
                        latent: g.kind == GroupKind::Mla,
                        row_iters: (u64::from(g.kv_heads) * u64::from(g.head_dim)).div_ceil(WRITE_KV_THREADS),
                    });
                }
                while ops.len() < oi + run {
                    ops.push(OpDesc::Merged);
                }
                oi += run;
                continue;
            }
            let op = &step.ops[oi];
            ops.push(match op {
                GpuOp::Prefill(_) => unreachable!("handled as a run"),
                GpuOp::DecodeAttention(d) => {
                    batch = batch.max(d.seqs.len() as u64);
                    ctx_tokens += d.seqs.iter().map(|s| u64::from(s.ctx_tokens())).sum::<u64>();
                    let launches = attn_launches(layout, d, src, sm_count);
                    kv_bytes += launches.iter().map(|l| l.bytes).sum::<u64>();
                    OpDesc::Decode { launches }
                }
                GpuOp::StateUpdate(u) => {
                    let g = layout.group(u.group).expect("validated program");
                    state_desc(g, u.tokens.len() as u64, u64::from(sm_count))
                }
                GpuOp::ZeroBlocks { group, blocks } => {
                    let b = layout.group(*group).map_or(0, GroupLayout::block_bytes);
                    OpDesc::ZeroBlocks {
                        blocks: blocks.len() as u64,
                        bytes: blocks.len() as u64 * b,
                    }
                }
                GpuOp::CopyBlocks { group, copies } => {
                    let b = layout.group(*group).map_or(0, GroupLayout::block_bytes);
                    OpDesc::CopyBlocks {
                        blocks: copies.len() as u64,
                        bytes: 2 * copies.len() as u64 * b,
                    }
                }
                GpuOp::Moe(m) => {
                    let moe = layout.moe.expect("validated program: MoE ops need a MoE layout");
                    if first_group_written.is_none() {
                        new_tokens += m.tokens.len() as u64;
                    }
                    let mut routing = src.routing(si, oi, m, layout);
                    let expert_bytes = 4.0 * f64::from(moe.hidden) * f64::from(moe.ffn);
                    expert_cache.use_experts(&mut routing, prev_routing.as_ref(), moe.experts, expert_bytes, L2_BYTES);
                    prev_routing = Some(routing.clone());
                    OpDesc::Moe {
                        tokens: m.tokens.len() as u64,
                        top_k: m.top_k,
                        experts: moe.experts,
                        hidden: moe.hidden,
                        ffn: moe.ffn,
                        hidden_state: !m.hidden.is_empty(),
                        routing,
                    }
                }
                GpuOp::BeginTimed { point } => OpDesc::BeginTimed {
                    point: u64::from(point.0),
                },
                GpuOp::EndTimed { point } => OpDesc::EndTimed {
                    point: u64::from(point.0),
                },
                GpuOp::HostWork { nanos } => {
                    let origin = lowered.origins.get(si).and_then(|o| o.get(oi)).copied();
                    let plan_op =
                        origin.and_then(|o| plan_ops.get(&(o.step, o.rank)).and_then(|ops| ops.get(o.op_index)));
                    let (name, tokens) = match plan_op {
                        Some(PlanOp::CacheBlocks { num_tokens, .. }) => ("cache_blocks".to_string(), *num_tokens),
                        Some(other) => (op_name(other), 0),
                        None => ("unknown".to_string(), 0),
                    };
                    OpDesc::HostWork {
                        origin: name,
                        tokens,
                        measured_ns: Some(*nanos),
                    }
                }
            });
            expert_cache.stream(streamed_bytes(ops.last().expect("just pushed")));
            oi += 1;
        }
        let decode_only = ops.iter().any(|o| matches!(o, OpDesc::Decode { .. }))
            && step.ops.iter().all(|op| match op {
                GpuOp::Prefill(p) => p.tokens.len() == 1,
                _ => true,
            });
        out.push(StepDesc {
            step: lowered.steps.get(si).copied().unwrap_or(si as u64),
            batch,
            new_tokens,
            ctx_tokens,
            kv_bytes,
            decode_only,
            ops,
        });
    }
    out
}

/// The snake_case name of a plan op (`cache_blocks`, `schedule`, ...).
pub fn op_name(op: &PlanOp) -> String {
    serde_json::to_value(op)
        .ok()
        .and_then(|v| v.get("op").and_then(|o| o.as_str()).map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Drops what the lowering measured on this machine (host-work times), so a description from
/// `kvsim predict` is a function of the plan alone.
pub fn forget_measurements(steps: &mut [StepDesc]) {
    for s in steps {
        for op in &mut s.ops {
            if let OpDesc::HostWork { measured_ns, .. } = op {
                *measured_ns = None;
            }
        }
    }
}
