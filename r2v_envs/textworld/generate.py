"""Generate and cache TextWorld games with TextWorld's own generator.

Games are generated in subprocesses with ``PYTHONHASHSEED=0``: TextWorld's cooking generator iterates over
sets, so without a fixed hash seed the same seed gives different games in different processes. Files are
written to a temporary folder and renamed into the cache, so a killed generation never leaves a half-written
game. The cache lives in ``$R2V_CACHE/textworld`` (default ``~/.cache/r2v/textworld``).

Two ways to run the generator, giving byte-identical games:

* :func:`ensure_game` alone starts one fresh interpreter per game (about 1 s of its ~2.5 s of CPU goes to
  starting Python and importing TextWorld, and ~0.7 s more to TextWorld parsing its grammar files again);
* :class:`GameServer` (what :func:`generate_games` and the pipeline's prefetch use) imports TextWorld once,
  warms its parse caches on a fixed set of games, then forks one child per game: each game starts from the
  same warmed interpreter state, whatever was generated before it, and costs about half the CPU.

Pre-generate a suite in parallel::

    python -m r2v_envs.textworld.generate --suite default --workers 2
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from r2v_envs.core import cache_dir
from r2v_envs.errors import BackendUnavailableError, GameGenerationError
from r2v_envs.textworld.suite import GameSpec, get_suite


def cache_root() -> Path:
    return cache_dir("textworld")


def game_path(spec: GameSpec, root: Path | None = None) -> Path:
    """Where the compiled game of ``spec`` lives (``<task_id>-<param digest>.z8``, with a ``.json`` beside)."""
    return (root or cache_root()) / spec.family / f"{spec.task_id}-{spec.key()}.z8"


def _generator_env() -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": "0"}


def _missing_textworld(stderr: str) -> bool:
    return "No module named 'textworld'" in stderr


def is_complete(path: Path) -> bool:
    """Whether the compiled game at ``path`` is complete: its ``.json`` moves in last (:func:`ensure_game`)."""
    return path.is_file() and path.with_suffix(".json").is_file()


def ensure_game(spec: GameSpec, root: Path | None = None, timeout: float = 300.0,
                server: GameServer | None = None) -> Path:
    """Return the compiled game of ``spec``, generating it first if it is not cached: in ``server`` when given,
    else in a fresh generator process of its own."""
    path = game_path(spec, root)
    if is_complete(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # One generation per game across processes (parallel test workers, two runs sharing a cache): the second
    # waits for the first and then finds the game done instead of generating it again. Whoever holds the lock
    # removes the lock file on the way out, if it is still the file it locked (a later comer then either finds
    # the game, or locks a new file).
    lock_path = path.parent / f".{path.name}.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not is_complete(path):
                _generate_into(spec, path, timeout, server)
        finally:
            with contextlib.suppress(FileNotFoundError):
                if os.stat(lock_path).st_ino == os.fstat(lock.fileno()).st_ino:
                    os.unlink(lock_path)
    return path


def _generate_into(spec: GameSpec, path: Path, timeout: float, server: GameServer | None) -> None:
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".tmp-") as tmp:
        tmp_game = Path(tmp) / path.name
        if server is not None:
            server.generate(spec, tmp_game, timeout)
        else:
            try:
                proc = subprocess.run([sys.executable, "-m", "r2v_envs.textworld.generate", "--one", spec.to_json(),
                                       "--out", str(tmp_game)], env=_generator_env(), capture_output=True, text=True,
                                      timeout=timeout)
            except subprocess.TimeoutExpired:
                raise GameGenerationError(f"could not generate {spec.task_id}: no game after {timeout:g} s") from None
            if proc.returncode != 0 or not tmp_game.is_file():
                if _missing_textworld(proc.stderr):
                    raise BackendUnavailableError("textworld", "pip install 'r2v[textworld]'")
                raise GameGenerationError(f"could not generate {spec.task_id}: {proc.stderr.strip()[-2000:]}")
        # the .json is what marks a game complete (is_complete), so it moves last
        os.replace(tmp_game, path)
        os.replace(tmp_game.with_suffix(".json"), path.with_suffix(".json"))


def _warmup_specs() -> list[GameSpec]:
    """The fixed games a :class:`GameServer` makes once before serving: the first easy game of each family
    (TextWorld parses a family's grammar files on its first game and caches them for the process)."""
    return [s for s in get_suite("small").values() if s.level == "easy" and s.index == 0]


class GameServer:
    """A long-lived TextWorld generator process that forks one child per game (see the module docstring).

    The server starts on the first :meth:`generate` (about 1 s of imports and 4 s of warm-up) and serves one
    game at a time (a lock serialises threads); use one server per parallel worker. ``nice`` lowers the CPU
    priority of the server and its children (background generation). A server that dies is started again by
    the next game.

    Example:
        >>> with GameServer() as server:   # doctest: +SKIP
        ...     ensure_game(get_suite("small")["tw-custom-easy-000"], server=server)
    """

    def __init__(self, nice: int = 0):
        self.nice = nice
        self._proc: subprocess.Popen[str] | None = None
        self._starting: subprocess.Popen[str] | None = None  # a server still importing (abort() reaches it too)
        self._aborted = False
        self._lock = threading.Lock()  # one request at a time on the pipe, whichever thread asks

    def __enter__(self) -> GameServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if self._aborted:
            raise GameGenerationError("the TextWorld generator server was aborted")
        # stderr is a file, not a pipe: a chatty server can then never block on a full pipe nobody reads
        log = tempfile.TemporaryFile(mode="w+", prefix="r2v-gameserver-")
        proc = subprocess.Popen([sys.executable, "-m", "r2v_envs.textworld.generate", "--serve", str(self.nice)],
                                env=_generator_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                text=True, bufsize=1)
        self._starting = proc
        if self._aborted:  # abort() ran during Popen, before it could see the process: kill it here (the flag, then
            proc.kill()    # the process, in both methods: one of the two sees the other's write)
        try:
            ready = proc.stdout.readline() if proc.stdout else ""
            if ready.strip() == "ready":
                self._proc = proc  # before _starting is cleared: abort() always finds the process in one of them
        finally:
            self._starting = None
        if ready.strip() != "ready":
            proc.kill()
            proc.wait()
            log.seek(0)
            err = log.read()
            if _missing_textworld(err):
                raise BackendUnavailableError("textworld", "pip install 'r2v[textworld]'")
            raise GameGenerationError(f"the TextWorld generator server did not start: {err.strip()[-2000:]}")
        log.close()
        return proc

    def generate(self, spec: GameSpec, out: Path, timeout: float = 300.0) -> None:
        """Write the game of ``spec`` to ``out`` (and its ``.json`` beside); raises :class:`GameGenerationError`."""
        with self._lock:
            proc = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps({"spec": spec.to_json(), "out": str(out), "timeout": timeout}) + "\n")
                proc.stdin.flush()
                reply = proc.stdout.readline()
            except OSError:
                reply = ""
            if not reply:
                self.close()
                raise GameGenerationError(f"could not generate {spec.task_id}: the generator server died")
        error = json.loads(reply).get("error")
        if error or not out.is_file():
            raise GameGenerationError(f"could not generate {spec.task_id}: {(error or 'no game written')[-2000:]}")

    def abort(self) -> None:
        """Kill the server now, starting or in the middle of a game (the game's folder is a temporary one that
        :func:`ensure_game` removes, so nothing half-written is left): the caller of :meth:`generate` gets a
        :class:`GameGenerationError`. For background generation nobody waits for: at nice 19 on a busy machine a
        server can take minutes to finish its imports or its game."""
        self._aborted = True
        for proc in (self._starting, self._proc):
            if proc is not None and proc.poll() is None:
                proc.kill()

    def close(self) -> None:
        """Stop the server (after the game it is making, if any: it reads its next request only then)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        finally:
            if proc.stdout:
                proc.stdout.close()


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _serve(requests: IO[str], replies: IO[str]) -> None:
    """The :class:`GameServer` process: import and warm up once, then fork a child per requested game."""
    import copy
    import ctypes
    import signal
    import traceback

    import textworld
    import textworld.challenges  # what the children use, imported once here

    # TextWorld's global RNG seeds whatever is generated without an explicit RNG; the warm-up must leave it as
    # a fresh import does, so a game's bytes are those of a game generated in a fresh process.
    rng_state = copy.deepcopy(textworld.g_rng.__dict__)
    # Making (not compiling: that is mostly the Inform 7 compiler's own processes) one game per family halves
    # the CPU of the games after it: 3.9 s of warm-up, then 8 games in 8.5 s instead of 16.6 s (measured here).
    with tempfile.TemporaryDirectory(prefix="r2v-warmup-") as tmp:
        for spec in _warmup_specs():
            try:
                _make_game(GameSpec.from_json(spec.to_json()), Path(tmp) / f"{spec.task_id}.z8")
            except Exception:  # noqa: BLE001 - only speed depends on the warm-up; the game itself is not used
                pass
    textworld.g_rng.__dict__.update(rng_state)
    try:  # Linux: a child whose server is killed ends too, instead of finishing a game nobody collects
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None
    replies.write("ready\n")
    replies.flush()
    for line in requests:
        req = json.loads(line)
        out = Path(req["out"])
        log = out.parent / f".{out.name}.log"
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: one game, its output to the log, then exit without running the server's code
            code = 1
            try:
                if prctl is not None:
                    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                signal.alarm(max(1, int(req["timeout"])))  # SIGALRM's default action ends the child
                _generate_in_this_process(GameSpec.from_json(req["spec"]), out)
                code = 0
            except BaseException:  # noqa: BLE001 - reported to the parent through the log
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        error = None
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
            error = f"no game after {req['timeout']:g} s"
        elif os.waitstatus_to_exitcode(status) != 0:
            error = log.read_text(errors="replace").strip() if log.is_file() else f"exit status {status}"
        log.unlink(missing_ok=True)
        replies.write(json.dumps({"error": error}) + "\n")
        replies.flush()


# Some (map, seed) pairs admit no quest of the requested length; the generator then raises. Retrying with
# a fixed sequence of derived seeds keeps every game reproducible from its spec alone.
SEED_ATTEMPTS = 20
SEED_STRIDE = 10_007


def _generate_in_this_process(spec: GameSpec, out: Path) -> None:
    from textworld.generator import compile_game

    game, options = _make_game(spec, out)
    compile_game(game, options)
    # the Inform 7 source is an intermediate; keep the cache to the game and its json
    out.with_suffix(".ni").unlink(missing_ok=True)


def _make_game(spec: GameSpec, out: Path) -> tuple[Any, Any]:
    """(the TextWorld game of ``spec``, its GameOptions writing to ``out``), not compiled yet."""
    import textworld.challenges
    from textworld.generator import GameOptions, QuestGenerationError, make_game

    for attempt in range(SEED_ATTEMPTS):
        options = GameOptions()
        options.seeds = spec.seed + SEED_STRIDE * attempt
        options.path = str(out)
        options.file_ext = ".z8"
        options.force_recompile = True
        try:
            if spec.challenge == "custom":
                options.nb_rooms = spec.settings["nb_rooms"]
                options.nb_objects = spec.settings["nb_objects"]
                options.quest_length = spec.settings["quest_length"]
                game = make_game(options)
            else:
                game = textworld.challenges.CHALLENGES[spec.challenge][1](dict(spec.settings), options)
            break
        except QuestGenerationError:
            continue
    else:
        raise GameGenerationError(f"no quest for {spec.task_id} in {SEED_ATTEMPTS} seed attempts")
    return game, options


def pregenerate(suite: str = "default", workers: int = 2, task_ids: list[str] | None = None,
                root: Path | None = None, progress: bool = True) -> list[Path]:
    """Generate (or find cached) every game of ``suite`` with ``workers`` parallel generator processes."""
    specs = get_suite(suite)
    todo = [specs[t] for t in (task_ids or list(specs))]
    return generate_games(todo, workers, root, progress, desc=f"TextWorld games ({suite})")


def missing_games(specs: Iterable[GameSpec], root: Path | None = None) -> list[GameSpec]:
    """The specs whose game is not complete in the cache (the test :func:`ensure_game` uses)."""
    return [s for s in specs if not is_complete(game_path(s, root))]


def serve_queue(take: Callable[[], tuple[GameSpec, Path | None] | None],
                done: Callable[[GameSpec, Path | None, BaseException | None], None], nice: int = 0,
                opened: Callable[[GameServer], None] | None = None) -> None:
    """A generator worker: ``take()`` the next (spec, cache root) until None, generate each missing game in one
    :class:`GameServer` (started only if a game is missing), and report every spec to ``done`` (with the error,
    if any). ``opened(server)`` hands the server to a caller that may :meth:`GameServer.abort` it."""
    with GameServer(nice=nice) as server:
        if opened is not None:
            opened(server)
        while (item := take()) is not None:
            spec, root = item
            try:
                ensure_game(spec, root, server=server)
            except BaseException as exc:  # noqa: BLE001 - handed to done(), which decides
                done(spec, root, exc)
            else:
                done(spec, root, None)


def generate_games(specs: Sequence[GameSpec], workers: int = 2, root: Path | None = None, progress: bool = True,
                   desc: str = "TextWorld games", nice: int = 0) -> list[Path]:
    """Generate (or find cached) the games of ``specs`` with ``workers`` parallel :class:`GameServer` processes,
    with a tqdm bar on stderr that advances as each game finishes; returns their paths in the order of ``specs``
    and raises the first game's error after the others are done."""
    from tqdm.auto import tqdm

    todo = deque(specs)
    errors: list[BaseException] = []
    cond = threading.Condition()
    finished = 0

    def take() -> tuple[GameSpec, Path | None] | None:
        with cond:
            return (todo.popleft(), root) if todo else None

    def done(spec: GameSpec, _root: Path | None, exc: BaseException | None) -> None:
        nonlocal finished
        with cond:
            finished += 1
            if exc is not None:
                errors.append(exc)
            cond.notify_all()

    threads = [threading.Thread(target=serve_queue, args=(take, done, nice), daemon=True, name="r2v-games")
               for _ in range(max(1, min(workers, len(missing_games(specs, root)))))]
    for t in threads:
        t.start()
    with tqdm(total=len(specs), desc=desc, unit="game", disable=not progress) as bar, cond:
        while finished < len(specs):
            cond.wait(timeout=1.0)  # a game takes 1-5 s: redraw every second so the elapsed time keeps moving
            bar.update(finished - bar.n) if finished != bar.n else bar.refresh()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [game_path(s, root) for s in specs]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="default", help="suite to pre-generate (default, small)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="parallel generator processes")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: generate one GameSpec (json) into --out
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=int, metavar="NICE", help=argparse.SUPPRESS)  # internal: a GameServer
    args = parser.parse_args(argv)
    if args.serve is not None:
        if args.serve:
            os.nice(args.serve)  # inherited by the children
        # the replies get a private copy of stdout; whatever TextWorld prints goes to stderr instead
        replies = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        _serve(sys.stdin, replies)
        return
    if args.one:
        _generate_in_this_process(GameSpec.from_json(args.one), Path(args.out))
        return
    paths = pregenerate(args.suite, args.workers)
    print(f"{len(paths)} games in {cache_root()}")


if __name__ == "__main__":
    main()

