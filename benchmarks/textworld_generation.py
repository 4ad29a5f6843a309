"""Generation speed of the TextWorld games a pipeline config plays, on an empty cache: game servers vs one
process per game, in one run.

Takes an even sample of the run's needed games (train, valid, test order; ``--games N`` of them, 0: all) and
generates it into fresh temporary caches twice, with ``--workers`` parallel workers each time:

* ``per_game``: one fresh generator process per game (:func:`r2v_envs.textworld.generate.ensure_game` alone,
  what every generation did before game servers, and what a lone lazy ``reset`` still does);
* ``server``: one :class:`r2v_envs.textworld.generate.GameServer` per worker (import once, warm up, fork per
  game; :func:`~r2v_envs.textworld.generate.generate_games` and the pipeline's prefetch).

Prints games/s and the CPU seconds per game of each (the CPU of every generator process and its Inform 7
compiler runs, which other users of a shared machine disturb less than wall time), their ratios, whether both
wrote the same bytes, the projection to all needed games, and the load average before and after.

    python benchmarks/textworld_generation.py --games 24 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from r2v_envs.textworld.generate import ensure_game, game_path, generate_games, missing_games
from r2v_train.config import DEFAULT_CONFIG, load_config
from r2v_train.runtime.prefetch import needed_games


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(DEFAULT_CONFIG))
    ap.add_argument("--games", type=int, default=24, help="games to time (an even sample of the needed ones)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    needed = [s for items in needed_games(load_config(args.config)).values() for s, _ in items]
    step = max(1, len(needed) // args.games) if args.games else 1
    sample = needed[::step][: args.games or None]
    out = {"needed": len(needed), "timed": len(sample), "workers": args.workers, "cpus": os.cpu_count(),
           "load_before": os.getloadavg()}

    def per_game(root: Path) -> None:
        with ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(lambda s: ensure_game(s, root), sample))

    def server(root: Path) -> None:
        generate_games(sample, args.workers, root, progress=True, desc=f"server ({args.workers} workers)")

    with tempfile.TemporaryDirectory(prefix="r2v-gen-") as tmp:
        for label, run in (("server", server), ("per_game", per_game)):
            root = Path(tmp) / label
            cpu, t0 = _children_cpu(), time.perf_counter()
            run(root)
            wall = time.perf_counter() - t0
            assert not missing_games(sample, root)
            out[f"{label}_games_per_s"] = len(sample) / wall
            out[f"{label}_cpu_s_per_game"] = (_children_cpu() - cpu) / len(sample)
            out[f"load_after_{label}"] = os.getloadavg()
        same = lambda s, x: (game_path(s, Path(tmp) / "server").with_suffix(x).read_bytes()  # noqa: E731
                             == game_path(s, Path(tmp) / "per_game").with_suffix(x).read_bytes())
        out["identical_bytes"] = all(same(s, x) for s in sample for x in (".z8", ".json"))
    out["speedup_games_per_s"] = out["server_games_per_s"] / out["per_game_games_per_s"]
    out["cpu_ratio_per_game_over_server"] = out["per_game_cpu_s_per_game"] / out["server_cpu_s_per_game"]
    for label in ("server", "per_game"):
        out[f"projected_all_{label}_min"] = len(needed) / out[f"{label}_games_per_s"] / 60
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
