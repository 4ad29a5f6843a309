"""The transformers sampler on a tiny locally built model: token statistics match a teacher-forced pass."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from r2v_agents.context import Context  # noqa: E402
from r2v_agents.prompts import build_prompt, format_completion  # noqa: E402
from r2v_agents.samplers import Sampler  # noqa: E402
from r2v_agents.samplers.transformers_sampler import TransformersSampler  # noqa: E402
from r2v_agents.slm import SLMPolicy  # noqa: E402
from r2v_agents.tiny import EOS, build_tiny_model  # noqa: E402
from r2v_agents.verifiers.textworld import TextWorldVerifier  # noqa: E402
from tests.support.tiny_models import scripted_corpus_and_tokenizer


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    texts, tok = scripted_corpus_and_tokenizer()
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128)
    return tok, model, texts


def test_env_corpus_renders_prompt_and_completion(tiny):
    _, _, texts = tiny
    assert texts and all(t.endswith(EOS) and "\nAction: " in t for t in texts)
    assert any(t.endswith(format_completion("take coin") + EOS) for t in texts)


def test_token_stats_match_a_teacher_forced_forward_pass(tiny):
    tok, model, _ = tiny
    sampler = TransformersSampler(model, tok, max_new_tokens=6, seed=1)
    assert isinstance(sampler, Sampler)
    prompts = ["Goal: take coin\nObservation:\nA room.\nAction:", "Goal: x\nAction:"]
    out = sampler.sample(prompts, k=4)
    assert [len(c) for c in out] == [4, 4]
    stopped = 0
    for prompt, cands in zip(prompts, out):
        for c in cands:
            n = len(c.token_logprobs)
            assert 1 <= n <= 6 and len(c.token_entropies) == n
            assert c.logprob == pytest.approx(sum(c.token_logprobs))
            assert all(0 <= e <= math.log(len(tok)) + 1e-4 for e in c.token_entropies)
            assert "\n" not in c.action
    again = sampler.sample(prompts, k=4)  # seeded: the same batch gives the same samples
    assert [[x.token_logprobs for x in cs] for cs in again] == [[x.token_logprobs for x in cs] for cs in out]
    stopped = [x for cs in out for x in cs if len(x.token_ids) < 6]
    assert all(x.token_ids[-1] in sampler.stop_ids() for x in stopped)  # cut at EOS/newline, padding masked
    for prompt, cands in zip(prompts, out):  # replay each candidate's sampled ids under teacher forcing
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        for c in cands:
            seq = torch.tensor([ids + list(c.token_ids)])
            with torch.no_grad():
                logp = torch.log_softmax(model(seq).logits[0, len(ids) - 1:-1].float(), -1)
            ref = logp.gather(-1, torch.tensor(c.token_ids)[:, None])[:, 0]
            ent = -(logp.exp() * logp).sum(-1)
            assert list(c.token_logprobs) == pytest.approx(ref.tolist(), abs=1e-4)
            assert list(c.token_entropies) == pytest.approx(ent.tolist(), abs=1e-4)


def test_slm_policy_on_the_tiny_model(tiny):
    tok, model, _ = tiny
    slm = SLMPolicy(TransformersSampler(model, tok, max_new_tokens=5, seed=0), TextWorldVerifier(), k=3)
    ctx = Context.start("Find the coin.", "-= Room 0 =-", {"admissible_actions": ["go east", "look"]}, max_steps=10)
    d = slm.act_batch([ctx, ctx], [{}, {}])
    assert len(d) == 2 and all(len(x.candidates) == 3 and len(x.features) == 15 for x in d)
    assert all(x.source == "slm" and isinstance(x.action, str) and x.action for x in d)
    assert build_prompt(ctx).endswith("Action:")


def test_seeded_samples_do_not_depend_on_the_batch(tiny):
    """Each prompt draws from its own stream (seed, key, text): alone, first or second in a batch, or in a
    different batch size, it gets the same candidates; another key gives other draws."""
    tok, model, _ = tiny
    a, b = "Goal: take coin\nObservation:\nA room.\nAction:", "Goal: x\nAction:"
    ids = lambda cands: [c.token_ids for c in cands]  # noqa: E731
    alone = TransformersSampler(model, tok, max_new_tokens=6, seed=2).sample([a], k=4)[0]
    batched = TransformersSampler(model, tok, max_new_tokens=6, seed=2, batch_size=1).sample([b, a], k=4)[1]
    second = TransformersSampler(model, tok, max_new_tokens=6, seed=2).sample([b, a], k=4)[1]
    assert ids(alone) == ids(batched) == ids(second)
    keyed = TransformersSampler(model, tok, max_new_tokens=6, seed=2)
    assert ids(keyed.sample([a], k=4, keys=[5])[0]) == ids(keyed.sample([b, a], k=4, keys=[1, 5])[1])
    draws = {tuple(ids(keyed.sample([a], k=4, keys=[key])[0])) for key in range(6)}
    assert len(draws) > 1
    with pytest.raises(ValueError, match="keys"):
        keyed.sample([a, b], k=2, keys=[1])


def test_slm_rollouts_do_not_depend_on_the_worker_layout(tiny, tmp_path):
    """The SLM passes a decision key per context, so its episodes are the same whether the runner steps the envs
    in-process one at a time or batches whichever of two workers' envs are ready."""
    from r2v_agents.runner import RunConfig, run
    from r2v_agents.shards import load_rows

    tok, model, _ = tiny

    def rollouts(out, **kw):
        slm = SLMPolicy(TransformersSampler(model, tok, max_new_tokens=5, seed=0), TextWorldVerifier(), k=3)
        run(slm, RunConfig("R2V/Scripted-v0", str(out), task_ids=("scripted-0", "scripted-1", "scripted-2"),
                           seeds=(0, 1), max_steps=5, progress=False, **kw))
        return [(s["episode_id"], s["t"], s["action"], [c["action"] for c in s["candidates"]])
                for s in load_rows(out, "steps", columns=["episode_id", "t", "action", "candidates"])]

    inproc = rollouts(tmp_path / "a")
    assert len(inproc) > 6 and inproc == rollouts(tmp_path / "b", workers=2, envs_per_worker=3)


