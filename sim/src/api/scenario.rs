//! Describing a scenario in code: a builder over [`BuiltinScenario`] whose defaults are the
//! built-in scenarios' benchmark settings, so only the model, pool and scheduler need saying.

use kvsim_core::fpm::grid::{BenchmarkMode, SampleLimits};
use kvsim_core::fpm::scenario_file::ScenarioFileError;
use kvsim_core::fpm::scenarios::{validate_scenario, BenchSettings, BuiltinScenario};
use kvsim_core::plan::{GroupKindName, GroupLayout, ModelLayout, Scenario, SchedulerConfig};

/// Builds a [`BuiltinScenario`] (the same data a scenario file holds).
///
/// ```
/// use kvsim_sim::api::ScenarioBuilder;
///
/// let s = ScenarioBuilder::new("dense-8b")
///     .full_attention(16, 32, 8, 128) // block size, layers, KV heads, head dim
///     .pool_blocks(4000)
///     .scheduler(32, 2048, 8192) // max_num_seqs, max_num_batched_tokens, max_model_len
///     .build()
///     .unwrap();
/// assert_eq!(s.scenario.pool_blocks, 4000);
/// // Too small a pool is refused with the reason:
/// let err = ScenarioBuilder::new("tiny").full_attention(16, 1, 1, 8).pool_blocks(8).build();
/// assert!(err.unwrap_err().to_string().contains("smaller than one max_model_len request"));
/// ```
#[derive(Clone, Debug)]
pub struct ScenarioBuilder {
    s: BuiltinScenario,
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

impl ScenarioBuilder {
    /// An empty model (add groups), 1,000 pool blocks, 8 slots, 512 batched tokens and a
    /// 1,024-token model length, prefix caching on, one rank, decode mode.
    pub fn new(name: &str) -> Self {
        ScenarioBuilder {
            s: BuiltinScenario {
                name: name.into(),
                description: String::new(),
                scenario: Scenario {
                    name: name.into(),
                    model: ModelLayout {
                        groups: Vec::new(),
                        experts: 0,
                        top_k: 0,
                        vocab_size: 32_000,
                    },
                    pool_blocks: 1000,
                    scheduler: SchedulerConfig {
                        max_num_seqs: 8,
                        max_num_batched_tokens: 512,
                        max_model_len: 1024,
                        enable_caching: true,
                        async_scheduling: false,
                        watermark: 0.0,
                    },
                    dp_ranks: 1,
                    seed: 1,
                },
                bench: BenchSettings {
                    mode: BenchmarkMode::Decode,
                    expert_parallel: false,
                    random_kda: false,
                    decode_capture_sizes: vec![1, 2, 4, 8],
                    samples: SampleLimits {
                        decode_max_batch_size_samples: 4,
                        decode_max_kv_read_token_samples: 3,
                        ..SampleLimits::default()
                    },
                    giant_kv_threshold: 1_000_000,
                    giant_kv_repeats: 3,
                    timeout_seconds: 900,
                    shared_prompt_content: false,
                    retire_in_flight: false,
                    reset_probe: false,
                },
            },
        }
    }

    /// Start from an existing scenario (a built-in or a loaded file) to vary it.
    pub fn from_scenario(s: BuiltinScenario) -> Self {
        ScenarioBuilder { s }
    }

    /// A one-line description (`kvsim scenarios` prints it).
    pub fn description(mut self, text: &str) -> Self {
        self.s.description = text.into();
        self
    }

    /// A full-attention cache group.
    pub fn full_attention(mut self, block_size: u64, layers: u32, kv_heads: u32, head_dim: u32) -> Self {
        let g = group(GroupKindName::FullAttention, block_size, layers, kv_heads, head_dim);
        self.s.scenario.model.groups.push(g);
        self
    }

    /// An MLA group (one latent "head" of `latent_dim`).
    pub fn mla(mut self, block_size: u64, layers: u32, latent_dim: u32) -> Self {
        let g = group(GroupKindName::Mla, block_size, layers, 1, latent_dim);
        self.s.scenario.model.groups.push(g);
        self
    }

