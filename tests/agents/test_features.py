"""The 15-dim risk features on hand-built contexts, their groups, masks and closed-source variants."""

from __future__ import annotations

import math

import numpy as np
import pytest

from r2v_agents.context import Context
from r2v_agents.features import (
    ABLATIONS,
    FEATURE_GROUPS,
    FEATURE_NAMES,
    apply_mask,
    compute_features,
    feature_mask,
    pseudo_entropy,
)
from r2v_agents.policy import Candidate

CTX = Context.start("Take the coin from the table now.", "You are in a room.", {}, max_steps=20)
CTX = CTX.advance("go east", "You see a table.", 0.0, {"step": 1}).advance("look", "A table.", 0.0, {"step": 2})
CANDS = [
    Candidate("take the coin", token_logprobs=(-0.1, -0.3), token_entropies=(0.5, 1.5), verifier_score=0.9),
    Candidate("take coin", token_logprobs=(-0.2, -0.4), token_entropies=(0.2, 0.4), verifier_score=0.7),
    Candidate("look", token_logprobs=(-1.0,), token_entropies=(2.0,), verifier_score=0.3),
    Candidate("Take  coin", token_logprobs=(-0.5, -0.5), token_entropies=(0.1, 0.1), verifier_score=0.7),
]


def f(cands=CANDS, **kw) -> dict[str, float]:
    return dict(zip(FEATURE_NAMES, compute_features(CTX, cands, **kw).tolist()))


def test_values_on_a_hand_built_context():
    x = f()
    assert x["token_entropy_mean"] == pytest.approx(np.mean([1.0, 0.3, 2.0, 0.1]))
    assert x["token_entropy_max"] == pytest.approx(2.0)
    assert x["token_logprob_mean"] == pytest.approx(np.mean([-0.2, -0.3, -1.0, -0.5]))
    assert x["token_logprob_worst"] == pytest.approx(-1.0)
    s = np.array([0.9, 0.7, 0.3, 0.7])
    assert x["verifier_mean"] == pytest.approx(s.mean()) and x["verifier_std"] == pytest.approx(s.std())
    assert (x["verifier_spread"], x["verifier_best"], x["verifier_worst"]) == pytest.approx((0.6, 0.9, 0.3))
    # "take the coin", "take coin", "Take  coin" are one cluster of 3, "look" another
    assert x["candidate_consistency"] == pytest.approx(0.75)
    assert x["semantic_entropy"] == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)) / math.log(4))
    assert x["horizon_fraction"] == pytest.approx(2 / 20) and x["step"] == 2.0
    chars = len(CTX.goal) + len("go east") + len("You see a table.") + len("look") + len("A table.")
    assert x["context_length"] == pytest.approx(chars / 4000)
    assert x["goal_length"] == pytest.approx(7 / 100)


def test_groups_partition_the_names_and_masks_zero_the_rest():
    assert len(FEATURE_NAMES) == 15 == len(set(FEATURE_NAMES))
    assert sorted(n for g in FEATURE_GROUPS.values() for n in g) == sorted(FEATURE_NAMES)
    vec = compute_features(CTX, CANDS)
    for name, groups in ABLATIONS.items():
        masked = dict(zip(FEATURE_NAMES, apply_mask(vec, name)))
        for g, names in FEATURE_GROUPS.items():
            for n in names:
                assert (masked[n] == 0) or (g in groups), (name, n)
    assert feature_mask("all").all() and not feature_mask("entropy_only")[FEATURE_NAMES.index("verifier_best")]
    with pytest.raises(ValueError, match="did you mean"):
        feature_mask("entropy_onyl")


def test_closed_source_variants():
    no_ent, pseudo, full = f(variant="no_entropy"), f(variant="pseudo_entropy"), f()
    for n in FEATURE_GROUPS["entropy"]:
        assert no_ent[n] == 0.0
    assert pseudo["token_entropy_mean"] == pseudo["token_entropy_max"] == pytest.approx(pseudo_entropy([.9, .7, .3, .7]))
    assert pseudo["token_logprob_mean"] == pseudo["token_logprob_worst"] == 0.0
    for n in FEATURE_GROUPS["verifier"] + FEATURE_GROUPS["context"]:
        assert no_ent[n] == pseudo[n] == full[n]
    assert pseudo_entropy([0.5] * 5) == pytest.approx(1.0) and pseudo_entropy([1.0, 0.0]) < 1.0
    with pytest.raises(ValueError):
        compute_features(CTX, CANDS, variant="blind")


def test_api_candidates_without_token_stats_and_empty_sets():
    x = f([Candidate("look", verifier_score=0.4), Candidate("look")])
    assert all(x[n] == 0.0 for n in FEATURE_GROUPS["entropy"])
    assert x["verifier_best"] == x["verifier_worst"] == pytest.approx(0.4) and x["candidate_consistency"] == 1.0
    empty = compute_features(CTX, [])
    assert empty.shape == (15,) and np.isfinite(empty).all()
