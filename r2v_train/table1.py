"""``r2v table1``: the per-benchmark presets of ``r2v pipeline`` one after another, and one Table 1 over them.

Each benchmark ``b`` runs ``r2v_train/configs/<b>.yaml`` (or the file ``configs:`` names for it) into
``<run-dir>/<b>/``, exactly as ``r2v pipeline --config ... --run-dir <run-dir>/<b>`` would. A benchmark whose
sub-run finished (its ``pipeline.json`` is there) is not rerun; an unfinished one resumes inside its own run
directory (finished stages and episodes are kept); one that raises is recorded as failed in
``<run-dir>/<b>/table1-error.json`` and the next benchmark still runs. Then ``table1.md`` and ``table1.json`` in
``<run-dir>`` give one Table 1 with a column group per benchmark (SR and LLM% with their 95% bootstrap CIs per
method, router ECE / Brier on validation, wall time), side by side with the paper's Table 1. A benchmark that
has not run or failed shows as such, never as zeros.

Example:
    >>> cell({"sr": 59.0, "sr_ci": [48.72, 69.23]}, "sr")
    '59.0 [48.7, 69.2]'
    >>> cell(None, "sr")
    '-'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r2v_envs.errors import UnknownChoiceError
from r2v_envs.fileio import atomic_write, write_json_atomic
from r2v_eval.results import main_table
from r2v_eval.stats import md_table, with_ci
from r2v_train.config import CONFIG_DIR, load_config
from r2v_train.evaluation.methods import METHOD_LABELS, METHODS, load_results
from r2v_train.pipeline import run_pipeline
from r2v_train.run_dir import eval_dir, pipeline_file, results_file
from r2v_train.runtime.narrate import say

BENCHMARKS: tuple[str, ...] = ("alfworld", "humaneval", "terminalbench")
BENCHMARK_LABELS = {"alfworld": "ALFWorld", "humaneval": "HumanEval+", "terminalbench": "TerminalBench"}
# The paper's Table 1 (\label{tab:main_results}, "Benchmark-level results averaged over four SLM backbones under
# noisy evaluation"): (SR %, LLM %) per method. Its "TextWorld" column is ALFWorld (Appendix C).
PAPER_TABLE1: dict[str, dict[str, tuple[float, float]]] = {
    "humaneval": {"slm": (91.9, 0.0), "entropy": (92.9, 0.8), "heuristic": (97.4, 26.6), "r2v": (94.3, 0.6),
                  "oracle": (98.6, 8.1), "llm": (98.8, 100.0)},
    "alfworld": {"slm": (64.6, 0.0), "entropy": (64.6, 0.0), "heuristic": (98.4, 99.9), "r2v": (98.2, 41.7),
                 "oracle": (98.6, 35.4), "llm": (98.7, 100.0)},
    "terminalbench": {"slm": (81.1, 0.0), "entropy": (87.4, 4.1), "heuristic": (95.0, 66.0), "r2v": (93.3, 33.9),
                      "oracle": (97.8, 18.4), "llm": (98.1, 100.0)},
}
ROUTERS = ("r2v", "entropy", "heuristic")
ERROR_FILE = "table1-error.json"
TABLE1_MD, TABLE1_JSON = "table1.md", "table1.json"


@dataclass
class Table1Config:
    """Which benchmarks run, and the pipeline config of each."""

    benchmarks: tuple[str, ...] = BENCHMARKS
    """benchmark names, run in this order; each is a sub-run directory and a column group of the table"""
    configs: dict[str, str] = field(default_factory=dict)
    """benchmark -> pipeline YAML (default: r2v_train/configs/<benchmark>.yaml)"""
    progress: bool | None = None
    """progress bars of every sub-run (None: each config's own ``progress:``)"""

    def config_path(self, benchmark: str) -> Path:
        path = Path(self.configs.get(benchmark) or CONFIG_DIR / f"{benchmark}.yaml")
        # a relative path that is not there from the working directory is read from the repository root
        # (table1.yaml names r2v_train/configs/<b>.yaml, so `r2v table1` works from any directory)
        if not path.is_absolute() and not path.exists() and (CONFIG_DIR.parents[1] / path).exists():
            return CONFIG_DIR.parents[1] / path
        return path


def load_table1_config(source: str | os.PathLike | Mapping[str, Any]) -> Table1Config:
    """A :class:`Table1Config` from a YAML path or a mapping (keys: benchmarks, configs, progress)."""
    if not isinstance(source, Mapping):
        import yaml

        with open(source) as fh:
            source = yaml.safe_load(fh) or {}
    keys = ["benchmarks", "configs", "progress", "description"]
    for k in source:
        if k not in keys:
            raise UnknownChoiceError("table1 config key", k, keys)
    benchmarks = source.get("benchmarks") or BENCHMARKS
    if isinstance(benchmarks, str):
        benchmarks = [b.strip() for b in benchmarks.split(",") if b.strip()]
    return Table1Config(benchmarks=tuple(benchmarks), configs=dict(source.get("configs") or {}),
                        progress=source.get("progress"))


def finished(sub_dir: str | os.PathLike) -> bool:
    """Whether a benchmark's sub-run completed (``run_pipeline`` writes ``pipeline.json`` last)."""
    return pipeline_file(sub_dir).is_file() and results_file(eval_dir(sub_dir)).is_file()


def run_table1(cfg: Table1Config, run_dir: str | os.PathLike) -> Path:
    """Run each benchmark's pipeline that has not finished into ``run_dir/<benchmark>``, then write the combined
    report; returns the path of ``table1.md``."""
    import yaml

    run_dir = Path(run_dir)
    for i, b in enumerate(cfg.benchmarks, 1):
        sub = run_dir / b
        if finished(sub):
            say(f"table1 {i}/{len(cfg.benchmarks)} {b}: finished before, skipped")
            continue
        path = cfg.config_path(b)
        say(f"table1 {i}/{len(cfg.benchmarks)} {b}: r2v pipeline --config {path} --run-dir {sub}")
        sub.mkdir(parents=True, exist_ok=True)
        try:
            with open(path) as fh:
                data = yaml.safe_load(fh) or {}
            if cfg.progress is not None:
                data["progress"] = cfg.progress
            run_pipeline(load_config(data), sub)
        except Exception as exc:  # noqa: BLE001 - one benchmark's failure must not cost the others their run
            write_json_atomic(sub / ERROR_FILE, {"config": str(path), "error": f"{type(exc).__name__}: {exc}"})
            say(f"table1 {b}: failed ({type(exc).__name__}: {exc}); going on with the next benchmark")
        else:
            (sub / ERROR_FILE).unlink(missing_ok=True)
    return write_table1(run_dir, cfg.benchmarks)


def collect(run_dir: str | os.PathLike, benchmarks: Sequence[str]) -> dict[str, Any]:
    """The combined data of ``table1.json``: per benchmark its status (done / failed / not run), its main
    condition's method cells, router calibration, episode count and wall time, and the paper's numbers."""
    out: dict[str, Any] = {"benchmarks": list(benchmarks), "methods": list(METHODS), "results": {}}
    for b in benchmarks:
        sub = Path(run_dir) / b
        entry: dict[str, Any] = {"run_dir": str(sub), "paper": {m: {"sr": v[0], "llm_pct": v[1]}
                                                                for m, v in PAPER_TABLE1.get(b, {}).items()}}
        if finished(sub):
            res = load_results(eval_dir(sub))
            pipe = json.loads(pipeline_file(sub).read_text())
            cells = main_table(res)
            entry.update(status="done", condition=res["main_condition"], methods=cells,
                         calibration={k: {"ece": v["ece"], "brier": v["brier"]}
                                      for k, v in (res.get("calibration") or {}).items()},
                         episodes=max((c.get("episodes", 0) for c in cells.values()), default=0),
                         wall_s=(pipe.get("timings_s") or {}).get("total"), report=pipe.get("report"))
        elif (sub / ERROR_FILE).is_file():
            entry.update(status="failed", error=json.loads((sub / ERROR_FILE).read_text()).get("error"))
        else:
            entry.update(status="not run")
        out["results"][b] = entry
    return out


def cell(c: Mapping[str, Any] | None, key: str) -> str:
    """``value [lo, hi]`` of a method cell's ``key`` (sr or llm_pct), or ``-`` when there is no cell."""
    if not c or c.get(key) is None:
        return "-"
    return with_ci(c[key], c.get(f"{key}_ci"))


def table1_markdown(data: Mapping[str, Any]) -> str:
    """The combined report: Table 1 (ours next to the paper's per benchmark), calibration, run status."""
    bs = data["benchmarks"]
    res = data["results"]
    label = lambda b: BENCHMARK_LABELS.get(b, b)  # noqa: E731

    def ours(b: str, m: str, key: str) -> str:
        e = res[b]
        return cell(e["methods"].get(m), key) if e["status"] == "done" else e["status"]

    def paper(b: str, m: str) -> str:
        p = res[b]["paper"].get(m)
        return f"{p['sr']:.1f} / {p['llm_pct']:.1f}" if p else "-"

    head = ["method"] + [h for b in bs for h in (f"{label(b)} SR (%)", f"{label(b)} LLM%",
                                                 f"{label(b)} paper SR / LLM%")]
    lines = ["# Table 1 on every benchmark", "",
             "SR and LLM% (share of steps escalated to the teacher) with 95% bootstrap CIs over episodes, on each "
             "benchmark's test split under its main perturbation condition; the paper's Table 1 (averaged over four "
             "GPU SLM backbones; its \"TextWorld\" column is ALFWorld) beside each. A benchmark that did not run "
             "or failed says so.", "", "## Table 1", ""]
    lines += md_table(head, [[METHOD_LABELS.get(m, m)] + [v for b in bs for v in (ours(b, m, "sr"),
                                                                                  ours(b, m, "llm_pct"), paper(b, m))]
                             for m in data["methods"]])

    def calibration(b: str, r: str) -> str:
        e = res[b]
        c = (e.get("calibration") or {}).get(r) if e["status"] == "done" else None
        return f"{c['ece']:.3f} / {c['brier']:.3f}" if c else (e["status"] if e["status"] != "done" else "-")
    lines += ["", "## Router calibration (validation ECE / Brier)", ""]
    lines += md_table(["router"] + [label(b) for b in bs],
                      [[METHOD_LABELS.get(r, r)] + [calibration(b, r) for b in bs] for r in ROUTERS])
    lines += ["", "## Runs", ""]
    lines += md_table(["benchmark", "status", "episodes per method", "wall time", "report"],
                      [[label(b), res[b]["status"] + (f": {res[b]['error']}" if res[b].get("error") else ""),
                        res[b].get("episodes", "-"), f"{res[b]['wall_s']:.0f} s" if res[b].get("wall_s") is not None
                        else "-", res[b].get("report") or "-"] for b in bs], align="llrrl")
    return "\n".join(lines) + "\n"


def write_table1(run_dir: str | os.PathLike, benchmarks: Sequence[str] = BENCHMARKS) -> Path:
    """Write ``table1.json`` and ``table1.md`` into ``run_dir`` from its benchmark sub-runs; returns the .md path."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    data = collect(run_dir, benchmarks)
    write_json_atomic(run_dir / TABLE1_JSON, data)
    atomic_write(run_dir / TABLE1_MD, table1_markdown(data))
    return run_dir / TABLE1_MD


# ------------------------------------------------------------------------------------------------ command
@dataclass
class Table1Args:
    """Run each benchmark's pipeline preset into <run-dir>/<benchmark> (finished ones are skipped) and write one
    Table 1 (table1.md, table1.json) with a column group per benchmark next to the paper's."""

    config: str = str(CONFIG_DIR / "table1.yaml")
    """YAML with ``benchmarks:`` (and optionally ``configs:``)"""
    run_dir: str = "runs/table1"
    """parent run directory (a rerun resumes)"""
    benchmarks: str = ""
    """comma-separated benchmarks, replacing the config's list (e.g. alfworld,humaneval)"""
    progress: bool | None = None
    """progress bars on stderr for every sub-run (default: each config's own)"""
    report_only: bool = False
    """only (re)write table1.md/json from the sub-runs there are"""


def table1_main(args: Table1Args) -> None:
    cfg = load_table1_config(args.config)
    if args.benchmarks:
        cfg = load_table1_config({"benchmarks": args.benchmarks, "configs": cfg.configs})
    if args.progress is not None:
        cfg.progress = args.progress
    path = write_table1(args.run_dir, cfg.benchmarks) if args.report_only else run_table1(cfg, args.run_dir)
    print(path.read_text())
    print(f"report: {path}")

