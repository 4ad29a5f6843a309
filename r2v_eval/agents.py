"""Agent specs of ``r2v eval``: any OpenAI-compatible endpoint, any Python callable, a local transformers
checkpoint, or our own trained SLM / routed agent from a run directory, all as runner policies.

Specs (:func:`build_agent`):

* ``openai``: a chat-completions endpoint (``--model``, ``--base-url``; key from ``$OPENAI_API_KEY`` or
  ``api_key_env``): vLLM, llama.cpp server, hosted APIs. The server applies the model's chat template.
* ``module:callable``: any ``(obs, info) -> str`` callable or policy object (a class is instantiated with no
  arguments), adapted by :func:`r2v_agents.policy.as_policy`.
* ``hf:PATH``: a local transformers checkpoint directory, prompted through its tokenizer's chat template (plain
  text when it has none), greedy. ``hf:smollm2`` loads SmolLM2-135M-Instruct through
  :mod:`r2v_agents.backbones` where that module exists.
* ``slm:RUN_DIR`` / ``r2v:RUN_DIR``: the distilled SLM alone, or the routed R2V agent (SLM + router + the run's
  teacher), from a ``r2v train`` / ``r2v pipeline`` run directory.

Infrastructure failures are not agent failures: the model agents retry rate limits, 5xx, timeouts, connection
errors and malformed responses with exponential backoff, count every retry in their step's ``meta``, and when
the retries are spent answer an :data:`r2v_agents.runner.INFRA_SOURCE` decision, which ends the episode
unscored (``error = "infra:<kind>: ..."``) rather than playing a made-up action that would count as a loss.

Example:
    >>> parse = make_parser("regex:Action: *(.+)")
    >>> parse("I think so.\\nAction: go east"), make_parser("first-line")("  take coin \\n more")
    ('go east', 'take coin')
    >>> policy, name = build_agent("r2v_eval.agents:first_admissible")
    >>> name, type(policy).__name__
    ('r2v_eval.agents:first_admissible', 'CallablePolicy')
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from r2v_agents.backbones import SMOLLM2, inference_placement, load_backbone
from r2v_agents.context import Context
from r2v_agents.episodes import INFRA_SOURCE
from r2v_agents.policy import BatchPolicy, Decision, as_policy
from r2v_agents.prompts import build_prompt, parse_completion
from r2v_agents.teachers import SYSTEM_PROMPT, OpenAITeacher, OpenAITeacherConfig
from r2v_agents.workers import load_callable
from r2v_envs.errors import BackendUnavailableError, UnknownChoiceError

INFRA_KINDS = ("rate_limit", "server_error", "timeout", "connection", "malformed_response", "api_error", "budget")
PARSERS = ("first-line", "last-line", "regex:PATTERN", "module:callable")


@dataclass
class AgentOptions:
    """Options of the model agents (``openai``, ``hf:``); ignored by callables and run-dir agents."""

    model: str = ""
    """model name sent to the endpoint (openai)"""
    base_url: str | None = None
    """endpoint root, e.g. http://127.0.0.1:8000/v1 (openai; default $OPENAI_BASE_URL or OpenAI)"""
    api_key_env: str = "OPENAI_API_KEY"
    """environment variable holding the API key (a local server may need none)"""
    system_prompt: str = SYSTEM_PROMPT
    """system message; '@path' reads it from a file"""
    parser: str = "first-line"
    """how a completion becomes an action: first-line | last-line | regex:PATTERN (group 1) | module:callable"""
    max_tokens: int = 48
    """completion tokens per action"""
    temperature: float = 0.0
    """sampling temperature (0: greedy)"""
    timeout_s: float = 60.0
    """per-request timeout (openai)"""
    max_retries: int = 4
    """retries of a rate limit, 5xx, timeout, connection error or malformed response, with backoff"""
    backoff_s: float = 1.0
    """first retry delay; doubles each retry (with jitter), honouring Retry-After"""
    max_backoff_s: float = 30.0
    """longest retry delay"""
    concurrency: int = 4
    """requests in flight at once (openai); also the number of live episodes"""
    price_in_per_mtok: float = 0.0
    """price per million prompt tokens (cost column)"""
    price_out_per_mtok: float = 0.0
    """price per million completion tokens"""
    budget: int | None = None
    """most requests the agent may send in this run (None: unlimited)"""
    device: str | None = None
    """torch device of an hf: agent (None: CUDA in bf16 when torch sees a GPU, else the CPU)"""

    def system_text(self) -> str:
        if self.system_prompt.startswith("@"):
            with open(self.system_prompt[1:]) as fh:
                return fh.read()
        return self.system_prompt


def make_parser(spec: str) -> Callable[[str], str]:
    """The action parser named by ``spec`` (see :data:`PARSERS`)."""
    if spec == "first-line":
        return parse_completion
    if spec == "last-line":
        return lambda text: parse_completion("\n".join(reversed(text.splitlines())))
    if spec.startswith("regex:"):
        pattern = re.compile(spec[len("regex:"):])

        def parse(text: str) -> str:
            m = pattern.search(text)
            return "" if m is None else " ".join((m.group(1) if m.groups() else m.group(0)).split())
        return parse
    if ":" in spec:
        return load_callable(spec)
    raise UnknownChoiceError("action parser", spec, PARSERS)


