#!/usr/bin/env bash
# Issue 21's H200 protocol in one device call (docs/timing-history.md, "No machine, an H200
# protocol fixed before its data"): on an H200, the calibration runs `g-*`, then blind23 and
# blind24 once each (`s23-*.once`, `s24-*.once`, packed sealed in $OUT/sealed.tar, to be opened
# only after `h200-c5`'s predictions of them are committed); on any other card nothing runs, so
# a call that gets an H100 costs only its start. Carried beside device_run.sh and its plans.
#
# usage: h200_protocol_call.sh [BUDGET_SECONDS]   (default 545: the device tool's 600 s, less margin)
set -u
D=$(cd "$(dirname "$0")" && pwd)
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card" | tee "$OUT/card.txt"
case "$card" in
  *H200*)
    # shellcheck disable=SC2046
    bash "$D/device_run.sh" "${1:-545}" $(grep -o '^g-[^|]*' "$D/device_run.sh") \
      $(grep -o '^s2[34]-[a-z]*\.once' "$D/device_run.sh") ;;
  *) echo "not an H200: nothing run" | tee -a "$OUT/card.txt" ;;
esac
