#!/usr/bin/env bash
# Collect the shipped dataset on emulated clusters (as root), resumably, in passes so that all
# domains progress together: pass k brings every domain to k*STEP trials.
#   scripts/collect_dataset.sh [TARGET] [STEP]
#   DOMAINS="ncf-A bert-B" scripts/collect_dataset.sh 200 200   # these domains, in this order
#   REMEASURE=unchecked,disturbed scripts/collect_dataset.sh 200 200   # also measure those again
#   STORES=DIR scripts/collect_dataset.sh 200 100   # write the stores into DIR (another machine type)
# Interrupt at any time; run again to continue where it stopped.
set -u
cd "$(dirname "$0")/.."
TARGET=${1:-200}
STEP=${2:-20}
BIN=${BIN:-.venv/bin/autosync-transfer}
MODELS=${MODELS:-"bert-3l bert bert-12l ncf vgg16-s"}
CLUSTERS=${CLUSTERS:-"A B C"}
PROTOCOL=${PROTOCOL:-"--warmup 3 --iters 10"}
STORES=${STORES:-datasets/trials}
if [ -z "${DOMAINS:-}" ]; then
  DOMAINS=""
  for m in $MODELS; do for c in $CLUSTERS; do DOMAINS="$DOMAINS $m-$c"; done; done
fi
for ((n = STEP; n <= TARGET; n += STEP)); do
  for d in $DOMAINS; do
    echo "== $(date -u +%FT%TZ) $d -> $n trials"
    $BIN collect "$d" -n "$n" --launcher emulated $PROTOCOL --reference-every 20 --timeout 120 \
      --store "$STORES/$d.jsonl" --seed 0 ${REMEASURE:+--remeasure "$REMEASURE"} \
      || echo "collect $d exited with $?"
  done
done
