"""Online RL on r2v's perturbed envs with TRL's ``GRPOTrainer`` (TRL 1.16): a ``rollout_func`` and an
``environment_factory``.

:class:`EpisodeRollout` is the ``rollout_func``: each dataset prompt names a reset seed (:func:`episode_dataset`),
and each of its ``num_generations`` copies plays that episode start (same task, same perturbation seed z: the
group-relative baseline of GRPO compares like with like) for up to ``max_turns`` actions. A rollout is one token
sequence: the r2v prompt of the first observation (:func:`r2v_agents.prompts.build_prompt`, ending ``Action:``)
as ``prompt_ids``, then, per turn, the sampled action tokens (cut at the first newline or EOS, ``env_mask`` 1)
followed by the env's reply ``"Observation:\\n<obs>\\nAction:"`` (``env_mask`` 0: scored by the env, not by the
model). ``logprobs`` are the sampling log-probs of each completion token (0 on env tokens), and the episode's
return comes back as the ``env_reward`` column, which :func:`env_reward` hands to the trainer as its reward. It
works with any local causal LM and tokenizer, with or without a chat template.

:class:`ToolEnv` (via :func:`tool_env_factory`) is the ``environment_factory`` form for chat models whose template
supports tool calls: ``reset()`` returns the goal and first observation, the one tool ``act(command)`` steps the
env, and ``get_reward()`` returns the episode's return.

Example:
    >>> list(episode_dataset(3, seed=10)["prompt"])
    ['10', '11', '12']
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import r2v_envs  # noqa: F401 - registers the envs
from r2v_agents.context import Context
from r2v_agents.prompts import build_prompt, parse_completion
from r2v_agents.slm import snap_to_admissible
from r2v_envs.errors import UnknownChoiceError

ADMISSIBLE_MODES = ("free", "snap")


def episode_dataset(n: int, seed: int = 0):
    """A ``datasets.Dataset`` of ``n`` prompts, each the reset seed of one episode start (``seed``, ``seed + 1``...)."""
    import datasets

    return datasets.Dataset.from_dict({"prompt": [str(seed + i) for i in range(n)]})


def env_reward(completions: Sequence[Any], env_reward: Sequence[float], **kwargs: Any) -> list[float]:
    """The reward function to pass to ``GRPOTrainer``: each rollout's env return (from :class:`EpisodeRollout`).

    Example:
        >>> env_reward(["a", "b"], env_reward=[1.0, 0.0])
        [1.0, 0.0]
    """
    return [float(r) for r in env_reward]


def _reset_seed(prompt: Any) -> int:
    text = prompt if isinstance(prompt, str) else str(prompt)
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"each prompt of the training dataset names a reset seed (see episode_dataset), got "
                         f"{text[:80]!r}") from None


class EpisodeRollout:
    """A TRL ``rollout_func``: multi-turn episodes of an r2v env, sampled from the trainer's own model.

    Args:
        env_id: a registered id, e.g. ``"R2V/TextWorld-v0"``.
        env_kwargs: constructor arguments (``perturbations``, ``suite``, ``task_id``...). Leave ``seed`` out: then
            the reset seed of each prompt also fixes the perturbation seed z (the env contract).
        max_turns: actions per rollout (the episode may end sooner).
        max_new_tokens: tokens per action.
        max_obs_chars: each env reply is cut to its last ``max_obs_chars`` characters.
        admissible: ``"snap"`` maps each generated action to the closest visible admissible action before the env
            sees it (as :class:`r2v_agents.slm.SLMPolicy` does); the tokens stay what the model generated.
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None, *, max_turns: int = 4,
                 max_new_tokens: int = 8, max_obs_chars: int = 400, admissible: str = "free"):
        if admissible not in ADMISSIBLE_MODES:
            raise UnknownChoiceError("admissible mode", admissible, ADMISSIBLE_MODES)
        if max_turns < 1 or max_new_tokens < 1:
            raise ValueError("max_turns and max_new_tokens must be >= 1")
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.max_turns, self.max_new_tokens, self.max_obs_chars = max_turns, max_new_tokens, max_obs_chars
        self.admissible = admissible
        self._envs: list[Any] = []  # reused across batches: construct once, reset often
        self._stop_ids: list[int] | None = None
        self.episodes = 0

    # --------------------------------------------------------------------------------------- helpers
    def _env(self, i: int):
        import gymnasium as gym

        while len(self._envs) <= i:
            self._envs.append(gym.make(self.env_id, **self.env_kwargs))
        return self._envs[i]

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs = []

    def _stops(self, tok) -> list[int]:
        if self._stop_ids is None:
            ids = {i for i in tok.get_vocab().values() if "\n" in tok.decode([i])}
            self._stop_ids = sorted(ids | {tok.eos_token_id})
        return self._stop_ids

    def _feedback(self, obs: str) -> str:
        return f"\nObservation:\n{obs[-self.max_obs_chars:]}\nAction:"

    def _sample(self, model, tok, seqs: list[list[int]], temperature: float) -> list[tuple[list[int], list[float]]]:
        """One action per sequence: sampled ids (cut after the first stop token) and their log-probs."""
        import torch

        width = max(len(s) for s in seqs)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs])
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
        device = next(model.parameters()).device
        stops = self._stops(tok)
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=True,
                                 temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=self.max_new_tokens,
                                 eos_token_id=stops, pad_token_id=pad, output_logits=True,
                                 return_dict_in_generate=True)
        new = out.sequences[:, width:].cpu()
        # log-probs as TRL scores them: softmax(logits / temperature); padding after a stop is cut (it still
        # gets logits: NOTES.md, pitfall 5)
        logp = torch.log_softmax(torch.stack(out.logits, dim=1).float().cpu() / temperature, dim=-1)
        tok_lp = logp.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        result = []
        for row in range(len(seqs)):
            toks = new[row].tolist()
            end = next((j + 1 for j, t in enumerate(toks) if t in stops), len(toks))
            result.append((toks[:end], [float(x) for x in tok_lp[row, :end]]))
        return result

    # ------------------------------------------------------------------------------------ rollout_func
    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list]:
        model = trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
        tok = getattr(trainer, "processing_class", None) or trainer.tokenizer
        temperature = float(getattr(trainer.args, "temperature", 1.0) or 1.0)
        budget = getattr(trainer.args, "max_completion_length", None) or 256
        return self.rollout([_reset_seed(p) for p in prompts], model, tok, temperature, budget)

    def rollout(self, seeds: Sequence[int], model: Any, tok: Any, temperature: float = 1.0,
                max_completion_tokens: int = 256) -> dict[str, list]:
        """Play one episode per reset seed; the dict ``GRPOTrainer`` expects from a ``rollout_func``."""
        n = len(seeds)
        prompt_ids, completion, logprobs, env_mask = [], [[] for _ in range(n)], [[] for _ in range(n)], \
            [[] for _ in range(n)]
        ctxs, infos, returns, live, won = [], [], [0.0] * n, list(range(n)), [False] * n
        for i, seed in enumerate(seeds):
            obs, info = self._env(i).reset(seed=int(seed))
            ctx = Context.start(str(info.get("goal", "")), obs, info)
            ctxs.append(ctx)
            infos.append(info)
            prompt_ids.append(tok(build_prompt(ctx), add_special_tokens=False)["input_ids"])
        for _turn in range(self.max_turns):
            if not live:
                break
            samples = self._sample(model, tok, [prompt_ids[i] + completion[i] for i in live], temperature)
            still = []
            for i, (ids, lps) in zip(live, samples):
                completion[i] += ids
                logprobs[i] += lps
                env_mask[i] += [1] * len(ids)
                action = parse_completion(tok.decode(ids, skip_special_tokens=True))
                if self.admissible == "snap":
                    action = snap_to_admissible(action, infos[i].get("admissible_actions") or ())
                obs, reward, term, trunc, info = self._env(i).step(action)
                returns[i] += float(reward)
                infos[i], won[i] = info, bool(info.get("won", False))
                if term or trunc:
                    continue
                reply = tok(self._feedback(obs), add_special_tokens=False)["input_ids"]
                if len(completion[i]) + len(reply) + self.max_new_tokens > max_completion_tokens:
                    continue  # no room for another turn
                completion[i] += reply
                logprobs[i] += [0.0] * len(reply)
                env_mask[i] += [0] * len(reply)
                still.append(i)
            live = still
        self.episodes += n
        return {"prompt_ids": prompt_ids, "completion_ids": completion, "logprobs": logprobs, "env_mask": env_mask,
                "env_reward": returns, "env_won": [float(w) for w in won]}


