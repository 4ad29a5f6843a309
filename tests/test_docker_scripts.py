"""The two registry-free Docker scripts share one set-up (``scripts/docker_base.sh``): start a private dockerd unless
one answers, make ``r2v-bookworm:base`` once. Run here against stand-ins for docker, dockerd, debootstrap and the
Python step that log their arguments (a test machine has no Docker engine; docs/serving.md and docs/terminalbench.md
give the real runs), so what is checked is the scripts' own flow: what they start, make, tag and run, and in which
order."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# `docker version` answers once the stand-in dockerd has written its socket file; `docker image inspect` knows the
# images that `docker import` or `docker tag` made.
DOCKER = """#!/bin/sh
echo "docker $*" >> "$LOG"
case "$1" in
  version) [ -e "$STATE/daemon" ] || exit 1; [ "$2" = --format ] && echo "docker 0.0-stand-in"; exit 0;;
  image) grep -qxF "$3" "$STATE/images" 2>/dev/null;;
  import) cat > /dev/null; echo "$5" >> "$STATE/images";;
  tag) echo "$3" >> "$STATE/images";;
  build) echo "$9" >> "$STATE/images";;
esac
"""
DOCKERD = """#!/bin/sh
echo "dockerd $*" >> "$LOG"
touch "$STATE/daemon"
exec sleep 60
"""
DEBOOTSTRAP = """#!/bin/sh
echo "debootstrap $*" >> "$LOG"
root="$4"
mkdir -p "$root/usr/bin" "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/usr/lib/python3.11"
touch "$root/usr/bin/python3" "$root/usr/lib/python3.11/EXTERNALLY-MANAGED" && chmod +x "$root/usr/bin/python3"
"""
PYTHON = """#!/bin/sh
echo "python $*" >> "$LOG"
"""


def stand_ins(tmp: Path) -> dict[str, str]:
    bin_dir, state = tmp / "bin", tmp / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, text in {"docker": DOCKER, "dockerd": DOCKERD, "debootstrap": DEBOOTSTRAP, "python": PYTHON,
                       "python3": PYTHON}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp / "log"), "STATE": str(state),
            "R2V_DOCKER_DIR": str(tmp / "docker")}


def run(script: str, *args: str, env: dict[str, str]) -> list[str]:
    done = subprocess.run(["bash", f"scripts/{script}", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    log = Path(env["LOG"])
    lines = log.read_text().splitlines()
    log.unlink()
    return [line.split()[0] + " " + line.split()[1] for line in lines if line.split()[1:2] != ["version"]]


def test_both_scripts_start_one_dockerd_and_make_the_base_once(tmp_path):
    env = stand_ins(tmp_path)
    tasks = tmp_path / "tasks"
    (tasks / "t1" / "environment").mkdir(parents=True)
    (tasks / "t1" / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nRUN true\n")

    first = run("terminalbench_docker.sh", str(tasks), "--tasks", "t1", env=env)
    assert first == ["dockerd --data-root", "docker image", "debootstrap --variant=minbase", "docker import",
                     "docker tag", "python benchmarks/terminalbench_judge.py"]
    rootfs = tmp_path / "docker" / "rootfs"
    # set up as python:*-slim is: pip may install system-wide, python on /usr/local/bin
    assert not list(rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"))
    assert os.readlink(rootfs / "usr/local/bin/python") == "/usr/bin/python3"
    assert (tmp_path / "state" / "images").read_text().split() == ["r2v-bookworm:base", "python:3.11-slim"]

    # The daemon the first script started is gone with it (its EXIT trap), so the second starts its own; the base
    # image is still there (docker's data dir outlives the daemon) and is not made again.
    (tmp_path / "state" / "daemon").unlink()
    second = run("serve_docker.sh", env=env)
    assert second == ["dockerd --data-root", "docker image", "docker build", "docker image",
                      "python scripts/serve_docker_check.py"]

    # A daemon that already answers is used, not started again.
    (tmp_path / "state" / "daemon").touch()
    assert run("serve_docker.sh", env=env)[0] == "docker image"
