"""The model agents of ``r2v eval``: any OpenAI-compatible chat endpoint (:class:`OpenAIChatAgent`) and a local
transformers checkpoint (:class:`HFChatAgent`), and how their replies become actions.

Replies of the model agents (``openai``, ``hf:``) become actions through :class:`ReplyReader`: the grounding
chain of :mod:`r2v_agents.grounding` by default (each step records how: the ``grounding`` and ``reply`` step
columns), a ``--parser`` when one is given, or the reply's first line as it is with ``--grounding off``.
``--choose likelihood`` (``hf:`` only) plays the admissible action the model finds most likely
(:mod:`r2v_agents.likelihood`) and records every action's score as the step's candidates; steps without a list of
concrete actions (HumanEval+, TerminalBench) generate and ground instead. ``--shots K`` puts K expert episodes of
train tasks before the step's prompt as earlier chat turns (:mod:`r2v_eval.demos`). Prompts are bounded
(:data:`AGENT_PROMPT`: the last 3 turns, capped observations, TextWorld's banner dropped) and a reply gets at
most :data:`LINE_TOKENS` new tokens (:data:`BLOCK_TOKENS` for code) unless ``--max-tokens`` says otherwise.

Infrastructure failures are not agent failures: the model agents retry rate limits, 5xx, timeouts, connection
errors and malformed responses with exponential backoff, count every retry in their step's ``meta``, and when
the retries are spent answer an :data:`r2v_agents.runner.INFRA_SOURCE` decision, which ends the episode
unscored (``error = "infra:<kind>: ..."``) rather than playing a made-up action that would count as a loss.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from r2v_agents.backbones import SMOLLM2, inference_placement, load_backbone
from r2v_agents.context import Context
from r2v_agents.episodes import INFRA_SOURCE
from r2v_agents.grounding import CODE_BENCHMARKS, LIKELIHOOD, ground
from r2v_agents.likelihood import best_action, score_actions
from r2v_agents.policy import BatchPolicy, Candidate, Decision
from r2v_agents.prompts import PromptConfig, build_prompt, parse_completion, system_prompt
from r2v_agents.samplers.transformers_sampler import TransformersSampler
from r2v_agents.teachers import OpenAITeacher, OpenAITeacherConfig
from r2v_envs.errors import BackendUnavailableError, UnknownChoiceError
from r2v_eval.demos import DemoBank

INFRA_KINDS = ("rate_limit", "server_error", "timeout", "connection", "malformed_response", "api_error", "budget")
CHOICES = ("generate", "likelihood")
AGENT_PROMPT = PromptConfig(history_turns=3, history_obs_chars=160, max_obs_chars=1000, max_admissible=40,
                            max_chars=3500, drop_banner=True)
"""The prompt of the model agents: bounded so that a step's cost does not grow with the episode."""
LINE_TOKENS = 24
"""New tokens of a one-line action (the longest ALFWorld/TextWorld commands are about 12 tokens; a model that
wraps the command in a short sentence still fits, and the grounding chain finds it there)."""
BLOCK_TOKENS = 384
"""New tokens of a code action (HumanEval+'s write_code with a function)."""
REPLY_CHARS = 4000
"""Characters of a reply kept in the step's ``reply`` column."""


class ReplyReader:
    """How a model's reply becomes the step's action, and what the step records about it (``grounding``: the
    link of the chain that produced the action, None when the reply was not grounded; ``reply``: the text).

    Example:
        >>> from r2v_agents.context import Context
        >>> ctx = Context.start("g", "o", {"admissible_actions": ["go south", "look"]})
        >>> ReplyReader()("You should try going south.", ctx)
        ('go south', {'grounding': 'normalised', 'reply': 'You should try going south.'})
        >>> ReplyReader(grounding=False)("You should try going south.", ctx)[0]
        'You should try going south.'
    """

    def __init__(self, grounding: bool = True, parser: Callable[[str], str] | None = None):
        self.grounding, self.parser = grounding, parser

    def __call__(self, reply: str, ctx: Context) -> tuple[str, dict[str, Any]]:
        meta: dict[str, Any] = {"grounding": None, "reply": reply[:REPLY_CHARS]}
        if self.parser is not None:
            return self.parser(reply), meta
        if not self.grounding:
            return parse_completion(reply), meta
        g = ground(reply, ctx.admissible_actions, ctx.benchmark)
        meta["grounding"] = g.kind
        return g.action, meta


