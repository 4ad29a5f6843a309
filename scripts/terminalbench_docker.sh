#!/usr/bin/env bash
# Terminal-Bench tasks through backend="docker" on a machine with no image registry.
#
#   sudo bash scripts/terminalbench_docker.sh TASKS_DIR [judge options, e.g. --tasks a b c --hacks print_summary]
#
# Starts its own dockerd (data under $R2V_DOCKER_DIR, default /var/tmp/r2v-docker) that leaves the host's network
# alone (--bridge=none --iptables=false), builds the base images the tasks' Dockerfiles name from Debian packages
# with debootstrap (no registry is reachable: `docker import` of a bookworm minbase root with python3 and pip,
# tagged as each FROM image), runs benchmarks/terminalbench_judge.py --backend docker (task containers run with
# --network none; image builds use the host network so pip can reach the package index), and stops dockerd by
# its PID. Needs root, docker.io, debootstrap and the `docker` Python package.
set -euo pipefail
TASKS=${1:?usage: terminalbench_docker.sh TASKS_DIR [judge options]}
shift
D=${R2V_DOCKER_DIR:-/var/tmp/r2v-docker}
MIRROR=${R2V_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$D"
export DOCKER_HOST="unix://$D/docker.sock"

dockerd --data-root "$D/data" --exec-root "$D/exec" --pidfile "$D/dockerd.pid" --host "$DOCKER_HOST" \
  --bridge=none --iptables=false --ip-masq=false --ip6tables=false >"$D/dockerd.log" 2>&1 &
DOCKERD=$!
trap 'kill "$DOCKERD" 2>/dev/null; wait "$DOCKERD" 2>/dev/null || true' EXIT
for _ in $(seq 60); do docker version >/dev/null 2>&1 && break; sleep 1; done
docker version --format 'docker {{.Server.Version}}'

if ! docker image inspect r2v-bookworm:base >/dev/null 2>&1; then
  ROOTFS="$D/rootfs"
  if [ ! -x "$ROOTFS/usr/bin/python3" ]; then
    rm -rf "$ROOTFS"
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates,curl,procps,git \
      bookworm "$ROOTFS" "$MIRROR" >"$D/debootstrap.log" 2>&1
  fi
  # The host's certificate authorities (a proxy in front of the package index may sign with its own).
  cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
  # What python:*-slim images offer and Debian's differ in: pip may install system-wide, python is on /usr/local.
  rm -f "$ROOTFS"/usr/lib/python3*/EXTERNALLY-MANAGED
  ln -sf /usr/bin/python3 "$ROOTFS/usr/local/bin/python3"
  ln -sf /usr/bin/python3 "$ROOTFS/usr/local/bin/python"
  ln -sf /usr/bin/pip3 "$ROOTFS/usr/local/bin/pip"
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb
  tar -C "$ROOTFS" -c . | docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - r2v-bookworm:base
fi
# Every base image the tasks name, as the bookworm root (a stand-in: same Debian, python 3.11).
for image in $(grep -hoiE '^FROM[[:space:]]+[^[:space:]]+' "$TASKS"/*/environment/Dockerfile "$TASKS"/*/Dockerfile \
                 2>/dev/null | awk '{print $2}' | sort -u); do
  docker tag r2v-bookworm:base "$image"
done

python benchmarks/terminalbench_judge.py "$TASKS" --backend docker --build-network host "$@"
