"""``r2v rl`` in miniature on the tiny chain run: every artefact, resume after a SIGKILL, and an RL run that
``slm:`` / ``r2v:`` load unchanged. It checks the plumbing, not that the SLM learns (the dated results page does)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the tiny chain, two GRPO steps, Table 1 on two tasks

pytest.importorskip("textworld")
torch = pytest.importorskip("torch")
pytest.importorskip("trl")


ROOT = Path(__file__).resolve().parents[3]
# Table 1 on 2 test tasks x 1 seed, 4 steps per episode, one per-type condition: seconds, not minutes.
SMALL_EVAL = {"env_id": "R2V/TextWorld-v0", "env_kwargs": {"suite": "small"}, "split": "test", "max_tasks": 2,
              "seeds": [0], "perturbations": "composite", "per_type": ["flaky"], "per_type_seeds": [0],
              "max_steps": 4, "bootstrap": 50, "progress": False}
# The tiny SLM never wins in 4 steps: a reward whose value differs between samples makes the weights move.
SMALL_RL = {"reward": "tests.support.tiny_models:action_length_reward", "max_steps": 2, "starts_per_step": 2,
            "group_size": 2, "micro_batches": 2, "eval_every": 1, "eval_max_tasks": 2, "max_episode_steps": 4,
            "workers": 0, "threads": 2, "progress": False}


@pytest.fixture(scope="module")
def source(tmp_path_factory, tiny_chain_template):
    """A copy of the tiny chain run with a small evaluation of its own (pipeline.json + eval/)."""
    from r2v_train.evaluation.agents import agents_from_run
    from r2v_train.evaluation.methods import EvalConfig, evaluate
    from r2v_train.rl.run import source_chain
    from r2v_train.run_dir import eval_dir

    template, _ = tiny_chain_template
    run = tmp_path_factory.mktemp("rl-source") / "run"
    shutil.copytree(template, run, symlinks=True)
    (run / "pipeline.json").write_text(json.dumps({"config": {"evaluate": SMALL_EVAL}}))
    evaluate(agents_from_run(source_chain(run), run), EvalConfig(**SMALL_EVAL), eval_dir(run))
    return run


@pytest.fixture(scope="module")
def rl_run(source, tmp_path_factory):
    from r2v_train.rl.config import RLConfig
    from r2v_train.rl.run import run_rl

    out = tmp_path_factory.mktemp("rl") / "run-rl"
    summary = run_rl(RLConfig(**SMALL_RL), source, out)
    return out, summary


def test_the_rl_run_writes_its_model_curve_plot_evaluations_and_paired_comparison(source, rl_run):
    from transformers import AutoModelForCausalLM

    from r2v_agents.shards import load_rows
    from r2v_eval.robustness import summarise
    from r2v_train.run_dir import stage_paths

    out, summary = rl_run
    rl = out / "rl"
    curve = json.loads((rl / "curve.json").read_text())
    assert sorted(int(s) for s in curve["eval"]) == [0, 1, 2] and sorted(int(s) for s in curve["train"]) == [1, 2]
    assert all(0 <= p["sr"] <= 100 and p["episodes"] == 2 for p in curve["eval"].values())
    # the policy alone (k = 1, no verifier) beside SLM-only at every evaluation: the success RL acts on
    assert all(0 <= p["policy_sr"] <= 100 and p["policy_sr_ci"][0] <= p["policy_sr"] <= p["policy_sr_ci"][1]
               for p in curve["eval"].values())
    alone_dir = rl / curve["eval"]["2"]["policy_dir"]
    alone = summarise(alone_dir)
    assert alone["agent"]["name"] == "slm?k=1" and alone["cells"][0]["episodes"] == 2
    assert all(len(s["candidates"]) == 1 for s in load_rows(alone_dir / alone["cells"][0]["run_dir"], "steps"))
    assert all(p["episodes"] == 4 and p["steps"] > 0 for p in curve["train"].values())
    assert (rl / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for step in (0, 1, 2):  # each evaluation is an `r2v eval` directory (what `r2v view` reads)
        cells = summarise(rl / "evals" / f"step-{step:04d}")["cells"]
        assert len(cells) == 1 and cells[0]["episodes"] == 2
    before = AutoModelForCausalLM.from_pretrained(stage_paths(source)["dpo_model"])
    after = AutoModelForCausalLM.from_pretrained(rl / "model")
    changed = sum(not torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters()))
    assert changed > 0  # GRPO moved the weights
    training = json.loads((rl / "stage.json").read_text())["outputs"]
    assert training["steps"] == 2 and training["episodes"] == 8 and not training["stopped_by_budget"]
    # R2V reran on the RL-tuned SLM: router data, router, Table 1, and the paired comparison with the source
    assert (out / "router" / "router.pt").is_file() and (out / "eval" / "results.json").is_file()
    assert set(summary["test"]) == {"composite", "flaky"}
    for method in ("slm", "r2v", "llm"):
        d = summary["test"]["composite"][method]["paired"]
        assert d["episodes"] == 2 and d["sr_diff_ci"][0] <= d["sr_diff"] <= d["sr_diff_ci"][1]
    assert summary["test"]["composite"]["llm"]["paired"]["sr_diff"] == 0.0  # the teacher alone did not change
    report = (out / "report.md").read_text()
    assert "composite: slm" in report and "rl/learning_curve.png" in report


def test_slm_and_r2v_specs_load_the_rl_tuned_slm_unchanged(rl_run, capsys):
    from r2v_eval.cli import main as eval_main
    from r2v_train.evaluation.agents import run_dir_agent

    out, _ = rl_run
    slm = run_dir_agent("slm", str(out))
    assert slm.sampler.sampler.model.name_or_path.endswith(os.path.join("rl", "model"))
    r2v = run_dir_agent("r2v", str(out))
    assert r2v.router is not None
    report = out.parent / "eval-slm"
    eval_main(["--agent", f"slm:{out}", "--envs", "R2V/TextWorld-v0", "--env-kwargs", '{"suite": "small"}',
               "--perturbations", "composite", "--seeds", "0", "--tasks", "1", "--max-steps", "3",
               "--out", str(report), "--no-progress"])
    results = json.loads((report / "results.json").read_text())
    assert results["cells"][0]["episodes"] == 1


def test_r2v_view_shows_an_evaluation_of_the_rl_run(rl_run, tmp_path):
    from r2v_eval.view import ViewArgs, view

    out, _ = rl_run
    page = view(ViewArgs(run=str(out / "rl" / "evals" / "step-0002"), out=str(tmp_path / "view.html"),
                         compress="never")).read_text()
    episodes = json.loads((out / "rl" / "curve.json").read_text())["eval"]["2"]["episodes"]
    assert page.count("tw-") >= episodes and "slm" in page


def _flag(name: str, value) -> str:
    """``r2v rl``'s flag for a config field (tyro: ``--name=value``, booleans ``--name`` / ``--no-name``)."""
    name = name.replace("_", "-")
    if isinstance(value, bool):
        return f"--{name}" if value else f"--no-{name}"
    return f"--{name}={value}"


