"""Audit a folder of Terminal-Bench tasks (either format): does the expert win, does marking complete
without work lose, and does every reward hack of :mod:`r2v_envs.terminalbench.hacks` lose?

Per task: the expert (the task's solution, with its own timeouts), ``mark_task_complete`` alone, and each
hack of the battery, all on one backend. Prints a Markdown table (and JSON with ``--json``); progress goes to
stderr. A task the expert loses after a command hit the missing network is reported ``needs_network``.
Tasks that cannot be set up (a Dockerfile step the backend cannot run) are listed apart, with the step and
why: no episode ran on them, so they count in no column of the table.

    python benchmarks/terminalbench_judge.py /path/to/tasks --backend local [--hacks NAME ...]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings

import gymnasium as gym

import r2v_envs  # noqa: F401
from r2v_envs.errors import TaskEnvironmentError
from r2v_envs.terminalbench.backends import TaskLoadError
from r2v_envs.terminalbench.hacks import HACKS


def play(env, task_id: str, actions: list[str] | None) -> dict:
    """``actions`` None: follow ``expert_action``; otherwise play them (stop early if the episode ends)."""
    obs, info = env.reset(options={"task_id": task_id})
    terminated = truncated = False
    i = 0
    while not (terminated or truncated):
        action = info["expert_action"] if actions is None else actions[min(i, len(actions) - 1)]
        _obs, _reward, terminated, truncated, info = env.step(action)
        i += 1
    return {"won": bool(info["won"]), "outcome": info.get("outcome"), "tests": info.get("test_results", {}),
            "refused": info.get("judge", {}).get("refused_files", [])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tasks_dir")
    ap.add_argument("--backend", default="local")
    ap.add_argument("--tasks", nargs="*", help="only these task ids")
    ap.add_argument("--json", help="write the per-task results here")
    ap.add_argument("--hacks", nargs="*", help="only these hacks of the battery (default: all)")
    ap.add_argument("--build-network", help="docker backend: network of the image builds (e.g. host)")
    args = ap.parse_args()
    hacks = [h for h in HACKS if args.hacks is None or h.name in args.hacks]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, backend=args.backend,
                       tasks_dir=args.tasks_dir, split="all", max_episode_steps=60,
                       docker_options={"build_network": args.build_network} if args.build_network else None)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    rows, failed = [], []
    unknown = [t for t in args.tasks or () if t not in env.unwrapped.tasks]
    if unknown:
        print(f"warning: not in the suite (or malformed), skipped: {' '.join(unknown)}", file=sys.stderr)
    for task_id in [t for t in args.tasks or list(env.unwrapped.tasks) if t not in unknown]:
        start = time.monotonic()
        try:
            expert = play(env, task_id, None)
        except (TaskLoadError, TaskEnvironmentError) as exc:  # not set up: no episode ran, nothing to count
            failed.append({"task": task_id, "step": getattr(exc, "step", "-"),
                           "instruction": getattr(exc, "instruction", "")[:200],
                           "why": getattr(exc, "why", str(exc))[:500], "needs_network": getattr(exc, "needs_network",
                                                                                               False)})
            print(f"{task_id}: load failed: {exc}"[:600], file=sys.stderr)
            continue
        mark = play(env, task_id, ["mark_task_complete"])
        results = {h.name: play(env, task_id, list(h.actions)) for h in hacks}
        row = {"task": task_id, "format": env.unwrapped.tasks[task_id].format, "expert": expert["outcome"],
               "mark_only": mark["outcome"], "hacks_won": [n for n, r in results.items() if r["won"]],
               "hacks": {n: r["outcome"] for n, r in results.items()},
               "refused": sorted({f for r in results.values() for f in r["refused"]}),
               "expert_tests": expert["tests"], "seconds": round(time.monotonic() - start, 1)}
        rows.append(row)
        print(f"{task_id}: expert {row['expert']}, mark-only {row['mark_only']}, "
              f"hacks won {len(row['hacks_won'])}/{len(hacks)} ({row['seconds']} s)", file=sys.stderr)
    env.close()
    print(f"| task | format | expert | mark-complete only | hacks won (of {len(hacks)}) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['format']} | {r['expert']} | {r['mark_only']} | "
              f"{len(r['hacks_won'])}{' ' + ', '.join(r['hacks_won']) if r['hacks_won'] else ''} |")
    print(f"\n{len(rows)} task(s) judged; {sum(r['expert'] == 'resolved' for r in rows)} resolved by the expert, "
          f"{sum(r['mark_only'] == 'resolved' for r in rows)} by mark-complete only, "
          f"{sum(bool(r['hacks_won']) for r in rows)} with a winning hack.")
    if failed:
        print(f"\nLoad failures ({len(failed)}; no episode ran on them):\n")
        print("| task | step | why | needs network |")
        print("|---|---|---|---|")
        for f in failed:
            lines = [ln.strip() for ln in f["why"].splitlines() if ln.strip()] or [""]
            first_error = next((ln for ln in lines[1:] if re.match(r"(?i)(\w+ )?error\b", ln)), lines[-1])
            why = lines[0] if len(lines) == 1 else f"{lines[0]} ... {first_error}"
            print(f"| {f['task']} | {f['step']}: `{f['instruction'][:60]}` | {why[:160].replace('|', '/')} | "
                  f"{f['needs_network']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"judged": rows, "load_failures": failed}, f, indent=1)


if __name__ == "__main__":
    main()
