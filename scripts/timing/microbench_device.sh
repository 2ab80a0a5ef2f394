#!/usr/bin/env bash
# Issue 21 item 2 on the device: the kernel microbenchmark suite, one command.
# Carried folder (this script's own): kvsim (stripped release build), mb/manifest.json and
# mb/*.plan.json.gz (`kvsim microbench plans --out-dir DIR`, plans gzipped), and optionally
# plans/*.plan.json.gz with device_run.sh for extra evaluation runs named after the budget.
# Writes $OUT/mb.tar (the gzipped results, appended as each run finishes, so a cut-short call
# still brings back what finished; the device tool brings back few files, so one archive),
# $OUT/log.txt, and device_run.sh's $OUT/results.tar for the extra runs.
#
# usage: microbench_device.sh [EXTRA_RUN ...]
set -u -o pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
N=$(find /usr/local /opt /usr/lib -name 'libnvrtc.so.13' 2>/dev/null | head -1)
[ -n "$N" ] && export LD_LIBRARY_PATH=$(dirname "$N"):$LD_LIBRARY_PATH
D=$(cd "$(dirname "$0")" && pwd)
W=/tmp/kvsim-microbench
mkdir -p $W/plans $W/results $W/gz
cp $D/mb/manifest.json $W/plans/
for f in $D/mb/*.plan.json.gz; do gunzip -c "$f" > $W/plans/$(basename "$f" .gz); done
t0=$(date +%s)
pack() { for r in $W/results/*.gpu.json; do b=$(basename "$r"); [ -f "$r" ] && [ ! -f "$W/gz/$b.gz" ] \
    && gzip -c "$r" > "$W/gz/$b.tmp" && mv "$W/gz/$b.tmp" "$W/gz/$b.gz" \
    && (cd $W/gz && tar rf "$OUT/mb.tar" "$b.gz"); done; }
( while sleep 5; do pack; done ) &
watcher=$!
$D/kvsim microbench run $W/plans --out-dir $W/results --warmup 1 --repeat 2 ${PASSES:+--passes $PASSES} 2>&1 | tee -a $OUT/log.txt
echo "== microbench rc=${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s" | tee -a $OUT/log.txt
kill $watcher; wait $watcher 2>/dev/null
# Everything, whole, once the runs are over.
pack; (cd $W/gz && tar cf "$OUT/mb.tar" ./*.gpu.json.gz)
if [ $# -gt 0 ] && [ -x "$D/device_run.sh" ]; then bash $D/device_run.sh 200 "$@"; fi
