"""GRPO's training rollouts: groups of episodes from one start, stepped in parallel by the runner's env hosts.

A *start* is a train task and a perturbation seed z (:class:`Start`, written ``task@z`` as a dataset prompt). Its
group is ``group_size`` episodes of that same game under that same perturbation stream (the runner resets every
episode with ``episode_index=0``, so the noise is a function of (task, z) alone): the episodes differ only in the
policy's own samples, so GRPO's group baseline compares like with like.

Every action comes from the chain's SLM prompt (:func:`r2v_agents.prompts.build_prompt` of the step's context: goal,
visible admissible actions, recent history, observation), sampled once from the training model and grounded as the
chain's SLM grounds it (``admissible="snap"``), exactly as :class:`r2v_agents.slm.SLMPolicy` acts (k=1, no
verifier: the verifier picks among K candidates at evaluation time; training sharpens the distribution they are
drawn from; ``k > 1`` plays the deployed agent instead: K candidates, the verifier's pick). The policy records each
step's prompt and completion token ids (:class:`~r2v_agents.policy.TokenTrace`), which become the trainer's rows;
a sample that grounding replaced by another admissible action is trained as that action (:class:`ExecutedTokens`).

Episodes run through :func:`r2v_agents.episodes.drive`, the runner's own loop: env worker processes from its warm
:class:`~r2v_agents.workers.WorkerPool`, the policy batched over every live episode in this process, lockstep
batches (a rerun samples the same actions). Sampling draws are a function of (seed, step, episode, t, prompt):
two replicas of a start draw differently, and a resumed run draws what the killed one would have.

Example:
    >>> s = Start.parse("tw-cooking-000@10003")
    >>> s.task_id, s.z, s.prompt
    ('tw-cooking-000', 10003, 'tw-cooking-000@10003')
    >>> [x.prompt for x in training_starts(["a", "b", "c"], 4, z_start=100, seed=0)]
    ['a@100', 'c@101', 'b@102', 'c@103']
    >>> select_tasks(["tw-coin-1", "tw-coin-2", "tw-cooking-1"], ["tw-coin-*"])
    ['tw-coin-1', 'tw-coin-2']
"""

from __future__ import annotations

import fnmatch
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import r2v_envs  # noqa: F401 - registers the envs
from r2v_agents.episodes import Episode, LocalHost, RunConfig, RunContext, drive
from r2v_agents.likelihood import end_token_id
from r2v_agents.prompts import action_style, format_completion, parse_completion
from r2v_agents.samplers.transformers_sampler import TransformersSampler
from r2v_agents.slm import SLMPolicy
from r2v_agents.verifiers import verifier_for
from r2v_agents.workers import EnvSlots, WorkerPool
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.resolve import open_env


@dataclass(frozen=True)
class Start:
    """An episode start: a task and a perturbation seed z."""

    task_id: str
    z: int

    @property
    def prompt(self) -> str:
        return f"{self.task_id}@{self.z}"

    @classmethod
    def parse(cls, text: str) -> Start:
        task, sep, z = str(text).strip().rpartition("@")
        if not sep or not task or not z.lstrip("-").isdigit():
            raise ValueError(f"a training prompt names an episode start as 'task_id@z', got {str(text)[:80]!r}")
        return cls(task, int(z))


