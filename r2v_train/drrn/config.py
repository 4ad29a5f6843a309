"""``r2v drrn``'s config: DRRN on any env id whose info carries admissible actions (a dataclass with help text).

Example:
    >>> cfg = DRRNConfig(env_id="R2V/Scripted-v0", episodes=64, episodes_per_round=8)
    >>> cfg.rounds, cfg.perturbation_spec
    (8, None)
    >>> DRRNConfig(perturbations="noisy")
    Traceback (most recent call last):
    ...
    r2v_envs.errors.UnknownChoiceError: unknown perturbation setting 'noisy' (valid: none, flaky, partial, \
distractor, injection, composite)
    >>> DRRNConfig(gamma=1.5)
    Traceback (most recent call last):
    ...
    ValueError: gamma must be in [0, 1), got 1.5
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from r2v_envs.errors import UnknownChoiceError

ENCODERS = ("gru", "bag")  # r2v_agents.drrn.ENCODERS (this module stays free of torch)
SETTINGS = ("none", "flaky", "partial", "distractor", "injection", "composite")
RESUME_FREE = ("episodes", "workers", "progress", "threads", "eval_every", "checkpoint_every")
"""Fields a resumed run may change: its budget and how it runs, never what it learns from."""


@dataclass
class DRRNConfig:
    """DRRN (He et al., 2016) trained online from replay on the train tasks of one env id (``r2v drrn``)."""

    env_id: str = "R2V/TextWorld-v0"
    """registered env id (its info must carry admissible_actions); "module:Id" imports a user's module first"""
    env_kwargs: str = ""
    """JSON gym.make arguments besides perturbations, e.g. '{"suite": "small", "expert": false}'"""
    perturbations: str = "none"
    """perturbation setting of the training episodes: none, flaky, partial, distractor, injection, composite"""
    split: str = "train"
    """split whose tasks are trained on"""
    task_filter: str = ""
    """train only on tasks whose id contains this (e.g. "-easy-"); empty: every task of the split"""
    max_tasks: int = 0
    """first N matching tasks (0: all)"""
    episodes: int = 400
    """training episodes in total (a resumed run may raise it)"""
    episodes_per_round: int = 8
    """episodes collected in parallel between two rounds of updates"""
    max_steps: int = 30
    """step cap of an episode"""
    z_start: int = 100_000
    """perturbation seed z of the first training episode (later episodes count up): disjoint from r2v eval's
    seeds, so a test-split evaluation never replays a training noise stream"""
    gamma: float = 0.9
    """discount of the Q target r + gamma * max_a' Q_target(s', a')"""
    reward_scale: float = 1.0
    """the env's per-step reward is multiplied by this before it is learned from: TextWorld and BabyAI pay about 1
    for a win, ScienceWorld pays score deltas on a 0-100 scale (a win is 100 in all), which 0.01 puts on the scale
    the temperature and the Huber loss assume"""
    terminal_penalty: float = 0.0
    """subtracted from the reward of a step that ends the episode without paying anything (a loss: the game stopped
    without a win); 0: the env's rewards as they are"""
    learning_rate: float = 1e-3
    """Adam learning rate"""
    batch_size: int = 32
    """transitions per update"""
    updates_per_step: float = 0.5
    """gradient updates per environment step collected (a round's updates follow its episodes)"""
    replay_size: int = 20_000
    """transitions kept (oldest dropped first)"""
    priority_fraction: float = 0.25
    """share of each batch drawn from the transitions with positive reward (Jericho's DRRN prioritisation: the rare
    rewarded steps of a sparse game are replayed more often); 0: uniform replay"""
    learning_starts: int = 200
    """transitions in replay before the first update"""
    target_every: int = 100
    """updates between two copies of the online network into the target network"""
    temperature: float = 0.1
    """softmax exploration: actions drawn with probability softmax(Q / temperature) while training (Q is on the
    scale of the env's rewards: 1 for a win here, so 1.0 would be close to uniform)"""
    grad_clip: float = 5.0
    """gradient norm clip"""
    encoder: str = "gru"
    """state and action encoders: gru (He et al.) or bag (mean of hashed word and bigram embeddings: several times
    more updates per second on a CPU)"""
    history: int = 1
    """the agent's own last N actions in the state text (1: the action that led here, He et al.'s state)"""
    buckets: int = 8192
    """hash buckets of the word embedding"""
    embed: int = 64
    """word embedding size"""
    hidden: int = 128
    """GRU state size of the state and action encoders"""
    eval_every: int = 0
    """greedy evaluation on eval_split every N rounds (and after the last round); 0: none"""
    eval_split: str = "test"
    """split of the evaluation while training"""
    eval_tasks: int = 8
    """first N tasks of eval_split evaluated (0: all)"""
    workers: int = 0
    """env worker processes of the collection (0: envs stepped in this process)"""
    seed: int = 0
    """seed of the network, the task order, exploration and replay sampling"""
    threads: int = 1
    """torch CPU threads (no more than OMP_NUM_THREADS where it is set)"""
    checkpoint_every: int = 5
    """rounds between checkpoints (and after the last round)"""
    progress: bool = True
    """one progress line per round on stderr"""

    def __post_init__(self) -> None:
        if self.encoder not in ENCODERS:
            raise UnknownChoiceError("DRRN encoder", self.encoder, ENCODERS)
        if self.perturbations not in SETTINGS:
            raise UnknownChoiceError("perturbation setting", self.perturbations, SETTINGS)
        if not 0 <= self.gamma < 1:
            raise ValueError(f"gamma must be in [0, 1), got {self.gamma}")
        if self.reward_scale <= 0:
            raise ValueError(f"reward_scale must be > 0, got {self.reward_scale}")
        if self.terminal_penalty < 0:
            raise ValueError(f"terminal_penalty must be >= 0, got {self.terminal_penalty}")
        if not 0 <= self.priority_fraction <= 1:
            raise ValueError(f"priority_fraction must be in [0, 1], got {self.priority_fraction}")
        for name in ("episodes", "episodes_per_round", "max_steps", "batch_size", "replay_size", "target_every",
                     "checkpoint_every", "threads", "buckets", "embed", "hidden", "history"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("temperature", "updates_per_step", "learning_rate"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.workers < 0 or self.eval_every < 0 or self.max_tasks < 0 or self.eval_tasks < 0:
            raise ValueError("workers, eval_every, max_tasks and eval_tasks must be >= 0")
        kw = self.kwargs()
        if "perturbations" in kw:
            raise ValueError("give the perturbation setting as --perturbations, not inside --env-kwargs")

    @property
    def rounds(self) -> int:
        return -(-self.episodes // self.episodes_per_round)

    @property
    def perturbation_spec(self) -> str | None:
        return None if self.perturbations == "none" else self.perturbations

    def kwargs(self) -> dict[str, Any]:
        """``env_kwargs`` parsed (a JSON object)."""
        kw = json.loads(self.env_kwargs) if self.env_kwargs else {}
        if not isinstance(kw, dict):
            raise ValueError("--env-kwargs must be a JSON object")
        return kw

    def make_kwargs(self, perturbations: str | None = None) -> dict[str, Any]:
        """``gym.make`` keyword arguments of a training (default) or evaluation episode."""
        return {**self.kwargs(), "perturbations": self.perturbation_spec if perturbations is None
                else (None if perturbations == "none" else perturbations)}

    def learning_fields(self) -> dict[str, Any]:
        """Every field a resumed run must share with the run it resumes."""
        return {k: v for k, v in asdict(self).items() if k not in RESUME_FREE}

    def differing_fields(self, old: dict[str, Any]) -> list[str]:
        """The learning fields where ``old`` (a saved run's) differs; a field the saved run predates counts as its
        default."""
        defaults = {f.name: f.default for f in fields(DRRNConfig)}
        return sorted(k for k, v in self.learning_fields().items() if old.get(k, defaults[k]) != v)


@dataclass
class DRRNArgs(DRRNConfig):
    """Train DRRN on an env's train tasks: episodes collected through the runner, updates from replay, a
    checkpoint every few rounds (a rerun resumes, also after SIGKILL), the learning curve as JSON and PNG."""

    run_dir: str = "runs/drrn"
    """run directory (a rerun resumes): model.pt, checkpoint.pt, curve.json, learning_curve.png, summary.json"""

    def config(self) -> DRRNConfig:
        return DRRNConfig(**{f.name: getattr(self, f.name) for f in fields(DRRNConfig)})
