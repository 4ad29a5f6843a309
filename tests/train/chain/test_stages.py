"""Runner-driven stages (r2v_train/chain/collect.py), the preference rule (preferences.py) and the chain's resume logic
on the scripted env (no game engine, no model)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import r2v_envs  # noqa: F401
from r2v_agents.shards import load_rows
from r2v_envs.core import split_tasks
from r2v_envs.errors import UnknownChoiceError
from r2v_train import cli
from r2v_train.chain import collect
from r2v_train.chain.collect import EnvConfig, ReplayConfig, SplitConfig, TeacherConfig
from r2v_train.chain.preferences import _views, alt_prompt, choose_pair, traj_contexts
from r2v_train.chain.stages import MARKER, ChainConfig, read_marker, run_chain

ENV = EnvConfig("R2V/Scripted-v0", env_kwargs={}, max_steps=12)
FIRST = ("split", "teacher", "replay")


def scripted_config(**kw) -> ChainConfig:
    kw.setdefault("replay", ReplayConfig(seeds=(1, 2)))
    return ChainConfig(env=ENV, split=SplitConfig(max_train_tasks=3, max_valid_tasks=2), **kw)


def test_choose_pair_rule():
    adm = ["take coin", "go east", "look"]
    # an approved candidate at least as good as the teacher's action becomes a+
    assert choose_pair([("go east", 0.8), ("look", 0.5)], "take coin", 0.7, adm) == ("go east", "look", "verifier")
    # below the teacher's score, or below the approval threshold: the teacher supplies the recovery action
    assert choose_pair([("go east", 0.65), ("look", 0.5)], "take coin", 0.9, adm) == ("take coin", "look", "teacher")
    assert choose_pair([("go east", 0.55), ("look", 0.3)], "take coin", 0.5, adm) == \
        ("take coin", "look", "teacher")
    # a candidate outside the visible admissible list is never approved
    assert choose_pair([("dance", 0.99), ("look", 0.5)], "take coin", 0.7, adm)[0] == "take coin"
    # a- must be worse than a+ by more than the margin; none -> no pair
    assert choose_pair([("look", 0.65)], "take coin", 0.7, adm, margin=0.1) is None
    assert choose_pair([("look", 0.55)], "take coin", 0.7, adm, margin=0.1) == ("take coin", "look", "teacher")
    assert choose_pair([("take coin", 0.7)], "take coin", 0.7, adm) is None


def test_split_is_the_envs_split(tmp_path):
    split = collect.split_stage(ENV, SplitConfig(max_train_tasks=4), tmp_path)
    expected = split_tasks([f"scripted-{i}" for i in range(40)])
    assert {k: split[k] for k in ("train", "valid", "test")} == expected
    assert split["used"] == {"train": expected["train"][:4], "valid": expected["valid"]}
    assert collect.load_split(tmp_path) == split


def test_teacher_then_replay_keeps_the_latent_state(tmp_path):
    tasks = ["scripted-1", "scripted-3"]
    s = collect.teacher_stage(ENV, TeacherConfig(), tasks, tmp_path / "teacher")
    assert s.episodes == 2 and s.success_rate == 1.0
    clean = collect.logged_actions(tmp_path / "teacher")
    r = collect.replay_stage(ENV, ReplayConfig(seeds=(1, 2)), tmp_path / "teacher", tmp_path / "replay")
    assert r.episodes == 4 and r.success_rate == 1.0
    steps = load_rows(tmp_path / "replay", "steps")
    assert all(s["source"] == "replay" for s in steps)
    for z in (1, 2):  # the same action sequence under each seed ...
        assert {t: [s["action"] for s in steps if s["task_id"] == t and s["z"] == z] for t in tasks} == clean
    assert sum(json.loads(s["perturbations"]) != [] for s in steps) > 0  # ... through perturbed observations
    views = _views(traj_contexts([tmp_path / "teacher", tmp_path / "replay"]))
    v = views[("scripted-3", 2)]
    assert sorted(v) == [0, 1, 2]
    assert alt_prompt(v, 0) == v[1][0] and alt_prompt(v, 2) == v[0][0]  # next seed, cyclic
    # a resumed stage runs nothing
    assert collect.replay_stage(ENV, ReplayConfig(seeds=(1, 2)), tmp_path / "teacher", tmp_path / "replay").episodes == 0


def test_replay_policy_falls_back_past_the_log():
    from dataclasses import replace

    from r2v_agents.context import Context

    ctx = replace(Context.start("g", "o", {"admissible_actions": ["go west", "look"]}), task_id="t")
    d = collect.ReplayPolicy({"t": []}).act_batch([ctx], [{}])[0]
    assert d.action == "look" and d.meta == {"beyond_log": True}


def test_chain_skips_complete_stages_and_reruns_downstream(tmp_path):
    cfg = scripted_config()
    first = run_chain(cfg, tmp_path, only=FIRST)
    assert list(first) == list(FIRST) and not any(r["skipped"] for r in first.values())
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["seeds"]["replay"] == [1, 2] and manifest["stages"]["replay"]["status"] == "ran"
    assert manifest["versions"]["python"] and "git_revision" in manifest
    ids = {s: read_marker(tmp_path, s)["run_id"] for s in FIRST}

    again = run_chain(cfg, tmp_path, only=FIRST)
    assert all(r["skipped"] for r in again.values())
    assert {s: read_marker(tmp_path, s)["run_id"] for s in FIRST} == ids

    # a changed replay config reruns replay only; its stale shards are cleared first
    changed = run_chain(scripted_config(replay=ReplayConfig(seeds=(3,))), tmp_path, only=FIRST)
    assert [s for s, r in changed.items() if not r["skipped"]] == ["replay"]
    assert {r["z"] for r in load_rows(tmp_path / "replay", "episodes")} == {3}

    # removed outputs rerun that stage and the ones after it
    shutil.rmtree(tmp_path / "teacher")
    rerun = run_chain(cfg, tmp_path, only=FIRST)
    assert [s for s, r in rerun.items() if not r["skipped"]] == ["teacher", "replay"]
    assert os.path.exists(tmp_path / "teacher" / MARKER)

    forced = run_chain(cfg, tmp_path, only=FIRST, force=("split",))
    assert not any(r["skipped"] for r in forced.values())


def test_chain_checks_its_arguments(tmp_path):
    with pytest.raises(UnknownChoiceError):
        run_chain(scripted_config(), tmp_path, only=("bogus",))
    with pytest.raises(RuntimeError, match="needs"):
        run_chain(scripted_config(), tmp_path, only=("replay",))
    # a stage module's command line runs its own stages and stops where upstream outputs are missing
    assert list(cli.main(["collect", "--run-dir", str(tmp_path), "--config.env.env-id", "R2V/Scripted-v0",
                              "--env-kwargs", "{}",
                              "--config.split.max-train-tasks", "2", "--config.replay.seeds", "1"])) == list(FIRST)


def test_dpo_on_no_preference_pair_is_a_typed_error(tmp_path):
    """The preferences stage can find no verifier-separated pair (a weak SLM whose K candidates all score alike):
    DPO then says so with a typed error before loading anything (datasets failed on the empty Parquet file with a
    bare DatasetGenerationError raised from a StopIteration)."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    pytest.importorskip("datasets")
    from r2v_train.chain.dpo import EmptyDatasetError
    from r2v_train.chain.dpo import DPOConfig, dpo_stage
    from r2v_train.chain.preferences import _schema

    pairs = tmp_path / "pairs.parquet"
    pq.write_table(pa.Table.from_pylist([], schema=_schema()), pairs)
    with pytest.raises(EmptyDatasetError, match="no preference pair"):
        dpo_stage(DPOConfig(max_steps=1), str(tmp_path / "no-model"), str(pairs), tmp_path / "dpo")
    assert not (tmp_path / "dpo" / "model").exists()


