"""Behaviour every perturbation wrapper shares: seeded, recorded, oracle-preserving, configurable."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from r2v_envs.errors import PerturbationConfigError, UnknownChoiceError
from r2v_envs.perturbations import WRAPPERS
from tests.support.perturbed_traces import oracle_view, run_script

SEED = 11
OTHER_SEED = 12
# intensities high enough that every wrapper fires within one scripted episode
STRONG = {"flaky": {"prob": 0.9}, "partial": {"prob": 0.9, "line_drop": 0.5}, "distractor": {"prob": 0.9},
          "injection": {"prob": 0.6, "goal_prob": 1.0}}
NAMES = sorted(WRAPPERS)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_stream(name):
    a = run_script({name: STRONG[name]}, SEED)
    b = run_script({name: STRONG[name]}, SEED)
    assert [o for o, _, _ in a] == [o for o, _, _ in b]
    assert [i["perturbations"] for _, i, _ in a] == [i["perturbations"] for _, i, _ in b]


@pytest.mark.parametrize("name", NAMES)
def test_different_seeds_differ(name):
    a = run_script({name: STRONG[name]}, SEED)
    b = run_script({name: STRONG[name]}, OTHER_SEED)
    assert [i["perturbations"] for _, i, _ in a] != [i["perturbations"] for _, i, _ in b]


@pytest.mark.parametrize("name", NAMES)
def test_events_recorded_and_observations_changed(name):
    clean = run_script(None, SEED)
    noisy = run_script({name: STRONG[name]}, SEED)
    events = [e for _, info, _ in noisy for e in info["perturbations"]]
    assert events and all(e["type"] == name for e in events)
    assert all(set(e) == {"type", "channel", "detail"} for e in events)
    changed = [c[0] != n[0] or c[1]["goal"] != n[1]["goal"] or c[1]["admissible_actions"] != n[1]["admissible_actions"]
               for c, n in zip(clean, noisy)]
    # every step that records an event shows the agent something different, and only those
    assert changed == [bool(n[1]["perturbations"]) for n in noisy]


@pytest.mark.parametrize("name", NAMES)
def test_true_state_untouched(name):
    clean = run_script(None, SEED)
    noisy = run_script({name: STRONG[name]}, SEED)
    assert [oracle_view(i) for _, i, _ in clean] == [oracle_view(i) for _, i, _ in noisy]
    assert [r for *_, r in clean] == [r for *_, r in noisy]


@pytest.mark.parametrize("name", NAMES)
def test_zero_intensity_is_clean(name):
    zero = {k: 0.0 for k in STRONG[name] if k.endswith("prob")}
    if name == "partial":
        zero["hide_admissible_prob"] = 0.0
    clean = run_script(None, SEED)
    noisy = run_script({name: zero}, SEED)
    assert [(o, i["goal"], i["admissible_actions"]) for o, i, _ in clean] == \
           [(o, i["goal"], i["admissible_actions"]) for o, i, _ in noisy]
    assert all(not i["perturbations"] for _, i, _ in noisy)


@pytest.mark.parametrize("name", NAMES)
def test_spec_records_the_stack(name):
    env = gym.make("R2V/Scripted-v0", seed=SEED, perturbations={name: STRONG[name]})
    wrappers = json.loads(env.spec.to_json())["additional_wrappers"]
    assert wrappers[0]["name"] == WRAPPERS[name].__name__
    assert wrappers[0]["kwargs"]["seed"] == SEED
    for key, value in STRONG[name].items():
        assert wrappers[0]["kwargs"][key] == value
    # the recorded spec rebuilds an identical stack
    rebuilt = gym.make(gym.envs.registration.EnvSpec.from_json(env.spec.to_json()))
    assert [o for o in _observations(rebuilt)] == [o for o in _observations(env)]


def _observations(env):
    obs, info = env.reset(options={"task_id": "scripted-3"})
    out = [obs]
    for _ in range(3):
        out.append(env.step("go east")[0])
    return out


@pytest.mark.parametrize("name", NAMES)
def test_bad_intensity_raises(name):
    with pytest.raises(PerturbationConfigError):
        gym.make("R2V/Scripted-v0", seed=SEED, perturbations={name: {"prob": 1.5}})
    with pytest.raises(PerturbationConfigError):
        gym.make("R2V/Scripted-v0", seed=SEED, perturbations={name: {"no_such_knob": 1}})


def test_unknown_name_and_channel_raise():
    with pytest.raises(UnknownChoiceError, match="did you mean 'injection'"):
        gym.make("R2V/Scripted-v0", seed=SEED, perturbations=["injecton"])
    with pytest.raises(UnknownChoiceError):
        gym.make("R2V/Scripted-v0", seed=SEED, perturbations={"flaky": {"channels": ["stdout"]}})


def test_composite_stacks_all_four_in_order():
    env = gym.make("R2V/Scripted-v0", seed=SEED, perturbations="composite")
    names = [w["name"] for w in json.loads(env.spec.to_json())["additional_wrappers"]][:4]
    assert names == ["FlakyToolOutput", "DropObservationLines", "AddDistractors", "InjectPrompt"]
    trace = run_script("composite", SEED, episodes=6)
    assert {e["type"] for _, i, _ in trace for e in i["perturbations"]} == set(WRAPPERS)


def test_stream_independent_of_other_wrappers():
    """A wrapper's draws depend on (z, episode, step) only, not on what else is in the stack."""
    alone = run_script({"partial": STRONG["partial"]}, SEED)
    stacked = run_script({"injection": {"prob": 0.0, "goal_prob": 0.0}, "partial": STRONG["partial"]}, SEED)
    assert [i["perturbations"] for _, i, _ in alone] == [i["perturbations"] for _, i, _ in stacked]
