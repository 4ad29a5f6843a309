"""Router training rows: features f_t, labels y_t (Eq. 7) and the rollout each row belongs to.

Example:
    >>> import numpy as np
    >>> d = RouterData(features=np.zeros((4, 2)), y=np.array([0, 1, 1, 0]), seed=np.array([0, 0, 1, 1]))
    >>> d.rollout_index()[1], len(d.select(d.y == 1))
    (2, 2)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from r2v_agents.shards import load_table
from r2v_agents.features import FeatureSpecError


@dataclass
class RouterData:
    """Router training rows: features f_t (N x d), labels y_t (Eq. 7), and who they belong to.

    ``seed`` is the perturbation seed z and ``episode`` the episode index under it; together they name the rollout
    over which Eq. 10 averages (``episode=None``: each seed value is one rollout). ``task`` is kept for reports.
    """

    features: np.ndarray
    y: np.ndarray
    seed: np.ndarray
    episode: np.ndarray | None = None
    task: np.ndarray | None = None
    feature_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        self.features = np.ascontiguousarray(self.features, dtype=np.float32)
        if self.features.ndim != 2 or len(self.features) == 0:
            raise FeatureSpecError(f"features must be a non-empty (N, d) array; got shape {self.features.shape}")
        if not np.isfinite(self.features).all():
            raise FeatureSpecError("features contain NaN or inf")
        n = len(self.features)
        self.y = np.asarray(self.y)
        if self.y.shape != (n,) or not np.isin(self.y, (0, 1)).all():
            raise ValueError(f"y must hold N={n} labels in {{0, 1}}; got shape {self.y.shape}")
        for name in ("seed", "episode", "task"):
            col = getattr(self, name)
            if col is not None and np.asarray(col).shape != (n,):
                raise ValueError(f"column {name!r} must have N={n} entries; got {np.asarray(col).shape}")
        if self.feature_names is not None:
            self.feature_names = tuple(self.feature_names)
            if len(self.feature_names) != self.features.shape[1]:
                raise FeatureSpecError(f"{len(self.feature_names)} feature names for {self.features.shape[1]} columns")

    def __len__(self) -> int:
        return len(self.features)

    def select(self, keep: np.ndarray) -> RouterData:
        """The rows where boolean mask ``keep`` is True, every column alike."""
        col = lambda a: None if a is None else np.asarray(a)[keep]  # noqa: E731
        return RouterData(features=self.features[keep], y=self.y[keep], seed=self.seed[keep],
                          episode=col(self.episode), task=col(self.task), feature_names=self.feature_names)

    def rollout_index(self) -> tuple[np.ndarray, int]:
        """Contiguous rollout ids 0..G-1 per row (grouping by seed, or by (seed, episode)), and G."""
        keys = np.asarray(self.seed)
        if self.episode is not None:
            keys = np.rec.fromarrays([keys, np.asarray(self.episode)])
        _, index = np.unique(keys, return_inverse=True)
        return index.ravel().astype(np.int64), int(index.max()) + 1

    @classmethod
    def from_table(cls, table: Any, feature_names: Sequence[str] | None = None) -> RouterData:
        """From a pyarrow Table, pandas DataFrame or mapping of columns.

        Features come from a list-valued ``features`` column or, with ``feature_names``, from those columns.
        The runner's router shards (``r2v_agents.shards``: ``z``, ``episode_id``, ``task_id``) are read as
        seed, episode and task.
        """
        cols = table.to_pydict() if hasattr(table, "to_pydict") else (
            {c: table[c].to_numpy() for c in table.columns} if hasattr(table, "columns") else dict(table))
        for ours, theirs in (("seed", "z"), ("episode", "episode_id"), ("task", "task_id")):
            if ours not in cols and theirs in cols:
                cols[ours] = cols[theirs]
        if "y" not in cols or "seed" not in cols:
            raise ValueError(f"router table needs columns y and seed (or z); has {sorted(cols)}")
        if feature_names is not None:
            missing = [c for c in feature_names if c not in cols]
            if missing:
                raise FeatureSpecError(f"router table lacks feature columns {missing}")
            feats = np.stack([np.asarray(cols[c], dtype=np.float32) for c in feature_names], axis=1)
        elif "features" in cols:
            feats = np.asarray([np.asarray(r, dtype=np.float32) for r in cols["features"]], dtype=np.float32)
        else:
            raise FeatureSpecError("router table has no 'features' column and no feature_names were given")
        get = lambda c: np.asarray(cols[c]) if c in cols else None  # noqa: E731
        return cls(features=feats, y=np.asarray(cols["y"]), seed=np.asarray(cols["seed"]), episode=get("episode"),
                   task=get("task"), feature_names=tuple(feature_names) if feature_names else None)

    @classmethod
    def read_parquet(cls, path: str | os.PathLike, feature_names: Sequence[str] | None = None) -> RouterData:
        import pyarrow.parquet as pq

        return cls.from_table(pq.read_table(os.fspath(path)), feature_names)

    @classmethod
    def from_run(cls, out_dir: str | os.PathLike) -> RouterData:
        """The router rows (f_t, y_t) of a runner output directory (its committed ``router-*.parquet`` shards)."""

        return cls.from_table(load_table(out_dir, "router"))


def fingerprint(*parts: RouterData) -> str:
    """A digest of the rows (features, labels, rollouts) a router was trained on."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        for arr in (part.features, part.y, part.rollout_index()[0]):
            h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()
