"""Every path a run directory holds, named once.

``r2v pipeline --run-dir RUN`` (and ``r2v train``, ``r2v evaluate``, the ablations and the router study) write::

    RUN/manifest.json                 config, package versions, seeds, git revision, per-stage status and wall time
    RUN/split/split.json              the env's 70/15/15 task split (seed 42) and the train/valid tasks used
    RUN/teacher/                      clean teacher episodes on the train tasks (runner shards) = D_exp
    RUN/replay/                       teacher actions replayed under perturbation seeds (shards) = D_pert
    RUN/bc/model/                     the BC policy (HF model dir + tokenizer); bc/init, bc/checkpoints
    RUN/preferences/pairs.parquet     prompt, chosen, rejected, prompt_alt, candidates (+ origin, scores)
    RUN/dpo/model/                    the distilled policy pi_theta (DPO + JSD consistency)
    RUN/rl/model/                     an `r2v rl` run's RL-tuned SLM (GRPO from a source run's SLM; rl/curve.json)
    RUN/router_data/train/, valid/    SLM-only rollouts of dpo/model (shards with router rows f_t, y_t)
    RUN/router/router.pt              the router with its feature spec and threshold (+ router_metrics.json)
    RUN/<stage>/stage.json            written when a stage finished: its config, outputs, wall time and key
    RUN/eval/results.json             Table 1's methods under every condition (schema: docs/training.md)
    RUN/eval/runs/<condition>/<method>/   one runner directory per cell (steps-*.parquet, episodes-*.parquet)
    RUN/eval/variants.json, repeats.json, matched.json   the router study's summaries
    RUN/eval_baseline/                the untrained SLM alone (``baseline_slm:``)
    RUN/ablations/<name>.json, RUN/ablations/<name>/<point>/eval/   the ablations' tables and their cells
    RUN/router_variants/<setting>/router/   the named router settings' routers
    RUN/counterfactual/<split>/       counterfactual-oracle labels (y_cf.parquet, summary.json)
    RUN/repeats/r<i>/                 repeat i of the router data and router (same layout as RUN)
    RUN/pipeline.json, RUN/report.md  the resolved config and timings; the report (+ PNG plots beside it)

Example:
    >>> sorted(stage_paths("runs/x"))[:3]
    ['bc_model', 'dpo_model', 'manifest']
    >>> str(eval_dir("runs/x")), str(cell_dir(eval_dir("runs/x"), "composite", "r2v"))
    ('runs/x/eval', 'runs/x/eval/runs/composite/r2v')
"""

from __future__ import annotations

import os
from pathlib import Path

MANIFEST, MARKER = "manifest.json", "stage.json"
RESULTS_FILE, PIPELINE_FILE, REPORT_FILE = "results.json", "pipeline.json", "report.md"
VARIANTS_FILE, REPEATS_FILE, MATCHED_FILE = "variants.json", "repeats.json", "matched.json"

PathLike = str | os.PathLike


def stage_dir(run: PathLike, stage: str) -> str:
    return os.path.join(os.fspath(run), stage)


def stage_paths(run: PathLike) -> dict[str, str]:
    """The main output paths of the training chain in ``run`` (see the layout above)."""
    d = os.fspath(run)
    j = os.path.join
    return {"manifest": j(d, MANIFEST), "split": j(d, "split", "split.json"), "teacher": j(d, "teacher"),
            "replay": j(d, "replay"), "bc_model": j(d, "bc", "model"), "pairs": j(d, "preferences", "pairs.parquet"),
            "dpo_model": j(d, "dpo", "model"), "rl_model": j(d, "rl", "model"),
            "router_data_train": j(d, "router_data", "train"),
            "router_data_valid": j(d, "router_data", "valid"), "router": j(d, "router", "router.pt")}


def slm_model(run: PathLike) -> str:
    """The SLM a run ends with: its RL-tuned model (an ``r2v rl`` run), else DPO, else BC (that path, whether or
    not it exists yet)."""
    p = stage_paths(run)
    return next((p[k] for k in ("rl_model", "dpo_model") if os.path.isdir(p[k])), p["bc_model"])


def eval_dir(run: PathLike) -> Path:
    """Table 1's evaluation of a run (``results.json`` and one runner directory per cell)."""
    return Path(run) / "eval"


def baseline_eval_dir(run: PathLike) -> Path:
    return Path(run) / "eval_baseline"


def results_file(evaluation: PathLike) -> Path:
    return Path(evaluation) / RESULTS_FILE


def cell_dir(evaluation: PathLike, condition: str, method: str) -> Path:
    """The runner directory of one method (or ``method@tau`` sweep point) under one condition."""
    return conditions_dir(evaluation) / condition / method


def conditions_dir(evaluation: PathLike) -> Path:
    return Path(evaluation) / "runs"


def pipeline_file(run: PathLike) -> Path:
    return Path(run) / PIPELINE_FILE


def report_file(run: PathLike) -> Path:
    return Path(run) / REPORT_FILE


def ablations_dir(run: PathLike) -> Path:
    return Path(run) / "ablations"


def ablation_file(run: PathLike, name: str) -> Path:
    return ablations_dir(run) / f"{name}.json"


def ablation_point_dir(run: PathLike, name: str, point: str) -> Path:
    """One point of an ablation (a feature mask, a grid cell, a lambda); its evaluation is in ``<dir>/eval``."""
    return ablations_dir(run) / name / point


def variant_router_dir(run: PathLike, setting: str) -> Path:
    return Path(run) / "router_variants" / setting / "router"


def counterfactual_dir(run: PathLike, split: str) -> Path:
    return Path(run) / "counterfactual" / split


def repeat_dir(run: PathLike, i: int) -> Path:
    return Path(run) / "repeats" / f"r{i}"


def repeat_dirs(run: PathLike) -> list[Path]:
    """The run itself, then its repeats ``r1``, ``r2``, ... in order."""
    reps = sorted((Path(run) / "repeats").glob("r*"), key=lambda d: int(d.name[1:]))
    return [Path(run), *reps]
