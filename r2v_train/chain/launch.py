"""Command line of the BC and DPO + consistency stages, for ``accelerate launch`` (1..N GPUs, or the CPU).

The same command runs on a laptop CPU, one GPU, DDP over 4 GPUs or DeepSpeed ZeRO-3 (configs in
``r2v_train/configs/accelerate/``; run from the repository root)::

    accelerate launch --cpu --num_processes 1 -m r2v_train.chain.launch bc --model runs/base --data bc.jsonl \\
        --output-dir runs/bc --cfg.max-steps 100
    accelerate launch --config_file r2v_train/configs/accelerate/ddp_4gpu.yaml -m r2v_train.chain.launch bc \\
        --model Qwen/Qwen2.5-1.5B --data bc.jsonl --output-dir runs/bc --cfg.lora-r 16
    accelerate launch --config_file r2v_train/configs/accelerate/zero3_4gpu.yaml -m r2v_train.chain.launch dpo \\
        --model runs/bc/model --data pairs.jsonl --output-dir runs/dpo --cfg.consistency-coef 0.2

``--cfg.*`` are the fields of the chain's own configs (:class:`r2v_train.chain.bc.BCConfig`,
:class:`r2v_train.chain.dpo.DPOConfig`). ``--data`` is a ``.jsonl``/``.json``/``.parquet`` file (or a directory of
them) with the stage's columns: BC's ``prompt``/``completion``, DPO's ``prompt``/``chosen``/``rejected`` plus
optional ``prompt_alt``/``candidates``. Under accelerate, the HF Trainer picks up the process group and DeepSpeed
plugin from the launcher; only rank 0 writes the final model (gathered from ZeRO-3 shards). Both stages resume
from their newest checkpoint and skip a finished ``model/``. ``r2v train-bc`` / ``r2v train-dpo`` take the same
flags.

Example:
    >>> parse(["bc", "--model", "m", "--data", "d.jsonl", "--output-dir", "o", "--cfg.max-steps", "3"]).cfg.max_steps
    3
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from r2v_train.chain.bc import BCConfig, train_bc
from r2v_train.chain.dpo import DPOConfig, train_dpo


@dataclass
class BCLaunch:
    """The BC stage (Eq. 3): behavioural cloning with TRL's SFTTrainer."""

    model: str
    """Model directory or hub id of the base SLM (with its tokenizer)."""
    data: str
    """prompt/completion rows: a .jsonl/.json/.parquet file or a directory of them."""
    output_dir: str
    """Stage directory (checkpoints/ and model/ go inside)."""
    cfg: BCConfig = field(default_factory=BCConfig)
    """BC hyper-parameters (the chain's ``bc:`` fields)."""


@dataclass
class DPOLaunch:
    """The DPO stage (Eq. 4-6): DPO plus the JSD consistency term, the BC model as frozen reference."""

    model: str
    """The BC model directory (policy init and frozen reference)."""
    data: str
    """prompt/chosen/rejected(/prompt_alt/candidates) rows: a .jsonl/.json/.parquet file or a directory."""
    output_dir: str
    """Stage directory (checkpoints/ and model/ go inside)."""
    cfg: DPOConfig = field(default_factory=DPOConfig)
    """DPO + consistency hyper-parameters (the chain's ``dpo:`` fields)."""


def load_rows(path: str) -> Any:
    """A ``datasets.Dataset`` from a jsonl/json/parquet file or a directory of such files."""
    from datasets import load_dataset

    files = sorted(os.path.join(path, f) for f in os.listdir(path)) if os.path.isdir(path) else [path]
    files = [f for f in files if f.endswith((".jsonl", ".json", ".parquet"))]
    if not files:
        raise FileNotFoundError(f"no .jsonl/.json/.parquet data at {path}")
    kind = "parquet" if files[0].endswith(".parquet") else "json"
    return load_dataset(kind, data_files=files, split="train")


def run_bc(args: BCLaunch) -> str:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return train_bc(args.model, tok, load_rows(args.data), args.cfg, args.output_dir)


def run_dpo(args: DPOLaunch) -> str:
    return train_dpo(args.model, load_rows(args.data), args.cfg, args.output_dir)


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
