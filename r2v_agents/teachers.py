"""Teachers pi_T: the env's oracle, an OpenAI-compatible chat model and a local transformers model.

Both are policies (``act_batch``) and also answer ``query_batch(contexts, infos) -> list[Decision | None]``
for the routed agent, where ``None`` means "no teacher action" (budget spent, request failed) and the
routed agent keeps its SLM action instead.

Example:
    >>> from r2v_agents.context import Context
    >>> ctx = Context.start("g", "o", {"admissible_actions": ["look"]})
    >>> OracleTeacher().act_batch([ctx], [{"expert_action": "go east"}])[0].action
    'go east'
    >>> OracleTeacher().act_batch([ctx], [{}])[0].action   # no expert action: a safe fallback
    'look'
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from r2v_agents.backbones import load_backbone
from r2v_agents.context import Context
from r2v_agents.policy import BatchPolicy, Decision
from r2v_agents.prompts import SYSTEM_PROMPT, build_prompt, check_style, parse_completion
from r2v_agents.samplers.transformers_sampler import TransformersSampler


def fallback_action(ctx: Context) -> str:
    """What a teacher does when it has nothing to say: a harmless admissible action, or "look"."""
    if ctx.admissible_actions:
        for a in ("look", "inventory"):
            if a in ctx.admissible_actions:
                return a
        return ctx.admissible_actions[0]
    return "look"


class OracleTeacher(BatchPolicy):
    """The env's expert (``info["expert_action"]``): hindsight-free but privileged, so it sees oracle keys."""

    name = "oracle"
    sees_oracle = True

    def query_batch(self, contexts: Sequence[Context], infos: Sequence[Mapping[str, Any]]) -> list[Decision | None]:
        return [Decision(action=str(i["expert_action"]), source="oracle") if i.get("expert_action") else None
                for i in infos]

    def act_batch(self, contexts, infos):
        return [d or Decision(action=fallback_action(c), source="oracle", meta={"fallback": True})
                for d, c in zip(self.query_batch(contexts, infos), contexts)]


@dataclass
class OpenAITeacherConfig:
    """An OpenAI-compatible chat endpoint (OpenAI, vLLM serve, llama.cpp server, ...)."""

    model: str
    """Model name sent to the endpoint."""
    base_url: str | None = None
    """Endpoint root, e.g. http://localhost:8000/v1 (default: $OPENAI_BASE_URL or OpenAI)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the key (a local endpoint may need none)."""
    timeout_s: float = 30.0
    """Per-request timeout."""
    max_retries: int = 4
    """Retries after a 429, a 5xx, a timeout or a connection error (each retry is a request)."""
    backoff_s: float = 1.0
    """First retry delay; doubles each retry (with jitter), honouring Retry-After up to ``max_backoff_s``."""
    max_backoff_s: float = 30.0
    budget: int | None = None
    """Most HTTP requests this teacher may ever send (retries included); None is unlimited."""
    price_in_per_mtok: float = 0.0
    """Price per million prompt tokens (cost accounting)."""
    price_out_per_mtok: float = 0.0
    """Price per million completion tokens."""
    max_tokens: int = 48
    temperature: float = 0.0
    concurrency: int = 4
    """Requests in flight at once within one batch."""

    def __post_init__(self):
        if self.budget is not None and self.budget < 0:
            raise ValueError("budget must be >= 0 or None")
        if self.max_retries < 0 or self.timeout_s <= 0 or self.concurrency < 1:
            raise ValueError("max_retries must be >= 0, timeout_s > 0 and concurrency >= 1")


@dataclass
class TeacherStats:
    requests: int = 0
    replies: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    errors: Counter = field(default_factory=Counter)


