"""The R2V router r_psi: a small MLP from the 15 risk features to an escalation probability (Appendix C).

Architecture (Appendix C): input standardisation -> Linear(15, 128) -> BatchNorm -> GELU -> Dropout(0.2)
-> Linear(128, 64) -> BatchNorm -> GELU -> Dropout(0.2) -> Linear(64, 1), then logits / T + b with a
learnable post-hoc temperature T (Guo et al., 2017) and bias b (0 unless Platt scaling fits it), both fitted on
validation data after training (``r2v_train.router.calibration``); ``predict_proba`` applies the sigmoid. About
10.8k parameters. Dropout is ``FastDropout`` (same semantics, cheaper masks on CPU). ``RouterEnsemble`` (a bagged
router, ``r2v_train.router.bagging``) averages several such MLPs under one calibration and saves and loads the same
way (its ``arch`` records ``members``).

The feature standardisation lives inside the model as buffers: callers pass raw features. ``save_router``
stores the feature specification beside the weights: ``names`` in order, and ``mean`` / ``std``, the
statistics the model applies itself (recorded for checking; callers must not apply them again, which
``r2v_agents.routers.MLPRouter`` respects by checking for the model's ``feature_mean`` buffer). So a router
cannot silently be fed features in another order or scale: ``load_router`` checks the spec against the
weights and against the caller's feature names and raises ``FeatureSpecError`` on mismatch.

This module imports torch at the top: it is only imported where a learned router is used
(``r2v_agents/__init__.py`` does not import it).

Example:
    >>> import numpy as np, tempfile, os
    >>> model = RouterMLP(in_features=3)
    >>> spec = {"names": ["a", "b", "c"], "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}
    >>> model.set_standardisation(spec["mean"], spec["std"])
    >>> path = os.path.join(tempfile.mkdtemp(), "router.pt")
    >>> save_router(path, model, spec, threshold=0.5, meta={"mode": "cvar"})
    >>> loaded, spec2, threshold, meta = load_router(path, expected_features=["a", "b", "c"])
    >>> loaded.predict_proba(np.zeros((2, 3))).shape, threshold, meta["mode"]
    ((2,), 0.5, 'cvar')
    >>> load_router(path, expected_features=["a", "c", "b"])
    Traceback (most recent call last):
    ...
    r2v_agents.features.FeatureSpecError: router features differ from the expected ones at position 1: ...
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from r2v_agents.features import FeatureSpecError
from r2v_envs.fileio import atomic_write

FORMAT = "r2v-router/1"


class FastDropout(nn.Module):
    """Inverted dropout with masks from 15-bit slices of a fast random stream.

    Same semantics as ``nn.Dropout`` (p is quantised to 1/32768), several times faster on CPU: torch's Bernoulli
    sampler costs 3.8 ms per 4096x128 mask, which made dropout the largest cost of a router training step. On
    CPU the bits come from numpy's SFC64 (twice as fast as torch's Mersenne twister here); its seed is drawn from
    torch's default generator on first use, so ``torch.manual_seed`` still governs the masks, and
    :meth:`reseed` restarts the stream (the router trainer reseeds from torch's generator every epoch, so a
    resumed run draws the same masks). Other devices use torch's own generator.
    """

    def __init__(self, p: float):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout p must be in [0, 1); got {p}")
        self.p = float(p)
        self._bits: np.random.SFC64 | None = None

    def reseed(self, seed: int | None = None) -> None:
        """Restart the mask stream from ``seed`` (None: a seed drawn from torch's default generator)."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()))
        self._bits = np.random.SFC64(seed)

    def _words(self, count: int, device: torch.device) -> torch.Tensor:
        if device.type != "cpu":
            return torch.empty(count, dtype=torch.int64, device=device).random_()
        if self._bits is None:
            self.reseed()
        return torch.from_numpy(self._bits.random_raw(count).view(np.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        n = x.numel()
        # the low 15 bits of each 16-bit slice (torch's random_() leaves the int64 sign bit 0)
        bits = self._words((n + 3) // 4, x.device).view(torch.int16)[:n].view(x.shape) & 0x7FFF
        # keep = 1[bits >= p * 2^15] in integer arithmetic: (bits - threshold) >> 15 is -1 below it, 0 above.
        # Half the cost of a comparison plus a bool -> float cast, which are slow on int16 on CPU.
        keep = bits.sub_(int(round(self.p * 32768))).bitwise_right_shift_(15).add_(1)
        # a float mask with the 1/(1-p) scale folded in: cheaper than masked_fill or a bool multiply on CPU
        return x * keep.to(x.dtype).mul_(1.0 / (1.0 - self.p))

    def extra_repr(self) -> str:
        return f"p={self.p}"


class RouterMLP(nn.Module):
    """r_psi: R^d -> [0, 1]; ``forward`` returns tempered logits, ``predict_proba`` probabilities."""

    def __init__(self, in_features: int = 15, hidden: Sequence[int] = (128, 64), dropout: float = 0.2):
        super().__init__()
        if in_features < 1 or not hidden or min(hidden) < 1 or not 0 <= dropout < 1:
            raise ValueError(f"bad router architecture: in_features={in_features}, hidden={hidden}, "
                             f"dropout={dropout}")
        self.in_features, self.hidden, self.dropout = int(in_features), tuple(int(h) for h in hidden), float(dropout)
        layers: list[nn.Module] = []
        width = self.in_features
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.GELU(), FastDropout(self.dropout)]
            width = h
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)
        self.register_buffer("feature_mean", torch.zeros(self.in_features))
        self.register_buffer("feature_std", torch.ones(self.in_features))
        # log T keeps T > 0; frozen while the router trains, fitted afterwards on validation data. The bias stays
        # 0 under plain temperature scaling; Platt scaling fits it too (r2v_train.router.calibration.fit_platt).
        self.log_temperature = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.logit_bias = nn.Parameter(torch.zeros(()), requires_grad=False)

    @property
    def temperature(self) -> float:
        return float(self.log_temperature.exp())

    def set_temperature(self, temperature: float, bias: float = 0.0) -> None:
        """Post-hoc calibration: logits become raw / temperature + bias."""
        if not temperature > 0 or not np.isfinite(bias):
            raise ValueError(f"temperature must be > 0 and bias finite; got {temperature}, {bias}")
        with torch.no_grad():
            self.log_temperature.fill_(float(np.log(temperature)))
            self.logit_bias.fill_(float(bias))

    def set_standardisation(self, mean: Sequence[float] | np.ndarray, std: Sequence[float] | np.ndarray) -> None:
        mean_t = torch.as_tensor(np.asarray(mean, dtype=np.float32))
        std_t = torch.as_tensor(np.asarray(std, dtype=np.float32))
        if mean_t.shape != (self.in_features,) or std_t.shape != (self.in_features,) or bool((std_t <= 0).any()):
            raise FeatureSpecError(f"standardisation needs {self.in_features} means and positive stds; got shapes "
                                   f"{tuple(mean_t.shape)} and {tuple(std_t.shape)}")
        self.feature_mean.copy_(mean_t)
        self.feature_std.copy_(std_t)

    def untempered_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Logits before temperature scaling, shape (N,); ``x`` holds raw (unstandardised) features."""
        return self.net((x - self.feature_mean) / self.feature_std).squeeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.untempered_logits(x) / self.log_temperature.exp() + self.logit_bias

    @torch.no_grad()
    def predict_proba(self, features: np.ndarray, batch_size: int = 65536) -> np.ndarray:
        """Escalation probabilities p_t = r_psi(f_t) for raw features of shape (N, d) or (d,), in eval mode."""
        x = np.asarray(features, dtype=np.float32)
        single = x.ndim == 1
        x = x[None, :] if single else x
        if x.ndim != 2 or x.shape[1] != self.in_features:
            raise FeatureSpecError(f"router expects features of shape (N, {self.in_features}); got {x.shape}")
        if not np.isfinite(x).all():
            raise FeatureSpecError("router features contain NaN or inf")
        was_training = self.training
        self.eval()
        try:
            out = [torch.sigmoid(self(torch.from_numpy(x[i:i + batch_size]))).numpy()
                   for i in range(0, len(x), batch_size)]
        finally:
            self.train(was_training)
        probs = np.concatenate(out) if out else np.zeros(0, dtype=np.float32)
        return probs[0:1].reshape(()) if single else probs


class RouterEnsemble(RouterMLP):
    """A bagged router: the mean failure probability of ``members`` ``RouterMLP`` members, then one calibration.

    ``untempered_logits`` is the logit of the members' mean probability (each member at its own temperature 1 and
    bias 0), so ``forward`` / ``predict_proba`` apply one temperature and bias (fitted on the ensemble's output,
    ``r2v_train.router.bagging``) exactly as for a single router, and ``MLPRouter`` uses it unchanged. Each member
    standardises with its own buffers (it may have been trained on a subset of the rollouts); the ensemble's
    ``feature_mean`` / ``feature_std`` record the whole training set's statistics for the feature spec.

    Example:
        >>> import numpy as np
        >>> e = RouterEnsemble(in_features=3, hidden=(4,), members=3)
        >>> e.predict_proba(np.zeros((2, 3))).shape, len(e.members)
        ((2,), 3)
    """

    def __init__(self, in_features: int = 15, hidden: Sequence[int] = (128, 64), dropout: float = 0.2,
                 members: int = 2):
        super().__init__(in_features, hidden, dropout)
        if members < 1:
            raise ValueError(f"an ensemble needs members >= 1; got {members}")
        del self.net  # the members carry the weights
        self.members = nn.ModuleList(RouterMLP(in_features, hidden, dropout) for _ in range(int(members)))

    @classmethod
    def of(cls, members: Sequence[RouterMLP], mean: Sequence[float] | np.ndarray, std: Sequence[float] | np.ndarray
           ) -> RouterEnsemble:
        """An ensemble holding copies of trained ``members`` (their temperature and bias reset to 1 and 0)."""
        first = members[0]
        e = cls(first.in_features, first.hidden, first.dropout, len(members))
        for mine, theirs in zip(e.members, members):
            mine.load_state_dict(theirs.state_dict())
            mine.set_temperature(1.0, 0.0)
        e.set_standardisation(mean, std)
        e.eval()
        return e

    def member_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Untempered logits of every member, shape (members, N)."""
        return torch.stack([m.untempered_logits(x) for m in self.members])

    @staticmethod
    def pool(member_logits: torch.Tensor) -> torch.Tensor:
        """The logit of the mean member probability (clipped away from 0 and 1 so it stays finite)."""
        p = torch.sigmoid(member_logits.double()).mean(0).clamp(1e-7, 1 - 1e-7)
        return torch.logit(p).to(member_logits.dtype)

    def untempered_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.member_logits(x))