def _complete(out: Path, step: int) -> bool:
    from r2v_train.rl.grpo import last_complete_checkpoint

    last = last_complete_checkpoint(str(out / "rl" / "checkpoints"))
    return last is not None and int(last.rsplit("-", 1)[1]) >= step


def test_a_killed_rl_stage_resumes_from_its_checkpoint(source, tmp_path):
    out = tmp_path / "killed-rl"
    flags = [_flag(k, v) for k, v in {**SMALL_RL, "max_steps": 3, "progress": True}.items()]
    cmd = [sys.executable, "-m", "r2v_train.cli", "rl", "--run-dir", str(source), "--out-dir", str(out),
           "--only", "rl", *flags]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "killed.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
        deadline = time.time() + 900  # a loaded 2-core machine: imports, 3 evaluations and 2 steps
        # killed once checkpoint-2 is whole (its trainer_state.json, written last, reads): a kill inside the save
        # would make the resume start from checkpoint-1, which is right but not what this test pins down
        while time.time() < deadline and proc.poll() is None and not _complete(out, 2):
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert _complete(out, 2), log.read_text()[-3000:]
    assert not (out / "rl" / "stage.json").exists()
    evaluated = {p.name: p.stat().st_mtime_ns for p in (out / "rl" / "evals").iterdir()}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from" in done.stderr and "checkpoint-2" in done.stderr
    outputs = json.loads((out / "rl" / "stage.json").read_text())["outputs"]
    assert outputs["steps"] == 3
    curve = json.loads((out / "rl" / "curve.json").read_text())
    assert sorted(int(s) for s in curve["eval"]) == [0, 1, 2, 3]
    again = {p.name: p.stat().st_mtime_ns for p in (out / "rl" / "evals").iterdir() if p.name in evaluated}
    assert {k: again[k] for k in ("step-0000", "step-0001")} == {k: evaluated[k] for k in ("step-0000", "step-0001")}


