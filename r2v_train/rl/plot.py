"""The learning-curve file and its PNG, shared by ``r2v rl`` (:mod:`r2v_train.rl.curve`) and ``r2v drrn``.

Kept apart from :mod:`r2v_train.rl.curve` because that module's callback imports transformers (about 10 s here),
which a learner without a language model should not pay for.

Example:
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> c = {"train": {"1": {"step": 1, "train_wall_s": 10.0, "success": 0.5, "mean_return": 0.5}}, "eval": {}}
    >>> plot_curve(c, os.path.join(d, "c.png"), title="DRRN", step_label="training episodes")
    >>> open(os.path.join(d, "c.png"), "rb").read(4) == b"\\x89PNG"
    True
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

CURVE_FILE, CURVE_PNG = "curve.json", "learning_curve.png"


def load_curve(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    if not os.path.exists(path):
        return {"train": {}, "eval": {}}
    with open(path) as fh:
        return json.load(fh)



def plot_curve(curve: Mapping[str, Mapping[str, Any]], path: str | os.PathLike, *,
               title: str = "r2v rl: GRPO from the run's SLM", step_label: str = "optimizer step",
               eval_label: str = "SLM-only SR (evaluation)", tenths: list[Mapping[str, Any]] | None = None) -> None:
    """SR (with its 95% CI) and mean return of the evaluations, and the training episodes' success, against
    optimizer steps (left) and minutes of training (right); ``r2v drrn`` labels its steps and evaluations and draws
    ``tenths`` (:func:`r2v_train.drrn.trainer.training_tenths`: the training success and return of each tenth of
    the episodes, with 95% CIs) as a line and band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    ev = sorted(curve["eval"].values(), key=lambda p: p["step"])
    tr = sorted(curve["train"].values(), key=lambda p: p["step"])
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5), sharey="row")
    # a tenth's middle episode on the wall-time axis: interpolated between the rounds' (episodes, seconds) points
    rounds = [(0.0, 0.0)] + [(p["step"], p["train_wall_s"]) for p in tr]
    wall = lambda step: float(np.interp(step, [a for a, _ in rounds], [b for _, b in rounds]))  # noqa: E731
    for col, (xkey, xlabel, scale) in enumerate((("step", step_label, 1.0),
                                                 ("train_wall_s", "training wall time (min)", 60.0))):
        ax = axes[0][col]
        if ev:
            x = [p[xkey] / scale for p in ev]
            ax.plot(x, [p["sr"] for p in ev], "o-", color="tab:blue", label=eval_label)
            ax.fill_between(x, [p["sr_ci"][0] for p in ev], [p["sr_ci"][1] for p in ev], color="tab:blue",
                            alpha=0.15, label="95% CI")
            alone = [(xi, p) for xi, p in zip(x, ev) if p.get("policy_sr") is not None]
            if alone:  # r2v rl: the policy's own sample per step (k = 1, no verifier), what RL trains
                ax.plot([a for a, _ in alone], [p["policy_sr"] for _, p in alone], "^-", color="tab:green",
                        label="policy alone SR (k = 1, evaluation)")
                ax.fill_between([a for a, _ in alone], [p["policy_sr_ci"][0] for _, p in alone],
                                [p["policy_sr_ci"][1] for _, p in alone], color="tab:green", alpha=0.12)
        if tr:
            ax.plot([p[xkey] / scale for p in tr], [100 * p["success"] for p in tr], ".", color="tab:gray",
                    alpha=0.6, label="training episodes won (%)")
        if tenths:
            x = [(t["step"] if xkey == "step" else wall(t["step"])) / scale for t in tenths]
            ax.plot(x, [t["sr"] for t in tenths], "-", color="black", lw=1.5, label="training won, per tenth (95% CI)")
            ax.fill_between(x, [t["sr_ci"][0] for t in tenths], [t["sr_ci"][1] for t in tenths], color="black",
                            alpha=0.12)
        ax.set_ylabel("success (%)")
        ax.grid(alpha=0.3)
        ax = axes[1][col]
        if ev:
            ax.plot([p[xkey] / scale for p in ev], [p["mean_return"] for p in ev], "s-", color="tab:orange",
                    label="mean return (evaluation)")
        if tr:
            ax.plot([p[xkey] / scale for p in tr], [p["mean_return"] for p in tr], ".", color="tab:gray", alpha=0.6,
                    label="mean return (training)")
        if tenths:
            x = [(t["step"] if xkey == "step" else wall(t["step"])) / scale for t in tenths]
            ax.plot(x, [t["mean_return"] for t in tenths], "-", color="black", lw=1.5,
                    label="training return, per tenth (95% CI)")
            ax.fill_between(x, [t["return_ci"][0] for t in tenths], [t["return_ci"][1] for t in tenths],
                            color="black", alpha=0.12)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("return")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="lower right")
    axes[1][0].legend(fontsize=8, loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    tmp = f"{os.fspath(path)}.tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
