"""Peak resident memory of DPO + consistency steps on CPU, for this checkout's trainer and another commit's, in
one command, so a change to the DPO stage is measured before and after on the same machine.

Each variant runs in a fresh process (the peak resident set, VmHWM, is per process): it builds a model of the
SmolLM2-135M shape (random weights, its real vocabulary of 49,152; memory does not depend on the weights),
reads the humaneval preset's DPO settings (``r2v_train/configs/humaneval.yaml``: beta, learning rate,
consistency coefficient, max_length, K), makes preference rows of the requested prompt length, constructs the
trainer the way that code's DPO stage does and runs ``--steps`` optimiser steps. VmHWM is reset just before the
trainer is built, so the figure covers the frozen reference, the optimiser state and the steps.

    git archive 59335a4 | tar -x -C /tmp/base          # the code before a change
    python benchmarks/dpo_memory.py --batch 2 --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=2, help="preference pairs per step (the humaneval preset: 1)")
    p.add_argument("--prompt-tokens", type=int, default=0, help="prompt length in tokens (0: the longest "
                   "HumanEval+ prompt of benchmarks/data/prompt_lengths.json)")
    p.add_argument("--steps", type=int, default=2, help="optimiser steps")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--baseline", default="", help="another checkout's root (e.g. an older commit's "
                   "`git archive`) to measure in the same run")
    p.add_argument("--rounds", type=int, default=1, help="alternating rounds of the variants")
    return p.parse_args(argv)


def _trainer(model, tok, data, dpo: dict, batch: int, out: str):
    """The DPO + consistency trainer as the importable code's DPO stage builds it."""
    try:
        from r2v_train.chain.dpo import DPOConfig, dpo_trainer
    except ImportError:  # the flat r2v_train of before the rooms: policy_stages.dpo_stage's construction
        import copy

        from r2v_train.dpo_consistency import ConsistencyDPOConfig, ConsistencyDPOTrainer
        from r2v_train.policy_stages import CHECKPOINTING_MIN_PARAMS

        args = ConsistencyDPOConfig(
            output_dir=out, consistency_coef=dpo.get("consistency_coef", 0.2), beta=dpo.get("beta", 0.1),
            max_steps=len(data) // batch, learning_rate=dpo.get("learning_rate", 5e-6),
            per_device_train_batch_size=batch, max_length=dpo.get("max_length", 1024), save_strategy="no",
            logging_steps=1, report_to="none", disable_tqdm=True,
            gradient_checkpointing=model.num_parameters() >= CHECKPOINTING_MIN_PARAMS)
        return ConsistencyDPOTrainer(model=model, ref_model=copy.deepcopy(model), args=args, train_dataset=data,
                                     processing_class=tok)
    cfg = DPOConfig(beta=dpo.get("beta", 0.1), max_steps=len(data) // batch,
                    learning_rate=dpo.get("learning_rate", 5e-6), batch_size=batch,
                    max_length=dpo.get("max_length", 1024), lora_r=dpo.get("lora_r", 0),
                    consistency_coef=dpo.get("consistency_coef", 0.2),
                    overrides={"save_strategy": "no", "disable_tqdm": True})
    return dpo_trainer(model, tok, data, cfg, out)


def measure(code: str, batch: int, prompt_tokens: int, steps: int, threads: int) -> dict:
    """One variant, in this process: ``code`` is the checkout whose ``r2v_train`` builds the trainer."""
    sys.path.insert(0, code)
    sys.path.insert(1, str(HERE))
    import tempfile

    import datasets
    import torch
    from gpu_scale import SHAPES, Peak, build_model, dpo_rows, preset, prompt_lengths, word_tokenizer

    torch.set_num_threads(threads)
    shape = SHAPES["smollm2-135m"]
    chain = preset(shape)
    dpo = chain["dpo"]
    action = min(64, chain.get("preferences", {}).get("max_new_tokens", 16))
    prompt = prompt_tokens or min(max(prompt_lengths(shape)), dpo.get("max_length", 1024) - action - 2)
    k = chain.get("preferences", {}).get("k", 5)
    data = datasets.Dataset.from_list(dpo_rows(shape, batch * steps, prompt, action, k))
    model, tok = build_model(shape, "cpu"), word_tokenizer(shape.vocab)
    with tempfile.TemporaryDirectory() as tmp, Peak("cpu") as peak:
        trainer = _trainer(model, tok, data, dpo, batch, tmp)
        t = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t
    import r2v_train

    return {"code": code, "r2v_train": os.path.dirname(r2v_train.__file__), "batch": batch, "prompt": prompt,
            "action": action, "candidates": k, "steps": steps, "peak_gb": round(peak.gb, 3),
            "gradient_checkpointing": bool(trainer.args.gradient_checkpointing), "train_s": round(wall, 1),
            "threads": threads}


def main(args: argparse.Namespace) -> list[dict]:
    variants = [("this checkout", str(ROOT))] + ([("baseline", os.path.abspath(args.baseline))]
                                                 if args.baseline else [])
    results = []
    for r in range(args.rounds):
        for name, code in variants:
            cmd = [sys.executable, __file__, "--_one", code, str(args.batch), str(args.prompt_tokens),
                   str(args.steps), str(args.threads)]
            env = {**os.environ, "PYTHONPATH": code}
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if proc.returncode:
                raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
            row = json.loads(proc.stdout.strip().splitlines()[-1]) | {"variant": name, "round": r}
            results.append(row)
            print(f"round {r}: {name:14s} ({row['r2v_train']}): batch {row['batch']}, prompt {row['prompt']} + "
                  f"action {row['action']} tokens, K={row['candidates']}, checkpointing "
                  f"{'on' if row['gradient_checkpointing'] else 'off'}: peak RSS {row['peak_gb']:.2f} GB, "
                  f"{row['steps']} steps in {row['train_s']} s", flush=True)
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--_one":
        code, batch, prompt, steps, threads = sys.argv[2], *map(int, sys.argv[3:7])
        print(json.dumps(measure(code, batch, prompt, steps, threads)))
    else:
        main(parse_args())
