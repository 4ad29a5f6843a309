"""r2v_envs: perturbed Gymnasium text environments for agent benchmarks.

Importing this package only registers the environments (string entry points): it does not import torch,
textworld, alfworld or evalplus. Use ``import r2v_envs`` then ``gym.make("R2V/TextWorld-v0", seed=z)``, or
``gym.make("r2v_envs:R2V/TextWorld-v0", seed=z)`` with no import at all.
"""

from __future__ import annotations

import gymnasium as gym

__version__ = "0.1.0"

# id -> (entry point, default step cap). The step cap is Gymnasium's TimeLimit, so `terminated` (won/lost)
# and `truncated` (out of steps) stay separate; override it with gym.make(id, max_episode_steps=N).
ENV_IDS: dict[str, tuple[str, int]] = {
    "R2V/TextWorld-v0": ("r2v_envs.textworld.env:make", 50),
    "R2V/ALFWorld-v0": ("r2v_envs.alfworld.env:make", 50),
    "R2V/HumanEval-v0": ("r2v_envs.humaneval.env:make", 12),
    "R2V/TerminalBench-v0": ("r2v_envs.terminalbench.env:make", 40),
    "R2V/BabyAI-v0": ("r2v_envs.babyai.env:make", 64),
    # the gold sequences of one test variation per task type take 4-192 actions (median 19): the cap covers them
    "R2V/ScienceWorld-v0": ("r2v_envs.scienceworld.env:make", 200),
    "R2V/Scripted-v0": ("r2v_envs.scripted:make", 20),
}

# Teach Gymnasium's AsyncVectorEnv to move our text observations through shared memory (r2v_envs/vector.py).
from r2v_envs import vector as _vector  # noqa: E402,F401

# perturb(): the same wrappers on a user's own text env (r2v_envs/adapter.py).
from r2v_envs.adapter import perturb, register_text_env  # noqa: E402,F401

for _id, (_entry_point, _max_steps) in ENV_IDS.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_entry_point, max_episode_steps=_max_steps)
