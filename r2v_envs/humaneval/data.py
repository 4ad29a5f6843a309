"""HumanEval+ tasks from EvalPlus and their expected outputs, cached per task under ``R2V_CACHE``.

EvalPlus judges a solution by comparing its outputs with the canonical solution's on every base and plus
input. It computes those expected outputs by running the canonical solutions (``evalplus.gen.util.
trusted_exec``, the code ``evalplus.evaluate.get_groundtruth`` calls) and caches one 250 MB pickle for the
whole dataset. We call the same function but cache one file per task, keyed by the dataset's hash and the
EvalPlus version, written atomically, so a judge loads only the task it needs (two tasks' outputs alone are
90 and 147 MB).

Data: ``HUMANEVAL_OVERRIDE_PATH`` (EvalPlus' own variable) or ``data_path=`` points at a release file such
as ``HumanEvalPlus-v0.1.10.jsonl.gz``; otherwise EvalPlus downloads its release on first use.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from r2v_envs.core import cache_dir
from r2v_envs.errors import BackendUnavailableError
from r2v_envs.fileio import atomic_write

OVERRIDE_VAR = "HUMANEVAL_OVERRIDE_PATH"
N_TASKS = 164
# Fields a judge needs; the prompt and canonical solution stay with the env.
JUDGE_FIELDS = ("task_id", "entry_point", "atol", "base_input", "plus_input")

_PROBLEMS: dict[str, tuple[str, dict[str, dict[str, Any]]]] = {}  # resolved path -> (hash, problems)

HOW_TO_GET = (
    "install EvalPlus (`pip install 'r2v[humaneval]'`, i.e. evalplus>=0.3.1) and either let it download "
    "HumanEval+ on first use (needs internet), or download HumanEvalPlus-v0.1.10.jsonl.gz from "
    "https://github.com/evalplus/humanevalplus_release/releases and set HUMANEVAL_OVERRIDE_PATH=/path/to/it "
    "(or pass data_path=...)"
)


def cache_root() -> str:
    return str(cache_dir("humaneval"))


def _require_evalplus() -> None:
    try:
        import evalplus.data  # noqa: F401
    except ImportError as exc:
        raise BackendUnavailableError("evalplus", HOW_TO_GET) from exc


def load_problems(data_path: str | None = None) -> tuple[str, dict[str, dict[str, Any]]]:
    """(dataset hash, task_id -> EvalPlus problem) for HumanEval+; cached per process.

    ``data_path`` (or ``$HUMANEVAL_OVERRIDE_PATH``) is read with EvalPlus' own reader; without either,
    ``evalplus.data.get_human_eval_plus`` finds or downloads its release.

    Raises:
        BackendUnavailableError: EvalPlus is missing, or the data is neither given nor downloadable.
    """
    _require_evalplus()
    path = data_path or os.environ.get(OVERRIDE_VAR) or None
    key = os.path.realpath(path) if path else "<evalplus>"
    if key in _PROBLEMS:
        return _PROBLEMS[key]
    from evalplus.data.utils import completeness_check, stream_jsonl

    try:
        if path:
            if not os.path.isfile(path):
                raise FileNotFoundError(path)
            problems = {t["task_id"]: t for t in stream_jsonl(path)}
            with open(path, "rb") as f:
                digest = hashlib.md5(f.read()).hexdigest()  # the hash EvalPlus keys its cache by
        else:
            from evalplus.data import get_human_eval_plus, get_human_eval_plus_hash

            problems, digest = get_human_eval_plus(), get_human_eval_plus_hash()
        completeness_check("HumanEval+", problems)
    except BackendUnavailableError:
        raise
    except Exception as exc:  # no file, no network, a truncated download: all mean "no data"
        where = f"could not read {path!r} ({exc})" if path else f"EvalPlus could not provide the data ({exc})"
        raise BackendUnavailableError("humaneval", f"{where}; {HOW_TO_GET}") from exc
    _PROBLEMS[key] = (digest, problems)
    return digest, problems


def task_file(digest: str, task_id: str) -> str:
    """Where the judge data of ``task_id`` lives (problem fields + expected outputs)."""
    from evalplus import __version__ as evalplus_version

    return os.path.join(cache_root(), f"{digest}-evalplus{evalplus_version}", task_id.replace("/", "_") + ".pkl")


def compute_expected(problem: dict[str, Any]) -> dict[str, Any]:
    """EvalPlus' ground truth for one task: outputs and reference times of the canonical solution on the
    base and plus inputs, exactly as ``evalplus.evaluate.get_groundtruth`` computes them."""
    from evalplus.gen.util import trusted_exec

    code = problem["prompt"] + problem["canonical_solution"]
    oracle: dict[str, Any] = {}
    for part in ("base", "plus"):
        oracle[part], oracle[f"{part}_time"] = trusted_exec(code, problem[f"{part}_input"], problem["entry_point"],
                                                            record_time=True)
    return oracle


def _write_task_file(path: str, problem: dict[str, Any]) -> str:
    record = {k: problem[k] for k in JUDGE_FIELDS}
    record["expected"] = compute_expected(problem)
    # 0644 whatever the umask: the sandboxed judge runs as another uid and must read it
    atomic_write(path, pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL), mode=0o644)
    return path


def ensure_task_files(task_ids: Iterable[str], data_path: str | None = None, workers: int = 1) -> dict[str, str]:
    """Make sure every task's judge file exists (computing missing ones, ``workers`` processes at a time);
    returns task_id -> path. Safe to run concurrently: each file appears atomically."""
    digest, problems = load_problems(data_path)
    paths = {t: task_file(digest, t) for t in task_ids}
    missing = [t for t, p in paths.items() if not os.path.exists(p)]
    if missing:
        _make_readable_dirs(os.path.dirname(paths[missing[0]]))
    if len(missing) > 1 and workers > 1:
        import multiprocessing

        # fork: spawn/forkserver re-import __main__, which fails for scripts fed on stdin or in notebooks.
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            list(pool.map(_write_task_file, [paths[t] for t in missing], [problems[t] for t in missing]))
    else:
        for t in missing:
            _write_task_file(paths[t], problems[t])
    return paths


def _make_readable_dirs(path: str) -> None:
    os.makedirs(path, exist_ok=True)
    for d in (path, os.path.dirname(path)):
        try:
            os.chmod(d, os.stat(d).st_mode | 0o755)
        except OSError:
            pass

