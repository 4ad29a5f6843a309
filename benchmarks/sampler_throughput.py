"""K-candidate sampling: r2v's TransformersSampler vs raw ``model.generate(num_return_sequences=k)``, in one run.

Both sample k continuations of the same SLM prompts (built by ``r2v_agents.prompts`` from TextWorld episodes
of the small suite under the composite perturbations, the oracle acting) with the same decoding settings and
return per-token logits. ``generate`` expands each prompt k times before encoding it; the sampler encodes it once
and shares the KV cache, and stops when every sample has stopped (EOS or newline). Rounds alternate between the
two so machine load hits them alike; the median wall time of each is reported, with prompts/s and the ratio.

The model is the default pipeline's SLM shape (Qwen2, hidden 128, 3 layers, vocabulary 2048) with a tokenizer
trained here; ``--model DIR`` uses a trained one instead (e.g. ``runs/r2v/dpo/model``), whose samples stop early,
and ``--model smollm2`` SmolLM2-135M-Instruct (both variants then read the chat-templated prompt).

    python benchmarks/sampler_throughput.py --prompts 48 --k 5 --rounds 3
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import gymnasium as gym
import tyro

import r2v_envs  # noqa: F401
from r2v_agents.context import Context
from r2v_agents.prompts import build_prompt, render_prompt


@dataclass
class Args:
    prompts: int = 48
    """SLM prompts sampled per round"""
    k: int = 5
    """candidates per prompt"""
    max_new_tokens: int = 12
    """tokens per candidate at most"""
    batch_size: int = 8
    """prompts per forward batch (both variants)"""
    rounds: int = 3
    """alternating rounds; medians are reported"""
    threads: int = 1
    """torch CPU threads"""
    model: str = ""
    """a saved causal LM directory or a backbone name (smollm2); empty: a fresh default-sized Qwen2 with a locally
    trained tokenizer"""
    baseline: str = ""
    """another TransformersSampler source file to time in the same rounds, e.g. the one of an older commit:
    git show REV:r2v_agents/samplers/transformers_sampler.py > /tmp/old_sampler.py"""
    warmup: int = 0
    """prompts in each variant's warm-up call (0: all of them)"""


def collect_prompts(n: int, env_id: str = "R2V/TextWorld-v0", **env_kwargs) -> list[str]:
    """SLM prompts from oracle-played episodes of an env's train tasks (composite perturbations); by default
    the small TextWorld suite's games."""
    prompts: list[str] = []
    if env_id == "R2V/TextWorld-v0":
        env_kwargs = {"suite": "small", **env_kwargs}
    env = gym.make(env_id, seed=7, split="train", perturbations="composite", **env_kwargs)
    ids = env.unwrapped.task_ids()
    try:
        for task in ids:
            obs, info = env.reset(options={"task_id": task})
            ctx = Context.start(info.get("goal", ""), obs, info, max_steps=30)
            done = False
            while not done and len(prompts) < n:
                prompts.append(build_prompt(ctx))
                action = info.get("expert_action") or "look"
                obs, reward, terminated, truncated, info = env.step(action)
                ctx, done = ctx.advance(action, obs, reward, info), terminated or truncated
            if len(prompts) >= n:
                break
    finally:
        env.close()
    return prompts


def load_model(args: Args, prompts: list[str]):
    if args.model:
        from r2v_agents.backbones import load_backbone

        return load_backbone(args.model)
    from r2v_agents.tiny import build_tiny_model, train_tokenizer

    tok = train_tokenizer(prompts * 4, vocab_size=2048)
    model = build_tiny_model(tok, hidden_size=128, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=384)
    return model, tok


def raw_generate(model, tok, prompts: list[str], args: Args) -> None:
    """What the sampler replaced: generate() with num_return_sequences and per-step logits, batch by batch."""
    import torch

    for i in range(0, len(prompts), args.batch_size):
        batch = [render_prompt(p, tok) for p in prompts[i:i + args.batch_size]]  # as the sampler renders them
        enc = tok(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        with torch.no_grad():
            model.generate(**enc, do_sample=True, num_return_sequences=args.k, max_new_tokens=args.max_new_tokens,
                           temperature=1.0, top_p=1.0, top_k=0, return_dict_in_generate=True, output_logits=True,
                           pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)


def load_sampler_class(path: str):
    """``TransformersSampler`` from another copy of its module (it imports the rest of r2v from this tree)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("baseline_transformers_sampler", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TransformersSampler


def main(args: Args) -> None:
    import torch

    from r2v_agents.samplers.transformers_sampler import TransformersSampler

    torch.set_num_threads(args.threads)
    prompts = collect_prompts(args.prompts)
    model, tok = load_model(args, prompts)
    sampler = TransformersSampler(model, tok, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, seed=0)
    lengths = [len(tok(render_prompt(p, tok), add_special_tokens=False)["input_ids"]) for p in prompts]
    variants = {"generate": lambda ps: raw_generate(model, tok, ps, args),
                "r2v-sampler": lambda ps: sampler.sample(ps, args.k)}
    if args.baseline:
        old = load_sampler_class(args.baseline)(model, tok, max_new_tokens=args.max_new_tokens,
                                                batch_size=args.batch_size, seed=0)
        variants["baseline"] = lambda ps: old.sample(ps, args.k)
    for fn in variants.values():  # warm-up
        fn(prompts[:args.warmup or len(prompts)])
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            t = time.perf_counter()
            fn(prompts)
            times[name].append(time.perf_counter() - t)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"{len(prompts)} prompts (mean {statistics.mean(lengths):.0f} tokens, max {max(lengths)}), k={args.k}, "
          f"max_new_tokens={args.max_new_tokens}, batch {args.batch_size}, {args.threads} thread(s), "
          f"model {args.model or 'fresh Qwen2 128x3'}; median of {args.rounds} rounds")
    for name, t in med.items():
        print(f"  {name:12s} {t:6.2f} s  {len(prompts) / t:6.1f} prompts/s  {len(prompts) * args.k / t:7.1f} candidates/s")
    print(f"  speed-up of the r2v sampler over generate(): {med['generate'] / med['r2v-sampler']:.2f}x")
    if args.baseline:
        print(f"  speed-up of the baseline sampler over generate(): {med['generate'] / med['baseline']:.2f}x; "
              f"r2v sampler over the baseline: {med['baseline'] / med['r2v-sampler']:.2f}x")
    print(f"  r2v sampler: {med['r2v-sampler'] / len(prompts):.2f} s per decision (k={args.k} candidates)")


if __name__ == "__main__":
    main(tyro.cli(Args))
