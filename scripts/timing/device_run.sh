#!/usr/bin/env bash
# Issue 8 on the device (docs/timing.md): the GPU runs that calibrate and evaluate the cost
# model and the two experiments, in priority order, within a time budget.
#
# Run through the device tool with the script, kvsim, kvsim-gpu-bench and plans/*.plan.json.gz
# in one carried folder (the script reads them from its own folder; see docs/timing.md,
# "Reproducing"). Strip the carried kvsim (`strip kvsim`): with its debug information the
# working tree and the folder pass the device tool's 64 MiB; devcarry.sh also gzips both binaries,
# which this script unpacks where it finds them. Writes $OUT/log.txt and
# $OUT/results.tar (gzip'd results, appended after every run, so a cut-short call still brings
# back what finished).
#
# usage: device_run.sh BUDGET_SECONDS [RUN_NAME ...]   (no names: every run below)
set -u -o pipefail
budget=${1:-500}
shift || true
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
N=$(find /usr/local /opt /usr/lib -name 'libnvrtc.so.13' 2>/dev/null | head -1)
[ -n "$N" ] && export LD_LIBRARY_PATH=$(dirname "$N"):$LD_LIBRARY_PATH
D=$(cd "$(dirname "$0")" && pwd)
# devcarry.sh carries the binaries gzip'd (the device tool's 64 MiB); unpack them once.
for b in kvsim kvsim-gpu-bench; do
  if [ -f "$D/$b.gz" ]; then gunzip -f "$D/$b.gz" && chmod +x "$D/$b"; fi
