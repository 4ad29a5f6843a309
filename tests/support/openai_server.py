"""An OpenAI-compatible chat server for the ``r2v eval`` tests: stdlib ``http.server`` on 127.0.0.1 in a thread,
answering with a real (tiny, locally trained) causal LM through its chat template, and serving injected faults:
429s, 500s, malformed JSON and a bounded hang."""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The tokenizer's chat template: the user turn verbatim (it is the shared prompt builder's text, ending in
# "Action:"), as the model was trained on; the system turn is dropped, as a completion-only model needs.
CHAT_TEMPLATE = "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"


def train_scripted_chat_model(out_dir: str, steps: int = 60, agent_prompt: bool = False) -> str:
    """A 1-layer Qwen2 trained for a few seconds on the scripted env's expert text, saved with a chat template.

    ``agent_prompt``: train on the prompts the model agents send (``r2v_eval.model_agents.AGENT_PROMPT``, bounded
    history, banner dropped) rather than the SLM's, so that the model wins some episodes as an ``openai`` agent."""
    import copy

    import torch

    from r2v_agents.tiny import build_tiny_model, env_corpus
    from tests.support.tiny_models import scripted_corpus_and_tokenizer

    torch.set_num_threads(1)
    texts, tok = scripted_corpus_and_tokenizer()
    if agent_prompt:
        from r2v_eval.model_agents import AGENT_PROMPT

        texts = env_corpus("R2V/Scripted-v0", task_ids=[f"scripted-{i}" for i in range(4)], seeds=(0,),
                           perturbations=None, prompt=AGENT_PROMPT)
    tok = copy.deepcopy(tok)  # the cached one is shared by the process's other tests: they expect no chat template
    model = build_tiny_model(tok, hidden_size=48, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=96)
    tok.padding_side = "right"  # positions must start at 0 as at inference (left padding would shift them)
    enc = tok(texts, return_tensors="pt", padding=True)
    tok.padding_side = "left"
    labels = enc["input_ids"].clone()
    labels[enc["attention_mask"] == 0] = -100
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        model(**enc, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    tok.chat_template = CHAT_TEMPLATE
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


class ChatServer:
    """``POST /v1/chat/completions`` backed by a transformers model, with faults chosen per prompt.

    The first time a prompt is seen it may get a fault (by a CRC of the prompt: 429, 500 or malformed JSON; the
    first prompt of the fourth kind hangs for ``hang_s`` once), so a retry of that prompt succeeds whatever the
    request order; prompts containing ``always_fail`` always get a 500. ``served`` counts what was sent."""

    def __init__(self, model_dir: str, hang_s: float = 3.0, always_fail: str | None = None,
                 fault_every: int = 4, faults: bool = True):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.torch, self.hang_s, self.always_fail, self.fault_every = torch, hang_s, always_fail, fault_every
        self.faults = faults
        self.seen: Counter = Counter()
        self.served: Counter = Counter()
        self.lock = threading.Lock()
        self.hung = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep the test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.handle(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _fault(self, prompt: str) -> str | None:
        with self.lock:
            first = self.seen[prompt] == 0
            self.seen[prompt] += 1
            if self.always_fail and self.always_fail in prompt:
                return "500"
            if not first or not self.faults:
                return None
            kind = zlib.crc32(prompt.encode()) % self.fault_every
            if kind == 3 and not self.hung:
                self.hung = True
                return "hang"
            return {0: "429", 1: "500", 2: "malformed"}.get(kind)

    def _send(self, h: BaseHTTPRequestHandler, code: int, payload: bytes, headers: dict[str, str] | None = None):
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        try:
            h.wfile.write(payload)
        except OSError:  # the client gave up (timeout) before the hang ended
            pass

    def handle(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        prompt = self.tok.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=False)
        fault = self._fault(prompt)
        with self.lock:
            self.served[fault or "ok"] += 1
        if fault == "429":
            return self._send(h, 429, b'{"error": {"message": "rate limited", "type": "rate_limit"}}',
                              {"Retry-After": "0"})
        if fault == "500":
            return self._send(h, 500, b'{"error": {"message": "internal error"}}')
        if fault == "malformed":
            return self._send(h, 200, b'{"id": "x", "object": "chat.completion", "choices": [{"mess')
        if fault == "hang":
            time.sleep(self.hang_s)  # bounded: the client's timeout is shorter
        # clients send the older max_tokens or the newer max_completion_tokens (Inspect's OpenAI providers may)
        limit = body.get("max_tokens") or body.get("max_completion_tokens") or 16
        text, p_tok, c_tok = self.generate(prompt, int(limit))
        reply = {"id": "r2v-test", "object": "chat.completion", "created": 0, "model": body.get("model", ""),
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": text}}],
                 "usage": {"prompt_tokens": p_tok, "completion_tokens": c_tok, "total_tokens": p_tok + c_tok}}
        self._send(h, 200, json.dumps(reply).encode())

    def generate(self, prompt: str, max_tokens: int) -> tuple[str, int, int]:
        enc = self.tok(prompt, return_tensors="pt", add_special_tokens=False)
        with self.lock, self.torch.no_grad():  # one generation at a time: the model is not thread-safe
            out = self.model.generate(**enc, max_new_tokens=max_tokens, do_sample=False,
                                      pad_token_id=self.tok.pad_token_id)
        new = out[0, enc["input_ids"].shape[1]:].tolist()
        if self.tok.eos_token_id in new:
            new = new[:new.index(self.tok.eos_token_id)]
        return self.tok.decode(new), int(enc["input_ids"].shape[1]), len(new)
