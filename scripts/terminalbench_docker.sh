#!/usr/bin/env bash
# Terminal-Bench tasks through backend="docker" on a machine with no image registry.
#
#   sudo bash scripts/terminalbench_docker.sh TASKS_DIR [judge options, e.g. --tasks a b c --hacks print_summary]
#
# Starts its own dockerd unless one answers, makes the Debian bookworm base image (scripts/docker_base.sh, shared
# with scripts/serve_docker.sh) and tags it as each FROM image the tasks' Dockerfiles name (no registry is
# reachable), runs benchmarks/terminalbench_judge.py --backend docker (task containers run with --network none;
# image builds use the host network so pip can reach the package index), and stops the dockerd it started. Needs
# root, docker.io, debootstrap and the `docker` Python package.
set -euo pipefail
TASKS=${1:?usage: terminalbench_docker.sh TASKS_DIR [judge options]}
shift
source "$(dirname "$0")/docker_base.sh"
start_dockerd
bookworm_base
# Every base image the tasks name, as the bookworm root (a stand-in: same Debian, python 3.11).
for image in $(grep -hoiE '^FROM[[:space:]]+[^[:space:]]+' "$TASKS"/*/environment/Dockerfile "$TASKS"/*/Dockerfile \
                 2>/dev/null | awk '{print $2}' | sort -u); do
  docker tag r2v-bookworm:base "$image"
done

python benchmarks/terminalbench_judge.py "$TASKS" --backend docker --build-network host "$@"