class ToolEnv:
    """An r2v env as a TRL ``environment_factory`` environment: the model acts through the one tool ``act``.

    Episodes start from consecutive reset seeds (``seed``, ``seed + 1``...), so without ``seed`` in ``env_kwargs``
    each episode has its own perturbation seed z. Public methods other than ``reset``/``get_reward`` become tools in
    TRL, so the helpers here are private.
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None, seed: int = 0):
        import gymnasium as gym

        self._env = gym.make(env_id, **dict(env_kwargs or {}))
        self._seeds = itertools.count(seed)
        self._return, self._done = 0.0, False

    def reset(self, **kwargs: Any) -> str:
        obs, info = self._env.reset(seed=next(self._seeds))
        self._return, self._done = 0.0, False
        return f"Goal: {info.get('goal', '')}\n\n{obs}"

    def act(self, command: str) -> str:
        """Type one command into the text environment and read its reply.

        Args:
            command: The command to send, for example "go east", "open fridge" or "take coin".

        Returns:
            The environment's reply to the command.
        """
        if self._done:
            return "The episode is over."
        obs, reward, term, trunc, _ = self._env.step(str(command))
        self._return += float(reward)
        self._done = bool(term or trunc)
        return obs

    def get_reward(self) -> float:
        return self._return


def tool_env_factory(env_id: str, env_kwargs: Mapping[str, Any] | None = None, seed: int = 0):
    """A zero-argument factory for ``GRPOTrainer(environment_factory=...)``; instance ``j`` starts at seed
    ``seed + 10_000 * j`` so concurrent instances play different episodes."""
    counter = itertools.count()

    def factory() -> ToolEnv:
        return ToolEnv(env_id, env_kwargs, seed=seed + 10_000 * next(counter))

    return factory
