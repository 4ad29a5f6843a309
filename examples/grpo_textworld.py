"""GRPO on perturbed TextWorld with TRL (one file, cleanrl style).

Each training prompt is a reset seed; its ``num_generations`` rollouts play that episode start (same game, same
perturbation seed z) for up to ``max_turns`` actions, sampled from the policy itself, and the env's return is the
reward (``r2v_train.rl.grpo_env``: TRL's ``rollout_func`` and ``environment_factory`` forms). ``r2v rl`` is the
trainer of a run's SLM (``r2v_train.rl.grpo``); this file shows TRL's own ``GRPOTrainer`` on an r2v env, in one page. With no ``--model``, a tiny Qwen2 and a byte-level BPE tokenizer are built locally
from expert text of the env (nothing from a hub); ``--model DIR`` takes any local transformers checkpoint
directory instead (e.g. a ``save_pretrained`` copy of SmolLM2-135M-Instruct).

    python examples/grpo_textworld.py --max-steps 3
    python examples/grpo_textworld.py --model /path/to/smollm2-135m-instruct --max-steps 20

Rollouts can step envs on ``r2v serve`` servers instead of in process (docs/serving.md): ``--server URL`` (a server of
``--env-id``), or ``--mix textworld=URL1 alfworld=URL2`` for one run whose examples alternate between benchmarks (the
tiny model's tokenizer is still trained on local expert text of ``--env-id``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field

from r2v_agents.tiny import build_tiny_model, env_corpus, train_tokenizer
from r2v_train.chain.saving import bf16_default, cuda_available, use_checkpointing
from r2v_train.rl.grpo_env import EpisodeRollout, env_reward, episode_dataset


@dataclass
class Args:
    env_id: str = "R2V/TextWorld-v0"
    """the env to train on"""
    suite: str = "small"
    """TextWorld suite (small: 24 games); ignored for other envs"""
    task_ids: tuple[str, ...] = ("tw-coin_collector-easy-000",)
    """games to train on (each reset picks among them); empty: the whole train split"""
    perturbations: str = "composite"
    """perturbation spec (composite, none, or one name)"""
    model: str | None = None
    """a local transformers checkpoint directory; None builds the tiny SLM"""
    seed: int = 1
    """seed of the trainer, of the tiny model and of the first episode"""
    max_steps: int = 3
    """GRPO optimizer steps"""
    num_generations: int = 4
    """rollouts per episode start (the GRPO group)"""
    prompts_per_step: int = 1
    """episode starts per optimizer step"""
    max_turns: int = 4
    """actions per rollout"""
    max_new_tokens: int = 8
    """tokens per action"""
    max_completion_length: int = 384
    """token budget of a whole rollout (actions and env replies)"""
    admissible: str = "snap"
    """free: the generated text is the command; snap: the closest visible admissible command"""
    learning_rate: float = 1e-4
    temperature: float = 1.0
    threads: int = 1
    """torch threads (the CI machine has 2 cores shared with others)"""
    server: str | None = None
    """URL of an r2v serve of env_id: the rollouts step its sessions instead of local envs"""
    mix: tuple[str, ...] = ()
    """NAME=URL pairs: one run over several servers, each example naming its env (TRL's multi-environment mode)"""
    output_dir: str = field(default_factory=lambda: os.path.join("runs", f"grpo-textworld-{int(time.time())}"))


def tiny_model(args: Args, env_kwargs: dict):
    """A tiny Qwen2 and a tokenizer trained on expert rollouts of the training games (seconds on CPU)."""

    texts = env_corpus(args.env_id, task_ids=list(args.task_ids) or None, seeds=(args.seed,), **env_kwargs)
    tok = train_tokenizer(texts, vocab_size=1024)
    model = build_tiny_model(tok, hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                             intermediate_size=256, seed=args.seed)
    return model, tok


def main(args: Args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    env_kwargs: dict = {"perturbations": None if args.perturbations == "none" else args.perturbations}
    if args.env_id == "R2V/TextWorld-v0":
        env_kwargs["suite"] = args.suite
    if len(args.task_ids) == 1:
        env_kwargs["task_id"] = args.task_ids[0]
    elif args.task_ids:
        raise SystemExit("pass one task id, or none for the whole train split")
    if args.model:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(args.model)
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
    else:
        model, tok = tiny_model(args, env_kwargs)
    before = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}

    mix = dict(pair.split("=", 1) for pair in args.mix)
    target = mix or args.server or args.env_id  # a server was started with the env's own arguments
    rollout = EpisodeRollout(target, env_kwargs if target == args.env_id else {}, max_turns=args.max_turns,
                             max_new_tokens=args.max_new_tokens, admissible=args.admissible)
    batch = args.num_generations * args.prompts_per_step
    config = GRPOConfig(
        output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=batch,
        num_generations=args.num_generations, max_completion_length=args.max_completion_length,
        learning_rate=args.learning_rate, temperature=args.temperature, logging_steps=1, save_strategy="no",
        report_to="none", seed=args.seed, bf16=bf16_default(None), use_cpu=not cuda_available(),
        gradient_checkpointing=use_checkpointing(None, model),  # a GPU when there is one, CPU-safe otherwise
        dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[env_reward], args=config, processing_class=tok,
                          train_dataset=episode_dataset(args.max_steps * args.prompts_per_step, seed=args.seed,
                                                        environments=tuple(mix)),
                          rollout_func=rollout)
    trainer.train()
    rollout.close()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    changed = sum(int(not torch.equal(before[n], p.detach().cpu())) for n, p in model.named_parameters())
    summary = {"env_id": args.env_id, "model": args.model or "tiny", "steps": trainer.state.global_step,
               "episodes": rollout.episodes, "rewards": [h["reward"] for h in logs],
               "changed_tensors": changed,
               "tensors": len(before)}
    print(json.dumps(summary), file=sys.stderr)
    return summary


if __name__ == "__main__":
    import tyro

    main(tyro.cli(Args))
