#!/usr/bin/env bash
# Issue 21's H200 protocol on the device (docs/timing-history.md, "No machine, an H200 protocol
# fixed before its data"): on an H200, the calibration runs `g-*`, then blind23 and blind24 once
# each (`s23-*.once`, `s24-*.once`, packed sealed in $OUT/sealed.tar, to be opened only after
# `h200-c5`'s predictions of them are committed), after the `deal2d` probe of `moe_kernels.cu`
# ($OUT/deal2d-h200.csv; nvcc on the device, from the checkout the device tool sends); on any
# other card nothing runs, so a call that gets an H100 costs only its start. Carried beside
# device_run.sh and its plans.
#
# The g-* rows alone take about 9-10 minutes by the H100's times, so one call's budget may end
# with rows skipped (log.txt: "== budget spent, skipping NAME"); a second call names them:
#   h200_protocol_call.sh 545 $(sed -n 's/^== budget spent, skipping //p' log.txt)
#
# usage: h200_protocol_call.sh [BUDGET_SECONDS [ROW ...]]
#        (default 545: the device tool's 600 s, less margin; no rows: every g-* row, then the sealed ones)
#        h200_protocol_call.sh --rows   prints those rows (for devcarry.sh) and runs nothing
set -u
D=$(cd "$(dirname "$0")" && pwd)
protocol_rows() {
  grep -o '^g-[^|]*' "$D/device_run.sh"
  grep -o '^s2[34]-[a-z]*\.once' "$D/device_run.sh"
}
if [ "${1:-}" = --rows ]; then protocol_rows; exit 0; fi
budget=${1:-545}
shift || true
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card" | tee "$OUT/card.txt"
case "$card" in
  *H200*)
    if [ $# -eq 0 ]; then
      # The first call also records where this card places the MoE GEMMs' CTAs (the H100's
      # placement is `moe_deal_probed_share`'s table; the protocol's fit does not read it):
      # about 20 s, taken from the rows' budget.
      root=$(cd "$D/../.." && pwd)
      t0=$(date +%s)
      (nvcc -O3 -std=c++17 -arch=sm_90 -I "$root/gpu/src/cuda" "$root/scripts/timing/moe_kernels.cu" -o /tmp/mk \
        && /tmp/mk deal2d > "$OUT/deal2d-h200.csv") > "$OUT/deal2d-probe.log" 2>&1
      echo "deal2d probe rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/card.txt"
      budget=$(( budget - ($(date +%s) - t0) ))
      # shellcheck disable=SC2046
      set -- $(protocol_rows)
    fi
    bash "$D/device_run.sh" "$budget" "$@" ;;
  *) echo "not an H200: nothing run" | tee -a "$OUT/card.txt" ;;
esac
