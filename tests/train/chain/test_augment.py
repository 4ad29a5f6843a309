"""Goal-object renaming of BC rows (r2v_train.chain.augment) and its switch in the BC stage."""

from __future__ import annotations

import pytest

from r2v_train.chain.augment import goal_object, object_names, rename_goal_objects
from r2v_train.chain.bc import BCConfig

ROWS = [
    {"prompt": "Goal: Your task is to: put a clean knife in drawer.\nObservation:\nOn the countertop 1, you see a "
               "knife 1, a butterknife 2, and a apple 1.\nAction:", "completion": " take knife 1 from countertop 1"},
    {"prompt": "Goal: Your task is to: look at cd under the desklamp.\nHistory:\n> go to shelf 1\nObservation:\n"
               "On the shelf 1, you see a cd 1, and a pen 3.\nAction:", "completion": " take cd 1 from shelf 1"},
    {"prompt": "Goal: Eat the apple.\nObservation:\nYou see a apple 2.\nAction:", "completion": " eat apple"},
    {"prompt": "Goal: Your task is to: put some egg on desk.\nAction:", "completion": " go to fridge 1"},
]


def test_goal_objects_and_the_name_pool():
    assert [goal_object(r["prompt"]) for r in ROWS] == ["knife", "cd", None, "egg"]
    assert object_names(ROWS) == ["apple", "butterknife", "cd", "egg", "knife", "pen"]  # no receptacle


def test_renamed_rows_stay_demonstrations_that_must_be_copied():
    out = rename_goal_objects(ROWS, copies=2, seed=3)
    assert out[:4] == ROWS and len(out) == 4 + 2 * 3  # the TextWorld-style row gets no copy
    for orig, new in zip(ROWS[:2] * 2, [out[4], out[5], out[7], out[8]]):
        old, name = goal_object(orig["prompt"]), goal_object(new["prompt"])
        assert name != old and name not in orig["prompt"]
        # every mention renamed, the action still takes what the observation shows
        assert new["completion"] == orig["completion"].replace(f" {old} ", f" {name} ")
        assert f"a {name} 1" in new["prompt"] and f" {old} " not in new["prompt"]
    assert "butterknife 2" in out[4]["prompt"]  # whole words only
    assert rename_goal_objects(ROWS, copies=2, seed=3) == out
    assert rename_goal_objects(ROWS, copies=2, seed=4) != out
    assert rename_goal_objects(ROWS, copies=0) == ROWS
    with pytest.raises(ValueError):
        rename_goal_objects(ROWS, copies=-1)


def test_the_bc_stage_key_changes_only_when_renaming_is_on():
    assert "rename_copies" not in BCConfig().identity()  # runs trained before the option keep their keys
    assert BCConfig(rename_copies=1).identity()["rename_copies"] == 1
