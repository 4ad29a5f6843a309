"""The Docker backend of R2V/TerminalBench-v0: a task in a container built from its Dockerfile (Terminal-Bench's way).

The ``docker`` SDK is imported lazily: builds the task image, runs it with ``--network none`` and memory/pid
limits, executes commands with ``timeout -s KILL`` in the persistent-shell protocol of
:mod:`r2v_envs.terminalbench.backends`. ``backend="auto"`` chooses it only when an engine answers
(:func:`docker_available`).
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from r2v_envs.errors import BackendUnavailableError, TaskEnvironmentError
from r2v_envs.terminalbench.backends import (
    _MAX_CAPTURE,
    JUDGE_DIR,
    Backend,
    CommandResult,
    TestRun,
    _judge_info,
    session_script,
    split_cwd,
)
from r2v_envs.terminalbench.runtime import RUNTIME_MOUNT, build_test_runtime, read_junit
from r2v_envs.terminalbench.tasks import TaskFormatError, TerminalTask


def docker_available(timeout_s: float = 2.0) -> bool:
    """Whether the ``docker`` SDK is installed and an engine answers a ping."""
    try:
        import docker

        client = docker.from_env(timeout=int(max(1, timeout_s)))
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no SDK, no socket, no permission: all mean "not available"
        return False


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class DockerBackend(Backend):
    """Runs a task in a container built from its Dockerfile (``--network none``, memory and pid limits)."""

    name = "docker"
    STATE = "/tmp/.r2v"

    def __init__(self, client: Any = None, mem_limit: str = "2g", pids_limit: int = 256,
                 image_prefix: str = "r2v-tb", build_network: str | None = None):
        self._client = client
        self.mem_limit, self.pids_limit, self.image_prefix = mem_limit, pids_limit, image_prefix
        # Network of the *build* containers only (e.g. "host" where Dockerfiles must apt-get or pip install and
        # the default bridge is off); the task container always runs with --network none.
        self.build_network = build_network
        self.container: Any = None
        self.task: TerminalTask | None = None
        self._keep: list[str] = []
        self._image_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import docker
            except ImportError as exc:
                raise BackendUnavailableError("docker", "pip install 'r2v[docker]'") from exc
            self._client = docker.from_env()
        return self._client

    def start(self, task: TerminalTask) -> None:
        self.close()
        self.task = task
        if not (task.context_dir / "Dockerfile").is_file():
            raise TaskFormatError(f"{task.task_id}: the docker backend needs a Dockerfile")
        import docker.errors

        try:
            image, _logs = self.client.images.build(path=str(task.context_dir),
                                                    tag=f"{self.image_prefix}-{task.task_id}",
                                                    rm=True, network_mode=self.build_network)
        except (docker.errors.BuildError, docker.errors.APIError) as exc:
            log = "".join(chunk.get("stream", "") for chunk in getattr(exc, "build_log", None) or [])
            hint = ("" if self.build_network else " If its Dockerfile installs packages and build containers have "
                    "no network here, pass docker_options={'build_network': 'host'}.")
            raise TaskEnvironmentError(f"could not build the image of {task.task_id}: {exc}.{hint}\n"
                                       f"{log[-2000:]}") from exc
        # The offline test runtime, read-only: the test scripts' uv/pytest bootstrap works with no network.
        runtime = build_test_runtime()
        self.container = self.client.containers.run(
            image.id, command=["sleep", "infinity"], detach=True, network_mode="none",
            mem_limit=self.mem_limit, pids_limit=self.pids_limit, working_dir=task.workdir, init=True,
            volumes={str(runtime): {"bind": RUNTIME_MOUNT, "mode": "ro"}})
        self.container.exec_run(["mkdir", "-p", self.STATE, "/tests"])
        # PID 1 is docker-init and its child the keeper `sleep`: the only processes that survive the test phase.
        self._keep = self.container.exec_run(["sh", "-c", "cat /proc/1/task/1/children"])[1].decode().split()
        env = (getattr(image, "attrs", None) or {}).get("Config", {}).get("Env") or []
        self._image_path = next((e[5:] for e in env if e.startswith("PATH=")),
                                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")

    def _exec(self, argv: list[str], timeout_s: float, env: dict[str, str] | None = None) -> tuple[str, int | None,
                                                                                                   bool, float]:
        start = time.monotonic()
        code, out = self.container.exec_run(["timeout", "-s", "KILL", str(int(max(1, timeout_s))), *argv],
                                            environment=env or {}, workdir=self.task.workdir)
        text = (out or b"")[:_MAX_CAPTURE].decode("utf-8", errors="replace")
        timed_out = code == 137 and time.monotonic() - start >= timeout_s - 0.5
        return text, None if timed_out else code, timed_out, time.monotonic() - start

    def run(self, command: str, timeout_s: float) -> CommandResult:
        self.container.put_archive(self.STATE, _tar({"cmd.sh": (command + "\n").encode()}))
        out, code, timed_out, wall = self._exec(["bash", "--noprofile", "--norc", "-c",
                                                 session_script(self.STATE, self.task.workdir)], timeout_s)
        out, cwd = split_cwd(out)
        return CommandResult(out, code, timed_out, wall, cwd)

    def run_tests(self) -> TestRun:
        """The judge in the container: every process the agent left is killed, ``/tests`` and the report folder
        are recreated from the task's files, and the script runs with the runtime (mounted read-only at
        :data:`RUNTIME_MOUNT`) first on PATH; the verdict is the JUnit XML read back from the container.

        The agent was root in this container: it cannot touch the runtime or the fresh folders, but it could
        have replaced the image's own interpreter, so ``judge["tamper_proof"]`` is False here.
        """
        task = self.task
        keep = " ".join(["1", *self._keep])
        self.container.exec_run(["sh", "-c", f'for d in /proc/[0-9]*; do p=${{d#/proc/}}; case " {keep} $$ " in *" $p "*) ;; '
                                f'*) echo $p;; esac; done > /tmp/.r2v-pids; kill -9 $(cat /tmp/.r2v-pids) '
                                f'2>/dev/null; rm -rf /tests {JUDGE_DIR} /logs; mkdir -p /tests '
                                f'{JUDGE_DIR}/out {JUDGE_DIR}/home /logs/verifier /logs/agent; '
                                f'chmod 1777 {JUDGE_DIR}/out {JUDGE_DIR}/home /logs/verifier /logs/agent'])
        files = {str(p.relative_to(task.tests_dir)): p.read_bytes() for p in task.tests_dir.rglob("*")
                 if p.is_file()}
        script = "test.sh" if task.format == "harbor" else "run-tests.sh"
        files[script] = task.run_tests_script.read_bytes()
        self.container.put_archive("/tests", _tar(files))
        python = self._exec(["sh", "-c", "command -v python3 || command -v python"], 30)[0].strip()
        env = {"TEST_DIR": "/tests", "R2V_TRUSTED_TESTS": "/tests", "R2V_JUDGE_OUT": f"{JUDGE_DIR}/out",
               "HOME": f"{JUDGE_DIR}/home", "R2V_TEST_PYTHON": python.splitlines()[-1] if python else "python3",
               "PATH": f"{RUNTIME_MOUNT}/bin:{self._image_path}", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        out, code, timed_out, wall = self._exec(["bash", f"/tests/{script}"], task.max_test_timeout_s, env)
        with tempfile.TemporaryDirectory(prefix="r2v-tb-judge-") as tmp:
            reports = Path(tmp) / "out"
            reports.mkdir()
            try:
                stream, _stat = self.container.get_archive(f"{JUDGE_DIR}/out/.")
                with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                    for member in tar.getmembers():
                        name = os.path.basename(member.name)
                        if member.isfile() and re.fullmatch(r"(junit|judge)-[\w.-]+\.(xml|json)", name):
                            (reports / name).write_bytes(tar.extractfile(member).read())
            except Exception as exc:  # noqa: BLE001 - no report folder means no results, never a crash
                out += f"\n[r2v: could not read the judge's reports: {exc}]"
            results = {} if timed_out else read_junit(reports)
            judge = _judge_info(reports, results, out, tamper_proof=False)
        return TestRun(out, code, timed_out, wall, results=results, judge=judge)

    def close(self) -> None:
        if self.container is not None:
            try:
                self.container.remove(force=True)
            finally:
                self.container = None


