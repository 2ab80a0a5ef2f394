//! The cost model: one stream, two clocks.
//!
//! The GPU backend issues every op of a program from one host thread onto one CUDA stream,
//! asynchronously. The model replays that: a host clock advances by what issuing costs (per
//! step, per launch, per event, per synchronisation, host work), a device clock by what each
//! kernel costs, and a kernel starts at `max(device free, host issued it)`. A step's time is
//! from its first event to its last, as the executor's CUDA events measure it; a timed window's
//! likewise; a window also has a wall time (host clock, synchronised at both ends).
//!
//! Each kernel's device time is an additive roofline over the profile's rates: a fixed cost
//! plus the larger of a bandwidth term and a latency/serial term where the kernel has both
//! (decode: K/V bytes vs waves of CTA iterations; MoE GEMMs: expert weight bytes vs
//! multiply-accumulates vs the most loaded expert's serial work).
//!
//! Every time is carried as a [`Lin`]: its value plus its coefficients over the parameters, so
//! that a time is exactly `coef . params + konst` along the critical path the values chose.
//! Calibration ([`super::fit`]) solves for the parameters on those linearisations.

use super::desc::{Family, OpDesc, StepDesc};
use super::profile::Params;

/// Parameter indices (positions in [`Params::NAMES`]).
pub(crate) mod ix {
    pub const HOST_STEP: usize = 0;
    pub const HOST_STEP_END: usize = 1;
    pub const HOST_LAUNCH: usize = 2;
    pub const HOST_EVENT: usize = 3;
    pub const HOST_SYNC: usize = 4;
    pub const HOST_WAKE: usize = 5;
    pub const HOST_DEEP_WAKE: usize = 6;
    pub const HOST_WORK_OP: usize = 7;
    pub const HOST_WORK_TOKEN: usize = 8;
    pub const GPU_KERNEL: usize = 9;
    pub const WRITE_ROW: usize = 10;
    pub const WRITE_ELEM: usize = 11;
    pub const ZERO_BYTE: usize = 12;
    pub const COPY_BYTE: usize = 13;
    pub const BLOCK_OP: usize = 14;
    pub const STATE_SERIAL: usize = 15;
    pub const MOE_ROUTE_MAC: usize = 16;
    pub const MOE_ROUTE_SERIAL: usize = 17;
    pub const MOE_WEIGHT_BYTE: usize = 18;
    pub const MOE_L2_BYTE: usize = 19;
    pub const MOE_COLD: usize = 20;
    pub const MOE_MAC: usize = 21;
    pub const MOE_SERIAL: usize = 22;
    pub const MOE_SERIAL_EXPERT: usize = 23;
    pub const MMA_BYTE: usize = 24;
    pub const MMA_ITER: usize = 25;
    pub const GENERIC_BYTE: usize = 26;
    pub const GENERIC_ITER: usize = 27;
    pub const LATENT_BYTE: usize = 28;
    pub const LATENT_ITER: usize = 29;
    pub const ATTN_WAVE: usize = 30;
    pub const ATTN_SPLIT: usize = 31;
    pub const LATENT_MMA_BYTE: usize = 32;
    pub const LATENT_MMA_ITER: usize = 33;
    pub const WRITE_LATENT_ELEM: usize = 34;
    pub const STATE_TOKEN: usize = 35;
    pub const OP_GAP: usize = 36;
    pub const MMA_SPILL_ITER: usize = 37;
    pub const COMBINE: usize = 38;
    pub const COMBINE_ELEM: usize = 39;
    pub const COMBINE_SPLIT: usize = 40;
    pub const GENERIC_COMBINE: usize = 41;
    pub const MOE_FIXED: usize = 42;
    pub const MOE_WARP_ELEM: usize = 43;
    pub const MOE_WARP_ROW: usize = 44;
    pub const MOE_SM_ELEM: usize = 45;
    pub const MOE_SM_ROW: usize = 46;
    pub const MMA_SPILL_FIRST_ITER: usize = 47;
    pub const ZERO_ITER: usize = 48;
    pub const COPY_ITER: usize = 49;
    pub const WRITE_ITER: usize = 50;
    pub const MOE_COLD_WALK: usize = 51;
    pub const MOE_WALK_MISS_ELEM: usize = 52;
    pub const MOE_SM_SHARE_NORM: usize = 53;
    pub const MOE_DEAL_RANDOM_SHARE: usize = 54;
    pub const MOE_DEAL_PROBED_SHARE: usize = 55;
    pub const COUNT: usize = 56;
}

/// A time in nanoseconds, linear in the parameters along the path that produced it.
#[derive(Clone, Debug, PartialEq)]
pub struct Lin {
    /// The constant term.
    pub value: f64,
    /// Coefficient of each parameter (units of it on the path).
    pub coef: Vec<f64>,
    /// Nanoseconds that are no parameter's (measured host work).
    pub konst: f64,
}

impl Lin {
    /// Zero.
    pub fn zero() -> Lin {
        Lin {
            value: 0.0,
            coef: vec![0.0; ix::COUNT],
            konst: 0.0,
        }
    }

    /// `units` of parameter `i`.
    fn term(p: &[f64], i: usize, units: f64) -> Lin {
        let mut l = Lin::zero();
        l.add_term(p, i, units);
        l
    }

    fn add_term(&mut self, p: &[f64], i: usize, units: f64) {
        self.coef[i] += units;
        self.value += units * p[i];
    }

    fn add_const(&mut self, ns: f64) {
        self.konst += ns;
        self.value += ns;
    }

    fn add(&mut self, o: &Lin) {
        for (a, b) in self.coef.iter_mut().zip(&o.coef) {
            *a += b;
        }
        self.konst += o.konst;
        self.value += o.value;
    }

    fn scaled(&self, k: f64) -> Lin {
        Lin {
            value: self.value * k,
            coef: self.coef.iter().map(|c| c * k).collect(),
            konst: self.konst * k,
        }
    }

    fn sub(&self, o: &Lin) -> Lin {
        Lin {
            value: self.value - o.value,
            coef: self.coef.iter().zip(&o.coef).map(|(a, b)| a - b).collect(),
            konst: self.konst - o.konst,
        }
    }

    /// The larger (the first on a tie).
    fn max(a: &Lin, b: &Lin) -> Lin {
        if b.value > a.value {
            b.clone()
        } else {
            a.clone()
        }
    }

    /// The value recomputed from other parameters (same path).
    pub fn eval(&self, p: &[f64]) -> f64 {
        self.coef.iter().zip(p).map(|(c, v)| c * v).sum::<f64>() + self.konst
    }
}

/// How host work inside windows is costed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostWork {
    /// The nanoseconds the description carries (what the device machine measured).
    Measured,
    /// From the profile (`host_work_op_ns`, `host_work_token_ns`): a prediction.
    Predicted,
}

/// How the executor ran (what the model replays).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunShape {
    /// Per-op events (`--time-ops`).
    pub time_ops: bool,
    /// Windows open and close on a synchronised stream.
    pub sync_windows: bool,
    /// Host work inside windows.
    pub host_work: HostWork,
}

/// One timed window's predicted times.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowTime {
    /// The point.
    pub point: u64,
    /// Program step indices where it opened and closed.
    pub step_begin: usize,
    /// One past its last step.
    pub step_end: usize,
    /// Device time.
    pub device: Lin,
    /// Wall time.
    pub wall: Lin,
    /// Host time to issue it: from its opening event to its closing one, before the closing
    /// synchronisation (what the executor's window `host_ns` measures).
    pub host: Lin,
}

