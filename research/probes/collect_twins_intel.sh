#!/usr/bin/env bash
# Intel twins of the re-measured stores and of the transfer table's sources: the shipped stores'
# sampler, seed and protocol (seed 0, preset dataset, 3 + 10, a reference every 20; the held-out
# cluster's stores: seed 21, 42 trials, a reference every 25), written into
# benchmarks/results/machines/intel-xeon/{trials,heldout}/. Resumable: run it again to continue.
#   sudo research/probes/collect_twins_intel.sh [pass...]   # passes: 1 2 3 (default: all)
set -u
cd "$(dirname "$0")/../.."
export MLFLOW_DISABLE_TELEMETRY=true TF_ENABLE_ONEDNN_OPTS=0 TF_CPP_MIN_LOG_LEVEL=2
T=benchmarks/results/machines/intel-xeon
BIN=${BIN:-.venv/bin/autosync-transfer}
PASSES=${*:-1 2 3}
for pass in $PASSES; do
  case $pass in
    1)  # the re-measured stores to 100 trials, the held-out cluster's two to 42
      STORES=$T/trials DOMAINS="ncf-A ncf-B ncf-C" scripts/collect_dataset.sh 100 100
      for m in ncf bert-3l; do
        echo "== $(date -u +%FT%TZ) $m-heldout -> 42 trials"
        $BIN collect $m --cluster-file examples/clusters/heldout.yml -n 42 --launcher emulated \
          --warmup 3 --iters 10 --reference-every 25 --timeout 120 --seed 21 \
          --store $T/heldout/$m-heldout.jsonl || echo "collect $m-heldout exited with $?"
      done
      STORES=$T/trials DOMAINS="bert-3l-B bert-12l-B bert-B" scripts/collect_dataset.sh 100 100 ;;
    2)  # the transfer table's sources that are not re-measured, to 100
      STORES=$T/trials DOMAINS="bert-3l-C bert-3l-A bert-A" scripts/collect_dataset.sh 100 100 ;;
    3)  # the re-measured stores to 200
      STORES=$T/trials DOMAINS="ncf-A ncf-B ncf-C bert-3l-B bert-12l-B bert-B" \
        scripts/collect_dataset.sh 200 200 ;;
  esac
done
echo "== $(date -u +%FT%TZ) done"
