"""The shipped paper-scale presets stay loadable, and name parts the chain can build (they are not run here)."""

from __future__ import annotations

import glob

import pytest

from r2v_agents.verifiers import VERIFIERS, verifier_for
from r2v_envs.errors import UnknownChoiceError
from r2v_train.chain.collect import RouterDataConfig, TeacherConfig, make_sampler, make_teacher
from r2v_train.config import load_config

PRESETS = sorted(glob.glob("r2v_train/configs/paper/*.yaml"))


def test_all_four_backbones_and_three_benchmarks_are_shipped():
    configs = [load_config(p) for p in PRESETS]
    assert {c.chain.env.env_id for c in configs} == {"R2V/ALFWorld-v0", "R2V/HumanEval-v0", "R2V/TerminalBench-v0"}
    models = " ".join(c.chain.bc.base_model for c in configs)
    for backbone in ("Qwen2.5-7B", "Llama-3.1-8B", "gemma-2-9b", "Qwen2.5-14B"):
        assert backbone in models


@pytest.mark.parametrize("path", PRESETS)
def test_preset_parts_exist(path, monkeypatch):
    cfg = load_config(path)
    assert verifier_for(cfg.chain.env.env_id) is not None
    assert cfg.chain.router_data.sampler in ("transformers", "vllm", "openai")
    monkeypatch.setenv(cfg.chain.teacher.api_key_env, "sk-test")  # no request is sent
    teacher = make_teacher(cfg.chain.teacher)
    assert type(teacher).__name__ == "OpenAITeacher"


def test_unknown_parts_are_clear_errors():
    with pytest.raises(UnknownChoiceError, match="did you mean 'openai'"):
        make_teacher(TeacherConfig(teacher="opnai"))
    with pytest.raises(ValueError, match="teacher.model"):
        make_teacher(TeacherConfig(teacher="openai"))
    with pytest.raises(UnknownChoiceError):
        make_sampler("/nowhere", RouterDataConfig(sampler="tgi"))
    with pytest.raises(ValueError, match="sampler_base_url"):
        make_sampler("/nowhere", RouterDataConfig(sampler="openai"))
    with pytest.raises(UnknownChoiceError):
        verifier_for("R2V/WebShop-v0")
    assert set(VERIFIERS) >= {"textworld", "alfworld", "humaneval", "terminalbench"}


# The paper presets' BC / DPO effective batch sizes (sequences or pairs per optimiser update on one device); where
# a full-length batch does not fit one 80 GB GPU the preset reaches it through gradient accumulation.
EFFECTIVE_BATCH = {"alfworld-qwen2.5-7b": (16, 16), "alfworld-qwen2.5-14b": (16, 16),
                   "humaneval-llama3.1-8b": (8, 8), "terminalbench-gemma2-9b": (8, 8)}


@pytest.mark.parametrize("path", PRESETS)
def test_presets_keep_the_effective_batch_and_accumulate_where_a_batch_does_not_fit(path):
    cfg = load_config(path)
    name = path.rsplit("/", 1)[-1].removesuffix(".yaml")
    assert (cfg.chain.bc.effective_batch_size, cfg.chain.dpo.effective_batch_size) == EFFECTIVE_BATCH[name]
    assert cfg.chain.bc.batch_size <= 4 and cfg.chain.dpo.batch_size <= 2  # per device, at max_length >= 4096
    assert cfg.chain.bc.gradient_checkpointing is None and cfg.chain.dpo.gradient_checkpointing is None  # by size
