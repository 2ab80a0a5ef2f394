#!/usr/bin/env bash
# Idempotent installer of the Dynamo planner oracle: a virtualenv OUTSIDE the
# repo in which Dynamo's shipped FPM self-benchmark planner
# (ai-dynamo==1.6.1, dynamo.vllm.instrumented_scheduler.InstrumentedScheduler)
# imports and runs on CPU over vllm==0.31.0 (the version ai-dynamo[vllm] pins).
#
#   bash conformance/dynamo/setup_venv.sh     # prints the venv's python path last
#   KVSIM_DYNAMO_VENV=/some/dir bash conformance/dynamo/setup_venv.sh
#   KVSIM_REAL_CUDA_LIBS=1 ...                # use the real nvidia-* wheels, no stubs
#
# Measured on this machine kind (Debian, python3 3.11.7, 2 cores, PyPI only),
# empty pip cache:
#   default (CUDA stubs):      128 s (105 s from local wheels), ~1 GB downloaded, venv 2.7 GB
#   KVSIM_REAL_CUDA_LIBS=1:    146 s, venv 5.1 GB
#   already installed:         0.02 s (marker file)
# `import dynamo.vllm.instrumented_scheduler` then takes 7.6-9 s per process
# (as in the full install); the smoke test itself ~25 s.
# (The full `pip install vllm==0.31.0` route: ~4-5 min, 200 packages, 8.6 GB.)
#
# Choices (why):
# * Everything is installed with `pip --no-deps` from an explicit, pinned list
#   (REQS below: 61 + the 2 Dynamo wheels), versions exactly as
#   `pip install vllm==0.31.0` resolves them (that resolution is ~200 packages,
#   8.6 GB incl. flashinfer, triton, cutlass, nvidia-*). The list is the set of
#   distributions whose modules are really imported while setup_smoke.py
#   constructs and drives InstrumentedScheduler (found in a full install with
#   KVSIM_SMOKE_MODULES=<file>, which maps every module in sys.modules to the
#   distribution whose RECORD lists its file), minus those whose import is
#   optional (try/except or is_*_available() in torch, transformers, vLLM,
#   xgrammar, httpx): torchvision, torchaudio, torchcodec, triton, opencv,
#   opentelemetry+grpcio+protobuf, sentencepiece, tiktoken, dill, ml_dtypes,
#   click/rich/pygments, cuda-bindings, email-validator, pydantic-extra-types,
#   python-multipart, Jinja2, nvidia-ml-py (vLLM falls back to its vendored
#   pynvml), fsspec. Each was checked by uninstalling it and re-running the
#   smoke test; the set was also checked with the kvwarm chain warm-up on
#   (local dataset, AutoTokenizer), agg mode, vLLM's own KV-config builder and
#   Qwen3-MoE- and gpt-oss-like configs (those add mistral_common, jsonschema,
#   pycountry in a full install, all optional): same artifacts' regimes as in
#   the full install. charset-normalizer is kept only to silence requests'
#   RequestsDependencyWarning.
# * ai-dynamo + ai-dynamo-runtime are installed with --no-deps too: ai-dynamo
#   requires `aisimulate`, a placeholder that cannot be installed, and its other
#   requirements (the Dynamo serving stack) are not used by the scheduler.
# * torch==2.13.0 (vLLM 0.31.0's pin) from PyPI is the CUDA 13 build: its
#   libraries DT_NEED libcudart/libcublas/libcudnn/... and `import torch` fails
#   without them. Instead of ~3 GB of nvidia-* wheels we generate stand-in stub
#   libraries (../cuda_stubs.py, needs gcc + readelf) into torch/lib, which
#   torch's RPATH ($ORIGIN) searches. The planner never runs a CUDA kernel;
#   torch.cuda.is_available() is False either way, and vLLM picks the same
#   UnspecifiedPlatform with stubs as with the real libraries.
# * If gcc/readelf are missing or the stubbed torch does not import, the real
#   nvidia-* wheels torch needs at load time are installed instead (NVIDIA_REQS).
# * --only-binary=:all: so nothing is ever compiled from an sdist.
# * The marker records a hash of the pins + stub generator + smoke test (see
#   STAMP). It is written only after setup_smoke.py (construct the planner on a
#   tiny Mixtral-like config, run a decode sweep to the end, check the
#   artifact) passed. An unfinished venv (no marker) is wiped and rebuilt.
#   flock serialises concurrent runs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STUBS="$HERE/../cuda_stubs.py"
SMOKE="$HERE/setup_smoke.py"
VENV="${KVSIM_DYNAMO_VENV:-$HOME/.cache/kvsim/dynamo-1.6.1-vllm-0.31.0}"
PYTHON="${PYTHON:-python3}"
MARKER="$VENV/.kvsim-ready"

