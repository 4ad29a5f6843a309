"""Stage 4 of Algorithm 1: behavioural cloning (Eq. 3) of the SLM on prompt/completion pairs with TRL's SFTTrainer.

Rows are ``{"prompt": build_prompt(ctx), "completion": format_completion(action)}`` from
``r2v_agents.prompts`` (the prompt ends with ``"Action:"``, the completion is the action with a leading space: a
token boundary, since SFT tokenises prompt and prompt+completion apart and keeps their common prefix); SFT appends
EOS itself and trains on completion tokens only, i.e. -log pi(a*|x). Optional LoRA (peft) adapters are merged into
the saved model, so later stages (candidate sampling, DPO with the BC model as frozen reference) load one plain
model directory.

Outputs in ``output_dir``: ``checkpoints/`` (the Trainer's, for resuming) and ``model/`` (final model and
tokenizer, moved into place atomically; a finished ``model/`` is reused, not retrained).

Example (not run here: it trains; see tests/test_bc.py):
    >>> cfg = BCConfig(output_dir="runs/bc", epochs=3, learning_rate=5e-4)  # doctest: +SKIP
    >>> model_dir = train_bc(model, tokenizer, rows, cfg)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from r2v_envs.fileio import jsonable

MODEL_DIR, CHECKPOINT_DIR, DONE_FILE = "model", "checkpoints", "bc_done.json"


@dataclass
class BCConfig:
    """BC hyper-parameters; ``to_sft_config`` turns them into TRL's ``SFTConfig`` with CPU-safe defaults."""

    output_dir: str = field(metadata={"help": "stage directory (checkpoints/ and model/ go inside)"})
    epochs: float = field(default=1.0, metadata={"help": "passes over the BC data"})
    max_steps: int = field(default=-1, metadata={"help": "stop after this many optimiser steps (-1: by epochs)"})
    learning_rate: float = field(default=2e-5, metadata={
        "help": "AdamW learning rate (2e-5 suits pretrained SLMs; tiny models trained from scratch want ~5e-4)"})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "sequences per device per step"})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "steps accumulated per update"})
    max_length: int | None = field(default=1024, metadata={
        "help": "token budget per sequence; trim prompts beforehand (TRL's truncation keeps the start)"})
    lora_r: int = field(default=0, metadata={"help": "LoRA rank; 0 trains all weights"})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling alpha"})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout"})
    lora_target_modules: Sequence[str] | str = field(default="all-linear", metadata={
        "help": "modules that get LoRA adapters"})
    bf16: bool | None = field(default=None, metadata={
        "help": "bf16 mixed precision; None: on only where CUDA supports bf16 (TRL's default True fails on CPU)"})
    logging_steps: int = field(default=10, metadata={"help": "log every this many steps"})
    save_steps: int = field(default=500, metadata={"help": "checkpoint every this many steps (for resuming)"})
    seed: int = field(default=0, metadata={"help": "training seed"})
    sft_overrides: Mapping[str, Any] = field(default_factory=dict, metadata={
        "help": "any other SFTConfig fields, passed through unchanged"})

    def __post_init__(self) -> None:
        if self.epochs <= 0 and self.max_steps <= 0:
            raise ValueError("BC needs epochs > 0 or max_steps > 0")
        if self.lora_r < 0:
            raise ValueError(f"lora_r must be >= 0; got {self.lora_r}")

    def to_sft_config(self) -> Any:
        from trl import SFTConfig

        kwargs: dict[str, Any] = dict(
            output_dir=os.path.join(self.output_dir, CHECKPOINT_DIR), num_train_epochs=self.epochs,
            max_steps=self.max_steps, learning_rate=self.learning_rate,
            per_device_train_batch_size=self.per_device_train_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps, max_length=self.max_length,
            bf16=_bf16(self.bf16), gradient_checkpointing=False,  # TRL defaults both on; bf16 fails on CPU
            logging_steps=self.logging_steps, save_steps=self.save_steps, save_total_limit=2, seed=self.seed,
            report_to="none", completion_only_loss=True, use_cpu=not _cuda())
        kwargs.update(self.sft_overrides)
        return SFTConfig(**kwargs)

    def peft_config(self) -> Any:
        if self.lora_r == 0:
            return None
        from peft import LoraConfig

        targets = self.lora_target_modules
        return LoraConfig(r=self.lora_r, lora_alpha=self.lora_alpha, lora_dropout=self.lora_dropout,
                          target_modules=targets if isinstance(targets, str) else list(targets),
                          task_type="CAUSAL_LM")


def bc_dataset(rows: Any) -> Any:
    """A ``datasets.Dataset`` of prompt/completion rows, checked; accepts a Dataset or a list of dicts."""
    from datasets import Dataset

    ds = rows if isinstance(rows, Dataset) else Dataset.from_list(list(rows))
    missing = {"prompt", "completion"} - set(ds.column_names)
    if missing:
        raise ValueError(f"BC data needs prompt and completion columns; missing {sorted(missing)}")
    if len(ds) == 0:
        raise ValueError("BC data is empty")
    bad = [i for i, r in enumerate(ds.select_columns(["prompt", "completion"]))
           if not isinstance(r["prompt"], str) or not isinstance(r["completion"], str) or not r["completion"].strip()]
    if bad:
        raise ValueError(f"BC rows {bad[:5]} have a non-text prompt or an empty completion")
    head = ds.select(range(min(100, len(ds))))
    # a token boundary: " action" after a prompt ending in text, or "action" after a chat turn's opening newline
    if any(not (c.startswith(" ") and not p.endswith((" ", "\n"))) and not (p.endswith("\n") and not c[:1].isspace())
           for p, c in zip(head["prompt"], head["completion"])):
        warnings.warn("BC completions should start with a space and prompts end without one, or prompts end with a "
                      "newline (a chat template's assistant turn) and completions start with text (r2v_agents.prompts."
                      "format_completion): otherwise prompt and completion tokens merge at the boundary",
                      stacklevel=2)
    return ds.select_columns(["prompt", "completion"])


def train_bc(model: Any, tokenizer: Any, rows: Any, cfg: BCConfig) -> str:
    """Train BC and return the directory of the saved model (with its tokenizer).

    ``model`` is a causal LM (or a path to one), ``tokenizer`` its tokenizer. Resumes from the newest
    checkpoint in ``output_dir/checkpoints``; returns at once if ``output_dir/model`` is already complete.
    """
    final = os.path.join(cfg.output_dir, MODEL_DIR)
    if os.path.exists(os.path.join(final, DONE_FILE)):
        return final
    from transformers import AutoModelForCausalLM
    from trl import SFTTrainer

    if isinstance(model, (str, os.PathLike)):
        model = AutoModelForCausalLM.from_pretrained(os.fspath(model))
    dataset = bc_dataset(rows)
    args = cfg.to_sft_config()
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=cfg.peft_config())
    resume = _has_checkpoint(args.output_dir)
    result = trainer.train(resume_from_checkpoint=True if resume else None)
    trained = trainer.model
    if cfg.lora_r:
        trained = trained.merge_and_unload()
    save_trained(trainer, trained, tokenizer, final, info={
        "stage": "bc", "config": jsonable(asdict(cfg)), "train_loss": result.training_loss,
        "global_step": result.global_step, "log_history": trainer.state.log_history})
    return final


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


def _has_checkpoint(directory: str) -> bool:
    return os.path.isdir(directory) and any(d.startswith("checkpoint-") for d in os.listdir(directory))


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _bf16(flag: bool | None) -> bool:
    if flag is not None:
        return flag
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
