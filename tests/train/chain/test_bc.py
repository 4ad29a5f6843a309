"""BC stage (r2v_train/chain/bc.py): TRL SFT on prompt/completion rows of a tiny local model."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.slow  # end to end: BC training runs

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from r2v_agents.tiny import EOS, build_tiny_model  # noqa: E402
from r2v_train.chain.bc import BCConfig, bc_dataset, train_bc
from r2v_train.chain.saving import DONE_FILE  # noqa: E402
from tests.support.tiny_models import scripted_corpus_and_tokenizer


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    texts, tok = scripted_corpus_and_tokenizer()
    rows = []
    for text in texts:  # "<prompt>\nAction: <action><EOS>" -> prompt ending in "Action:", completion " <action>"
        prompt, action = text[: -len(EOS)].rsplit("\nAction:", 1)
        rows.append({"prompt": prompt + "\nAction:", "completion": action})
    return tok, rows


def small_model(tok):
    return build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128)


@pytest.mark.parametrize("lora_r", [0, 4])
def test_bc_trains_logs_and_reloads(tiny, tmp_path, lora_r):
    from transformers import AutoModelForCausalLM

    tok, rows = tiny
    model = small_model(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = BCConfig(max_steps=6, learning_rate=5e-3, batch_size=4,
                   logging_steps=2, save_steps=3, lora_r=lora_r)
    out = train_bc(model, tok, rows, cfg, str(tmp_path))
    info = json.loads(open(os.path.join(out, DONE_FILE)).read())
    losses = [h["loss"] for h in info["log_history"] if "loss" in h]
    assert info["global_step"] == 6 and len(losses) == 3 and losses[-1] < losses[0]
    reloaded = AutoModelForCausalLM.from_pretrained(out)
    changed = sum(float((p - before[n]).abs().sum()) for n, p in reloaded.named_parameters() if n in before)
    assert changed > 0  # the saved weights are the trained (for LoRA: merged) ones
    assert not any(k.startswith("base_model") or "lora" in k for k in reloaded.state_dict())
    # the completion is what gets learnt: the expert action's log-prob rose
    ids = tok(rows[0]["prompt"] + rows[0]["completion"] + EOS, return_tensors="pt")["input_ids"]
    n_prompt = len(tok(rows[0]["prompt"])["input_ids"])

    def action_logp(m):
        with torch.no_grad():
            logp = torch.log_softmax(m(ids).logits[0, :-1], -1).gather(1, ids[0, 1:, None])[:, 0]
        return float(logp[n_prompt - 1:].sum())

    assert action_logp(reloaded) > action_logp(small_model(tok))
    # a finished stage is reused; an unfinished one resumes from its newest checkpoint
    assert train_bc(small_model(tok), tok, rows, cfg, str(tmp_path)) == out
    import shutil

    shutil.rmtree(out)  # as if stopped after the step-3 checkpoint
    shutil.rmtree(tmp_path / "checkpoints" / "checkpoint-6")
    assert train_bc(small_model(tok), tok, rows, cfg, str(tmp_path)) == out
    assert json.loads(open(os.path.join(out, DONE_FILE)).read())["global_step"] == 6


def test_bc_data_is_checked(tiny):
    with pytest.raises(ValueError, match="missing"):
        bc_dataset([{"prompt": "x"}])
    with pytest.raises(ValueError, match="empty completion"):
        bc_dataset([{"prompt": "Action:", "completion": "  "}])
    with pytest.warns(UserWarning, match="tokens merge at the boundary"):
        bc_dataset([{"prompt": "Action: ", "completion": "go"}])
    with pytest.raises(ValueError, match="epochs > 0 or max_steps"):
        BCConfig(epochs=0)
