"""Synthetic router data shared by the router tests: rollouts whose failing steps a noisy feature separates only
partly, as on the real router data (validation AUC ~0.77 on the default)."""

from __future__ import annotations

import numpy as np

from r2v_agents.features import FEATURE_NAMES
from r2v_train.router.data import RouterData


def synthetic_rollouts(n_rollouts: int, seed: int, fail_rate: float, shift: float, step_slope: float = 0.0
                       ) -> RouterData:
    """``n_rollouts`` rollouts of Eq. 6's feature width: a share ``fail_rate`` fails and runs 12 steps (else 6),
    every step labelled by its rollout's outcome (Eq. 7); feature 0 is shifted by ``shift`` on failing rollouts and
    feature 1 grows by ``step_slope`` per step (a step count: long rollouts look riskier late)."""
    rng = np.random.default_rng(seed)
    feats, ys, zs = [], [], []
    for z in range(n_rollouts):
        fail = rng.random() < fail_rate
        steps = 12 if fail else 6
        f = rng.normal(size=(steps, len(FEATURE_NAMES))).astype(np.float32)
        f[:, 0] += shift * fail
        if step_slope:
            f[:, 1] += step_slope * np.arange(steps)
        feats.append(f)
        ys += [int(fail)] * steps
        zs += [z] * steps
    return RouterData(features=np.concatenate(feats), y=np.array(ys), seed=np.array(zs))
