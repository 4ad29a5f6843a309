"""``r2v rl``: GRPO (TRL) from a run's SLM over whole perturbed episodes, evaluated while it trains, then R2V on
the RL-tuned SLM.

Modules:

* :mod:`~r2v_train.rl.run`: the resumable stages and the paired comparison;
* :mod:`~r2v_train.rl.config`: the config dataclass with help text;
* :mod:`~r2v_train.rl.compare`: RL run against its source on the same episodes;
* :mod:`~r2v_train.rl.curve`: evaluation while training and its PNG;
* :mod:`~r2v_train.rl.plot`: the curve file and its PNG, without transformers (``r2v rl`` and ``r2v drrn``);
* :mod:`~r2v_train.rl.ladder`: the learning ladder's rungs, measured on the policy's own success;
* :mod:`~r2v_train.rl.grpo`: the rl stage;
* :mod:`~r2v_train.rl.trainer`: TRL's GRPOTrainer over whole episodes;
* :mod:`~r2v_train.rl.rollouts`: groups of episodes from one start through the runner's hosts;
* :mod:`~r2v_train.rl.rewards`: episode rewards and group-relative advantages;
* :mod:`~r2v_train.rl.grpo_env`: rollout_func and environment_factory for TRL (one-file use of them:
  ``examples/grpo_textworld.py``, cleanrl style).
"""

__all__ = [
    # the command
    "run", "config", "compare", "curve", "plot", "ladder",
    # GRPO
    "grpo", "trainer", "rollouts", "rewards",
    # TRL adapters
    "grpo_env",
]
