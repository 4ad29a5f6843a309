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
  teacher), from a ``r2v train`` / ``r2v pipeline`` run directory. ``slm:RUN_DIR?k=1`` is the policy itself (one
  sample per step at the run's temperature, no verifier), ``slm:RUN_DIR?greedy=1`` its most likely action.
* ``random`` / ``expert``: the reference floor and ceiling (:mod:`r2v_agents.reference`): a uniform admissible
  action seeded per (``--agent-seed``, episode, step), and the env's expert action. ``verifier``: the admissible
  action the benchmark's verifier scores highest, no model (what an SLM-only agent must beat).

The model agents themselves (``openai``, ``hf:``: prompts, grounding of replies, likelihood choice,
infrastructure retries) are in :mod:`r2v_eval.model_agents`.

Example:
    >>> parse = make_parser("regex:Action: *(.+)")
    >>> parse("I think so.\\nAction: go east"), make_parser("first-line")("  take coin \\n more")
    ('go east', 'take coin')
    >>> policy, name = build_agent("r2v_eval.agents:first_admissible")
    >>> name, type(policy).__name__
    ('r2v_eval.agents:first_admissible', 'CallablePolicy')
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from r2v_agents.policy import BatchPolicy, as_policy
from r2v_agents.prompts import parse_completion
from r2v_agents.reference import ExpertAgent, RandomAgent, VerifierAgent
from r2v_agents.teachers import OpenAITeacherConfig
from r2v_agents.workers import load_callable
from r2v_envs.errors import BackendUnavailableError, R2VError, UnknownChoiceError
from r2v_eval.model_agents import CHOICES, LINE_TOKENS, HFChatAgent, OpenAIChatAgent, ReplyReader

PARSERS = ("first-line", "last-line", "regex:PATTERN", "module:callable")
GROUNDING_MODES = ("on", "off")


class AgentSpecError(R2VError, ValueError):
    """An ``--agent`` spec (or its options) that names no agent r2v can build."""


@dataclass
class AgentOptions:
    """Options of the model agents (``openai``, ``hf:``); ignored by callables and run-dir agents."""

    model: str = ""
    """model name sent to the endpoint (openai)"""
    base_url: str | None = None
    """endpoint root, e.g. http://127.0.0.1:8000/v1 (openai; default $OPENAI_BASE_URL or OpenAI)"""
    api_key_env: str = "OPENAI_API_KEY"
    """environment variable holding the API key (a local server may need none)"""
    system_prompt: str = ""
    """system message ('' : r2v's, per benchmark); '@path' reads it from a file"""
    grounding: str = "on"
    """on: map each reply onto an action (exact, normalised, similar, else as it is); off: the reply's first line"""
    choose: str = "generate"
    """generate: ground the model's reply; likelihood: play the admissible action the model scores highest (hf:)"""
    parser: str = ""
    """overrides grounding: first-line | last-line | regex:PATTERN (group 1) | module:callable"""
    shots: int = 0
    """expert demonstrations shown before each step (openai, hf:): train-split tasks of the same family"""
    agent_seed: int = 0
    """seed of --agent random and of --agent verifier's ties"""
    max_tokens: int | None = None
    """completion tokens per action (None: 24 for a command, 384 for code)"""
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

    def __post_init__(self) -> None:
        if self.grounding not in GROUNDING_MODES:
            raise UnknownChoiceError("grounding mode", self.grounding, GROUNDING_MODES)
        if self.choose not in CHOICES:
            raise UnknownChoiceError("action choice", self.choose, CHOICES)
        if self.shots < 0:
            raise ValueError(f"shots must be >= 0, got {self.shots}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    def system_text(self) -> str:
        """The system prompt override ('' : r2v's own, chosen per benchmark by :func:`system_for`)."""
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


def first_admissible(obs: str, info: Mapping[str, Any]) -> str:
    """A trivial callable agent (for docs and smoke runs): the first admissible action it sees, else "look"."""
    actions = info.get("admissible_actions") or ["look"]
    return str(actions[0])


def build_agent(spec: str, options: AgentOptions | None = None) -> tuple[BatchPolicy, str]:
    """``(policy, name)`` for an agent spec (module docstring); the name is recorded in every run directory."""
    opts = options or AgentOptions()
    reader = ReplyReader(grounding=opts.grounding == "on", parser=make_parser(opts.parser) if opts.parser else None)
    if opts.choose == "likelihood" and not spec.startswith("hf:"):
        raise AgentSpecError("--choose likelihood scores actions with a local model's log-probabilities: use an hf: "
                         "agent (an endpoint does not return the log-probability of a given text)")
    if spec == "random":
        return RandomAgent(opts.agent_seed), f"random:{opts.agent_seed}"
    if spec == "expert":
        return ExpertAgent(), "expert"
    if spec == "verifier":
        return VerifierAgent(opts.agent_seed), f"verifier:{opts.agent_seed}"
    if spec == "openai":
        if not opts.model:
            raise AgentSpecError("--agent openai needs --model (the model name at the endpoint)")
        cfg = OpenAITeacherConfig(model=opts.model, base_url=opts.base_url, api_key_env=opts.api_key_env,
                                  timeout_s=opts.timeout_s, max_retries=opts.max_retries, backoff_s=opts.backoff_s,
                                  max_backoff_s=opts.max_backoff_s, budget=opts.budget,
                                  price_in_per_mtok=opts.price_in_per_mtok,
                                  price_out_per_mtok=opts.price_out_per_mtok,
                                  max_tokens=opts.max_tokens or LINE_TOKENS, temperature=opts.temperature,
                                  concurrency=opts.concurrency)
        return OpenAIChatAgent(cfg, opts.system_text(), reader, max_tokens=opts.max_tokens), f"openai:{opts.model}"
    if spec.startswith("hf:"):
        path = spec[3:]
        kw = {"system_prompt": opts.system_text(), "reader": reader, "max_new_tokens": opts.max_tokens,
              "temperature": opts.temperature, "choose": opts.choose}
        name = f"hf:{os.path.basename(os.path.normpath(path))}" + ("+likelihood" if opts.choose == "likelihood" else "")
        return HFChatAgent.from_pretrained(path, device=opts.device, **kw), name
    kind, _, arg = spec.partition(":")
    if arg and kind in plugin_agents():
        options = arg.partition("?")[2]  # `slm:RUN?k=1`: the policy alone is another agent than `slm:RUN`
        try:
            policy = plugin_agent(kind, arg)
        except R2VError:
            raise
        except ValueError as e:  # an option value the kind cannot use (`?k=x`, `?temperature=-1`): the user's to fix
            raise AgentSpecError(f"--agent {spec!r}: {e}") from e
        return policy, f"{kind}?{options}" if options else kind
    if ":" in spec:
        try:
            obj = load_callable(spec)
        except (ImportError, AttributeError, ValueError) as e:
            raise AgentSpecError(f"--agent {spec!r} names no importable callable ({type(e).__name__}: {e}); a plugin "
                                 f"kind is one of {sorted(plugin_agents())}") from e
        if isinstance(obj, type):
            obj = obj()
        return as_policy(obj, spec), spec
    raise UnknownChoiceError("agent spec", spec, ("openai", "hf:PATH", "random", "verifier", "expert", "slm:RUN_DIR",
                                                  "r2v:RUN_DIR", "module:callable"))


# Agent kinds that installed packages provide (``KIND:ARG`` specs) through the ``r2v.agents`` entry points of their
# pyproject.toml: the training package declares ``slm`` and ``r2v`` (its run directories), so ``r2v eval`` and
# ``python -m r2v_eval`` accept the same specs while evaluation never imports training code.
AGENT_ENTRY_POINTS = "r2v.agents"


def plugin_agents() -> dict[str, Any]:
    """``kind -> entry point`` of the agent kinds installed packages declare."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=AGENT_ENTRY_POINTS)}


def plugin_agent(kind: str, arg: str) -> BatchPolicy:
    """The agent a ``KIND:ARG`` spec names, built by the package that declares ``kind``."""
    found = plugin_agents()
    if kind not in found:
        raise BackendUnavailableError(f"{kind}:{arg}", f"no installed package declares the agent kind {kind!r} "
                                      f"(entry points of group {AGENT_ENTRY_POINTS!r}; `pip install -e .` declares "
                                      "slm and r2v)")
    return found[kind].load()(arg)


def agent_concurrency(policy: Any) -> int:
    """How many requests the agent can have in flight (an endpoint's ``concurrency``; a local model's batch)."""
    cfg = getattr(policy, "config", None)
    return int(getattr(cfg, "concurrency", 0) or getattr(policy, "batch_size", 1) or 1)