/// One launching op's predicted device time (between its events with `time_ops`).
#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    /// The step.
    pub step: usize,
    /// The op.
    pub op: usize,
    /// Its device time.
    pub device: Lin,
}

/// What [`simulate`] predicts.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Per program step: device time between its events.
    pub steps: Vec<Lin>,
    /// Per timed window.
    pub windows: Vec<WindowTime>,
    /// With `time_ops`: per launching op.
    pub ops: Vec<OpTime>,
}

/// A synchronisation that waited longer than this for the device makes the next launch cost
/// `host_wake_ns` more, and longer than [`DEEP_WAKE_AFTER_NS`] `host_deep_wake_ns` more again.
const WAKE_AFTER_NS: f64 = 2e6;
const DEEP_WAKE_AFTER_NS: f64 = 2e7;

/// 128-thread CTAs resident at once (16 per SM, 132 SMs): the MoE router's and `write_kv`'s.
const RESIDENT_128_THREAD_CTAS: u64 = 16 * 132;

/// 256-thread CTAs of the block kernels resident at once (8 per SM, 132 SMs).
const BLOCK_RESIDENT_CTAS: u64 = 8 * 132;

/// Iterations one thread of `zero_blocks` / `copy_blocks` walks over `blocks` blocks of
/// `block_bytes` each, times the waves: the executor launches a grid of (blocks, chunks) CTAs of
/// 256 threads, one chunk per 2 048 16-byte vectors of a block, at most 64
/// (`gpu/src/executor/launch.rs` `launch_blocks`), and each thread moves one vector per
/// iteration, a load waiting on DRAM before its store. Below 2 MiB a block is 8 iterations
/// whatever its size: the per-op runs timed a copy of 192 KiB and one of 1.3 MiB alike.
pub fn block_walk(blocks: u64, block_bytes: u64) -> f64 {
    let vecs = block_bytes / 16;
    let chunks = (vecs / 2048).clamp(1, 64);
    let iters = vecs.div_ceil(256 * chunks);
    let waves = (blocks * chunks).div_ceil(BLOCK_RESIDENT_CTAS);
    (iters * waves) as f64
}

/// Device time of each kernel an op launches, in issue order.
pub fn kernel_times(op: &OpDesc, p: &[f64]) -> Vec<Lin> {
    let kernel = |extra: Lin| {
        let mut l = Lin::term(p, ix::GPU_KERNEL, 1.0);
        l.add(&extra);
        l
    };
    match op {
        OpDesc::WriteKv {
            rows,
            elems,
            latent,
            row_iters,
            ..
        } => {
            let mut l = Lin::term(p, ix::WRITE_ROW, *rows as f64);
            let elem = if *latent { ix::WRITE_LATENT_ELEM } else { ix::WRITE_ELEM };
            // The larger of writing the elements and one thread's walk over its row beyond the
            // first iteration (which the row's fixed cost carries), wave by wave.
            let walk = row_iters.saturating_sub(1) * rows.div_ceil(RESIDENT_128_THREAD_CTAS);
            if walk > 0 {
                l.add(&Lin::max(
                    &Lin::term(p, elem, *elems as f64),
                    &Lin::term(p, ix::WRITE_ITER, walk as f64),
                ));
            } else {
                l.add_term(p, elem, *elems as f64);
            }
            vec![kernel(l)]
        }
        OpDesc::Decode { launches } => launches
            .iter()
            .map(|a| {
                let (byte, iter) = match a.family {
                    Family::Mma => (ix::MMA_BYTE, ix::MMA_ITER),
                    Family::Generic => (ix::GENERIC_BYTE, ix::GENERIC_ITER),
                    Family::Latent => (ix::LATENT_BYTE, ix::LATENT_ITER),
                    Family::LatentMma => (ix::LATENT_MMA_BYTE, ix::LATENT_MMA_ITER),
                };
                // Wave by wave: a wave of resident CTAs takes the larger of moving its bytes
                // and one CTA's walk over its split (a start-up plus its 128-position
                // iterations); the last wave may be partial.
                let resident = a.resident.max(1);
                let per_cta = a.bytes as f64 / a.ctas.max(1) as f64;
                let (full, rest) = (a.ctas / resident, a.ctas % resident);
                let mut lat = Lin::term(p, ix::ATTN_WAVE, 1.0);
                lat.add_term(p, iter, a.iters() * a.head_dim_scale());
                if a.family == Family::Mma {
                    let (first, rest) = (a.iters().min(1.0), (a.iters() - 1.0).max(0.0));
                    lat.add_term(p, ix::MMA_SPILL_FIRST_ITER, first * a.spilled_dims());
                    lat.add_term(p, ix::MMA_SPILL_ITER, rest * a.spilled_dims());
                }
                if a.nsplit > 1 {
                    lat.add_term(p, ix::ATTN_SPLIT, f64::from(a.nsplit));
                }
                let wave = |ctas: u64| Lin::max(&Lin::term(p, byte, ctas as f64 * per_cta), &lat);
                let mut t = Lin::zero();
                if full > 0 {
                    t.add(&wave(resident).scaled(full as f64));
                }
                if rest > 0 {
                    t.add(&wave(rest));
                }
                // The K/V kernels' combine: the last CTA of a request's splits folds them,
                // each thread its output elements, after the others' fences and counter.
                if a.nsplit > 1 && matches!(a.family, Family::Mma | Family::Generic) {
                    let ept = a.combine_elems_per_thread();
                    t.add_term(p, ix::COMBINE, 1.0);
                    t.add_term(p, ix::COMBINE_ELEM, ept);
                    t.add_term(p, ix::COMBINE_SPLIT, ept * f64::from(a.nsplit));
                    if a.family == Family::Generic {
                        t.add_term(p, ix::GENERIC_COMBINE, 1.0);
                    }
                }
                kernel(t)
            })
            .collect(),
        OpDesc::StateUpdate { serial, tokens, .. } => {
            let mut l = Lin::term(p, ix::STATE_SERIAL, *serial as f64);
            l.add_term(p, ix::STATE_TOKEN, *tokens as f64);
            vec![kernel(l)]
        }
        OpDesc::ZeroBlocks { blocks, bytes } | OpDesc::CopyBlocks { blocks, bytes } => {
            if *blocks == 0 {
                return Vec::new();
            }
            let (byte, iter, moved) = if matches!(op, OpDesc::ZeroBlocks { .. }) {
                (ix::ZERO_BYTE, ix::ZERO_ITER, 1)
            } else {
                (ix::COPY_BYTE, ix::COPY_ITER, 2)
            };
            // The larger of moving the bytes and one thread's walk over its share of a block.
            let walk = block_walk(*blocks, bytes / (moved * blocks));
            let mut l = Lin::max(&Lin::term(p, byte, *bytes as f64), &Lin::term(p, iter, walk));
            l.add_term(p, ix::BLOCK_OP, *blocks as f64);
            vec![kernel(l)]
        }
        OpDesc::Moe {
            tokens,
            experts,
            hidden,
            ffn,
            routing,
            ..
        } => {
            let (h, f, e) = (f64::from(*hidden), f64::from(*ffn), f64::from(*experts));
            // Router: one CTA per token scores every expert (warps take experts in turn).
            let mut route = Lin::term(p, ix::MOE_ROUTE_MAC, *tokens as f64 * e * h);
            route.add_term(
                p,
                ix::MOE_ROUTE_SERIAL,
                e * tokens.div_ceil(RESIDENT_128_THREAD_CTAS) as f64,
            );
            let gemm = |inner: f64, outer: u32| {
                // up (inner = hidden) and down (inner = ffn): weights F x H per chosen expert,
                // pairs x F x H multiply-adds, and the most loaded expert's CTA walking its
                // tokens one by one, dearer per token for the share of weights from DRAM.
                let w = f * h * 2.0;
                let mut l = Lin::term(p, ix::MOE_WEIGHT_BYTE, routing.fresh * w);
                l.add_term(p, ix::MOE_L2_BYTE, (routing.active - routing.fresh).max(0.0) * w);
                l.add_term(p, ix::MOE_COLD, routing.fresh.min(1.0));
                l.add_term(p, ix::MOE_MAC, routing.pairs as f64 * f * h);
                l.add_term(p, ix::MOE_SERIAL, routing.max_load * inner);
                l.add_term(p, ix::MOE_SERIAL_EXPERT, routing.max_load * e);
                let cold_share = (routing.fresh / routing.active.max(1.0)).min(1.0);
                l.add_term(p, ix::MOE_COLD_WALK, cold_share * routing.max_load * inner);
                l.add(&gemm_walk(p, &routing.expert_loads(*experts), inner, outer));
                kernel(l)
            };
            route.add_term(p, ix::MOE_FIXED, 1.0);
            vec![kernel(Lin::zero()), kernel(route), gemm(h, *ffn), gemm(f, *hidden)]
        }
        OpDesc::Merged | OpDesc::BeginTimed { .. } | OpDesc::EndTimed { .. } | OpDesc::HostWork { .. } => Vec::new(),
    }
}

