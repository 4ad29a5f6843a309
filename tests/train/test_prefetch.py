"""The pipeline's game prefetch (r2v_train/runtime/prefetch.py) and its stage narration (r2v_train/runtime/narrate.py)."""

from __future__ import annotations

import threading
import time

import pytest

from r2v_envs.errors import GameGenerationError
from r2v_envs.textworld import generate
from r2v_envs.textworld.suite import get_suite
from r2v_train.chain.collect import EnvConfig, SplitConfig, split_stage
from r2v_train.chain.stages import STAGES, ChainConfig, run_chain
from r2v_train.config import load_config
from r2v_train.runtime import prefetch
from r2v_train.runtime.narrate import describe_stage


def test_needed_games_are_exactly_the_tasks_the_stages_play(tmp_path):
    cfg = load_config({"preset": "tiny", "evaluate": {"split": "test"}})
    groups = prefetch.needed_games(cfg)
    split = split_stage(cfg.chain.env, cfg.chain.split, tmp_path)  # what the chain's split stage writes
    ids = {g: [s.task_id for s, _ in items] for g, items in groups.items()}
    assert ids["train"] == split["used"]["train"]
    assert ids["valid"] == split["used"]["valid"]
    assert ids["test"] == split["test"]  # the evaluation plays its whole split (no max_tasks)
    suite = get_suite(cfg.chain.env.env_kwargs["suite"])
    assert all(s == suite[s.task_id] for items in groups.values() for s, _ in items)


def test_needed_games_honours_split_caps_and_ignores_other_envs():
    cfg = load_config({"preset": "tiny", "chain": {"split": {"max_train_tasks": 3, "max_valid_tasks": 1}},
                       "evaluate": {"max_tasks": 2}})
    ids = {g: [s.task_id for s, _ in items] for g, items in prefetch.needed_games(cfg).items()}
    assert [len(ids[g]) for g in ("train", "valid", "test")] == [3, 1, 2]
    scripted = load_config({"preset": "tiny", "chain": {"env": {"env_id": "R2V/Scripted-v0", "env_kwargs": {}}}})
    assert prefetch.needed_games(scripted) == {"train": [], "valid": [], "test": []}


@pytest.fixture
def fake_generator(monkeypatch, tmp_path):
    """ensure_game replaced by a recorder that 'generates' a spec by remembering it (with a short sleep)."""
    made: list[str] = []
    lock = threading.Lock()
    fail = set()

    def ensure(spec, root=None, server=None):
        time.sleep(0.01)
        if spec.task_id in fail:
            raise GameGenerationError(f"could not generate {spec.task_id}")
        with lock:
            made.append(spec.task_id)

    monkeypatch.setattr(generate, "ensure_game", ensure)  # what each worker's serve_queue calls
    monkeypatch.setattr(prefetch, "missing_games", lambda specs, root=None: [s for s in specs if s.task_id not in made])
    return made, fail


def _groups(n_train=4, n_valid=3, n_test=3):
    specs = list(get_suite("default").values())
    cut = [0, n_train, n_train + n_valid, n_train + n_valid + n_test]
    return {g: [(s, None) for s in specs[cut[i]:cut[i + 1]]] for i, g in enumerate(("train", "valid", "test"))}


def test_start_makes_train_games_then_wait_finishes_each_group_once(fake_generator):
    made, _ = fake_generator
    groups = _groups()
    p = prefetch.GamePrefetch(groups, workers=2, progress=False)
    p.start()
    train = {s.task_id for s, _ in groups["train"]}
    assert train <= set(made) and p.missing(["train"]) == 0  # the teacher stage finds its games
    p.wait(prefetch.STAGE_NEEDS["router_data"])
    p.wait(prefetch.STAGE_NEEDS["evaluate"])
    p.close()
    every = [s.task_id for items in groups.values() for s, _ in items]
    assert sorted(made) == sorted(every)  # each needed game generated exactly once, nothing else
    assert p.missing() == 0


def test_cached_games_are_not_generated_again(fake_generator):
    made, _ = fake_generator
    groups = _groups()
    made.extend(s.task_id for s, _ in groups["valid"])  # already in the cache
    before = len(made)
    p = prefetch.GamePrefetch(groups, workers=2, progress=False)
    p.start()
    p.wait(["valid", "test"])
    p.close()
    assert len(made) - before == len(groups["train"]) + len(groups["test"])


def test_a_failed_game_is_raised_by_the_wait_of_its_group(fake_generator):
    _, fail = fake_generator
    groups = _groups()
    fail.add(groups["test"][1][0].task_id)
    p = prefetch.GamePrefetch(groups, workers=2, progress=False)
    p.start()  # train and valid are fine
    p.wait(["valid"])
    with pytest.raises(GameGenerationError, match=groups["test"][1][0].task_id):
        p.wait(["test"])
    p.close()