class OpenAITeacher(BatchPolicy):
    """A chat-completions teacher with timeouts, exponential backoff, a hard request budget and cost accounting.

    It never raises on a bad response: failures are counted in :attr:`stats` and answered with ``None``
    (``query_batch``) or a fallback action with ``source="fallback"`` (``act_batch``).
    """

    name = "teacher"

    def __init__(self, config: OpenAITeacherConfig, client: Any = None):
        self.config = config
        self.stats = TeacherStats()
        self._lock = threading.Lock()
        if client is None:
            import openai

            key = os.environ.get(config.api_key_env)
            if key is None and config.base_url is None and not os.environ.get("OPENAI_BASE_URL"):
                raise ValueError(f"no API key: set ${config.api_key_env} or give a base_url of a local endpoint")
            client = openai.OpenAI(base_url=config.base_url, api_key=key or "unused", timeout=config.timeout_s,
                                   max_retries=0)  # we retry ourselves, so every request counts against the budget
        self.client = client

    @property
    def budget_left(self) -> int | None:
        return None if self.config.budget is None else self.config.budget - self.stats.requests

    def _reserve(self) -> bool:
        with self._lock:
            if self.config.budget is not None and self.stats.requests >= self.config.budget:
                return False
            self.stats.requests += 1
            return True

    def query(self, ctx: Context) -> Decision | None:
        import openai

        cfg = self.config
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": build_prompt(ctx)}]
        for attempt in range(cfg.max_retries + 1):
            if not self._reserve():
                self._error("budget")
                return None
            try:
                resp = self.client.chat.completions.create(model=cfg.model, messages=messages,
                                                           max_tokens=cfg.max_tokens, temperature=cfg.temperature)
                action = parse_completion(resp.choices[0].message.content or "")
                if not action:
                    raise ValueError("empty completion")
                usage = getattr(resp, "usage", None)
                p_tok = int(getattr(usage, "prompt_tokens", 0) or 0)
                c_tok = int(getattr(usage, "completion_tokens", 0) or 0)
            except (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
                    openai.APIConnectionError) as e:
                self._error(type(e).__name__)
                if attempt < cfg.max_retries:
                    time.sleep(self._delay(attempt, e))
                continue
            except Exception as e:  # noqa: BLE001 - malformed body or a 4xx: not worth a retry
                self._error(type(e).__name__)
                return None
            cost = self._account(p_tok, c_tok)
            return Decision(action=action, source="teacher", cost=cost,
                            meta={"prompt_tokens": p_tok, "completion_tokens": c_tok, "attempts": attempt + 1})
        return None

    def _delay(self, attempt: int, error: Exception) -> float:
        cfg = self.config
        delay = cfg.backoff_s * 2 ** attempt * (0.5 + random.random() / 2)
        response = getattr(error, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        try:
            delay = max(delay, float(retry_after)) if retry_after is not None else delay
        except ValueError:
            pass
        return min(delay, cfg.max_backoff_s)

    def _error(self, kind: str) -> None:
        with self._lock:
            self.stats.errors[kind] += 1

    def _account(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Count one reply's tokens and cost (USD at the configured per-million prices); returns the cost."""
        cfg = self.config
        cost = (prompt_tokens * cfg.price_in_per_mtok + completion_tokens * cfg.price_out_per_mtok) / 1e6
        with self._lock:
            self.stats.replies += 1
            self.stats.prompt_tokens += prompt_tokens
            self.stats.completion_tokens += completion_tokens
            self.stats.cost += cost
        return cost

    def query_batch(self, contexts: Sequence[Context], infos: Sequence[Mapping[str, Any]] = ()
                    ) -> list[Decision | None]:
        if len(contexts) <= 1 or self.config.concurrency == 1:
            return [self.query(c) for c in contexts]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(self.config.concurrency, len(contexts))) as pool:
            return list(pool.map(self.query, contexts))

    def act_batch(self, contexts, infos):
        return [d or Decision(action=fallback_action(c), source="fallback")
                for d, c in zip(self.query_batch(contexts, infos), contexts)]


class HFTeacher(BatchPolicy):
    """A local transformers causal LM as teacher (any checkpoint directory, or ``smollm2``): greedy decoding of one
    action per context, prompted like the SLM (:func:`r2v_agents.prompts.render_prompt`: a chat turn after
    :data:`SYSTEM_PROMPT` when the tokenizer has a chat template). No network; cost 0.

    A context whose reply holds no action gets ``None`` from :meth:`query_batch` (the routed agent keeps its SLM
    action) and a fallback action from :meth:`act_batch`; a prompt longer than ``max_prompt_tokens`` keeps its end.

    Example (not run here: it loads a model; see tests/agents/test_smollm2.py):
        >>> teacher = HFTeacher.from_pretrained("smollm2", max_new_tokens=24)  # doctest: +SKIP
    """

    name = "teacher"

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int = 32, batch_size: int = 8,
                 max_prompt_tokens: int = 1024, style: str = "line"):
        if max_new_tokens < 1 or batch_size < 1 or max_prompt_tokens < 1:
            raise ValueError("max_new_tokens, batch_size and max_prompt_tokens must be >= 1")
        check_style(style)
        self.style = style  # "block": multi-line actions (r2v_agents.prompts.action_style)
        self.model, self.tokenizer = model.eval(), tokenizer
        self.max_new_tokens, self.batch_size, self.max_prompt_tokens = max_new_tokens, batch_size, max_prompt_tokens
        # Greedy decoding in the one local-generation loop. A one-line reply ends with its first complete answer
        # line ("reply"), a code block with its closing fence: what parse_completion reads of a reply generated up
        # to EOS, without the tokens after it.
        self.sampler = TransformersSampler(model, tokenizer, max_new_tokens=max_new_tokens, temperature=0.0,
                                           max_prompt_tokens=max_prompt_tokens, batch_size=batch_size, style=style,
                                           stop="fence" if style == "block" else "reply")
        self.stats = TeacherStats()

    @classmethod
    def from_pretrained(cls, name: str, **kwargs: Any) -> HFTeacher:
        """A teacher over a model directory or a named backbone (:func:`r2v_agents.backbones.load_backbone`)."""

        model, tok = load_backbone(name)
        return cls(model, tok, **kwargs)

    def query_batch(self, contexts: Sequence[Context], infos: Sequence[Mapping[str, Any]] = ()
                    ) -> list[Decision | None]:
        return self._decide(list(contexts))  # the sampler batches by batch_size

    def _decide(self, contexts: list[Context]) -> list[Decision | None]:
        if not contexts:
            return []
        out: list[Decision | None] = []
        pad = self.tokenizer.pad_token_id
        for (cand,) in self.sampler.sample([build_prompt(c) for c in contexts], k=1):
            self.stats.requests += 1
            self.stats.prompt_tokens += len(cand.prompt_token_ids or ())
            if not cand.action:
                self._error("empty completion")
                out.append(None)
                continue
            tokens = sum(t != pad for t in cand.token_ids or ())  # the reply's tokens, its end of turn included
            self.stats.replies += 1
            self.stats.completion_tokens += tokens
            out.append(Decision(action=cand.action, source="teacher", meta={"completion_tokens": tokens}))
        return out

    def _error(self, kind: str) -> None:
        self.stats.errors[kind] += 1

    def act_batch(self, contexts, infos):
        return [d or Decision(action=fallback_action(c), source="fallback")
                for d, c in zip(self.query_batch(contexts, infos), contexts)]
