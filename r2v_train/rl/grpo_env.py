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

Either form plays an env in process (a registered id) or on an ``r2v serve`` server (its URL: the rollouts then
step :class:`r2v_envs.serving.client.RemoteEnv` sessions, the same bytes as in process). :class:`EpisodeRollout` also
mixes benchmarks in one run, as TRL's multi-environment mode does: given ``{name: id or URL}``, each example names its
env (``episode_dataset(..., environments=...)``: prompts ``"name:seed"`` and an ``environment`` column); for the
``environment_factory`` form, pass TRL a dict ``{name: tool_env_factory(spec)}`` and the same dataset.

Example:
    >>> list(episode_dataset(3, seed=10)["prompt"])
    ['10', '11', '12']
    >>> ds = episode_dataset(4, seed=0, environments=("textworld", "alfworld"))
    >>> list(ds["prompt"]), list(ds["environment"])
    (['textworld:0', 'alfworld:1', 'textworld:2', 'alfworld:3'], ['textworld', 'alfworld', 'textworld', 'alfworld'])
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import r2v_envs  # noqa: F401 - registers the envs
from r2v_agents.context import Context
from r2v_agents.prompts import build_prompt, parse_completion
from r2v_agents.samplers.transformers_sampler import TransformersSampler
from r2v_agents.slm import snap_to_admissible
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.resolve import open_env

ADMISSIBLE_MODES = ("free", "snap")


def episode_dataset(n: int, seed: int = 0, environments: Sequence[str] = ()):
    """A ``datasets.Dataset`` of ``n`` prompts, each the reset seed of one episode start (``seed``, ``seed + 1``...).

    With ``environments`` (names of a mixed run), example ``i`` plays ``environments[i % len]``: its prompt is
    ``"name:seed"`` (what a ``rollout_func`` receives) and its ``environment`` field names it (TRL's per-example
    environment selection)."""
    import datasets

    if not environments:
        return datasets.Dataset.from_dict({"prompt": [str(seed + i) for i in range(n)]})
    names = [environments[i % len(environments)] for i in range(n)]
    return datasets.Dataset.from_dict({"prompt": [f"{e}:{seed + i}" for i, e in enumerate(names)],
                                       "environment": names})


def env_reward(completions: Sequence[Any], env_reward: Sequence[float], **kwargs: Any) -> list[float]:
    """The reward function to pass to ``GRPOTrainer``: each rollout's env return (from :class:`EpisodeRollout`).

    Example:
        >>> env_reward(["a", "b"], env_reward=[1.0, 0.0])
        [1.0, 0.0]
    """
    return [float(r) for r in env_reward]


def _reset_seed(prompt: Any) -> tuple[str | None, int]:
    """``(environment name or None, reset seed)`` of a prompt ``"seed"`` or ``"name:seed"``."""
    text = (prompt if isinstance(prompt, str) else str(prompt)).strip()
    name, _, seed = text.rpartition(":")
    try:
        return name or None, int(seed)
    except ValueError:
        raise ValueError(f"each prompt of the training dataset names a reset seed, or env:seed in a mixed run (see "
                         f"episode_dataset), got {text[:80]!r}") from None


