"""The learning curve of ``r2v rl``: evaluation while training, the curve file and its PNG.

:class:`LearningCurve` is a ``transformers.TrainerCallback``. After every optimizer step it records the training
episodes' success and reward; every ``eval_every`` steps, after the last step, and when the wall-time budget is
spent, it evaluates the live model with a caller's ``evaluate(model, tokenizer, step)`` (``r2v rl`` passes the
SLM-only protocol of Table 1 through ``r2v eval``'s grid) and asks the trainer to checkpoint at that step, so a
resumed run restarts from an evaluated point. The curve is one JSON file rewritten atomically
(``curve.json``: ``{"train": {step: ...}, "eval": {step: ...}}``, keyed by step, so a resumed run that replays
steps overwrites them instead of adding twins); wall times are cumulative over resumed sessions and count
training apart from evaluation.

Example:
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> c = {"train": {"1": {"step": 1, "train_wall_s": 10.0, "success": 0.5, "mean_return": 0.5}},
    ...      "eval": {"0": {"step": 0, "train_wall_s": 0.0, "sr": 40.0, "sr_ci": [30.0, 50.0], "mean_return": 0.4},
    ...               "1": {"step": 1, "train_wall_s": 10.0, "sr": 50.0, "sr_ci": [40.0, 60.0], "mean_return": 0.5}}}
    >>> plot_curve(c, os.path.join(d, "curve.png"))   # r2v_train.rl.plot (no transformers: r2v drrn uses it too)
    >>> open(os.path.join(d, "curve.png"), "rb").read(4) == b"\\x89PNG"
    True
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from r2v_envs.fileio import write_json_atomic
from r2v_eval.stats import with_ci
from r2v_train.rl.plot import CURVE_FILE, CURVE_PNG, load_curve, plot_curve  # noqa: F401 - this module's API


class LearningCurve(TrainerCallback):
    """Records, evaluates and checkpoints (see the module doc).

    Args:
        out_dir: where ``curve.json`` and the PNG go.
        evaluate: ``(model, tokenizer, step) -> {"sr", "sr_ci", "mean_return", "episodes", ...}``.
        eval_every: evaluate every N optimizer steps (and after the last).
        max_wall_s: stop once training (evaluations excluded) has taken this long; 0: no limit.
        progress: one line per step and per evaluation on stderr.
        label: what the evaluation's SR measures (the plot's legend).
    """

    def __init__(self, out_dir: str, evaluate: Callable[[Any, Any, int], dict[str, Any]], eval_every: int,
                 max_wall_s: float = 0.0, progress: bool = True, label: str = "SLM-only SR (evaluation)"):
        self.out_dir, self.evaluate, self.eval_every, self.label = out_dir, evaluate, eval_every, label
        self.max_wall_s, self.progress = max_wall_s, progress
        self.path = os.path.join(out_dir, CURVE_FILE)
        self.curve = load_curve(self.path)
        self.trainer: Any = None  # set by the caller: the episodes of the last step are read from it
        self._t = 0.0
        self._offset = 0.0

    def evaluate_at(self, step: int, model: Any, tokenizer: Any) -> dict[str, Any]:
        """Evaluate now, unless the curve already has ``step`` (a resumed run); returns the curve's point."""
        key = str(step)
        if key in self.curve["eval"]:
            return self.curve["eval"][key]
        t0 = time.perf_counter()
        point = {"step": step, "train_wall_s": round(self._train_wall(), 3), **self.evaluate(model, tokenizer, step)}
        point["eval_wall_s"] = round(time.perf_counter() - t0, 3)
        self.curve["eval"][key] = point
        self._save()
        if self.progress:
            alone = ""
            if point.get("policy_sr") is not None:
                alone = f", policy alone SR {with_ci(point['policy_sr'], point['policy_sr_ci'])}"
            print(f"[r2v rl] step {step}: {point.get('split', 'eval')} SR {with_ci(point['sr'], point['sr_ci'])} "
                  f"over {point['episodes']} episodes{alone}, mean return {point['mean_return']:.3f} "
                  f"(evaluated in {point['eval_wall_s']:.0f} s)", file=sys.stderr)
        return point

    # ------------------------------------------------------------------------------------------ callback
    def on_train_begin(self, args, state, control, **kwargs):
        done = [p["train_wall_s"] for p in self.curve["train"].values() if p["step"] <= state.global_step]
        self._offset = max(done, default=0.0)  # a resumed run continues the clock of the steps it keeps
        self._t = time.perf_counter()
        for k in [k for k, p in self.curve["train"].items() if p["step"] > state.global_step]:
            del self.curve["train"][k]  # steps after the checkpoint are replayed

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        step = state.global_step
        episodes = getattr(self.trainer, "last_episodes", None) or []
        train = {"step": step, "train_wall_s": round(self._train_wall(), 3), "episodes": len(episodes),
                 "success": sum(e.success for e in episodes) / max(len(episodes), 1),
                 "mean_return": sum(e.episode_return for e in episodes) / max(len(episodes), 1),
                 "steps": sum(len(e.steps) for e in episodes), "rows": getattr(self.trainer, "last_rows", 0),
                 "rollout_s": round(getattr(self.trainer, "last_rollout_s", 0.0), 3), "starts": _starts(episodes)}
        self.curve["train"][str(step)] = train
        self._save()
        over = bool(self.max_wall_s) and train["train_wall_s"] >= self.max_wall_s
        if self.progress:
            print(f"[r2v rl] step {step}/{state.max_steps}: training episodes won {train['success']:.2f}, mean "
                  f"return {train['mean_return']:.3f}, {train['steps']} steps ({train['rows']} trained on, rollouts "
                  f"{train['rollout_s']:.0f} s); {train['train_wall_s']:.0f} s of training", file=sys.stderr)
        if over:
            control.should_training_stop = True
            if self.progress:
                print(f"[r2v rl] the training budget ({self.max_wall_s:.0f} s) is spent: stopping at step {step}",
                      file=sys.stderr)
        if step % self.eval_every == 0 or step >= state.max_steps or over:
            pause = time.perf_counter()
            self.evaluate_at(step, model, processing_class)
            self._t += time.perf_counter() - pause  # evaluation time is not training time
            control.should_save = True
        return control

    def _train_wall(self) -> float:
        return self._offset + (time.perf_counter() - self._t if self._t else 0.0)

    def _save(self) -> None:
        write_json_atomic(self.path, self.curve)
        plot_curve(self.curve, os.path.join(self.out_dir, CURVE_PNG), eval_label=self.label)


def _starts(episodes: list[Any]) -> dict[str, list[int]]:
    """``{"task@z": [won, played]}`` of a step's groups: a curriculum that replays games is then measured on the same
    games early and late (the step's overall success mixes games of unequal difficulty)."""
    out: dict[str, list[int]] = {}
    for e in episodes:
        won_played = out.setdefault(e.start.prompt, [0, 0])
        won_played[0] += int(bool(e.success))
        won_played[1] += 1
    return out

