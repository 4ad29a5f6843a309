"""BC and DPO + consistency recompute activations for models of >= 100M parameters (and not for the tiny CPU
models), by one rule; a config can still force it either way."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from r2v_train.chain.bc import BCConfig  # noqa: E402
from r2v_train.chain.dpo import DPOConfig  # noqa: E402


class Sized:
    """Stands in for a model: the rule reads only its parameter count."""

    def __init__(self, n: int):
        self.n = n

    def num_parameters(self) -> int:
        return self.n


@pytest.mark.parametrize("n, on", [(3_400_000, False), (99_999_999, False), (100_000_000, True),
                                   (7_600_000_000, True)])
def test_bc_and_dpo_checkpoint_large_models_only(tmp_path, n, on):
    assert BCConfig(max_steps=1).to_sft_config(str(tmp_path), Sized(n)).gradient_checkpointing is on
    assert DPOConfig(max_steps=1).to_trainer_args(str(tmp_path), Sized(n)).gradient_checkpointing is on


def test_a_config_can_force_checkpointing_either_way(tmp_path):
    assert BCConfig(max_steps=1, gradient_checkpointing=True).to_sft_config(str(tmp_path), Sized(10)) \
        .gradient_checkpointing
    assert not DPOConfig(max_steps=1, gradient_checkpointing=False).to_trainer_args(str(tmp_path), Sized(10**10)) \
        .gradient_checkpointing


def test_the_stage_keys_of_finished_runs_hold():
    """The unified configs hash the same fields as before for the defaults; a new field joins only when set."""
    assert sorted(BCConfig().identity()) == sorted(BCConfig.STAGE_KEY_FIELDS)
    assert sorted(DPOConfig().identity()) == sorted(DPOConfig.STAGE_KEY_FIELDS)
    assert BCConfig(gradient_accumulation_steps=4).identity()["gradient_accumulation_steps"] == 4
    assert "gradient_checkpointing" in DPOConfig(gradient_checkpointing=True).identity()


def test_precision_and_device_follow_cuda(monkeypatch):
    """BC, DPO and the GRPO example take bf16 and the GPU where CUDA offers them, fp32 on the CPU otherwise."""
    import torch

    from r2v_train.chain.saving import bf16_default, cuda_available

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not cuda_available() and not bf16_default(None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert cuda_available() and bf16_default(None)
    assert not bf16_default(False)  # a config's explicit choice wins
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")  # `accelerate launch --cpu` on a GPU machine: the CPU path
    assert not cuda_available() and not bf16_default(None)