def test_run_stage_runs_marks_and_skips_as_every_stage_runner_does(tmp_path, capsys):
    """run_stage is the one stage runner of the chain and `r2v rl`: it runs a stage into a fresh directory, writes
    stage.json and the manifest entry, and a caller that finds that marker current gets it back without a run."""
    from r2v_train.chain.stages import run_stage

    run, manifest, calls = str(tmp_path), {"stages": {}}, []
    os.makedirs(tmp_path / "bc")
    (tmp_path / "bc" / "stale.txt").write_text("left by a run of another key")

    def stage():
        calls.append(1)
        return {"rows": 3}

    ran = run_stage(run, "bc", "key-1", stage, manifest, label="stage 4/8 bc", what="behaviour cloning",
                    record={"config": {"lr": 1e-3}})
    marker = read_marker(run, "bc")
    assert calls == [1] and ran["outputs"] == {"rows": 3} and not ran["skipped"] and ran["run_id"] == marker["run_id"]
    assert marker["key"] == "key-1" and marker["config"] == {"lr": 1e-3} and not (tmp_path / "bc" / "stale.txt").exists()
    assert manifest["stages"]["bc"]["status"] == "ran"
    assert json.loads((tmp_path / "manifest.json").read_text())["stages"]["bc"]["run_id"] == marker["run_id"]
    skipped = run_stage(run, "bc", "key-1", stage, manifest, label="stage 4/8 bc", what="", done=marker)
    assert calls == [1] and skipped["skipped"] and skipped["run_id"] == marker["run_id"]
    assert skipped["outputs"] == {"rows": 3} and manifest["stages"]["bc"]["status"] == "skipped"
    err = capsys.readouterr().err
    assert "stage 4/8 bc: behaviour cloning" in err and "stage 4/8 bc: done before" in err
