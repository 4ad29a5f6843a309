"""Size of ``r2v view`` pages and how fast headless Chromium renders them, for runs of the default pipeline's shape.

Two synthetic runs are written with the runner's own shard writer, their step rows drawn from the real step rows of
a ``--pool`` run directory (what an agent saw, with the perturbation events of those steps), with made-up decisions
of the default pipeline's shape (K=5 candidates with 4-8 token entropies each, 15 router features, the router's
probability and threshold, SLM or teacher), so the text is real and the decision columns are as wide as a routed
agent's:

* ``pipeline``: the default pipeline's evaluation (six methods x five conditions of its 39 test games, composite on
  seeds 0 and 1 and each perturbation type on seed 0, plus the heuristic sweep's three thresholds); episodes end by
  winning after 3-20 steps or run to the 30-step cap;
* ``large``: an ``r2v eval`` run of ``--large-episodes`` episodes (five settings of one benchmark).

For each page: its size, the seconds ``r2v view`` took to write it, and in Chromium (fresh browser per page):
load-event seconds, when the summary had rendered (``performance.now()`` at the page's ready mark), the
seconds to open the episode list, to open one episode (its chunk inflated and its steps drawn) and to sort the
list by steps; and the size the page would have with its step data as plain JSON (``compress="never"``).
Needs a ``chromium`` binary and the ``playwright`` package (the ``test`` extra).

    python benchmarks/viewer_pages.py --pool runs/eval-tw --out /tmp/viewer-bench
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.browser, run from a checkout

from r2v_agents.shards import ShardWriter, load_rows

METHODS = ("slm", "entropy", "heuristic", "r2v", "oracle", "llm")
TEACHER_SHARE = {"slm": 0.0, "entropy": 0.85, "heuristic": 0.2, "r2v": 0.3, "oracle": 0.1, "llm": 1.0}
SUCCESS = {"slm": 0.55, "entropy": 0.9, "heuristic": 0.7, "r2v": 0.85, "oracle": 0.9, "llm": 0.95}


@dataclass
class Args:
    pool: str
    """a run directory (r2v eval, or a runner directory) whose step rows supply the observations"""
    out: str = "/tmp/viewer-bench"
    """where the synthetic runs and pages go (replaced)"""
    tasks: int = 39
    """test games (the default suite's test split has 39)"""
    max_steps: int = 30
    """the default pipeline's step cap"""
    large_episodes: int = 10_000
    """episodes of the large r2v eval run"""
    seed: int = 0


def pool_rows(run_dir: str) -> list[dict]:
    rows = []
    for d in sorted({p.parent for p in Path(run_dir).rglob("steps-*.parquet")}):
        rows += load_rows(d, "steps")
    if not rows:
        raise SystemExit(f"no step rows under {run_dir}")
    return rows


def episode(rng, pool, key: dict, method: str, max_steps: int) -> dict:
    """One synthetic episode record: real observations from ``pool``, the decision columns of ``method``."""
    won = rng.random() < SUCCESS.get(method, 0.7)
    n = int(rng.integers(3, 21)) if won else max_steps
    start = int(rng.integers(len(pool)))
    steps, teacher = [], 0
    for t in range(n):
        src = pool[(start + t) % len(pool)]
        cands = [{"action": (src["admissible_actions"] or ["look"])[int(rng.integers(len(src["admissible_actions"] or [1])))],
                  "logprob": float(-rng.gamma(2.0)), "token_logprobs": None,
                  "token_entropies": [float(x) for x in rng.uniform(0, 2, int(rng.integers(4, 9)))],
                  "verifier_score": float(rng.random())} for _ in range(5)] if method != "llm" else []
        p = float(rng.random())
        to_teacher = rng.random() < TEACHER_SHARE.get(method.split("@")[0], 0.3)
        teacher += to_teacher
        meta = {"threshold": 0.5, **({"slm_action": cands[0]["action"]} if to_teacher and cands else {})}
        steps.append({**key, "t": t, "max_steps": max_steps, "goal": src["goal"], "observation": src["observation"],
                      "history_actions": [], "admissible_actions": src["admissible_actions"],
                      "perturbations": src["perturbations"], "action": src["action"],
                      "source": "oracle" if to_teacher else "slm", "candidates": cands,
                      "verifier_score": cands[0]["verifier_score"] if cands else None,
                      "features": [float(x) for x in rng.random(15)] if cands else None,
                      "router_prob": p if method not in ("slm", "llm") else None, "cost": 0.0,
                      "reward": 1.0 if won and t == n - 1 else 0.0, "terminated": won and t == n - 1,
                      "truncated": not won and t == n - 1, "expert_action": src["expert_action"],
                      "meta": json.dumps(meta)})
    ep = {**key, "policy": method, "success": won, "steps": n, "return": float(won), "teacher_calls": teacher,
          "cost": 0.0, "terminated": won, "truncated": not won, "error": None,
          "final_observation": "You won!" if won else pool[(start + n) % len(pool)]["observation"], "verdict": None}
    return {"episode": ep, "steps": steps, "router": []}


def write_cell(d: Path, rng, pool, tasks, seeds, method, max_steps, env="R2V/TextWorld-v0") -> None:
    w = ShardWriter(d)
    recs = [episode(rng, pool, {"episode_id": f"{t}@{z}", "env_id": env, "benchmark": "textworld", "split": "test",
                                "task_id": t, "z": z}, method, max_steps) for t in tasks for z in seeds]
    for i in range(0, len(recs), 64):
        w.write_shard(recs[i:i + 64])
    (d / "run.json").write_text(json.dumps({"setting": {"env_id": env, "policy": method}}))


def synthetic_pipeline(out: Path, pool, args: Args) -> Path:
    from r2v_eval.stats import pareto_front
    from r2v_eval.cells import sr_metrics
    from r2v_eval.results import cell_entry
    from r2v_train.evaluation.report import write_report

    rng = np.random.default_rng(args.seed)
    tasks = [f"tw-game-{i:03d}" for i in range(args.tasks)]
    conds = {"composite": (0, 1), "flaky": (0,), "partial": (0,), "injection": (0,), "distractor": (0,)}
    ev = out / "eval"
    res = {"config": {"env_id": "R2V/TextWorld-v0", "split": "test", "seeds": [0, 1], "bootstrap": 1000,
                      "bootstrap_seed": 0, "per_type_seeds": [0]}, "methods": list(METHODS),
           "main_condition": "composite", "cells": []}
    main = {}
    for cond, seeds in conds.items():
        for m in METHODS:
            d = ev / "runs" / cond / m
            write_cell(d, rng, pool, tasks, seeds, m, args.max_steps)
            res["cells"].append(cell_entry(ev, d, "R2V/TextWorld-v0", cond, m, sr_metrics(d)))
            if cond == "composite":
                main[m] = res["cells"][-1]
    for tau in (0.1, 0.2, 0.3):
        d = ev / "runs" / "composite" / f"heuristic@{tau:g}"
        write_cell(d, rng, pool, tasks, (0, 1), f"heuristic@{tau:g}", args.max_steps)
        res["cells"].append(cell_entry(ev, d, "R2V/TextWorld-v0", "composite", f"heuristic@{tau:g}", sr_metrics(d),
                                       sweep="heuristic", threshold=tau))
    res["pareto"] = pareto_front({m: (c["llm_pct"], c["sr"]) for m, c in main.items() if m != "oracle"})
    (ev / "results.json").write_text(json.dumps(res))
    write_report(out)
    return out


def synthetic_eval(out: Path, pool, args: Args) -> Path:
    from r2v_eval.robustness_report import write_report

    rng = np.random.default_rng(args.seed + 1)
    settings = ("none", "flaky", "partial", "distractor", "injection")
    per = args.large_episodes // len(settings)
    tasks = [f"tw-game-{i:04d}" for i in range(per // 2)]
    for s in settings:
        write_cell(out / "runs" / "R2V_TextWorld-v0" / s, rng, pool, tasks, (0, 1), "agent", args.max_steps)
    (out / "manifest.json").write_text(json.dumps({"agent": {"name": "synthetic"}, "grid": {
        "env_ids": ["R2V/TextWorld-v0"], "perturbations": list(settings), "seeds": [0, 1], "split": "test",
        "tasks": len(tasks)}}))
    write_report(out, n_boot=200)
    return out


def measure(page: Path) -> dict:
    from tests.support.browser import PageLog, chromium

    with chromium() as browser:
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        log = PageLog(tab)
        t = time.monotonic()
        tab.goto(page.resolve().as_uri(), wait_until="load", timeout=300_000)
        load = time.monotonic() - t
        tab.wait_for_function("document.body.dataset.ready === '1'", timeout=120_000)
        ready_ms = tab.evaluate("window.r2vReadyAt")
        t = time.monotonic()
        tab.locator("header nav a[href='#episodes']").click()
        tab.locator("tr.ep-row").first.wait_for()
        t_list = time.monotonic() - t
        t = time.monotonic()
        tab.locator("tr.ep-row").nth(5).click()
        tab.locator("article.step").first.wait_for(timeout=120_000)
        t_episode = time.monotonic() - t
        tab.locator("header nav a[href='#episodes']").click()
        tab.locator("tr.ep-row").first.wait_for()
        t = time.monotonic()
        tab.locator("th.sortable", has_text="steps").first.click()
        t_sort = time.monotonic() - t
    return {"load_s": round(load, 2), "summary_ready_s": round(ready_ms / 1000, 2), "list_s": round(t_list, 2),
            "episode_s": round(t_episode, 2), "sort_s": round(t_sort, 2), "console_errors": len(log.errors)}


def main(args: Args) -> None:
    from r2v_eval.view import write_page

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    pool = pool_rows(args.pool)
    print(f"pool: {len(pool)} real step rows from {args.pool}; {os.cpu_count()} CPUs; load {os.getloadavg()}")
    for name, build in (("pipeline", synthetic_pipeline), ("large", synthetic_eval)):
        run = build(out / name, pool, args)
        t = time.monotonic()
        page = write_page(run, out / f"{name}.html")
        write_s = time.monotonic() - t
        index = json.loads(page.read_text().split('id="r2v-index">', 1)[1].split("</script>", 1)[0])
        steps = sum(r[index["episode_columns"].index("steps")] for r in index["episodes"])
        plain = write_page(run, out / f"{name}-plain.html", compress="never").stat().st_size
        print(json.dumps({"run": name, "episodes": len(index["episodes"]), "steps": steps,
                          "cells": len(index["cells"]), "encoding": index["encoding"],
                          "html_MB": round(page.stat().st_size / 1e6, 2), "plain_html_MB": round(plain / 1e6, 2),
                          "write_s": round(write_s, 1), **measure(page)}))


if __name__ == "__main__":
    main(tyro.cli(Args))