/// SMs the MoE GEMMs' CTAs are dealt to (the H200's, as [`RESIDENT_128_THREAD_CTAS`] assumes).
const MOE_SMS: usize = 132;

/// Token rows (f32, `inner` each) one CTA of a MoE GEMM walks per weight row: up to
/// `MOE_L1_HIT_BYTES` they stay in L1 for the next row, beyond `MOE_L1_MISS_BYTES` every row
/// reads them again from L2, and in between a share does (a linear ramp). Measured alone on the
/// H100 (`scripts/timing/moe_kernels.cu`): one expert's walk costs 14 us a token up to 16 tokens of
/// 4 KiB and 18.2 us from 128 on; with 2 KiB rows, 7.8 us up to 64 tokens and 9.9 us from 128.
const MOE_L1_HIT_BYTES: f64 = 64.0 * 1024.0;
const MOE_L1_MISS_BYTES: f64 = 256.0 * 1024.0;

/// Share of a walk of `tokens` token rows of `inner` f32s that misses L1 (see above).
fn l1_miss_share(tokens: f64, inner: f64) -> f64 {
    let bytes = tokens * inner * 4.0;
    ((bytes - MOE_L1_HIT_BYTES) / (MOE_L1_MISS_BYTES - MOE_L1_HIT_BYTES)).clamp(0.0, 1.0)
}

/// A MoE GEMM's serial time (gpu/src/cuda/common.cu `moe_up` / `moe_down`): a grid of experts x
/// (outer / 64) CTAs of four warps, each warp 16 rows of its expert, each row a dot of `inner`
/// elements per token of that expert, one token after the other. Per SM (CTAs dealt to SMs in
/// launch order, expert index fastest) two bounds: the walk of its most loaded CTA's warps
/// (latency; dearer per element where the token rows miss L1, `moe_walk_miss_elem_ns`) and the
/// row-dots of all its CTAs (throughput). With `moe_sm_share_norm` 0 the larger bound of the
/// busiest SM is the time (a term per token of the most loaded expert alone missed -9 % at 8
/// experts, +9 % at 32 on the per-op suite, docs/timing-history.md); with a norm p, each SM's time is
/// (walk^p + rows^p)^(1/p), and the slowest SM's sets the GEMM's: the H100 ran two equally
/// loaded CTAs on one SM 1.3x as long as one, where the larger bound said 1.03x
/// (`moe_kernels.cu`, docs/timing-history.md). With `moe_deal_random_share` s > 0 the time is
/// (1 - s) x the launch-order dealing's plus s x the mean over [`DEAL_DRAWS`] balanced random
/// dealings' (see [`random_deals`]). With `moe_deal_probed_share` q > 0, for a grid the H100
/// probe covered (`deal_table`), q x the time where the probe saw the CTAs plus (1 - q) x that.
fn gemm_walk(p: &[f64], loads: &[f64], inner: f64, outer: u32) -> Lin {
    let probed = p[ix::MOE_DEAL_PROBED_SHARE].clamp(0.0, 1.0);
    let seen = if probed > 0.0 {
        super::deal_table::placement(loads.len(), (outer / 64) as usize)
    } else {
        None
    };
    let Some(sms) = seen else {
        return gemm_walk_unprobed(p, loads, inner, outer);
    };
    let mut t = gemm_walk_dealt(p, loads, inner, outer, Some(sms)).scaled(probed);
    if probed < 1.0 {
        t.add(&gemm_walk_unprobed(p, loads, inner, outer).scaled(1.0 - probed));
    }
    t
}

/// [`gemm_walk`] by `moe_deal_random_share` alone: launch order, balanced random or a mix.
fn gemm_walk_unprobed(p: &[f64], loads: &[f64], inner: f64, outer: u32) -> Lin {
    let share = p[ix::MOE_DEAL_RANDOM_SHARE].clamp(0.0, 1.0);
    if share == 0.0 {
        return gemm_walk_dealt(p, loads, inner, outer, None);
    }
    let ctas = loads.len() * (outer / 64) as usize;
    let mut t = Lin::zero();
    random_deals(ctas, |sms| t.add(&gemm_walk_dealt(p, loads, inner, outer, Some(sms))));
    let mut t = t.scaled(share / DEAL_DRAWS as f64);
    if share < 1.0 {
        t.add(&gemm_walk_dealt(p, loads, inner, outer, None).scaled(1.0 - share));
    }
    t
}

/// Balanced random dealings of a grid priced per MoE GEMM (`moe_deal_random_share`).
const DEAL_DRAWS: u64 = 16;

thread_local! {
    /// Per grid size, the [`DEAL_DRAWS`] dealings' SM of every CTA (draws are fixed, so the
    /// cache only saves drawing them again).
    static DEALS: std::cell::RefCell<std::collections::BTreeMap<usize, Vec<u8>>> =
        const { std::cell::RefCell::new(std::collections::BTreeMap::new()) };
}

/// Calls `each` with the SM of every CTA of a grid of `ctas`, for each of [`DEAL_DRAWS`]
/// dealings: a permutation of the CTAs (Fisher-Yates driven by SplitMix64, seeded by the grid
/// size and the draw, so the same grid always gets the same dealings), CTA i on SM
/// `perm[i] mod 132`: every SM holds floor or ceil of ctas / 132 of them, as the H100 deals.
fn random_deals(ctas: usize, mut each: impl FnMut(&[u8])) {
    DEALS.with(|cache| {
        let mut cache = cache.borrow_mut();
        let sms = cache.entry(ctas).or_insert_with(|| {
            let mut out = Vec::with_capacity(ctas * DEAL_DRAWS as usize);
            let mut perm: Vec<usize> = Vec::with_capacity(ctas);
            for draw in 0..DEAL_DRAWS {
                perm.clear();
                perm.extend(0..ctas);
                let mut state = (ctas as u64) << 32 | draw;
                for i in (1..ctas).rev() {
                    state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    let mut z = state;
                    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                    z ^= z >> 31;
                    perm.swap(i, (z % (i as u64 + 1)) as usize);
                }
                out.extend(perm.iter().map(|&c| (c % MOE_SMS) as u8));
            }
            out
        });
        for draw in sms.chunks(ctas.max(1)) {
            each(draw);
        }
    });
}

