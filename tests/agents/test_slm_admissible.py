"""SLMPolicy's admissible grounding: sampled text snapped to the visible admissible actions, log-probs kept."""

import pytest

from r2v_agents.context import Context
from r2v_agents.policy import Candidate
from r2v_agents.slm import SLMPolicy, snap_to_admissible
from r2v_agents.verifiers.textworld import TextWorldVerifier
from r2v_envs.errors import UnknownChoiceError


class Fixed:
    def sample(self, prompts, k):
        return [[Candidate("tak coin", -3.0, (-1.0, -2.0), (0.5, 0.7)), Candidate("go eas", -1.0, (-1.0,), (0.1,))]
                for _ in prompts]


def test_snap_picks_closest_admissible_and_keeps_logprobs():
    ctx = Context.start("Take the coin.", "You see a coin.", {"admissible_actions": ["go east", "take coin", "look"]})
    free = SLMPolicy(Fixed(), TextWorldVerifier(), k=2).act_batch([ctx], [{}])[0]
    snap = SLMPolicy(Fixed(), TextWorldVerifier(), k=2, admissible="snap").act_batch([ctx], [{}])[0]
    assert [c.action for c in free.candidates] == ["tak coin", "go eas"]
    assert [c.action for c in snap.candidates] == ["take coin", "go east"]
    assert snap.candidates[0].token_logprobs == (-1.0, -2.0)  # the model's own statistics survive
    assert snap.candidates[1].token_entropies == (0.1,) and len(snap.features) == len(free.features)
    assert snap.action == "take coin"


def test_snap_without_visible_list_is_identity_and_bad_mode_raises():
    assert snap_to_admissible("dance", []) == "dance"
    assert snap_to_admissible("LOOK", ["look", "go east"]) == "look"
    with pytest.raises(UnknownChoiceError):
        SLMPolicy(Fixed(), k=1, admissible="nearest")