def check_feature_spec(spec: Mapping[str, Any], in_features: int | None = None,
                       expected_features: Sequence[str] | None = None) -> None:
    """Raise ``FeatureSpecError`` unless ``spec`` has matching names/mean/std (and matches the expectations)."""
    missing = [k for k in ("names", "mean", "std") if k not in spec]
    if missing:
        raise FeatureSpecError(f"feature spec lacks {missing}; it needs names, mean and std")
    names, mean, std = list(spec["names"]), np.asarray(spec["mean"]), np.asarray(spec["std"])
    if len(set(names)) != len(names):
        raise FeatureSpecError(f"feature names repeat: {names}")
    if mean.shape != (len(names),) or std.shape != (len(names),):
        raise FeatureSpecError(f"feature spec has {len(names)} names but mean/std shapes {mean.shape}/{std.shape}")
    if in_features is not None and len(names) != in_features:
        raise FeatureSpecError(f"feature spec names {len(names)} features but the router takes {in_features}")
    if expected_features is not None:
        expected = list(expected_features)
        if expected != names:
            at = next((i for i, (a, b) in enumerate(zip(names, expected)) if a != b), min(len(names), len(expected)))
            raise FeatureSpecError(
                f"router features differ from the expected ones at position {at}: the router was trained on "
                f"{names} but is given {expected}")