def chat_messages(ctx: Context, system_prompt: str) -> list[dict[str, str]]:
    """The chat the model sees at this step: the system prompt, then the shared prompt builder's text."""
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": build_prompt(ctx)}]


def infra_decision(kind: str, message: str, attempts: int, retries: Mapping[str, int]) -> Decision:
    """The decision of an agent that could not act for infrastructure reasons (ends the episode unscored)."""
    return Decision(action="", source=INFRA_SOURCE,
                    meta={"infra_kind": kind, "infra_error": f"{attempts} attempts; {message[:300]}",
                          "attempts": attempts, "retries": dict(retries)})


def classify_api_error(error: BaseException) -> tuple[str, bool]:
    """``(kind, retryable)`` of an exception raised by an OpenAI-compatible request."""
    import openai

    if isinstance(error, openai.RateLimitError):
        return "rate_limit", True
    if isinstance(error, openai.APITimeoutError):  # subclass of APIConnectionError: test it first
        return "timeout", True
    if isinstance(error, openai.APIConnectionError):
        return "connection", True
    if isinstance(error, openai.InternalServerError):
        return "server_error", True
    if isinstance(error, (json.JSONDecodeError, openai.APIResponseValidationError, AttributeError, IndexError,
                          TypeError, KeyError)):
        return "malformed_response", True  # a body that is not a chat completion: the next try may be whole
    return "api_error", False  # 4xx other than 429 (auth, bad request): retrying cannot help


class OpenAIChatAgent(OpenAITeacher):
    """Any OpenAI-compatible chat endpoint as the agent under evaluation (client, budget and backoff from
    :class:`~r2v_agents.teachers.OpenAITeacher`), with typed infrastructure failures instead of fallbacks."""

    name = "openai"

    def __init__(self, config: OpenAITeacherConfig, system_prompt: str = SYSTEM_PROMPT,
                 parser: Callable[[str], str] = parse_completion, client: Any = None):
        super().__init__(config, client)
        self.system_prompt, self.parser = system_prompt, parser

    def query(self, ctx: Context) -> Decision:
        cfg = self.config
        messages = chat_messages(ctx, self.system_prompt)
        retries: Counter = Counter()
        kind, message = "budget", "request budget spent"
        start = time.perf_counter()
        for attempt in range(cfg.max_retries + 1):
            if not self._reserve():
                self._error("budget")
                return infra_decision("budget", "request budget spent", attempt, retries)
            try:
                resp = self.client.chat.completions.create(model=cfg.model, messages=messages,
                                                           max_tokens=cfg.max_tokens, temperature=cfg.temperature)
                content = resp.choices[0].message.content
                if content is not None and not isinstance(content, str):
                    raise TypeError(f"message content is {type(content).__name__}")
            except Exception as e:  # noqa: BLE001 - every failure is classified and counted
                kind, retryable = classify_api_error(e)
                message = f"{type(e).__name__}: {e}"
                self._error(kind)
                if not retryable or attempt == cfg.max_retries:
                    return infra_decision(kind, message, attempt + 1, retries)
                retries[kind] += 1
                time.sleep(self._delay(attempt, e))
                continue
            usage = getattr(resp, "usage", None)
            p_tok = int(getattr(usage, "prompt_tokens", 0) or 0)
            c_tok = int(getattr(usage, "completion_tokens", 0) or 0)
            cost = self._account(p_tok, c_tok)
            # An empty or unparseable reply is the agent's own answer: it is played (the env answers with
            # feedback), not retried.
            return Decision(action=self.parser(content or ""), source="agent", cost=cost,
                            meta={"prompt_tokens": p_tok, "completion_tokens": c_tok, "attempts": attempt + 1,
                                  "retries": dict(retries), "latency_s": round(time.perf_counter() - start, 4),
                                  "raw": (content or "")[:200]})
        return infra_decision(kind, message, cfg.max_retries + 1, retries)  # pragma: no cover - loop returns

    def act_batch(self, contexts, infos):
        return self.query_batch(contexts, infos)


