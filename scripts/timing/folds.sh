#!/usr/bin/env bash
# Issue 21: the blind sets held out in turn of a fit on one session's corpus (docs/timing-history.md,
# "A thirteenth blind set", "Folds"). blind2-blind11 (k2-* ... k10-*, s11-*) are each held out of
# a fit on every other run h100-c1 was fitted on; blind12 (s12-*) is predicted from the fit on all
# of them. Each fit is h100-c1's recipe (its files in order, its fitted parameters, --balance-steps)
# from START.
#
# Run where docs/timing/data/h100-2026-12-06.tar.xz is unpacked (corpus/, s11/, s12/), with the
# blind sets' plans in plans/ (blindN-swa.native.plan.json, blindN-mamba.native.plan.json,
# blindN-chain.chain.plan.json, made by `kvsim sweep --scenario-file docs/timing/scenarios/...`).
#
# usage: folds.sh START_PROFILE OUT_DIR
# environment: KVSIM the kvsim binary (default `kvsim`); FIT_MORE parameters fitted besides
# h100-c1's, FIT_ONLY the fitted parameters instead of h100-c1's (comma-separated); FILES_MORE
# results fitted besides h100-c1's files (a fold leaves out its own set's, per-op runs included).
set -euo pipefail
start=$1
out=$2
kvsim=${KVSIM:-kvsim}
here=$(cd "$(dirname "$0")" && pwd)
c1=$here/../../docs/timing/h100-c1.json
mkdir -p "$out"
files=${FILES_MORE:-}" "$(python3 -c "import json,sys; print(' '.join(f['file'] for f in json.load(open(sys.argv[1]))['provenance']['fitted_on']))" "$c1")
fit=$(python3 -c "import json,sys; print(','.join(json.load(open(sys.argv[1]))['provenance']['fitted_params']))" "$c1")
[ -n "${FIT_ONLY:-}" ] && fit=$FIT_ONLY
[ -n "${FIT_MORE:-}" ] && fit="$fit,$FIT_MORE"

plan() { # SET LAYOUT -> its plan
  local n
  case $1 in k*) n=${1#k} ;; s*) n=${1#s} ;; esac
  if [ "$2" = chain ]; then echo "plans/blind$n-chain.chain.plan.json"; else echo "plans/blind$n-$2.native.plan.json"; fi
}
result() { case $1 in k*) echo "corpus/$1-$2.gpu.json" ;; *) echo "$1/$1-$2.gpu.json" ;; esac; }

# Fits on TRAIN (the files), predicts SET's three layouts, compares.
fold() {
  local set=$1 name=$2
  shift 2
  "$kvsim" calibrate "$@" --start "$start" --balance-steps --fit "$fit" --name "fold-$name" \
    --out "$out/$name.profile.json" > "$out/$name.calibrate.txt"
  local pairs=()
  for layout in swa mamba chain; do
    "$kvsim" predict "$(plan "$set" $layout)" --profile "$out/$name.profile.json" \
      --out "$out/$set-$layout.pred.json" > /dev/null
    pairs+=("$out/$set-$layout.pred.json" "$(result "$set" $layout)")
  done
  "$kvsim" compare "${pairs[@]}" --out "$out/$set.compare.json" > "$out/$set.compare.txt"
}

pids=()
for set in k2 k3 k4 k5 k6 k7 k8 k9 k10 s11; do
  train=()
  for f in $files; do case $f in corpus/$set-* | s11/$set-*) ;; *) train+=("$f") ;; esac; done
  fold "$set" "$set" "${train[@]}" &
  pids+=($!)
done
# shellcheck disable=SC2086
fold s12 all $files &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
python3 "$here/folds_summary.py" "$out" k2 k3 k4 k5 k6 k7 k8 k9 k10 s11 s12