def save_router(path: str | os.PathLike, model: RouterMLP, feature_spec: Mapping[str, Any], threshold: float,
                meta: Mapping[str, Any] | None = None) -> None:
    """Atomically save weights, architecture, feature spec, routing threshold and JSON-able ``meta``."""
    check_feature_spec(feature_spec, in_features=model.in_features)
    if not _matches_buffers(feature_spec, model):
        raise FeatureSpecError("feature spec mean/std differ from the model's standardisation buffers")
    payload = {
        "format": FORMAT,
        "arch": {"in_features": model.in_features, "hidden": list(model.hidden), "dropout": model.dropout,
                 **({"members": len(model.members)} if isinstance(model, RouterEnsemble) else {})},
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "feature_spec": json.dumps({k: _plain(v) for k, v in feature_spec.items()}),
        "threshold": float(threshold),
        "meta": json.dumps(_plain(dict(meta or {}))),
    }
    atomic_write(path, lambda f: torch.save(payload, f))


def load_router(path: str | os.PathLike, expected_features: Sequence[str] | None = None
                ) -> tuple[RouterMLP, dict[str, Any], float, dict[str, Any]]:
    """Load a router saved by ``save_router``: (model in eval mode, feature_spec, threshold, meta).

    Raises ``FeatureSpecError`` when the stored spec disagrees with the weights or with ``expected_features``.
    """
    try:
        payload = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # a truncated or foreign file
        raise FeatureSpecError(f"{path} is not a readable router checkpoint: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise FeatureSpecError(f"{path} is not an {FORMAT} checkpoint")
    arch, spec = payload["arch"], json.loads(payload["feature_spec"])
    check_feature_spec(spec, in_features=arch["in_features"], expected_features=expected_features)
    model = RouterEnsemble(**arch) if "members" in arch else RouterMLP(**arch)
    model.load_state_dict(payload["state_dict"])
    if not _matches_buffers(spec, model):
        raise FeatureSpecError(f"{path}: feature spec normalisation differs from the weights' buffers")
    model.eval()
    return model, spec, float(payload["threshold"]), json.loads(payload["meta"])


def _matches_buffers(spec: Mapping[str, Any], model: RouterMLP) -> bool:
    return all(np.allclose(np.asarray(spec[key], dtype=np.float32), getattr(model, buffer).numpy(), atol=1e-6)
               for key, buffer in (("mean", "feature_mean"), ("std", "feature_std")))


def _plain(value: Any) -> Any:
    """numpy scalars/arrays -> Python values, so meta and spec round-trip through JSON."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
