"""The DPO stage: DPO (Eq. 4) + lambda_cons JSD consistency (Eq. 5-6) from the BC model, the BC model frozen as
reference (:class:`r2v_train.chain.dpo_consistency.ConsistencyDPOTrainer`).

:class:`DPOConfig` is the one DPO config: the chain's ``dpo:`` section, ``r2v train-dpo --cfg.*`` and
``accelerate launch -m r2v_train.chain.launch dpo`` all take it. :func:`train_dpo` trains from a model directory
on a ``datasets.Dataset`` of ``prompt``/``chosen``/``rejected`` (+ ``prompt_alt``/``candidates``) rows, resuming
from its newest checkpoint, and saves ``output_dir/model`` atomically; :func:`dpo_stage` feeds it the preference
stage's pairs.

Example:
    >>> DPOConfig(batch_size=4, gradient_accumulation_steps=4).effective_batch_size
    16
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from r2v_envs.errors import R2VError
from r2v_envs.fileio import jsonable
from r2v_train.chain.saving import (
    CHECKPOINT_DIR,
    MODEL_DIR,
    done_info,
    has_checkpoint,
    is_done,
    lora_config,
    save_trained,
    stage_identity,
    use_checkpointing,
)


class EmptyDatasetError(R2VError, ValueError):
    """DPO got no preference pair to learn from (every state's candidates agreed with the teacher, or none was
    logged)."""


PAIR_COLUMNS = ["prompt", "chosen", "rejected", "prompt_alt", "candidates"]


@dataclass
class DPOConfig:
    """DPO + consistency: its weight, DPO's beta and the optimiser."""

    consistency_coef: float = field(default=0.2, metadata={"help": "lambda_cons (Eq. 5; Table 4); 0 is plain DPO"})
    beta: float = field(default=0.1, metadata={"help": "DPO temperature beta (Eq. 4)"})
    epochs: float = field(default=1.0, metadata={"help": "passes over the pairs"})
    max_steps: int = field(default=-1, metadata={"help": "optimiser steps (-1: by epochs)"})
    learning_rate: float = field(default=5e-6, metadata={"help": "AdamW learning rate"})
    batch_size: int = field(default=8, metadata={"help": "pairs per device per step"})
    max_length: int | None = field(default=2048, metadata={
        "help": "token budget per sequence (trim prompts beforehand: TRL's truncation keeps the start, so an "
                "over-long prompt loses its completion)"})
    save_steps: int = field(default=500, metadata={"help": "checkpoint interval (resume points)"})
    seed: int = field(default=0, metadata={"help": "training seed"})
    gradient_accumulation_steps: int = field(default=1, metadata={
        "help": "steps accumulated per update (effective batch = batch_size x this x devices)"})
    gradient_checkpointing: bool | None = field(default=None, metadata={
        "help": "recompute activations in backward; None: on for models of >= 100M parameters"})
    logging_steps: int = field(default=1, metadata={"help": "log every this many steps"})
    lora_r: int = field(default=0, metadata={
        "help": "LoRA rank (0: all weights train); with LoRA the adapter-free model is the frozen reference (no "
                "second copy in memory) and the adapters are merged into the saved model"})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling alpha"})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout"})
    overrides: Mapping[str, Any] = field(default_factory=dict, metadata={
        "help": "any other ConsistencyDPOConfig fields (e.g. warmup_ratio: 0.1), passed through unchanged"})

    # the fields the chain's stage key has always hashed (see BCConfig.identity)
    STAGE_KEY_FIELDS = ("consistency_coef", "beta", "epochs", "max_steps", "learning_rate", "batch_size",
                        "max_length", "save_steps", "seed")

    @property
    def effective_batch_size(self) -> int:
        """Pairs per optimiser update on one device."""
        return self.batch_size * self.gradient_accumulation_steps

    def identity(self) -> dict[str, Any]:
        """The fields that change the trained model (the chain's stage key)."""
        return stage_identity(self, self.STAGE_KEY_FIELDS)

    def to_trainer_args(self, output_dir: str, model: Any) -> Any:
        """The trainer's ``ConsistencyDPOConfig``, checkpoints under ``output_dir/checkpoints``."""
        from r2v_train.chain.dpo_consistency import ConsistencyDPOConfig  # torch + TRL

        return ConsistencyDPOConfig(
            output_dir=os.path.join(output_dir, CHECKPOINT_DIR), consistency_coef=self.consistency_coef,
            beta=self.beta, num_train_epochs=self.epochs, max_steps=self.max_steps, learning_rate=self.learning_rate,
            per_device_train_batch_size=self.batch_size, gradient_accumulation_steps=self.gradient_accumulation_steps,
            max_length=self.max_length, save_steps=self.save_steps, save_total_limit=2,
            logging_steps=self.logging_steps, report_to="none", seed=self.seed,
            gradient_checkpointing=use_checkpointing(self.gradient_checkpointing, model), **dict(self.overrides))


