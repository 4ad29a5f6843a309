"""``slm:RUN?k=1`` and ``slm:RUN?greedy=1``: a run's SLM evaluated as a plain policy (one action per step, no
verifier), beside the deployed ``slm:RUN`` (K candidates, the verifier's pick), on a miniature scripted run."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from r2v_envs.errors import UnknownChoiceError
from r2v_envs.fileio import jsonable

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

ENV = "R2V/Scripted-v0"
K = 3


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory with a manifest and a tiny (untrained) BC model: all ``slm:`` needs."""
    from r2v_agents.tiny import build_tiny_model
    from r2v_train.chain.collect import EnvConfig, RouterDataConfig
    from r2v_train.chain.stages import ChainConfig
    from r2v_train.run_dir import MANIFEST, stage_paths
    from tests.support.tiny_models import scripted_corpus_and_tokenizer

    run = tmp_path_factory.mktemp("policy-spec") / "run"
    _, tok = scripted_corpus_and_tokenizer()
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    path = stage_paths(run)["bc_model"]
    model.save_pretrained(path)
    tok.save_pretrained(path)
    chain = ChainConfig(env=EnvConfig(env_id=ENV, env_kwargs={}, max_steps=6, workers=0),
                        router_data=RouterDataConfig(k=K, max_new_tokens=6, temperature=0.7, admissible="snap"))
    (run / MANIFEST).write_text(json.dumps({"config": jsonable(asdict(chain))}))
    return run


def _context():
    import gymnasium as gym

    from r2v_agents.context import Context
    from r2v_envs.visibility import visible_info

    env = gym.make(ENV, seed=0, perturbations=None, task_id="scripted-1")
    obs, info = env.reset()
    env.close()
    return Context.start(info["goal"], obs, visible_info(info))


def test_slm_options_make_the_policy_alone(run_dir):
    from r2v_eval.agents import build_agent

    deployed, name = build_agent(f"slm:{run_dir}")
    assert name == "slm" and deployed.k == K and deployed.verifier is not None
    alone, name = build_agent(f"slm:{run_dir}?k=1")
    assert name == "slm?k=1" and alone.k == 1 and alone.verifier is None
    assert alone.sampler.temperature == 0.7  # the run's own sampling temperature
    greedy, name = build_agent(f"slm:{run_dir}?greedy=1")
    assert name == "slm?greedy=1" and greedy.k == 1 and greedy.verifier is None and greedy.sampler.temperature == 0
    assert alone.admissible == greedy.admissible == "snap"  # the run's grounding is kept

    decision = alone.act_batch([_context()], [{}])[0]
    assert len(decision.candidates) == 1 and decision.verifier_score is None


def test_greedy_plays_the_models_most_likely_tokens(run_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from r2v_agents.prompts import build_prompt
    from r2v_eval.agents import build_agent
    from r2v_train.run_dir import stage_paths

    policy, _ = build_agent(f"slm:{run_dir}?greedy=1")
    ctx = _context()
    cand = policy.propose([ctx])[0][0]
    path = stage_paths(run_dir)["bc_model"]
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    ids = tok(build_prompt(ctx), return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        for t in cand.token_ids:  # each generated token is the argmax given the ones before it
            assert model(ids).logits[0, -1].argmax().item() == t
            ids = torch.cat([ids, torch.tensor([[t]])], dim=1)
    again = policy.propose([ctx])[0][0]
    assert again.token_ids == cand.token_ids


def test_r2v_eval_runs_the_policy_alone(run_dir, tmp_path):
    from r2v_agents.shards import load_rows
    from r2v_eval.cli import main

    out = tmp_path / "eval"
    main(["--agent", f"slm:{run_dir}?k=1", "--envs", ENV, "--tasks", "2", "--seeds", "0", "--perturbations",
          "none", "--max-steps", "3", "--out", str(out), "--no-progress"])
    steps = load_rows(out / "runs" / "R2V_Scripted-v0" / "none", "steps")
    assert steps and all(len(s["candidates"]) == 1 for s in steps)


@pytest.mark.parametrize("spec, error", [("?beam=2", UnknownChoiceError), ("?greedy=1&k=3", ValueError),
                                         ("?k=0", ValueError)])
def test_bad_slm_options_are_refused(run_dir, spec, error):
    from r2v_eval.agents import build_agent

    with pytest.raises(error):
        build_agent(f"slm:{run_dir}{spec}")


def test_r2v_takes_no_policy_options(run_dir):
    from r2v_eval.agents import build_agent

    with pytest.raises(ValueError, match="no options"):
        build_agent(f"r2v:{run_dir}?k=1")