/// [`gemm_walk`] for one dealing: CTA i on SM `sms[i]`, or on `i mod 132` (launch order).
fn gemm_walk_dealt(p: &[f64], loads: &[f64], inner: f64, outer: u32, sms: Option<&[u8]>) -> Lin {
    const ROWS_PER_WARP: f64 = 16.0;
    const ROWS_PER_CTA: f64 = 64.0;
    let mut per_sm = [0.0f64; MOE_SMS];
    let mut heaviest = [0.0f64; MOE_SMS];
    let experts = loads.len();
    for y in 0..(outer / 64) as usize {
        for (e, &n) in loads.iter().enumerate() {
            let i = e + experts * y;
            let sm = sms.map_or(i % MOE_SMS, |s| usize::from(s[i]));
            per_sm[sm] += ROWS_PER_CTA * n;
            heaviest[sm] = heaviest[sm].max(n);
        }
    }
    // Each bound as its (parameter, units) terms, so the SMs' values need no `Lin`.
    let walk_terms = |n: f64| {
        let chain = ROWS_PER_WARP * n;
        [
            (ix::MOE_WARP_ELEM, chain * inner),
            (ix::MOE_WARP_ROW, chain),
            (ix::MOE_WALK_MISS_ELEM, chain * inner * l1_miss_share(n, inner)),
        ]
    };
    let rows_terms = |dots: f64| [(ix::MOE_SM_ELEM, dots * inner), (ix::MOE_SM_ROW, dots)];
    // The same sums, in the same order, as `Lin::term` then `add_term` make.
    let value = |terms: &[(usize, f64)]| terms.iter().fold(0.0, |v, &(i, u)| v + u * p[i]);
    let lin = |terms: &[(usize, f64)]| {
        let mut l = Lin::zero();
        terms.iter().for_each(|&(i, u)| l.add_term(p, i, u));
        l
    };
    let walk = |n: f64| lin(&walk_terms(n));
    let rows = |dots: f64| lin(&rows_terms(dots));
    let norm = p[ix::MOE_SM_SHARE_NORM];
    if norm <= 0.0 {
        let busiest = per_sm.iter().copied().fold(0.0, f64::max);
        let most = loads.iter().copied().fold(0.0, f64::max);
        return Lin::max(&walk(most), &rows(busiest));
    }
    // The slowest SM at these parameters, then its time as a Lin: the norm is homogeneous of
    // degree 1, so walk x dT/dwalk + rows x dT/drows is the time, with the right gradients.
    let times: Vec<f64> = (0..MOE_SMS)
        .map(|sm| {
            let (w, r) = (value(&walk_terms(heaviest[sm])), value(&rows_terms(per_sm[sm])));
            (w.powf(norm) + r.powf(norm)).powf(1.0 / norm)
        })
        .collect();
    // The first SM of the largest time, as a strict `>` scan keeps it.
    let slowest = (0..MOE_SMS).fold(0, |best, sm| if times[sm] > times[best] { sm } else { best });
    let (w, r) = (walk(heaviest[slowest]), rows(per_sm[slowest]));
    let t = times[slowest];
    if t <= 0.0 {
        return Lin::zero();
    }
    let mut l = w.scaled((w.value / t).powf(norm - 1.0));
    l.add(&r.scaled((r.value / t).powf(norm - 1.0)));
    l
}

/// Host time of a host-work op.
fn host_work(op: &OpDesc, p: &[f64], how: HostWork) -> Lin {
    let OpDesc::HostWork {
        tokens, measured_ns, ..
    } = op
    else {
        return Lin::zero();
    };
    match (how, measured_ns) {
        (HostWork::Measured, Some(ns)) => {
            let mut l = Lin::zero();
            l.add_const(*ns as f64);
            l
        }
        _ => {
            let mut l = Lin::term(p, ix::HOST_WORK_OP, 1.0);
            l.add_term(p, ix::HOST_WORK_TOKEN, *tokens as f64);
            l
        }
    }
}

