#!/usr/bin/env bash
# Build the `r2v serve` image (docker/serve.Dockerfile) on a machine with no image registry, then run it and play
# episodes from the host (scripts/serve_docker_check.py).
#
#   sudo bash scripts/serve_docker.sh
#
# Starts its own dockerd unless one answers, makes the Debian bookworm base image (scripts/docker_base.sh, shared
# with scripts/terminalbench_docker.sh), builds with the host network (pip and apt reach their indexes), runs each
# server container on the host network bound to 127.0.0.1 with a token, and stops the dockerd it started. Needs
# root, docker.io and debootstrap. With a registry, `docker build -f docker/serve.Dockerfile -t r2v-serve .` is all
# it takes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/docker_base.sh
start_dockerd
bookworm_base

start=$(date +%s)
docker build --network host --build-arg BASE=r2v-bookworm:base -f docker/serve.Dockerfile -t r2v-serve .
echo "r2v-serve built in $(( $(date +%s) - start )) s: $(docker image inspect r2v-serve --format '{{.Size}}') bytes" >&2
python3 scripts/serve_docker_check.py
