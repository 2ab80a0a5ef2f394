#!/usr/bin/env bash
# `h100-c5`'s calibration recipe, the one the H200 protocol fixes (docs/timing-history.md, "No
# machine, an H200 protocol fixed before its data"): start docs/timing/h100-deal6-start.json,
# `--balance-steps`, prior 0.01, `h100-c5`'s fitted parameters. Run from a folder where
# docs/timing/ resolves (the repository root, or a work folder with a `docs` link to it): the
# profile's provenance records the start and the runs as given. Used by h200_fit.sh and
# h200_rehearsal.sh, so that the rehearsal fits exactly what the protocol will.
#
# usage: c5_recipe.sh NAME PROFILE_OUT RUN...
# environment: KVSIM the kvsim binary (default target/release/kvsim of this repository)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kvsim=${KVSIM:-$root/target/release/kvsim}
name=$1
out=$2
shift 2
fit=$(python3 -c "import json,sys; print(','.join(json.load(open(sys.argv[1]))['provenance']['fitted_params']))" \
  docs/timing/h100-c5.json)
"$kvsim" calibrate "$@" --start docs/timing/h100-deal6-start.json --balance-steps --prior 0.01 \
  --fit "$fit" --name "$name" --out "$out"
