"""Generate and cache TextWorld games with TextWorld's own generator.

Each game is generated in a fresh subprocess with ``PYTHONHASHSEED=0``: TextWorld's cooking generator
iterates over sets, so without a fixed hash seed the same seed gives different games in different
processes. Files are written to a temporary folder and renamed into the cache, so a killed generation
never leaves a half-written game. The cache lives in ``$R2V_CACHE/textworld`` (default
``~/.cache/r2v/textworld``).

Pre-generate a suite in parallel::

    python -m r2v_envs.textworld.generate --suite default --workers 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from r2v_envs.core import cache_dir
from r2v_envs.errors import BackendUnavailableError, GameGenerationError
from r2v_envs.textworld.suite import GameSpec, get_suite


def cache_root() -> Path:
    return cache_dir("textworld")


def game_path(spec: GameSpec, root: Path | None = None) -> Path:
    """Where the compiled game of ``spec`` lives (``<task_id>-<param digest>.z8``, with a ``.json`` beside)."""
    return (root or cache_root()) / spec.family / f"{spec.task_id}-{spec.key()}.z8"


def ensure_game(spec: GameSpec, root: Path | None = None, timeout: float = 300.0) -> Path:
    """Return the compiled game of ``spec``, generating it first if it is not cached."""
    path = game_path(spec, root)
    if path.is_file() and path.with_suffix(".json").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".tmp-") as tmp:
        tmp_game = Path(tmp) / path.name
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        proc = subprocess.run([sys.executable, "-m", "r2v_envs.textworld.generate", "--one", spec.to_json(),
                               "--out", str(tmp_game)], env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not tmp_game.is_file():
            if "No module named 'textworld'" in proc.stderr:
                raise BackendUnavailableError("textworld", "pip install 'r2v[textworld]'")
            raise GameGenerationError(f"could not generate {spec.task_id}: {proc.stderr.strip()[-2000:]}")
        # the .json is what marks a game complete (see the check above), so it moves last
        os.replace(tmp_game, path)
        os.replace(tmp_game.with_suffix(".json"), path.with_suffix(".json"))
    return path


# Some (map, seed) pairs admit no quest of the requested length; the generator then raises. Retrying with
# a fixed sequence of derived seeds keeps every game reproducible from its spec alone.
SEED_ATTEMPTS = 20
SEED_STRIDE = 10_007


def _generate_in_this_process(spec: GameSpec, out: Path) -> None:
    import textworld.challenges
    from textworld.generator import GameOptions, QuestGenerationError, compile_game, make_game

    for attempt in range(SEED_ATTEMPTS):
        options = GameOptions()
        options.seeds = spec.seed + SEED_STRIDE * attempt
        options.path = str(out)
        options.file_ext = ".z8"
        options.force_recompile = True
        try:
            if spec.challenge == "custom":
                options.nb_rooms = spec.settings["nb_rooms"]
                options.nb_objects = spec.settings["nb_objects"]
                options.quest_length = spec.settings["quest_length"]
                game = make_game(options)
            else:
                game = textworld.challenges.CHALLENGES[spec.challenge][1](dict(spec.settings), options)
            break
        except QuestGenerationError:
            continue
    else:
        raise GameGenerationError(f"no quest for {spec.task_id} in {SEED_ATTEMPTS} seed attempts")
    compile_game(game, options)
    # the Inform 7 source is an intermediate; keep the cache to the game and its json
    out.with_suffix(".ni").unlink(missing_ok=True)


def pregenerate(suite: str = "default", workers: int = 2, task_ids: list[str] | None = None,
                root: Path | None = None, progress: bool = True) -> list[Path]:
    """Generate (or find cached) every game of ``suite`` with ``workers`` parallel generator processes."""
    specs = get_suite(suite)
    todo = [specs[t] for t in (task_ids or list(specs))]
    return generate_games(todo, workers, root, progress, desc=f"TextWorld games ({suite})")


def missing_games(specs: Iterable[GameSpec], root: Path | None = None) -> list[GameSpec]:
    """The specs whose game is not complete in the cache (the test :func:`ensure_game` uses)."""
    return [s for s in specs if not (game_path(s, root).is_file() and game_path(s, root).with_suffix(".json").is_file())]


def generate_games(specs: Sequence[GameSpec], workers: int = 2, root: Path | None = None, progress: bool = True,
                   desc: str = "TextWorld games") -> list[Path]:
    """Generate (or find cached) the games of ``specs`` in ``workers`` parallel generator processes, with a
    tqdm bar on stderr that advances as each game finishes; returns their paths in the order of ``specs``.

    Each game still gets its own fresh generator process (:func:`ensure_game`), so a game's bytes do not
    depend on how many were generated together or in which order."""
    from tqdm.auto import tqdm

    paths: list[Path | None] = [None] * len(specs)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool, \
            tqdm(total=len(specs), desc=desc, unit="game", disable=not progress) as bar:
        futures = {pool.submit(ensure_game, s, root): i for i, s in enumerate(specs)}
        pending = set(futures)
        while pending:
            # a game takes 3-10 s on 2 cores: redraw every second so the elapsed time keeps moving
            finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for fut in finished:
                paths[futures[fut]] = fut.result()
            bar.update(len(finished)) if finished else bar.refresh()
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="default", help="suite to pre-generate (default, small)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="parallel generator processes")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: generate one GameSpec (json) into --out
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        _generate_in_this_process(GameSpec.from_json(args.one), Path(args.out))
        return
    paths = pregenerate(args.suite, args.workers)
    print(f"{len(paths)} games in {cache_root()}")


if __name__ == "__main__":
    main()

