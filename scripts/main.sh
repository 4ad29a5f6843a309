#!/usr/bin/env bash
# Set-up + the main job on its embedded default (CPU only, nothing downloaded).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec r2v rollout "$@"
