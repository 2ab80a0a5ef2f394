"""A kvsim scenario as vLLM 0.31.0 configuration objects.

The scenario's cache groups become per-layer KV-cache specs, and vLLM's own
builder (`get_kv_cache_configs` + `generate_scheduler_kv_cache_config`, the
path a real engine takes) groups them, so the groups the planner sees are the
ones a GPU engine would make. The HF `config.json` only has to satisfy
`ModelConfig` and carry what the planner's gate reads (an expert count); the
KV layout comes from the specs (research: dynamo_planner_on_cpu.md,
"Constructing the scheduler").
"""

import json
import os

# vLLM kinds a kvsim group kind maps to, and back (spec/dynamo.md §2).
KIND_FULL = "full_attention"
KIND_MLA = "mla"
KIND_SWA = "sliding_window"
KIND_CHUNKED = "chunked_local"
KIND_MAMBA = "mamba"


# The prefix-cache retention interval the harness runs vLLM with (dense).
RETENTION_INTERVAL = None


class LayoutError(Exception):
    """The real planner cannot take this layout (reported as bad input)."""


def hf_config(scenario, bench):
    """A minimal HF config.json for ModelConfig: Mixtral-like when the model
    has experts, Llama-like otherwise. Sizes are tiny; nothing is loaded."""
    model = scenario["model"]
    max_len = int(scenario["scheduler"]["max_model_len"])
    layers = sum(int(g["layers"]) for g in model["groups"])
    base = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_hidden_layers": max(1, layers),
        "max_position_embeddings": max_len,
        "vocab_size": int(model["vocab_size"]),
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if int(model.get("experts", 0)) > 0:
        base.update(
            {
                "architectures": ["MixtralForCausalLM"],
                "model_type": "mixtral",
                "num_local_experts": int(model["experts"]),
                "num_experts_per_tok": max(1, int(model.get("top_k", 1))),
            }
        )
    else:
        base.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    return base


def write_model_dir(path, scenario, bench):
    """config.json plus an offline WordLevel tokenizer (no hub access)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf_config(scenario, bench), f, indent=1, sort_keys=True)
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
    for i, w in enumerate(dataset_words()):
        vocab[w] = 3 + i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(path)


def dataset_words():
    """The tokenizer's words; the warm-up dataset draws from them."""
    return [f"w{i:03d}" for i in range(512)]


def group_spec(g, caching):
    """The vLLM KV-cache spec of one layer of scenario group `g`."""
    import torch
    from vllm.v1 import kv_cache_interface as kvi

    kind = g["kind"]
    attn = {
        "block_size": int(g["block_size"]),
        "num_kv_heads": int(g["kv_heads"]),
        "head_size": int(g["head_dim"]),
        "dtype": torch.bfloat16,
    }
    if kind == KIND_FULL:
        return kvi.FullAttentionSpec(**attn)
    if kind == KIND_MLA:
        return kvi.MLAAttentionSpec(**{**attn, "num_kv_heads": 1})
    if kind == KIND_SWA:
        return kvi.SlidingWindowSpec(**attn, sliding_window=int(g["sliding_window"]))
    if kind == KIND_CHUNKED:
        return kvi.ChunkedLocalAttentionSpec(**attn, attention_chunk_size=int(g["attention_chunk_size"]))
    if kind == KIND_MAMBA:
        return kvi.MambaSpec(
            block_size=attn["block_size"],
            shapes=((attn["num_kv_heads"], attn["head_size"]),),
            dtypes=(attn["dtype"],),
            mamba_cache_mode="align" if caching else "none",
        )
    raise LayoutError(f"unknown group kind {kind!r}")


def layer_specs(scenario):
    """Per-layer vLLM KV-cache specs in layer order (group by group)."""
    caching = bool(scenario["scheduler"]["enable_caching"])
    specs = {}
    for g in scenario["model"]["groups"]:
        spec = group_spec(g, caching)
        for _ in range(int(g["layers"])):
            specs[f"model.layers.{len(specs)}.self_attn.attn"] = spec
    return specs


