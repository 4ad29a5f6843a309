"""hf: agents run on CUDA in bf16 when torch sees a GPU, and on the CPU exactly as before otherwise."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from r2v_agents.backbones import inference_placement
from r2v_eval import agents, model_agents


class _Model:
    def __init__(self):
        self.moved_to = []

    def to(self, device):
        self.moved_to.append(device)
        return self

    def eval(self):
        return self


class _Tokenizer:
    pad_token, eos_token, padding_side = "<pad>", "<pad>", "right"


def _gpu(monkeypatch, present: bool, bf16: bool = True) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: present)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)


@pytest.mark.parametrize("present, bf16, expected", [
    (True, True, ("cuda", torch.bfloat16)),
    (True, False, ("cuda", None)),
    (False, True, ("cpu", None)),
])
def test_the_choice_follows_torch_cuda_is_available(monkeypatch, present, bf16, expected):
    _gpu(monkeypatch, present, bf16)
    assert inference_placement() == expected
    assert inference_placement("cpu") == ("cpu", None)  # an explicit device wins
    assert inference_placement("cuda:1") == ("cuda:1", torch.bfloat16 if bf16 else None)


@pytest.mark.parametrize("present", [True, False])
def test_hf_agent_loads_where_the_choice_says(monkeypatch, tmp_path, present):
    _gpu(monkeypatch, present)
    loaded = []

    def fake_load(path, dtype=None):
        loaded.append((path, dtype))
        return _Model(), _Tokenizer()

    monkeypatch.setattr(model_agents, "load_backbone", fake_load)
    agent, name = agents.build_agent(f"hf:{tmp_path}")
    assert name == f"hf:{tmp_path.name}" and isinstance(agent, model_agents.HFChatAgent)
    if present:
        assert loaded == [(str(tmp_path), torch.bfloat16)] and agent.model.moved_to == ["cuda"]
    else:  # the CPU path as before: the checkpoint's dtype, the model left where it loaded
        assert loaded == [(str(tmp_path), None)] and agent.model.moved_to == []
    cpu, _ = agents.build_agent(f"hf:{tmp_path}", agents.AgentOptions(device="cpu"))
    assert loaded[-1] == (str(tmp_path), None) and cpu.model.moved_to == []
