"""The HumanEval+ judge that runs *inside* the sandbox (self-contained: stdlib + EvalPlus only).

:class:`r2v_envs.humaneval.judge.Judge` starts this file's source with ``python -I -c`` in a sandbox and
talks to it in JSON lines. One long-lived judge per env avoids a Python start and a numpy import per
judgement (0.25 s each, which alone would make judging 164 tasks several times slower than EvalPlus).

The judge itself never executes model code: like EvalPlus, every candidate runs in a forked child
(``evalplus.eval.untrusted_check``, with EvalPlus' ``reliability_guard`` and per-input time limits). After each
request the judge kills whatever the candidate left running (every other process in its PID namespace).
Requests::

    {"id": 1, "mode": "full",  "task_file": "...pkl", "code": "..."}
        -> {"id": 1, "base": {"status", "n"}, "plus": {...}, "budget_s": 4.0, "budget_hit": false}
    {"id": 2, "mode": "smoke", "task_file": "...pkl", "code": "...", "n_public": 3, "budget_s": 5.0}
        -> {"id": 2, "status": "pass"|"fail"|"timeout", "examples": [{"call", "expected", "got", "passed"}],
            "budget_hit": false, "wall_s": 0.4}

``smoke`` (the agent's ``test``) and ``full`` (its ``submit``) each run under a wall-time budget for the whole
request. EvalPlus' own bound is min(60 s, sum of per-input limits) + ~3 s per check, i.e. up to two minutes for
a program stuck where the SIGALRM of EvalPlus' per-input limit cannot reach it (``sum(itertools.count())``, a
loop at import): measured 76 s for one ``submit``, which weak models' loops turn into most of an evaluation's
time. ``full`` is bounded by :func:`submit_budget`, derived from the task's ground-truth time, so the verdict of
every program that finishes within it is EvalPlus' own, and a program that does not gets ``timeout``.

EvalPlus 0.3.1 (the PyPI release) cannot pass HumanEval/32 at all: its ``find_zero`` special oracle
``continue``s before recording the input as passed, so ``untrusted_check`` sees too few results and fails
every program, the canonical solution included. Upstream fixed it (commit 26d6d00: record the pass, then
``continue``); :func:`patch_evalplus` applies exactly that fix to the installed function, only when the buggy
lines are present, and the judge reports the patches it applied.

Trust model: the same as EvalPlus' (a deliberately hostile candidate that introspects the judge could forge
a verdict); the sandbox bounds what it can do to the host.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
from typing import Any

DATASET = "humaneval"
MAX_REPR = 300
CHECK_GRACE_S = 1.0  # see smoke(): a `test` takes at most its budget + this
_RECORDS: dict[str, dict[str, Any]] = {}  # task_file -> record (the last two: expected outputs can be 150 MB)


def short_repr(x: Any) -> str:
    try:
        text = repr(x)
    except BaseException as exc:  # noqa: BLE001 - a hostile __repr__
        text = f"<unrepresentable: {type(exc).__name__}>"
    return text if len(text) <= MAX_REPR else text[:MAX_REPR] + f"... ({len(text)} chars)"


def load(task_file: str) -> dict[str, Any]:
    if task_file not in _RECORDS:
        while len(_RECORDS) >= 2:
            _RECORDS.pop(next(iter(_RECORDS)))
        with open(task_file, "rb") as f:
            _RECORDS[task_file] = pickle.load(f)
    return _RECORDS[task_file]


def time_limits(ref_time: list[float]) -> list[float]:
    from evalplus.config import DEFAULT_GT_TIME_LIMIT_FACTOR, DEFAULT_MIN_TIME_LIMIT

    # The formula of evalplus.eval.untrusted_check, so the display run gets the same budget per input.
    return [max(DEFAULT_MIN_TIME_LIMIT, DEFAULT_GT_TIME_LIMIT_FACTOR * t) for t in ref_time]


# The whole-task budget of ``full`` (the agent's ``submit``): FLOOR + FACTOR x the canonical solution's total
# ground-truth time over every base and plus input, capped at EvalPlus' own bound for the two checks. The
# factor is EvalPlus' per-input one (DEFAULT_GT_TIME_LIMIT_FACTOR); the floor covers the fork, the candidate's
# import and the checks' own overhead. Over HumanEval+ v0.1.10 the ground-truth total is 1.6 ms at the median
# and 10.7 s at most (HumanEval/15), so nearly every task gets the floor and a looping program costs seconds,
# where EvalPlus' per-input limits add up to about 18-126 s per task.
SUBMIT_FLOOR_S = 4.0
SUBMIT_FACTOR = 4.0
SUBMIT_CAP_S = 2 * (60.0 + 3.0)


def submit_budget(rec: dict[str, Any]) -> float:
    """Wall-clock seconds ``full`` may take for this task (see ``SUBMIT_FLOOR_S``)."""
    gt = sum(rec["expected"]["base_time"]) + sum(rec["expected"]["plus_time"])
    return min(SUBMIT_CAP_S, SUBMIT_FLOOR_S + SUBMIT_FACTOR * gt)


def full(rec: dict[str, Any], code: str) -> dict[str, Any]:
    """``evalplus.evaluate.check_correctness`` (base and plus, fast_check), minus its heavy imports, within the
    task's whole budget (:func:`submit_budget`): a check the budget cuts short is a ``timeout``, as EvalPlus
    reports a candidate that outlives its own bound, and a part not reached is a ``timeout`` too."""
    import time

    budget = submit_budget(rec)
    deadline = time.monotonic() + budget
    out: dict[str, Any] = {"budget_s": round(budget, 3), "budget_hit": False}
    for part in ("base", "plus"):
        inputs = rec[f"{part}_input"]
        if time.monotonic() >= deadline:
            out[part] = {"status": "timeout", "n": len(inputs)}
            out["budget_hit"] = True
            continue
        status, _ = bounded_check(code, inputs, rec["entry_point"], rec["expected"][part], rec["atol"],
                                  rec["expected"][f"{part}_time"], deadline, fast_check=True)
        out["budget_hit"] = out["budget_hit"] or (status == "timeout" and time.monotonic() >= deadline)
        out[part] = {"status": status, "n": len(inputs)}
        sweep()
    return out


def _display_child(code: str, entry_point: str, inputs: list, limits: list[float], conn) -> None:
    import copy

    from evalplus.eval import query_maximum_memory_bytes
    from evalplus.eval.utils import TimeoutException, reliability_guard, swallow_io, time_limit

    reliability_guard(maximum_memory_bytes=query_maximum_memory_bytes())
    try:
        env: dict[str, Any] = {}
        with swallow_io():
            exec(code, env)  # noqa: S102 - we are the sandboxed, forked child
        fn = env[entry_point]
    except BaseException as exc:  # noqa: BLE001
        conn.send(("load", f"{type(exc).__name__}: {exc}"[:MAX_REPR]))
        return
    for inp, limit in zip(inputs, limits):
        try:
            with time_limit(limit), swallow_io():
                got = fn(*copy.deepcopy(inp))
            conn.send(("ok", short_repr(got)))
        except TimeoutException:
            conn.send(("timeout", f"time limit of {limit:g}s exceeded"))
            return  # the rest would most likely time out too: do not make the agent wait for each
        except BaseException as exc:  # noqa: BLE001
            conn.send(("raise", f"{type(exc).__name__}: {exc}"[:MAX_REPR]))


def display(code: str, entry_point: str, inputs: list, limits: list[float],
            deadline: float) -> tuple[list[tuple[str, str]], bool]:
    """What the candidate returns on each public input (shown to the agent), from a forked child.

    Returns ``(shown, budget_hit)``: one ``(kind, text)`` per input the child finished before its first
    per-input timeout or the wall-clock ``deadline`` (monotonic), and whether the deadline cut it short.
    """
    import multiprocessing
    import time

    parent, child = multiprocessing.Pipe(duplex=False)
    proc = multiprocessing.Process(target=_display_child, args=(code, entry_point, inputs, limits, child))
    proc.start()
    child.close()
    shown: list[tuple[str, str]] = []
    own = time.monotonic() + sum(limits) + 2.0
    budget_hit = False
    while len(shown) < len(inputs):
        now = time.monotonic()
        if now >= min(own, deadline):
            budget_hit = deadline <= own
            break
        if not parent.poll(min(own, deadline) - now):
            continue
        try:
            shown.append(parent.recv())
        except (EOFError, OSError):
            break
        if shown[-1][0] in ("load", "timeout"):
            break
    proc.kill()
    proc.join()
    return shown, budget_hit


def bounded_check(code: str, inputs: list, entry_point: str, expected: list, atol: float,
                  ref_time: list[float], deadline: float, fast_check: bool = False) -> tuple[str, list[bool]]:
    """``evalplus.eval.untrusted_check`` with its wall-clock bound cut to ``deadline``.

    The judgement is EvalPlus' own: the same ``unsafe_execute`` in a forked child with the same per-input
    time limits and the same status mapping; only the join timeout is ``min(EvalPlus' timeout, deadline)``.
    """
    import multiprocessing
    import time

    import evalplus.eval as ev

    limits = time_limits(ref_time)
    # untrusted_check's own: + 1, + 1 to collect (without fast_check), + 1 on join
    timeout = min(60.0, sum(limits)) + (2.0 if fast_check else 3.0)
    progress, stat = multiprocessing.Value("i", 0), multiprocessing.Value("i", ev._UNKNOWN)
    details = multiprocessing.Array("b", [False] * len(inputs))
    proc = multiprocessing.Process(target=ev.unsafe_execute, args=(DATASET, entry_point, code, inputs, expected,
                                                                   limits, atol, fast_check, stat, details,
                                                                   progress))
    proc.start()
    proc.join(timeout=max(0.0, min(timeout, deadline - time.monotonic())))
    if proc.is_alive():
        proc.kill()
        proc.join()
    status = ev._mapping[stat.value] or ev.TIMEOUT
    done = [bool(d) for d in details[: progress.value]]
    if status == ev.PASS and (len(done) != len(inputs) or not all(done)):
        status = ev.FAIL
    return status, done


def smoke(rec: dict[str, Any], code: str, n_public: int, budget_s: float) -> dict[str, Any]:
    """The agent's ``test``: the candidate's outputs on the public inputs and EvalPlus' pass/fail for each,
    within ``budget_s`` (+ ``CHECK_GRACE_S``) seconds of wall time in all."""
    import time

    start = time.monotonic()
    deadline = start + budget_s
    inputs = rec["base_input"][:n_public]
    expected = rec["expected"]["base"][:n_public]
    ref_time = rec["expected"]["base_time"][:n_public]
    shown, budget_hit = display(code, rec["entry_point"], inputs, time_limits(ref_time), deadline)
    sweep()
    # Judge only the examples the display run finished: the one that timed out (or ran into the budget)
    # and those after it are failed without a second wait, since EvalPlus' check would wait for them again.
    finished = 0 if shown and shown[0][0] == "load" else sum(1 for kind, _ in shown if kind in ("ok", "raise"))
    status, details = "fail", []
    if finished:
        # These inputs just returned, so their check needs little; a run that ended on the budget still
        # gets CHECK_GRACE_S for it (a program that returned once and now loops waits at most that long).
        check_deadline = max(deadline, time.monotonic() + CHECK_GRACE_S)
        status, details = bounded_check(code, inputs[:finished], rec["entry_point"], expected[:finished],
                                        rec["atol"], ref_time[:finished], check_deadline)
        sweep()
        budget_hit = budget_hit or (len(details) < finished and time.monotonic() >= check_deadline)
    if finished < len(inputs):  # EvalPlus (fast_check off) fails a per-input timeout; a cut run is a timeout
        status = "timeout" if budget_hit else "fail"
    args = [", ".join(short_repr(a) for a in inp) for inp in inputs]
    examples = []
    for i, inp in enumerate(inputs):
        if shown and shown[0][0] == "load":
            kind, text = shown[0]
        elif i < len(shown):
            kind, text = shown[i]
        elif budget_hit and i == len(shown):
            kind, text = "budget", f"stopped: the {budget_s:g} s budget of `test` ran out"
        else:
            kind, text = "skipped", "not run: an earlier example did not finish"
        examples.append({"call": f"{rec['entry_point']}({args[i]})", "expected": short_repr(expected[i]),
                         "got": text, "kind": kind, "passed": bool(i < len(details) and details[i])})
    return {"status": status, "examples": examples, "budget_hit": budget_hit,
            "wall_s": round(time.monotonic() - start, 3)}


_BUGGY_FIND_ZERO = ("assert abs(_poly(*inp, out)) <= atol\n"
                    "                            continue")
_FIXED_FIND_ZERO = ("assert abs(_poly(*inp, out)) <= atol\n"
                    "                            details[i] = True\n"
                    "                            progress.value += 1\n"
                    "                            continue")


def patch_evalplus() -> list[str]:
    """Apply upstream EvalPlus' fix of the find_zero oracle to an installed release that lacks it."""
    import inspect
    import textwrap

    import evalplus.eval as ev

    source = textwrap.dedent(inspect.getsource(ev.unsafe_execute))
    if _BUGGY_FIND_ZERO not in source:
        return []
    namespace = ev.__dict__  # compile into the module, so untrusted_check calls the fixed function
    exec(compile(source.replace(_BUGGY_FIND_ZERO, _FIXED_FIND_ZERO), ev.__file__, "exec"), namespace)
    return ["find_zero-progress (evalplus 26d6d00)"]


def sweep() -> None:
    """Kill every process the candidate left behind (see the module doc)."""
    if os.environ.get("R2V_JUDGE_PIDNS") == "1":  # alone in a PID namespace: -1 means "all of ours"
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return
    # The same sweep as r2v_envs.sandbox.processes.kill_marked: this file runs alone (python -I) inside the sandbox,
    # where r2v_envs cannot be imported.
    marker = os.environ.get("R2V_SANDBOX_RUN", "")
    if not marker:
        return
    needle = f"R2V_SANDBOX_RUN={marker}".encode()
    # r2v_envs.sandbox.processes.kill_marked's sweep, restated: this file runs as `python -I -c` source inside the
    # sandbox, where r2v is not importable
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass


def serve() -> None:
    # Protocol on private copies of stdin/stdout; fds 0-2 point at /dev/null, so whatever a candidate prints
    # at the file-descriptor level cannot garble the protocol (nor fill a pipe nobody reads).
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    reader, writer = os.fdopen(rfd, "r"), os.fdopen(wfd, "w")
    patches = patch_evalplus()  # also warms the evalplus import before the first request

    writer.write(json.dumps({"ready": True, "patches": patches}) + "\n")
    writer.flush()
    for line in reader:
        req: Any = None
        try:
            req = json.loads(line)
            rec = load(req["task_file"])
            if req["mode"] == "full":
                resp = full(rec, req["code"])
            else:
                resp = smoke(rec, req["code"], int(req.get("n_public", 3)), float(req.get("budget_s", 5.0)))
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            resp = {"error": f"{type(exc).__name__}: {exc}"}
        resp["id"] = req.get("id") if isinstance(req, dict) else None
        writer.write(json.dumps(resp) + "\n")
        writer.flush()


if __name__ == "__main__":
    serve()
