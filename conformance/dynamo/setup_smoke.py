#!/usr/bin/env python3
"""Smoke test of the Dynamo conformance venv (see setup_venv.sh).

Constructs Dynamo's shipped FPM self-benchmark planner
(dynamo.vllm.instrumented_scheduler.InstrumentedScheduler, ai-dynamo 1.6.1)
over vLLM 0.31.0 on CPU, on a tiny hand-written Mixtral-like config, drives
schedule()/update_from_output() with one sampled token per scheduled request
until the benchmark is over, and checks the artifact it writes.

No arguments. Exits 0 on success and prints one JSON line:
  {"ok": true, "steps": N, "status": "...", "points": K, "import_s": ..., ...}
With KVSIM_SMOKE_MODULES=<file>, also writes the sorted names of every
distribution that provides a module imported by the end of the run (how the
lean pin list of setup_venv.sh was found).
"""

import json
import os
import socket
import sys
import tempfile
import time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_model_dir(d):
    cfg = {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 4096,
        "vocab_size": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(3, cfg["vocab_size"]):
        vocab[f"w{i}"] = i
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = WhitespaceSplit()
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    ).save_pretrained(d)
    return cfg


def main():
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    tmp = tempfile.mkdtemp(prefix="kvsim-dyn-smoke-")
    artifact = os.path.join(tmp, "benchmark_results.json")
    os.environ["DYN_FORWARDPASS_METRIC_PORT"] = str(free_port())
    os.environ["DYN_FPM_BENCHMARK_OUTPUT_PATH"] = artifact
    os.environ["DYN_BENCH_KV_WARMUP"] = "off"

    t0 = time.monotonic()
    import dynamo.vllm.instrumented_scheduler as ism
    import_s = time.monotonic() - t0

    import torch
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.structured_output import StructuredOutputManager

    model_dir = os.path.join(tmp, "model")
    os.makedirs(model_dir)
    cfg = write_model_dir(model_dir)

    block_size, num_blocks, max_model_len = 16, 256, 512
    model_config = ModelConfig(
        model=model_dir,
        tokenizer=model_dir,
        skip_tokenizer_init=True,
        dtype="bfloat16",
        max_model_len=max_model_len,
        seed=0,
    )
    cache_config = CacheConfig(
        block_size=block_size, enable_prefix_caching=True, cache_dtype="auto"
    )
    cache_config.num_gpu_blocks = num_blocks
    scheduler_config = SchedulerConfig(
        max_num_seqs=8,
        max_num_batched_tokens=512,
        max_model_len=max_model_len,
        is_encoder_decoder=False,
        enable_chunked_prefill=True,
    )
    vllm_config = VllmConfig(
        model_config=model_config,
        cache_config=cache_config,
        scheduler_config=scheduler_config,
        parallel_config=ParallelConfig(enable_expert_parallel=True),
        device_config=DeviceConfig(device="cpu"),
        additional_config={
            "benchmark": {
                "mode": "decode",
                "warmup_iterations": 1,
                "decode_max_kv_read_token_samples": 4,
                "decode_max_batch_size_samples": 4,
                "timeout": 600,
            }
        },
    )
    layers = [f"model.layers.{i}.self_attn.attn" for i in range(cfg["num_hidden_layers"])]
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                layers,
                FullAttentionSpec(
                    block_size=block_size,
                    num_kv_heads=cfg["num_key_value_heads"],
                    head_size=cfg["head_dim"],
                    dtype=torch.bfloat16,
                ),
            )
        ],
    )

    sched = ism.InstrumentedScheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=block_size,
        log_stats=False,
    )
    steps, t1 = 0, time.monotonic()
    try:
        while sched._bench_active and steps < 2000:
            out = sched.schedule()
            steps += 1
            rids = list(out.num_scheduled_tokens)
            if not rids:
                sched.update_from_output(out, ModelRunnerOutput([], {}))
                continue
            sampled = []
            for rid in rids:
                req = sched.requests.get(rid)
                partial = req is not None and getattr(req, "is_prefill_chunk", False)
                sampled.append([] if partial else [7])
            sched.update_from_output(
                out,
                ModelRunnerOutput(
                    req_ids=rids,
                    req_id_to_index={r: i for i, r in enumerate(rids)},
                    sampled_token_ids=sampled,
                ),
            )
        drive_s = time.monotonic() - t1
    finally:
        sched.shutdown()

    with open(artifact) as f:
        art = json.load(f)
    ok = (not sched._bench_active) and "status" in art and art.get("status") == "complete"
    res = {
        "ok": bool(ok),
        "steps": steps,
        "status": art.get("status"),
        "points": len(art.get("results") or []),
        "import_s": round(import_s, 2),
        "drive_s": round(drive_s, 2),
        "vllm": __import__("vllm").__version__,
        "torch": torch.__version__,
    }
    mods_out = os.environ.get("KVSIM_SMOKE_MODULES")
    if mods_out:
        # Map every imported module's file to the distribution whose RECORD
        # lists it (exact, unlike packages_distributions() on namespace dirs).
        import importlib.metadata as md

        owner = {}
        for dist in md.distributions():
            for f in dist.files or []:
                owner[os.path.realpath(str(dist.locate_file(f)))] = dist
        dists = {}
        for mod in list(sys.modules.values()):
            path = getattr(mod, "__file__", None)
            if path:
                dist = owner.get(os.path.realpath(path))
                if dist is not None:
                    dists[dist.metadata["Name"]] = dist.version
        with open(mods_out, "w") as f:
            for name in sorted(dists, key=str.lower):
                f.write(f"{name}=={dists[name]}\n")
    print(json.dumps(res, sort_keys=True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
