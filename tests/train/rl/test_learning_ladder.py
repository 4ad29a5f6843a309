"""Rung 0 of the learning ladder: ``r2v rl``'s own GRPO trainer teaches a freshly initialised tiny policy to win
``R2V/Scripted-v0``, measured on the policy itself (one sample per step, no verifier) on held-out tasks.

As stable-baselines3's identity tests do for its algorithms: the env is small enough that failing to learn can only
mean a defect. The trainer, the collector, the rows and the reward are ``r2v rl``'s (``episode_trainer``: TRL's
``GRPOTrainer`` with our episode override); only the starting model differs. docs/results/2026-11-28-learning-ladder.md
has the curve and the defect this test found (unusable samples played as the fallback and never trained)."""

from __future__ import annotations

import pytest

from r2v_agents.context import Context
from r2v_agents.policy import Candidate
from r2v_agents.slm import SLMPolicy

torch = pytest.importorskip("torch")
pytest.importorskip("trl")


@pytest.mark.slow  # about a minute of CPU (30 GRPO steps of 16 episodes), more on a loaded machine
def test_rung0_grpo_teaches_a_fresh_tiny_policy_to_win_the_scripted_corridor(tmp_path):
    from r2v_train.rl.ladder import rung0

    torch.set_num_threads(1)
    curve = rung0(str(tmp_path))
    ev = sorted(curve["eval"].values(), key=lambda p: p["step"])
    won = [p["success"] for p in sorted(curve["train"].values(), key=lambda p: p["step"])]
    start, end = ev[0]["sr"] / 100, ev[-1]["sr"] / 100
    assert [p["step"] for p in ev] == [0, 30] and ev[0]["episodes"] == ev[-1]["episodes"] == 24
    assert start <= 0.4, f"a random policy should rarely win: {start:.2f}"
    assert end >= 0.9, f"GRPO did not teach the policy: own success {start:.2f} -> {end:.2f}; training {won}"
    assert sum(won[-5:]) > sum(won[:5])  # and its training episodes won more too


class _Silent:
    """A sampler whose model says nothing (an immediate end of sequence), token ids included."""

    accepts_keys = False

    def sample(self, prompts, k):
        return [[Candidate("", -0.1, token_logprobs=(-0.1,), token_entropies=(1.0,), token_ids=(0,),
                           prompt_token_ids=(5, 6))] for _ in prompts]


def test_an_unusable_sample_played_as_the_fallback_keeps_its_tokens():
    """An empty reply is played as the fallback action; its tokens are still recorded so that RL can push it down.
    Dropped, such steps went untrained and grew to half the steps of a run (the rung-0 defect)."""
    ctx = Context.start("Take the coin.", "You see a coin.", {"admissible_actions": ["look", "take coin"]})
    d = SLMPolicy(_Silent(), k=1, admissible="snap", record_tokens=True).act_batch([ctx], [{}])[0]
    assert d.meta.get("fallback") and d.action == "look"
    assert d.tokens is not None and d.tokens.completion_ids == (0,)


@pytest.mark.parametrize("advantage, trained", [(1.0, "executed"), (-1.0, "sampled"), (0.5, "executed")])
def test_rows_push_up_the_executed_action_and_push_down_the_models_own_sample(advantage, trained):
    from r2v_train.rl.rollouts import StepSample

    executed, sample = [11, 12, 0], [0]
    st = StepSample([5, 6], executed, [], "look", sampled=False, sample_ids=sample)
    assert st.row_ids(advantage) == (executed if trained == "executed" else sample)
    verbatim = StepSample([5, 6], executed, [-0.1] * 3, "look")  # the sample said the action: one set of tokens
    assert verbatim.row_ids(advantage) == executed
