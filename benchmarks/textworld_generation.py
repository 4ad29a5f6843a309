"""Generation time of the TextWorld games a pipeline config plays, on an empty cache: one process vs parallel.

Takes every k-th game of the run's needed games (train, valid, test order; ``--games N`` of them, 0: all), and
generates them into a fresh temporary cache twice: with 1 generator process (what a stage playing the games
one at a time does) and with ``--workers`` processes (what ``r2v pipeline`` does up front,
:class:`r2v_train.prefetch.GamePrefetch`). Prints both wall times, their ratio, the projection to all needed
games, and the load average before and after (the machine may be shared).

    python benchmarks/textworld_generation.py --games 16 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from r2v_envs.textworld.generate import generate_games, missing_games
from r2v_train.pipeline import DEFAULT_CONFIG, load_config
from r2v_train.prefetch import needed_games


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(DEFAULT_CONFIG))
    ap.add_argument("--games", type=int, default=16, help="games to time (an even sample of the needed ones)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    needed = [s for items in needed_games(load_config(args.config)).values() for s, _ in items]
    step = max(1, len(needed) // args.games) if args.games else 1
    sample = needed[::step][: args.games or None]
    out = {"needed": len(needed), "timed": len(sample), "cpus": os.cpu_count(), "load_before": os.getloadavg()}
    for label, workers in (("serial", 1), ("parallel", args.workers)):
        with tempfile.TemporaryDirectory(prefix="r2v-gen-") as root:
            t0 = time.perf_counter()
            generate_games(sample, workers, Path(root), progress=True, desc=f"{label} ({workers} proc)")
            out[f"{label}_s"] = time.perf_counter() - t0
            assert not missing_games(sample, Path(root))
        out[f"load_after_{label}"] = os.getloadavg()
    out["workers"] = args.workers
    out["speedup"] = out["serial_s"] / out["parallel_s"]
    out["projected_all_serial_min"] = out["serial_s"] / len(sample) * len(needed) / 60
    out["projected_all_parallel_min"] = out["parallel_s"] / len(sample) * len(needed) / 60
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