def max_tokens_for(ctx: Context, override: int | None) -> int:
    """New tokens a reply at ``ctx`` may take (:data:`LINE_TOKENS`, :data:`BLOCK_TOKENS` for code)."""
    if override is not None:
        return override
    return BLOCK_TOKENS if ctx.benchmark in CODE_BENCHMARKS else LINE_TOKENS


def system_for(ctx: Context, override: str = "") -> str:
    """The system prompt at ``ctx``: the override, else r2v's for the benchmark's action style."""
    return override or system_prompt("block" if ctx.benchmark in CODE_BENCHMARKS else "line")


def chat_messages(ctx: Context, system: str = "", demos: DemoBank | None = None) -> list[dict[str, str]]:
    """The chat the model sees at this step: the system prompt, the demonstrations' turns if any (``--shots``),
    then the shared prompt builder's text (bounded by :data:`AGENT_PROMPT`)."""
    shown = demos.messages(ctx) if shows_demos(ctx, demos) else []
    return [{"role": "system", "content": system_for(ctx, system)}, *shown,
            {"role": "user", "content": build_prompt(ctx, AGENT_PROMPT)}]


def shows_demos(ctx: Context, demos: DemoBank | None) -> bool:
    """Whether this step shows demonstrations: there are some, and the step acts in lines (not code)."""
    return demos is not None and ctx.benchmark not in CODE_BENCHMARKS


def demo_meta(ctx: Context, demos: DemoBank | None) -> dict[str, Any]:
    """The step's record of the demonstrations shown (their train task ids), if any."""
    if not shows_demos(ctx, demos):
        return {}
    return {"demos": [d.task_id for d in demos.demos(ctx.benchmark, ctx.task_id)]}


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

    def __init__(self, config: OpenAITeacherConfig, system_prompt: str = "", reader: ReplyReader | None = None,
                 client: Any = None, max_tokens: int | None = None):
        super().__init__(config, client)
        self.system_prompt, self.reader = system_prompt, reader or ReplyReader()
        self.max_tokens = max_tokens
        self.demos: DemoBank | None = None  # few-shot demonstrations (r2v eval --shots)

    def query(self, ctx: Context) -> Decision:
        cfg = self.config
        messages = chat_messages(ctx, self.system_prompt, self.demos)
        retries: Counter = Counter()
        kind, message = "budget", "request budget spent"
        start = time.perf_counter()
        for attempt in range(cfg.max_retries + 1):
            if not self._reserve():
                self._error("budget")
                return infra_decision("budget", "request budget spent", attempt, retries)
            try:
                resp = self.client.chat.completions.create(model=cfg.model, messages=messages,
                                                           max_tokens=max_tokens_for(ctx, self.max_tokens),
                                                           temperature=cfg.temperature)
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
            # An empty or ungroundable reply is the agent's own answer: it is played (the env answers with
            # feedback) and counted invalid, not retried.
            action, meta = self.reader(content or "", ctx)
            return Decision(action=action, source="agent", cost=cost,
                            meta={"prompt_tokens": p_tok, "completion_tokens": c_tok, "attempts": attempt + 1,
                                  "retries": dict(retries), "latency_s": round(time.perf_counter() - start, 4),
                                  **meta, **demo_meta(ctx, self.demos)})
        return infra_decision(kind, message, cfg.max_retries + 1, retries)  # pragma: no cover - loop returns

    def act_batch(self, contexts, infos):
        return self.query_batch(contexts, infos)