class HFChatAgent(BatchPolicy):
    """A local transformers causal LM as the agent: the chat template when the tokenizer has one, greedy (or
    sampled at ``temperature``) decoding, batched over the live episodes."""

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, system_prompt: str = SYSTEM_PROMPT,
                 parser: Callable[[str], str] = parse_completion, max_new_tokens: int = 48,
                 temperature: float = 0.0, batch_size: int = 8):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.system_prompt, self.parser = system_prompt, parser
        self.max_new_tokens, self.temperature, self.batch_size = max_new_tokens, temperature, batch_size
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @classmethod
    def from_pretrained(cls, path: str, device: str | None = None, **kw: Any) -> HFChatAgent:
        """A local checkpoint directory, or a named backbone (``smollm2``) through :mod:`r2v_agents.backbones`,
        on ``device`` (None: CUDA in bf16 when available, else the CPU in the checkpoint's dtype)."""
        if not os.path.isdir(path) and path != SMOLLM2:
            raise BackendUnavailableError(f"hf:{path}", f"give a local checkpoint directory or {SMOLLM2!r} "
                                          "(nothing is downloaded)")
        device, dtype = inference_placement(device)
        model, tokenizer = load_backbone(path, dtype=dtype)
        if device != "cpu":
            model.to(device)
        return cls(model, tokenizer, **kw)

    def render(self, ctx: Context) -> str:
        messages = chat_messages(ctx, self.system_prompt)
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return f"{messages[0]['content']}\n\n{messages[1]['content']}"

    def act_batch(self, contexts, infos):
        out: list[Decision] = []
        for i in range(0, len(contexts), self.batch_size):
            out += self._generate([self.render(c) for c in contexts[i:i + self.batch_size]])
        return out

    def _generate(self, prompts: list[str]) -> list[Decision]:
        import torch

        start = time.perf_counter()
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(self.model.device) for k, v in enc.items()}
        sample = self.temperature > 0
        with torch.no_grad():
            gen = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=sample,
                                      temperature=self.temperature if sample else None, top_p=None, top_k=None,
                                      pad_token_id=self.tokenizer.pad_token_id)
        new = gen[:, enc["input_ids"].shape[1]:]
        latency = (time.perf_counter() - start) / len(prompts)
        eos = self.tokenizer.eos_token_id
        out = []
        for row, mask in zip(new.tolist(), enc["attention_mask"].tolist()):
            ids = row[:row.index(eos)] if eos in row else row
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            out.append(Decision(action=self.parser(text), source="agent",
                                meta={"prompt_tokens": int(sum(mask)), "completion_tokens": len(ids),
                                      "latency_s": round(latency, 4), "raw": text[:200]}))
        return out


def first_admissible(obs: str, info: Mapping[str, Any]) -> str:
    """A trivial callable agent (for docs and smoke runs): the first admissible action it sees, else "look"."""
    actions = info.get("admissible_actions") or ["look"]
    return str(actions[0])


def build_agent(spec: str, options: AgentOptions | None = None) -> tuple[BatchPolicy, str]:
    """``(policy, name)`` for an agent spec (module docstring); the name is recorded in every run directory."""
    opts = options or AgentOptions()
    parser = make_parser(opts.parser)
    if spec == "openai":
        if not opts.model:
            raise ValueError("--agent openai needs --model (the model name at the endpoint)")
        cfg = OpenAITeacherConfig(model=opts.model, base_url=opts.base_url, api_key_env=opts.api_key_env,
                                  timeout_s=opts.timeout_s, max_retries=opts.max_retries, backoff_s=opts.backoff_s,
                                  max_backoff_s=opts.max_backoff_s, budget=opts.budget,
                                  price_in_per_mtok=opts.price_in_per_mtok,
                                  price_out_per_mtok=opts.price_out_per_mtok, max_tokens=opts.max_tokens,
                                  temperature=opts.temperature, concurrency=opts.concurrency)
        return OpenAIChatAgent(cfg, opts.system_text(), parser), f"openai:{opts.model}"
    if spec.startswith("hf:"):
        path = spec[3:]
        kw = {"system_prompt": opts.system_text(), "parser": parser, "max_new_tokens": opts.max_tokens,
              "temperature": opts.temperature}
        name = f"hf:{os.path.basename(os.path.normpath(path))}"
        return HFChatAgent.from_pretrained(path, device=opts.device, **kw), name
    if spec.startswith(("slm:", "r2v:")):
        return run_dir_agent(spec[:3], spec[4:]), spec[:3]
    if ":" in spec:
        obj = load_callable(spec)
        if isinstance(obj, type):
            obj = obj()
        return as_policy(obj, spec), spec
    raise UnknownChoiceError("agent spec", spec, ("openai", "hf:PATH", "slm:RUN_DIR", "r2v:RUN_DIR",
                                                  "module:callable"))


# Agents read from a training run directory (``slm:DIR``, ``r2v:DIR``) are built by the training package, which
# registers them here when the ``r2v`` command loads (r2v_train.run_agents): evaluation never imports training code.
RUN_DIR_AGENTS: dict[str, Callable[[str], BatchPolicy]] = {}


def register_run_dir_agent(kind: str, build: Callable[[str], BatchPolicy]) -> None:
    """Make ``KIND:RUN_DIR`` agent specs build ``build(run_dir)``."""
    RUN_DIR_AGENTS[kind] = build


def run_dir_agent(kind: str, run_dir: str) -> BatchPolicy:
    """The SLM alone (``slm``) or the routed R2V agent (``r2v``) of a training run directory."""
    if kind not in RUN_DIR_AGENTS:
        raise BackendUnavailableError(f"{kind}:{run_dir}", "run-directory agents come with the training package: "
                                      "use the `r2v eval` command (or import r2v_train.run_agents first)")
    return RUN_DIR_AGENTS[kind](run_dir)


def agent_concurrency(policy: Any) -> int:
    """How many requests the agent can have in flight (1 for local agents)."""
    cfg = getattr(policy, "config", None)
    return int(getattr(cfg, "concurrency", 1) or 1)