    /// A sliding-window group of `window` tokens.
    pub fn sliding_window(mut self, window: u64, block_size: u64, layers: u32, kv_heads: u32, head_dim: u32) -> Self {
        let mut g = group(GroupKindName::SlidingWindow, block_size, layers, kv_heads, head_dim);
        g.sliding_window = Some(window);
        self.s.scenario.model.groups.push(g);
        self
    }

    /// A chunked-local attention group of `chunk` tokens (a multiple of the block size).
    pub fn chunked_local(mut self, chunk: u64, block_size: u64, layers: u32, kv_heads: u32, head_dim: u32) -> Self {
        let mut g = group(GroupKindName::ChunkedLocal, block_size, layers, kv_heads, head_dim);
        g.attention_chunk_size = Some(chunk);
        self.s.scenario.model.groups.push(g);
        self
    }

    /// A recurrent-state (Mamba / KDA) group.
    pub fn mamba(mut self, block_size: u64, layers: u32, heads: u32, state_width: u32) -> Self {
        let g = group(GroupKindName::Mamba, block_size, layers, heads, state_width);
        self.s.scenario.model.groups.push(g);
        self
    }

    /// Routed experts per MoE layer and experts chosen per token (0, 0 for a dense model).
    pub fn experts(mut self, experts: u32, top_k: u32) -> Self {
        self.s.scenario.model.experts = experts;
        self.s.scenario.model.top_k = top_k;
        self
    }

    /// The vocabulary size (synthetic prompt tokens stay below it).
    pub fn vocab_size(mut self, vocab: u64) -> Self {
        self.s.scenario.model.vocab_size = vocab;
        self
    }

    /// Blocks in each rank's pool, the null block included.
    pub fn pool_blocks(mut self, blocks: u32) -> Self {
        self.s.scenario.pool_blocks = blocks;
        self
    }

    /// vLLM's `max_num_seqs`, `max_num_batched_tokens` and `max_model_len`.
    pub fn scheduler(mut self, max_num_seqs: u32, max_num_batched_tokens: u64, max_model_len: u64) -> Self {
        let sch = &mut self.s.scenario.scheduler;
        sch.max_num_seqs = max_num_seqs;
        sch.max_num_batched_tokens = max_num_batched_tokens;
        sch.max_model_len = max_model_len;
        self
    }

    /// Prefix caching on or off (on by default).
    pub fn prefix_caching(mut self, on: bool) -> Self {
        self.s.scenario.scheduler.enable_caching = on;
        self
    }

    /// Asynchronous scheduling: outputs land one step after their forward pass.
    pub fn async_scheduling(mut self, on: bool) -> Self {
        self.s.scenario.scheduler.async_scheduling = on;
        self
    }

    /// Attention data-parallel ranks.
    pub fn dp_ranks(mut self, ranks: u32) -> Self {
        self.s.scenario.dp_ranks = ranks;
        self
    }

    /// The scenario's seed (synthetic prompts derive from it).
    pub fn seed(mut self, seed: u64) -> Self {
        self.s.scenario.seed = seed;
        self
    }

    /// Expert parallelism (the shared-chain gate asks for it).
    pub fn expert_parallel(mut self, on: bool) -> Self {
        self.s.bench.expert_parallel = on;
        self
    }

    /// Random KDA state (`randomize_kda_state`; needs a Mamba group).
    pub fn random_kda(mut self, on: bool) -> Self {
        self.s.bench.random_kda = on;
        self
    }

    /// The soft timeout in simulated seconds.
    pub fn timeout_seconds(mut self, seconds: u64) -> Self {
        self.s.bench.timeout_seconds = seconds;
        self
    }

    /// The benchmark settings, to change what the other methods do not reach.
    pub fn bench_mut(&mut self) -> &mut BenchSettings {
        &mut self.s.bench
    }

    /// The scenario, validated as `--scenario-file` validates it.
    pub fn build(self) -> Result<BuiltinScenario, ScenarioFileError> {
        validate_scenario(&self.s).map_err(|message| ScenarioFileError::Invalid {
            name: self.s.name.clone(),
            message,
        })?;
        Ok(self.s)
    }
}
