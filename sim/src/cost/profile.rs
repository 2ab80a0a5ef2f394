//! The hardware profile: every parameter of the cost model, named, in nanoseconds per unit.
//!
//! A profile is data (`kvsim-profile/1` JSON): the built-in `h200` holds roofline defaults
//! (datasheet-like rates and guessed overheads, not measured); `kvsim calibrate` writes one
//! fitted to GPU results. Every prediction carries the name, the hash and the parameters of the
//! profile it came from.

use std::collections::BTreeMap;

use kvsim_core::plan::json_path;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The profile format tag.
pub const PROFILE_FORMAT: &str = "kvsim-profile/1";

macro_rules! params {
    ($( $(#[doc = $doc:literal])* $name:ident = $default:expr ),+ $(,)?) => {
        /// The model's parameters (nanoseconds per unit; the unit is in each name's doc).
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct Params {
            $( $(#[doc = $doc])* pub $name: f64, )+
        }

        impl Params {
            /// Parameter names, in the order of [`Params::to_vec`].
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),+];

            /// The H200 roofline defaults.
            pub fn h200() -> Params {
                Params { $( $name: $default, )+ }
            }

            /// The parameters as a vector (fit order).
            pub fn to_vec(&self) -> Vec<f64> {
                vec![$(self.$name),+]
            }

            /// The inverse of [`Params::to_vec`] (`v` has one value per name).
            pub fn from_vec(v: &[f64]) -> Params {
                assert_eq!(v.len(), Self::NAMES.len(), "one value per parameter");
                let mut it = v.iter().copied();
                Params { $( $name: it.next().expect("length checked"), )+ }
            }
        }
    };
}

params! {
    /// Host: per step (its two events, the loop).
    host_step_ns = 3000.0,
    /// Host: from a step's last op to its closing event (the end-of-step event record).
    host_step_end_ns = 1300.0,
    /// Host: per kernel launch (memsets included).
    host_launch_ns = 2900.0,
    /// Host: per extra event record (per-op timing, window marks).
    host_event_ns = 800.0,
    /// Host: per stream synchronisation (timed windows open and close on an idle device).
    host_sync_ns = 10000.0,
    /// Host: extra cost of the first launch after a synchronisation that waited more than 2 ms
    /// for the device (seen on the H200 machine: the issuing thread comes back slow).
    host_wake_ns = 12000.0,
    /// Host: further extra cost of that launch when the wait was longer than 20 ms.
    host_deep_wake_ns = 20000.0,
    /// Host: predicted host work (block registration and other scheduler bookkeeping inside a
    /// timed window), per plan op.
    host_work_op_ns = 500.0,
    /// Host: predicted host work per token a `cache_blocks` op registers.
    host_work_token_ns = 2.0,
    /// Device: fixed cost of one kernel (launch latency, ramp, tail).
    gpu_kernel_ns = 1600.0,
    /// `write_kv`: per CTA (one written token x one layer).
    write_row_ns = 1.0,
    /// `write_kv`: per K/V element written (bf16; V is transposed, so writes are scattered).
    write_elem_ns = 0.004,
    /// `zero_blocks`: per byte zeroed.
    zero_byte_ns = 0.0003,
    /// `copy_blocks`: per byte read or written.
    copy_byte_ns = 0.0003,
    /// `zero_blocks` / `copy_blocks`: per block.
    block_op_ns = 50.0,
    /// `state_update`: per serial step of one thread (state elements per thread x tokens).
    state_serial_ns = 15.0,
    /// MoE router: per multiply-accumulate (tokens x experts x hidden), throughput.
    moe_route_mac_ns = 0.0001,
    /// MoE router: per expert a CTA scores one after the other (experts x waves of tokens).
    moe_route_serial_ns = 100.0,
    /// MoE expert GEMMs: per weight byte of the chosen experts the previous MoE op did not use
    /// (from DRAM).
    moe_weight_byte_ns = 0.00004,
    /// MoE expert GEMMs: per weight byte of chosen experts the previous MoE op used (L2).
    moe_l2_byte_ns = 0.00002,
    /// MoE expert GEMMs: once per GEMM when some chosen expert is fresh (its CTAs' first pass
    /// over their weight rows misses the caches).
    moe_cold_ns = 10000.0,
    /// MoE expert GEMMs: per multiply-accumulate (tokens x top-k x ffn x hidden), throughput.
    moe_mac_ns = 0.0003,
    /// MoE expert GEMMs: per unit of the most loaded expert's serial work, its tokens x the
    /// dot length (hidden for up, ffn for down): one CTA walks its tokens one by one.
    moe_serial_ns = 7.0,
    /// MoE expert GEMMs: per token of the most loaded expert x experts (empirical: the serial
    /// cost per token grew with the expert count on the H200, cause not identified).
    moe_serial_expert_ns = 150.0,
    /// Decode, tensor-core kernel: per K/V byte read.
    attn_mma_byte_ns = 0.00026,
    /// Decode, tensor-core kernel: per wave x 128-position iterations of one CTA.
    attn_mma_iter_ns = 1500.0,
    /// Decode, CUDA-core generic kernel: per K/V byte read.
    attn_generic_byte_ns = 0.0015,
    /// Decode, generic kernel: per wave x 128-position iterations of one CTA.
    attn_generic_iter_ns = 6000.0,
    /// Decode, MLA latent kernel: per latent byte read.
    attn_latent_byte_ns = 0.004,
    /// Decode, latent kernel: per wave x 128-position iterations of one CTA.
    attn_latent_iter_ns = 6000.0,
    /// Decode: per wave of CTAs (start-up).
    attn_wave_ns = 2000.0,
    /// Decode: per split of a request the last CTA of its split group combines.
    attn_split_ns = 700.0,
    /// Decode, tensor-core MLA latent kernel: per latent byte read (a read-only stream, one CTA
    /// per SM with bulk copies: faster per byte than the K/V kernel on the H200).
    attn_latent_mma_byte_ns = 0.00023,
    /// Decode, tensor-core MLA latent kernel: per wave x 128-position iterations of one CTA.
    attn_latent_mma_iter_ns = 1500.0,
    /// `write_kv` of an MLA group: per latent element written (rows written whole, no
    /// transposed plane: cheaper per element than K/V).
    write_latent_elem_ns = 0.002,
    /// `state_update`: per token one thread walks (its fixed part: the token's inputs and the
    /// step's synchronisation), times the waves.
    state_token_ns = 30.0,
    /// Per-op timing (`--time-ops`) only: device time an op's own pair of events measures per
    /// kernel beyond the kernel's work (the gap between an event and the launch it brackets).
    /// Plain runs never carry it, so the fixed costs of kernels queued back to back stay the
    /// plain runs' to fit.
    op_event_gap_ns = 1500.0,
    /// Decode, tensor-core kernel: per wave x 128-position iterations of one CTA, per 128 head
    /// dims beyond 128. Each thread keeps its next K and V tiles in registers (HD/8 16-byte
    /// loads each, HD registers in all); at a head dim of 256 they alone fill the 255 registers
    /// a thread may use, so they spill to local memory and the walk grows faster than the head
    /// dim (gpu/src/cuda/attn_mma.cu; microbenchmark `attn-d256-kv4`).
    attn_mma_spill_iter_ns = 0.0,
    /// Decode with splits (tensor-core and CUDA-core K/V kernels): once per launch, the split
    /// combine's fixed cost (each CTA's fence and counter, the last CTA's wait for the others;
    /// gpu/src/cuda/prelude.cuh `combine_if_last`).
    attn_combine_ns = 0.0,
    /// Decode with splits: per output element one thread of the combining CTA folds.
    attn_combine_elem_ns = 0.0,
    /// Decode with splits: per output element a thread folds, per split (its partial maxima,
    /// sums and rows read from L2).
    attn_combine_split_ns = 0.0,
    /// Decode with splits, CUDA-core K/V kernel only: its combine's extra fixed cost (measured
    /// by the microbenchmarks: about 48 µs from one split to two).
    attn_generic_combine_ns = 0.0,
    /// MoE: once per op, the layer's own fixed device cost beyond its four kernels' (the up and
    /// down kernels' first weight rows, the routing lists' set-up). Without it the MoE op's fixed
    /// cost is `gpu_kernel_ns`, which every kernel family shares, and the fit priced small loads
    /// through `moe_cold_ns` instead (+14-61 % at 1-16 token-expert pairs, docs/timing-history.md).
    moe_fixed_ns = 0.0,
    /// MoE expert GEMMs, latency side: per element of one warp's serial walk (a CTA's warps each
    /// take 16 weight rows and walk the expert's tokens one by one, a row-dot of the inner size
    /// per token and row; the most loaded expert's warp sets it). Weighed against the SM side
    /// below: the larger of the two is the GEMM's serial time.
    moe_warp_elem_ns = 0.0,
    /// MoE expert GEMMs, latency side: per row-dot of that walk (its reduction and store).
    moe_warp_row_ns = 0.0,
    /// MoE expert GEMMs, throughput side: per element of all the row-dots the busiest SM runs
    /// (the grid's CTAs dealt to SMs in launch order; CTAs of experts without tokens leave at once).
    moe_sm_elem_ns = 0.0,
    /// MoE expert GEMMs, throughput side: per row-dot the busiest SM runs.
    moe_sm_row_ns = 0.0,
    /// Decode, tensor-core kernel: `attn_mma_spill_iter_ns` for a CTA's first 128-position
    /// iteration alone. The microbenchmarks' d256 walks took about 25 µs for two launches of one
    /// iteration and about 24 µs more per launch for each further iteration (H100), so one rate
    /// for every iteration over-priced short walks twice over. Files without it meant the
    /// per-iteration rate.
    attn_mma_spill_first_iter_ns = 0.0,
    /// `zero_blocks`: per iteration of one thread's walk (one 16-byte store per iteration),
    /// weighed against the bytes: the larger of the two is the kernel's work.
    zero_iter_ns = 0.0,
    /// `copy_blocks`: per iteration of one thread's walk (a 16-byte load, then its store).
    /// Below 2 MiB a block is 8 iterations whatever its size, so copies of 192 KiB and of
    /// 1.3 MiB blocks take about as long (blind2-blind5's chain plans, H100); priced by bytes
    /// alone, the large ones were +67 % and the middling ones -31 %.
    copy_iter_ns = 0.0,
    /// `write_kv`: per iteration of one thread's walk over a row beyond the first (a row of
    /// kv_heads x head_dim elements, 128 threads a CTA), weighed against the elements: the
    /// per-op runs timed a one-token write of 8 heads of 128 (8 iterations) at 6.5 µs and one
    /// of one head (1 iteration) at 5.1 µs (H100).
    write_iter_ns = 0.0,
    /// MoE expert GEMMs: per token of the most loaded expert x the dot length, times the share
    /// of chosen experts whose weights come from DRAM (`fresh` / `active`). The per-op runs of
    /// two Mamba layouts at top-4 put the walk's cost per token on whether the weights were in
    /// L2: 16 experts, all resident, ran 506 µs at 51-80 tokens where `h100-c1` said 568; 20
    /// experts, none resident, 618 µs where it said 577 (blind13, blind14; docs/timing-history.md).
    moe_cold_walk_ns = 0.0,
    /// MoE expert GEMMs, latency side: per element of the walk beyond `moe_warp_elem_ns` where
    /// the walking CTA's token rows no longer stay in L1 between its weight rows (a ramp from
    /// 64 KiB of rows to 256 KiB; `gemm_walk` in cost/model.rs). Measured alone on the H100
    /// (`scripts/timing/moe_kernels.cu`): one expert's up walk cost 14 us a token up to 16 tokens
    /// and 18.2 us from 128 on.
    moe_walk_miss_elem_ns = 0.0,
    /// MoE expert GEMMs: how an SM's walk and row-dots combine, the exponent p of
    /// (walk^p + rows^p)^(1/p); 0 takes the larger (as files without it did). Not a rate: set,
    /// not fitted. Two equally loaded CTAs on one SM ran 1.3x as long as one on the H100, 3 of
    /// them 1.6x, 6 of them 3.1x (`moe_kernels.cu`), which p near 3-4 follows.
    moe_sm_share_norm = 0.0,
    /// MoE expert GEMMs: the share of the grid's dealing to SMs priced as a balanced random
    /// placement (the mean over 16 fixed draws), the rest in launch order mod 132; 0 is launch
    /// order alone (as files without it did). Not a rate: set, not fitted. The H100 spreads a
    /// grid's CTAs evenly (the busiest SM holds ceil(N / 132)), and CTAs 132 apart share an SM
    /// for a part of the grid only: of the CTA pairs the `place` probes saw share an SM, 39 % are
    /// pairs launch order mod 132 puts together (`moe_kernels.cu`, docs/timing-history.md).
    moe_deal_random_share = 0.0,
    /// MoE expert GEMMs: the share of the dealing priced by where a probe saw an H100 place the
    /// grid's CTAs (`cost/deal_table.rs`, grids of 1-96 experts by 8 or 16 rows), the rest as
    /// `moe_deal_random_share` says; grids the probe did not cover take that rule alone. 0 (as
    /// files without it did) reads no probe. Not a rate: set, not fitted. Each grid's launches
    /// grouped its CTAs on SMs alike; another H100 grouped 85 % of its probed pairs the same way.
    moe_deal_probed_share = 0.0,
}

/// A named parameter set, with what the device's decode kernels keep resident.
/// `kvsim-profile/1` (`kvsim schema profile`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Always "kvsim-profile/1".
    pub format: String,
    /// The profile's name.
    pub name: String,
    /// What it describes.
    #[serde(default)]
    pub description: String,
    /// Streaming multiprocessors (the split heuristic and wave counts use it).
    pub sm_count: u32,
    /// Decode CTAs resident on the whole device, per kernel module (`attn_mma_d128_h4`, ...);
    /// a kernel not listed gets [`Profile::default_resident`].
    #[serde(default)]
    pub resident_ctas: BTreeMap<String, u64>,
    /// Its parameters.
    pub params: Params,
    /// Where a calibrated profile came from (not part of its hash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::cost::provenance::Provenance>")]
    pub provenance: Option<serde_json::Value>,
}

impl Profile {
    /// The built-in H200 defaults (uncalibrated).
    pub fn h200() -> Profile {
        Profile {
            format: PROFILE_FORMAT.into(),
            name: "h200".into(),
            description: "NVIDIA H200 roofline defaults (datasheet-like rates, guessed overheads; uncalibrated)".into(),
            sm_count: 132,
            resident_ctas: BTreeMap::new(),
            params: Params::h200(),
            provenance: None,
        }
    }

    /// Resident CTAs of a decode kernel module the profile does not list: two per SM (the
    /// tensor-core kernel's launch bound).
    pub fn default_resident(&self) -> u64 {
        2 * u64::from(self.sm_count)
    }

    /// Resident CTAs of decode kernel module `module`.
    pub fn resident(&self, module: &str) -> u64 {
        self.resident_ctas
            .get(module)
            .copied()
            .unwrap_or_else(|| self.default_resident())
    }

    /// Every problem with the profile; empty when it can be used.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.format != PROFILE_FORMAT {
            out.push(format!("format {:?}, expected {PROFILE_FORMAT:?}", self.format));
        }
        if self.name.is_empty() {
            out.push("name is empty".into());
        }
        if self.sm_count == 0 {
            out.push("sm_count must be > 0".into());
        }
        for (name, v) in Params::NAMES.iter().zip(self.params.to_vec()) {
            if !v.is_finite() || v < 0.0 {
                out.push(format!("params.{name} = {v}: must be finite and >= 0"));
            }
        }
        for (k, &v) in &self.resident_ctas {
            if v == 0 {
                out.push(format!("resident_ctas.{k} must be > 0"));
            }
        }
        out
    }

    /// Digest of what determines predictions: name, SM count, resident CTAs and parameters
    /// (canonical JSON, xxh3-64). Parameters enter with 12 significant digits, so the hash
    /// survives a round trip through a JSON parser that is off by an ulp.
    pub fn hash(&self) -> String {
        // An added parameter equal to the one it defaulted from predicts as the file without it
        // did, and is left out: profiles written before it keep their hashes.
        let values = self.params.to_vec();
        let value_of = |name: &str| Params::NAMES.iter().position(|n| *n == name).map(|i| values[i]);
        let params: Vec<String> = Params::NAMES
            .iter()
            .zip(&values)
            .filter(|(name, v)| {
                let borrowed = ADDED_PARAMS
                    .iter()
                    .any(|(added, meant)| added == *name && value_of(meant) == Some(**v));
                let absent = ADDED_ZERO_PARAMS.contains(name) && **v == 0.0;
                !(borrowed || absent)
            })
            .map(|(_, v)| format!("{v:.11e}"))
            .collect();
        let key = serde_json::json!({
            "name": self.name,
            "sm_count": self.sm_count,
            "resident_ctas": self.resident_ctas,
            "params": params,
        });
        let text = serde_json::to_string(&key).expect("profiles serialize");
        format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
    }

    /// What a prediction records about its profile.
    pub fn stamp(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "hash": self.hash(),
            "sm_count": self.sm_count,
            "resident_ctas": self.resident_ctas,
            "params": self.params,
        })
    }
}

