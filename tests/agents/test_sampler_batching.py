"""A prompt's candidates from the transformers sampler do not depend on the batch it shares, on the CPU's draws
and on the accelerator's algorithm (run here on the CPU); the pieces of that algorithm, checked alone."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from r2v_agents.prompts import fence_closed
from r2v_agents.samplers.transformers_sampler import TransformersSampler, _advance_fences, _backtick_facts
from tests.support.tiny_models import scripted_corpus_and_tokenizer

SEED = 4
PIECES = ("`", "``", "```", "````", "a", "`a`", "x```y``", "", "```py\n", "b`", "\n", "def", " f", "()")


@pytest.fixture(scope="module")
def tiny():
    from r2v_agents.tiny import build_tiny_model

    torch.set_num_threads(1)
    texts, tok = scripted_corpus_and_tokenizer()
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128)
    prompts = list(dict.fromkeys(t[:t.rindex("Action:") + len("Action:")] for t in texts))[:8]
    assert len(prompts) == 8 and len({len(tok(p)["input_ids"]) for p in prompts}) == 3  # padding differs
    return tok, model, prompts


def _sampler(tiny, style, replay, **kw):
    tok, model, _ = tiny
    sampler = TransformersSampler(model, tok, max_new_tokens=8, seed=SEED, style=style, batch_size=8, **kw)
    sampler.replay_cpu_draws = replay
    return sampler


@pytest.mark.parametrize("replay", [True, False], ids=["cpu-draws", "accelerator-algorithm"])
@pytest.mark.parametrize("style", ["line", "block"])
def test_a_prompts_candidates_are_the_same_alone_or_in_a_batch_of_8(tiny, style, replay):
    """The draws (ids, text) are identical; the scores agree to float32 rounding, since a left-padded batch
    sums attention over a longer row than the prompt alone does."""
    prompts = tiny[2]
    sampler = _sampler(tiny, style, replay)
    batch = sampler.sample(prompts, k=5, keys=list(range(8)))
    reordered = sampler.sample(prompts[::-1], k=5, keys=list(range(8))[::-1])[::-1]
    for i, prompt in enumerate(prompts):
        alone = sampler.sample([prompt], k=5, keys=[i])[0]
        for mine in (batch[i], reordered[i]):
            assert [(c.action, c.token_ids, c.prompt_token_ids) for c in alone] == \
                   [(c.action, c.token_ids, c.prompt_token_ids) for c in mine]
            for a, b in zip(alone, mine):
                assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-5)
                assert a.token_entropies == pytest.approx(b.token_entropies, abs=1e-5)
    assert len({c.token_ids for cands in batch for c in cands}) > 8  # real draws, not one repeated sample


def test_the_accelerator_algorithm_scores_match_a_teacher_forced_pass(tiny):
    """Per-step reduction on the device gives the same per-token log-probs and entropies as scoring the
    sampled ids in one forward pass."""
    tok, model, prompts = tiny
    out = _sampler(tiny, "line", False).sample(prompts[:3], k=4)
    for prompt, cands in zip(prompts, out):
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        for c in cands:
            assert 1 <= len(c.token_ids) <= 8 and c.logprob == pytest.approx(sum(c.token_logprobs))
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([ids + list(c.token_ids)])).logits[0, len(ids) - 1:-1], -1)
            assert list(c.token_logprobs) == pytest.approx(
                logp.gather(-1, torch.tensor(c.token_ids)[:, None])[:, 0].tolist(), abs=1e-4)
            assert list(c.token_entropies) == pytest.approx((-(logp.exp() * logp).sum(-1)).tolist(), abs=1e-4)


@pytest.mark.parametrize("top_p, allowed", [(1.0, {0, 1, 2, 3}), (0.5, {2, 3})])
def test_inverse_cdf_draws_follow_the_nucleus_distribution(tiny, top_p, allowed):
    sampler = _sampler(tiny, "line", False, top_p=top_p)
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    n = 10_000
    uniforms = 1.0 - (torch.arange(n, dtype=torch.float64) + 0.5) / n  # an even grid over (0, 1]
    picks = sampler._pick(probs.log().expand(n, 4), uniforms)
    counts = torch.bincount(picks, minlength=4).double() / n
    kept = torch.tensor([float(i in allowed) for i in range(4)]) * probs
    assert set(picks.tolist()) == allowed
    assert counts.tolist() == pytest.approx((kept / kept.sum()).tolist(), abs=1e-3)


def test_fence_tables_count_fences_as_the_decoded_text_does():
    """Random concatenations of token texts: the table-driven count says closed exactly when
    ``fence_closed`` of the text says so, at every step."""
    tables = torch.tensor([_backtick_facts(p) for p in PIECES], dtype=torch.long).T
    rng = random.Random(SEED)
    rows = 64
    seqs = [[rng.randrange(len(PIECES)) for _ in range(8)] for _ in range(rows)]
    state = (torch.zeros(rows, dtype=torch.long),) * 2
    texts = [""] * rows
    for t in range(8):
        toks = torch.tensor([s[t] for s in seqs])
        live = torch.tensor([not fence_closed(x) for x in texts])
        state, closed = _advance_fences(tables, state, toks, live)
        texts = [x + PIECES[s[t]] if ok else x for x, s, ok in zip(texts, seqs, live.tolist())]
        assert closed[live].tolist() == [fence_closed(x) for x, ok in zip(texts, live.tolist()) if ok]
    assert 0 < sum(fence_closed(x) for x in texts) < rows