class EpisodeRollout:
    """A TRL ``rollout_func``: multi-turn episodes of an r2v env, sampled from the trainer's own model.

    Args:
        env_id: a registered id, e.g. ``"R2V/TextWorld-v0"``, or the URL of an ``r2v serve`` server; or, for a run
            that mixes benchmarks, ``{name: id or URL}`` (each prompt is then ``"name:seed"``).
        env_kwargs: constructor arguments (``perturbations``, ``suite``, ``task_id``...). Leave ``seed`` out: then
            the reset seed of each prompt also fixes the perturbation seed z (the env contract). For a URL they are
            :class:`~r2v_envs.serving.client.RemoteEnv`'s (``token``...): the server was started with the env's. In a
            mixed run, ``{name: kwargs}``.
        max_turns: actions per rollout (the episode may end sooner).
        max_new_tokens: tokens per action.
        max_obs_chars: each env reply is cut to its last ``max_obs_chars`` characters.
        admissible: ``"snap"`` maps each generated action to the closest visible admissible action before the env
            sees it (as :class:`r2v_agents.slm.SLMPolicy` does); the tokens stay what the model generated.
    """

    def __init__(self, env_id: str | Mapping[str, str], env_kwargs: Mapping[str, Any] | None = None, *,
                 max_turns: int = 4, max_new_tokens: int = 8, max_obs_chars: int = 400, admissible: str = "free"):
        if admissible not in ADMISSIBLE_MODES:
            raise UnknownChoiceError("admissible mode", admissible, ADMISSIBLE_MODES)
        if max_turns < 1 or max_new_tokens < 1:
            raise ValueError("max_turns and max_new_tokens must be >= 1")
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        # name -> (id or URL, kwargs); one unnamed (None) env unless the run mixes benchmarks
        self.specs: dict[str | None, tuple[str, dict]] = (
            {name: (spec, dict(self.env_kwargs.get(name) or {})) for name, spec in env_id.items()}
            if isinstance(env_id, Mapping) else {None: (env_id, self.env_kwargs)})
        self.max_turns, self.max_new_tokens, self.max_obs_chars = max_turns, max_new_tokens, max_obs_chars
        self.admissible = admissible
        self._envs: dict[str | None, list[Any]] = {}  # per env name, reused across batches: construct once, reset often
        self._sampler: tuple[tuple, TransformersSampler] | None = None  # per (model, tokenizer, temperature)
        self.episodes = 0

    # --------------------------------------------------------------------------------------- helpers
    def _env(self, i: int, name: str | None = None):
        if name not in self.specs:
            raise UnknownChoiceError("environment", name, [str(n) for n in self.specs])
        spec, kwargs = self.specs[name]
        pool = self._envs.setdefault(name, [])
        while len(pool) <= i:
            pool.append(open_env(spec, **kwargs))  # gym.make for an id, a server session for a URL
        return pool[i]

    def close(self) -> None:
        for pool in self._envs.values():
            for env in pool:
                env.close()
        self._envs = {}

    def _feedback(self, obs: str) -> str:
        return f"\nObservation:\n{obs[-self.max_obs_chars:]}\nAction:"

    def _sample(self, model, tok, seqs: list[list[int]], temperature: float) -> list[tuple[list[int], list[float]]]:
        """One action per sequence, from the one local-generation loop: sampled ids (cut after the first newline or
        end of turn) and their log-probs as TRL scores them, softmax(logits / temperature)."""
        key = (id(model), id(tok), temperature)
        if self._sampler is None or self._sampler[0] != key:  # the trainer's model object is the same every call
            training = model.training  # the sampler puts its model in eval mode; TRL logs by the mode it finds
            self._sampler = (key, TransformersSampler(model, tok, max_new_tokens=self.max_new_tokens,
                                                      temperature=temperature, max_prompt_tokens=None,
                                                      score="tempered"))
            model.train(training)
        return [(list(c.token_ids), list(c.token_logprobs)) for c in self._sampler[1].sample_ids(seqs)]

    # ------------------------------------------------------------------------------------ rollout_func
    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list]:
        model = trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
        tok = getattr(trainer, "processing_class", None) or trainer.tokenizer
        temperature = float(getattr(trainer.args, "temperature", 1.0) or 1.0)
        budget = getattr(trainer.args, "max_completion_length", None) or 256
        return self.rollout([_reset_seed(p) for p in prompts], model, tok, temperature, budget)

    def rollout(self, seeds: Sequence[int | tuple[str | None, int]], model: Any, tok: Any, temperature: float = 1.0,
                max_completion_tokens: int = 256) -> dict[str, list]:
        """Play one episode per reset seed (or ``(env name, seed)`` in a mixed run); the dict ``GRPOTrainer`` expects
        from a ``rollout_func``."""
        starts = [s if isinstance(s, tuple) else (None, s) for s in seeds]
        slots: dict[str | None, int] = {}  # the i-th episode of an env name in this batch uses that name's i-th env
        envs = []
        for name, _ in starts:
            envs.append(self._env(slots.get(name, 0), name))
            slots[name] = slots.get(name, 0) + 1
        n = len(seeds)
        prompt_ids, completion, logprobs, env_mask = [], [[] for _ in range(n)], [[] for _ in range(n)], \
            [[] for _ in range(n)]
        ctxs, infos, returns, live, won = [], [], [0.0] * n, list(range(n)), [False] * n
        for i, (_, seed) in enumerate(starts):
            obs, info = envs[i].reset(seed=int(seed))
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
                obs, reward, term, trunc, info = envs[i].step(action)
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
        self._env = open_env(env_id, **dict(env_kwargs or {}))  # an id, or an r2v serve URL
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
