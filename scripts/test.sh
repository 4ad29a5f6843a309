#!/usr/bin/env bash
# Set-up + the whole offline test suite (this is what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# HumanEval+ data: tests read EvalPlus' official release from ../shared when it is there (no download).
if [ -z "${HUMANEVAL_OVERRIDE_PATH:-}" ] && [ -f ../shared/data/HumanEvalPlus-v0.1.10.jsonl.gz ]; then
  export HUMANEVAL_OVERRIDE_PATH="$(cd .. && pwd)/shared/data/HumanEvalPlus-v0.1.10.jsonl.gz"
fi
# two pytest-xdist workers: most tests leave a core idle (sandbox deadlines, subprocess start-ups)
exec ${PYTHON:-python3} -m pytest -q -n 2 "$@"
