"""r2v's Inspect AI tasks run by Inspect's own runner against a real OpenAI-compatible server (a tiny trained chat
model on 127.0.0.1, :mod:`tests.support.openai_server`): the same episodes played by ``r2v eval`` and by
``inspect_ai.eval`` get the same replies, actions, outcomes and SR; the perturbation events reach the sample's
metadata and transcript; the oracle's keys never reach the model; ``inspect eval`` runs from the command line
as docs/inspect.md shows; and its log opens in Inspect's own viewer (a ``inspect view bundle`` in Chromium).

Needs the ``inspect`` extra; skipped, saying so, without it."""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gymnasium as gym
import pytest

pytestmark = pytest.mark.slow  # end to end: a model server, Inspect's runner, a subprocess

pytest.importorskip("inspect_ai", reason="the inspect extra is not installed (pip install -e '.[inspect]')")
pytest.importorskip("openai", reason="the api extra is not installed")
pytest.importorskip("transformers", reason="the train extra is not installed")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.log import list_eval_logs, read_eval_log  # noqa: E402

from r2v.inspect_tasks import scripted, textworld  # noqa: E402
from r2v_agents.shards import load_rows  # noqa: E402
from r2v_eval.agents import AgentOptions  # noqa: E402
from r2v_eval.cli import EvalArgs, evaluate  # noqa: E402
from r2v_eval.inspect_tasks import EPISODE_KEY, EVENTS_KEY, r2v_task  # noqa: E402
from tests.support.browser import chromium, skip_reason  # noqa: E402
from tests.support.openai_server import ChatServer, train_scripted_chat_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TASKS = tuple(f"scripted-{i}" for i in range(5))
SEEDS = (0, 1)
SETTING = "composite"
MAX_STEPS = 8
MODEL = "openai-api/local/tiny-scripted"  # Inspect's generic OpenAI-compatible provider: $LOCAL_BASE_URL/_API_KEY
SECRET = "walk into the oracle room 4242"


class LeakyOracle(gym.Wrapper):
    """Puts an unmistakable expert action in every info: a prompt that showed oracle keys would hold it."""

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        return obs, {**info, "expert_action": SECRET}

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        return obs, r, term, trunc, {**info, "expert_action": SECRET}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model_dir = train_scripted_chat_model(str(tmp_path_factory.mktemp("chat-model")), agent_prompt=True)
    with ChatServer(model_dir, faults=False) as s:
        yield s


@pytest.fixture
def local_model(server, monkeypatch):
    monkeypatch.setenv("LOCAL_BASE_URL", server.base_url)
    monkeypatch.setenv("LOCAL_API_KEY", "unused")  # the provider insists on a key; the test server reads none
    return server


def r2v_eval_run(out, server):
    opts = AgentOptions(model="tiny-scripted", base_url=server.base_url, concurrency=2)
    results = evaluate(EvalArgs(agent="openai", out=str(out), envs=("R2V/Scripted-v0",), perturbations=(SETTING,),
                                seeds=SEEDS, task_ids=TASKS, max_steps=MAX_STEPS, bootstrap=200, progress=False,
                                options=opts))
    (cell,) = results["cells"]
    return cell, load_rows(out / cell["run_dir"], "episodes"), load_rows(out / cell["run_dir"], "steps")


def replies(sample):
    return [m.text for m in sample.messages if m.role == "assistant"]