done
W=/tmp/kvsim-timing
mkdir -p $W
LOG=$OUT/log.txt
start=$(date +%s)
for f in $D/plans/*.plan.json.gz; do gunzip -c "$f" > $W/$(basename "$f" .gz); done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tee -a $LOG

# name | plan | flags | timed runs. Prefixes: sN- blind set N (sealed), rN- blind set N measured
# again, c- and kN- one session's corpus (the suite plain, the calibration plans, blind set N again;
# docs/timing-history.md, "One session's corpus"), tN- calibration layouts drawn at random (trainN-*),
# g- the H200 corpus (the suite plain, the calibration plans, train1 and train2, one timed run each).
# Suffixes: .ops per-op timing, .once one timed run (a blind set measured where device time is short).
RUNS="
selfcheck|-|-|-
ink-a.ops|inkling-a.native|--time-ops|3
oss-a.ops|gpt-oss-a.native|--time-ops|3
ink-a|inkling-a.native||5
oss-a|gpt-oss-a.native||5
ink-b|inkling-b.native||5
oss-b|gpt-oss-b.native||5
oss-a.zero.hidden|gpt-oss-a.synthetic|--synthetic-kv zero --moe-input hidden|3
ink-a.synth|inkling-a.synthetic||3
ink-a.hostwin|inkling-a.hostwin||3
ink-a.hidden|inkling-a.native|--moe-input hidden|3
oss-a.hidden|gpt-oss-a.native|--moe-input hidden|3
ink-a.zero.hidden|inkling-a.synthetic|--synthetic-kv zero --moe-input hidden|3
ink-a.zero.token|inkling-a.synthetic|--synthetic-kv zero|3
glm53|glm53.native||3
u-swa|unseen-swa.native||3
u-mamba|unseen-mamba.native||3
u-chain|unseen-chain.chain||2
b-swa|blind-swa.native||3
b-mamba|blind-mamba.native||3
b-chain|blind-chain.chain||2
s2-swa|blind2-swa.native||3
s2-mamba|blind2-mamba.native||3
s2-chain|blind2-chain.chain||2
s3-swa|blind3-swa.native||3
s3-mamba|blind3-mamba.native||3
s3-chain|blind3-chain.chain||2
s4-swa|blind4-swa.native||3
s4-mamba|blind4-mamba.native||3
s4-chain|blind4-chain.chain||2
s5-swa|blind5-swa.native||3
s5-mamba|blind5-mamba.native||3
s5-chain|blind5-chain.chain||3
s6-swa|blind6-swa.native||3
s6-mamba|blind6-mamba.native||3
s6-chain|blind6-chain.chain||3
s7-swa|blind7-swa.native||3
s7-mamba|blind7-mamba.native||3
s7-chain|blind7-chain.chain||3
s8-swa|blind8-swa.native||3
s8-mamba|blind8-mamba.native||3
s8-chain|blind8-chain.chain||3
s9-swa|blind9-swa.native||3
s9-mamba|blind9-mamba.native||3
s9-chain|blind9-chain.chain||3
s9-swa.ops|blind9-swa.native|--time-ops|2
s9-mamba.ops|blind9-mamba.native|--time-ops|2
s9-chain.ops|blind9-chain.chain|--time-ops|2
s10-swa|blind10-swa.native||3
s10-mamba|blind10-mamba.native||3
s10-chain|blind10-chain.chain||3
s11-swa|blind11-swa.native||3
s11-mamba|blind11-mamba.native||3
s11-chain|blind11-chain.chain||3
s11-swa.ops|blind11-swa.native|--time-ops|2
s11-mamba.ops|blind11-mamba.native|--time-ops|2
s11-chain.ops|blind11-chain.chain|--time-ops|2
s12-swa|blind12-swa.native||3
s12-mamba|blind12-mamba.native||3
s12-chain|blind12-chain.chain||3
s13-swa|blind13-swa.native||3
s13-mamba|blind13-mamba.native||3
s13-chain|blind13-chain.chain||3
s13-swa.ops|blind13-swa.native|--time-ops|2
s13-mamba.ops|blind13-mamba.native|--time-ops|2
s13-chain.ops|blind13-chain.chain|--time-ops|2
s14-swa|blind14-swa.native||3
s14-mamba|blind14-mamba.native||3
s14-chain|blind14-chain.chain||3
s14-mamba.ops|blind14-mamba.native|--time-ops|2
s14-chain.ops|blind14-chain.chain|--time-ops|2
s14-swa.ops|blind14-swa.native|--time-ops|2
s15-swa|blind15-swa.native||3
s15-mamba|blind15-mamba.native||3
s15-chain|blind15-chain.chain||3
s16-swa|blind16-swa.native||3
s16-mamba|blind16-mamba.native||3
s16-chain|blind16-chain.chain||3
s16-chain.ops|blind16-chain.chain|--time-ops|2
s16-mamba.ops|blind16-mamba.native|--time-ops|2
s17-swa|blind17-swa.native||3
s17-mamba|blind17-mamba.native||3
s17-chain|blind17-chain.chain||3
s18-swa|blind18-swa.native||3
s18-mamba|blind18-mamba.native||3
s18-chain|blind18-chain.chain||3
s18-swa.ops|blind18-swa.native|--time-ops|2
s18-mamba.ops|blind18-mamba.native|--time-ops|2
s18-chain.ops|blind18-chain.chain|--time-ops|2
s19-swa|blind19-swa.native||3
s19-mamba|blind19-mamba.native||3
s19-chain|blind19-chain.chain||3
s20-swa|blind20-swa.native||3
s20-mamba|blind20-mamba.native||3
s20-chain|blind20-chain.chain||3
s19-chain.ops|blind19-chain.chain|--time-ops|2
s20-swa.ops|blind20-swa.native|--time-ops|2
s20-chain.ops|blind20-chain.chain|--time-ops|2
s19-swa.once|blind19-swa.native||1
s19-mamba.once|blind19-mamba.native||1
s19-chain.once|blind19-chain.chain||1
s20-swa.once|blind20-swa.native||1
s20-mamba.once|blind20-mamba.native||1
s20-chain.once|blind20-chain.chain||1
s21-swa|blind21-swa.native||3
s21-mamba|blind21-mamba.native||3
s21-chain|blind21-chain.chain||3
s22-swa|blind22-swa.native||3
s22-mamba|blind22-mamba.native||3
s22-chain|blind22-chain.chain||3
s23-swa|blind23-swa.native||3
s23-mamba|blind23-mamba.native||3
s23-chain|blind23-chain.chain||3
s24-swa|blind24-swa.native||3
s24-mamba|blind24-mamba.native||3
s24-chain|blind24-chain.chain||3
t1-swa|train1-swa.native||2
t1-mamba|train1-mamba.native||2
t1-chain|train1-chain.chain||2
t2-swa|train2-swa.native||2
t2-mamba|train2-mamba.native||2
t2-chain|train2-chain.chain||2
k16-swa|blind16-swa.native||1
k16-mamba|blind16-mamba.native||1
k16-chain|blind16-chain.chain||1
r12-swa.x5|blind12-swa.native||5
r8-swa|blind8-swa.native||3
r8-mamba|blind8-mamba.native||3
r8-chain|blind8-chain.chain||3
r4-swa|blind4-swa.native||3
r4-mamba|blind4-mamba.native||3
r4-chain|blind4-chain.chain||3
s7-mamba.ops|blind7-mamba.native|--time-ops|2
s2-mamba.ops|blind2-mamba.native|--time-ops|2
s5-chain.ops|blind5-chain.chain|--time-ops|2
b-swa.ops|blind-swa.native|--time-ops|2
b-chain.ops|blind-chain.chain|--time-ops|2
b-mamba.ops|blind-mamba.native|--time-ops|2
c-attn-d64-kv1|attn-d64-kv1||2
c-attn-d96-kv2|attn-d96-kv2||2
c-attn-d128-kv8|attn-d128-kv8||2
c-attn-d256-kv4|attn-d256-kv4||2
c-attn-d64-kv16|attn-d64-kv16||2
c-attn-generic-d80|attn-generic-d80||2
c-mla-d576|mla-d576||2
c-state-d32-h16|state-d32-h16||2
c-state-d128-h4|state-d128-h4||2
c-state-d256-h8|state-d256-h8||2
c-chain-copies|chain-copies||2
c-moe-collapsed|moe-collapsed|--synthetic-kv zero --moe-input hidden|2
c-ink-a|inkling-a.native||2
c-oss-a|gpt-oss-a.native||2
c-glm53|glm53.native||2
k2-swa|blind2-swa.native||1
k2-mamba|blind2-mamba.native||1
k2-chain|blind2-chain.chain||1
k3-swa|blind3-swa.native||1
k3-mamba|blind3-mamba.native||1
k3-chain|blind3-chain.chain||1
k4-swa|blind4-swa.native||1
k4-mamba|blind4-mamba.native||1
k4-chain|blind4-chain.chain||1
k5-swa|blind5-swa.native||1
k5-mamba|blind5-mamba.native||1
k5-chain|blind5-chain.chain||1
k6-swa|blind6-swa.native||1
k6-mamba|blind6-mamba.native||1
k6-chain|blind6-chain.chain||1
k7-swa|blind7-swa.native||1
k7-mamba|blind7-mamba.native||1
k7-chain|blind7-chain.chain||1
k8-swa|blind8-swa.native||1
k8-mamba|blind8-mamba.native||1
k8-chain|blind8-chain.chain||1
k9-swa|blind9-swa.native||1
k9-mamba|blind9-mamba.native||1
k9-chain|blind9-chain.chain||1
k10-swa|blind10-swa.native||1
k10-mamba|blind10-mamba.native||1
k10-chain|blind10-chain.chain||1
g-attn-d64-kv1|attn-d64-kv1||1
g-attn-d96-kv2|attn-d96-kv2||1
g-attn-d128-kv8|attn-d128-kv8||1
g-attn-d256-kv4|attn-d256-kv4||1
g-attn-d64-kv16|attn-d64-kv16||1
g-attn-generic-d80|attn-generic-d80||1
g-mla-d576|mla-d576||1
g-state-d32-h16|state-d32-h16||1
g-state-d128-h4|state-d128-h4||1
g-state-d256-h8|state-d256-h8||1
g-chain-copies|chain-copies||1
g-moe-collapsed|moe-collapsed|--synthetic-kv zero --moe-input hidden|1
g-ink-a|inkling-a.native||1
g-oss-a|gpt-oss-a.native||1
g-glm53|glm53.native||1
g-t1-swa|train1-swa.native||1
g-t1-mamba|train1-mamba.native||1
g-t1-chain|train1-chain.chain||1
g-t2-swa|train2-swa.native||1
g-t2-mamba|train2-mamba.native||1
g-t2-chain|train2-chain.chain||1
s23-swa.once|blind23-swa.native||1
s23-mamba.once|blind23-mamba.native||1
s23-chain.once|blind23-chain.chain||1
s24-swa.once|blind24-swa.native||1
s24-mamba.once|blind24-mamba.native||1
s24-chain.once|blind24-chain.chain||1
r23-swa.ops|blind23-swa.native|--time-ops|2
r24-swa.ops|blind24-swa.native|--time-ops|2
s25-swa|blind25-swa.native||3
s25-mamba|blind25-mamba.native||3
s25-chain|blind25-chain.chain||3
s26-swa|blind26-swa.native||3
s26-mamba|blind26-mamba.native||3
s26-chain|blind26-chain.chain||3
s27-swa|blind27-swa.native||3
s27-mamba|blind27-mamba.native||3
s27-chain|blind27-chain.chain||3
s28-swa|blind28-swa.native||3
s28-mamba|blind28-mamba.native||3
s28-chain|blind28-chain.chain||3
r25-chain|blind25-chain.chain||3
r27-chain|blind27-chain.chain||3
r27-mamba|blind27-mamba.native||3
s29-swa|blind29-swa.native||3
s29-mamba|blind29-mamba.native||3
s29-chain|blind29-chain.chain||3
s30-swa|blind30-swa.native||3
s30-mamba|blind30-mamba.native||3
s30-chain|blind30-chain.chain||3
s31-swa|blind31-swa.native||3
s31-mamba|blind31-mamba.native||3
s31-chain|blind31-chain.chain||3
s32-swa|blind32-swa.native||3
s32-mamba|blind32-mamba.native||3
s32-chain|blind32-chain.chain||3
"

want=" $* "
while IFS='|' read -r name plan flags repeat; do
  [ -z "$name" ] && continue
  if [ $# -gt 0 ] && [[ "$want" != *" $name "* ]]; then continue; fi
  now=$(date +%s)
  if [ $((now - start)) -gt "$budget" ]; then echo "== budget spent, skipping $name" | tee -a $LOG; continue; fi
  t0=$(date +%s.%N)
  if [ "$name" = selfcheck ]; then
    timeout 120 $D/kvsim-gpu-bench selfcheck --seed 8 > $W/selfcheck.log 2>&1; rc=$?
    tail -25 $W/selfcheck.log >> $LOG
  else
    # shellcheck disable=SC2086
    timeout 200 $D/kvsim replay $W/$plan.plan.json --backend gpu --warmup 1 --repeat "$repeat" $flags \
      --out $W/$name.gpu.json > $W/$name.log 2>&1; rc=$?
    # sN-* (s2-* on) are blind sets: no timings in the log, packed apart and kept sealed
    # until predictions for them are committed.
    if [[ "$name" =~ ^s[0-9]+- ]]; then
      grep -v 'µs\|MAPE' $W/$name.log >> $LOG; tarball=$OUT/sealed.tar
    else
      cat $W/$name.log >> $LOG; tarball=$OUT/results.tar
    fi
    [ -f $W/$name.gpu.json ] && gzip -c $W/$name.gpu.json > $W/$name.gpu.json.gz \
      && (cd $W && tar rf "$tarball" $name.gpu.json.gz)
  fi
  t1=$(date +%s.%N)
  awk -v n="$name" -v r="$rc" -v a="$t0" -v b="$t1" 'BEGIN{printf "== %s rc=%s %.1f s\n", n, r, b - a}' | tee -a $LOG
done <<< "$RUNS"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tee -a $LOG
