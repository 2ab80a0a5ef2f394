#!/usr/bin/env bash
# Build the Python bindings from this checkout, install them into a cached virtualenv and run
# their pytest suite: what `scripts/test-all` and CI run.
#
#   bash python/test.sh                      # venv in ~/.cache/kvsim/python-bindings
#   KVSIM_PY_VENV=/some/dir bash python/test.sh
#
# The venv holds only the pinned tools (maturin, pytest); it is made once (a marker file names
# the pins) and the bindings are rebuilt and reinstalled from the working tree on every run.
# `pip install --no-build-isolation` uses the venv's maturin, so no build environment is
# downloaded per run; maturin builds into the workspace's target/ (release profile).
set -euo pipefail
cd "$(dirname "$0")/.."
PINS="maturin==1.16.0 pytest==9.2.0"
VENV="${KVSIM_PY_VENV:-$HOME/.cache/kvsim/python-bindings}"
if [[ "$(cat "$VENV/.kvsim-pins" 2>/dev/null)" != "$PINS" ]]; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    # shellcheck disable=SC2086
    "$VENV/bin/pip" install --quiet --disable-pip-version-check $PINS
    echo "$PINS" > "$VENV/.kvsim-pins"
fi
# maturin's build hook runs the `maturin` on PATH: the venv's.
PATH="$VENV/bin:$PATH" "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps ./python
"$VENV/bin/python" -m pytest -q python/tests "$@"
