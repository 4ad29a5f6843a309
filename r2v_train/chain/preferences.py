"""The preference stage (5/8 of the chain): BC candidates, verifier scores and preference pairs (a+, a-) at D_traj contexts.

For every context x_t' of D_traj (a subsample of at most ``max_contexts``), the BC policy samples K candidates
(:meth:`r2v_agents.slm.SLMPolicy.propose`: the inference prompt builder and sampler, so no train/serve skew) and
the verifier V_phi scores them. The teacher's recovery action a^T is the action logged at that context (the
clean teacher's, or the same action re-executed in the perturbed replay): an offline teacher query.

Pair rule (Sec. 3.1: "a+ is verifier-approved or teacher-recovered and a- is a lower-quality BC-sampled
alternative"):

1. A candidate is *verifier-approved* when V(x, a) >= ``approve_threshold`` and, where the context lists admissible
   actions (agent-visible), the action is one of them.
2. a+ = the best approved candidate if its score is at least V(x, a^T) (origin ``verifier``); otherwise a+ = a^T
   (origin ``teacher``: none of the BC samples is good enough, so the teacher supplies the recovery action).
3. a- = the lowest-scored BC candidate that differs from a+ and scores below V(x, a+) - ``margin``. A context
   with no such candidate (every sample is as good as a+) gives no pair: nothing there to correct.

Each pair carries ``prompt_alt``: the prompt of the same (task, t) under another perturbation seed whose action
prefix is identical (the same latent state, Eq. 6), cycling through the available seeds; and ``candidates``: the
other distinct BC samples (shared by both views in the consistency term of
:mod:`r2v_train.chain.dpo_consistency`). Completions are in the BC format (:func:`r2v_agents.prompts.format_completion`).

Output: ``out_dir/pairs.parquet``. Contexts are processed in chunks written atomically to ``out_dir/chunks/``,
so a killed stage resumes at the first missing chunk.

Example:
    >>> choose_pair([("take coin", 0.9), ("look", 0.5), ("dance", 0.2)], "take coin", 0.9, ["take coin", "look"])
    ('take coin', 'dance', 'verifier')
    >>> choose_pair([("look", 0.5), ("look", 0.5)], "go east", 0.7, None)
    ('go east', 'look', 'teacher')
    >>> choose_pair([("go east", 0.7)], "go east", 0.7, None) is None
    True
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r2v_agents.prompts import action_style, build_prompt, format_completion, render_prompt
from r2v_agents.samplers.transformers_sampler import TransformersSampler
from r2v_agents.shards import contexts_from_steps, load_rows
from r2v_agents.slm import SLMPolicy
from r2v_agents.verifiers import verifier_for
from r2v_envs.fileio import atomic_write

PAIRS_FILE = "pairs.parquet"


@dataclass
class PreferenceConfig:
    """The preference stage's settings."""

    k: int = 5
    """BC candidates sampled per context"""
    max_contexts: int = 0
    """contexts of D_traj used (a seeded subsample; 0: all)"""
    approve_threshold: float = 0.6
    """verifier score at which a BC candidate counts as approved"""
    margin: float = 0.0
    """a- must score below V(a+) minus this"""
    max_new_tokens: int = 16
    """token cap of a sampled action"""
    temperature: float = 1.0
    """sampling temperature of the BC policy"""
    chunk_size: int = 64
    """contexts per resumable chunk"""
    seed: int = 0
    """seed of the subsample and of candidate sampling"""


def choose_pair(scored: Sequence[tuple[str, float]], teacher_action: str, teacher_score: float,
                admissible: Sequence[str] | None, approve_threshold: float = 0.6, margin: float = 0.0
                ) -> tuple[str, str, str] | None:
    """(a+, a-, origin of a+) by the rule in the module docstring, or None when no pair exists."""
    allowed = set(admissible) if admissible else None
    approved = [(a, s) for a, s in scored if a and s >= approve_threshold and (allowed is None or a in allowed)]
    best = max(approved, key=lambda x: x[1], default=None)
    if best is not None and best[1] >= teacher_score:
        plus, plus_score, origin = best[0], best[1], "verifier"
    else:
        plus, plus_score, origin = teacher_action, teacher_score, "teacher"
    worse = [(a, s) for a, s in scored if a and a != plus and s < plus_score - margin]
    if not worse:
        return None
    minus = min(worse, key=lambda x: x[1])[0]
    return plus, minus, origin


def traj_contexts(dirs: Sequence[str | os.PathLike]) -> list[tuple[Any, dict[str, Any]]]:
    """(context, step row) of every step of the runner directories ``dirs`` (D_traj), in log order."""

    out = []
    for d in dirs:
        out.extend(contexts_from_steps(load_rows(d, "steps")))
    return out


