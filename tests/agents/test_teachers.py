"""Teachers: the oracle, and the OpenAI-compatible teacher against a real local HTTP server.

The server is a stdlib ThreadingHTTPServer speaking the chat-completions wire format; each test scripts its
responses (429, 500, slow, malformed, good) and the teacher must never crash and never exceed its budget.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from r2v_agents.context import Context
from r2v_agents.teachers import OpenAITeacher, OpenAITeacherConfig, OracleTeacher

CTX = Context.start("Take the coin.", "You see a coin.", {"admissible_actions": ["take coin", "look"]})


def completion(content: str, prompt_tokens: int = 100, completion_tokens: int = 3) -> dict:
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


class Server:
    """Serves the scripted responses in order (the last one repeats): (status, body or None, delay_s)."""

    def __init__(self, script):
        self.script, self.requests, self.bodies = list(script), 0, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                outer.bodies.append(json.loads(self.rfile.read(length)))
                i = outer.requests
                outer.requests += 1
                status, body, delay = outer.script[min(i, len(outer.script) - 1)]
                if delay:
                    time.sleep(delay)
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def teacher(server: Server, **kw) -> OpenAITeacher:
    cfg = dict(model="m", base_url=server.url, timeout_s=0.5, max_retries=3, backoff_s=0.01, max_backoff_s=0.05,
               price_in_per_mtok=1.0, price_out_per_mtok=2.0, concurrency=1)
    cfg.update(kw)
    return OpenAITeacher(OpenAITeacherConfig(**cfg))


ERR = {"error": {"message": "nope", "type": "server_error"}}


def test_retries_429_500_and_timeouts_then_succeeds_with_cost_accounting():
    script = [(429, ERR, 0), (500, ERR, 0), (200, completion("take coin"), 1.0), (200, completion(" take coin\n"), 0)]
    with Server(script) as srv:
        t = teacher(srv)
        d = t.query(CTX)
    assert d is not None and d.action == "take coin" and d.source == "teacher"
    assert srv.requests == 4 and t.stats.requests == 4 and t.stats.replies == 1
    assert t.stats.errors == {"RateLimitError": 1, "InternalServerError": 1, "APITimeoutError": 1}
    assert t.stats.prompt_tokens == 100 and t.stats.completion_tokens == 3
    assert d.cost == pytest.approx((100 * 1.0 + 3 * 2.0) / 1e6) == t.stats.cost
    sent = srv.bodies[-1]
    assert sent["model"] == "m" and "Take the coin." in sent["messages"][-1]["content"]


@pytest.mark.parametrize("body", ["{not json", {"choices": []}, completion("")])
def test_malformed_responses_return_none_without_retrying(body):
    with Server([(200, body, 0)]) as srv:
        t = teacher(srv)
        assert t.query(CTX) is None
        d = t.act_batch([CTX], [{}])[0]
    assert d.source == "fallback" and d.action == "look"
    assert t.stats.requests == srv.requests == 2 and t.stats.replies == 0


def test_budget_is_never_exceeded_even_with_retries_and_concurrency():
    with Server([(500, ERR, 0)]) as srv:
        t = teacher(srv, budget=5, concurrency=4)
        out = t.query_batch([CTX] * 6)
        assert t.query(CTX) is None
    assert out == [None] * 6
    assert srv.requests == t.stats.requests == 5 and t.budget_left == 0
    assert t.stats.errors["budget"] >= 1


def test_non_retryable_client_error_and_unreachable_server():
    with Server([(400, ERR, 0)]) as srv:
        t = teacher(srv)
        assert t.query(CTX) is None and srv.requests == 1
    t = OpenAITeacher(OpenAITeacherConfig(model="m", base_url=srv.url, timeout_s=0.2, max_retries=1,
                                          backoff_s=0.01))
    assert t.query(CTX) is None and t.stats.requests == 2  # connection refused: retried once, then gave up
    assert t.stats.errors["APIConnectionError"] == 2


def test_missing_key_without_local_endpoint_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="API key"):
        OpenAITeacher(OpenAITeacherConfig(model="m"))


def test_oracle_teacher_reads_only_the_expert_action():
    t = OracleTeacher()
    assert t.sees_oracle
    assert t.query_batch([CTX, CTX], [{"expert_action": "take coin"}, {"expert_action": None}]) [0].action == \
        "take coin"
    assert t.query_batch([CTX], [{}]) == [None]
