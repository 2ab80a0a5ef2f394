//! Built-in scenarios: model layouts shaped like the configurations the seeds
//! and the research name, sized so a sweep simulates in seconds (except the
//! ~218k-block MiniMax-like pool, which is kept at its real size on purpose).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::grid::{BenchmarkMode, CudagraphShape, GridCapacity, GridConfig, SampleLimits, SchedulerShape};
use crate::plan::{GroupKindName, GroupLayout, ModelLayout, Scenario, SchedulerConfig};

/// What the benchmark run adds to a scenario (dynamo_fpm.md §1.1, §5.1 inputs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchSettings {
    /// Which phases run (`decode` for the built-ins).
    pub mode: BenchmarkMode,
    /// Expert parallelism is on (the shared-chain gate needs it, §5.1 step 3).
    pub expert_parallel: bool,
    /// `randomize_kda_state` (§1.1).
    pub random_kda: bool,
    /// Decode batch sizes with a CUDA graph.
    pub decode_capture_sizes: Vec<u64>,
    /// Sample limits per axis (§1.1).
    pub samples: SampleLimits,
    /// `DYN_BENCH_GIANT_KV_THRESHOLD` / `_REPEATS` (§9.1).
    pub giant_kv_threshold: u64,
    /// Steady steps a giant point repeats.
    pub giant_kv_repeats: u64,
    /// The soft timeout in (simulated) seconds (§1.12).
    pub timeout_seconds: u64,
    /// A swarm knob, not a Dynamo setting: every point's slot-k request draws the same prompt
    /// tokens while keeping its own cache salt, so only the salt keeps their blocks apart
    /// (issue 19: identical content under distinct salts).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_prompt_content: bool,
    /// A swarm knob, not a Dynamo setting: under async scheduling a point's requests retire in
    /// its last timed step, while that step's outputs are still in flight (the point deadline
    /// cutting a point, §1.10 step 6), so the deferred-free fence must hold them a step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retire_in_flight: bool,
    /// A swarm knob, not a Dynamo setting: a prefix-cache reset is requested in every point's
    /// admission step, while its requests hold blocks (as an external reset request or
    /// Dynamo's abort path would): vLLM must refuse it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset_probe: bool,
}

/// A scenario with its benchmark settings (built in, or loaded from a file).
/// A scenario file (`--scenario-file`; `kvsim schema scenario`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BuiltinScenario {
    /// Its name (`kvsim scenarios`, report rows).
    pub name: String,
    /// One line on what it models.
    #[serde(default)]
    pub description: String,
    /// The model layout, pool, scheduler, ranks and seed.
    pub scenario: Scenario,
    /// What the benchmark run adds.
    pub bench: BenchSettings,
}

impl BuiltinScenario {
    /// The grid's view of the scenario (§1.3 capacity, §1.5 decode grid).
    pub fn grid_config(&self) -> GridConfig {
        let s = &self.scenario;
        let kv = s.kv_config();
        let usable = u64::from(s.pool_blocks) - 1;
        GridConfig {
            mode: self.bench.mode,
            capacity: GridCapacity {
                max_num_scheduled_tokens: s.scheduler.max_num_batched_tokens,
                max_num_running_reqs: u64::from(s.scheduler.max_num_seqs),
                max_model_len: s.scheduler.max_model_len,
                usable_blocks_without_watermark: usable,
                usable_blocks_with_watermark: usable - kv.watermark_blocks,
            },
            scheduler: SchedulerShape {
                hash_block_size: kv.hash_block_size(),
                enable_prefix_caching: s.scheduler.enable_caching,
                ..SchedulerShape::with_block_size(kv.scheduler_block_size())
            },
            cudagraph: CudagraphShape {
                decode_mode: "FULL".into(),
                decode_capture_sizes: self.bench.decode_capture_sizes.clone(),
                ..CudagraphShape::default()
            },
            samples: self.bench.samples.clone(),
            max_batch_size: None,
        }
    }
}

fn group(kind: GroupKindName, block_size: u64, layers: u32, kv_heads: u32, head_dim: u32) -> GroupLayout {
    GroupLayout {
        kind,
        block_size,
        sliding_window: None,
        attention_chunk_size: None,
        layers,
        kv_heads,
        head_dim,
    }
}

fn window(w: u64, block_size: u64, layers: u32, kv_heads: u32, head_dim: u32) -> GroupLayout {
    GroupLayout {
        sliding_window: Some(w),
        ..group(GroupKindName::SlidingWindow, block_size, layers, kv_heads, head_dim)
    }
}

fn sched(max_num_seqs: u32, batched: u64, max_model_len: u64) -> SchedulerConfig {
    SchedulerConfig {
        max_num_seqs,
        max_num_batched_tokens: batched,
        max_model_len,
        enable_caching: true,
        async_scheduling: false,
        watermark: 0.0,
    }
}

fn bench(expert_parallel: bool) -> BenchSettings {
    BenchSettings {
        mode: BenchmarkMode::Decode,
        expert_parallel,
        random_kda: false,
        decode_capture_sizes: vec![1, 2, 4, 8],
        samples: SampleLimits {
            decode_max_batch_size_samples: 4,
            decode_max_kv_read_token_samples: 3,
            ..SampleLimits::default()
        },
        giant_kv_threshold: 1_000_000,
        giant_kv_repeats: 3,
        shared_prompt_content: false,
        retire_in_flight: false,
        reset_probe: false,
        timeout_seconds: 900,
    }
}

fn scenario(name: &str, model: ModelLayout, pool_blocks: u32, scheduler: SchedulerConfig, dp_ranks: u32) -> Scenario {
    Scenario {
        name: name.into(),
        model,
        pool_blocks,
        scheduler,
        dp_ranks,
        seed: 20261129,
    }
}

