#!/usr/bin/env bash
# Set-up + the main job on its embedded default (CPU only, nothing downloaded).
set -euo pipefail
cd "$(dirname "$0")/.."
# R2V_SKIP_INSTALL=1 skips the set-up (done already; the README test runs this script at a miniature size).
# Flags given to this script follow the defaults below and override them (the last --config wins).
[ "${R2V_SKIP_INSTALL:-0}" = 1 ] || bash scripts/install.sh
exec r2v pipeline --config r2v_train/configs/default.yaml --run-dir runs/r2v "$@"
