"""Append-only, crash-safe storage of rollouts: Parquet shards of steps, episodes and router rows.

A run directory holds ``steps-NNNNN.parquet``, ``router-NNNNN.parquet`` and ``episodes-NNNNN.parquet``
(one triple per flush, episodes in grid order) plus ``pending/`` (one JSON file per finished episode not yet
in a shard). Every file is written to a temporary name and renamed into place (``os.replace``), and the
episodes shard is written last: it is the commit marker of its triple. So a run killed with SIGKILL leaves
only whole files; on restart, step/router shards without their episodes shard are removed and pending
episodes are recovered, which loses at most the episodes that were in flight. (Files are not fsync'ed: the
guarantee covers a killed process, not a power cut; a per-episode fsync would cost more than short episodes.)

Load a table with :func:`load_rows` (plain dicts) or :func:`load_dataset` (a Hugging Face
``datasets.Dataset``); :func:`contexts_from_steps` rebuilds each step's :class:`Context` for training.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from r2v_agents.context import Context
from r2v_envs.errors import BackendUnavailableError, UnknownChoiceError
from r2v_envs.fileio import atomic_write

KINDS = ("steps", "router", "episodes")
_SHARD = re.compile(r"^(steps|router|episodes)-(\d{5})\.parquet$")


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:  # pragma: no cover - pyarrow ships with the train extra
        raise BackendUnavailableError("pyarrow", "pip install pyarrow (the runner writes Parquet shards)") from e
    return pa, pq


def schemas() -> dict[str, Any]:
    """The Arrow schema of each table (explicit, so shards with missing values still concatenate)."""
    pa, _ = _pyarrow()
    f64, i64, s = pa.float64(), pa.int64(), pa.string()
    candidate = pa.struct([("action", s), ("logprob", f64), ("token_logprobs", pa.list_(f64)),
                           ("token_entropies", pa.list_(f64)), ("verifier_score", f64)])
    key = [("episode_id", s), ("env_id", s), ("benchmark", s), ("split", s), ("task_id", s), ("z", i64)]
    return {
        "steps": pa.schema(key + [
            ("t", i64), ("max_steps", i64), ("goal", s), ("observation", s), ("history_actions", pa.list_(s)),
            ("admissible_actions", pa.list_(s)), ("perturbations", s), ("action", s), ("source", s),
            ("candidates", pa.list_(candidate)), ("verifier_score", f64), ("features", pa.list_(f64)),
            ("router_prob", f64), ("cost", f64), ("reward", f64), ("terminated", pa.bool_()),
            ("truncated", pa.bool_()), ("expert_action", s),
            # how a model agent's reply became the action, and the reply (null for other policies)
            ("grounding", s), ("reply", s), ("meta", s),
            # RL-ready columns, null unless the acting SLM recorded them (SLMPolicy(record_tokens=True))
            ("prompt_ids", pa.list_(i64)), ("completion_ids", pa.list_(i64)),
            ("completion_logprobs", pa.list_(f64))]),
        "episodes": pa.schema(key + [
            ("policy", s), ("success", pa.bool_()), ("steps", i64), ("return", f64), ("teacher_calls", i64),
            ("cost", f64), ("terminated", pa.bool_()), ("truncated", pa.bool_()), ("error", s),
            # what the env answered the last action (e.g. the judge's summary) and its verdict keys (JSON)
            ("final_observation", s), ("verdict", s)]),
        "router": pa.schema(key + [("t", i64), ("features", pa.list_(f64)), ("y", i64), ("source", s),
                                   ("router_prob", f64)]),
    }


def token_columns(tokens: Any) -> dict[str, list | None]:
    """The RL-ready step columns of a decision's :class:`~r2v_agents.policy.TokenTrace` (all None without one).

    Example:
        >>> from r2v_agents.policy import TokenTrace
        >>> token_columns(TokenTrace((5, 6), (7,), (-0.25,)))
        {'prompt_ids': [5, 6], 'completion_ids': [7], 'completion_logprobs': [-0.25]}
    """
    if tokens is None:
        return {"prompt_ids": None, "completion_ids": None, "completion_logprobs": None}
    return {"prompt_ids": [int(t) for t in tokens.prompt_ids],
            "completion_ids": [int(t) for t in tokens.completion_ids],
            "completion_logprobs": [float(x) for x in tokens.completion_logprobs]}


class ShardWriter:
    """Writes finished episodes to a run directory; see the module docstring for the crash-safety story."""

    def __init__(self, out_dir: str | os.PathLike):
        self.dir = Path(out_dir)
        self.pending_dir = self.dir / "pending"
        self.pending_dir.mkdir(parents=True, exist_ok=True)
        for tmp in [*self.dir.glob(".*.tmp"), *self.pending_dir.glob(".*.tmp")]:
            tmp.unlink()  # a write interrupted before its rename
        shards: dict[str, set[int]] = {k: set() for k in KINDS}
        for p in self.dir.iterdir():
            m = _SHARD.match(p.name)
            if m:
                shards[m.group(1)].add(int(m.group(2)))
        for kind in ("steps", "router"):
            for i in shards[kind] - shards["episodes"]:  # uncommitted triple
                (self.dir / f"{kind}-{i:05d}.parquet").unlink()
        self.next_index = max(shards["episodes"], default=-1) + 1
        self.finished = {r["episode_id"] for r in load_rows(self.dir, "episodes", columns=["episode_id"])}
        self.pending: dict[str, dict[str, Any]] = {}
        for p in sorted(self.pending_dir.glob("*.json")):
            record = json.loads(p.read_text())
            if record["episode"]["episode_id"] in self.finished:
                p.unlink()  # committed before the crash, pending file not yet removed
            else:
                self.pending[record["episode"]["episode_id"]] = record

    def _pending_path(self, episode_id: str) -> Path:
        return self.pending_dir / (re.sub(r"[^A-Za-z0-9_.@-]", "_", episode_id) + ".json")

    def add_pending(self, record: Mapping[str, Any]) -> None:
        """Journal one finished episode ({"episode": row, "steps": rows, "router": rows}) right away."""
        atomic_write(self._pending_path(record["episode"]["episode_id"]), json.dumps(record))

    def write_shard(self, records: list[Mapping[str, Any]]) -> None:
        """Write one shard triple holding ``records`` (in the given order), then drop their pending files."""
        if not records:
            return
        pa, pq = _pyarrow()
        sch = schemas()
        i = self.next_index
        for kind in ("steps", "router", "episodes"):  # episodes last: the commit marker
            rows = [rec["episode"] for rec in records] if kind == "episodes" else \
                [row for rec in records for row in rec[kind]]
            table = pa.Table.from_pylist(rows, schema=sch[kind])
            atomic_write(self.dir / f"{kind}-{i:05d}.parquet", lambda fh, t=table: pq.write_table(t, fh))
        self.next_index += 1
        for rec in records:
            self.finished.add(rec["episode"]["episode_id"])
            self._pending_path(rec["episode"]["episode_id"]).unlink(missing_ok=True)


def shard_files(out_dir: str | os.PathLike, kind: str) -> list[Path]:
    if kind not in KINDS:
        raise UnknownChoiceError("shard kind", kind, KINDS)
    d = Path(out_dir)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if (m := _SHARD.match(p.name)) and m.group(1) == kind)


def load_table(out_dir: str | os.PathLike, kind: str, columns: list[str] | None = None):
    """All committed shards of one kind as one ``pyarrow.Table`` (episodes in grid order per shard)."""
    pa, pq = _pyarrow()
    files = shard_files(out_dir, kind)
    if kind in ("steps", "router"):  # only committed triples
        committed = {p.name.split("-")[1] for p in shard_files(out_dir, "episodes")}
        files = [p for p in files if p.name.split("-")[1] in committed]
    schema = schemas()[kind]
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    tables = [pq.read_table(p, columns=columns if columns is None else
                            [c for c in columns if c in pq.read_schema(p).names]) for p in files]
    # a shard written before a column was added lacks it: read what it has; concat fills the rest with nulls
    return pa.concat_tables(tables, promote_options="default") if tables else schema.empty_table()


def load_rows(out_dir: str | os.PathLike, kind: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    return load_table(out_dir, kind, columns).to_pylist()


def load_dataset(out_dir: str | os.PathLike, kind: str = "steps"):
    """One table of a run as a Hugging Face ``datasets.Dataset``."""
    import datasets

    return datasets.Dataset(load_table(out_dir, kind))


def contexts_from_steps(rows: Iterable[Mapping[str, Any]]) -> Iterator[tuple[Context, Mapping[str, Any]]]:
    """Rebuild the context x_t of every logged step (rows of one episode must be consecutive, t ascending)."""
    ctx: Context | None = None
    episode, prev = None, None
    for row in rows:
        info = {"goal": row["goal"], "admissible_actions": row["admissible_actions"], "step": row["t"]}
        if row["episode_id"] != episode or ctx is None:
            episode = row["episode_id"]
            ctx = Context.start(row["goal"], row["observation"], info, max_steps=row["max_steps"])
            ctx = _with_keys(ctx, row)
        else:
            ctx = ctx.advance(prev["action"], row["observation"], prev["reward"], info)
        prev = row
        yield ctx, row


def _with_keys(ctx: Context, row: Mapping[str, Any]) -> Context:
    from dataclasses import replace
    return replace(ctx, benchmark=row["benchmark"], task_id=row["task_id"],
                   extra={"episode_id": row["episode_id"], "z": row["z"]})
