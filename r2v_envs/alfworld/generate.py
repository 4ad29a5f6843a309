"""Offline ALFWorld games: PDDL problems over the ``alfred.pddl`` domain that ships in the ``alfworld`` wheel.

Each game is what ``alfworld-download`` would give: a ``game.tw-pddl`` (JSON with ``pddl_domain``, ``grammar``
with the task sentence filled in, ``pddl_problem`` and ``solvable``) and a ``traj_data.json`` beside it
(``task_type`` and ``pddl_params`` for alfworld's handcoded expert). Scenes are kitchens, bedrooms and
bathrooms with ALFRED's receptacle and object classes, openable containers and distractor objects; object ids
follow ALFRED's naming (``Apple|-00.47|+01.15|+00.48`` mangled to ``Apple_bar__minus_00_dot_47...``) so
alfworld's demangler names them "apple 1" (a sink basin is ``Sink|...|SinkBasin``, as in ALFRED).

Building a game is pure Python and deterministic in ``(seed, index)``. Verifying it (the handcoded expert
plays it to a win, as ``AlfredTWEnv.is_solvable`` does) loads the tw-pddl engine, whose PDDL translator
rewrites ``sys.argv`` and swaps ``sys.stdout``: that runs in worker processes, never in the caller's.

Example:
    >>> spec = build_game(seed=0, index=3)
    >>> spec.task_id, spec.traj_data["task_type"]
    ('0003-pick_heat_then_place_in_recep', 'pick_heat_then_place_in_recep')
    >>> "(:goal" in spec.game["pddl_problem"], spec.game["grammar"].count("UNKNOWN GOAL")
    (True, 0)
    >>> build_game(seed=0, index=3).game == spec.game   # deterministic
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from r2v_envs.alfworld.engine import play_expert
from r2v_envs.core import cache_dir
from r2v_envs.errors import BackendUnavailableError, GameGenerationError
from r2v_envs.fileio import atomic_write

GENERATOR_VERSION = "v1"
# alfworld's task types (alfworld.agents.environment.alfred_tw_env.TASK_TYPES), in its order.
FAMILIES: tuple[str, ...] = (
    "pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place",
)
DEFAULT_N_GAMES = 60  # 10 per family; its test split (9 games) is played in full by the tests
MAX_EXPERT_STEPS = 120
_OPENABLE = {"Fridge", "Cabinet", "Microwave", "Drawer", "Safe"}
_MOVABLE_RECEPTACLES = {"Bowl", "Cup", "Mug", "Plate", "Pan", "Pot"}

# Receptacle classes per scene: (class, min count, max count).
SCENES: dict[str, tuple[tuple[str, int, int], ...]] = {
    "kitchen": (("CounterTop", 1, 2), ("Cabinet", 2, 5), ("Drawer", 1, 3), ("Fridge", 1, 1),
                ("Microwave", 1, 1), ("SinkBasin", 1, 1), ("StoveBurner", 1, 3), ("DiningTable", 0, 1),
                ("GarbageCan", 1, 1), ("CoffeeMachine", 0, 1), ("Shelf", 0, 2)),
    "bedroom": (("Bed", 1, 1), ("Desk", 0, 1), ("SideTable", 1, 2), ("Dresser", 0, 1), ("Drawer", 2, 4),
                ("Shelf", 1, 3), ("GarbageCan", 1, 1), ("Safe", 0, 1), ("ArmChair", 0, 1)),
    "bathroom": (("Toilet", 1, 1), ("SinkBasin", 1, 2), ("Cabinet", 2, 4), ("CounterTop", 1, 1),
                 ("Drawer", 0, 2), ("GarbageCan", 1, 1), ("Shelf", 0, 2)),
}
# Movable objects that may appear per scene (targets and distractors). Names with a shared prefix
# (Pen/Pencil, ToiletPaper/ToiletPaperRoll) confuse the handcoded expert's substring tests: keep one of each.
SCENE_OBJECTS: dict[str, tuple[str, ...]] = {
    "kitchen": ("Apple", "Tomato", "Potato", "Lettuce", "Egg", "Bread", "Mug", "Cup", "Bowl", "Plate", "Pan",
                "Pot", "Spoon", "Fork", "Knife", "ButterKnife", "Ladle", "Spatula", "DishSponge", "Kettle",
                "SaltShaker", "PepperShaker", "SoapBottle", "WineBottle"),
    "bedroom": ("Book", "CellPhone", "AlarmClock", "CD", "CreditCard", "KeyChain", "Pencil", "Watch", "Vase",
                "Statue", "RemoteControl", "Laptop", "Pillow", "TissueBox", "Newspaper", "Candle"),
    "bathroom": ("Cloth", "SoapBar", "SoapBottle", "DishSponge", "ToiletPaper", "SprayBottle", "Candle",
                 "HandTowel", "TissueBox", "Plunger"),
}
# (scene choices, target pool; empty = any movable object of the scene) per family.
FAMILY_SETUP: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pick_and_place_simple": (("kitchen", "bedroom", "bathroom"), ()),
    "pick_two_obj_and_place": (("kitchen", "bedroom", "bathroom"), ()),
    "look_at_obj_in_light": (("bedroom",), ("Book", "CellPhone", "AlarmClock", "CD", "CreditCard", "KeyChain",
                                            "Pencil", "Watch", "Vase", "Statue", "RemoteControl")),
    "pick_clean_then_place_in_recep": (("kitchen", "bathroom"), (
        "Apple", "Tomato", "Potato", "Lettuce", "Egg", "Mug", "Cup", "Bowl", "Plate", "Pan", "Pot", "Spoon",
        "Fork", "Knife", "ButterKnife", "Ladle", "Spatula", "DishSponge", "Kettle", "Cloth", "SoapBar")),
    "pick_heat_then_place_in_recep": (("kitchen",), ("Apple", "Tomato", "Potato", "Egg", "Bread", "Mug", "Cup",
                                                     "Plate")),
    "pick_cool_then_place_in_recep": (("kitchen",), ("Apple", "Tomato", "Potato", "Lettuce", "Egg", "Bread",
                                                     "Mug", "Cup", "Bowl", "Plate", "Pan", "Pot", "WineBottle")),
}
# The receptacle that does the family's state change; it is never the goal receptacle.
_TOOL = {"pick_clean_then_place_in_recep": "SinkBasin", "pick_heat_then_place_in_recep": "Microwave",
         "pick_cool_then_place_in_recep": "Fridge"}
_ACTION_PROPERTY = {"cleanable": "Cleanable", "heatable": "Heatable", "coolable": "Coolable"}


@dataclass(frozen=True)
class GameSpec:
    """One generated game: the ``game.tw-pddl`` JSON and the ``traj_data.json`` beside it."""

    task_id: str
    game: dict[str, Any]
    traj_data: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)


def task_ids(n_games: int = DEFAULT_N_GAMES) -> list[str]:
    """Ids of an offline suite: game ``i`` belongs to family ``FAMILIES[i % 6]``."""
    return [f"{i:04d}-{FAMILIES[i % len(FAMILIES)]}" for i in range(n_games)]


@lru_cache(maxsize=1)
def _logic() -> tuple[str, str]:
    """The PDDL domain and TextWorld grammar shipped inside the alfworld wheel."""
    try:
        import alfworld
    except ImportError as exc:
        raise BackendUnavailableError("alfworld", "pip install 'r2v[alfworld]' (builds fast-downward and "
                                      "jericho from source: needs cmake and g++, about 2 min)") from exc
    data = Path(alfworld.__file__).parent / "data"
    return (data / "alfred.pddl").read_text(), (data / "alfred.twl2").read_text()


@lru_cache(maxsize=1)
def _alfred_tables() -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]], dict[str, Any]]:
    import alfworld.gen.constants as c
    import alfworld.gen.goal_library as glib

    contain = {r: frozenset(objs) for r, objs in c.VAL_RECEPTACLE_OBJECTS.items()}
    actions = {k: frozenset(v) for k, v in c.VAL_ACTION_OBJECTS.items()}
    return contain, actions, glib.gdict


def _mangle(text: str) -> str:
    """ALFRED id -> PDDL name (alfworld's ``PlannedGameState.fix_pddl_str_chars``)."""
    for a, b in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        text = text.replace(a, b)
    return text


def _coord(rng: random.Random) -> str:
    return f"{rng.uniform(-4, 4):+06.2f}"


def _object_id(cls: str, rng: random.Random) -> str:
    return _mangle(f"{cls}|{_coord(rng)}|{_coord(rng)}|{_coord(rng)}")


def _receptacle_id(cls: str, rng: random.Random) -> str:
    if cls in ("SinkBasin", "BathtubBasin"):  # ALFRED: Sink|x|y|z|SinkBasin -> demangled "sinkbasin 1"
        return _mangle(f"{cls[:-5]}|{_coord(rng)}|{_coord(rng)}|{_coord(rng)}|{cls}")
    return _object_id(cls, rng)


def _location(rng: random.Random, used: set[str]) -> str:
    while True:
        loc = f"loc|{rng.randint(-12, 12)}|{rng.randint(-12, 12)}|{rng.choice((0, 1, 2, 3))}|" \
              f"{rng.choice((30, 45, 60))}"
        if loc not in used:
            used.add(loc)
            return _mangle(loc)


def build_game(seed: int, index: int, n_distractors: tuple[int, int] = (4, 9)) -> GameSpec:
    """Build game ``index`` of the suite seeded by ``seed`` (family ``FAMILIES[index % 6]``)."""
    family = FAMILIES[index % len(FAMILIES)]
    task_id = f"{index:04d}-{family}"
    digest = hashlib.sha256(f"r2v-alfworld-{GENERATOR_VERSION}-{seed}-{index}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    contain, actions, gdict = _alfred_tables()
    scenes, pool = FAMILY_SETUP[family]
    scene = rng.choice(scenes)

    # Receptacles, each at its own location.
    used_locs: set[str] = set()
    receptacles: list[tuple[str, str, str]] = []  # (class, pddl id, location)
    for cls, lo, hi in SCENES[scene]:
        for _ in range(rng.randint(lo, hi)):
            receptacles.append((cls, _receptacle_id(cls, rng), _location(rng, used_locs)))
    start_loc = _location(rng, used_locs)
    classes = {c for c, _, _ in receptacles}

    def holders(obj_cls: str, exclude: set[str]) -> list[tuple[str, str, str]]:
        return [r for r in receptacles if obj_cls in contain.get(r[0], ()) and r[0] not in exclude]

    # Task parameters.
    tool = _TOOL.get(family)
    objects_pool = [o for o in (pool or SCENE_OBJECTS[scene]) if o in SCENE_OBJECTS[scene]]
    toggle = ""
    for _ in range(200):
        target = rng.choice(objects_pool)
        if tool and target not in actions[{"SinkBasin": "Cleanable", "Microwave": "Heatable",
                                           "Fridge": "Coolable"}[tool]]:
            continue
        goal_recs = sorted({c for c in classes if target in contain.get(c, ()) and c != tool})
        if family == "look_at_obj_in_light":
            parent = ""
            starts = holders(target, set())
        else:
            if not goal_recs:
                continue
            parent = rng.choice(goal_recs)
            # never already solved: no target starts in a goal-class receptacle (nor cold in the fridge)
            starts = holders(target, {parent, tool or ""})
        if starts:
            break
    else:  # pragma: no cover - the tables always offer a choice
        raise GameGenerationError(f"no feasible task for {task_id}")

    # Objects: targets, the lamp, distractors.
    placed: list[tuple[str, str, tuple[str, str, str]]] = []  # (class, pddl id, receptacle)
    n_targets = rng.randint(2, 3) if family == "pick_two_obj_and_place" else rng.randint(1, 2)
    for _ in range(n_targets):
        placed.append((target, _object_id(target, rng), rng.choice(starts)))
    if family == "look_at_obj_in_light":
        toggle = "DeskLamp"
        lamp_at = [r for r in receptacles if r[0] in ("SideTable", "Desk", "Dresser")]
        placed.append((toggle, _object_id(toggle, rng), rng.choice(lamp_at)))
    confusable = {target.lower()}
    distractor_pool = [o for o in SCENE_OBJECTS[scene] if o != target
                       and not any(o.lower().startswith(t) or t.startswith(o.lower()) for t in confusable)]
    for _ in range(rng.randint(*n_distractors)):
        cls = rng.choice(distractor_pool)
        spots = holders(cls, set())
        if spots:
            placed.append((cls, _object_id(cls, rng), rng.choice(spots)))

    problem = _problem_text(task_id, family, target, parent, toggle, receptacles, placed, start_loc, gdict,
                            contain, actions)
    domain, grammar = _logic()
    template = rng.choice(gdict[family]["templates"])
    task_desc = template.format(obj=target.lower(), recep=parent.lower(), toggle=toggle.lower(), mrecep="")
    game = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", task_desc),
            "pddl_problem": problem, "solvable": True}
    traj = {"task_type": family, "task_id": task_id, "scene": scene,
            "pddl_params": {"object_target": target, "parent_target": parent, "toggle_target": toggle,
                            "mrecep_target": "", "object_sliced": False},
            "turk_annotations": {"anns": [{"task_desc": task_desc}]},
            "r2v": {"generator": GENERATOR_VERSION, "seed": seed, "index": index}}
    return GameSpec(task_id, game, traj, {"scene": scene, "n_receptacles": len(receptacles),
                                          "n_objects": len(placed), "goal": f"Your task is to: {task_desc}."})


def _problem_text(task_id, family, target, parent, toggle, receptacles, placed, start_loc, gdict, contain,
                  actions) -> str:
    rtypes = sorted({c for c, _, _ in receptacles})
    otypes = sorted({c for c, _, _ in placed})
    objects = ["agent1 - agent"]
    objects += [f"{oid} - object" for _, oid, _ in placed]
    objects += [f"{rid} - receptacle" for _, rid, _ in receptacles]
    objects += sorted({f"{loc} - location" for _, _, loc in receptacles} | {f"{start_loc} - location"})
    objects += [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes]
    init = [f"(atLocation agent1 {start_loc})"]
    for cls, rid, loc in receptacles:
        init += [f"(receptacleType {rid} {cls}Type)", f"(receptacleAtLocation {rid} {loc})"]
        if cls in _OPENABLE:
            init.append(f"(openable {rid})")
    for rt in rtypes:
        init += [f"(canContain {rt}Type {ot}Type)" for ot in otypes if ot in contain.get(rt, ())]
    for cls, oid, (_, rid, loc) in placed:
        init += [f"(objectType {oid} {cls}Type)", f"(inReceptacle {oid} {rid})",
                 f"(objectAtLocation {oid} {loc})"]
        if cls == toggle:
            init.append(f"(toggleable {oid})")
            continue
        init.append(f"(pickupable {oid})")
        init += [f"({p} {oid})" for p, key in _ACTION_PROPERTY.items() if cls in actions[key]]
        if cls in _MOVABLE_RECEPTACLES:
            init.append(f"(isReceptacleObject {oid})")
    goal = gdict[family]["pddl"].format(obj=target, recep=parent, toggle=toggle, mrecep="").replace("#", "-")
    body = "\n        ".join(objects)
    facts = "\n        ".join(init)
    name = _mangle(task_id).replace("_", "")
    return (f"(define (problem plan_{name})\n    (:domain alfred)\n    (:objects\n        {body}\n    )\n"
            f"    (:init\n        {facts}\n    )\n{goal}")


# ------------------------------------------------------------------------------------------- files
def default_cache_dir() -> Path:
    return cache_dir("alfworld")


def suite_dir(seed: int, cache_dir: str | os.PathLike | None = None) -> Path:
    return Path(cache_dir) if cache_dir is not None else default_cache_dir() / f"{GENERATOR_VERSION}-seed{seed}"


def game_path(root: Path, task_id: str) -> Path:
    return root / task_id / "game.tw-pddl"


def write_game(spec: GameSpec, root: Path) -> Path:
    """Write a game atomically: traj_data.json first, then game.tw-pddl (its presence marks completion)."""
    folder = root / spec.task_id
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in (("traj_data.json", spec.traj_data), ("game.tw-pddl", spec.game)):
        atomic_write(folder / name, json.dumps(data))
    return folder / "game.tw-pddl"


def _generate_one(seed: int, index: int, root: str, verify: bool) -> tuple[str, int, list[str]]:
    """Worker: build, write and (optionally) verify game ``index``; retries with a new layout if the
    handcoded expert cannot win it. Returns (task id, attempts, expert walkthrough)."""

    spec = None
    for attempt in range(8):
        sub_seed = seed if attempt == 0 else seed * 1_000_003 + attempt
        spec = build_game(sub_seed, index)
        if attempt:  # keep the suite's id and record the layout seed that worked
            spec.traj_data["r2v"]["layout_seed"] = sub_seed
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            path = write_game(spec, Path(tmp))
            walkthrough = play_expert(str(path), MAX_EXPERT_STEPS) if verify else []
        if walkthrough is not None:
            spec.game["walkthrough"] = walkthrough
            write_game(spec, Path(root))
            return spec.task_id, attempt + 1, walkthrough
    raise GameGenerationError(f"the handcoded expert could not win {spec.task_id} in 8 layouts")


def ensure_games(ids: Sequence[str], seed: int = 0, cache_dir: str | os.PathLike | None = None,
                 verify: bool = True, workers: int = 2) -> dict[str, Path]:
    """Generate (once; cached on disk) the games ``ids`` of the suite ``seed``; return their paths.

    Generation runs in fresh worker processes (``python -m r2v_envs.alfworld.generate``): the PDDL translator
    is not thread-safe, and fresh interpreters need no ``if __name__ == "__main__"`` guard in the caller's
    script (multiprocessing's spawn would). A game already on disk is reused.
    """
    root = suite_dir(seed, cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    missing = sorted(int(t.split("-", 1)[0]) for t in ids if not game_path(root, t).exists())
    if missing:
        _logic()  # fail early and clearly when alfworld is missing
        n = max(1, min(workers, len(missing)))
        pkg_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [pkg_root, os.environ.get("PYTHONPATH")]))}
        procs = []
        for k in range(n):
            argv = [sys.executable, "-m", "r2v_envs.alfworld.generate", "--seed", str(seed), "--root", str(root),
                    *([] if verify else ["--no-verify"]), *map(str, missing[k::n])]
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        failures = [(p.args, out) for p in procs for out in [p.communicate()[0]] if p.returncode != 0]
        if failures:
            raise GameGenerationError("ALFWorld game generation failed:\n" + failures[0][1][-2000:])
    return {t: game_path(root, t) for t in ids}


def main(argv: Sequence[str] | None = None) -> None:
    """Worker entry point: ``python -m r2v_envs.alfworld.generate --seed S --root DIR INDEX...``."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", required=True, help="suite folder to write games into")
    parser.add_argument("--no-verify", action="store_true", help="skip the handcoded-expert check")
    parser.add_argument("indices", type=int, nargs="+")
    args = parser.parse_args(argv)
    Path(args.root).mkdir(parents=True, exist_ok=True)
    for index in args.indices:
        task_id, attempts, walkthrough = _generate_one(args.seed, index, args.root, not args.no_verify)
        print(f"{task_id}: {attempts} layout(s), expert wins in {len(walkthrough)} steps", flush=True)


if __name__ == "__main__":
    main()
