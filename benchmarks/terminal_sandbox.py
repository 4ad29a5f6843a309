"""Terminal task wall time: the local sandbox backend vs plain subprocesses (no isolation).

Each shipped task is played by its expert (solution commands, then the tests) on both backends; the plain
backend is the local backend with the sandbox replaced by ``subprocess.run(["bash", "-c", ...])`` in the same
scratch copy, so the difference is the price of isolation (namespaces, bind mounts, uid drop, rlimits).
Each task is played on both backends back to back, the order alternating between rounds.

    python benchmarks/terminal_sandbox.py --rounds 3
    python benchmarks/terminal_sandbox.py --phases          # one command, the test phase, a reset, apart
    python benchmarks/terminal_sandbox.py --phases --think-ms 200   # the same with an agent's pause per step
    python benchmarks/terminal_sandbox.py --reset DIR TASK  # a task's cold (Dockerfile) and warm (cached) reset
    python benchmarks/terminal_sandbox.py --spawn 0 2 6     # one sandboxed `true` from a caller holding 0, 2, 6 GB
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

import gymnasium as gym

import r2v_envs  # noqa: F401
from r2v_envs.terminalbench.backends import LocalBackend
from r2v_envs.terminalbench.judge.verdict import ScriptRun
from r2v_envs.terminalbench.task import load_suite


class PlainBackend(LocalBackend):
    """The local backend without a sandbox: same session script, same scratch copy, plain bash."""

    name = "plain"

    def __init__(self):
        super().__init__(isolation="rlimit", hold_ahead=False)
        self.isolation = "none"

    def _run(self, call, prepared=None, meanwhile=None):
        # every script of the backend (commands, build steps, the tests) comes through here
        start = time.monotonic()
        try:
            r = subprocess.run(["bash", "--noprofile", "--norc", "-c", call.script], cwd=self.scratch,
                               env={**os.environ, **call.env}, capture_output=True, text=True, timeout=call.timeout_s)
            return ScriptRun(r.stdout + r.stderr, r.returncode, False, time.monotonic() - start)
        except subprocess.TimeoutExpired as exc:
            return ScriptRun(str(exc.stdout or ""), None, True, time.monotonic() - start)


def play(env, task_id) -> tuple[float, bool]:
    start = time.perf_counter()
    obs, info = env.reset(options={"task_id": task_id})
    terminated = False
    while not terminated:
        obs, reward, terminated, truncated, info = env.step(info["expert_action"])
    return time.perf_counter() - start, info["won"]


def phases(rounds: int, think_s: float = 0.0, task_id: str = "word-frequency", commands: int = 20) -> None:
    """Median seconds of one trivial command, of the test phase and of a reset, per backend; ``think_s``: an
    agent's pause before each step (untimed; the sandbox sets up the next command and the test phase in it)."""
    envs = {"plain": gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, split="all", backend=PlainBackend()),
            "sandbox": gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, split="all", backend="local")}
    res = {name: {"command": [], "tests": [], "reset": []} for name in envs}
    for _ in range(rounds):
        for name, env in envs.items():
            start = time.perf_counter()
            env.reset(options={"task_id": task_id})
            res[name]["reset"].append(time.perf_counter() - start)
            for _ in range(commands):
                time.sleep(think_s)
                start = time.perf_counter()
                env.step("run echo hi")
                res[name]["command"].append(time.perf_counter() - start)
            time.sleep(think_s)
            start = time.perf_counter()
            env.step("mark_task_complete")
            res[name]["tests"].append(time.perf_counter() - start)
    print(f"agent's pause before each step: {think_s * 1000:g} ms; medians of {rounds} rounds")
    for name in envs:
        print(f"{name:8s}", "  ".join(f"{k} {statistics.median(v) * 1000:6.1f} ms" for k, v in res[name].items()))
    print(f"{'ratio':8s}", "  ".join(f"{k} {statistics.median(res['sandbox'][k]) / statistics.median(res['plain'][k]):9.2f}"
                                    for k in res["plain"]))


