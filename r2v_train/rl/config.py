"""``r2v rl``'s config: GRPO from a run's SLM, in the chain's per-step prompt format (a dataclass with help text).

Example:
    >>> cfg = RLConfig(starts_per_step=4, group_size=4)
    >>> cfg.episodes_per_step
    16
    >>> RLConfig(reward="score")
    Traceback (most recent call last):
    ...
    r2v_envs.errors.UnknownChoiceError: unknown reward 'score' (valid: success, success_return, module:function)
    >>> RLConfig(negative_weight=0, positive_weight=0)
    Traceback (most recent call last):
    ...
    ValueError: negative_weight and positive_weight are both 0: no episode would be trained
"""

from __future__ import annotations

from dataclasses import dataclass

from r2v_envs.errors import UnknownChoiceError

REWARDS = ("success", "success_return")
SCALES = ("group", "none")
CREDITS = ("episode", "tree")


@dataclass
class RLConfig:
    """Online GRPO on the run's train split, then R2V rerun on the RL-tuned SLM (``r2v rl``)."""

    max_steps: int = 40
    """GRPO optimizer steps"""
    starts_per_step: int = 8
    """episode starts (train task, perturbation seed z) per optimizer step"""
    group_size: int = 4
    """episodes played from each start (GRPO's group: same task, same z, fresh samples); their returns are the
    baseline each episode is compared with"""
    micro_batches: int = 4
    """gradient-accumulation micro-batches the step rows of one optimizer step are split into (memory only)"""
    learning_rate: float = 1e-4
    """AdamW learning rate (constant after a short warm-up)"""
    warmup_steps: int = 2
    """linear warm-up steps of the learning rate"""
    beta: float = 0.0
    """KL coefficient against the starting SLM (0: no reference model, as TRL's default)"""
    epsilon: float = 0.2
    """PPO/GRPO clipping range of the importance ratio"""
    temperature: float = 1.0
    """sampling temperature of the training rollouts (the chain's SLM samples at 1.0)"""
    rollout_k: int = 1
    """candidates per step of the training rollouts: 1 plays the model's own sample (on-policy GRPO); K > 1 plays
    the deployed SLM (K candidates, the benchmark's verifier picks one, as the evaluation acts) and trains on the
    picked candidate's tokens (off-policy: the episodes are the ones the deployed agent would play)"""
    scale_rewards: str = "group"
    """advantage scaling: group (divide by the group's reward std, GRPO) or none (Dr. GRPO)"""
    negative_weight: float = 1.0
    """scale of the negative advantages (episodes below their group's mean): 1 is GRPO; 0 trains only on the
    episodes that beat their group (positive-only); above 1 weights the failures' steps more (a pushed-down
    action gives its mass to the others in proportion to theirs, so the candidates the verifier ranks stay
    diverse)"""
    positive_weight: float = 1.0
    """scale of the positive advantages (episodes above their group's mean): 1 is GRPO; 0 trains only on the
    failures, pushing their actions down (negative-sample reinforcement: the mass moves to the other actions in
    proportion to theirs, so the policy keeps the spread that K candidates + a verifier need)"""
    credit: str = "episode"
    """how an episode's reward reaches its steps: episode (GRPO: every step gets the episode's group-relative
    advantage) or tree (the group's episodes share a start, so those that share a prefix of actions passed through
    the same states: a step gets the mean reward of the branch it took minus that of the node it left, and only
    steps where the group's episodes parted get credit; r2v_train.rl.rewards.tree_advantages)"""
    reward: str = "success"
    """episode reward: success (1 if won), success_return (won + 0.5 x return / max score), or a TRL reward
    function "module:function" receiving the episode columns (r2v_train.rl.rewards)"""
    train_tasks: tuple[str, ...] = ()
    """the train games to train on: task ids or shell patterns over the run's train split (e.g.
    'tw-coin_collector-*'); default all of them. A curriculum: fewer games recur more often in the same budget"""
    train_z_start: int = 10_000
    """perturbation seed z of the first training start (later starts count up): disjoint from the chain's replay,
    router-data and evaluation seeds"""
    perturbations: str = "composite"
    """perturbation setting of the training episodes"""
    max_episode_steps: int | None = None
    """step cap of a training episode (None: the chain's env.max_steps)"""
    max_new_tokens: int | None = None
    """token cap of a sampled action (None: the chain's router_data.max_new_tokens)"""
    workers: int | None = None
    """env worker processes of the rollouts (None: the chain's env.workers)"""
    eval_every: int = 10
    """evaluate (and checkpoint) every N optimizer steps, and after the last"""
    eval_split: str = "valid"
    """split of the evaluation while training (the test split is kept for the final comparison)"""
    eval_seeds: tuple[int, ...] = (0,)
    """perturbation seeds z of the evaluation while training"""
    eval_max_tasks: int = 0
    """first N tasks of ``eval_split`` (0: all)"""
    eval_policy: bool = True
    """also evaluate the policy alone while training (its own sample per step, k = 1, no verifier): the success RL
    acts on, beside SLM-only's, which the verifier's pick among K candidates shapes"""
    seed: int = 0
    """seed of the trainer, the start order and the rollout sampling"""
    threads: int = 2
    """torch CPU threads (no more than OMP_NUM_THREADS where it is set)"""
    max_wall_min: float = 0.0
    """stop training (checkpointed, evaluated) once this many minutes of training have passed; 0: no limit"""
    router: bool = True
    """after training, rerun the chain's router-data and router stages on the RL-tuned SLM and evaluate Table 1's
    methods on it, with paired differences against the source run"""
    progress: bool = True
    """progress lines and bars on stderr"""

    def __post_init__(self) -> None:
        if self.reward not in REWARDS and ":" not in self.reward:
            raise UnknownChoiceError("reward", self.reward, [*REWARDS, "module:function"])
        if self.credit not in CREDITS:
            raise UnknownChoiceError("credit", self.credit, CREDITS)
        if self.scale_rewards not in SCALES:
            raise UnknownChoiceError("reward scaling", self.scale_rewards, SCALES)
        for name in ("negative_weight", "positive_weight"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.negative_weight == 0 and self.positive_weight == 0:
            raise ValueError("negative_weight and positive_weight are both 0: no episode would be trained")
        for name in ("max_steps", "starts_per_step", "group_size", "micro_batches", "eval_every", "rollout_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError("group_size must be >= 2: GRPO's baseline is the group's mean return")
        if self.episodes_per_step % self.micro_batches:
            raise ValueError(f"starts_per_step x group_size ({self.episodes_per_step}) must be a multiple of "
                             f"micro_batches ({self.micro_batches})")
        self.eval_seeds = tuple(int(s) for s in self.eval_seeds)
        self.train_tasks = tuple(str(t) for t in self.train_tasks)

    @property
    def episodes_per_step(self) -> int:
        return self.starts_per_step * self.group_size


@dataclass
class RLArgs(RLConfig):
    """GRPO from a run's SLM on its train split (TRL), evaluated while it trains; then the router data, the router
    and Table 1 rerun on the RL-tuned SLM, compared with the source run on the same episodes. Resumable."""

    run_dir: str = "runs/r2v"
    """the source run (made by `r2v pipeline` or `r2v train`): its SLM, split and evaluation config"""
    out_dir: str = ""
    """the RL run directory (a rerun resumes); default: RUN_DIR-rl"""
    only: tuple[str, ...] = ()
    """run only these stages: rl, router_data, router, evaluate (default: all)"""

    def config(self) -> RLConfig:
        from dataclasses import fields

        return RLConfig(**{f.name: getattr(self, f.name) for f in fields(RLConfig)})

    def target(self) -> str:
        return self.out_dir or self.run_dir.rstrip("/\\") + "-rl"
