"""RL through the server: the GRPO rollouts of r2v_train/rl/ step `r2v serve` sessions (a URL instead of an env id),
and one run mixes TextWorld and ALFWorld per example, as TRL's multi-environment mode does."""

from __future__ import annotations

import json
import math
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

import gymnasium as gym  # noqa: E402

from r2v_agents.tiny import build_tiny_model  # noqa: E402
from r2v_envs.serving.app import serve_in_thread  # noqa: E402
from r2v_envs.serving.config import ServeConfig  # noqa: E402
from r2v_train.rl.grpo_env import EpisodeRollout, env_reward, episode_dataset, tool_env_factory  # noqa: E402
from tests.support.serving import env_kwargs  # noqa: E402
from tests.support.tiny_models import scripted_corpus_and_tokenizer  # noqa: E402

pytestmark = pytest.mark.timeout(900)
ENV = "R2V/Scripted-v0"


def _settled(book, timeout_s: float = 15.0) -> dict:
    """The book once closed sessions are freed (a client's close reaches the server a moment later)."""
    deadline = time.monotonic() + timeout_s
    while book.summary()["live"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return book.summary()


def _tiny():
    torch.manual_seed(0)
    _, tok = scripted_corpus_and_tokenizer()  # byte-level BPE: any env's text tokenises
    return build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64), tok


def test_a_rollout_through_the_server_equals_the_one_in_process():
    torch.set_num_threads(1)
    model, tok = _tiny()
    kw = {**env_kwargs(ENV), "perturbations": "composite"}
    with serve_in_thread(ServeConfig(env=ENV, env_kwargs=json.dumps(kw), port=0)) as srv:
        outs = []
        for spec, kwargs in ((ENV, kw), (srv.url, {})):
            roll = EpisodeRollout(spec, kwargs, max_turns=3, max_new_tokens=4, admissible="snap")
            torch.manual_seed(1)  # the same samples: the same actions, so the same env replies
            outs.append(roll.rollout([5, 5, 6], model, tok, max_completion_tokens=200))
            roll.close()
        # the environment_factory form too: its tool plays the served episode
        tool = tool_env_factory(srv.url, seed=3)()
        first = tool.reset()
        assert srv.book.summary()["live"] >= 1
    local, remote = outs
    for key in ("prompt_ids", "completion_ids", "env_mask", "env_reward", "logprobs"):
        assert remote[key] == local[key], key
    probe = gym.make(ENV, **kw)
    obs, info = probe.reset(seed=3)
    assert first == f"Goal: {info['goal']}\n\n{obs}"


@pytest.mark.slow
def test_grpo_textworld_trains_through_a_server(tmp_path):
    from tests.support.examples import load_example

    example = load_example("grpo_textworld")
    Args, main = example.Args, example.main

    kw = {"task_id": "scripted-0", "perturbations": "composite"}
    with serve_in_thread(ServeConfig(env=ENV, env_kwargs=json.dumps(kw), port=0)) as srv:
        summary = main(Args(env_id=ENV, task_ids=("scripted-0",), server=srv.url, max_steps=2, num_generations=4,
                            max_turns=4, output_dir=str(tmp_path / "grpo"), seed=1))
        book = _settled(srv.book)
    assert summary["steps"] == 2 and summary["episodes"] == 8
    assert book["opened"] == 4 and book["live"] == 0  # a session per generation, reused across steps, all closed
    assert len(summary["rewards"]) == 2 and any(r > 0 for r in summary["rewards"])
    assert summary["changed_tensors"] > 0  # a learning signal came back from the server


@pytest.mark.slow
def test_grpo_trains_through_servers_mixing_textworld_and_alfworld(alfworld_cache, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    model, tok = _tiny()
    tw_kw, alf_kw = env_kwargs("R2V/TextWorld-v0"), env_kwargs("R2V/ALFWorld-v0", alfworld_cache)
    with serve_in_thread(ServeConfig(env="R2V/TextWorld-v0", env_kwargs=json.dumps(tw_kw), port=0)) as tw, \
            serve_in_thread(ServeConfig(env="R2V/ALFWorld-v0", env_kwargs=json.dumps(alf_kw), port=0)) as alf:
        rollout = EpisodeRollout({"textworld": tw.url, "alfworld": alf.url}, max_turns=2, max_new_tokens=4,
                                 admissible="snap")
        # per-example selection: each start is played by the env its example names
        out = rollout.rollout([("alfworld", 1), ("textworld", 0)], model, tok, max_completion_tokens=200)
        prompts = [tok.decode(ids) for ids in out["prompt_ids"]]
        for prompt, (env_id, kw, seed) in zip(prompts, [("R2V/ALFWorld-v0", alf_kw, 1),
                                                         ("R2V/TextWorld-v0", tw_kw, 0)]):
            env = gym.make(env_id, **kw)
            obs, info = env.reset(seed=seed)
            env.close()
            assert info["goal"] in prompt and obs[-200:] in prompt
        config = GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=2, per_device_train_batch_size=4,
                            num_generations=2, max_completion_length=200, learning_rate=1e-3, logging_steps=1,
                            save_strategy="no", report_to="none", seed=0, bf16=False, use_cpu=True,
                            gradient_checkpointing=False, dataloader_num_workers=0)
        trainer = GRPOTrainer(model=model, reward_funcs=[env_reward], args=config, processing_class=tok,
                              train_dataset=episode_dataset(4, seed=0, environments=("textworld", "alfworld")),
                              rollout_func=rollout)
        trainer.train()
        played = {name: len(pool) for name, pool in rollout._envs.items()}
        rollout.close()
        books = [_settled(srv.book) for srv in (tw, alf)]
    assert trainer.state.global_step == 2
    assert played["textworld"] >= 1 and played["alfworld"] >= 1  # both benchmarks in every batch
    assert all(b["opened"] >= 1 and b["live"] == 0 for b in books)  # sessions on both servers, all closed
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert len(rewards) == 2 and all(math.isfinite(r) for r in rewards)