DYNAMO_REQS=(ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1)
REQS=(
  vllm==0.31.0
  torch==2.13.0
  aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7
  annotated-types==0.8.0 anyio==4.16.0 apache-tvm-ffi==0.1.11 attrs==26.1.0
  cachetools==8.0.2 cbor2==6.3.0 einops==0.8.2 certifi==2026.10.19.post1 charset-normalizer==3.5.3
  cloudpickle==3.1.3 fastapi==0.136.3 filelock==4.3.1 frozenlist==1.8.0 h11==0.16.0
  httpcore==1.0.9 httpx2==2.16.2 httpx==0.28.1 huggingface_hub==1.33.0 idna==3.20
  llguidance==1.7.6 mpmath==1.3.0 msgspec==0.23.0 multidict==7.2.1 networkx==3.6.1
  numpy==2.3.5 openai==3.57.0 oss-harmony==0.0.11 packaging==26.4
  partial-json-parser==0.2.1.1.post7 pillow==13.0.0 prometheus_client==0.26.0
  propcache==0.5.4 psutil==7.2.2 py-cpuinfo==9.0.0 pybase64==1.5.1 pydantic==2.14.4
  pydantic_core==2.50.5 PyYAML==6.0.4 pyzmq==27.3.0 regex==2026.11.19
  requests==2.34.2 safetensors==0.8.0 setuptools==84.2.1 sniffio==1.3.1
  starlette==1.10.0 sympy==1.14.0 tokenizers==0.23.3 tqdm==4.70.1
  transformers==5.17.0 typing-inspection==0.4.5 typing_extensions==4.16.0
  urllib3==2.8.0 uvloop==0.23.0 xgrammar==0.2.7 yarl==1.25.1
)
NVIDIA_REQS=(
  nvidia-cublas==13.1.1.3 nvidia-cuda-cupti==13.0.85 nvidia-cuda-nvrtc==13.0.88
  nvidia-cuda-runtime==13.0.96 nvidia-cudnn-cu13==9.20.0.48 nvidia-cufft==12.0.0.61
  nvidia-cufile==1.15.1.6 nvidia-curand==10.4.0.35 nvidia-cusparse==12.6.3.3
  nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.29.7 nvidia-nvjitlink==13.5.37
  nvidia-nvshmem-cu13==3.4.5
)

# The marker holds a hash of what gets installed and how it is checked:
# changing a pin, the stub generator, the smoke test or the stub/real choice
# forces a rebuild; editing comments does not.
STAMP="$( (echo "${DYNAMO_REQS[*]}"; echo "${REQS[*]}"; echo "${NVIDIA_REQS[*]}";
          cat "$STUBS" 2>/dev/null || echo "no-stubs";
          cat "$SMOKE";
          echo "${KVSIM_REAL_CUDA_LIBS:-0}") | sha256sum | cut -c1-16)"

LOG_TAG=dynamo/setup_venv
INSTALL=("${REQS[@]}" "${DYNAMO_REQS[@]}")

smoke_test() {
  log "smoke test: InstrumentedScheduler decode sweep on a tiny Mixtral-like config"
  local err out
  err="$(mktemp)"
  if ! out="$("$PY" "$SMOKE" 2>"$err" | tail -1)" \
     || ! printf '%s' "$out" | grep -q '"ok": true'; then
    tail -40 "$err" >&2
    rm -f "$err"
    log "smoke test failed: got ${out:-nothing}"
    return 1
  fi
  rm -f "$err"
  log "smoke: $out"
}

# shellcheck source=../venv_build.sh
source "$HERE/../venv_build.sh"
build_venv
