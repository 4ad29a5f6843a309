"""The Docker backend of R2V/TerminalBench-v0: a task in a container built from its Dockerfile (Terminal-Bench's way).

The ``docker`` SDK is imported lazily: builds the task image, runs it with ``--network none`` and the task's CPU,
memory and pid limits, executes commands with ``timeout -s KILL`` in the persistent-shell protocol of
:mod:`.base`. For the judge it only runs and copies: the test phase's tests go in with ``put_archive`` and its
report folder comes back with ``get_archive``. ``backend="auto"`` chooses it only when an engine answers
(:func:`docker_available`).
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import time
from pathlib import Path
from typing import Any

from r2v_envs.errors import BackendUnavailableError, TaskEnvironmentError
from r2v_envs.terminalbench.backends.base import MAX_CAPTURE, Backend, CommandResult, session_script, split_cwd
from r2v_envs.terminalbench.judge.phase import JUDGE_DIR, TestPhase, TestView
from r2v_envs.terminalbench.judge.runtime import RUNTIME_MOUNT, build_test_runtime
from r2v_envs.terminalbench.judge.verdict import ScriptRun
from r2v_envs.terminalbench.task import TaskFormatError, TerminalTask

IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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

    def __init__(self, client: Any = None, mem_limit: str | None = None, pids_limit: int = 256,
                 image_prefix: str = "r2v-tb", build_network: str | None = None):
        self._client = client  # mem_limit None: the task's memory_mb, as the CPUs are the task's cpus
        self.mem_limit, self.pids_limit, self.image_prefix = mem_limit, pids_limit, image_prefix
        # Network of the *build* containers only (e.g. "host" where Dockerfiles must apt-get or pip install and
        # the default bridge is off); the task container always runs with --network none.
        self.build_network = build_network
        self.container: Any = None
        self.task: TerminalTask | None = None
        self._keep: list[str] = []
        self._image_path = IMAGE_PATH

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
            mem_limit=self.mem_limit or f"{task.memory_mb}m", nano_cpus=int(task.cpus * 1e9),
            pids_limit=self.pids_limit, working_dir=task.workdir, init=True,
            volumes={str(runtime): {"bind": RUNTIME_MOUNT, "mode": "ro"}})
        self.container.exec_run(["mkdir", "-p", self.STATE, "/tests"])
        # PID 1 is docker-init and its child the keeper `sleep`: the only processes that survive the test phase.
        self._keep = self.container.exec_run(["sh", "-c", "cat /proc/1/task/1/children"])[1].decode().split()
        env = (getattr(image, "attrs", None) or {}).get("Config", {}).get("Env") or []
        self._image_path = next((e[5:] for e in env if e.startswith("PATH=")), IMAGE_PATH)

    def _exec(self, argv: list[str], timeout_s: float, env: dict[str, str] | None = None) -> ScriptRun:
        start = time.monotonic()
        code, out = self.container.exec_run(["timeout", "-s", "KILL", str(int(max(1, timeout_s))), *argv],
                                            environment=env or {}, workdir=self.task.workdir)
        text = (out or b"")[:MAX_CAPTURE].decode("utf-8", errors="replace")
        timed_out = code == 137 and time.monotonic() - start >= timeout_s - 0.5
        return ScriptRun(text, None if timed_out else code, timed_out, time.monotonic() - start)

    def run(self, command: str, timeout_s: float) -> CommandResult:
        self.container.put_archive(self.STATE, _tar({"cmd.sh": (command + "\n").encode()}))
        r = self._exec(["bash", "--noprofile", "--norc", "-c", session_script(self.STATE, self.task.workdir)],
                       timeout_s)
        out, cwd = split_cwd(r.output)
        return CommandResult(out, r.exit_code, r.timed_out, r.wall_time_s, cwd)

    # ------------------------------------------------------------------------------- the judge's side
    def test_view(self, folder: Path) -> TestView:
        """The container's own paths; the JUnit report (the agent was root here and could have replaced the image's
        interpreter, so a daemon's verdict would be no safer: ``judge["tamper_proof"]`` is False)."""
        python = self._exec(["sh", "-c", "command -v python3 || command -v python"], 30).output.strip()
        return TestView(tests="/tests", out=f"{JUDGE_DIR}/out", home=f"{JUDGE_DIR}/home", runtime=RUNTIME_MOUNT,
                        workdir=self.task.workdir, python=python.splitlines()[-1] if python else "python3",
                        path=self._image_path, daemon=False)

    def begin_tests(self) -> None:
        """Every process the agent left is killed (PID 1 is docker-init, its child the keeper ``sleep``)."""
        keep = " ".join(["1", *self._keep])
        self.container.exec_run(["sh", "-c", f'for d in /proc/[0-9]*; do p=${{d#/proc/}}; case " {keep} $$ " in '
                                 f'*" $p "*) ;; *) echo $p;; esac; done > /tmp/.r2v-pids; kill -9 $(cat /tmp/.r2v-pids)'
                                 " 2>/dev/null"])
        return None

    def run_test_script(self, phase: TestPhase) -> ScriptRun:
        """The phase's folders made fresh in the container (the tests copied in from the phase's own copy), then its
        script with the runtime (mounted read-only at :data:`RUNTIME_MOUNT`) first on PATH."""
        self.container.exec_run(["sh", "-c", f"rm -rf /tests {JUDGE_DIR} /logs; mkdir -p /tests {JUDGE_DIR}/out "
                                 f"{JUDGE_DIR}/home /logs/verifier /logs/agent; chmod 1777 {JUDGE_DIR}/out "
                                 f"{JUDGE_DIR}/home /logs/verifier /logs/agent"])
        tests = phase.folder / "tests"
        self.container.put_archive("/tests", _tar({str(p.relative_to(tests)): p.read_bytes()
                                                   for p in tests.rglob("*") if p.is_file()}))
        return self._exec(["bash", "--noprofile", "--norc", "-c", phase.script], self.task.max_test_timeout_s,
                          phase.env)

    def fetch_reports(self, phase: TestPhase) -> None:
        """The report folder's JUnit and judge files, copied back into ``phase.folder / "out"``; a folder that cannot
        be read leaves no results (never a crash)."""
        reports = phase.folder / "out"
        try:
            stream, _stat = self.container.get_archive(f"{JUDGE_DIR}/out/.")
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                for member in tar.getmembers():
                    name = os.path.basename(member.name)
                    if member.isfile() and re.fullmatch(r"(junit|judge)-[\w.-]+\.(xml|json)", name):
                        (reports / name).write_bytes(tar.extractfile(member).read())
        except Exception:  # noqa: BLE001 - no report folder means no results, never a crash
            pass

    def close(self) -> None:
        if self.container is not None:
            try:
                self.container.remove(force=True)
            finally:
                self.container = None


