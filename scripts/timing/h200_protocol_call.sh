#!/usr/bin/env bash
# Issue 21's H200 protocol on the device (docs/timing-history.md, "No machine, an H200 protocol
# fixed before its data"): on an H200, the calibration runs `g-*`, then blind23 and blind24 once
# each (`s23-*.once`, `s24-*.once`, packed sealed in $OUT/sealed.tar, to be opened only after
# `h200-c5`'s predictions of them are committed); on any other card nothing runs, so a call that
# gets an H100 costs only its start. Carried beside device_run.sh and its plans.
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
    # shellcheck disable=SC2046
    [ $# -gt 0 ] || set -- $(protocol_rows)
    bash "$D/device_run.sh" "$budget" "$@" ;;
  *) echo "not an H200: nothing run" | tee -a "$OUT/card.txt" ;;
esac