fn inkling(name: &str, dp_ranks: u32, description: &str) -> BuiltinScenario {
    // Inkling's convolution state is a sliding-window group of window 4 (seed 000).
    let model = ModelLayout {
        groups: vec![
            group(GroupKindName::FullAttention, 16, 8, 2, 128),
            window(4, 16, 8, 2, 128),
        ],
        experts: 64,
        top_k: 4,
        vocab_size: 151_552,
    };
    BuiltinScenario {
        name: name.into(),
        description: description.into(),
        scenario: scenario(name, model, 3000, sched(32, 2048, 4096), dp_ranks),
        bench: bench(false),
    }
}

/// Every built-in scenario, in a stable order.
pub fn builtin_scenarios() -> Vec<BuiltinScenario> {
    vec![
        inkling(
            "inkling-tp4",
            1,
            "Inkling-like MoE under TP4 (no EP); convolution state as a window-4 sliding-window group",
        ),
        BuiltinScenario {
            name: "glm53-flash".into(),
            description: "GLM-5.3-Flash-like MoE with a Mamba/KDA recurrent-state group (align mode) and EP".into(),
            scenario: scenario(
                "glm53-flash",
                ModelLayout {
                    groups: vec![
                        group(GroupKindName::FullAttention, 16, 4, 2, 128),
                        group(GroupKindName::Mamba, 16, 12, 16, 128),
                    ],
                    experts: 64,
                    top_k: 4,
                    vocab_size: 154_880,
                },
                3000,
                sched(32, 2048, 4096),
                1,
            ),
            bench: bench(true),
        },
        BuiltinScenario {
            name: "minimax-m27-ep".into(),
            description: "MiniMax-M2.7-like MoE with expert parallelism, full attention, a ~218k-block pool".into(),
            scenario: scenario(
                "minimax-m27-ep",
                ModelLayout {
                    groups: vec![group(GroupKindName::FullAttention, 16, 62, 8, 128)],
                    experts: 256,
                    top_k: 8,
                    vocab_size: 200_064,
                },
                218_000,
                sched(64, 8192, 65_536),
                1,
            ),
            bench: bench(true),
        },
        BuiltinScenario {
            name: "llama31-8b".into(),
            description: "Llama-3.1-8B-like dense model, full attention only".into(),
            scenario: scenario(
                "llama31-8b",
                ModelLayout {
                    groups: vec![group(GroupKindName::FullAttention, 16, 32, 8, 128)],
                    experts: 0,
                    top_k: 0,
                    vocab_size: 128_256,
                },
                4000,
                sched(32, 2048, 8192),
                1,
            ),
            bench: bench(false),
        },
        BuiltinScenario {
            name: "gpt-oss-tp".into(),
            description: "gpt-oss-like MoE with alternating sliding-window (128) and full attention, no EP".into(),
            scenario: scenario(
                "gpt-oss-tp",
                ModelLayout {
                    groups: vec![
                        group(GroupKindName::FullAttention, 16, 12, 8, 64),
                        window(128, 16, 12, 8, 64),
                    ],
                    experts: 32,
                    top_k: 4,
                    vocab_size: 201_088,
                },
                3000,
                sched(32, 2048, 4096),
                1,
            ),
            bench: bench(false),
        },
        BuiltinScenario {
            name: "deepseek-mla".into(),
            description: "DeepSeek-like MLA (latent 576) MoE with expert parallelism".into(),
            scenario: scenario(
                "deepseek-mla",
                ModelLayout {
                    groups: vec![group(GroupKindName::Mla, 64, 61, 1, 576)],
                    experts: 256,
                    top_k: 8,
                    vocab_size: 129_280,
                },
                3000,
                sched(32, 4096, 16_384),
                1,
            ),
            bench: bench(true),
        },
        inkling(
            "inkling-tp4-dp2",
            2,
            "The Inkling-like layout under attention data parallelism = 2",
        ),
    ]
}

/// Why a scenario cannot be swept.
pub fn validate_scenario(s: &BuiltinScenario) -> Result<(), String> {
    let mut plan = crate::plan::Plan::new(s.scenario.clone());
    plan.steps.clear();
    crate::plan::validate(&plan).map_err(|e| e.to_string())?;
    // vLLM refuses to start when the pool cannot hold one max-length request.
    let need = super::capacity::LayoutNeed::new(s.scenario.kv_config());
    let one = super::grid::BlockNeed::blocks_per_req(
        &need,
        super::grid::BlockNeedQuery {
            num_tokens: s.scenario.scheduler.max_model_len,
            has_cache_hit: false,
            apply_admission_cap: true,
        },
    );
    let kv = s.scenario.kv_config();
    let align = kv.groups.iter().any(|g| {
        matches!(
            g.kind,
            crate::kv::GroupKind::Mamba {
                mamba_cache_mode: crate::kv::MambaMode::Align
            }
        )
    });
    // Align-mode state groups chunk prefills on block boundaries: a token budget
    // below one block could never schedule a chunk (DECISION, spec/plan.md).
    if align && s.scenario.scheduler.max_num_batched_tokens < kv.scheduler_block_size() {
        return Err(format!(
            "max_num_batched_tokens {} is below the block size {} that align-mode state groups chunk by",
            s.scenario.scheduler.max_num_batched_tokens,
            kv.scheduler_block_size()
        ));
    }
    let usable = u64::from(s.scenario.pool_blocks) - 1;
    if usable < one {
        return Err(format!(
            "the pool ({usable} usable blocks) is smaller than one max_model_len request ({one} blocks)"
        ));
    }
    Ok(())
}

/// A built-in scenario by name.
pub fn find_scenario(name: &str) -> Option<BuiltinScenario> {
    builtin_scenarios().into_iter().find(|s| s.name == name)
}
