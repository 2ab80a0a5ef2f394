#!/usr/bin/env bash
# Idempotent installer of the conformance oracle: a virtualenv OUTSIDE the repo
# in which vllm==0.33.0 imports far enough to construct and drive
# vllm.v1.core.kv_cache_manager.KVCacheManager on CPU.
#
#   bash conformance/setup_venv.sh        # prints the venv's python path last
#   KVSIM_VLLM_VENV=/some/dir bash conformance/setup_venv.sh
#   KVSIM_REAL_CUDA_LIBS=1 ...            # use the real nvidia-* wheels, no stubs
#
# Measured on this machine kind (Debian, python3 3.11.7, 2 cores, PyPI only),
# empty pip cache:
#   default (CUDA stubs):      89-149 s (once 213 s), ~1 GB downloaded, venv 2.5 GB
#   KVSIM_REAL_CUDA_LIBS=1:   118 s, ~3 GB downloaded, venv 5.5 GB
#   already installed:         0.02 s (marker file)
# Importing vLLM's KV-cache modules then takes ~9 s per process.
#
# Choices (why):
# * Everything is installed with `pip --no-deps` from an explicit, pinned list
#   (REQS below). `pip install vllm==0.33.0` would resolve ~150 packages incl.
#   flashinfer, triton, cutlass, nvidia-* (several GB). The list is the closure
#   of what `import vllm.v1.core.kv_cache_manager, vllm.v1.request,
#   vllm.sampling_params` really imports (found by importing until nothing was
#   missing), pinned to versions that satisfy vLLM 0.33.0's own metadata
#   (transformers<5.21, fastapi<0.137, xgrammar==0.2.8, apache-tvm-ffi==0.1.11,
#   llguidance<1.8; newer fastapi needs opentelemetry, newer transformers is
#   outside vLLM's range). Exact pins also make the oracle reproducible.
# * torch==2.14.0 (vLLM's pin) from PyPI is the CUDA 13 build: its libraries
#   DT_NEED libcudart/libcublas/libcudnn/... and `import torch` fails without
#   them (tested). Only PyPI is reachable, so no CPU wheel. Instead of ~3 GB of
#   nvidia-* wheels we generate stand-in stub libraries (cuda_stubs.py, needs
#   gcc + readelf) into torch/lib, which torch's RPATH ($ORIGIN) searches.
#   The replayer never runs a CUDA kernel; torch.cuda.is_available() is False.
#   Replays are byte-identical with stubs and with the real libraries (checked
#   on the 4 examples and 64 generated traces).
# * If gcc/readelf are missing or the stubbed torch does not import, the real
#   nvidia-* wheels torch needs at load time are installed instead (NVIDIA_REQS;
#   cusolver/nvtx/triton are not needed to import).
# * --only-binary=:all: so nothing is ever compiled from an sdist.
# * The marker records a hash of the pins + stub generator (see STAMP).
#   An unfinished venv (no marker) is wiped and rebuilt. flock serialises
#   concurrent runs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${KVSIM_VLLM_VENV:-$HOME/.cache/kvsim/vllm-0.33.0}"
PYTHON="${PYTHON:-python3}"
MARKER="$VENV/.kvsim-ready"

REQS=(
  vllm==0.33.0
  torch==2.14.0
  aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7
  annotated-types==0.8.0 anyio==4.16.0 apache-tvm-ffi==0.1.11 attrs==26.1.0
  cachetools==8.0.2 cbor2==6.3.0 certifi==2026.10.19.post1 charset-normalizer==3.5.3
  cloudpickle==3.1.3 fastapi==0.136.3 filelock==4.3.1 frozenlist==1.8.0
  fsspec==2026.9.0 h11==0.16.0 httpcore2==2.16.2 httpx2==2.16.2
  huggingface_hub==2.4.0 idna==3.20 Jinja2==3.1.6 llguidance==1.7.6
  MarkupSafe==3.0.4 mpmath==1.3.0 msgspec==0.23.0 multidict==7.2.1
  networkx==3.6.1 numpy==2.4.6 openai==3.57.0 openai-harmony==0.0.8
  packaging==26.4 partial-json-parser==0.2.1.1.post7 pillow==13.0.0
  prometheus_client==0.26.0 propcache==0.5.4 psutil==7.2.2 py-cpuinfo==9.0.0
  pybase64==1.5.1 pydantic==2.14.4 pydantic_core==2.50.5 PyYAML==6.0.4
  pyzmq==27.3.0 regex==2026.11.19 requests==2.34.2 safetensors==0.8.0
  sniffio==1.3.1 starlette==1.10.0 sympy==1.14.0 tokenizers==0.23.3
  tqdm==4.70.1 transformers==5.20.2 truststore==0.10.5 typing_extensions==4.16.0
  typing-inspection==0.4.5 urllib3==2.8.0 uvloop==0.23.0 xgrammar==0.2.8
  yarl==1.25.1
)
NVIDIA_REQS=(
  nvidia-cublas==13.1.1.3 nvidia-cuda-cupti==13.0.85 nvidia-cuda-nvrtc==13.0.88
  nvidia-cuda-runtime==13.0.96 nvidia-cudnn-cu13==9.24.0.43 nvidia-cufft==12.0.0.61
  nvidia-cufile==1.15.1.6 nvidia-curand==10.4.0.35 nvidia-cusparse==12.6.3.3
  nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.30.7 nvidia-nvjitlink==13.5.37
  nvidia-nvshmem-cu13==3.4.5
)

# The marker holds a hash of what gets installed: changing a pin, the stub
# generator or the stub/real choice forces a rebuild; editing comments does not.
STAMP="$( (echo "${REQS[*]}"; echo "${NVIDIA_REQS[*]}";
          cat "$HERE/cuda_stubs.py" 2>/dev/null || echo "no-stubs";
          echo "${KVSIM_REAL_CUDA_LIBS:-0}") | sha256sum | cut -c1-16)"

LOG_TAG=setup_venv
STUBS="$HERE/cuda_stubs.py"
INSTALL=("${REQS[@]}")

smoke_test() {
  log "smoke test: KVCacheManager replay"
  local smoke tmpt out expect
  smoke='{"format":"kvtrace/1","config":{"num_blocks":11,"enable_caching":true,"max_model_len":256,"block_size":16,"groups":[{"kind":"full_attention"}]},"ops":[{"op":"add_request","id":"a","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]},{"op":"get_computed_blocks","id":"a"},{"op":"allocate_slots","id":"a","num_new_tokens":17},{"op":"free","id":"a"}]}'
  tmpt="$(mktemp)"
  echo "$smoke" > "$tmpt"
  out="$("$PY" "$HERE/vllm_replay.py" "$tmpt" 2>/dev/null | tail -1)"
  rm -f "$tmpt"
  expect='{"cached_block_ids":[1],"cached_blocks":1,"free_blocks":10,"free_queue":[2,3,4,5,6,7,8,9,10,1],"i":3,"op":"free","requests":{},"result":null}'
  if [ "$out" != "$expect" ]; then
    log "smoke test failed: got $out"
    return 1
  fi
}

# shellcheck source=venv_build.sh
source "$HERE/venv_build.sh"
build_venv
