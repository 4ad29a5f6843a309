"""`r2v rollout` (the interim main job) on the shared runner."""

from __future__ import annotations

import pytest

from r2v_train.cli import main
from r2v_train.evaluation.rollout import RolloutArgs, rollout, success_table


def test_rollout_on_scripted_env(tmp_path):
    args = RolloutArgs(env_id="R2V/Scripted-v0", split="test", seeds=(0, 1), perturbations=("none", "composite"),
                       out=str(tmp_path), workers=0)
    records = rollout(args)
    tasks = {r["task_id"] for r in records}
    assert len(tasks) == 6 and len(records) == len(tasks) * 2 * 2 * 2  # tasks x seeds x perturbations x policies
    expert = [r["won"] for r in records if r["policy"] == "expert"]
    assert expert and all(expert)
    assert all(r["events"] == 0 for r in records if r["perturbation"] == "none")
    assert any(r["events"] > 0 for r in records if r["perturbation"] == "composite")
    # the random baseline is reproducible: a second run in a new directory gives the same episodes
    again = rollout(RolloutArgs(**{**args.__dict__, "out": str(tmp_path / "again")}))
    assert again == records
    table = success_table(records)
    assert "| none | 100.0%" in table and "composite" in table


def test_cli_prints_table(tmp_path, capsys):
    main(["rollout", "--env-id", "R2V/Scripted-v0", "--perturbations", "composite", "--seeds", "3",
          "--workers", "0", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "| composite | 100.0%" in out


def test_rollout_is_r2v_eval_of_the_reference_agents(tmp_path):
    """One path: each policy's episodes are an r2v eval directory, the one `r2v eval --agent random` writes (same
    episodes), and the table's SR is its results.json's cell SR (the one counting rule)."""
    import json

    from r2v_agents.shards import load_rows
    from r2v_eval.cli import main as eval_main

    perts = ("none", "composite")
    records = rollout(RolloutArgs(env_id="R2V/Scripted-v0", split="test", seeds=(0, 1), perturbations=perts,
                                  policies=("random",), out=str(tmp_path / "rollout"), workers=0))
    eval_main(["--agent", "random", "--envs", "R2V/Scripted-v0", "--split", "test", "--seeds", "0", "1",
               "--perturbations", *perts, "--max-steps", "50", "--out", str(tmp_path / "eval"), "--no-progress"])

    def episodes(folder):
        return sorted((r["task_id"], r["z"], bool(r["success"]), r["steps"], r["final_observation"])
                      for r in load_rows(folder, "episodes"))

    results = json.loads((tmp_path / "rollout" / "random" / "results.json").read_text())
    for pert in perts:
        ours = episodes(tmp_path / "rollout" / "random" / "runs" / "R2V_Scripted-v0" / pert)
        assert ours == episodes(tmp_path / "eval" / "runs" / "R2V_Scripted-v0" / pert), pert
        assert len(ours) == 12 and 0 < sum(e[2] for e in ours) < 12  # a real mix of wins and losses
        won = [r["won"] for r in records if r["perturbation"] == pert]
        cell = next(c for c in results["cells"] if c["perturbation"] == pert)
        assert 100 * sum(won) / len(won) == pytest.approx(cell["sr"])
    assert len(records) == 24