def dpo_trainer(model: Any, tok: Any, data: Any, cfg: DPOConfig, output_dir: str) -> Any:
    """The DPO + consistency trainer of ``model`` (the stage's, the launcher's and the GPU benchmark's)."""
    from r2v_train.chain.dpo_consistency import ConsistencyDPOTrainer  # torch + TRL

    lora = lora_config(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout)
    # the frozen reference: with LoRA, the model with its adapters switched off (TRL's way, no second copy);
    # else a distinct in-memory copy (with ref_model=None and no adapters TRL reloads the reference by name)
    return ConsistencyDPOTrainer(model=model, ref_model=None if lora else copy.deepcopy(model),
                                 args=cfg.to_trainer_args(output_dir, model), train_dataset=data,
                                 processing_class=tok, peft_config=lora)


def train_dpo(model_dir: str, data: Any, cfg: DPOConfig, output_dir: str, tokenizer: Any = None) -> str:
    """Train DPO + consistency from ``model_dir`` on ``data``; returns ``output_dir/model`` (kept if finished)."""
    final = os.path.join(output_dir, MODEL_DIR)
    if is_done(final):
        return final
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    trainer = dpo_trainer(model, tok, data, cfg, output_dir)
    result = trainer.train(resume_from_checkpoint=True if has_checkpoint(trainer.args.output_dir) else None)
    trained = trainer.model.merge_and_unload() if cfg.lora_r else trainer.model
    save_trained(trainer, trained, tok, final, info={
        "stage": "dpo", "config": jsonable(asdict(cfg)), "train_loss": result.training_loss,
        "global_step": result.global_step, "log_history": trainer.state.log_history})
    return final


def dpo_stage(cfg: DPOConfig, bc_model: str, pairs: str, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Train DPO + consistency on the preference stage's pairs into ``out_dir/model``; returns its path, step
    count and last logged JSD."""
    out_dir = os.fspath(out_dir)
    final = os.path.join(out_dir, MODEL_DIR)
    if not is_done(final):
        import datasets
        import pyarrow.parquet as pq

        # datasets fails on an empty Parquet file with a bare DatasetGenerationError (from a StopIteration):
        # count the rows first
        if pq.ParquetFile(pairs).metadata.num_rows == 0:
            raise EmptyDatasetError(f"{pairs} holds no preference pair: DPO has nothing to learn (the SLM's K "
                                    "candidates never gave a verifier-separated pair; raise preferences.k or "
                                    "preferences.max_contexts)")
        data = datasets.Dataset.from_parquet(pairs).select_columns(PAIR_COLUMNS)
        train_dpo(bc_model, data, cfg, out_dir)
    info = done_info(final)
    jsd = [h["consistency/jsd"] for h in info.get("log_history", []) if "consistency/jsd" in h]
    return {"model": final, "global_step": info.get("global_step"), "train_loss": info.get("train_loss"),
            "consistency_jsd": jsd[-1] if jsd else None}