def test_close_drops_the_queue(fake_generator):
    made, _ = fake_generator
    p = prefetch.GamePrefetch(_groups(n_train=0, n_valid=0, n_test=200), workers=1, progress=False)
    p._spawn(1)
    p.close()
    assert len(made) < 200 and all(not t.is_alive() for t in p._threads)


def test_close_aborts_the_background_server_and_leaves_nothing_half_written(tmp_path):
    """A real nice-19 background game server, closed while it starts: close() kills it instead of waiting for its
    game (on a starved machine, minutes: likely most of the 414 s the suite's miniature pipeline once spent outside
    its chain and evaluation); no game, no temporary folder is left. Before, close() waited until the server had
    written its first game."""
    pytest.importorskip("textworld")
    specs = list(get_suite("small").values())[:3]
    p = prefetch.GamePrefetch({"now": [], "later": [(s, tmp_path) for s in specs]}, workers=1, progress=False)
    p.start()  # nothing in the first group: the rest goes to one background server at nice 19
    deadline = time.monotonic() + 30
    while not p._background_servers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert p._background_servers, "the background server never opened"
    p.close()
    assert all(not t.is_alive() for t in p._threads)
    assert generate.missing_games(specs, tmp_path) == specs  # the game being made was dropped, not half-written
    assert not list(tmp_path.rglob(".tmp-*"))


@pytest.mark.slow  # a real game server: warm-up and two games, ~25 s on a loaded 2-core machine
def test_wait_takes_a_game_back_from_a_starved_background_server(tmp_path):
    """A stage that waits for a game the nice-19 background server is making gets it from a normal-priority server:
    the background server (here frozen with SIGSTOP, a starved server taken to the limit) is aborted and its game
    queued again. Before, wait() waited for the background server to finish that game, which on a busy machine
    took minutes (the suite's miniature pipeline: 207 s for its two test games) and here forever."""
    import os
    import signal

    pytest.importorskip("textworld")
    specs = list(get_suite("small").values())[:2]
    p = prefetch.GamePrefetch({"now": [], "later": [(s, tmp_path) for s in specs]}, workers=1, progress=False)
    p.start()  # nothing in the first group: "later" goes to one background server at nice 19
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        server = p._background_servers[0] if p._background_servers else None
        proc = server and (server._starting or server._proc)  # started on its first game: it holds one
        if proc is not None:
            break
        time.sleep(0.01)
    assert proc is not None, "the background server never took a game"
    os.kill(proc.pid, signal.SIGSTOP)
    waiter = threading.Thread(target=p.wait, args=(["later"],), daemon=True)
    waiter.start()
    waiter.join(timeout=240)
    try:
        assert not waiter.is_alive(), "wait() is still waiting for the frozen background server's game"
        assert generate.missing_games(specs, tmp_path) == [] and p.missing() == 0
        assert not list(tmp_path.rglob(".tmp-*"))
    finally:
        if proc.poll() is None:
            proc.kill()
        p.close()


def test_run_chain_says_what_each_stage_does_on_stderr(tmp_path, capsys):
    env = EnvConfig("R2V/Scripted-v0", env_kwargs={"perturbations": None}, workers=0)
    cfg = ChainConfig(env=env, split=SplitConfig(max_train_tasks=2), threads=0)
    seen = []
    run_chain(cfg, tmp_path, only=["split", "teacher"], before_stage=seen.append)
    err = capsys.readouterr().err
    assert "[r2v] stage 1/8 split: the env's 70/15/15 task split" in err
    assert "[r2v] stage 2/8 teacher: the oracle teacher plays the 2 train tasks clean" in err
    assert seen == ["split", "teacher"]
    run_chain(cfg, tmp_path, only=["split", "teacher"], before_stage=seen.append)
    err = capsys.readouterr().err
    assert "stage 2/8 teacher: done before" in err and seen == ["split", "teacher"]  # skipped: no hook call
    assert len({describe_stage(ChainConfig(), s, {}) for s in STAGES}) == len(STAGES)


def test_progress_key_switches_every_bar_and_a_section_wins():
    off = load_config({"preset": "tiny", "progress": False})
    assert (off.chain.progress, off.chain.router.progress, off.evaluate.progress) == (False, False, False)
    on = load_config({"preset": "tiny", "progress": True})  # the tiny preset's router has no bar of its own
    assert (on.chain.progress, on.chain.router.progress, on.evaluate.progress) == (True, True, True)
    mixed = load_config({"preset": "tiny", "progress": False, "evaluate": {"progress": True}})
    assert (mixed.chain.progress, mixed.evaluate.progress) == (False, True)
    default = load_config(None)  # the shipped default config: every bar on
    assert (default.chain.progress, default.chain.router.progress, default.evaluate.progress) == (True, True, True)
