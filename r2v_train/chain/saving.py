"""Where the policy stages keep their models: a checkpoint folder to resume from and a ``model/`` moved into place.

A finished ``model/`` holds the model, its tokenizer and ``bc_done.json`` (what trained it, its loss and log
history); the stages skip a model that has it. Shared by BC, DPO + consistency and their accelerate entry points.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, fields
from typing import Any

from r2v_envs.fileio import jsonable

MODEL_DIR, CHECKPOINT_DIR, DONE_FILE = "model", "checkpoints", "bc_done.json"
CHECKPOINTING_MIN_PARAMS = 100_000_000
"""models this large recompute activations in backward (gradient checkpointing) unless a config says otherwise:
SmolLM2-135M DPO on HumanEval+ pairs (~650 tokens, batch 1) peaks at 14.6 GB on CPU without it, more than a
24 GB machine can spare next to the envs; a 7B LoRA BC step at batch 8 peaked at 64.9 GB on an H100 without it and
at 21.5 GB at batch 16 with it. The tiny CPU models keep the faster path."""


def use_checkpointing(flag: bool | None, model: Any) -> bool:
    """``flag`` if set, else on for models of at least :data:`CHECKPOINTING_MIN_PARAMS` parameters."""
    if flag is not None:
        return flag
    return model.num_parameters() >= CHECKPOINTING_MIN_PARAMS


def stage_identity(cfg: Any, key_fields: Sequence[str]) -> dict[str, Any]:
    """A policy stage config's part of the chain's stage key: ``key_fields`` always, any other field only when it
    is set away from its default (fields added later keep the keys of finished runs)."""
    defaults = {f.name: f.default_factory() if f.default is MISSING else f.default for f in fields(cfg)}
    return {k: v for k, v in asdict(cfg).items() if k in key_fields or v != defaults[k]}


def lora_config(r: int, alpha: int = 16, dropout: float = 0.05, targets: Sequence[str] | str = "all-linear") -> Any:
    """peft's ``LoraConfig`` for a causal LM, or None for ``r == 0`` (all weights train)."""
    if r == 0:
        return None
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout,
                      target_modules=targets if isinstance(targets, str) else list(targets), task_type="CAUSAL_LM")


def is_done(model_dir: str) -> bool:
    return os.path.exists(os.path.join(model_dir, DONE_FILE))


def done_info(model_dir: str) -> dict[str, Any]:
    with open(os.path.join(model_dir, DONE_FILE)) as fh:
        return json.load(fh)


def has_checkpoint(directory: str) -> bool:
    return os.path.isdir(directory) and any(d.startswith("checkpoint-") for d in os.listdir(directory))


def save_trained(trainer: Any, model: Any, tokenizer: Any, final: str, info: Mapping[str, Any]) -> None:
    """Save a trained model once per job under ``accelerate launch``: every rank joins the ZeRO-3 gather of
    the partitioned weights (a collective), only rank 0 writes, and all ranks wait for it (a single process
    just saves)."""
    state_dict = None
    if getattr(trainer, "is_deepspeed_enabled", False):
        plugin = trainer.accelerator.state.deepspeed_plugin
        if plugin is not None and plugin.zero_stage == 3:
            state_dict = trainer.accelerator.get_state_dict(trainer.deepspeed)
    if trainer.is_world_process_zero():
        save_model_atomically(model, tokenizer, final, info, state_dict=state_dict)
    trainer.accelerator.wait_for_everyone()


def save_model_atomically(model: Any, tokenizer: Any, final: str, info: Mapping[str, Any],
                          state_dict: Mapping[str, Any] | None = None) -> None:
    """``save_pretrained`` into a temp dir beside ``final``, write ``bc_done.json``-style info, then rename."""
    parent = os.path.dirname(os.path.abspath(final))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=".tmp-model-")
    try:
        model.save_pretrained(tmp, **({} if state_dict is None else {"state_dict": state_dict}))
        tokenizer.save_pretrained(tmp)
        with open(os.path.join(tmp, DONE_FILE), "w") as f:
            json.dump(jsonable(dict(info)), f, indent=1)
        if os.path.exists(final):
            shutil.rmtree(final)  # an incomplete earlier model (no done file)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def cuda_available() -> bool:
    """Whether training goes to CUDA: torch sees a GPU and ``accelerate launch --cpu`` did not ask for the CPU (the
    launcher says so in ``ACCELERATE_USE_CPU``; the Trainer then trains on the CPU, which must not get GPU bf16)."""
    import torch

    forced_cpu = os.environ.get("ACCELERATE_USE_CPU", "").strip().lower() in ("1", "true", "yes", "y", "t", "on")
    return torch.cuda.is_available() and not forced_cpu


def bf16_default(flag: bool | None) -> bool:
    """``flag`` if set, else bf16 only where training goes to a CUDA device that supports it (TRL's default True
    fails on CPU)."""
    if flag is not None:
        return flag
    import torch

    return cuda_available() and torch.cuda.is_bf16_supported()