def test_another_rl_config_never_clears_a_trained_run(rl_run, source):
    """A changed key clears a chain stage's directory; the rl stage's training is kept and the run stops instead."""
    import dataclasses

    from r2v_train.rl.config import RLConfig
    from r2v_train.rl.run import run_rl

    out, _ = rl_run
    before = (out / "rl" / "model" / "config.json").read_bytes()
    with pytest.raises(FileExistsError, match="another rl config"):
        run_rl(dataclasses.replace(RLConfig(**SMALL_RL), learning_rate=5e-4), source, out)
    assert (out / "rl" / "model" / "config.json").read_bytes() == before


def test_training_rows_carry_the_tokens_of_the_executed_action(source):
    """A grounded sample ("go south" played as the admissible "go north") trains the played action's tokens:
    every row decodes to the action the env executed, and rows the grounding replaced say so."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from r2v_agents.prompts import parse_completion
    from r2v_train.chain import collect
    from r2v_train.rl.rollouts import GroupCollector, training_starts
    from r2v_train.rl.run import source_chain, source_model

    chain = source_chain(source)
    model_dir = source_model(source)
    model, tok = AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    tasks = collect.load_split(source / "split")["used"]["train"]
    starts = [s for s in training_starts(tasks, 2, 10_000, 0) for _ in range(2)]
    collector = GroupCollector(chain.env.env_id, {**chain.env.env_kwargs, "perturbations": "composite"}, 6,
                               workers=0, k=3)
    try:
        episodes = collector.play(model, tok, starts, [0, 1, 0, 1], step=0)
    finally:
        collector.close()
    steps = [st for e in episodes for st in e.steps]
    assert steps and all(parse_completion(tok.decode(st.completion_ids, skip_special_tokens=True)) == st.action
                         for st in steps)
    assert all(st.completion_ids[-1] == tok.eos_token_id for st in steps)
    grounded = [st for st in steps if not st.sampled]
    assert grounded, "the tiny SLM's samples are rarely admissible: some rows must have been grounded"
    assert all(st.logprobs == [] for st in grounded)
    assert all(len(st.logprobs) == len(st.completion_ids) for st in steps if st.sampled)


def test_without_the_router_stages_the_slm_alone_is_evaluated(rl_run, source, tmp_path):
    """``--no-router`` skips the router stages, so the evaluation must not read router rows that were never made."""
    from r2v_train.rl.config import RLConfig
    from r2v_train.rl.run import run_rl

    out = tmp_path / "no-router"
    shutil.copytree(rl_run[0], out, symlinks=True)
    for stage in ("router_data", "router", "eval"):
        shutil.rmtree(out / stage)
    summary = run_rl(RLConfig(**SMALL_RL, router=False), source, out, stages=("evaluate",))
    assert not (out / "router").exists()
    assert {m for methods in summary["test"].values() for m in methods} == {"slm"}


def test_a_kl_term_to_the_starting_slm_trains(source, tmp_path):
    """``--beta > 0``: TRL's loss adds the KL term to the starting SLM, whose log-probs the episode rows carry."""
    from r2v_train.rl.config import RLConfig
    from r2v_train.rl.run import run_rl

    out = tmp_path / "kl"
    run_rl(RLConfig(**{**SMALL_RL, "max_steps": 1, "beta": 0.1, "eval_every": 5}), source, out, stages=("rl",))
    state = json.loads((out / "rl" / "checkpoints" / "checkpoint-1" / "trainer_state.json").read_text())
    logged = [row for row in state["log_history"] if "kl" in row]
    assert logged and all(row["kl"] == row["kl"] for row in logged)  # logged, and not NaN