class HFChatAgent(BatchPolicy):
    """A local transformers causal LM as the agent: the chat template when the tokenizer has one, greedy (or
    sampled at ``temperature``) decoding batched over the live episodes, or (``choose="likelihood"``) the
    admissible action it scores highest, one forward pass per decision."""

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, system_prompt: str = "", reader: ReplyReader | None = None,
                 max_new_tokens: int | None = None, temperature: float = 0.0, batch_size: int = 8,
                 choose: str = "generate"):
        if choose not in CHOICES:
            raise UnknownChoiceError("action choice", choose, CHOICES)
        self.model, self.tokenizer = model.eval(), tokenizer
        self.system_prompt, self.reader = system_prompt, reader or ReplyReader()
        self.max_new_tokens, self.temperature, self.batch_size = max_new_tokens, temperature, batch_size
        self.choose = choose
        self.demos: DemoBank | None = None  # few-shot demonstrations (r2v eval --shots)
        # Generation is the one local-generation loop's: prompts are this agent's rendered chat, kept whole
        self.sampler = TransformersSampler(model, tokenizer, max_new_tokens=LINE_TOKENS, temperature=temperature,
                                           max_prompt_tokens=None, batch_size=batch_size, render=False)

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
        messages = chat_messages(ctx, self.system_prompt, self.demos)
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        # No template: the turns as plain text, each demonstration prompt followed by its action.
        turns = [m["content"] + (" " if m["role"] == "user" else "\n\n") for m in messages[1:-1]]
        return f"{messages[0]['content']}\n\n{''.join(turns)}{messages[-1]['content']}"

    def by_likelihood(self, ctx: Context) -> bool:
        """Whether this step is chosen by likelihood: asked for, and the step lists concrete actions."""
        return self.choose == "likelihood" and bool(ctx.admissible_actions) and ctx.benchmark not in CODE_BENCHMARKS

    def act_batch(self, contexts, infos):
        out: dict[int, Decision] = {}
        gen = [i for i, c in enumerate(contexts) if not self.by_likelihood(c)]
        for i, c in enumerate(contexts):
            if self.by_likelihood(c):
                out[i] = self._choose(c)
        for k in range(0, len(gen), self.batch_size):
            part = gen[k:k + self.batch_size]
            out.update(zip(part, self._generate([contexts[i] for i in part])))
        return [out[i] for i in range(len(contexts))]

    def _choose(self, ctx: Context) -> Decision:
        start = time.perf_counter()
        prompt = self.render(ctx)
        actions = list(ctx.admissible_actions or ())
        scores = score_actions(self.model, self.tokenizer, prompt, actions)
        p_tok = len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        return Decision(action=best_action(actions, scores), source="agent",
                        candidates=[Candidate(a, logprob=s) for a, s in zip(actions, scores)],
                        meta={"grounding": LIKELIHOOD, "reply": None, "prompt_tokens": p_tok,
                              "completion_tokens": 0, "latency_s": round(time.perf_counter() - start, 4),
                              **demo_meta(ctx, self.demos)})

    def _generate(self, contexts: list[Context]) -> list[Decision]:
        start = time.perf_counter()
        prompts = [self.render(c) for c in contexts]
        budget = max(max_tokens_for(c, self.max_new_tokens) for c in contexts)
        # one-line actions stop at the reply's first complete answer line; code runs to the end of turn
        lines = all(c.benchmark not in CODE_BENCHMARKS for c in contexts)
        replies = self.sampler.sample(prompts, k=1, max_new_tokens=budget, stop="reply" if lines else "eos")
        latency = (time.perf_counter() - start) / len(prompts)
        out, eos = [], self.sampler.stop_ids("eos")
        for ctx, (cand,) in zip(contexts, replies):
            action, meta = self.reader(cand.text or "", ctx)
            # the reply's tokens before its end of turn, as an endpoint's usage counts them
            ids = cand.token_ids or ()
            tokens = len(ids) - (bool(ids) and ids[-1] in eos)
            out.append(Decision(action=action, source="agent",
                                meta={"prompt_tokens": len(cand.prompt_token_ids or ()), "completion_tokens": tokens,
                                      "latency_s": round(latency, 4), **meta, **demo_meta(ctx, self.demos)}))
        return out
