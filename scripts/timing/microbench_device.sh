#!/usr/bin/env bash
# Issue 21 item 2 on the device: the kernel microbenchmark suite, one command.
# Carried folder (this script's own): kvsim (stripped release build), mb/manifest.json and
# mb/*.plan.json.gz (`kvsim microbench plans --out-dir DIR`, plans gzipped), and optionally
# plans/*.plan.json.gz with device_run.sh for extra evaluation runs named after the budget.
# Writes $OUT/mb/*.gpu.json.gz (one per plan, as each finishes), $OUT/log.txt, and
# device_run.sh's $OUT/results.tar for the extra runs.
#
# usage: microbench_device.sh [EXTRA_RUN ...]
set -u -o pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
N=$(find /usr/local /opt /usr/lib -name 'libnvrtc.so.13' 2>/dev/null | head -1)
[ -n "$N" ] && export LD_LIBRARY_PATH=$(dirname "$N"):$LD_LIBRARY_PATH
D=$(cd "$(dirname "$0")" && pwd)
W=/tmp/kvsim-microbench
mkdir -p $W/plans $W/results "$OUT/mb"
cp $D/mb/manifest.json $W/plans/
for f in $D/mb/*.plan.json.gz; do gunzip -c "$f" > $W/plans/$(basename "$f" .gz); done
t0=$(date +%s)
# Each plan's results are compressed into $OUT as soon as it is written (a cut-short call
# still brings back what finished).
( while sleep 5; do for r in $W/results/*.gpu.json; do [ -f "$r" ] && [ ! -f "$OUT/mb/$(basename "$r").gz" ] \
    && gzip -c "$r" > "$OUT/mb/$(basename "$r").gz"; done; done ) &
watcher=$!
$D/kvsim microbench run $W/plans --out-dir $W/results --warmup 1 --repeat 2 2>&1 | tee -a $OUT/log.txt
echo "== microbench rc=${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s" | tee -a $OUT/log.txt
kill $watcher
for r in $W/results/*.gpu.json; do gzip -c "$r" > "$OUT/mb/$(basename "$r").gz"; done
if [ $# -gt 0 ] && [ -x "$D/device_run.sh" ]; then bash $D/device_run.sh 200 "$@"; fi
