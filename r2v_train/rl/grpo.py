"""The ``rl`` stage of ``r2v rl``: TRL GRPO from a run's SLM on its train split, evaluated while it trains.

The loop is TRL's (``EpisodeGRPOTrainer.train``); this module wires it: the starting model and tokenizer, the
dataset of episode starts (:func:`r2v_train.rl.rollouts.training_starts`), the rollout collector on the chain's env
and step cap, the reward function, TRL's config, and the learning-curve callback whose evaluation is the SLM-only
protocol of Table 1 (K candidates, the benchmark's verifier, the chain's grounding) run through ``r2v eval``'s grid
(:func:`r2v_eval.grid.run_grid`), one ``r2v eval`` directory per evaluation.

It runs on CUDA unchanged (bf16 where the GPU has it); ``use_cpu`` is set only where no GPU is visible.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from r2v_agents.prompts import action_style
from r2v_agents.samplers.transformers_sampler import TransformersSampler
from r2v_agents.slm import SLMPolicy
from r2v_agents.verifiers import verifier_for
from r2v_eval.grid import GridConfig, cell_dir, run_grid
from r2v_eval.cells import cell_episodes, sr_metrics
from r2v_train.chain import collect
from r2v_train.chain.saving import bf16_default, cuda_available, use_checkpointing
from r2v_train.chain.stages import ChainConfig
from r2v_train.rl.config import RLConfig
from r2v_train.rl.curve import LearningCurve
from r2v_train.rl.rewards import resolve_reward
from r2v_train.rl.rollouts import GroupCollector, select_tasks, training_starts


def slm_evaluator(chain: ChainConfig, cfg: RLConfig, out_dir: str):
    """``evaluate(model, tokenizer, step)``: SLM-only SR of the live model on ``cfg.eval_split`` (composite
    perturbations, ``cfg.eval_seeds``), written as an ``r2v eval`` directory ``out_dir/evals/step-<N>``, and (with
    ``cfg.eval_policy``) the policy alone's (``slm:RUN?k=1``: one sample per step at the same temperature, no
    verifier) as ``policy_sr`` / ``policy_sr_ci``, in ``out_dir/evals/step-<N>-policy``."""
    env_id, rd = chain.env.env_id, chain.router_data

    def run(policy: Any, name: str, out: str, k: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        grid = GridConfig(env_ids=(env_id,), perturbations=(cfg.perturbations,), seeds=cfg.eval_seeds,
                          split=cfg.eval_split, tasks=cfg.eval_max_tasks, env_kwargs=dict(chain.env.env_kwargs),
                          max_steps=cfg.max_episode_steps or chain.env.max_steps, workers=chain.env.workers,
                          progress=False)
        run_grid(policy, name, grid, out, agent_record={"spec": f"rl step {os.path.basename(out)}", "k": k})
        cell = cell_dir(out, env_id, cfg.perturbations)
        eps = cell_episodes(cell)  # read once; SR only: the robustness columns would read every step shard
        return sr_metrics(cell, episodes=eps), list(eps.values())

    def evaluate(model: Any, tokenizer: Any, step: int) -> dict[str, Any]:
        was_training = model.training

        def sampler():  # the sampler of `slm:RUN` (r2v_train.chain.collect.make_sampler) over the live weights
            return TransformersSampler(model, tokenizer, max_new_tokens=rd.max_new_tokens, temperature=rd.temperature,
                                       seed=rd.sampler_seed, style=action_style(env_id))

        out = os.path.join(out_dir, "evals", f"step-{step:04d}")
        m, eps = run(SLMPolicy(sampler(), verifier_for(env_id), k=rd.k, admissible=rd.admissible), "slm", out, rd.k)
        point = {"split": cfg.eval_split, "sr": m["sr"], "sr_ci": m["sr_ci"], "episodes": len(eps),
                 "mean_return": sum(e["return"] for e in eps) / max(len(eps), 1),
                 "mean_steps": sum(e["steps"] for e in eps) / max(len(eps), 1), "dir": os.path.relpath(out, out_dir)}
        if cfg.eval_policy:
            alone = SLMPolicy(sampler(), None, k=1, admissible=rd.admissible)
            pm, _ = run(alone, "slm?k=1", f"{out}-policy", 1)
            point.update(policy_sr=pm["sr"], policy_sr_ci=pm["sr_ci"], policy_dir=os.path.relpath(f"{out}-policy",
                                                                                                  out_dir))
        model.train(was_training)
        return point

    return evaluate


def last_complete_checkpoint(folder: str) -> str | None:
    """The newest ``checkpoint-<N>`` whose ``trainer_state.json`` (the Trainer writes it last) reads whole: a kill
    in the middle of a save leaves a folder without it, which a resume must not pick."""
    if not os.path.isdir(folder):
        return None
    steps = sorted((int(n.split("-")[1]) for n in os.listdir(folder)
                    if n.startswith("checkpoint-") and n.split("-")[1].isdigit()), reverse=True)
    for n in steps:
        path = os.path.join(folder, f"checkpoint-{n}")
        try:
            with open(os.path.join(path, "trainer_state.json")) as fh:
                json.load(fh)
            return path
        except (OSError, ValueError):
            continue
    return None


def episode_trainer(cfg: RLConfig, model: Any, tokenizer: Any, collector: GroupCollector, dataset: Any,
                    output_dir: str, max_completion_length: int, callbacks: Sequence[Any] = ()) -> Any:
    """The :class:`~r2v_train.rl.trainer.EpisodeGRPOTrainer` of ``cfg`` over a model, its episode collector and a
    dataset of starts (``task@z`` prompts): TRL's config as ``r2v rl`` sets it, one place for the stage and the
    learning-ladder tests (tests/train/rl/test_learning_ladder.py) alike."""
    from trl import GRPOConfig

    from r2v_train.rl.trainer import EpisodeGRPOTrainer

    args = GRPOConfig(
        output_dir=output_dir, max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.episodes_per_step // cfg.micro_batches,
        gradient_accumulation_steps=cfg.micro_batches, steps_per_generation=cfg.micro_batches,
        num_generations=cfg.group_size, learning_rate=cfg.learning_rate, lr_scheduler_type="constant_with_warmup",
        warmup_steps=cfg.warmup_steps, beta=cfg.beta, epsilon=cfg.epsilon, temperature=cfg.temperature,
        loss_type="dapo", scale_rewards=cfg.scale_rewards, shuffle_dataset=False,
        max_completion_length=max_completion_length,
        save_strategy="steps", save_steps=cfg.eval_every, save_total_limit=2, logging_steps=1, report_to="none",
        seed=cfg.seed, use_cpu=not cuda_available(), bf16=bf16_default(None), dataloader_num_workers=0,
        disable_tqdm=not cfg.progress,
        # TRL turns activation checkpointing on by default: it recomputes every forward pass, which buys nothing
        # for the chain's small SLM (the rule of the other trainers: on from 100M parameters)
        gradient_checkpointing=use_checkpointing(None, model))
    return EpisodeGRPOTrainer(model=model, reward_funcs=[resolve_reward(cfg.reward)], args=args,
                              train_dataset=dataset, processing_class=tokenizer, callbacks=list(callbacks),
                              collector=collector, scale_rewards=cfg.scale_rewards,
                              negative_weight=cfg.negative_weight, positive_weight=cfg.positive_weight,
                              credit=cfg.credit)


def train_grpo(cfg: RLConfig, chain: ChainConfig, model_dir: str, split_dir: str, out_dir: str) -> dict[str, Any]:
    """Train, evaluate while training, save ``out_dir/model``; returns the stage's outputs."""
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.makedirs(out_dir, exist_ok=True)
    tasks = select_tasks(collect.load_split(split_dir)["used"]["train"], cfg.train_tasks)
    starts = training_starts(tasks, cfg.max_steps * cfg.starts_per_step, cfg.train_z_start, cfg.seed)
    dataset = datasets.Dataset.from_dict({"prompt": [s.prompt for s in starts]})
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    env_id = chain.env.env_id
    collector = GroupCollector(
        env_id, {**chain.env.env_kwargs, "perturbations": cfg.perturbations},
        cfg.max_episode_steps or chain.env.max_steps,
        workers=chain.env.workers if cfg.workers is None else cfg.workers,
        max_new_tokens=cfg.max_new_tokens or chain.router_data.max_new_tokens, temperature=cfg.temperature,
        admissible=chain.router_data.admissible, seed=cfg.seed, k=cfg.rollout_k)
    curve = LearningCurve(out_dir, slm_evaluator(chain, cfg, out_dir), cfg.eval_every,
                          max_wall_s=60.0 * cfg.max_wall_min, progress=cfg.progress)
    trainer = episode_trainer(cfg, model, tok, collector, dataset, os.path.join(out_dir, "checkpoints"),
                              max_completion_length=cfg.max_new_tokens or chain.router_data.max_new_tokens,
                              callbacks=[curve])
    curve.trainer = trainer
    last = last_complete_checkpoint(trainer.args.output_dir)
    if last is None:  # the starting SLM: the curve's first point
        curve.evaluate_at(0, trainer.accelerator.unwrap_model(trainer.model), tok)
    elif cfg.progress:
        print(f"[r2v rl] resuming from {last}", file=sys.stderr)
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=last)
    collector.close()
    final = os.path.join(out_dir, "model")
    trainer.save_model(final)
    tok.save_pretrained(final)
    step = trainer.state.global_step
    train_points = [p for p in curve.curve["train"].values() if p["step"] <= step]
    return {"model": final, "steps": step, "max_steps": cfg.max_steps, "train_tasks": len(tasks),
            "stopped_by_budget": step < cfg.max_steps, "episodes": sum(p["episodes"] for p in train_points),
            "train_wall_s": max((p["train_wall_s"] for p in train_points), default=0.0),
            "session_wall_s": time.perf_counter() - t0, "device": "cuda" if cuda_available() else "cpu",
            "curve": os.path.join(out_dir, "curve.json"), "plot": os.path.join(out_dir, "learning_curve.png")}
