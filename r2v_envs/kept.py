"""Engines a closed env leaves for the process's next envs: one keep-and-take pool for every backend whose engine
costs more to start than to reset (ScienceWorld's JVM, ALFWorld's loaded PDDL game).

A pipeline or an evaluation makes fresh envs for every runner pass, one per episode played at once; each backend's
engine module says what a new engine costs and why a kept one plays what a fresh one plays. The pool is per process:
a forked child inherits the parent's list but not its engines' pipes and sockets, so it starts an empty one. An env
takes an engine by key (the most recently kept first: its caches are the warmest); an engine past ``limit`` (the
oldest), past ``idle_s`` or no longer ``alive`` is closed at the next take or keep, outside the lock, and all are
closed at exit. Expiry is checked there and not by a timer thread: with one alive, CPython 3.11.7 failed pytest's
next ``ast.parse`` (hypothesis' terminal summary) with "AST constructor recursion depth mismatch".

Example:
    >>> closed = []
    >>> pool = KeptEngines(limit=1, close=closed.append)
    >>> pool.keep("a", "engine-a"); pool.keep("b", "engine-b")  # over the limit: the oldest closes
    >>> closed, pool.take("a"), pool.take("b"), pool.take("b")
    (['engine-a'], None, 'engine-b', None)
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any


class KeptEngines:
    """A process's engines that closed envs left, by key, oldest first (module docstring)."""

    def __init__(self, limit: int, close: Callable[[Any], None], alive: Callable[[Any], bool] = lambda e: True,
                 idle_s: float | None = None):
        self.limit, self.close, self.alive, self.idle_s = limit, close, alive, idle_s
        self._lock = threading.Lock()
        self._kept: list[tuple[Hashable, Any, float]] = []  # (key, engine, when it was kept)
        self._pid = os.getpid()
        atexit.register(self.close_all)

    def take(self, key: Hashable) -> Any | None:
        """A kept engine of ``key`` that is still alive (taken out of the pool), else None."""
        found = None
        with self._lock:
            stale = self._take_stale()
            for i in range(len(self._kept) - 1, -1, -1):
                if self._kept[i][0] == key:
                    engine = self._kept.pop(i)[1]
                    if self.alive(engine):
                        found = engine
                        break
                    stale.append(engine)
        self._close(stale)
        return found

    def keep(self, key: Hashable, engine: Any) -> None:
        """Keep ``engine`` (which no env holds any more) for the next :meth:`take` of ``key``; a dead one closes."""
        with self._lock:
            stale = self._take_stale()
            if self.alive(engine):
                self._kept.append((key, engine, time.monotonic()))
            else:
                stale.append(engine)
            stale += [self._kept.pop(0)[1] for _ in range(max(0, len(self._kept) - self.limit))]
        self._close(stale)

    def close_all(self) -> None:
        """Close every kept engine (at exit; also for a caller that wants none left now)."""
        with self._lock:
            self._own()
            engines, self._kept = [e for _, e, _ in self._kept], []
        self._close(engines)

    def __len__(self) -> int:
        with self._lock:
            return len(self._own())

    def _own(self) -> list[tuple[Hashable, Any, float]]:
        if self._pid != os.getpid():  # a forked child: the parent's engines are not ours to use or close
            self._kept, self._pid = [], os.getpid()
        return self._kept

    def _take_stale(self) -> list[Any]:
        """Remove and return (under the lock) the engines kept longer than ``idle_s``."""
        kept = self._own()
        if self.idle_s is None:
            return []
        now = time.monotonic()
        stale = [e for _, e, t in kept if now - t >= self.idle_s]
        kept[:] = [k for k in kept if now - k[2] < self.idle_s]
        return stale

    def _close(self, engines: list[Any]) -> None:
        for engine in engines:
            self.close(engine)