def select_tasks(tasks: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The ``tasks`` that match any of ``patterns`` (task ids or shell patterns, ``fnmatch``), in ``tasks``' order;
    all of them when no pattern is given. A pattern that matches nothing is an error, not a smaller run."""
    if not patterns:
        return list(tasks)
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(t, pattern) for t in tasks):
            raise UnknownChoiceError("train task (or pattern)", pattern, tasks)
    return [t for t in tasks if any(fnmatch.fnmatchcase(t, p) for p in patterns)]


def training_starts(tasks: Sequence[str], n: int, z_start: int, seed: int) -> list[Start]:
    """``n`` starts: the tasks in shuffled passes (every task once per pass), z counting up from ``z_start``."""
    if not tasks:
        raise ValueError("no training tasks")
    rng, order = random.Random(seed), []
    while len(order) < n:
        batch = list(tasks)
        rng.shuffle(batch)
        order += batch
    return [Start(t, z_start + i) for i, t in enumerate(order[:n])]


@dataclass
class StepSample:
    """One step of a training episode: what the model read and wrote (token ids), and the action played."""

    prompt_ids: list[int]
    completion_ids: list[int]
    """the tokens of the action the env executed: the model's own sample, or (when grounding replaced the sample
    by another admissible action, ``sampled`` False) that action in the completion format BC trained on"""
    logprobs: list[float]
    """the sampled tokens' log-probs at sampling time (empty when ``sampled`` is False)"""
    action: str
    sampled: bool = True
    sample_ids: list[int] | None = None
    """the tokens the model generated (None: ``completion_ids``); they differ when grounding replaced the sample"""

    def row_ids(self, advantage: float) -> list[int]:
        """The tokens a training row with ``advantage`` trains: the executed action's when it is pushed up (say the
        action that won, verbatim), the model's own sample when it is pushed down (unsay what it said: pushing
        down a grounded action's clean text leaves the text the model generated, e.g. an empty reply played as the
        fallback, as likely as before)."""
        return self.completion_ids if advantage > 0 or self.sample_ids is None else self.sample_ids


@dataclass
class PlayedEpisode:
    """One finished training episode of a group."""

    start: Start
    replica: int
    success: bool
    episode_return: float
    max_score: float | None
    steps: list[StepSample] = field(default_factory=list)
    error: str | None = None

    @property
    def columns(self) -> dict[str, Any]:
        """What a TRL reward function receives for this episode (besides prompts and completions)."""
        return {"task_id": self.start.task_id, "z": self.start.z, "success": self.success,
                "episode_return": self.episode_return, "max_score": self.max_score, "steps": len(self.steps),
                "error": self.error}


class GroupCollector:
    """Plays groups of episodes with a live model (see the module doc); keeps its env workers warm between calls."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], max_steps: int, *, workers: int = 2,
                 max_new_tokens: int = 12, temperature: float = 1.0, admissible: str = "snap", seed: int = 0,
                 batch_size: int = 16, max_prompt_tokens: int = 1024, k: int = 1):
        self.env_id, self.env_kwargs, self.max_steps, self.workers = env_id, dict(env_kwargs), max_steps, workers
        self.max_new_tokens, self.temperature, self.admissible = max_new_tokens, temperature, admissible
        self.seed, self.batch_size, self.max_prompt_tokens, self.k = seed, batch_size, max_prompt_tokens, k
        self._local: LocalHost | None = None
        self._benchmark: str | None = None

    def run_config(self, n_episodes: int) -> RunConfig:
        per_worker = max(1, -(-n_episodes // max(self.workers, 1)))
        return RunConfig(self.env_id, "", seeds=(0,), split="train", env_kwargs=self.env_kwargs,
                         max_steps=self.max_steps, workers=self.workers, envs_per_worker=per_worker, progress=False)

    def policy(self, model: Any, tokenizer: Any, step: int) -> SLMPolicy:
        """The SLM's policy over the live model, the acting candidate's tokens recorded: its own sample (``k=1``),
        or the benchmark verifier's pick among ``k`` candidates (the deployed SLM-only agent)."""
        sampler = TransformersSampler(model, tokenizer, max_new_tokens=self.max_new_tokens,
                                      temperature=self.temperature, batch_size=self.batch_size,
                                      max_prompt_tokens=self.max_prompt_tokens, seed=self.seed * 1_000_003 + step,
                                      style=action_style(self.env_id))
        verifier = verifier_for(self.env_id) if self.k > 1 else None
        return SLMPolicy(sampler, verifier=verifier, k=self.k, admissible=self.admissible, record_tokens=True)

    def play(self, model: Any, tokenizer: Any, starts: Sequence[Start], replicas: Sequence[int],
             step: int) -> list[PlayedEpisode]:
        """Play episode ``i`` from ``starts[i]`` as replica ``replicas[i]``; returns them in the same order."""
        cfg = self.run_config(len(starts))
        run = RunContext(cfg, "rl", self._benchmark_name(), self.max_steps)
        queue = [Episode(i, f"{s.task_id}@{s.z}#{r}", s.task_id, s.z) for i, (s, r) in enumerate(zip(starts, replicas))]
        pending = list(reversed(queue))
        records: dict[int, dict[str, Any]] = {}

        def next_episode() -> Episode | None:
            return pending.pop() if pending else None

        def on_finish(record: dict[str, Any], index: int) -> None:
            records[index] = record

        policy = self.policy(model, tokenizer, step)
        if self.workers == 0:  # in-process: one host whose env slots are kept between calls
            self._local = self._local or LocalHost(EnvSlots(self.env_id, self.env_kwargs, self.max_steps))
            drive([self._local], policy, run, next_episode, on_finish)
        else:
            with WorkerPool.borrow(cfg, min(self.workers, len(starts))) as hosts:
                drive(hosts, policy, run, next_episode, on_finish)
        # the episodes' last infos hold what the runner's records leave out (the game's max score)
        ground = ExecutedTokens(tokenizer, action_style(self.env_id))
        return [_played(records[i], queue[i].info, starts[i], replicas[i], ground) for i in range(len(starts))]

    def _benchmark_name(self) -> str:
        if self._benchmark is None:
            env = open_env(self.env_id, seed=0, **self.env_kwargs)
            try:
                self._benchmark = str(getattr(env.unwrapped, "benchmark", self.env_id))
            finally:
                env.close()
        return self._benchmark

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
            self._local = None


