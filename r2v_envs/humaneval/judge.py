"""Env side of the HumanEval+ judge: a long-lived sandboxed judge process, restarted when it dies.

See :mod:`r2v_envs.humaneval.judge_server` for what runs inside the sandbox and why it is long-lived.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from r2v_envs.sandbox import Sandbox, SandboxLimits, SandboxProcess

SERVER_SOURCE = Path(__file__).with_name("judge_server.py")
# EvalPlus' own bound: each of the two checks takes at most min(60 s, sum of time limits) + ~3 s.
FULL_DEADLINE_S = 2 * (60 + 3) + 15.0
SMOKE_DEADLINE_S = 60.0
START_DEADLINE_S = 30.0
# EvalPlus' default memory cap per candidate (EVALPLUS_MAX_MEMORY_BYTES); it is also the sandbox's RLIMIT_AS.
JUDGE_LIMITS = SandboxLimits(wall_time_s=FULL_DEADLINE_S, cpu_time_s=24 * 3600.0, memory_bytes=4 << 30,
                             file_size_bytes=64 << 20, max_open_files=256, max_processes=64, network=False)


class JudgeError(RuntimeError):
    """The judge died, timed out or answered garbage (the caller reports it; the next request restarts it)."""


class Judge:
    """Sends judging requests to a sandboxed judge process; one per env (not thread-safe).

    ``cache_dir`` (the task files) is mounted read-only in the sandbox; the judge's scratch directory is a
    fresh temporary directory, removed on :meth:`close`.
    """

    def __init__(self, cache_dir: str, isolation: str = "auto", limits: SandboxLimits = JUDGE_LIMITS):
        self.sandbox = Sandbox(isolation, limits=limits, readonly_paths=[cache_dir])
        self.limits = limits
        self._proc: SandboxProcess | None = None
        self._workdir: str | None = None
        self._buf = b""
        self._next_id = 0
        self.restarts = 0
        self.patches: list[str] = []  # fixes applied to the installed EvalPlus (see judge_server)
        self._finalizer = weakref.finalize(self, Judge._cleanup, [None, None])

    @property
    def isolation(self) -> str:
        return self.sandbox.isolation

    # ------------------------------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        self._workdir = tempfile.mkdtemp(prefix="r2v-judge-")
        env = {"EVALPLUS_MAX_MEMORY_BYTES": str(self.limits.memory_bytes), "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "R2V_JUDGE_PIDNS": "1" if self.isolation in ("bwrap", "unshare") else "0"}
        self._proc = self.sandbox.spawn([sys.executable, "-I", "-c", SERVER_SOURCE.read_text()],
                                        workdir=self._workdir, env=env, limits=self.limits)
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, Judge._cleanup, [self._proc, self._workdir])
        self._buf = b""
        for f in (self._proc.popen.stdout, self._proc.popen.stderr):
            os.set_blocking(f.fileno(), False)
        ready = self._read_line(time.monotonic() + START_DEADLINE_S)
        if not ready.get("ready"):
            raise JudgeError(f"judge did not start: {ready}")
        self.patches = list(ready.get("patches", []))

    @staticmethod
    def _cleanup(state: list) -> None:
        proc, workdir = state
        if proc is not None:
            proc.kill()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    def close(self) -> None:
        """Kill the judge's process tree and remove its scratch directory (idempotent)."""
        self._finalizer()
        self._proc, self._workdir = None, None

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------- requests
    def request(self, mode: str, task_file: str, code: str, **extra: Any) -> dict[str, Any]:
        """One judging request; raises :class:`JudgeError` (after killing the judge) if it fails."""
        if self._proc is None or not self._proc.alive():
            if self._proc is not None:
                self.restarts += 1
                self.close()
            self._start()
        self._next_id += 1
        req = {"id": self._next_id, "mode": mode, "task_file": task_file, "code": code, **extra}
        deadline = time.monotonic() + (FULL_DEADLINE_S if mode == "full" else SMOKE_DEADLINE_S)
        try:
            self._proc.popen.stdin.write((json.dumps(req) + "\n").encode())
            self._proc.popen.stdin.flush()
            resp = self._read_line(deadline)
        except (OSError, JudgeError) as exc:
            self.close()
            raise JudgeError(str(exc) or type(exc).__name__) from exc
        if resp.get("id") != req["id"] or "error" in resp:
            self.close()
            raise JudgeError(resp.get("error", f"judge answered out of turn: {resp}"))
        return resp

    def _read_line(self, deadline: float) -> dict[str, Any]:
        assert self._proc is not None
        out = self._proc.popen.stdout
        with selectors.DefaultSelector() as sel:
            sel.register(out, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise JudgeError("judge timed out")
                if not sel.select(timeout=left):
                    continue
                chunk = os.read(out.fileno(), 1 << 20)
                if not chunk:
                    try:
                        err = os.read(self._proc.popen.stderr.fileno(), 4096).decode(errors="replace")
                    except OSError:
                        err = ""
                    raise JudgeError(f"judge exited {err.strip()}".strip())
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError as exc:
            raise JudgeError(f"judge answered garbage: {line[:200]!r}") from exc
