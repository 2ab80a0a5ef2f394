#!/usr/bin/env bash
# Issue 21: a profile against every H100 blind set no H100 profile from h100-c1 on was fitted on
# (blind12-blind30, 57 layouts, 1 539 decode points; until the twentieth session blind12-blind20),
# from the committed measurements alone (docs/timing-history.md, "The MoE GEMMs' dealing partly
# random", "blind29 and blind30"). Plans are made again from
# docs/timing/scenarios/, the runs unpacked from docs/timing/data/, and each layout predicted and
# compared; prints scripts/timing/retained_errors.py's table (per layout, pooled, by batch).
#
# usage: heldout.sh PROFILE WORK_DIR
# environment: KVSIM the kvsim binary (default target/release/kvsim)
set -euo pipefail
profile=$(realpath "$1")
work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
kvsim=$(realpath "${KVSIM:-$root/target/release/kvsim}")
mkdir -p "$work/plans" "$work/runs" "$work/cmp"
cd "$work"
for a in h100-2026-12-06 blind13-2026-12-06 blind14-2026-12-06 blind15-2026-12-06 blind16-2026-12-06 \
         blind17-2026-12-06 blind18-2026-12-06; do
  tar -xJf "$root/docs/timing/data/$a.tar.xz" -C runs
done
for s in $(seq 19 30); do
  tar -xJf "$root/docs/timing/data/blind$s-2026-12-07.tar.xz" -C runs
done
for s in $(seq 12 30); do
  for l in swa mamba chain; do
    strategy=native
    [ $l = chain ] && strategy=chain
    plan=plans/blind$s-$l.plan.json
    [ -f "$plan" ] || "$kvsim" sweep --scenario-file "$root/docs/timing/scenarios/blind$s-$l.json" \
      --strategy $strategy --out /dev/null --plan-out "$plan" > /dev/null
    "$kvsim" predict "$plan" --profile "$profile" --out cmp/blind$s-$l.pred.json > /dev/null
    "$kvsim" compare cmp/blind$s-$l.pred.json runs/s$s/s$s-$l.gpu.json --out cmp/blind$s-$l.cmp.json > /dev/null
  done
done
python3 "$root/scripts/timing/retained_errors.py" cmp/blind*.cmp.json
