"""RL-ready step shards: an acting SLM's prompt/completion token ids and log-probs (opt-in), loadable by datasets."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("datasets")

import r2v_envs  # noqa: E402,F401
from r2v_agents.runner import RunConfig, run  # noqa: E402
from r2v_agents.samplers.transformers_sampler import TransformersSampler  # noqa: E402
from r2v_agents.shards import load_rows, shard_files  # noqa: E402
from r2v_agents.slm import SLMPolicy  # noqa: E402
from r2v_agents.tiny import build_tiny_model  # noqa: E402
from tests.support.tiny_models import scripted_corpus_and_tokenizer  # noqa: E402

TASKS = ("scripted-0", "scripted-1")


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    _, tok = scripted_corpus_and_tokenizer()
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128)
    return tok, model


def rollout(tmp_path, tiny, name: str, record: bool):
    tok, model = tiny
    slm = SLMPolicy(TransformersSampler(model, tok, max_new_tokens=6, seed=0), k=2, admissible="snap",
                    record_tokens=record)
    out = tmp_path / name
    run(slm, RunConfig("R2V/Scripted-v0", str(out), task_ids=TASKS, seeds=(0,), max_steps=3, progress=False,
                       env_kwargs={"perturbations": "composite"}))
    return out


def test_token_columns_replay_under_teacher_forcing(tmp_path, tiny):
    tok, model = tiny
    out = rollout(tmp_path, tiny, "rl", record=True)
    # the README's recipe: plain datasets on the shard files, no r2v code needed
    ds = datasets.load_dataset("parquet", data_files=[str(p) for p in shard_files(out, "steps")], split="train")
    assert len(ds) == len(load_rows(out, "steps")) > 2
    for row in ds:
        prompt, completion, logps = row["prompt_ids"], row["completion_ids"], row["completion_logprobs"]
        assert prompt and completion and len(completion) == len(logps)
        assert tok.decode(prompt).endswith("Action:") and row["goal"] in tok.decode(prompt)
        chosen = [c for c in row["candidates"] if c["token_logprobs"] == pytest.approx(logps)]
        assert chosen, "the recorded completion is one of the sampled candidates"
        with torch.no_grad():  # the recorded log-probs are the model's own, token by token
            logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1:-1]
        ref = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
        assert logps == pytest.approx(ref.tolist(), abs=1e-4)


def test_off_by_default_and_same_rollout(tmp_path, tiny):
    on, off = rollout(tmp_path, tiny, "on", record=True), rollout(tmp_path, tiny, "off", record=False)
    rows_on, rows_off = load_rows(on, "steps"), load_rows(off, "steps")
    assert all(r["prompt_ids"] is None and r["completion_logprobs"] is None for r in rows_off)
    strip = ("prompt_ids", "completion_ids", "completion_logprobs")
    # recording changes nothing else: same actions, candidates and features, step for step
    assert [{k: v for k, v in r.items() if k not in strip} for r in rows_on] == \
        [{k: v for k, v in r.items() if k not in strip} for r in rows_off]


def test_sampler_without_ids_is_a_clear_error(tiny):
    from r2v_agents.context import Context
    from r2v_agents.policy import Candidate

    class NoIds:
        def sample(self, prompts, k):
            return [[Candidate("look", -0.5)] for _ in prompts]

    slm = SLMPolicy(NoIds(), k=1, record_tokens=True)
    with pytest.raises(ValueError, match="record_tokens needs token ids"):
        slm.act_batch([Context.start("g", "o", {})], [{}])
