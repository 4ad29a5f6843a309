#!/usr/bin/env bash
# Set-up + the whole offline test suite (this is what CI runs), as a new user's first run: on an empty cache.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# HumanEval+ data: tests read EvalPlus' official release from ../shared when it is there (no download).
if [ -z "${HUMANEVAL_OVERRIDE_PATH:-}" ] && [ -f ../shared/data/HumanEvalPlus-v0.1.10.jsonl.gz ]; then
  export HUMANEVAL_OVERRIDE_PATH="$(cd .. && pwd)/shared/data/HumanEvalPlus-v0.1.10.jsonl.gz"
fi
# Every run is first contact: the first Terminal-Bench episodes on a new machine once lost an agent's write while
# every run on a warm cache passed. So $R2V_CACHE (generated games, expected outputs, built tasks, the converted
# SmolLM2) starts as a fresh empty folder, removed at exit; R2V_KEEP_CACHE=1 keeps it, and a caller's own
# R2V_CACHE is used as it is (and never removed).
if [ -n "${R2V_CACHE:-}" ]; then
  echo "test.sh: R2V_CACHE=$R2V_CACHE (the caller's, used as it is)" >&2
else
  R2V_CACHE=$(mktemp -d "${TMPDIR:-/tmp}/r2v-cache.XXXXXX")
  export R2V_CACHE
  if [ "${R2V_KEEP_CACHE:-0}" = 1 ]; then
    echo "test.sh: R2V_CACHE=$R2V_CACHE (a new empty cache, kept after the run: R2V_KEEP_CACHE=1)" >&2
  else
    echo "test.sh: R2V_CACHE=$R2V_CACHE (a new empty cache, removed at exit; R2V_KEEP_CACHE=1 keeps it)" >&2
    # no `exec` below: the trap must outlive pytest. Built tasks may hold read-only folders: make them writable.
    trap 'chmod -R u+rwX "$R2V_CACHE" 2>/dev/null; rm -rf "$R2V_CACHE"' EXIT
  fi
fi
# two pytest-xdist workers: most tests leave a core idle (sandbox deadlines, subprocess start-ups)
${PYTHON:-python3} -m pytest -q -n 2 "$@"