/// Replays the executor's issue loop over `steps` with parameters `params`.
pub fn simulate(steps: &[StepDesc], params: &Params, shape: RunShape) -> Timeline {
    let p = params.to_vec();
    debug_assert_eq!(p.len(), ix::COUNT, "ix matches Params::NAMES");
    let mut host = Lin::zero();
    let mut dev = Lin::zero();
    let mut out = Timeline {
        steps: Vec::with_capacity(steps.len()),
        windows: Vec::new(),
        ops: Vec::new(),
    };
    // (point, step, device at open, host at open)
    let mut open: Option<(u64, usize, Lin, Lin)> = None;
    // How long the last window's synchronisation waited (ns), until the next launch.
    let mut wake = 0.0f64;
    for (si, step) in steps.iter().enumerate() {
        host.add_term(&p, ix::HOST_STEP, 1.0);
        let e0 = Lin::max(&dev, &host);
        for (oi, op) in step.ops.iter().enumerate() {
            match op {
                OpDesc::BeginTimed { point } => {
                    let mut waited = 0.0f64;
                    if shape.sync_windows {
                        waited = dev.value - host.value;
                        host = Lin::max(&host, &dev);
                        host.add_term(&p, ix::HOST_SYNC, 1.0);
                    }
                    host.add_term(&p, ix::HOST_EVENT, 1.0);
                    open = Some((*point, si, Lin::max(&dev, &host), host.clone()));
                    // After a long wait the window's first launch comes late.
                    wake = waited;
                }
                OpDesc::EndTimed { point } => {
                    host.add_term(&p, ix::HOST_EVENT, 1.0);
                    let end = Lin::max(&dev, &host);
                    let issued = host.clone();
                    if shape.sync_windows {
                        host = Lin::max(&host, &dev);
                        host.add_term(&p, ix::HOST_SYNC, 1.0);
                    }
                    if let Some((pt, sb, d0, h0)) = open.take() {
                        debug_assert_eq!(pt, *point, "windows do not nest");
                        out.windows.push(WindowTime {
                            point: pt,
                            step_begin: sb,
                            step_end: si,
                            device: end.sub(&d0),
                            wall: host.sub(&h0),
                            host: issued.sub(&h0),
                        });
                    }
                }
                OpDesc::HostWork { .. } => host.add(&host_work(op, &p, shape.host_work)),
                _ => {
                    let timed = shape.time_ops && op.timing_kind().is_some();
                    if timed {
                        host.add_term(&p, ix::HOST_EVENT, 1.0);
                    }
                    // What the op's own events measure: its kernels' device time plus, per
                    // kernel, the gap the events open (measured on the H200: a lone tiny op reads
                    // 4-5 us between its events while the host spends 8-9 us issuing it, so the
                    // host's issue cost does not enter; docs/timing-history.md, "Per-op and plain runs").
                    let mut own = Lin::zero();
                    for k in kernel_times(op, &p) {
                        if timed {
                            own.add(&k);
                            own.add_term(&p, ix::OP_GAP, 1.0);
                        }
                        host.add_term(&p, ix::HOST_LAUNCH, 1.0);
                        let waited = std::mem::take(&mut wake);
                        if waited > WAKE_AFTER_NS {
                            host.add_term(&p, ix::HOST_WAKE, 1.0);
                        }
                        if waited > DEEP_WAKE_AFTER_NS {
                            host.add_term(&p, ix::HOST_DEEP_WAKE, 1.0);
                        }
                        dev = Lin::max(&dev, &host);
                        dev.add(&k);
                    }
                    if timed {
                        host.add_term(&p, ix::HOST_EVENT, 1.0);
                        out.ops.push(OpTime {
                            step: si,
                            op: oi,
                            device: own,
                        });
                    }
                }
            }
        }
        // The closing event: recorded after the last op, processed after the device's work.
        host.add_term(&p, ix::HOST_STEP_END, 1.0);
        let mut dev_end = dev.clone();
        dev_end.add_term(&p, ix::HOST_STEP_END, 1.0);
        let e1 = Lin::max(&dev_end, &host);
        out.steps.push(e1.sub(&e0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::desc::AttnDesc;
    use super::super::routing::Routing;
    use super::*;

    #[test]
    fn parameter_indices_match_the_names() {
        let names = Params::NAMES;
        assert_eq!(names.len(), ix::COUNT);
        for (i, n) in [
            (ix::HOST_STEP, "host_step_ns"),
            (ix::HOST_LAUNCH, "host_launch_ns"),
            (ix::HOST_WAKE, "host_wake_ns"),
            (ix::HOST_WORK_TOKEN, "host_work_token_ns"),
            (ix::GPU_KERNEL, "gpu_kernel_ns"),
            (ix::BLOCK_OP, "block_op_ns"),
            (ix::MOE_ROUTE_SERIAL, "moe_route_serial_ns"),
            (ix::MOE_L2_BYTE, "moe_l2_byte_ns"),
            (ix::MOE_SERIAL, "moe_serial_ns"),
            (ix::MOE_SERIAL_EXPERT, "moe_serial_expert_ns"),
            (ix::MMA_BYTE, "attn_mma_byte_ns"),
            (ix::LATENT_ITER, "attn_latent_iter_ns"),
            (ix::LATENT_MMA_BYTE, "attn_latent_mma_byte_ns"),
            (ix::LATENT_MMA_ITER, "attn_latent_mma_iter_ns"),
            (ix::ATTN_WAVE, "attn_wave_ns"),
            (ix::ATTN_SPLIT, "attn_split_ns"),
            (ix::WRITE_LATENT_ELEM, "write_latent_elem_ns"),
            (ix::STATE_TOKEN, "state_token_ns"),
            (ix::OP_GAP, "op_event_gap_ns"),
            (ix::MMA_SPILL_ITER, "attn_mma_spill_iter_ns"),
            (ix::COMBINE, "attn_combine_ns"),
            (ix::COMBINE_ELEM, "attn_combine_elem_ns"),
            (ix::COMBINE_SPLIT, "attn_combine_split_ns"),
            (ix::GENERIC_COMBINE, "attn_generic_combine_ns"),
            (ix::MOE_FIXED, "moe_fixed_ns"),
            (ix::MOE_WARP_ELEM, "moe_warp_elem_ns"),
            (ix::MOE_WARP_ROW, "moe_warp_row_ns"),
            (ix::MOE_SM_ELEM, "moe_sm_elem_ns"),
            (ix::MOE_SM_ROW, "moe_sm_row_ns"),
            (ix::MMA_SPILL_FIRST_ITER, "attn_mma_spill_first_iter_ns"),
            (ix::ZERO_ITER, "zero_iter_ns"),
            (ix::COPY_ITER, "copy_iter_ns"),
            (ix::WRITE_ITER, "write_iter_ns"),
            (ix::MOE_COLD_WALK, "moe_cold_walk_ns"),
            (ix::MOE_WALK_MISS_ELEM, "moe_walk_miss_elem_ns"),
            (ix::MOE_SM_SHARE_NORM, "moe_sm_share_norm"),
            (ix::MOE_DEAL_RANDOM_SHARE, "moe_deal_random_share"),
            (ix::MOE_DEAL_PROBED_SHARE, "moe_deal_probed_share"),
        ] {
            assert_eq!(names[i], n);
        }
    }

    /// The block kernels' grid (`launch_blocks`): 2 048 vectors a chunk, at most 64 chunks.
    #[test]
    fn a_block_kernel_walks_eight_iterations_below_two_mib_and_more_beyond() {
        assert_eq!(block_walk(1, 16 << 10), 4.0); // one chunk of 1 024 vectors
        assert_eq!(block_walk(1, 192 << 10), 8.0);
        assert_eq!(block_walk(1, 1344 << 10), 8.0); // blind3's blocks
        assert_eq!(block_walk(1, 2 << 20), 8.0);
        assert_eq!(block_walk(1, 4 << 20), 16.0); // 64 chunks of 4 096 vectors
        assert_eq!(block_walk(16, 4 << 20), 16.0); // 1 024 CTAs: one wave
        assert_eq!(block_walk(20, 4 << 20), 32.0); // 1 280 CTAs: two
    }

    /// A row of 8 heads of 128 walks 8 iterations a thread: 7 beyond the first are priced
    /// when they outweigh the elements, wave by wave; descriptions without the count (0) and
    /// one-iteration rows price the elements alone, as before.
    #[test]
    fn a_write_costs_the_larger_of_its_elements_and_its_walk() {
        let write = |rows: u64, row_iters: u64| OpDesc::WriteKv {
            group: 0,
            rows,
            elems: rows * 2048,
            latent: false,
            row_iters,
        };
        let mut params = Params::h200();
        params.write_row_ns = 0.0;
        params.write_iter_ns = 200.0;
        let p = params.to_vec();
        let t = |op: &OpDesc, p: &[f64]| kernel_times(op, p)[0].value - p[ix::GPU_KERNEL];
        let elems = |rows: u64| (rows * 2048) as f64 * p[ix::WRITE_ELEM];
        assert_eq!(t(&write(60, 8), &p), 7.0 * 200.0);
        assert_eq!(t(&write(60, 1), &p), elems(60));
        assert_eq!(t(&write(60, 0), &p), elems(60));
        // A long prefill is the elements' cost.
        assert_eq!(t(&write(100_000, 8), &p), elems(100_000));
        // Without an element cost the walk shows its waves: 2 113 rows take two of 2 112
        // resident CTAs.
        params.write_elem_ns = 0.0;
        let p = params.to_vec();
        assert_eq!(t(&write(2112, 8), &p), 7.0 * 200.0);
        assert_eq!(t(&write(2113, 8), &p), 2.0 * 7.0 * 200.0);
    }

    /// With a walk rate, copies of small and large blocks cost alike until the bytes dominate;
    /// without one (files from before it), the bytes alone price them, as they did.
    #[test]
    fn a_copy_costs_the_larger_of_its_bytes_and_its_walk() {
        let copy = |blocks: u64, block_bytes: u64| OpDesc::CopyBlocks {
            blocks,
            bytes: 2 * blocks * block_bytes,
        };
        let mut params = Params::h200();
        params.block_op_ns = 0.0;
        let old = params.to_vec();
        let t = |op: &OpDesc, p: &[f64]| kernel_times(op, p)[0].value - p[ix::GPU_KERNEL];
        assert!((t(&copy(1, 1 << 20), &old) - 2.0 * f64::from(1 << 20) * old[ix::COPY_BYTE]).abs() < 1e-6);
        params.copy_iter_ns = 600.0;
        let p = params.to_vec();
        assert_eq!(t(&copy(1, 192 << 10), &p), 8.0 * 600.0);
        assert_eq!(t(&copy(1, 1344 << 10), &p), 8.0 * 600.0);
        // 16 blocks of 2 MiB move 64 MiB: the bytes are the larger.
        assert_eq!(t(&copy(16, 2 << 20), &p), 64.0 * f64::from(1 << 20) * p[ix::COPY_BYTE]);
        // A zero walks at its own rate.
        params.zero_iter_ns = 250.0;
        let p = params.to_vec();
        let zero = OpDesc::ZeroBlocks {
            blocks: 1,
            bytes: 192 << 10,
        };
        assert_eq!(
            t(&zero, &p),
            (8.0 * 250.0f64).max(f64::from(192 << 10) * p[ix::ZERO_BYTE])
        );
    }

    /// A latency-bound decode: 8 CTAs of one wave, each walking 8 192 positions (64 iterations).
    fn long_walk(family: Family, head_dim: u32) -> OpDesc {
        OpDesc::Decode {
            launches: vec![AttnDesc {
                module: format!("attn_mma_d{head_dim}_h4"),
                family,
                seqs: 1,
                bytes: 1,
                ctas: 8,
                resident: 264,
                nsplit: 1,
                split_tokens: 8192,
                head_dim,
                head_tile: 4,
            }],
        }
    }

    /// A latency-bound decode (few bytes, long splits): its CTA walk grows with the head dim.
    #[test]
    fn a_decode_walk_costs_in_proportion_to_its_head_dim() {
        let p = Params::h200().to_vec();
        let walk = |family, head_dim| {
            let op = long_walk(family, head_dim);
            let t = kernel_times(&op, &p)[0].value - p[ix::GPU_KERNEL] - p[ix::ATTN_WAVE];
            t / (64.0
                * p[if family == Family::Mma {
                    ix::MMA_ITER
                } else {
                    ix::LATENT_MMA_ITER
                }])
        };
        assert!((walk(Family::Mma, 128) - 1.0).abs() < 1e-9);
        assert!((walk(Family::Mma, 256) - 2.0).abs() < 1e-9);
        assert!((walk(Family::Mma, 64) - 0.5).abs() < 1e-9);
        // MLA kernels keep their own per-iteration rate, whatever the latent width.
        assert!((walk(Family::LatentMma, 576) - 1.0).abs() < 1e-9);
    }

    /// Beyond a head dim of 128 the tensor-core walk also pays the spill term, per 128 dims
    /// beyond 128: its first iteration at its own rate, every further one at the per-iteration
    /// rate; smaller head dims and MLA kernels do not.
    #[test]
    fn a_tensor_core_walk_beyond_head_dim_128_pays_the_spill_term() {
        let mut params = Params::h200();
        params.attn_mma_spill_iter_ns = 5000.0;
        params.attn_mma_spill_first_iter_ns = 700.0;
        let p = params.to_vec();
        let walk = |family, head_dim| {
            let op = long_walk(family, head_dim);
            let t = kernel_times(&op, &p)[0].clone();
            (
                t.value - p[ix::GPU_KERNEL] - p[ix::ATTN_WAVE],
                t.coef[ix::MMA_SPILL_ITER],
                t.coef[ix::MMA_SPILL_FIRST_ITER],
            )
        };
        let iters = 64.0;
        let (d256, spill256, first256) = walk(Family::Mma, 256);
        assert_eq!((spill256, first256), (iters - 1.0, 1.0));
        let want = iters * 2.0 * p[ix::MMA_ITER] + 700.0 + (iters - 1.0) * 5000.0;
        assert!((d256 - want).abs() < 1e-6, "{d256}");
        let (_, spill512, first512) = walk(Family::Mma, 512);
        assert_eq!((spill512, first512), (3.0 * (iters - 1.0), 3.0));
        for head_dim in [64, 96, 128] {
            let (t, spill, first) = walk(Family::Mma, head_dim);
            assert_eq!((spill, first), (0.0, 0.0));
            assert!((t - iters * p[ix::MMA_ITER] * f64::from(head_dim) / 128.0).abs() < 1e-6);
        }
        assert_eq!(walk(Family::LatentMma, 576).1, 0.0);
    }

    /// A decode with splits pays the combine once per launch: the fixed cost, and per output
    /// element a thread of the last CTA folds (its rows x head dim over 128 threads), once and
    /// per split; the CUDA-core kernel its extra fixed cost; one split and MLA kernels nothing.
    #[test]
    fn a_split_decode_pays_the_combine_once_per_launch() {
        let p = Params::h200().to_vec();
        let combine = |family, head_dim, head_tile, nsplit, ctas| {
            let op = OpDesc::Decode {
                launches: vec![AttnDesc {
                    module: "m".into(),
                    family,
                    seqs: 1,
                    bytes: 1,
                    ctas,
                    resident: 264,
                    nsplit,
                    split_tokens: 256,
                    head_dim,
                    head_tile,
                }],
            };
            let t = kernel_times(&op, &p)[0].clone();
            [ix::COMBINE, ix::COMBINE_ELEM, ix::COMBINE_SPLIT, ix::GENERIC_COMBINE].map(|i| t.coef[i])
        };
        // 4 rows of 128 dims: 4 elements per thread; 8 splits in 2 waves still combine once.
        assert_eq!(combine(Family::Mma, 128, 4, 8, 528), [1.0, 4.0, 32.0, 0.0]);
        assert_eq!(combine(Family::Mma, 64, 1, 2, 2), [1.0, 1.0, 2.0, 0.0]);
        assert_eq!(combine(Family::Generic, 80, 1, 3, 3), [1.0, 1.0, 3.0, 1.0]);
        assert_eq!(combine(Family::Mma, 128, 4, 1, 8), [0.0; 4]);
        assert_eq!(combine(Family::LatentMma, 576, 8, 4, 32), [0.0; 4]);
    }

    /// A MoE op pays its own fixed cost once (in its router kernel), whatever its load.
    #[test]
    fn a_moe_op_pays_its_fixed_cost_once() {
        let p = Params::h200().to_vec();
        for counts in [vec![1, 0, 0, 0], vec![7, 3, 9, 1]] {
            let op = OpDesc::Moe {
                tokens: counts.iter().sum::<u32>().into(),
                top_k: 1,
                experts: 4,
                hidden: 1024,
                ffn: 512,
                hidden_state: false,
                routing: Routing::from_counts(&counts, "replicated"),
            };
            let fixed: Vec<f64> = kernel_times(&op, &p).iter().map(|k| k.coef[ix::MOE_FIXED]).collect();
            assert_eq!(fixed, [0.0, 1.0, 0.0, 0.0], "{counts:?}");
        }
    }

    /// The cold walk prices the most loaded expert's tokens x the dot length in each GEMM by
    /// the share of chosen experts whose weights come from DRAM: all of it on a first use,
    /// none when every expert is resident, half when half are.
    #[test]
    fn a_moe_walk_is_dearer_by_the_share_of_experts_from_dram() {
        let p = Params::h200().to_vec();
        let cold_walk = |fresh: f64| {
            let mut routing = Routing::from_counts(&[6, 2, 0, 0], "replicated");
            routing.fresh = fresh;
            let op = OpDesc::Moe {
                tokens: 8,
                top_k: 1,
                experts: 4,
                hidden: 1024,
                ffn: 512,
                hidden_state: false,
                routing,
            };
            kernel_times(&op, &p)
                .iter()
                .map(|k| k.coef[ix::MOE_COLD_WALK])
                .collect::<Vec<f64>>()
        };
        assert_eq!(cold_walk(2.0), [0.0, 0.0, 6.0 * 1024.0, 6.0 * 512.0]);
        assert_eq!(cold_walk(1.0), [0.0, 0.0, 3.0 * 1024.0, 3.0 * 512.0]);
        assert_eq!(cold_walk(0.0), [0.0; 4]);
        // Profiles without the parameter load it as 0: they predict as before.
        assert_eq!(Params::h200().moe_cold_walk_ns, 0.0);
    }

    /// A MoE GEMM's serial part is the larger of the most loaded expert's warp walk and the
    /// busiest SM's row-dots: with one loaded expert the walk sets it, with every expert of a
    /// wide grid loaded the SM does; the two sides are exactly the model's terms.
    #[test]
    fn a_moe_gemm_is_the_larger_of_its_warp_walk_and_its_busiest_sm() {
        let mut p = Params::h200().to_vec();
        p[ix::MOE_WARP_ELEM] = 1.0;
        p[ix::MOE_WARP_ROW] = 10.0;
        p[ix::MOE_SM_ELEM] = 0.1;
        p[ix::MOE_SM_ROW] = 1.0;
        // One expert of 8 loaded with 5 tokens: up grid 8 x 8 CTAs, one per SM.
        let lone = gemm_walk(&p, &[5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 1024.0, 512);
        assert_eq!(lone.coef[ix::MOE_WARP_ELEM], 16.0 * 5.0 * 1024.0);
        assert_eq!(lone.coef[ix::MOE_WARP_ROW], 16.0 * 5.0);
        assert_eq!(lone.coef[ix::MOE_SM_ELEM], 0.0);
        // 256 experts with 3 tokens each: 2 048 CTAs over 132 SMs, the busiest holds 16 of them
        // (64 rows x 3 tokens each): 3 072 row-dots against a walk of 48.
        let wide = gemm_walk(&p, &[3.0; 256], 1024.0, 512);
        assert_eq!(wide.coef[ix::MOE_SM_ROW], 16.0 * 64.0 * 3.0);
        assert_eq!(wide.coef[ix::MOE_SM_ELEM], 16.0 * 64.0 * 3.0 * 1024.0);
        assert_eq!(wide.coef[ix::MOE_WARP_ELEM], 0.0);
        assert!((wide.eval(&p) - wide.value).abs() < 1e-6);
        // A profile without the terms (all zero) prices nothing here: old profiles predict as before.
        let old = Params::h200().to_vec();
        assert_eq!(gemm_walk(&old, &[3.0; 256], 1024.0, 512).value, 0.0);
    }

    /// With a norm, an SM's walk and row-dots combine as (walk^p + rows^p)^(1/p), and the
    /// linearisation is the time itself (the norm is homogeneous): two equal bounds give
    /// 2^(1/p) times either, where the larger alone gave 1x; one bound alone is itself.
    #[test]
    fn a_normed_moe_gemm_combines_an_sms_walk_and_rows() {
        let mut p = Params::h200().to_vec();
        p[ix::MOE_WARP_ROW] = 4.0;
        p[ix::MOE_SM_ROW] = 1.0;
        p[ix::MOE_SM_SHARE_NORM] = 4.0;
        // One loaded expert of 8 (up grid 8 x 8, one CTA per SM): walk 16 x 5 row-dots x 4 ns
        // = 320, rows 64 x 5 x 1 ns = 320.
        let one = gemm_walk(&p, &[5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 1024.0, 512);
        let both = 320.0 * 2f64.powf(0.25);
        assert!((one.value - both).abs() < 1e-9, "{}", one.value);
        assert!((one.eval(&p) - one.value).abs() < 1e-9);
        // Each side's coefficient is its units times (its share)^(p-1).
        let share = (320.0 / both).powf(3.0);
        assert!((one.coef[ix::MOE_WARP_ROW] - 80.0 * share).abs() < 1e-9);
        assert!((one.coef[ix::MOE_SM_ROW] - 320.0 * share).abs() < 1e-9);
        // Rows alone (no walk rate): the SM's row-dots.
        p[ix::MOE_WARP_ROW] = 0.0;
        let rows = gemm_walk(&p, &[5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 1024.0, 512);
        assert!((rows.value - 320.0).abs() < 1e-9);
        // The slowest SM sets it: 140 loaded experts deal CTAs 132.. onto SMs 0..; SM 0 holds
        // experts 0 and 132, each 64 rows x 5 tokens.
        let wide = gemm_walk(&p, &[5.0; 140], 1024.0, 64);
        assert!((wide.value - 640.0).abs() < 1e-9);
    }

    /// Every random dealing is balanced (each SM floor or ceil of ctas / 132 CTAs), the same
    /// grid always gets the same dealings, and different draws differ.
    #[test]
    fn random_dealings_are_balanced_fixed_and_distinct() {
        for ctas in [1usize, 131, 132, 133, 320, 1280] {
            let mut draws: Vec<Vec<u8>> = Vec::new();
            random_deals(ctas, |sms| draws.push(sms.to_vec()));
            assert_eq!(draws.len(), DEAL_DRAWS as usize);
            for sms in &draws {
                assert_eq!(sms.len(), ctas);
                let mut per_sm = [0usize; MOE_SMS];
                sms.iter().for_each(|&s| per_sm[usize::from(s)] += 1);
                let (lo, hi) = (ctas / MOE_SMS, ctas.div_ceil(MOE_SMS));
                assert!(per_sm.iter().all(|&c| c == lo || c == hi), "{ctas}: {per_sm:?}");
            }
            let mut again: Vec<Vec<u8>> = Vec::new();
            random_deals(ctas, |sms| again.push(sms.to_vec()));
            assert_eq!(draws, again);
            if ctas > 132 {
                assert_ne!(draws[0], draws[1]);
            }
        }
    }

    /// Launch order stacks a loaded expert's CTAs on one SM when the expert count divides 132
    /// twice over the grid (66 experts, 4 rows of CTAs: CTAs 0 and 132 on SM 0); random dealings
    /// mostly part them, and a share prices the mix of the two.
    #[test]
    fn a_random_dealing_share_mixes_launch_order_and_random_placements() {
        let mut p = Params::h200().to_vec();
        p[ix::MOE_SM_ROW] = 1.0;
        let mut loads = vec![0.0; 66];
        loads[0] = 5.0;
        let launch = gemm_walk(&p, &loads, 1024.0, 256);
        assert!(
            (launch.value - 640.0).abs() < 1e-9,
            "two CTAs of 64 x 5 row-dots on SM 0"
        );
        p[ix::MOE_DEAL_RANDOM_SHARE] = 1.0;
        let random = gemm_walk(&p, &loads, 1024.0, 256);
        assert!(random.value >= 320.0 && random.value < 640.0, "{}", random.value);
        p[ix::MOE_DEAL_RANDOM_SHARE] = 0.25;
        let mixed = gemm_walk(&p, &loads, 1024.0, 256);
        assert!((mixed.value - (0.75 * 640.0 + 0.25 * random.value)).abs() < 1e-9);
        assert!((mixed.eval(&p) - mixed.value).abs() < 1e-9);
    }

    /// A grid the H100 probe covered is priced where the probe saw its CTAs: of 19 experts by 8
    /// rows, expert 14's CTAs 90 and 147 shared SM 14 there, which launch order mod 132 keeps
    /// apart (SMs 90 and 15); grids it did not cover keep the other rule.
    #[test]
    fn a_probed_dealing_share_prices_the_grids_the_probe_placed() {
        let mut p = Params::h200().to_vec();
        p[ix::MOE_SM_ROW] = 1.0;
        let mut loads = vec![0.0; 19];
        loads[14] = 5.0;
        let launch = gemm_walk(&p, &loads, 1024.0, 512);
        assert!((launch.value - 320.0).abs() < 1e-9, "one CTA of 64 x 5 row-dots an SM");
        p[ix::MOE_DEAL_PROBED_SHARE] = 1.0;
        let probed = gemm_walk(&p, &loads, 1024.0, 512);
        assert!(
            (probed.value - 640.0).abs() < 1e-9,
            "CTAs 90 and 147 on one SM: {}",
            probed.value
        );
        p[ix::MOE_DEAL_PROBED_SHARE] = 0.5;
        let mixed = gemm_walk(&p, &loads, 1024.0, 512);
        assert!((mixed.value - 480.0).abs() < 1e-9, "{}", mixed.value);
        assert!((mixed.eval(&p) - mixed.value).abs() < 1e-9);
        // 97 experts: beyond the probe, launch order as before.
        let mut wide = vec![0.0; 97];
        wide[14] = 5.0;
        p[ix::MOE_DEAL_PROBED_SHARE] = 1.0;
        assert!((gemm_walk(&p, &wide, 1024.0, 512).value - 320.0).abs() < 1e-9);
    }

    /// The walk is dearer per element where one CTA's token rows (tokens x inner x 4 bytes)
    /// outgrow L1: nothing up to 64 KiB, all of it from 256 KiB, linear between.
    #[test]
    fn a_moe_walk_pays_the_l1_miss_rate_on_rows_beyond_l1() {
        assert_eq!(l1_miss_share(16.0, 1024.0), 0.0);
        assert_eq!(l1_miss_share(64.0, 1024.0), 1.0);
        assert_eq!(l1_miss_share(40.0, 1024.0), 0.5);
        let mut p = Params::h200().to_vec();
        p[ix::MOE_WALK_MISS_ELEM] = 1.0;
        let miss = |n: f64| gemm_walk(&p, &[n, 0.0, 0.0, 0.0], 512.0, 512).coef[ix::MOE_WALK_MISS_ELEM];
        assert_eq!(miss(32.0), 0.0);
        assert_eq!(miss(256.0), 16.0 * 256.0 * 512.0);
        // Files without the rate price as before.
        assert_eq!(Params::h200().moe_walk_miss_elem_ns, 0.0);
        assert_eq!(Params::h200().moe_sm_share_norm, 0.0);
    }

    /// A state update's time: per serial step plus per token walked.
    #[test]
    fn a_state_update_prices_its_tokens_and_its_serial_steps() {
        let p = Params::h200().to_vec();
        let op = OpDesc::StateUpdate {
            serial: 2 * 4096,
            tokens: 4096,
            bytes: 0,
        };
        let t = kernel_times(&op, &p)[0].value;
        let want = p[ix::GPU_KERNEL] + 8192.0 * p[ix::STATE_SERIAL] + 4096.0 * p[ix::STATE_TOKEN];
        assert!((t - want).abs() < 1e-6, "{t} vs {want}");
    }

    fn decode(bytes: u64) -> OpDesc {
        OpDesc::Decode {
            launches: vec![AttnDesc {
                module: "attn_mma_d128_h4".into(),
                family: Family::Mma,
                seqs: 32,
                bytes,
                ctas: 512,
                resident: 264,
                nsplit: 1,
                split_tokens: 1024,
                head_dim: 128,
                head_tile: 4,
            }],
        }
    }

    fn step(ops: Vec<OpDesc>) -> StepDesc {
        StepDesc {
            step: 0,
            batch: 1,
            new_tokens: 1,
            ctx_tokens: 1,
            kv_bytes: 0,
            decode_only: true,
            ops,
        }
    }

    #[test]
    fn linearisation_reproduces_the_value() {
        let shape = RunShape {
            time_ops: true,
            sync_windows: true,
            host_work: HostWork::Measured,
        };
        let steps = vec![step(vec![
            OpDesc::BeginTimed { point: 3 },
            OpDesc::HostWork {
                origin: "cache_blocks".into(),
                tokens: 64,
                measured_ns: Some(7000),
            },
            OpDesc::WriteKv {
                group: 0,
                rows: 64,
                elems: 64 * 4096,
                latent: false,
                row_iters: 16,
            },
            decode(600_000_000),
            OpDesc::EndTimed { point: 3 },
        ])];
        let params = Params::h200();
        let t = simulate(&steps, &params, shape);
        let p = params.to_vec();
        for l in t
            .steps
            .iter()
            .chain(t.windows.iter().map(|w| &w.device))
            .chain(t.ops.iter().map(|o| &o.device))
        {
            assert!((l.eval(&p) - l.value).abs() < 1e-6 * l.value.max(1.0), "{l:?}");
        }
        assert_eq!(t.windows.len(), 1);
        assert_eq!(t.ops.len(), 2);
        // A big decode is bandwidth bound: about bytes x attn_mma_byte_ns.
        let d = t.ops[1].device.value;
        assert!(
            d > 600e6 * params.attn_mma_byte_ns && d < 600e6 * params.attn_mma_byte_ns * 1.1,
            "{d}"
        );
        // The window includes the host work (the device idles while the host spins).
        assert!(t.windows[0].device.value > 7000.0 + d);
    }

    /// Per-op timing measures an op's own kernels plus one event gap per kernel: never the
    /// host's issue cost (plain runs carry that), and the gap is in no plain step.
    #[test]
    fn an_op_timed_alone_is_its_kernels_plus_the_event_gap() {
        let write = OpDesc::WriteKv {
            group: 0,
            rows: 8,
            elems: 8 * 1024,
            latent: false,
            row_iters: 8,
        };
        let mut params = Params::h200();
        params.host_launch_ns = 50_000.0;
        let p = params.to_vec();
        let kernels: f64 = kernel_times(&write, &p).iter().map(|k| k.value).sum();
        let timed = |op_event_gap_ns: f64, time_ops: bool| {
            let params = Params {
                op_event_gap_ns,
                ..params.clone()
            };
            let shape = RunShape {
                time_ops,
                sync_windows: false,
                host_work: HostWork::Predicted,
            };
            simulate(&[step(vec![write.clone()])], &params, shape)
        };
        let t = timed(1500.0, true);
        assert_eq!(t.ops.len(), 1);
        assert!((t.ops[0].device.value - (kernels + 1500.0)).abs() < 1e-6);
        assert_eq!(t.ops[0].device.coef[ix::OP_GAP], 1.0);
        assert_eq!(t.ops[0].device.coef[ix::HOST_LAUNCH], 0.0);
        let plain = |gap| timed(gap, false).steps[0].value;
        assert_eq!(plain(0.0), plain(1500.0));
        assert!(timed(1500.0, false).ops.is_empty());
    }
}