def resets(tasks_dir: str, ids: list[str], warm: int = 5) -> None:
    """Cold reset (the Dockerfile interpreted into an empty build cache) and the median of warm ones."""
    import tempfile
    from pathlib import Path

    env = gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, split="all", backend="local",
                   tasks_dir=tasks_dir)
    env.unwrapped.backend.builds.root = Path(tempfile.mkdtemp(prefix="r2v-builds-"))
    for task_id in ids:
        start = time.perf_counter()
        env.reset(options={"task_id": task_id})
        cold = time.perf_counter() - start
        times = []
        for _ in range(warm):
            start = time.perf_counter()
            env.reset(options={"task_id": task_id})
            times.append(time.perf_counter() - start)
        print(f"{task_id}: cold {cold:.2f} s, warm median {statistics.median(times):.3f} s")


def spawns(sizes_gb: list[float], n: int = 40) -> None:
    """Median ms of one sandboxed ``true`` with the limits set by prlimit inside the sandbox (the default) and by
    a ``preexec_fn`` (which makes Python fork the caller), from a caller holding each size of touched memory."""
    import tempfile

    from r2v_envs.sandbox import Sandbox

    work = tempfile.mkdtemp(prefix="r2v-spawn-")
    variants = {"prlimit": Sandbox(), "preexec_fn": Sandbox()}
    variants["preexec_fn"]._prlimit = None  # the fallback path, taken where util-linux prlimit is missing
    for gb in sizes_gb:
        blob = bytearray(int(gb * 2**30))
        for i in range(0, len(blob), 4096):  # touch every page: a fork copies the page tables of all of them
            blob[i] = 1
        res: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(n):
            for name, sb in variants.items():
                start = time.perf_counter()
                assert sb.run(["true"], workdir=work).ok
                res[name].append(time.perf_counter() - start)
        print(f"caller +{gb:g} GB: " + ", ".join(f"{k} {statistics.median(v) * 1000:.1f} ms" for k, v in res.items()))
        del blob


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phases", action="store_true", help="time one command, the test phase and a reset")
    parser.add_argument("--think-ms", type=float, default=0.0,
                        help="with --phases: an agent's pause before each step, untimed (default 0: back to back)")
    parser.add_argument("--reset", nargs="+", metavar=("DIR", "TASK"), help="cold and warm resets of tasks")
    parser.add_argument("--spawn", nargs="+", type=float, metavar="GB", help="one sandboxed command from a big caller")
    args = parser.parse_args()
    if args.spawn:
        return spawns(args.spawn)
    if args.phases:
        return phases(args.rounds, args.think_ms / 1000)
    if args.reset:
        return resets(args.reset[0], args.reset[1:])
    ids = sorted(load_suite())
    envs = {"plain": gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, split="all",
                              backend=PlainBackend()),
            "sandbox": gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, split="all", backend="local")}
    times: dict[str, dict[str, list[float]]] = {name: {t: [] for t in ids} for name in envs}
    for r in range(args.rounds):
        for task_id in ids:  # the two backends back to back on each task, in alternating order: slow drifts of
            order = list(envs) if r % 2 == 0 else list(envs)[::-1]  # the machine's speed hit both alike
            for name in order:
                seconds, won = play(envs[name], task_id)
                assert won, (name, task_id)
                times[name][task_id].append(seconds)
    isolation = envs["sandbox"].unwrapped.backend.isolation
    print(f"{len(ids)} tasks, {args.rounds} rounds, sandbox isolation: {isolation} (median seconds per task)")
    print(f"{'task':24s} {'plain':>7s} {'sandbox':>8s} {'ratio':>6s}")
    totals = {name: 0.0 for name in envs}
    for task_id in ids:
        med = {name: statistics.median(times[name][task_id]) for name in envs}
        for name in envs:
            totals[name] += med[name]
        print(f"{task_id:24s} {med['plain']:7.2f} {med['sandbox']:8.2f} {med['sandbox'] / med['plain']:6.2f}")
    print(f"{'total':24s} {totals['plain']:7.2f} {totals['sandbox']:8.2f} {totals['sandbox'] / totals['plain']:6.2f}")


if __name__ == "__main__":
    main()
