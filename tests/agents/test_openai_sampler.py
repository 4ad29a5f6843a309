"""OpenAISampler against a real local HTTP server speaking the OpenAI completions API (canned, well-formed
responses in vLLM's shape: choices with ``index``, ``text`` and legacy ``logprobs``)."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from r2v_agents.context import Context
from r2v_agents.samplers import Sampler
from r2v_agents.samplers.openai_sampler import OpenAISampler
from r2v_agents.slm import SLMPolicy
from r2v_envs.errors import BackendUnavailableError

ACTIONS = ("go east", "take coin", "look")


def completion(body: dict, drop_one: bool = False) -> dict:
    """Choice j of prompt i says ACTIONS[(i + j) % 3] + a newline token + junk after the stop; choices are
    returned in reverse order so the client must match them by index."""
    prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
    choices = []
    for i, _ in enumerate(prompts):
        for j in range(body["n"]):
            words = ACTIONS[(i + j) % 3].split()
            tokens = [" " + w for w in words] + ["\n", " junk"]
            lps = [-0.5 * (j + 1)] * len(words) + [-0.25, -7.0]
            tops = [{t: lp, "other": math.log(max(1e-9, 1 - math.exp(lp)))} for t, lp in zip(tokens, lps)]
            choices.append({"index": i * body["n"] + j, "text": " " + " ".join(words), "finish_reason": "stop",
                            "logprobs": {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops,
                                         "text_offset": list(range(len(tokens)))}})
    if drop_one:
        choices.pop()
    return {"id": "cmpl-test", "object": "text_completion", "created": 0, "model": body["model"],
            "choices": choices[::-1], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


@pytest.fixture
def server():
    state = {"requests": [], "mode": "ok"}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state["requests"].append((self.path, body))
            if state["mode"] == "error":
                self.send_response(500)
                payload = b'{"error": {"message": "engine dead", "type": "server_error"}}'
            else:
                self.send_response(200)
                payload = json.dumps(completion(body, drop_one=state["mode"] == "short")).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield state
    httpd.shutdown()
    httpd.server_close()


def test_k_candidates_with_token_logprobs(server):
    sampler = OpenAISampler("slm", base_url=server["url"], logprobs=2, seed=7, batch_size=2, max_retries=0)
    assert isinstance(sampler, Sampler)
    cands = sampler.sample(["p0", "p1", "p2"], k=3)
    assert [[c.action for c in cs] for cs in cands] == [  # p2 is prompt 0 of the second request
        ["go east", "take coin", "look"], ["take coin", "look", "go east"], ["go east", "take coin", "look"]]
    c = cands[0][1]  # "take coin", choice 1: each word -1.0, then the newline token; " junk" is cut
    assert c.token_logprobs == (-1.0, -1.0, -0.25) and c.logprob == pytest.approx(-2.25)
    p = math.exp(-1.0)
    assert c.token_entropies[0] == pytest.approx(-(p * math.log(p) + (1 - p) * math.log(1 - p)), abs=1e-6)
    paths = [path for path, _ in server["requests"]]
    assert paths == ["/v1/completions"] * 2  # batch_size=2: two requests for three prompts
    body = server["requests"][0][1]
    assert (body["prompt"], body["n"], body["logprobs"], body["stop"], body["seed"]) == (["p0", "p1"], 3, 2,
                                                                                         ["\n"], 7)


def test_slm_policy_over_the_endpoint(server):
    ctx = Context.start("Find the coin.", "You are in room 0.", {"admissible_actions": list(ACTIONS)})
    slm = SLMPolicy(OpenAISampler("slm", base_url=server["url"], max_retries=0), k=3)
    d = slm.act_batch([ctx, ctx], [{}, {}])
    assert d[0].action == "go east" and d[1].action == "take coin"  # highest log-prob candidate (choice 0)
    assert len(d[0].candidates) == 3 and d[0].features is not None
    assert "Find the coin." in server["requests"][0][1]["prompt"][0]


def test_server_errors_are_typed(server):
    sampler = OpenAISampler("slm", base_url=server["url"], max_retries=0)
    server["mode"] = "error"
    with pytest.raises(BackendUnavailableError, match="server is up"):
        sampler.sample(["p"], k=2)
    server["mode"] = "short"
    with pytest.raises(ValueError, match="expected n=2"):
        sampler.sample(["p"], k=2)
    with pytest.raises(ValueError):
        OpenAISampler("slm", base_url=server["url"], temperature=0)
