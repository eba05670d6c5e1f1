#!/usr/bin/env bash
# Collect the shipped dataset on emulated clusters (as root), resumably, in passes so that all
# domains progress together: pass k brings every domain to k*STEP trials.
#   scripts/collect_dataset.sh [TARGET] [STEP]
# Interrupt at any time; run again to continue where it stopped.
set -u
cd "$(dirname "$0")/.."
TARGET=${1:-200}
STEP=${2:-20}
BIN=${BIN:-.venv/bin/autosync-transfer}
MODELS=${MODELS:-"bert-3l bert bert-12l ncf vgg16-s"}
CLUSTERS=${CLUSTERS:-"A B C"}
PROTOCOL=${PROTOCOL:-"--warmup 3 --iters 10"}
for ((n = STEP; n <= TARGET; n += STEP)); do
  for m in $MODELS; do
    for c in $CLUSTERS; do
      echo "== $(date -u +%FT%TZ) $m-$c -> $n trials"
      $BIN collect "$m-$c" --trials "$n" --launcher emulated $PROTOCOL --reference-every 20 --timeout 120 \
        --store "datasets/trials/$m-$c.jsonl" --seed 0 || echo "collect $m-$c exited with $?"
    done
  done
done