def test_inspect_eval_agrees_with_r2v_eval(local_model, tmp_path):
    cell, episodes, steps = r2v_eval_run(tmp_path / "eval", local_model)
    (log,) = inspect_eval(scripted(perturbations=SETTING, seed=list(SEEDS), tasks=list(TASKS), max_steps=MAX_STEPS),
                          model=MODEL, log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    samples = {s.id: s for s in log.samples}
    assert set(samples) == {e["episode_id"] for e in episodes} and len(samples) == len(TASKS) * len(SEEDS)
    by_episode: dict[str, list] = {}
    for s in sorted(steps, key=lambda s: s["t"]):
        by_episode.setdefault(s["episode_id"], []).append(s)
    for e in episodes:
        sample, ep_steps = samples[e["episode_id"]], by_episode[e["episode_id"]]
        assert replies(sample) == [s["reply"] for s in ep_steps]  # the same prompts got the same replies
        assert sample.scores["env_outcome"].value == float(e["success"])
        assert sample.metadata[EPISODE_KEY]["steps"] == e["steps"] and sample.metadata[EPISODE_KEY]["return"] == e["return"]
        events = [{"t": s["t"], "events": json.loads(s["perturbations"])} for s in ep_steps
                  if json.loads(s["perturbations"])]
        assert sample.metadata[EVENTS_KEY] == events
        infos = [ev.data for ev in sample.events if ev.event == "info" and ev.source == "r2v"]
        assert [{"t": d["t"], "events": d["perturbations"]} for d in infos] == events
    assert any(samples[k].metadata[EVENTS_KEY] for k in samples), "composite should perturb some step"
    accuracy = log.results.scores[0].metrics["accuracy"].value
    assert 100 * accuracy == pytest.approx(cell["sr"]) and cell["scored"] == len(samples)
    assert 0 < cell["sr"] < 100, "a trained tiny model should win some episodes and lose others here"


def test_same_seeds_same_transcripts_and_no_oracle_in_prompts(local_model, tmp_path):
    def run(name):
        task = r2v_task("R2V/Scripted-v0", SETTING, list(SEEDS), tasks=list(TASKS[:2]), max_steps=MAX_STEPS,
                        wrappers=("tests.eval.test_inspect_tasks:LeakyOracle",))
        (log,) = inspect_eval(task, model=MODEL, log_dir=str(tmp_path / name), display="none")
        assert log.status == "success", log.error
        return {s.id: s for s in log.samples}

    first, second = run("a"), run("b")
    assert {k: [(m.role, m.text) for m in s.messages] for k, s in first.items()} == \
        {k: [(m.role, m.text) for m in s.messages] for k, s in second.items()}
    inputs = [m.text for s in first.values() for ev in s.events if ev.event == "model" for m in ev.input]
    shown = [m.text for s in first.values() for m in s.messages]
    assert inputs and not any("4242" in text for text in inputs + shown)
    # the scorer, not the model, reads the outcome: the env's own score is in the score's metadata
    assert all(s.scores["env_outcome"].metadata["score"] is not None for s in first.values())


def test_textworld_samples_in_flight_together(local_model, tmp_path):
    """Real engines in concurrent samples: TextWorld parses its games with one module-level parser, which
    concurrent resets once corrupted ("pop from empty list"); env calls now run one at a time."""
    pytest.importorskip("textworld", reason="the textworld extra is not installed")
    (log,) = inspect_eval(textworld(perturbations=SETTING, seed=list(SEEDS), tasks=2, max_steps=3), model=MODEL,
                          log_dir=str(tmp_path), display="none", max_samples=4)
    assert log.status == "success", log.error
    assert len(log.samples) == 4 and all(s.error is None for s in log.samples)
    assert all(s.metadata[EPISODE_KEY]["steps"] == 3 or s.metadata[EPISODE_KEY]["terminated"] for s in log.samples)


def _entry_point_installed() -> bool:
    return any(ep.value == "r2v.inspect_tasks" for ep in importlib.metadata.entry_points(group="inspect_ai"))


@pytest.mark.parametrize("task", [
    pytest.param("r2v/scripted", marks=pytest.mark.skipif(
        not _entry_point_installed(), reason="the inspect_ai entry point of r2v is not installed yet: reinstall "
                                             "(pip install -e '.[inspect]') to register it")),
    "r2v/inspect_tasks.py@scripted"])  # Inspect's file form, which needs no entry point
def test_inspect_eval_command_line(local_model, tmp_path, task):
    # Inspect names a task "r2v/<name>" only when it sees r2v installed editable (PEP 610's direct_url.json). With the
    # checkout on sys.path, importlib.metadata finds the checkout's own r2v.egg-info first (pip -e leaves one there,
    # without direct_url.json), the task registers as bare "scripted" and "r2v/scripted" exits 1 silently. The
    # console script, as a user runs it, does not put the working directory on sys.path: so neither does this test.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = ["inspect", "eval", task, "--model", MODEL, "-T", f"perturbations={SETTING}", "-T", "seed=[0,1]",
           "-T", f"tasks=[{TASKS[0]},{TASKS[1]}]", "-T", f"max_steps={MAX_STEPS}", "--log-dir", str(tmp_path),
           "--display", "none"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, _why(done, tmp_path)
    (info,) = list_eval_logs(str(tmp_path))
    log = read_eval_log(info)
    # the registered name, or the file form's bare function name
    assert log.status == "success" and log.eval.task == ("r2v/scripted" if "@" not in task else "scripted")
    assert log.eval.task_args["perturbations"] == SETTING and log.eval.task_args["seed"] == [0, 1]
    assert sorted(s.id for s in log.samples) == sorted(f"{t}@{z}" for t in TASKS[:2] for z in SEEDS)
    assert all(s.scores["env_outcome"].value in (0.0, 1.0) for s in log.samples)
    assert "accuracy" in log.results.scores[0].metrics


def _why(done: subprocess.CompletedProcess, log_dir) -> str:
    """What a failed ``inspect eval`` said: ``--display none`` keeps stderr empty, so the log's own error too."""
    errors = []
    for info in list_eval_logs(str(log_dir)):
        log = read_eval_log(info)
        error = log.error
        errors.append(f"{log.status}: {error.message}\n{error.traceback}" if error else log.status)
    return (f"exit {done.returncode}\nstderr: {done.stderr[-2000:]}\nstdout: {done.stdout[-1000:]}\n"
            f"logs: {errors or 'none'}")


class QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, *a):  # keep the test output clean
        pass


@pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
def test_the_log_opens_in_inspects_viewer(local_model, tmp_path):
    """``inspect view bundle`` of a log, served on 127.0.0.1 and opened in Chromium: the task, its samples, and in
    a sample's transcript the model calls and the ``r2v`` perturbation events."""
    (log,) = inspect_eval(scripted(perturbations=SETTING, seed=0, tasks=list(TASKS[:2]), max_steps=MAX_STEPS),
                          model=MODEL, log_dir=str(tmp_path / "logs"), display="none")
    perturbed = next(s for s in log.samples if s.metadata[EVENTS_KEY])
    bundle = tmp_path / "bundle"
    done = subprocess.run(["inspect", "view", "bundle", "--log-dir", str(tmp_path / "logs"), "--output-dir",
                           str(bundle)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietFiles, directory=str(bundle)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    crashes: list[str] = []
    try:
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: crashes.append(str(e)))
            page.goto(f"http://127.0.0.1:{httpd.server_address[1]}/")
            page.get_by_text("r2v/scripted").first.wait_for(timeout=60_000)
            for sample in log.samples:
                page.get_by_text(sample.id, exact=True).first.wait_for()
            page.get_by_text(perturbed.id, exact=True).first.click()
            page.get_by_text("INFO: R2V").first.wait_for(timeout=60_000)
            first = perturbed.metadata[EVENTS_KEY][0]["events"][0]
            body = page.locator("body").inner_text()
            assert "MODEL CALL" in body and f'"type": "{first["type"]}"' in body
            page.screenshot(path=tmp_path / "inspect-view.png")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert crashes == []
