#!/usr/bin/env bash
# Issue 21's H200 protocol rehearsed on the H100 (docs/timing-history.md, "blind23-blind26
# predicted, then measured"): `h200_fit.sh`'s recipe (c5_recipe.sh) fitted on the H100's
# committed runs of the same 21 plans as the protocol's `g-*` rows (the suite plain, the three
# calibration plans, train1 and train2; in docs/timing/data/h100-2026-12-06.tar.xz and h100-2026-12-06-t17.tar.xz) gives
# docs/timing/h100-g21.json; it then predicts blind19-blind24 (none of them in the fit) and
# compares with their committed H100 runs: docs/timing/rehearsal/blindN-compare.h100-g21.{json,txt}.
#
# usage: h200_rehearsal.sh WORK_DIR
# environment: KVSIM the kvsim binary (default target/release/kvsim)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kvsim=$(realpath "${KVSIM:-$root/target/release/kvsim}")
mkdir -p "$1"
work=$(realpath "$1")
data=$root/docs/timing/data
for a in h100-2026-12-06 h100-2026-12-06-t17 blind19-2026-12-07 blind20-2026-12-07 blind21-2026-12-07 \
         blind22-2026-12-07 blind23-2026-12-07 blind24-2026-12-07; do
  tar -xJf "$data/$a.tar.xz" -C "$work"
done
# The profile's provenance names its start as the protocol does, from the repository root.
ln -sfn "$root/docs" "$work/docs"
cd "$work"
runs=()
for p in $(grep -o '^g-[^|]*' "$root/scripts/timing/device_run.sh"); do   # the g-* rows, in order
  case $p in
    g-t1-*|g-t2-*) runs+=("t17/${p#g-}.gpu.json") ;;
    *) runs+=("corpus/c-${p#g-}.gpu.json") ;;
  esac
done
KVSIM=$kvsim bash "$root/scripts/timing/c5_recipe.sh" h100-g21 "$root/docs/timing/h100-g21.json" "${runs[@]}"
mkdir -p plans pred "$root/docs/timing/rehearsal"
for s in 19 20 21 22 23 24; do
  args=()
  for l in swa mamba chain; do
    strategy=native
    [ $l = chain ] && strategy=chain
    "$kvsim" sweep --scenario-file "$root/docs/timing/scenarios/blind$s-$l.json" --strategy $strategy \
      --out /dev/null --plan-out plans/blind$s-$l.plan.json > /dev/null
    "$kvsim" predict plans/blind$s-$l.plan.json --profile "$root/docs/timing/h100-g21.json" \
      --out pred/blind$s-$l.pred.json > /dev/null
    args+=(pred/blind$s-$l.pred.json s$s/s$s-$l.gpu.json)
  done
  "$kvsim" compare "${args[@]}" --out "$root/docs/timing/rehearsal/blind$s-compare.h100-g21.json" \
    > "$root/docs/timing/rehearsal/blind$s-compare.h100-g21.txt"
done
python3 "$root/scripts/timing/retained_errors.py" "$root"/docs/timing/rehearsal/blind*-compare.h100-g21.json
