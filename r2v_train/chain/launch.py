"""Command line of the BC and DPO+consistency stages, for ``accelerate launch`` (1..N GPUs, or the CPU).

The same command runs on a laptop CPU, one GPU, DDP over 4 GPUs or DeepSpeed ZeRO-3 (configs in
``r2v_train/configs/accelerate/``; run from the repository root)::

    accelerate launch --cpu --num_processes 1 -m r2v_train.chain.launch bc --model runs/base --data bc.jsonl \\
        --cfg.output-dir runs/bc --cfg.max-steps 100
    accelerate launch --config_file r2v_train/configs/accelerate/ddp_4gpu.yaml -m r2v_train.chain.launch bc \\
        --model Qwen/Qwen2.5-1.5B --data bc.jsonl --cfg.output-dir runs/bc --cfg.lora-r 16
    accelerate launch --config_file r2v_train/configs/accelerate/zero3_4gpu.yaml -m r2v_train.chain.launch dpo \\
        --model runs/bc/model --data pairs.jsonl --output-dir runs/dpo --consistency-coef 0.2

``--data`` is a ``.jsonl``/``.json``/``.parquet`` file (or a directory of them) with the stage's columns: BC's
``prompt``/``completion`` (:mod:`r2v_train.chain.bc`), DPO's ``prompt``/``chosen``/``rejected`` plus optional
``prompt_alt``/``candidates`` (:mod:`r2v_train.chain.dpo_consistency`). Under accelerate, the HF Trainer picks up
the process group and DeepSpeed plugin from the launcher; only rank 0 writes the final model (gathered from
ZeRO-3 shards). Both stages resume from their newest checkpoint and skip a finished ``model/``.

Example:
    >>> parse(["bc", "--model", "m", "--data", "d.jsonl", "--cfg.output-dir", "o", "--cfg.max-steps", "3"]).cfg.max_steps
    3
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from r2v_envs.fileio import jsonable
from r2v_train.chain.bc import DONE_FILE, MODEL_DIR, BCConfig, _has_checkpoint, save_trained, train_bc


@dataclass
class BCLaunch:
    """Stage 3 (Eq. 3): behavioural cloning with TRL's SFTTrainer."""

    model: str
    """Model directory or hub id of the base SLM (with its tokenizer)."""
    data: str
    """prompt/completion rows: a .jsonl/.json/.parquet file or a directory of them."""
    cfg: BCConfig
    """BC hyper-parameters (``--cfg.output-dir`` is required)."""


@dataclass
class DPOLaunch:
    """Stage 5 (Eq. 4-6): DPO plus the JSD consistency term, the BC model as frozen reference."""

    model: str
    """The BC model directory (policy init and frozen reference)."""
    data: str
    """prompt/chosen/rejected(/prompt_alt/candidates) rows: a .jsonl/.json/.parquet file or a directory."""
    output_dir: str
    """Stage directory (checkpoints/ and model/ go inside)."""
    consistency_coef: float = 0.2
    """lambda_cons (Eq. 5); 0 is plain DPO."""
    beta: float = 0.1
    """DPO temperature beta (Eq. 4)."""
    learning_rate: float = 5e-7
    """AdamW learning rate."""
    epochs: float = 1.0
    """Passes over the pairs."""
    max_steps: int = -1
    """Stop after this many optimiser steps (-1: by epochs)."""
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    max_length: int | None = 1024
    """Token budget per sequence (trim prompts beforehand: TRL's truncation keeps the start, so an over-long
    prompt loses its completion)."""
    save_steps: int = 500
    logging_steps: int = 10
    seed: int = 0
    overrides: dict[str, str] = field(default_factory=dict)
    """Any other ConsistencyDPOConfig fields as strings, e.g. --overrides warmup_ratio 0.1."""


def load_rows(path: str) -> Any:
    """A ``datasets.Dataset`` from a jsonl/json/parquet file or a directory of such files."""
    from datasets import load_dataset

    files = sorted(os.path.join(path, f) for f in os.listdir(path)) if os.path.isdir(path) else [path]
    files = [f for f in files if f.endswith((".jsonl", ".json", ".parquet"))]
    if not files:
        raise FileNotFoundError(f"no .jsonl/.json/.parquet data at {path}")
    kind = "parquet" if files[0].endswith(".parquet") else "json"
    return load_dataset(kind, data_files=files, split="train")


def _tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def run_bc(args: BCLaunch) -> str:
    return train_bc(args.model, _tokenizer(args.model), load_rows(args.data), args.cfg)


def run_dpo(args: DPOLaunch) -> str:
    final = os.path.join(args.output_dir, MODEL_DIR)
    if os.path.exists(os.path.join(final, DONE_FILE)):
        return final
    from transformers import AutoModelForCausalLM

    from r2v_train.chain.dpo_consistency import ConsistencyDPOConfig, ConsistencyDPOTrainer  # torch + TRL

    checkpoints = os.path.join(args.output_dir, "checkpoints")
    config = ConsistencyDPOConfig(
        output_dir=checkpoints, consistency_coef=args.consistency_coef, beta=args.beta,
        learning_rate=args.learning_rate, num_train_epochs=args.epochs, max_steps=args.max_steps,
        per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, max_length=args.max_length,
        save_steps=args.save_steps, save_total_limit=2, logging_steps=args.logging_steps, seed=args.seed,
        report_to="none", **_typed_overrides(args.overrides))
    model = AutoModelForCausalLM.from_pretrained(args.model)
    ref = AutoModelForCausalLM.from_pretrained(args.model)  # a distinct frozen copy (ref_model=None reloads by name)
    tok = _tokenizer(args.model)
    trainer = ConsistencyDPOTrainer(model=model, ref_model=ref, args=config, train_dataset=load_rows(args.data),
                                    processing_class=tok)
    result = trainer.train(resume_from_checkpoint=True if _has_checkpoint(checkpoints) else None)
    save_trained(trainer, trainer.model, tok, final, info={
        "stage": "dpo_consistency", "config": jsonable(asdict(args)), "train_loss": result.training_loss,
        "global_step": result.global_step, "log_history": trainer.state.log_history})
    return final


def _typed_overrides(overrides: dict[str, str]) -> dict[str, Any]:
    import json

    out: dict[str, Any] = {}
    for k, v in overrides.items():
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def parse(argv: list[str] | None = None) -> BCLaunch | DPOLaunch:
    import tyro

    return tyro.extras.subcommand_cli_from_dict({"bc": BCLaunch, "dpo": DPOLaunch}, args=argv,
                                                description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> str:
    args = parse(argv)
    out = run_bc(args) if isinstance(args, BCLaunch) else run_dpo(args)
    print(out)
    return out


if __name__ == "__main__":
    main()
