"""One local-generation loop: the greedy teacher and the chat agent decode in TransformersSampler and give what
``model.generate`` gave them before (a tiny locally built model; greedy decoding, so the two loops must agree)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from r2v_agents.context import Context  # noqa: E402
from r2v_agents.grounding import reply_complete  # noqa: E402
from r2v_agents.prompts import build_prompt, parse_completion, render_prompt  # noqa: E402
from r2v_agents.samplers.transformers_sampler import TransformersSampler  # noqa: E402
from r2v_agents.teachers import HFTeacher  # noqa: E402
from r2v_agents.tiny import build_tiny_model  # noqa: E402
from r2v_envs.errors import UnknownChoiceError  # noqa: E402
from r2v_eval.model_agents import HFChatAgent  # noqa: E402
from tests.support.tiny_models import scripted_corpus_and_tokenizer

GOALS = ["take coin", "open the door", "go east then take the key", "find the blue box", "x", "eat the apple"]


@pytest.fixture(scope="module")
def tiny():
    """A tiny model fitted for a few steps on prompt/action texts, so that it answers in lines (a random one
    rarely writes a newline, and no stop rule would be exercised)."""
    torch.set_num_threads(1)
    texts, tok = scripted_corpus_and_tokenizer()
    torch.manual_seed(3)
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128)
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(40):
        opt.zero_grad()
        model(**batch, labels=labels).loss.backward()
        opt.step()
    return tok, model.eval()


def contexts() -> list[Context]:
    return [Context.start(goal, f"Room {i}. A door to the east.", {"admissible_actions": ["go east", "look"]})
            for i, goal in enumerate(GOALS)]


def greedy_generate(model, tok, texts: list[str], budget: int, stopping_criteria=None) -> list[list[int]]:
    """What the teacher and the chat agent ran before: Hugging Face ``generate``, greedy, left padding."""
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        gen = model.generate(**enc, do_sample=False, max_new_tokens=budget, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id, stopping_criteria=stopping_criteria)
    rows = gen[:, enc["input_ids"].shape[1]:].tolist()
    return [row[:row.index(tok.eos_token_id)] if tok.eos_token_id in row else row for row in rows]


class ReplyStop:  # the chat agent's former stopping criterion, kept here as the reference
    def __init__(self, tok, prompt_len: int):
        self.tok, self.prompt_len = tok, prompt_len

    def __call__(self, input_ids, scores, **kwargs):
        texts = self.tok.batch_decode(input_ids[:, self.prompt_len:], skip_special_tokens=True)
        return torch.tensor([reply_complete(t) for t in texts], dtype=torch.bool)


def test_greedy_teacher_reads_what_a_reply_generated_to_eos_says(tiny):
    tok, model = tiny
    teacher = HFTeacher(model, tok, max_new_tokens=20, batch_size=4)
    ctxs = contexts()
    texts = [render_prompt(build_prompt(c), tok) for c in ctxs]
    before = [parse_completion(tok.decode(ids, skip_special_tokens=True)) or None
              for ids in greedy_generate(model, tok, texts, 20)]
    got = teacher.query_batch(ctxs)
    assert [d and d.action for d in got] == before
    assert any(before), "the tiny model should answer some prompts with a line"
    # it pays for the answer line only: fewer tokens than generating on to EOS or the budget
    assert teacher.stats.completion_tokens < sum(len(ids) for ids in greedy_generate(model, tok, texts, 20))


def test_chat_agent_replies_match_generate_with_its_former_stopping_rule(tiny):
    tok, model = tiny
    agent = HFChatAgent(model, tok, max_new_tokens=20, batch_size=8)
    ctxs = contexts()
    texts = [agent.render(c) for c in ctxs]
    width = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)["input_ids"].shape[1]
    before = greedy_generate(model, tok, texts, 20, [ReplyStop(tok, width)])
    decisions = agent.act_batch(ctxs, [{}] * len(ctxs))
    assert [d.meta["reply"] for d in decisions] == [tok.decode(ids, skip_special_tokens=True) for ids in before]
    assert [d.meta["completion_tokens"] for d in decisions] == [len(ids) for ids in before]
    assert any(len(ids) < 20 for ids in before), "some reply should stop at its answer line"


def test_reply_rule_ends_a_candidate_at_its_first_complete_answer_line(tiny):
    tok, model = tiny
    sampler = TransformersSampler(model, tok, max_new_tokens=24, temperature=1.0, seed=0, stop="reply")
    cands = [c for cs in sampler.sample([build_prompt(c) for c in contexts()], k=4) for c in cs]
    stopped = [c for c in cands if len(c.token_ids) < 24 and c.token_ids[-1] != tok.eos_token_id]
    assert stopped
    for c in stopped:  # complete with its last token, not one token earlier
        assert reply_complete(c.text)
        assert not reply_complete(tok.decode(list(c.token_ids[:-1]), skip_special_tokens=True))
    newline = TransformersSampler(model, tok, max_new_tokens=24, temperature=1.0, seed=0)  # the SLM's rule
    again = [c for cs in newline.sample([build_prompt(c) for c in contexts()], k=4, stop="reply") for c in cs]
    assert [c.token_ids for c in again] == [c.token_ids for c in cands]  # a per-call rule is the same rule
    with pytest.raises(UnknownChoiceError):
        newline.sample(["Goal: x\nAction:"], k=1, stop="paragraph")


def test_token_id_continuations_score_at_the_sampling_temperature_as_trl_does(tiny):
    tok, model = tiny
    seqs = [tok(build_prompt(c), add_special_tokens=False)["input_ids"] for c in contexts()[:3]]
    seqs[1] = seqs[1][5:]  # sequences of different lengths share a left-padded batch
    sampler = TransformersSampler(model, tok, max_new_tokens=8, temperature=0.7, score="tempered")
    torch.manual_seed(0)
    for seq, cand in zip(seqs, sampler.sample_ids(seqs)):
        assert cand.prompt_token_ids == tuple(seq) and 1 <= len(cand.token_ids) <= 8
        assert cand.token_ids[-1] in sampler.stop_ids() or len(cand.token_ids) == 8
        with torch.no_grad():  # teacher-forced: log softmax(logits / T) of each sampled token
            logits = model(torch.tensor([seq + list(cand.token_ids)])).logits[0, len(seq) - 1:-1].float()
        ref = torch.log_softmax(logits / 0.7, -1).gather(-1, torch.tensor(cand.token_ids)[:, None])[:, 0]
        assert cand.token_logprobs == pytest.approx(ref.tolist(), abs=1e-4)
    with pytest.raises(UnknownChoiceError):
        TransformersSampler(model, tok, score="sharpened")
