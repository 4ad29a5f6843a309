#!/usr/bin/env bash
# Installs r2v and every CPU backend from scratch. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# torch first, pinned: this resolves to the local CPU wheel; a bare `torch` requirement would pull CUDA.
$PY -m pip install -q torch==2.13.0
# alfworld compiles fast-downward and jericho from source (about 2 minutes): it needs cmake and g++.
if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq cmake g++) >/dev/null 2>&1 \
      || echo "install.sh: could not install cmake/g++; the alfworld extra may fail to build" >&2
  fi
fi
$PY -m pip install -q -e ".[textworld,alfworld,humaneval,train,api,docker,ray,test]"
# bubblewrap gives the code/terminal sandboxes PID, network and mount namespaces; the sandbox falls back to
# `unshare` or plain rlimits without it, so a failure here is not fatal.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
      || echo "install.sh: could not install bubblewrap; sandboxes use the next-strongest isolation" >&2
  fi
fi
