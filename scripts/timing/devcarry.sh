#!/usr/bin/env bash
# The folder a device call carries for issue 21's runs (docs/timing.md, "Reproducing"), made on a
# fresh machine: target/devcarry/ with the stripped release binaries gzip'd, device_run.sh and the
# h200_protocol_call.sh beside it, and plans/NAME.plan.json.gz for the plans that the named
# device_run.sh rows replay, and only those (no names: every row's). Each plan is made the way
# the committed runs' were: microbenchmark plans by `kvsim microbench plans`, glm53 from the
# built-in scenario, the host-work plan by cache_blocks_in_window.py, every other one from
# docs/timing/scenarios/BASE.json with the strategy its name ends in.
#
# usage: devcarry.sh [ROW ...]        e.g. for the H200 protocol: devcarry.sh $(scripts/timing/h200_protocol_call.sh --rows)
# needs: cargo build --release -p kvsim; cargo build --release -p kvsim-gpu --example kvsim-gpu-bench
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
kvsim=target/release/kvsim
carry=target/devcarry
rows=$(sed -n '/^RUNS="/,/^"$/p' scripts/timing/device_run.sh | grep -v '^RUNS="\|^"$')
want=" $* "
plans=$(while IFS='|' read -r name plan _; do
  if [ $# -gt 0 ] && [[ "$want" != *" $name "* ]]; then continue; fi
  [ "$plan" = - ] || echo "$plan"
done <<< "$rows" | sort -u)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Only what the named rows need, and the binaries gzip'd (device_run.sh unpacks them): the
# device tool carries the checkout and this folder within 64 MiB, and the checkout is over 55.
rm -rf "$carry/plans" "$carry/kvsim" "$carry/kvsim-gpu-bench"
mkdir -p "$carry/plans"
"$kvsim" microbench plans --out-dir "$work/mb" > /dev/null
for p in $plans; do
  out=$work/$p.plan.json
  case $p in
    glm53.native)
      "$kvsim" sweep --scenario glm53-flash --strategy native --out /dev/null --plan-out "$out" > /dev/null ;;
    inkling-a.hostwin)
      "$kvsim" sweep --scenario-file docs/timing/scenarios/inkling-a.json --strategy synthetic --out /dev/null \
        --plan-out "$work/hostwin-from.plan.json" > /dev/null
      python3 scripts/timing/cache_blocks_in_window.py "$work/hostwin-from.plan.json" "$out" ;;
    *.native|*.chain|*.synthetic)
      "$kvsim" sweep --scenario-file "docs/timing/scenarios/${p%.*}.json" --strategy "${p##*.}" --out /dev/null \
        --plan-out "$out" > /dev/null ;;
    *)
      [ -f "$work/mb/$p.plan.json" ] || { echo "devcarry.sh: no way to make plan $p" >&2; exit 2; }
      cp "$work/mb/$p.plan.json" "$out" ;;
  esac
  gzip -c "$out" > "$carry/plans/$p.plan.json.gz"
done
for b in target/release/kvsim target/release/examples/kvsim-gpu-bench; do
  strip -o "$work/$(basename "$b")" "$b"
  gzip -9 -c "$work/$(basename "$b")" > "$carry/$(basename "$b").gz"
done
cp scripts/timing/device_run.sh scripts/timing/h200_protocol_call.sh "$carry/"
echo "$carry: $(echo "$plans" | wc -w) plans, $(du -sh "$carry" | cut -f1)" >&2
