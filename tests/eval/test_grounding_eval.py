"""`r2v eval` with a chat model that answers in prose, over a real HTTP endpoint on 127.0.0.1: grounded by
default (each step records how, the report shows non-exact and invalid shares), played as it is with
`--grounding off`; and the reference agents `random` (seeded, deterministic) and `expert`."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("openai")

from r2v_agents.shards import load_rows  # noqa: E402
from r2v_eval.cli import main  # noqa: E402

TASKS = ("scripted-0", "scripted-1", "scripted-2")
SEEDS = ("0", "1")


def prose_reply(prompt: str) -> str:
    """What a chatty model says: the right move, in a sentence (never the bare command)."""
    actions = re.search(r"^Admissible actions: (.*)$", prompt, re.M).group(1).split(" | ")
    move = next((a for a in actions if a.startswith("take")), "go east")
    return f"Good question! I think you should {move.title()} now."


class ProseServer:
    """An OpenAI-compatible chat endpoint (stdlib, a thread) that answers :func:`prose_reply`."""

    def __init__(self):
        self.requests: list[dict] = []
        requests = self.requests

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                requests.append(body)
                text = prose_reply(body["messages"][-1]["content"])
                payload = json.dumps({"id": "p", "object": "chat.completion", "created": 0, "model": "prose",
                                      "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant", "content": text}}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 9,
                                                "total_tokens": 19}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _eval(out: Path, agent: str, *extra: str) -> dict:
    main(["--agent", agent, "--envs", "R2V/Scripted-v0", "--perturbations", "none", "--seeds", *SEEDS,
          "--task-ids", *TASKS, "--out", str(out), "--no-progress", "--bootstrap", "200", *extra])
    return json.loads((out / "results.json").read_text())["cells"][0]


def _steps(out: Path) -> list[dict]:
    return load_rows(out / "runs" / "R2V_Scripted-v0" / "none", "steps")


@pytest.fixture
def endpoint(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    with ProseServer() as server:
        yield server


def test_prose_replies_are_grounded_recorded_and_reported(endpoint, tmp_path):
    cell = _eval(tmp_path / "on", "openai", "--model", "prose", "--base-url", endpoint.url)
    assert cell["sr"] == 100.0 and cell["scored"] == len(TASKS) * len(SEEDS)
    steps = _steps(tmp_path / "on")
    assert {s["grounding"] for s in steps} == {"normalised"}
    assert all(s["reply"].startswith("Good question!") and s["action"] in s["admissible_actions"] for s in steps)
    assert "grounding" not in json.loads(steps[0]["meta"]) and "reply" not in json.loads(steps[0]["meta"])
    assert cell["non_exact_pct"] == 100.0 and cell["invalid_pct"] == 0.0
    row = next(line for line in (tmp_path / "on" / "report.md").read_text().splitlines()
               if line.startswith("| scripted |"))
    assert "| 100.0 | 0.0 |" in row  # non-exact (%), invalid (%)


def test_grounding_off_plays_every_reply_as_it_is(endpoint, tmp_path):
    cell = _eval(tmp_path / "off", "openai", "--model", "prose", "--base-url", endpoint.url, "--grounding", "off")
    steps = _steps(tmp_path / "off")
    assert all(s["action"] == s["reply"] and s["grounding"] is None for s in steps)
    assert cell["sr"] == 0.0 and cell["invalid_pct"] == 100.0 and cell["non_exact_pct"] is None


def test_a_parser_overrides_grounding(endpoint, tmp_path):
    _eval(tmp_path / "p", "openai", "--model", "prose", "--base-url", endpoint.url, "--parser", "regex:should (.+)")
    steps = _steps(tmp_path / "p")
    assert steps[0]["action"] == "Go East now." and steps[0]["grounding"] is None


def test_random_agent_is_seeded_and_deterministic_and_expert_is_the_ceiling(tmp_path):
    a = _eval(tmp_path / "r1", "random", "--agent-seed", "3")
    b = _eval(tmp_path / "r2", "random", "--agent-seed", "3")
    assert a == b
    ra, rb = _steps(tmp_path / "r1"), _steps(tmp_path / "r2")
    assert [s["action"] for s in ra] == [s["action"] for s in rb]
    assert all(s["action"] in s["admissible_actions"] for s in ra) and a["invalid_pct"] == 0.0
    assert (tmp_path / "r1" / "report.md").read_text() == (tmp_path / "r2" / "report.md").read_text()
    other = _eval(tmp_path / "r3", "random", "--agent-seed", "4")
    assert [s["action"] for s in _steps(tmp_path / "r3")] != [s["action"] for s in ra]
    assert other["scored"] == a["scored"]
    expert = _eval(tmp_path / "x", "expert")
    assert expert["sr"] == 100.0 and expert["invalid_pct"] == 0.0


def test_the_verifier_agent_plays_the_best_scored_admissible_action_deterministically(tmp_path):
    """``--agent verifier``: no model; every step plays an admissible action and records its (the best) verifier
    score and how many actions tied for it, and a rerun plays the same actions (ties are drawn seeded)."""
    a = _eval(tmp_path / "v1", "verifier")
    b = _eval(tmp_path / "v2", "verifier")
    assert a == b and a["invalid_pct"] == 0.0
    steps = _steps(tmp_path / "v1")
    assert [s["action"] for s in steps] == [s["action"] for s in _steps(tmp_path / "v2")]
    assert all(s["action"] in s["admissible_actions"] for s in steps)
    meta = [json.loads(s["meta"]) for s in steps]
    assert all(0.0 <= s["verifier_score"] <= 1.0 for s in steps)
    assert all(1 <= m["ties"] <= m["choices"] == len(s["admissible_actions"]) for m, s in zip(meta, steps))


def test_shots_show_train_expert_episodes_before_each_step(endpoint, tmp_path):
    import gymnasium as gym

    env = gym.make("R2V/Scripted-v0", seed=0, perturbations=None)
    train, test = set(env.unwrapped.task_ids("train")), set(env.unwrapped.task_ids("test"))
    _eval(tmp_path / "s", "openai", "--model", "prose", "--base-url", endpoint.url, "--shots", "2")
    steps = _steps(tmp_path / "s")
    shown = {tuple(json.loads(s["meta"])["demos"]) for s in steps}
    assert len(shown) == 1 and len(next(iter(shown))) == 2  # the same two demonstrations at every step
    assert set(next(iter(shown))) <= train and not set(next(iter(shown))) & test
    body = endpoint.requests[0]["messages"]
    roles = [m["role"] for m in body]
    assert roles[0] == "system" and roles[-1] == "user" and len(roles) > 3
    assert roles[1:-1] == ["user", "assistant"] * ((len(roles) - 2) // 2)
    # the assistant turns are the expert's actions on those train tasks, replayed
    expert = []
    for task in next(iter(shown)):
        obs, info = env.reset(seed=0, options={"task_id": task})
        done = False
        while not done:
            expert.append(info["expert_action"])
            _obs, _r, term, trunc, info = env.step(info["expert_action"])
            done = term or trunc
    assert [m["content"] for m in body if m["role"] == "assistant"] == expert
    # without --shots the chat is the system and the step's own prompt only
    _eval(tmp_path / "n", "openai", "--model", "prose", "--base-url", endpoint.url)
    assert [m["role"] for m in endpoint.requests[-1]["messages"]] == ["system", "user"]


def test_shots_need_a_model_agent(tmp_path):
    with pytest.raises(ValueError, match="--shots"):
        _eval(tmp_path / "r", "random", "--shots", "1")
