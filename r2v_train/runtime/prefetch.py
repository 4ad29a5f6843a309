"""Generate the TextWorld games a pipeline run will play before its stages ask for them, in parallel, with a bar.

Left to itself, ``R2V/TextWorld-v0`` generates a game the first time an episode resets on it
(:func:`r2v_envs.textworld.generate.ensure_game`): on an empty cache the default pipeline's teacher stage then
spends most of its time generating the suite's games, a few at a time and without a word. :class:`GamePrefetch`
instead works out exactly which games the run will play, the used train and valid tasks of the chain's split
and the evaluated test tasks (the same ids the stages use, so the episodes and the results do not change), and
generates the missing ones:

* the train games first, in ``workers`` parallel game servers with a bar, because the teacher stage plays them
  at once;
* the valid and test games in one background game server at nice 19 while the teacher, replay, BC, preference
  and DPO stages run: at nice 19 it takes the CPU those stages leave idle and little from a busy core (on the
  default's fresh run, with BC and DPO on two torch threads, the chain ran 107 s slower beside the 79 background
  games than on a warm cache; at the train games' rate, 185 in 135 s on 2 servers, they would take about 58 s up
  front, so with two threads the overlap no longer pays: measured on one run, not yet changed);
* before a stage that plays them (``router_data``: valid, the evaluation: test) :meth:`GamePrefetch.wait` puts
  ``workers`` servers at normal priority on what is left and shows a bar.

A game server (:class:`r2v_envs.textworld.generate.GameServer`) forks a child per game from one warmed
interpreter state, so a game's bytes are the same whether it was generated here, lazily, alone or alongside
others.

Example:
    >>> p = GamePrefetch({"train": [], "valid": []}, workers=2, progress=False)
    >>> p.start(); p.wait(["valid"]); p.missing()
    0
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import r2v_envs  # noqa: F401 - registers the envs
from r2v_envs.textworld.env import TextWorldEnv
from r2v_envs.textworld.generate import missing_games, serve_queue
from r2v_envs.textworld.suite import GameSpec
from r2v_train.evaluation.methods import task_ids as eval_task_ids
from r2v_train.runtime.narrate import say

# which games a stage plays (the evaluation and the ablations play the evaluation split: "test")
STAGE_NEEDS = {"teacher": ("train",), "replay": ("train",), "router_data": ("train", "valid"), "evaluate": ("test",)}
GROUPS = ("train", "valid", "test")
# The background generator runs at the lowest CPU priority: it then takes the CPU the chain's stages leave idle,
# and little from them when they keep the cores busy.
BACKGROUND_NICE = 19
Item = tuple[GameSpec, "Path | None"]


def _textworld_games(env_id: str, env_kwargs: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """(the base TextWorld env, closer) of an env config, or None when it is not a TextWorld env."""
    import gymnasium as gym

    env = gym.make(env_id, seed=0, **{**env_kwargs, "perturbations": None})
    if not isinstance(env.unwrapped, TextWorldEnv):
        env.close()
        return None
    return env.unwrapped, env


def needed_games(cfg: Any) -> dict[str, list[Item]]:
    """{"train", "valid", "test"} -> the (spec, cache root) of every game the pipeline ``cfg`` plays, each game in
    the first group that needs it; empty lists for envs other than TextWorld.

    The task ids are computed as the stages compute them: the chain's split stage (``task_ids(split)`` capped by
    ``max_train_tasks``/``max_valid_tasks``) and the evaluation (:func:`r2v_train.evaluation.methods.task_ids`, else the
    whole evaluation split)."""

    groups: dict[str, list[Item]] = {g: [] for g in GROUPS}
    seen: set[tuple[str, Path | None]] = set()

    def add(group: str, base: Any, ids: Iterable[str]) -> None:
        for t in ids:
            if (t, base.cache_dir) not in seen:
                seen.add((t, base.cache_dir))
                groups[group].append((base.games[t], base.cache_dir))

    chain = cfg.chain
    found = _textworld_games(chain.env.env_id, chain.env.env_kwargs)
    if found is not None:
        base, env = found
        try:
            cap = lambda ids, n: ids[:n] if n else ids  # as r2v_train.chain.collect.split_stage
            add("train", base, cap(list(base.task_ids("train")), chain.split.max_train_tasks))
            add("valid", base, cap(list(base.task_ids("valid")), chain.split.max_valid_tasks))
        finally:
            env.close()
    ev = cfg.evaluate
    found = _textworld_games(ev.env_id, ev.env_kwargs)
    if found is not None:
        base, env = found
        try:
            add("test", base, eval_task_ids(ev) or base.task_ids(ev.split))
        finally:
            env.close()
    return groups


class GamePrefetch:
    """Generates the missing games of ordered groups: :meth:`start` does the first group in the foreground, the
    rest in one low-priority background server; :meth:`wait` finishes named groups with ``workers`` servers and
    a bar."""

    def __init__(self, groups: Mapping[str, Sequence[Item]], workers: int = 2, progress: bool = True):
        self.workers = max(1, int(workers))
        self.progress = progress
        self.total = {g: len(items) for g, items in groups.items()}
        self._queue: deque[tuple[str, GameSpec, Path | None]] = deque()
        self._left: dict[str, int] = {}
        for g, items in groups.items():
            todo = [(s, r) for s, r in items if missing_games([s], r)]
            self._left[g] = len(todo)
            self._queue.extend((g, s, r) for s, r in todo)
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._background: list[threading.Thread] = []
        self._background_servers: list[Any] = []  # their GameServers, aborted by close()
        self._errors: dict[str, BaseException] = {}
        self._group_of: dict[tuple[str, Path | None], str] = {}
        self._background_held: set[tuple[str, Path | None]] = set()  # games a background server is making
        self._recalled: set[tuple[str, Path | None]] = set()  # taken back from an aborted background server
        self._background_stopped = False
        self._stopped = False

    def missing(self, groups: Iterable[str] | None = None) -> int:
        """Games of ``groups`` (default: all) not generated yet."""
        with self._cond:
            return sum(self._left.get(g, 0) for g in (self._left if groups is None else groups))

    def start(self) -> None:
        """Generate the first group now (with a bar), then the others in one low-priority background game server."""
        order = list(self._left)
        have = sum(self.total.values()) - self.missing()
        if not self.missing():
            if self.total and sum(self.total.values()):
                say(f"TextWorld games: all {sum(self.total.values())} games this run plays are cached")
            return
        counts = ", ".join(f"{self.total[g]} {g}" for g in order if self.total[g])
        say(f"TextWorld games: this run plays {counts}; {self.missing()} to generate ({have} cached), "
            f"{self.workers} game servers; the train games first")
        if order:
            self.wait(order[:1])
        rest = self.missing(order[1:])
        if rest:
            say(f"TextWorld games: generating the other {rest} in 1 background game server at nice "
                f"{BACKGROUND_NICE} while the chain runs")
            self._spawn(1, nice=BACKGROUND_NICE)

    def wait(self, groups: Iterable[str]) -> None:
        """Return once every game of ``groups`` exists, generating with ``workers`` processes meanwhile; raises the
        generation error of a game in those groups."""
        groups = [g for g in groups if g in self._left]
        left = self.missing(groups)
        if left:
            from tqdm.auto import tqdm

            self._recall_background(groups)
            with self._cond:  # the low-priority background worker does not count: it may be starved
                busy = sum(t.is_alive() for t in self._threads if t not in self._background)
            self._spawn(self.workers - busy)
            names = "+".join(g for g in groups if self._left[g])
            t0 = time.perf_counter()
            with tqdm(total=left, desc=f"TextWorld games ({names})", unit="game", disable=not self.progress) as bar, \
                    self._cond:
                while any(self._left[g] for g in groups) and not any(g in self._errors for g in groups):
                    self._cond.wait(timeout=1.0)
                    done = left - sum(self._left[g] for g in groups)
                    bar.update(done - bar.n) if done != bar.n else bar.refresh()  # the clock ticks between games
            if not self.progress:
                say(f"TextWorld games ({names}): {left} generated in {time.perf_counter() - t0:.0f} s")
        for g in groups:
            if g in self._errors:
                raise self._errors[g]

    def close(self) -> None:
        """Drop what is still queued, abort the low-priority background servers (nobody waits for their games, and
        a starved nice-19 server can take minutes to finish one) and wait for the other games being generated (a
        game is never half-written)."""
        with self._cond:
            self._stopped = True
            self._queue.clear()
            background = list(self._background_servers)
        for server in background:
            server.abort()
        for t in self._threads:
            t.join()

    def _recall_background(self, groups: Sequence[str]) -> None:
        """When the background server holds a game of ``groups``, abort it and queue that game again (first), so the
        normal-priority servers make it: a nice-19 server on a busy machine can take minutes over one game, and
        the stage waiting for it would wait that long (measured in the suite: the miniature pipeline's two test
        games took 207 s before its evaluation). Background generation ends here; what it had not taken stays
        queued for :meth:`wait`."""
        with self._cond:
            if not any(self._group_of[k] in groups for k in self._background_held):
                return
            self._background_stopped = True
            self._recalled.update(self._background_held)
            servers = list(self._background_servers)
        for server in servers:
            server.abort()
        for t in self._background:
            t.join()  # its game fails at once (the server was killed) and _done queues it again

    def _spawn(self, n: int, nice: int = 0) -> None:
        for _ in range(max(0, n)):
            opened = self._background_servers.append if nice else None
            t = threading.Thread(target=serve_queue, args=(self._take, self._done, nice, opened), name="r2v-games",
                                 daemon=True)
            self._threads.append(t)
            if nice:
                self._background.append(t)
            t.start()

    def _take(self) -> tuple[GameSpec, Path | None] | None:
        background = threading.current_thread() in self._background
        with self._cond:
            if self._stopped or not self._queue or (background and self._background_stopped):
                return None
            group, spec, root = self._queue.popleft()
            self._group_of[(spec.task_id, root)] = group
            if background:
                self._background_held.add((spec.task_id, root))
            return spec, root

    def _done(self, spec: GameSpec, root: Path | None, exc: BaseException | None) -> None:
        with self._cond:
            key = (spec.task_id, root)
            group = self._group_of.pop(key)
            self._background_held.discard(key)
            if key in self._recalled:
                self._recalled.discard(key)
                if exc is not None and not self._stopped:  # killed by _recall_background: made again, first
                    self._queue.appendleft((group, spec, root))
                    self._cond.notify_all()
                    return
            if exc is not None:
                self._errors.setdefault(group, exc)  # re-raised by wait() for its group
            self._left[group] -= 1
            self._cond.notify_all()
