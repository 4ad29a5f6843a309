"""The pool of engines closed envs leave (r2v_envs.kept): by key, newest first, bounded, expiring, per process."""

from __future__ import annotations

import os
import time

import pytest

from r2v_envs.kept import KeptEngines


class Engine:
    def __init__(self, name: str, alive: bool = True):
        self.name, self.is_alive = name, alive

    def __repr__(self) -> str:
        return self.name


def pool(**kw):
    closed: list[Engine] = []
    return KeptEngines(close=closed.append, alive=lambda e: e.is_alive, **{"limit": 2, **kw}), closed


def test_an_engine_serves_its_own_key_newest_first_and_the_oldest_past_the_limit_closes():
    kept, closed = pool()
    a1, a2, b = Engine("a1"), Engine("a2"), Engine("b")
    kept.keep("a", a1)
    kept.keep("a", a2)
    assert kept.take("b") is None and len(kept) == 2
    kept.keep("b", b)  # three kept, limit two: a1, the oldest, closes
    assert closed == [a1] and kept.take("a") is a2 and kept.take("a") is None and kept.take("b") is b
    kept.keep("a", a2)
    kept.close_all()
    assert closed == [a1, a2] and len(kept) == 0


def test_a_dead_or_idle_engine_is_closed_not_served():
    kept, closed = pool(idle_s=0.2)
    dead, old, fresh = Engine("dead", alive=False), Engine("old"), Engine("fresh")
    kept.keep("x", dead)
    assert closed == [dead]  # never kept
    kept.keep("x", old)
    old.is_alive = False  # died while kept: closed at the take, not served
    assert kept.take("x") is None and closed == [dead, old]
    kept.keep("x", fresh)
    time.sleep(0.3)
    assert kept.take("x") is None and closed == [dead, old, fresh]  # idle past idle_s


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_starts_an_empty_pool_and_leaves_the_parents_engines_alone():
    kept, closed = pool()
    mine = Engine("mine")
    kept.keep("x", mine)
    pid = os.fork()
    if pid == 0:  # the child: the parent's engine is not served, nor closed at its exit
        ok = kept.take("x") is None and len(kept) == 0
        kept.close_all()
        os._exit(0 if ok and not closed else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0 and kept.take("x") is mine and not closed
