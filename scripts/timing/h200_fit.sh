#!/usr/bin/env bash
# Issue 21's H200 protocol, the CPU half (docs/timing-history.md, "No machine, an H200 protocol
# fixed before its data"): fits `h200-c5` on the calibration runs `g-*` with `h100-c5`'s recipe
# (c5_recipe.sh), then predicts blind19-blind24 with it, the predictions to be committed before the
# sealed H200 runs of those sets are opened.
#
# usage: h200_fit.sh RESULTS_DIR [PROFILE_OUT] [PREDICTIONS_ROOT]   (paths from the repository root,
#        which the profile's provenance records as given)
#   RESULTS_DIR       holds g-*.gpu.json (the device call's results.tar, unpacked and gunzip'd)
#   PROFILE_OUT       default docs/timing/h200-c5.json
#   PREDICTIONS_ROOT  default docs/timing: writes blindN/blindN-LAYOUT.h200-c5.pred.json.xz (committed
#                     predictions are kept xz-compressed; `xz -dk` gives the JSON)
# environment: KVSIM the kvsim binary (default target/release/kvsim); NAME the profile's name
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kvsim=$(realpath "${KVSIM:-$root/target/release/kvsim}")
cd "$root"
results=$1
out=${2:-docs/timing/h200-c5.json}
preds=${3:-docs/timing}
name=${NAME:-h200-c5}
runs=("$results"/g-*.gpu.json)
[ -f "${runs[0]}" ] || { echo "h200_fit.sh: no g-*.gpu.json in $results" >&2; exit 2; }
echo "fitting $name on ${#runs[@]} runs" >&2
mkdir -p "$(dirname "$out")"
KVSIM=$kvsim bash scripts/timing/c5_recipe.sh "$name" "$out" "${runs[@]}"
plans=$(mktemp -d)
trap 'rm -rf "$plans"' EXIT
for s in 19 20 21 22 23 24; do
  mkdir -p "$preds/blind$s"
  for l in swa mamba chain; do
    strategy=native
    [ $l = chain ] && strategy=chain
    "$kvsim" sweep --scenario-file "docs/timing/scenarios/blind$s-$l.json" --strategy $strategy \
      --out /dev/null --plan-out "$plans/p.json" > /dev/null
    pred="$preds/blind$s/blind$s-$l.$name.pred.json"
    "$kvsim" predict "$plans/p.json" --profile "$out" --out "$pred" > /dev/null
    xz -9e -T1 -f "$pred"
  done
done
echo "wrote $out and the predictions of blind19-blind24 under $preds" >&2
