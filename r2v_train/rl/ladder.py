"""The learning ladder: ``r2v rl``'s GRPO trainer measured on the policy itself (docs/results/2026-11-28-learning-ladder.md).

A rung is an env small enough that failing to learn means a defect (stable-baselines3's identity tests), climbed by
the trainer ``r2v rl`` uses (:func:`r2v_train.rl.grpo.episode_trainer`: TRL's ``GRPOTrainer`` with our episode
override, the same collector, rows and rewards) and measured on the policy's own success: one sample per step at the
training temperature, grounded as in training, no verifier (``r2v eval --agent slm:RUN?k=1``), on fresh episodes.

* Rung 0 (:func:`rung0`, tests/train/rl/test_learning_ladder.py): a freshly initialised tiny policy on
  ``R2V/Scripted-v0``, evaluated on the held-out test tasks.
* Rung 1 (``python -m r2v_train.rl.ladder rung1 --run-dir RUN``): a run's SLM on one TextWorld train game under
  composite perturbations, evaluated over 40 fresh (z, episode) starts of that game.

    python -m r2v_train.rl.ladder rung0 --out runs/ladder/rung0
    python -m r2v_train.rl.ladder rung1 --run-dir runs/r2v --out runs/ladder/rung1
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import r2v_envs  # noqa: F401 - registers the ids
from r2v_agents.prompts import action_style
from r2v_agents.samplers.transformers_sampler import TransformersSampler
from r2v_agents.slm import SLMPolicy
from r2v_agents.tiny import build_tiny_model, env_corpus, train_tokenizer
from r2v_eval.grid import GridConfig, cell_dir, run_grid
from r2v_eval.cells import cell_episodes, sr_metrics
from r2v_train.chain import collect
from r2v_train.rl.config import RLConfig
from r2v_train.rl.curve import LearningCurve
from r2v_train.rl.grpo import episode_trainer
from r2v_train.rl.rollouts import GroupCollector, training_starts
from r2v_train.runtime.cpu import set_threads

SCRIPTED = "R2V/Scripted-v0"


def policy_evaluator(grid: GridConfig, cfg: RLConfig, out_dir: str, admissible: str = "snap", style: str = "line"):
    """``evaluate(model, tokenizer, step)``: the live policy's own success on ``grid`` (one env id, one setting), one
    ``r2v eval`` directory per evaluation under ``out_dir/evals``. Each evaluation draws its own samples (seeded by
    the step), never those of the training episodes."""

    env_id, setting = grid.env_ids[0], grid.perturbations[0]

    def evaluate(model: Any, tokenizer: Any, step: int) -> dict[str, Any]:
        was_training = model.training
        sampler = TransformersSampler(model, tokenizer, max_new_tokens=cfg.max_new_tokens or 16,
                                      temperature=cfg.temperature, seed=1_000_003 + step, style=style)
        out = os.path.join(out_dir, "evals", f"step-{step:04d}")
        run_grid(SLMPolicy(sampler, None, k=1, admissible=admissible), "slm?k=1", grid, out)
        model.train(was_training)
        cell = cell_dir(out, env_id, setting)
        episodes = cell_episodes(cell)  # read once; SR only: the robustness columns would read every step shard
        m, eps = sr_metrics(cell, episodes=episodes), list(episodes.values())
        return {"split": grid.split, "sr": m["sr"], "sr_ci": m["sr_ci"], "episodes": len(eps),
                "mean_return": sum(e["return"] for e in eps) / max(len(eps), 1)}

    return evaluate


def climb(cfg: RLConfig, model: Any, tokenizer: Any, env_id: str, env_kwargs: dict[str, Any], tasks: Sequence[str],
          evaluate: Any, out_dir: str, admissible: str = "snap") -> dict[str, Any]:
    """GRPO on ``tasks`` (``cfg``: starts, groups, learning rate, step cap...) with the learning curve of ``evaluate``
    (at step 0, every ``cfg.eval_every`` steps and after the last); returns the curve (``curve.json`` and its PNG
    are in ``out_dir``)."""
    import datasets

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    starts = training_starts(tasks, cfg.max_steps * cfg.starts_per_step, cfg.train_z_start, cfg.seed)
    dataset = datasets.Dataset.from_dict({"prompt": [s.prompt for s in starts]})
    collector = GroupCollector(env_id, {**env_kwargs, "perturbations": cfg.perturbations}, cfg.max_episode_steps or 30,
                               workers=cfg.workers or 0, max_new_tokens=cfg.max_new_tokens or 16,
                               temperature=cfg.temperature, admissible=admissible, seed=cfg.seed, k=cfg.rollout_k)
    curve = LearningCurve(out_dir, evaluate, cfg.eval_every, max_wall_s=60.0 * cfg.max_wall_min,
                          progress=cfg.progress, label="the policy's own SR (k = 1, no verifier)")
    trainer = episode_trainer(cfg, model, tokenizer, collector, dataset, os.path.join(out_dir, "checkpoints"),
                              max_completion_length=cfg.max_new_tokens or 16, callbacks=[curve])
    trainer.args.save_strategy = "no"  # a rung is short and rerun whole: no checkpoints
    curve.trainer = trainer
    t0 = time.perf_counter()
    try:
        curve.evaluate_at(0, model, tokenizer)
        trainer.train()
    finally:
        collector.close()
    return {**curve.curve, "session_wall_s": time.perf_counter() - t0}


def rung0_config(**overrides: Any) -> RLConfig:
    """Rung 0's GRPO: 30 steps of 2 starts x 8 episodes, 6 actions an episode, learning rate 1e-2.

    The learning rate: ``r2v rl``'s default (1e-4, sized for the BC -> DPO SLM) leaves a random policy random; at
    1e-3 it had not moved after 30 steps, at 5e-3 it won after 30-40 (the results page)."""
    base = {"max_steps": 30, "starts_per_step": 2, "group_size": 8, "micro_batches": 1, "learning_rate": 1e-2,
            "warmup_steps": 0, "perturbations": "none", "max_episode_steps": 6, "max_new_tokens": 4, "workers": 0,
            "eval_every": 30, "seed": 0, "progress": False}
    return RLConfig(**{**base, **overrides})


def rung0(out_dir: str, cfg: RLConfig | None = None, train_tasks: int = 4,
          eval_seeds: Sequence[int] = (0, 1, 2, 3)) -> dict[str, Any]:
    """A fresh tiny Qwen2 (hidden 64, 2 layers; tokenizer trained on expert text of 4 scripted episodes) trained on
    the first ``train_tasks`` train tasks of ``R2V/Scripted-v0``, unperturbed; its own success over the 6 test tasks
    x ``eval_seeds`` (each seed a fresh draw of the policy's samples)."""
    import gymnasium as gym

    cfg = cfg or rung0_config()
    texts = env_corpus(SCRIPTED, task_ids=[f"scripted-{i}" for i in range(4)], seeds=(0,), perturbations=None)
    tok = train_tokenizer(texts, vocab_size=400)
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128,
                             seed=cfg.seed)
    env = gym.make(SCRIPTED, seed=0, perturbations=None)
    tasks = env.unwrapped.task_ids("train")[:train_tasks]
    env.close()
    grid = GridConfig(env_ids=(SCRIPTED,), perturbations=(cfg.perturbations,), seeds=tuple(eval_seeds), split="test",
                      max_steps=cfg.max_episode_steps, workers=0, progress=False)
    return climb(cfg, model, tok, SCRIPTED, {}, tasks, policy_evaluator(grid, cfg, out_dir), out_dir)


