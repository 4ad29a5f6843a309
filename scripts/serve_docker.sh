#!/usr/bin/env bash
# Build the `r2v serve` image (docker/serve.Dockerfile) on a machine with no image registry, then run it and play
# episodes from the host (scripts/serve_docker_check.py).
#
#   sudo bash scripts/serve_docker.sh
#
# Starts its own dockerd (data under $R2V_DOCKER_DIR, default /var/tmp/r2v-docker) that leaves the host's network
# alone (--bridge=none --iptables=false), imports a Debian bookworm minbase root made by debootstrap as the base image
# (as scripts/terminalbench_docker.sh does; reused when that script made it), builds with the host network (pip and
# apt reach their indexes), runs each server container on the host network bound to 127.0.0.1 with a token, and
# stops dockerd by its PID. Needs root, docker.io and debootstrap. With a registry, `docker build -f
# docker/serve.Dockerfile -t r2v-serve .` is all it takes.
set -euo pipefail
cd "$(dirname "$0")/.."
D=${R2V_DOCKER_DIR:-/var/tmp/r2v-docker}
MIRROR=${R2V_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$D"
export DOCKER_HOST="unix://$D/docker.sock"

if ! docker version >/dev/null 2>&1; then
  dockerd --data-root "$D/data" --exec-root "$D/exec" --pidfile "$D/dockerd.pid" --host "$DOCKER_HOST" \
    --bridge=none --iptables=false --ip-masq=false --ip6tables=false >"$D/dockerd.log" 2>&1 &
  DOCKERD=$!
  trap 'kill "$DOCKERD" 2>/dev/null; wait "$DOCKERD" 2>/dev/null || true' EXIT
  for _ in $(seq 60); do docker version >/dev/null 2>&1 && break; sleep 1; done
fi
docker version --format 'docker {{.Server.Version}}'

if ! docker image inspect r2v-bookworm:base >/dev/null 2>&1; then
  ROOTFS="$D/rootfs"
  if [ ! -x "$ROOTFS/usr/bin/python3" ]; then
    rm -rf "$ROOTFS"
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates,curl,procps,git \
      bookworm "$ROOTFS" "$MIRROR" >"$D/debootstrap.log" 2>&1
  fi
  cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
  rm -f "$ROOTFS"/usr/lib/python3*/EXTERNALLY-MANAGED  # pip may install system-wide, as in python:*-slim
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb
  tar -C "$ROOTFS" -c . | docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - r2v-bookworm:base
fi

start=$(date +%s)
docker build --network host --build-arg BASE=r2v-bookworm:base -f docker/serve.Dockerfile -t r2v-serve .
echo "r2v-serve built in $(( $(date +%s) - start )) s: $(docker image inspect r2v-serve --format '{{.Size}}') bytes" >&2
python3 scripts/serve_docker_check.py
