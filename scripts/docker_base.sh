# Sourced by scripts/serve_docker.sh and scripts/terminalbench_docker.sh: Docker on a machine with no image registry.
#
# start_dockerd: unless a daemon already answers on $DOCKER_HOST, starts a private dockerd (data under
#   $R2V_DOCKER_DIR, default /var/tmp/r2v-docker) that leaves the host's network alone (--bridge=none
#   --iptables=false), and stops it by its PID when the calling script exits.
# bookworm_base: makes the image r2v-bookworm:base (once; reused after) by `docker import` of a Debian bookworm
#   minbase root from debootstrap with python3 and pip, set up as python:*-slim images are (pip may install
#   system-wide, python on /usr/local/bin), since no registry is reachable to pull one.
# Needs root, docker.io and debootstrap.
D=${R2V_DOCKER_DIR:-/var/tmp/r2v-docker}
MIRROR=${R2V_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$D"
export DOCKER_HOST="unix://$D/docker.sock"

start_dockerd() {
  if ! docker version >/dev/null 2>&1; then
    dockerd --data-root "$D/data" --exec-root "$D/exec" --pidfile "$D/dockerd.pid" --host "$DOCKER_HOST" \
      --bridge=none --iptables=false --ip-masq=false --ip6tables=false >"$D/dockerd.log" 2>&1 &
    DOCKERD=$!
    trap 'kill "$DOCKERD" 2>/dev/null; wait "$DOCKERD" 2>/dev/null || true' EXIT
    for _ in $(seq 60); do docker version >/dev/null 2>&1 && break; sleep 1; done
  fi
  docker version --format 'docker {{.Server.Version}}'
}

bookworm_base() {
  docker image inspect r2v-bookworm:base >/dev/null 2>&1 && return 0
  local rootfs="$D/rootfs"
  if [ ! -x "$rootfs/usr/bin/python3" ]; then
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates,curl,procps,git \
      bookworm "$rootfs" "$MIRROR" >"$D/debootstrap.log" 2>&1
  fi
  # The host's certificate authorities (a proxy in front of the package index may sign with its own).
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  # What python:*-slim images offer and Debian's differ in: pip may install system-wide, python is on /usr/local.
  rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
  ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python3"
  ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
  ln -sf /usr/bin/pip3 "$rootfs/usr/local/bin/pip"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -c . | docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - r2v-bookworm:base
}