def kind_of(spec):
    """kvsim's name for the kind of a vLLM group spec."""
    from vllm.v1 import kv_cache_interface as kvi

    if isinstance(spec, kvi.MambaSpec):
        return KIND_MAMBA, {}
    if isinstance(spec, kvi.SlidingWindowSpec):
        return KIND_SWA, {"sliding_window": int(spec.sliding_window)}
    if isinstance(spec, kvi.ChunkedLocalAttentionSpec):
        return KIND_CHUNKED, {"attention_chunk_size": int(spec.attention_chunk_size)}
    if isinstance(spec, kvi.MLAAttentionSpec):
        return KIND_MLA, {}
    if isinstance(spec, kvi.FullAttentionSpec):
        if getattr(spec, "sliding_window", None):
            # HMA off merges windows into full attention: never what we build.
            raise LayoutError("vLLM merged a sliding window into full attention (HMA off)")
        return KIND_FULL, {}
    raise LayoutError(f"vLLM built a {type(spec).__name__} group kvsim does not model")


def build_configs(scenario, bench, model_dir, options):
    """(VllmConfig, KVCacheConfig) for one rank (`options["rank"]`) of the scenario."""
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        get_kv_cache_configs,
    )

    sched = scenario["scheduler"]
    groups = scenario["model"]["groups"]
    dp_ranks = int(scenario.get("dp_ranks", 1))
    rank = int(options.get("rank", 0))
    if dp_ranks < 1 or not 0 <= rank < dp_ranks:
        raise LayoutError(f"rank {rank} of {dp_ranks} attention-DP ranks")
    if bool(bench.get("expert_parallel")) and int(scenario["model"].get("experts", 0)) == 0:
        raise LayoutError("vLLM refuses expert parallelism on a dense model")
    block_sizes = {int(g["block_size"]) for g in groups}
    if len(block_sizes) != 1:
        raise LayoutError(
            f"groups with different block sizes {sorted(block_sizes)}: the harness "
            "builds one cache_config.block_size"
        )
    block_size = block_sizes.pop()
    max_len = int(sched["max_model_len"])
    model_config = ModelConfig(
        model=model_dir,
        tokenizer=model_dir,
        skip_tokenizer_init=True,
        max_model_len=max_len,
        dtype="bfloat16",
        seed=0,
    )
    cache_config = CacheConfig(
        block_size=block_size,
        enable_prefix_caching=bool(sched["enable_caching"]),
        num_gpu_blocks_override=int(scenario["pool_blocks"]),
        # kvsim models dense sliding-window / Mamba checkpoints (vllm_kv.md §1 core
        # subset: retention None). vLLM 0.31's default, 0, keeps only semantic
        # checkpoints; the harness runs dense so every table is reproducible
        # (spec/dynamo.md §3).
        prefix_cache_retention_interval=RETENTION_INTERVAL,
    )
    if any(g["kind"] == KIND_MAMBA for g in groups):
        cache_config.mamba_cache_mode = "align" if sched["enable_caching"] else "none"
    scheduler_config = SchedulerConfig(
        max_num_seqs=int(sched["max_num_seqs"]),
        max_num_batched_tokens=int(sched["max_num_batched_tokens"]),
        max_model_len=max_len,
        enable_chunked_prefill=True,
        async_scheduling=bool(sched.get("async_scheduling", False)),
        is_encoder_decoder=False,
    )
    # Attention-DP (dp.py): one config per rank, the rank in both fields a DP
    # engine core sets (1.6.1's `_resolve_dp_rank` reads `data_parallel_index`);
    # the synchronizer's master is loopback.
    parallel_config = ParallelConfig(
        enable_expert_parallel=bool(bench.get("expert_parallel", False)),
        data_parallel_size=dp_ranks,
        data_parallel_rank=rank,
    )
    parallel_config.data_parallel_index = rank
    parallel_config.data_parallel_master_ip = "127.0.0.1"
    if bench.get("random_kda"):
        # Random KDA needs Dynamo's benchmark worker on every rank (it fills the
        # private state slots); the scheduler only checks the name.
        from dynamo.vllm.benchmark_points import RANDOM_KDA_WORKER

        parallel_config.worker_cls = RANDOM_KDA_WORKER
    vllm_config = VllmConfig(
        model_config=model_config,
        cache_config=cache_config,
        scheduler_config=scheduler_config,
        parallel_config=parallel_config,
        device_config=DeviceConfig(device="cpu"),
        additional_config={"benchmark": benchmark_config(bench, options)},
    )
    set_cuda_graphs(vllm_config, bench)
    if vllm_config.scheduler_config.disable_hybrid_kv_cache_manager:
        raise LayoutError("the hybrid KV-cache manager is off; the harness must turn it on")
    specs = layer_specs(scenario)
    # The engine core resolves one physical layout before sizing the pool; the
    # layout does not change the scheduler's view, so take the default order.
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout

    resolve_kv_cache_layout(vllm_config, [["LBNHC", "LBHNC"]], specs.values())
    huge = 1 << 60
    try:
        kv_configs = get_kv_cache_configs(vllm_config, [specs], [huge])
    except ValueError as exc:  # vLLM refuses the pool (e.g. too small for one request)
        raise LayoutError(f"vLLM refuses the KV cache: {str(exc).splitlines()[0][:200]}") from exc
    kv_config = generate_scheduler_kv_cache_config(kv_configs)
    if kv_config.num_blocks != int(scenario["pool_blocks"]):
        raise LayoutError(
            f"vLLM built a pool of {kv_config.num_blocks} blocks, the scenario asks for "
            f"{scenario['pool_blocks']}"
        )
    # The engine core sets this from the profiled pool; the scheduler reads it.
    vllm_config.cache_config.num_gpu_blocks = kv_config.num_blocks
    return vllm_config, kv_config, block_size


