# Sourced by setup_venv.sh and dynamo/setup_venv.sh: the one way kvsim builds a
# pinned, cached Python environment. The caller sets
#   VENV, PYTHON, MARKER, STAMP, LOG_TAG, STUBS (cuda_stubs.py),
#   INSTALL (array: pinned requirements), NVIDIA_REQS (array: the real CUDA
#   libraries torch needs, the fallback when stubs cannot be made),
# defines `smoke_test` (run with $PY set; non-zero = the environment is broken),
# then calls `build_venv`. It prints the venv's python last on stdout.

log() { echo "[$LOG_TAG] $*" >&2; }

venv_ready() {
  [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$STAMP" ] && [ -x "$VENV/bin/python" ]
}

build_venv() {
  if venv_ready; then
    echo "$VENV/bin/python"
    return 0
  fi
  mkdir -p "$(dirname "$VENV")"
  exec 9>"$VENV.lock"
  if command -v flock >/dev/null 2>&1; then flock 9; fi
  if venv_ready; then  # another run finished while we waited
    echo "$VENV/bin/python"
    return 0
  fi

  local t0 site use_real
  t0=$(date +%s)
  log "building $VENV (marker missing or stale)"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  PY="$VENV/bin/python"
  PIP=("$PY" -m pip install --no-deps --only-binary=:all: --disable-pip-version-check -q)

  log "installing ${#INSTALL[@]} pinned packages with --no-deps"
  "${PIP[@]}" "${INSTALL[@]}"

  site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  use_real=1
  if [ "${KVSIM_REAL_CUDA_LIBS:-0}" != "1" ] && [ -f "$STUBS" ] \
     && command -v gcc >/dev/null 2>&1 && command -v readelf >/dev/null 2>&1; then
    log "generating CUDA stub libraries into torch/lib"
    if "$PY" "$STUBS" "$site" >&2 && import_torch; then
      use_real=0
    else
      log "stubbed torch does not import; removing stubs"
      for f in "$site"/torch/lib/lib{cuda,cudart,cublas,cublasLt,cudnn,cufft,cufile,cupti,curand,cusolver,cusparse,cusparseLt,nccl,nvrtc,nvshmem_host}.so.*; do
        [ -e "$f" ] && rm -f "$f"
      done
    fi
  fi
  if [ "$use_real" = 1 ]; then
    log "installing the real nvidia-* runtime wheels (2-3 GB)"
    "${PIP[@]}" "${NVIDIA_REQS[@]}"
    import_torch || { log "torch still does not import"; "$PY" -c 'import torch'; exit 1; }
  fi

  smoke_test || exit 1

  echo "$STAMP" > "$MARKER"
  log "done in $(( $(date +%s) - t0 )) s; size $(du -sh "$VENV" | cut -f1); cuda libs: $([ "$use_real" = 1 ] && echo real || echo stubs)"
  echo "$PY"
}

import_torch() { "$PY" -c 'import torch; assert not torch.cuda.is_available(); torch.zeros(1)' >/dev/null 2>&1; }
