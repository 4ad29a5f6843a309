"""TRL's GRPO over whole episodes whose every step is one training row in the chain's per-step prompt format.

:class:`EpisodeGRPOTrainer` subclasses TRL's ``GRPOTrainer`` and overrides only where its completions come from
(``_generate_and_score_completions``); the loss (clipped importance ratio, token-level ``dapo`` normalisation, the
optional KL term), the optimizer, checkpoints and resume, logging and the reward functions are TRL's.

Per optimizer step the dataset hands over ``starts_per_step`` episode starts, each repeated ``num_generations``
times by TRL's sampler (:class:`r2v_train.rl.rollouts.Start` prompts ``task@z``). The override

1. plays every copy as one episode (:class:`~r2v_train.rl.rollouts.GroupCollector`: the runner's env workers, each
   action sampled from the live model with the chain's prompt of that step);
2. scores each *episode* with TRL's reward functions (``_calculate_rewards``; columns: success, return, ...);
3. turns rewards into group-relative advantages over the episodes of a start
   (:func:`r2v_train.rl.rewards.group_advantages`), and
4. expands each episode into its steps: row = (that step's prompt ids, the executed action's ids: the sample, or
   the admissible action grounding played instead, :class:`~r2v_train.rl.rollouts.ExecutedTokens`), advantage = the
   episode's, divided by its length over the batch's mean length (each episode weighs the same, so a group's rows
   sum to zero as its episodes' advantages do). The env's return credits every step of the episode, and the
   baseline is the same start's other episodes: like compared with like. With ``credit="tree"`` a step's advantage
   is instead the value of the branch it took minus that of the state it left, in the tree of the group's shared
   action prefixes (:func:`r2v_train.rl.rewards.tree_advantages`).

The number of rows varies with episode lengths; TRL splits a generation batch into ``steps_per_generation`` equal
micro-batches and drops a remainder, so the rows are padded to a multiple with copies whose loss mask is zero.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from trl import GRPOTrainer

from r2v_train.rl.rewards import group_advantages, tree_advantages
from r2v_train.rl.rollouts import GroupCollector, PlayedEpisode, Start


class EpisodeGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose completions are the steps of multi-turn episodes (see the module doc).

    Args:
        collector: plays the episodes.
        scale_rewards: ``group`` (GRPO) or ``none`` (Dr. GRPO) for the episode advantages.
        negative_weight: factor on the negative advantages (1: GRPO, 0: positive-only).
        positive_weight: factor on the positive advantages (1: GRPO, 0: negative-only).
        credit: ``episode`` (every step gets its episode's advantage) or ``tree`` (a step gets the value of the branch
            it took minus that of the node it left in the tree of the group's shared action prefixes,
            :func:`r2v_train.rl.rewards.tree_advantages`).
        *args, **kwargs: ``GRPOTrainer``'s (``model``, ``reward_funcs``, ``args``, ``train_dataset``,
            ``processing_class``, ``callbacks``).
    """

    def __init__(self, *args: Any, collector: GroupCollector, scale_rewards: str = "group",
                 negative_weight: float = 1.0, positive_weight: float = 1.0, credit: str = "episode",
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        if self.args.gradient_accumulation_steps != self.args.steps_per_generation or self.num_iterations != 1:
            # on-policy: every micro-batch of a step sees the weights its episodes were sampled with
            raise ValueError("EpisodeGRPOTrainer needs steps_per_generation == gradient_accumulation_steps and "
                             "num_iterations == 1")
        self.collector, self.episode_scale = collector, scale_rewards
        self.negative_weight, self.positive_weight, self.credit = negative_weight, positive_weight, credit
        self.last_episodes: list[PlayedEpisode] = []
        self.last_rollout_s = 0.0
        self.last_rows = 0

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        device = self.accelerator.device
        starts = [Start.parse(x["prompt"]) for x in inputs]
        g = self.num_generations
        if len(starts) % g or any(starts[i] != starts[i - i % g] for i in range(len(starts))):
            raise ValueError("each group of num_generations consecutive prompts must name one start (TRL's "
                             "RepeatSampler order)")
        model = self.accelerator.unwrap_model(self.model)
        was_training = model.training
        t0 = time.perf_counter()
        episodes = self.collector.play(model, self.processing_class, starts, [i % g for i in range(len(starts))],
                                       step=self.state.global_step)
        self.last_rollout_s = time.perf_counter() - t0
        model.train(was_training)
        self.last_episodes = episodes

        ep_inputs = [{"prompt": s.prompt, **e.columns} for s, e in zip(starts, episodes)]
        completions = ["\n".join(st.action for st in e.steps) for e in episodes]
        completion_ids = [[t for st in e.steps for t in st.completion_ids] for e in episodes]
        per_func = self._calculate_rewards(ep_inputs, [s.prompt for s in starts], completions, completion_ids)
        unscorable = torch.isnan(per_func).all(dim=1)
        rewards = (per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = float("nan")
        if self.credit == "tree":
            per_step = tree_advantages([[st.action for st in e.steps] for e in episodes], rewards.tolist(), g,
                                       self.episode_scale, self.negative_weight, self.positive_weight)
        else:
            advantages = group_advantages(rewards.tolist(), g, self.episode_scale, self.negative_weight,
                                          self.positive_weight)
            per_step = episode_credit(episodes, advantages)

        batch = self._rows(episodes, per_step, device)
        if self.beta != 0.0:  # TRL's loss reads the reference log-probs of the KL term from the batch
            batch["ref_per_token_logps"] = self._reference_logps(batch)
        self._log_episodes(episodes, rewards, g)
        return batch

    def _reference_logps(self, batch: dict[str, Any]) -> Any:
        """Per-token log-probs of the rows' completions under the starting SLM, as TRL computes them for ``beta > 0``
        (its reference model, or the base weights under a PEFT adapter)."""
        import torch
        from trl.trainer.utils import use_adapter

        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        keep, size = batch["completion_ids"].size(1), self.args.per_device_train_batch_size
        with torch.no_grad():
            if self.ref_model is not None:
                return self._get_per_token_logps_and_entropies(self.ref_model, ids, mask, keep, batch_size=size)[0]
            model = self.accelerator.unwrap_model(self.model)
            with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                return self._get_per_token_logps_and_entropies(self.model, ids, mask, keep, batch_size=size)[0]

    def _rows(self, episodes: Sequence[PlayedEpisode], per_step: Sequence[Sequence[float]],
              device: Any) -> dict[str, Any]:
        import torch
        from trl.trainer.utils import pad

        # A step whose advantage is 0 (its start's episodes all got the same reward; under tree credit, a step where
        # no branch parts) adds nothing to the gradient but its forward and backward passes: it is left out, as
        # DAPO's dynamic sampling leaves such groups out.
        rows = [(st.prompt_ids, st.row_ids(adv), adv, 1)
                for e, advs in zip(episodes, per_step) for st, adv in zip(e.steps, advs)
                if adv != 0.0 and st.completion_ids]
        if not rows:  # nothing to learn from this batch: one masked row keeps TRL's step well-formed
            e = next(e for e in episodes if any(st.completion_ids for st in e.steps))
            st = next(st for st in e.steps if st.completion_ids)
            rows = [(st.prompt_ids, st.completion_ids, 0.0, 0)]
        chunks = self.args.steps_per_generation
        for i in range(-len(rows) % chunks):  # masked copies: equal micro-batches, no loss
            p, c, _, _ = rows[i % len(rows)]
            rows.append((p, c, 0.0, 0))
        pad_id = self.processing_class.pad_token_id
        prompt = [torch.tensor(p) for p, _, _, _ in rows]
        completion = [torch.tensor(c) for _, c, _, _ in rows]
        prompt_ids = pad(prompt, padding_value=pad_id, padding_side="left").to(device)
        prompt_mask = pad([torch.ones_like(t) for t in prompt], padding_value=0, padding_side="left").to(device)
        completion_ids = pad(completion, padding_value=pad_id, padding_side="right").to(device)
        completion_mask = pad([torch.full_like(t, keep) for t, (_, _, _, keep) in zip(completion, rows)],
                              padding_value=0, padding_side="right").to(device)
        self.last_rows = sum(keep for _, _, _, keep in rows)
        return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
                "completion_mask": completion_mask,
                "advantages": torch.tensor([a for _, _, a, _ in rows], dtype=torch.float32, device=device),
                "num_items_in_batch": completion_mask.sum()}

    def _log_episodes(self, episodes: Sequence[PlayedEpisode], rewards: Any, g: int) -> None:
        import torch

        m = self._metrics["train"]
        ok = ~torch.isnan(rewards)
        m["reward"].append(rewards[ok].mean().item() if ok.any() else float("nan"))
        m["episodes/success"].append(sum(e.success for e in episodes) / len(episodes))
        m["episodes/steps"].append(sum(len(e.steps) for e in episodes) / len(episodes))
        m["episodes/errors"].append(float(sum(e.error is not None for e in episodes)))
        grouped = rewards.view(-1, g)
        flat = [bool(torch.nan_to_num(row, nan=0.0).std() == 0) for row in grouped]
        m["frac_reward_zero_std"].append(sum(flat) / len(flat))
        m["rows"].append(float(self.last_rows))
        m["rollout_s"].append(self.last_rollout_s)


def episode_credit(episodes: Sequence[PlayedEpisode], advantages: Sequence[float]) -> list[list[float]]:
    """GRPO's credit: every step of an episode gets the episode's advantage, scaled by (mean episode length / this
    episode's length) so that every episode weighs the same whatever its length. Unscaled, a group's long failed
    episodes (they run to the step cap) outnumber its short won ones row for row, so the batch's rows sum to a large
    negative advantage and the update pushes down whatever the model does, its good actions included. Steps without
    tokens (a fallback action) get 0."""
    lengths = [sum(1 for st in e.steps if st.completion_ids) for e in episodes]
    mean_len = sum(lengths) / max(sum(1 for n in lengths if n), 1)
    return [[adv * mean_len / n if st.completion_ids else 0.0 for st in e.steps] if n else [0.0] * len(e.steps)
            for e, adv, n in zip(episodes, advantages, lengths)]