def set_cuda_graphs(vllm_config, bench):
    """The CUDA-graph set-up a GPU engine of the scenario would have: full decode
    graphs at the scenario's capture sizes, no prefill graphs (kvsim's grid
    shape). vLLM turns graphs off on a GPU-less platform; the planner's grid only
    reads the mode and the sizes, so the harness sets them as a GPU would."""
    from vllm.config.compilation import CUDAGraphMode

    sizes = sorted({int(x) for x in bench.get("decode_capture_sizes", []) if int(x) > 0})
    cc = vllm_config.compilation_config
    cc.cudagraph_mode = CUDAGraphMode.FULL_DECODE_ONLY if sizes else CUDAGraphMode.NONE
    cc.cudagraph_capture_sizes = sizes
    cc.max_cudagraph_capture_size = sizes[-1] if sizes else 0


def benchmark_config(bench, options):
    """`additional_config["benchmark"]` as `_bench_init` parses it."""
    samples = bench.get("samples", {})
    cfg = {
        "mode": bench.get("mode", "decode"),
        "timeout": int(bench.get("timeout_seconds", 900)),
        "randomize_kda_state": bool(bench.get("random_kda", False)),
        "hybrid_live_state": bool(options.get("live_state", False)),
    }
    # 1.6.1's default (5 decode steps of one 256-token prefill) unless asked.
    if options.get("warmup_iterations") is not None:
        cfg["warmup_iterations"] = int(options["warmup_iterations"])
    for key in (
        "prefill_max_new_token_samples",
        "prefill_max_kv_read_token_samples",
        "decode_max_kv_read_token_samples",
        "decode_max_batch_size_samples",
        "prefix_max_batch_size_samples",
    ):
        if key in samples:
            cfg[key] = int(samples[key])
    return cfg


def recorded_groups(kv_config, scenario):
    """The groups vLLM built, as a kvsim plan's `model.groups`: kind and size
    from vLLM, physical shape from the scenario group the layers came from."""
    by_layer = {}
    layer = 0
    for g in scenario["model"]["groups"]:
        for _ in range(int(g["layers"])):
            by_layer[f"model.layers.{layer}.self_attn.attn"] = g
            layer += 1
    out = []
    for group in kv_config.kv_cache_groups:
        kind, extra = kind_of(group.kv_cache_spec)
        src = by_layer[group.layer_names[0]]
        g = {
            "kind": kind,
            "block_size": int(group.kv_cache_spec.block_size),
            "layers": len(group.layer_names),
            "kv_heads": int(src["kv_heads"]),
            "head_dim": int(src["head_dim"]),
        }
        g.update(extra)
        out.append(g)
    return out
