#!/usr/bin/env bash
# Conformance: kvsim's KV-cache model against vLLM 0.33.0's own KVCacheManager.
#  1. install vLLM 0.33.0 into a cached virtualenv outside the clone (setup_venv.sh);
#  2. generate KVSIM_CONFORMANCE_TRACES (default 500) realistic traces with the seeded
#     generator, which drives real vLLM and records its observations;
#  3. cross-check: traces from kvsim's own generator, replayed through vLLM;
#  4. `kvsim conformance` compares every trace line by line; any divergence fails
#     the run and prints the first divergent op with both sides.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
count="${KVSIM_CONFORMANCE_TRACES:-500}"
seed="${KVSIM_CONFORMANCE_SEED:-20261129}"
py="$("$here/setup_venv.sh" | tail -n 1)"
out="$root/target/conformance"
rm -rf "$out" && mkdir -p "$out/vllm" "$out/kvsim"
cargo build --release -q -p kvsim
kvsim="$root/target/release/kvsim"
echo "conformance: generating $count traces with vLLM 0.33.0 (seed $seed)"
PYTHONHASHSEED=0 "$py" "$here/gen_traces.py" --seed "$seed" --count "$count" --out "$out/vllm"
"$kvsim" conformance "$out/vllm" --min-traces "$count"
echo "conformance: cross-check, kvsim-generated traces replayed by vLLM"
"$kvsim" gen-traces --seed "$seed" --count 160 --out "$out/kvsim"
PYTHONHASHSEED=0 "$py" "$here/replay_dir.py" "$out/kvsim"
# Goal: some traces make the hybrid fixed point re-ask a group (the generator seeks them;
# a single-pass hit computation diverges from vLLM on exactly those).
"$kvsim" conformance "$out/kvsim" --min-traces 160 --require-fixed-point
