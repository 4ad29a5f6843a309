"""Write one self-contained HTML page for a run: the data inline as JSON, the page's script and style inline.

The page holds ``<script type="application/json">`` blocks: ``r2v-index`` (the summary and the episode list,
parsed when the page opens) and one ``r2v-steps-<n>`` block per chunk of :data:`CHUNK_EPISODES` episodes, parsed
only when one of its episodes is opened, so a run of 10,000 episodes opens as fast as its list renders. A large
run's chunks are gzip-compressed and base64-encoded (the page inflates them with the browser's own
``DecompressionStream``), which keeps the six-method, five-condition evaluation of the default pipeline a few MB.
No request leaves the page: no CDN, no fonts, plots as data URIs; the Content-Security-Policy says so too.

Every string from a run (observations, replies, task ids) is data: JSON in the page, with ``<``, ``>`` and ``&``
written as ``\\u003c``..., so no text closes its script block; the page builds its DOM with ``textContent``.

Example:
    >>> safe_json({"obs": "</script><script>alert(1)</script>"})
    '{"obs":"\\\\u003c/script\\\\u003e\\\\u003cscript\\\\u003ealert(1)\\\\u003c/script\\\\u003e"}'
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import os
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import r2v_envs
from r2v_agents.shards import load_table
from r2v_envs.fileio import atomic_write
from r2v_eval.view.runs import EPISODE_COLUMNS, detect, episode_rows, list_cells, summary
from r2v_eval.view.steps import episode_steps

CHUNK_EPISODES = 100
COMPRESS_ABOVE = 2_000_000
"""``compress="auto"`` gzips the step chunks when their JSON exceeds this many bytes in all."""
COMPRESS = ("auto", "always", "never")
PAGE_FORMAT = 1


def safe_json(obj: Any) -> str:
    """JSON that can sit inside an HTML ``<script>`` element whatever strings it holds."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def collect(run_dir: str | os.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The page's index and, per episode (in the index's order), its steps, final observation and verdict."""
    run_dir = Path(run_dir)
    kind, eval_dir = detect(run_dir)
    cells = list_cells(kind, eval_dir)
    rows, where = episode_rows(cells)
    index = {"format": PAGE_FORMAT, "kind": kind, "title": run_dir.resolve().name, "path": str(run_dir),
             "generated": time.strftime("%Y-%m-%dT%H:%M:%S"), "r2v": r2v_envs.__version__,
             "summary": summary(kind, run_dir, eval_dir),
             "cells": [{"env": c.env, "condition": c.condition, "method": c.method,
                        "dir": os.path.relpath(c.dir, run_dir)} for c in cells],
             "episode_columns": list(EPISODE_COLUMNS), "episodes": rows}
    wanted: dict[str, set[str]] = defaultdict(set)
    for _, d, eid in where:
        wanted[d].add(eid)
    steps: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    finals: dict[tuple[str, str], dict[str, Any]] = {}
    for d, eids in wanted.items():
        for r in load_table(d, "steps").to_pylist():
            if r["episode_id"] in eids:
                steps[(d, r["episode_id"])].append(r)
        for r in load_table(d, "episodes").to_pylist():
            if r["episode_id"] in eids:  # the last attempt's row, as in the episode list
                finals[(d, r["episode_id"])] = {"final": r.get("final_observation"),
                                               "verdict": json.loads(r["verdict"]) if r.get("verdict") else None}
    details = [{"steps": episode_steps(steps.get((d, eid), [])), **finals.get((d, eid), {})} for _, d, eid in where]
    return index, details


def _chunk_blocks(details: Sequence[Mapping[str, Any]], compress: str) -> tuple[list[str], str]:
    texts = [safe_json(list(details[i:i + CHUNK_EPISODES])) for i in range(0, len(details), CHUNK_EPISODES)]
    gz = compress == "always" or (compress == "auto" and sum(map(len, texts)) > COMPRESS_ABOVE)
    if gz:  # mtime=0: the same run gives the same bytes
        texts = [base64.b64encode(gzip.compress(t.encode(), 6, mtime=0)).decode() for t in texts]
    return texts, "gzip" if gz else "json"


def render(index: Mapping[str, Any], details: Sequence[Mapping[str, Any]], compress: str = "auto") -> str:
    """The HTML page of :func:`collect`'s output."""
    if compress not in COMPRESS:
        raise ValueError(f"compress must be one of {COMPRESS}, got {compress!r}")
    chunks, encoding = _chunk_blocks(details, compress)
    assets = resources.files("r2v_eval.view")
    css, js = (assets / "viewer.css").read_text(), (assets / "viewer.js").read_text()
    blocks = [f'<script type="application/json" id="r2v-index">{safe_json({**index, "chunk_episodes": CHUNK_EPISODES, "chunks": len(chunks), "encoding": encoding})}</script>']
    blocks += [f'<script type="application/json" id="r2v-steps-{i}">'
               f'{c if encoding == "json" else safe_json(c)}</script>' for i, c in enumerate(chunks)]
    csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>r2v view: {html.escape(str(index['title']))}</title>", f"<style>{css}</style>", "</head>",
        '<body><noscript>This page needs JavaScript to show the run.</noscript><div id="app"></div>',
        *blocks, f"<script>{js}</script>", "</body>", "</html>", ""])


def write_page(run_dir: str | os.PathLike, out: str | os.PathLike | None = None, compress: str = "auto") -> Path:
    """Read ``run_dir`` and write its page to ``out`` (default ``<run_dir>/view.html``); returns the path."""
    index, details = collect(run_dir)
    path = Path(out) if out is not None else Path(run_dir) / "view.html"
    atomic_write(path, render(index, details, compress))
    return path
