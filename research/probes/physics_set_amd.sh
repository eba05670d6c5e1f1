#!/usr/bin/env bash
# One AMD physics set under the calibration's median protocol: calibrations and profiles written
# into DIR/{calibrations,profiles} (default benchmarks/results/machines/amd-epyc).
#   sudo research/probes/physics_set_amd.sh [DIR] [CLUSTERS] [MODELS]
#   (defaults: A B C heldout; bert-3l bert bert-12l ncf vgg16-s)
set -u
cd "$(dirname "$0")/../.."
export MLFLOW_DISABLE_TELEMETRY=true TF_ENABLE_ONEDNN_OPTS=0 TF_CPP_MIN_LOG_LEVEL=2
DIR=${1:-benchmarks/results/machines/amd-epyc}
CLUSTERS=${2:-A B C heldout}
MODELS=${3:-bert-3l bert bert-12l ncf vgg16-s}
BIN=${BIN:-.venv/bin/autosync-transfer}
mkdir -p "$DIR/calibrations" "$DIR/profiles"
export AUTOSYNC_CALIBRATIONS_DIR=$DIR/calibrations AUTOSYNC_PROFILES_DIR=$DIR/profiles
for c in $CLUSTERS; do
  echo "== $(date -u +%FT%TZ) calibrate $c"
  if [ "$c" = heldout ]; then
    $BIN clusters calibrate --cluster-file examples/clusters/heldout.yml --force || echo "calibrate $c exited with $?"
  else
    $BIN clusters calibrate "$c" --force || echo "calibrate $c exited with $?"
  fi
done
for m in $MODELS; do
  echo "== $(date -u +%FT%TZ) profile $m"
  $BIN domains profile "$m" --force || echo "profile $m exited with $?"
done
echo "== $(date -u +%FT%TZ) done"
