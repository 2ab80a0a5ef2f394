#!/usr/bin/env bash
# Issue 23 on ONE H200: attention-DP ranks replayed in lock-step, each rank on its own thread,
# executor, stream and pools, all on device 0 (--devices 1), over the host exchange.
# Shows: (1) the single-device replay still passes (reference); (2) the same plans with
# --devices 1 pass content verification and the gathered exchange at every step; (3) a
# message_lag fault on rank 1 shows as rank 1's lag, rank 0's wait and the skew on every step;
# (4) --devices 2 / --exchange nccl on one GPU are typed exit-2 errors, not panics.
# It measures NO multi-GPU result. Needs target/devcarry/kvsim (stripped release binary);
# plans are made here with it (kvsim sweep runs on the CPU in a second).
# Run through the device tool with carry ["target/devcarry"]:
#   bash scripts/gpu/ranks_device_check.sh
set -u -o pipefail
K=target/devcarry/kvsim; OUT=${OUT:-/tmp/ranks-out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
N=$(find /usr/local /opt /usr/lib -name 'libnvrtc.so.13' 2>/dev/null | head -1); [ -n "$N" ] && export LD_LIBRARY_PATH=$(dirname "$N"):$LD_LIBRARY_PATH
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
P=$OUT/plans; mkdir -p "$P"
$K sweep --scenario inkling-tp4-dp2 --strategy native --plan-out "$P/dp2.json" --out "$P/dp2.art.json" > /dev/null
$K sweep --scenario-file docs/timing/scenarios/inkling-dp4.json --strategy native --plan-out "$P/dp4.json" --out "$P/dp4.art.json" > /dev/null
# The same plans with rank 1's messages 2 steps late (the plan's message_lag fault).
for n in dp2 dp4; do
  sed '0,/{/s//{"faults":[{"fault":"message_lag","rank":1,"steps":2}],/' "$P/$n.json" > "$P/${n}_lag.json"
done
run() { local tag=$1; shift; echo "== $tag: $*"; timeout 280 "$K" "$@"; echo "rc=$?"; }
{
run ref-shadow replay tests/data/plans/shadow_decode_dp2.json --backend gpu --out "$OUT/shadow_ref.json"
run ranks-shadow replay tests/data/plans/shadow_decode_dp2.json --backend gpu --devices 1 --lag-step-us 500 --out "$OUT/shadow_ranks.json"
run ref-dp2 replay "$P/dp2.json" --backend gpu --out "$OUT/dp2_ref.json"
run ranks-dp2 replay "$P/dp2.json" --backend gpu --devices 1 --repeat 3 --out "$OUT/dp2_ranks.json"
run ranks-dp2-lag replay "$P/dp2_lag.json" --backend gpu --devices 1 --repeat 3 --out "$OUT/dp2_lag_ranks.json"
run ranks-dp4-lag replay "$P/dp4_lag.json" --backend gpu --devices 1 --out "$OUT/dp4_lag_ranks.json"
run predict-dp2-lag predict "$P/dp2_lag.json" --devices 1 --out "$OUT/dp2_lag_predict.json"
run want-exit2-devices2 replay "$P/dp2.json" --backend gpu --devices 2 --out "$OUT/no.json"
run want-exit2-nccl replay "$P/dp2.json" --backend gpu --devices 1 --exchange nccl --out "$OUT/no.json"
} 2>&1 | tee "$OUT/ranks.log"
# A summary line per lock-step result (python3 if present; the JSON files come back anyway).
command -v python3 > /dev/null && python3 - "$OUT" <<'PY' 2>&1 | tee "$OUT/summary.txt"
import json, sys, os
o = sys.argv[1]
for f in ("shadow_ranks", "dp2_ranks", "dp2_lag_ranks", "dp4_lag_ranks"):
    p = f"{o}/{f}.json"
    if not os.path.exists(p): print(f, "MISSING"); continue
    v = json.load(open(p)); r = v["ranks"]; t = r["totals"]
    lagged = [s for s in r["steps"] if s["rank_lag_us"][1] > 0]
    w0 = sorted(s["rank_wait_us"][0] for s in lagged)
    print(f, v["outcome"]["result"], "rows", v["verification"]["rows_verified"], "exchange_verified", r["exchange_verified"],
          "max_skew_us %.1f @%s" % (t["max_skew_us"], t["max_skew_step"]), "exchange_us_median %.1f" % t["exchange_us_median"],
          "rank0_wait_on_lagged_steps_median %.1f" % (w0[len(w0)//2] if w0 else 0.0))
PY