def test_episodes_that_share_a_prefix_of_actions_share_the_state(source):
    """Tree credit's premise: a group's episodes start from one (task, z), and the perturbed env is a function of
    the actions played, so two episodes with the same first actions saw the same observations and action lists."""
    import gymnasium as gym

    from r2v_train.chain import collect
    from r2v_train.rl.run import source_chain

    chain = source_chain(source)
    task = collect.load_split(source / "split")["used"]["train"][0]

    def play(n: int) -> list[tuple[str, tuple[str, ...]]]:
        env = gym.make(chain.env.env_id, seed=10_000, **{**chain.env.env_kwargs, "perturbations": "composite"})
        try:
            obs, info = env.reset(seed=10_000, options={"task_id": task, "episode_index": 0})
            seen = [(obs, tuple(info["admissible_actions"]))]
            for t in range(n):  # a fixed walk through the admissible actions
                acts = sorted(info["admissible_actions"])
                obs, _, term, trunc, info = env.step(acts[t % len(acts)])
                seen.append((obs, tuple(info["admissible_actions"])))
                if term or trunc:
                    break
            return seen
        finally:
            env.close()

    first, second = play(4), play(4)
    assert len(first) > 2 and first == second


def test_tree_credit_trains_only_the_steps_where_a_group_parted(source, tmp_path):
    """``credit="tree"``: the rows of a step are the group's steps whose branches differ in value; two steps (the
    first at the warm-up's learning rate of 0) train and move the weights."""
    from safetensors.torch import load_file

    from r2v_train.rl.config import RLConfig
    from r2v_train.rl.run import run_rl, source_model

    out = tmp_path / "tree"
    run_rl(RLConfig(**{**SMALL_RL, "credit": "tree", "eval_every": 5}), source, out, stages=("rl",))
    state = json.loads((out / "rl" / "checkpoints" / "checkpoint-2" / "trainer_state.json").read_text())
    rows = [row["rows"] for row in state["log_history"] if "rows" in row]
    # groups of two: an episode parts from its partner once and is alone after that, so of a step's 2 x 2 episodes
    # of 4 steps (16 steps, all trained under episode credit) at most 4 are rows
    assert len(rows) == 2 and all(1 <= n <= 4 for n in rows)
    before = load_file(os.path.join(source_model(source), "model.safetensors"))
    after = load_file(str(out / "rl" / "model" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_train_tasks_restrict_the_training_starts_and_the_curve_names_them(source, tmp_path):
    """``--train-tasks`` (ids or shell patterns): only those games are played; each step's groups are in the curve."""
    from r2v_envs.errors import UnknownChoiceError
    from r2v_train.chain import collect
    from r2v_train.rl.config import RLConfig
    from r2v_train.rl.run import run_rl

    tasks = collect.load_split(source / "split")["used"]["train"]
    game = tasks[-1]
    out = tmp_path / "one-game"
    run_rl(RLConfig(**{**SMALL_RL, "train_tasks": (game,), "eval_every": 5}), source, out, stages=("rl",))
    curve = json.loads((out / "rl" / "curve.json").read_text())
    starts = [start for p in curve["train"].values() for start in p["starts"]]
    assert len(tasks) > 1 and len(starts) == SMALL_RL["max_steps"] * SMALL_RL["starts_per_step"]
    assert {start.rpartition("@")[0] for start in starts} == {game}  # the other train games were never played
    assert all(sum(n for _, n in p["starts"].values()) == p["episodes"] for p in curve["train"].values())
    with pytest.raises(UnknownChoiceError, match="train task"):
        run_rl(RLConfig(**{**SMALL_RL, "train_tasks": ("no-such-game-*",)}), source, tmp_path / "none", stages=("rl",))