def rung1_config(**overrides: Any) -> RLConfig:
    """Rung 1's GRPO: 4 starts x 8 episodes a step on one game, composite perturbations, at most 10 minutes of
    training (evaluations excluded)."""
    base = {"max_steps": 200, "starts_per_step": 4, "group_size": 8, "micro_batches": 1, "learning_rate": 1e-3,
            "warmup_steps": 0, "perturbations": "composite", "max_episode_steps": 20, "workers": 0,
            "eval_every": 5, "seed": 0, "progress": True, "max_wall_min": 10.0}
    return RLConfig(**{**base, **overrides})


def rung1(run_dir: str, out_dir: str, cfg: RLConfig | None = None, game: str = "",
          eval_z: Sequence[int] = tuple(range(50_000, 50_040))) -> dict[str, Any]:
    """A run's SLM (RL-tuned, else DPO, else BC) trained on one of its train games (``game``, default the first)
    under ``cfg.perturbations``; its own success over that game's ``eval_z`` starts (fresh z: the training starts
    count up from ``cfg.train_z_start``), grounded as the run's SLM grounds (``router_data.admissible``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from r2v_train.rl.run import source_chain, source_model

    chain = source_chain(run_dir)
    cfg = cfg or rung1_config()
    cfg = dataclasses.replace(cfg, max_new_tokens=cfg.max_new_tokens or chain.router_data.max_new_tokens)
    model_dir = source_model(run_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(model_dir)
    game = game or collect.load_split(os.path.join(run_dir, "split"))["used"]["train"][0]
    env_id, admissible = chain.env.env_id, chain.router_data.admissible
    grid = GridConfig(env_ids=(env_id,), perturbations=(cfg.perturbations,), seeds=tuple(eval_z), split="train",
                      task_ids=(game,), env_kwargs=dict(chain.env.env_kwargs), max_steps=cfg.max_episode_steps,
                      workers=0, progress=False)
    evaluate = policy_evaluator(grid, cfg, out_dir, admissible, action_style(env_id))
    curve = climb(cfg, model, tok, env_id, dict(chain.env.env_kwargs), [game], evaluate, out_dir, admissible)
    return {**curve, "game": game, "model": model_dir}


@dataclasses.dataclass
class LadderArgs:
    """Climb a rung of the learning ladder and write its curve (curve.json, learning_curve.png) into ``out``."""

    rung: str = "rung0"
    """rung0 (fresh tiny policy, R2V/Scripted-v0) or rung1 (a run's SLM on one TextWorld train game)"""
    out: str = "runs/ladder"
    """output directory"""
    run_dir: str = ""
    """rung1: the run whose SLM climbs (made by `r2v train` or `r2v pipeline`)"""
    game: str = ""
    """rung1: the train game (default: the run's first)"""
    max_episode_steps: int = 0
    """override the rung's step cap of an episode (0: the rung's own)"""
    reward: str = ""
    """override the rung's reward (success, success_return)"""
    learning_rate: float = 0.0
    """override the rung's learning rate (0: the rung's own)"""
    threads: int = 1
    """torch CPU threads"""


def main(argv: Sequence[str] | None = None) -> int:
    import tyro

    args = tyro.cli(LadderArgs, args=argv)
    set_threads(args.threads)
    over = {k: v for k, v in (("learning_rate", args.learning_rate), ("max_episode_steps", args.max_episode_steps),
                              ("reward", args.reward)) if v}
    if args.rung == "rung0":
        curve = rung0(args.out, rung0_config(eval_every=5, **over))
    elif args.rung == "rung1" and args.run_dir:
        curve = rung1(args.run_dir, args.out, rung1_config(**over), game=args.game)
    else:
        print(f"unknown rung {args.rung!r} (rung0, or rung1 with --run-dir)", file=sys.stderr)
        return 2
    ev = sorted(curve["eval"].values(), key=lambda p: p["step"])
    print(f"own SR {ev[0]['sr']:.1f} -> {ev[-1]['sr']:.1f} in {curve['session_wall_s']:.0f} s; {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