class ExecutedTokens:
    """The completion tokens a training row should carry: those of the action the env executed.

    The chain's SLM grounds a sample in the visible admissible actions (``admissible="snap"``): a sampled
    "go south" where only "go north" is admissible is played as "go north". The episode's return is the return of
    what was played, so a row trains the played action's tokens (:func:`r2v_agents.prompts.format_completion`, then
    the reply's end token, :func:`r2v_agents.likelihood.end_token_id`, as BC wrote them). Training the raw sample instead reinforced strings the env never saw: measured on the
    default run's SLM, 40% of the steps of a training batch were grounded to another action (k = 1 and k = 5 alike)
    and every RL run drifted away from admissible actions."""

    def __init__(self, tokenizer: Any, style: str):
        self.tokenizer, self.style = tokenizer, style

    def __call__(self, completion_ids: Sequence[int], action: str) -> list[int] | None:
        """None when the sample already says ``action``; else the tokens of ``action``."""
        text = self.tokenizer.decode(list(completion_ids), skip_special_tokens=True)
        if parse_completion(text, self.style) == " ".join(action.split()) or not action:
            return None
        ids = self.tokenizer(format_completion(action, self.tokenizer, self.style),
                             add_special_tokens=False)["input_ids"]
        return list(ids) + [end_token_id(self.tokenizer)]


def _played(record: dict[str, Any], info: dict[str, Any], start: Start, replica: int,
            ground: ExecutedTokens) -> PlayedEpisode:
    ep = record["episode"]
    steps = []
    for s in record["steps"]:
        if s.get("completion_ids") is None:
            continue
        executed = ground(s["completion_ids"], s["action"])
        sampled = executed is None
        steps.append(StepSample(list(s["prompt_ids"]), list(s["completion_ids"]) if sampled else executed,
                                list(s["completion_logprobs"]) if sampled else [], s["action"], sampled,
                                None if sampled else list(s["completion_ids"])))
    max_score = info.get("max_score")
    return PlayedEpisode(start, replica, bool(ep["success"]), float(ep["return"]),
                         None if max_score is None else float(max_score), steps, ep.get("error"))