def test_memo_sampler_returns_what_the_sampler_draws_and_samples_each_decision_once(tiny, tmp_path):
    """Two methods over the same episodes through one memo: the second asks only for decisions the first did not
    (hits), every answer equals a fresh sampler's, and callers get copies they may score."""
    from r2v_agents.runner import RunConfig, run
    from r2v_agents.samplers.memo import MemoSampler
    from r2v_agents.shards import load_rows

    tok, model, _ = tiny
    memo = MemoSampler(TransformersSampler(model, tok, max_new_tokens=5, seed=0))
    drawn = []

    def rollouts(sampler, out):
        run(SLMPolicy(sampler, TextWorldVerifier(), k=3),
            RunConfig("R2V/Scripted-v0", str(out), task_ids=("scripted-0", "scripted-1"), seeds=(0,),
                      max_steps=5, progress=False))
        return [(s["episode_id"], s["t"], [(c["action"], c["token_logprobs"], c["verifier_score"])
                                            for c in s["candidates"]])
                for s in load_rows(out, "steps", columns=["episode_id", "t", "candidates"])]

    first = rollouts(memo, tmp_path / "a")
    drawn.append(memo.misses)
    second = rollouts(memo, tmp_path / "b")
    fresh = rollouts(TransformersSampler(model, tok, max_new_tokens=5, seed=0), tmp_path / "c")
    assert first == second == fresh and len(first) > 2
    assert memo.misses == drawn[0] == len(first) and memo.hits == len(first)
    prompts, keys = ["Goal: x\nAction:"], [7]
    a, b = memo.sample(prompts, 2, keys=keys), memo.sample(prompts, 2, keys=keys)
    a[0][0].verifier_score = 0.9
    assert b[0][0].verifier_score is None and a[0][0].token_ids == b[0][0].token_ids
    assert memo.sample(prompts, 3, keys=keys)[0] != a[0]  # k is part of the decision
    unkeyed_before = memo.misses
    memo.sample(prompts, 2)
    assert memo.misses == unkeyed_before  # without keys: passed through, never memoised


class _Scripted(torch.nn.Module):
    """The tiny model with its logits pushed towards a fixed continuation: the i-th generated token is
    ``script[i]`` (whatever the prompt), so the stop rules are tested on known text."""

    def __init__(self, model, script):
        super().__init__()
        self.model, self.script, self.generation_config = model, script, model.generation_config

    def forward(self, input_ids=None, past_key_values=None, **kw):
        if past_key_values is None:
            self._prompt_len = input_ids.shape[1]
        step = 0 if past_key_values is None else past_key_values.get_seq_length() - self._prompt_len + 1
        out = self.model(input_ids=input_ids, past_key_values=past_key_values, **kw)
        out.logits[:, -1, self.script[min(step, len(self.script) - 1)]] += 1e4
        return out


def test_block_style_keeps_lines_and_stops_at_the_closing_fence(tiny):
    """R2V/HumanEval-v0 actions span lines: style="block" keeps them whole and ends at the closing fence (the
    text after it is never generated); the default line style still cuts at the first newline."""
    tok, model, _ = tiny
    action = "write_code\n```python\nreturn 1\n```"
    script = tok(action + "\nsubmit\nmore", add_special_tokens=False)["input_ids"]
    fence_end = len(tok(action, add_special_tokens=False)["input_ids"])
    scripted = _Scripted(model, script)
    block = TransformersSampler(scripted, tok, max_new_tokens=len(script), seed=0, style="block")
    cands = block.sample(["Goal: f\nAction:"], k=2)[0]
    assert [c.action for c in cands] == [action, action]
    assert all(len(c.token_ids) == fence_end == len(c.token_logprobs) for c in cands)
    line = TransformersSampler(scripted, tok, max_new_tokens=len(script), seed=0)
    assert [c.action for c in line.sample(["Goal: f\nAction:"], k=2)[0]] == ["write_code", "write_code"]
    with pytest.raises(ValueError, match="action style"):
        TransformersSampler(model, tok, style="paragraph")