/// Parameters added to `kvsim-profile/1` after files of it were written, each with the
/// parameter whose value such a file meant for it: before MLA had its own rates, its decodes were
/// priced as the tensor-core K/V kernel and its latent writes as K/V writes. A file without them
/// predicts as it did.
pub const ADDED_PARAMS: &[(&str, &str)] = &[
    ("attn_latent_mma_byte_ns", "attn_mma_byte_ns"),
    ("attn_latent_mma_iter_ns", "attn_mma_iter_ns"),
    ("write_latent_elem_ns", "write_elem_ns"),
    ("attn_mma_spill_first_iter_ns", "attn_mma_spill_iter_ns"),
];

/// Parameters added after files were written whose term those files did not have: a file
/// without one loads with 0 and keeps its hash (issue 21's microbenchmarks added the state
/// update's per-token term, with which such a file predicts as it did, the per-op event gap:
/// per-op predictions, `--time-ops` only, are now the ops' own kernel times plus that gap, and
/// the tensor-core decode's spill term above a head dim of 128, the K/V kernels' split
/// combine, the MoE GEMMs' walk and SM terms, the block kernels' walks, the MoE walk's cold share,
/// and the MoE GEMMs' random and probed dealings).
pub const ADDED_ZERO_PARAMS: &[&str] = &[
    "state_token_ns",
    "op_event_gap_ns",
    "attn_mma_spill_iter_ns",
    "attn_combine_ns",
    "attn_combine_elem_ns",
    "attn_combine_split_ns",
    "attn_generic_combine_ns",
    "moe_fixed_ns",
    "moe_warp_elem_ns",
    "moe_warp_row_ns",
    "moe_sm_elem_ns",
    "moe_sm_row_ns",
    "zero_iter_ns",
    "copy_iter_ns",
    "write_iter_ns",
    "moe_cold_walk_ns",
    "moe_walk_miss_elem_ns",
    "moe_sm_share_norm",
    "moe_deal_random_share",
    "moe_deal_probed_share",
];

