#!/usr/bin/env bash
# Issue 21: pricing the host per machine, leave-one-out on the committed runs (docs/timing-history.md,
# "Pricing the host per machine"). Each pair of blind sets (21-22, 23-24, 25-26, 27-28) was measured
# on one machine, and the eighteenth session's second machine ran r25-chain, r27-chain and
# r27-mamba: every run is predicted by h100-c5 as fitted and by h100-c5 priced
# (`kvsim calibrate --host-only`) on the other runs of its machine, and both are compared with it.
# Prints one line per run and the means; the work folder keeps every profile, prediction and
# comparison.
#
# usage: scripts/timing/host_loo.sh [WORK_DIR]      (default: a fresh temporary folder)
# needs: cargo build --release -p kvsim
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kvsim=$root/target/release/kvsim
start=$root/docs/timing/h100-c5.json
work=${1:-$(mktemp -d)}
mkdir -p "$work/plans" "$work/loo"
cd "$work"
for s in 21 22 23 24 25 26 27 28; do
  tar -xJf "$root/docs/timing/data/blind$s-2026-12-07.tar.xz"
  for l in swa mamba chain; do
    st=native; [ $l = chain ] && st=chain
    "$kvsim" sweep --scenario-file "$root/docs/timing/scenarios/blind$s-$l.json" --strategy $st \
      --out /dev/null --plan-out "plans/b$s-$l.plan.json" > /dev/null
  done
done
tar -xJf "$root/docs/timing/data/r27-2026-12-07.tar.xz"

# One machine's runs: each predicted with the profile priced on the others.
machine() {
  for x in "$@"; do
    refs=()
    for y in "$@"; do [ "$y" != "$x" ] && refs+=("$y"); done
    b=$(basename "$x" .gpu.json)                      # s27-swa, r27-chain
    n=${b%%-*}; plan=plans/b${n#?}-${b#*-}.plan.json
    "$kvsim" calibrate "${refs[@]}" --start "$start" --host-only --out "loo/$b.host.json" > "loo/$b.scale.txt"
    for p in c5 host; do
      prof=$start; [ $p = host ] && prof=loo/$b.host.json
      "$kvsim" predict "$plan" --profile "$prof" --out "loo/$b.$p.pred.json" > /dev/null
      "$kvsim" compare "loo/$b.$p.pred.json" "$x" --out "loo/$b.$p.cmp.json" > /dev/null
    done
  done
}
machine s21/*.gpu.json s22/*.gpu.json
machine s23/*.gpu.json s24/*.gpu.json
machine s25/*.gpu.json s26/*.gpu.json
machine s27/*.gpu.json s28/*.gpu.json
machine r27/*.gpu.json

python3 - "$work/loo" <<'PY'
import glob, json, os, statistics, sys
loo = sys.argv[1]
rows = []
for f in sorted(glob.glob(os.path.join(loo, "*.c5.cmp.json"))):
    b = os.path.basename(f)[: -len(".c5.cmp.json")]
    prof = json.load(open(os.path.join(loo, b + ".host.json")))["provenance"]["host_rebase"]
    fig = []
    for p in ("c5", "host"):
        d = json.load(open(os.path.join(loo, f"{b}.{p}.cmp.json")))
        fig.append((d["mape_retained_decode_points_pct"], d["pairs"][0]["mape_steps"], d["mape_points_pct"],
                    d["band_coverage"]["retained_decode"]["inside"], d["band_coverage"]["windows"]["inside"]))
    rows.append((b, prof["scale"], prof["wake_scale"], fig[0], fig[1]))
    a, h = fig
    print(f"{b:10s} host x{prof['scale']:.3f} wake x{prof['wake_scale']:.3f}  retained {a[0]:5.2f} -> {h[0]:5.2f} %"
          f"  steps {a[1]:5.2f} -> {h[1]:5.2f} %  windows {a[2]:5.2f} -> {h[2]:5.2f} %")
for k, what in ((0, "retained samples"), (1, "steps"), (2, "windows")):
    a = statistics.mean(r[3][k] for r in rows)
    h = statistics.mean(r[4][k] for r in rows)
    better = sum(r[4][k] < r[3][k] for r in rows)
    print(f"{what}: mean of {len(rows)} runs' MAPE {a:.2f} -> {h:.2f} %, {better} runs better")
for k, what in ((3, "retained samples"), (4, "windows")):
    print(f"{what} in their bands: {sum(r[3][k] for r in rows)} -> {sum(r[4][k] for r in rows)}")
PY
echo "work folder: $work" >&2
