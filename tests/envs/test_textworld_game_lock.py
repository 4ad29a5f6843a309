"""Two workers asking for the same missing TextWorld game generate it once (a per-game file lock), and the lock
leaves nothing behind in the cache; no TextWorld needed (the generation itself is replaced by a slow writer)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from r2v_envs.textworld import generate
from r2v_envs.textworld.suite import get_suite


def test_concurrent_requests_for_one_game_generate_it_once(tmp_path, monkeypatch):
    spec = get_suite("small")["tw-coin_collector-easy-000"]
    calls, inside, overlap = [], [0], [False]
    guard = threading.Lock()

    def slow_writer(spec, path, timeout, server):
        with guard:
            inside[0] += 1
            overlap[0] |= inside[0] > 1
        calls.append(spec.task_id)
        time.sleep(0.3)
        path.write_bytes(b"game")
        path.with_suffix(".json").write_text("{}")
        with guard:
            inside[0] -= 1

    monkeypatch.setattr(generate, "_generate_into", slow_writer)
    with ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(lambda _: generate.ensure_game(spec, tmp_path), range(4)))
    assert calls == [spec.task_id] and not overlap[0]
    assert len(set(paths)) == 1 and paths[0].read_bytes() == b"game"
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".")]  # no lock file left


def test_a_failed_generation_releases_the_lock_and_the_next_caller_tries_again(tmp_path, monkeypatch):
    spec = get_suite("small")["tw-coin_collector-easy-000"]
    attempts = []

    def flaky(spec, path, timeout, server):
        attempts.append(1)
        if len(attempts) == 1:
            raise generate.GameGenerationError("first try fails")
        path.write_bytes(b"game")
        path.with_suffix(".json").write_text("{}")

    monkeypatch.setattr(generate, "_generate_into", flaky)
    try:
        generate.ensure_game(spec, tmp_path)
    except generate.GameGenerationError:
        pass
    else:
        raise AssertionError("the first generation should have failed")
    assert generate.ensure_game(spec, tmp_path).read_bytes() == b"game" and len(attempts) == 2
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".")]
