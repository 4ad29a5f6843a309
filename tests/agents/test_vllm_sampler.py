"""VLLMSampler's request building and output parsing with a stand-in engine (vLLM needs a GPU; the engine here
only isolates the sampler: it answers from each request's seed as a seeded vLLM request would, independently of
the batch)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import pytest

from r2v_agents.samplers import stream_seed
from r2v_agents.samplers.memo import MemoSampler
from r2v_agents.samplers.vllm_sampler import VLLMSampler


@dataclass
class Params:  # the fields of vllm.SamplingParams the sampler sets
    n: int
    temperature: float
    top_p: float
    max_tokens: int
    logprobs: int
    stop: list
    include_stop_str_in_output: bool
    seed: int | None = None


@dataclass
class Logprob:
    logprob: float


@dataclass
class Completion:
    text: str
    token_ids: list
    logprobs: list
    cumulative_logprob: float | None = None


@dataclass
class RequestOutput:
    prompt: str
    outputs: list = field(default_factory=list)


class SeededEngine:
    """``generate(prompts, params)`` like vllm.LLM: one output per prompt, its n completions drawn from a
    generator seeded by that request's seed alone."""

    def __init__(self):
        self.requests = []

    def generate(self, prompts, params, use_tqdm=False):
        assert len(params) == len(prompts)  # one SamplingParams per prompt
        out = []
        for prompt, p in zip(prompts, params):
            self.requests.append((prompt, p))
            rng = random.Random(p.seed)
            comps = []
            for _ in range(p.n):
                ids = [rng.randrange(2, 50) for _ in range(2)]
                lps = [math.log(0.5), math.log(0.25)]
                tops = [{ids[0]: Logprob(lps[0]), 99: Logprob(math.log(0.5))},
                        {ids[1]: Logprob(lps[1]), 98: Logprob(math.log(0.75))}]
                comps.append(Completion(text=f" go {ids[0]} {ids[1]}", token_ids=ids, logprobs=tops))
            out.append(RequestOutput(prompt, comps))
        return out


def test_each_prompt_is_its_own_seeded_request_so_candidates_ignore_the_batch():
    engine = SeededEngine()
    sampler = VLLMSampler("slm", seed=3, llm=engine, params_cls=Params, max_new_tokens=4, logprobs=2)
    a, b = "Goal: x\nAction:", "Goal: y\nAction:"
    alone = sampler.sample([a], k=3, keys=[11])[0]
    second = sampler.sample([b, a], k=3, keys=[12, 11])[1]
    assert [c.action for c in alone] == [c.action for c in second]
    assert [p.seed for _, p in engine.requests] == [stream_seed(3, 11, a), stream_seed(3, 12, b), stream_seed(3, 11, a)]
    assert all(p.n == 3 and p.max_tokens == 4 and p.stop == ["\n"] for _, p in engine.requests)
    other_key = sampler.sample([a], k=3, keys=[13])[0]
    assert [c.action for c in other_key] != [c.action for c in alone]
    c = alone[0]
    assert c.action.startswith("go ") and c.token_logprobs == pytest.approx((math.log(0.5), math.log(0.25)))
    assert c.logprob == pytest.approx(math.log(0.125))
    assert c.token_entropies[0] == pytest.approx(math.log(2))  # two tokens at 0.5, no tail mass
    with pytest.raises(ValueError, match="keys"):
        sampler.sample([a, b], k=2, keys=[1])


def test_memo_over_vllm_asks_the_engine_once_per_decision():
    engine = SeededEngine()
    memo = MemoSampler(VLLMSampler("slm", seed=0, llm=engine, params_cls=Params))
    first = memo.sample(["p1", "p2"], 2, keys=[1, 2])
    again = memo.sample(["p2", "p1", "p3"], 2, keys=[2, 1, 3])
    assert [r[0] for r in engine.requests] == ["p1", "p2", "p3"]
    assert [c.action for c in again[1]] == [c.action for c in first[0]]
