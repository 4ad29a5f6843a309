#!/usr/bin/env bash
# Set-up + the main job on its embedded default (CPU only, nothing downloaded).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec r2v pipeline --config r2v_train/configs/default.yaml --run-dir runs/r2v "$@"
