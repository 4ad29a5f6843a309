"""The verdict channel: the judge's pytest runs as a child of a root daemon, and its results reach the judge
through a pipe that no other process of the test phase can reach.

The local backend (bubblewrap, root caller) starts the test phase as this daemon, copied into the offline
test runtime (``lib/r2v_judged.py``) and run with ``python -I`` as uid 0 inside the sandbox with only the
capabilities it needs (set uids, kill). It:

1. opens the verdict file in a folder only root can enter (mode 0700, bound from the host; no environment
   variable names it), and a Unix socket (``$R2V_JUDGE_SOCKET``) that the test script's processes may call;
2. starts the task's test script as the unprivileged uid and serves until it exits;
3. on each request (from the runtime's ``pytest``/``python -m pytest`` shims: pytest's arguments, working
   directory and environment, plus the caller's stdin/stdout/stderr as file descriptors) forks a child that
   drops to the same uid (which makes it non-dumpable: no process of that uid can ptrace it or open its
   ``/proc/PID/fd``), runs the judge's pytest in-process with the judge's options and plugin, and reports each
   test through a close-on-exec pipe to the daemon, which appends the lines, tagged with its own run number,
   to the verdict file;
4. when the script exits, records every run still going as incomplete and exits; the backend then kills the
   sandbox's whole PID namespace and only then reads the verdict file.

Whoever calls the socket gets a real, fully-judged pytest run: a run that selects a subset of the tests
(``-k``, ``-m``, ``--deselect``, node ids) is flagged ``partial`` by the plugin, and a run killed before it
finishes counts as an error. Code that the tests import into pytest's own process (the agent's module under
test) can still forge its reports: nothing outside that process can stop it (docs/terminalbench.md).

Standard library only: it runs on the judge's interpreter inside the sandbox.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time

_HEADER = struct.Struct("!I")
_MAX_REQUEST = 4 << 20
_MAX_LINE = 1 << 20
_SCRUB = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT")


def _drop(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)  # a uid change leaves the process non-dumpable (fs.suid_dumpable is 0)


def _non_dumpable() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    conn.settimeout(5.0)
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
    while len(data) < _HEADER.size:
        more = conn.recv(65536)
        if not more:
            raise ValueError("short request")
        data += more
    (size,) = _HEADER.unpack_from(data)
    if size > _MAX_REQUEST:
        raise ValueError("request too large")
    body = data[_HEADER.size:]
    while len(body) < size:
        more = conn.recv(65536)
        if not more:
            raise ValueError("short request")
        body += more
    req = json.loads(body[:size])
    if not isinstance(req, dict) or not isinstance(req.get("args"), list):
        raise ValueError("malformed request")
    return req, list(fds)


class Daemon:
    def __init__(self, uid: int, verdict_path: str, socket_path: str, site: str, test_dir: str, ini: str):
        self.uid, self.site, self.test_dir, self.ini = uid, site, test_dir, ini
        self.verdict = open(verdict_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the daemon
        os.makedirs(os.path.dirname(socket_path), mode=0o755, exist_ok=True)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:  # left by a daemon set up ahead and discarded unused (the folder is root's alone)
            os.unlink(socket_path)
        except FileNotFoundError:
            pass
        self.server.bind(socket_path)
        os.chmod(socket_path, 0o666)
        self.server.listen(64)
        self.runs: dict[int, dict] = {}  # child pid -> {"n", "fd", "buf", "conn"}
        self._wake: tuple[int, ...] = ()
        self.count = 0

    def record(self, **fields) -> None:
        self.verdict.write(json.dumps(fields, sort_keys=True) + "\n")

    # -------------------------------------------------------------------------------------- runs
    def start_run(self, conn: socket.socket) -> None:
        try:
            req, fds = _recv_request(conn)
        except (OSError, ValueError) as exc:
            conn.close()
            self.record(event="bad_request", why=str(exc)[:200])
            return
        from r2v_shim import judge_pytest_args  # the runtime's lib folder, set up in main()

        args, dropped = judge_pytest_args([str(a) for a in req["args"]], self.test_dir, self.ini)
        self.count += 1
        n = self.count
        self.record(run=n, event="request", args=req["args"], dropped=dropped)
        r, w = os.pipe()  # both close-on-exec: nothing the tests start inherits the write end
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 4
            try:
                os.close(r)
                self.server.close()
                for run in self.runs.values():
                    os.close(run["fd"])
                    run["conn"].close()
                conn.close()
                self.verdict.close()
                code = self._child(req, fds, w, args)
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        os.close(w)
        for fd in fds:
            os.close(fd)
        os.set_blocking(r, False)
        self.runs[pid] = {"n": n, "fd": r, "buf": b"", "conn": conn}

    def _child(self, req: dict, fds: list[int], w: int, args: list[str]) -> int:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the tests' own subprocesses are theirs to wait for
        for fd in self._wake:
            os.close(fd)
        _non_dumpable()
        _drop(self.uid)
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)  # inheritable: the tests' own subprocesses print to the script's output
        for fd in fds:
            if fd > 2:
                os.close(fd)
        env = {str(k): str(v) for k, v in (req.get("env") or {}).items() if k not in _SCRUB}
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        env["R2V_TRUSTED_TESTS"] = self.test_dir  # the judge's, whatever the request says (the plugin reads it)
        env["R2V_VERDICT_FD"] = str(w)
        os.environ.clear()
        os.environ.update(env)
        cwd = str(req.get("cwd") or "/")
        try:
            os.chdir(cwd)
        except OSError:
            os.chdir("/")
        # The runtime first, then the interpreter's own paths; `python -m pytest` also puts the working
        # directory on sys.path (tests import the solution by name), last, so it cannot stand in for pytest.
        self._use_runtime_path()
        if req.get("append_cwd"):
            sys.path.append(os.getcwd())
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.argv = ["pytest", *args]
        import pytest  # the runtime's copy, already imported by _preload before the fork

        return int(pytest.main(args))

    def pump(self, pid: int, final: bool = False) -> None:
        run = self.runs[pid]
        while True:
            try:
                chunk = os.read(run["fd"], 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            run["buf"] += chunk
            if not final:
                break
        *lines, run["buf"] = run["buf"].split(b"\n")
        if len(run["buf"]) > _MAX_LINE:
            lines.append(run["buf"])
            run["buf"] = b""
        for line in lines:
            try:
                msg = json.loads(line)
                if not isinstance(msg, dict):
                    raise ValueError
            except ValueError:
                msg = {"event": "garbled"}
            msg.pop("run", None)
            self.record(run=run["n"], **msg)

    def finish(self, pid: int, status: int | None) -> None:
        self.pump(pid, final=True)
        run = self.runs.pop(pid)
        os.close(run["fd"])
        code = None if status is None else os.waitstatus_to_exitcode(status)
        self.record(run=run["n"], event="exit", code=code)
        try:
            run["conn"].settimeout(1.0)
            run["conn"].sendall(_HEADER.pack(255 if code is None else code if code >= 0 else 128 - code))
        except OSError:
            pass
        run["conn"].close()

    def _use_runtime_path(self) -> None:
        """The runtime's folder first, then the interpreter's own (absolute) paths: nothing relative, nothing
        the tests could write, can stand in for pytest, its plugins or the standard library."""
        sys.path[:] = [self.site, *(p for p in sys.path if os.path.isabs(p) and p != self.site)]

    def _preload(self) -> None:
        """Import the judge's pytest and its built-in plugins while the script starts.

        Each run is a fork of this process, so what is imported here is not imported again on the script's
        critical path (pytest and its plugins take about 0.1 s to import, about as long as the daemon costs a
        test phase). The imports come from the runtime's folder and the interpreter's own paths only (``-I``: no
        environment variable, no working directory), before any request: nothing the tests write can stand in
        for them. The judge's own plugin is imported by each run: it reads the run's environment at import."""
        self._use_runtime_path()
        try:
            from _pytest.config import default_plugins

            for name in default_plugins:
                importlib.import_module(f"_pytest.{name}")
            import r2v_shim  # noqa: F401  (judge_pytest_args, on each request)
        except Exception:  # noqa: BLE001 - a run imports whatever is missing itself
            pass

    # -------------------------------------------------------------------------------------- loop
    def serve(self, argv: list[str], env: dict[str, str]) -> int:
        script = os.fork()
        if script == 0:
            try:
                self.server.close()
                self.verdict.close()
                _drop(self.uid)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        # A child's exit wakes the loop at once (the script waits on each run's status; polling cost it up to a
        # whole poll interval per run).
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wake_w)
        self._wake = (wake_r, wake_w)
        self._preload()
        status = None
        while status is None:
            while True:
                try:
                    pid, st = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    pid = 0
                if pid == 0:
                    break
                if pid == script:
                    status = st
                elif pid in self.runs:
                    self.finish(pid, st)
            if status is not None:
                break
            fds = [self.server, wake_r, *(run["fd"] for run in self.runs.values())]
            try:
                ready, _, _ = select.select(fds, [], [], 0.5)
            except InterruptedError:
                continue
            for item in ready:
                if item == wake_r:
                    try:
                        while os.read(wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                elif item is self.server:
                    conn, _addr = self.server.accept()
                    self.start_run(conn)
                else:
                    pid = next(p for p, run in self.runs.items() if run["fd"] == item)
                    self.pump(pid)
        for pid in list(self.runs):  # runs the script left behind: not finished, so not a verdict
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            self.record(run=self.runs[pid]["n"], event="abandoned")
            self.finish(pid, None)
        code = os.waitstatus_to_exitcode(status)
        self.record(event="script_exit", code=code, at=time.time())
        self.verdict.close()
        return code if code >= 0 else 128 - code


def main(argv: list[str]) -> int:
    """``r2v_judged.py UID VERDICT_FILE SOCKET SITE TEST_DIR INI -- COMMAND...``"""
    sys.path[:] = [p for p in sys.path if os.path.isabs(p)]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # r2v_shim beside this file
    i = argv.index("--")
    uid, verdict_path, socket_path, site, test_dir, ini = argv[1:i]
    daemon = Daemon(int(uid), verdict_path, socket_path, site, test_dir, ini)
    return daemon.serve(argv[i + 1:], dict(os.environ))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