/// Parameters that are settings, not rates: no time is linear in them, so calibration never
/// moves them (`--fit` naming one is an input error; without `--fit` they keep the start's).
pub const NOT_FITTED_PARAMS: &[&str] = &["moe_sm_share_norm", "moe_deal_random_share", "moe_deal_probed_share"];

/// Fills in [`ADDED_PARAMS`] and [`ADDED_ZERO_PARAMS`] a profile's `params` object lacks (nothing else changes; what is
/// not an object is left for the strict parse to reject).
fn fill_added_params(v: &mut serde_json::Value) {
    let Some(params) = v.get_mut("params").and_then(|p| p.as_object_mut()) else {
        return;
    };
    // Zero ones first: an added parameter may borrow from one (the first spill iteration).
    for added in ADDED_ZERO_PARAMS {
        if !params.contains_key(*added) {
            params.insert((*added).to_string(), serde_json::json!(0.0));
        }
    }
    for (added, meant) in ADDED_PARAMS {
        if !params.contains_key(*added) {
            if let Some(value) = params.get(*meant).cloned() {
                params.insert((*added).to_string(), value);
            }
        }
    }
}

/// Loads a profile: a built-in name (`h200`) or a `kvsim-profile/1` file, strictly.
pub fn load_profile(arg: &str) -> Result<Profile, String> {
    if arg == "h200" {
        return Ok(Profile::h200());
    }
    let text = std::fs::read_to_string(arg).map_err(|e| format!("cannot read profile {arg}: {e}"))?;
    let mut value: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{arg}: {e}"))?;
    fill_added_params(&mut value);
    let p: Profile = serde_path_to_error::deserialize(value)
        .map_err(|e| format!("{arg}: at {}: {}", json_path("$", &e.path().to_string()), e.inner()))?;
    let problems = p.problems();
    if !problems.is_empty() {
        return Err(format!("{arg}: {}", problems.join("; ")));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_round_trip_through_vectors_and_json() {
        let p = Params::h200();
        assert_eq!(Params::from_vec(&p.to_vec()), p);
        assert_eq!(Params::NAMES.len(), p.to_vec().len());
        let prof = Profile::h200();
        let text = serde_json::to_string(&prof).unwrap();
        let back: Profile = serde_json::from_str(&text).unwrap();
        assert_eq!(back, prof);
        assert_eq!(back.hash(), prof.hash());
        // An ulp off (a lossy float parser) is the same profile.
        let mut near = prof.clone();
        near.params.attn_mma_byte_ns = f64::from_bits(near.params.attn_mma_byte_ns.to_bits() + 1);
        assert_eq!(near.hash(), prof.hash());
        assert!(prof.problems().is_empty());
    }

    #[test]
    fn hash_follows_parameters_not_provenance() {
        let a = Profile::h200();
        let mut b = a.clone();
        b.provenance = Some(serde_json::json!({"fitted_on": 3}));
        assert_eq!(a.hash(), b.hash());
        b.params.host_launch_ns += 1.0;
        assert_ne!(a.hash(), b.hash());
    }

    #[test]
    fn a_profile_without_the_mla_rates_prices_mla_as_before() {
        let mut old = serde_json::to_value(Profile::h200()).unwrap();
        let params = old["params"].as_object_mut().unwrap();
        params.remove("attn_latent_mma_byte_ns");
        params.remove("attn_latent_mma_iter_ns");
        params.remove("write_latent_elem_ns");
        params.insert("attn_mma_byte_ns".into(), serde_json::json!(0.0003));
        let path = std::env::temp_dir().join(format!("kvsim-old-profile-{}.json", std::process::id()));
        std::fs::write(&path, serde_json::to_string(&old).unwrap()).unwrap();
        let p = load_profile(path.to_str().unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(p.params.attn_latent_mma_byte_ns, 0.0003);
        assert_eq!(p.params.attn_latent_mma_iter_ns, p.params.attn_mma_iter_ns);
        assert_eq!(p.params.write_latent_elem_ns, p.params.write_elem_ns);
        // Moving an added parameter off its old meaning changes the hash (the golden hash of a
        // real session-2 file is checked in tests/tests/cost_model.rs).
        let mut moved = p.clone();
        moved.params.attn_latent_mma_iter_ns += 1.0;
        assert_ne!(moved.hash(), p.hash());
        // A file that has them keeps its own values.
        let mut new = Profile::h200();
        new.params.attn_latent_mma_byte_ns = 0.0001;
        let mut v = serde_json::to_value(&new).unwrap();
        fill_added_params(&mut v);
        assert_eq!(v["params"]["attn_latent_mma_byte_ns"], serde_json::json!(0.0001));
    }

    /// A file from before the first spill iteration had its own rate: with the per-iteration
    /// rate it borrows that (same prices, same hash); without either both are 0.
    #[test]
    fn a_profile_without_the_first_spill_rate_borrows_the_per_iteration_one() {
        let mut with_spill = Profile::h200();
        with_spill.params.attn_mma_spill_iter_ns = 14000.0;
        with_spill.params.attn_mma_spill_first_iter_ns = 14000.0;
        let mut v = serde_json::to_value(&with_spill).unwrap();
        v["params"]
            .as_object_mut()
            .unwrap()
            .remove("attn_mma_spill_first_iter_ns");
        fill_added_params(&mut v);
        assert_eq!(v["params"]["attn_mma_spill_first_iter_ns"], serde_json::json!(14000.0));
        let mut neither = serde_json::to_value(Profile::h200()).unwrap();
        let params = neither["params"].as_object_mut().unwrap();
        params.remove("attn_mma_spill_first_iter_ns");
        params.remove("attn_mma_spill_iter_ns");
        fill_added_params(&mut neither);
        assert_eq!(neither["params"]["attn_mma_spill_iter_ns"], serde_json::json!(0.0));
        assert_eq!(
            neither["params"]["attn_mma_spill_first_iter_ns"],
            serde_json::json!(0.0)
        );
        // A first-iteration rate of its own is a different profile.
        let mut without = with_spill.clone();
        without.params.attn_mma_spill_first_iter_ns = 700.0;
        assert_ne!(without.hash(), with_spill.hash());
    }

    #[test]
    fn bad_profiles_name_every_problem() {
        let mut p = Profile::h200();
        p.params.gpu_kernel_ns = -1.0;
        p.params.moe_mac_ns = f64::NAN;
        p.sm_count = 0;
        assert_eq!(p.problems().len(), 3, "{:?}", p.problems());
    }
}