def _views(items: list[tuple[Any, dict[str, Any]]], tokenizer: Any = None, style: str = "line"
           ) -> dict[tuple[str, int], dict[int, tuple[str, tuple]]]:
    views: dict[tuple[str, int], dict[int, tuple[str, tuple]]] = {}
    for ctx, row in items:
        views.setdefault((row["task_id"], row["t"]), {})[row["z"]] = (render_prompt(build_prompt(ctx), tokenizer, style),
                                                                      tuple(ctx.actions))
    return views


def alt_prompt(views: dict[int, tuple[str, tuple]], z: int) -> str | None:
    """The prompt of the next seed (cyclic) with the same action prefix, or None."""
    own = views[z][1]
    others = sorted(s for s, (_, prefix) in views.items() if s != z and prefix == own)
    if not others:
        return None
    later = [s for s in others if s > z]
    return views[(later or others)[0]][0]


def preferences_stage(cfg: PreferenceConfig, model_dir: str, traj: Sequence[str | os.PathLike],
                      out_dir: str | os.PathLike, env_id: str = "R2V/TextWorld-v0") -> dict[str, Any]:
    """Build the preference pairs; returns {"pairs": path, "rows": n, "contexts": n, "teacher_share": x}."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    out, chunks = Path(out_dir), Path(out_dir) / "chunks"
    chunks.mkdir(parents=True, exist_ok=True)
    items = traj_contexts(traj)
    if not items:
        raise ValueError(f"no D_traj contexts in {list(map(str, traj))}")
    views = tok = None
    order = np.arange(len(items))
    if cfg.max_contexts and cfg.max_contexts < len(items):
        order = np.sort(np.random.default_rng(cfg.seed).choice(len(items), cfg.max_contexts, replace=False))
    verifier, style = verifier_for(env_id), action_style(env_id)
    policy = None
    for c0 in range(0, len(order), cfg.chunk_size):
        path = chunks / f"chunk-{c0 // cfg.chunk_size:05d}.parquet"
        if path.exists():
            continue
        if policy is None:  # load the model only when there is work left
            sampler = TransformersSampler.from_pretrained(model_dir, max_new_tokens=cfg.max_new_tokens,
                                                          temperature=cfg.temperature, seed=cfg.seed, style=style)
            policy = SLMPolicy(sampler, verifier, k=cfg.k)
            tok = sampler.tokenizer  # pairs are rendered as the model reads them (a chat turn for chat models)
            views = _views(items, tok, style)
        batch = [items[i] for i in order[c0:c0 + cfg.chunk_size]]
        proposals = policy.propose([ctx for ctx, _ in batch])
        rows = []
        for (ctx, row), cands in zip(batch, proposals):
            scored = [(c.action, float(c.verifier_score or 0.0)) for c in cands]
            teacher_score = float(verifier.score_batch(ctx, [row["action"]])[0])
            pair = choose_pair(scored, row["action"], teacher_score, ctx.admissible_actions,
                               cfg.approve_threshold, cfg.margin)
            if pair is None:
                continue
            plus, minus, origin = pair
            extra = sorted({a for a, _ in scored if a and a not in (plus, minus)})
            rows.append({"prompt": render_prompt(build_prompt(ctx), tok, style),
                         "chosen": format_completion(plus, tok, style), "rejected": format_completion(minus, tok, style),
                         "prompt_alt": alt_prompt(views[(row["task_id"], row["t"])], row["z"]),
                         "candidates": [format_completion(a, tok, style) for a in extra], "origin": origin,
                         "task_id": row["task_id"], "t": row["t"], "z": row["z"],
                         "chosen_score": max(s for a, s in scored + [(row["action"], teacher_score)] if a == plus),
                         "rejected_score": min(s for a, s in scored if a == minus)})
        chunk = pa.Table.from_pylist(rows, schema=_schema())
        atomic_write(path, lambda fh: pq.write_table(chunk, fh))
    table = pa.concat_tables([pq.read_table(p) for p in sorted(chunks.glob("chunk-*.parquet"))])
    atomic_write(out / PAIRS_FILE, lambda fh: pq.write_table(table, fh))
    origins = table.column("origin").to_pylist()
    return {"pairs": str(out / PAIRS_FILE), "rows": table.num_rows, "contexts": int(len(order)),
            "teacher_share": origins.count("teacher") / len(origins) if origins else float("nan")}


def _schema():
    import pyarrow as pa

    s, i64, f64 = pa.string(), pa.int64(), pa.float64()
    return pa.schema([("prompt", s), ("chosen", s), ("rejected", s), ("prompt_alt", s), ("candidates", pa.list_(s)),
                      ("origin", s), ("task_id", s), ("t", i64), ("z", i64), ("chosen_score", f64),
                      ("rejected_score", f64)])
