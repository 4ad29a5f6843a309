"""DRRN's experience: transitions read from the runner's episode records, and a replay buffer with a priority share.

A transition is (state, action, reward, done, next state, next admissible actions), built from the step rows the
runner logs (:func:`r2v_agents.episodes.finish`) with the state text the policy reads
(:func:`r2v_agents.drrn.state_text`): the learner trains on exactly what the agent saw. The reward is the env's
per-step reward (the score delta); the outcome keys (``won``, ``score``) are never read. The last step of an episode
cut by the step cap has no logged successor state: it is dropped rather than bootstrapped from a guess.

Example:
    >>> record = {"episode": {"error": None}, "steps": [
    ...     {"goal": "g", "observation": "o0", "history_actions": [], "admissible_actions": ["a", "b"],
    ...      "action": "a", "reward": 0.0, "terminated": False},
    ...     {"goal": "g", "observation": "o1", "history_actions": ["a"], "admissible_actions": ["b", "c"],
    ...      "action": "c", "reward": 1.0, "terminated": True}]}
    >>> t = transitions(record)
    >>> [(x.action, x.reward, x.done, x.next_actions) for x in t]
    [('a', 0.0, False, ('b', 'c')), ('c', 1.0, True, ())]
    >>> [x.reward for x in transitions(record, reward_scale=0.01)]  # ScienceWorld pays on a 0-100 scale
    [0.0, 0.01]
    >>> transitions(record, history=2)[0].next_state, transitions(record)[1].state
    ('g | a | o1', 'g | a | o1')
    >>> buf = Replay(capacity=10, priority_fraction=0.5, seed=0)
    >>> buf.extend(t * 3); len(buf), sorted({x.reward for x in buf.sample(4)})
    (6, [0.0, 1.0])
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from r2v_agents.drrn import seen_actions, state_text


@dataclass(frozen=True)
class Transition:
    state: str
    action: str
    reward: float
    done: bool
    next_state: str
    next_actions: tuple[str, ...]


def transitions(record: Mapping[str, Any], terminal_penalty: float = 0.0,
                reward_scale: float = 1.0, history: int = 1) -> list[Transition]:
    """The transitions of one runner episode record (none for an episode that ended in an env error), rewards
    multiplied by ``reward_scale``, states with the agent's last ``history`` actions (as the policy reads them).
    ``terminal_penalty`` (in scaled units) is subtracted from the reward of a step that ended the episode and paid
    nothing: the env stopped the game without a win (TextWorld's wrong treasure, a cooking game's inedible meal),
    which a reward of 0 would not tell apart from a step that merely did nothing."""
    if record["episode"].get("error"):
        return []
    steps = record["steps"]
    seen = [seen_actions(s["admissible_actions"], None) for s in steps]
    for i in range(1, len(seen)):  # an env that hides the list: the agent's last one (as DRRNPolicy acts)
        seen[i] = seen_actions(steps[i]["admissible_actions"], seen[i - 1])
    out = []
    for i, s in enumerate(steps):
        recent = list(s["history_actions"] or ())
        state = state_text(s["goal"], s["observation"], recent[-history:])
        if s["terminated"]:
            r = float(s["reward"]) * reward_scale
            out.append(Transition(state, s["action"], r - terminal_penalty if r <= 0 else r, True, "", ()))
        elif i + 1 < len(steps):
            n = steps[i + 1]
            out.append(Transition(state, s["action"], float(s["reward"]) * reward_scale, False,
                                  state_text(n["goal"], n["observation"], [*recent, s["action"]][-history:]),
                                  tuple(seen[i + 1])))
    return out


class Replay:
    """A FIFO buffer of ``capacity`` transitions; a batch draws ``priority_fraction`` of its rows from the
    transitions with positive reward (while any are held) and the rest uniformly. Strings are interned, so a
    pickled buffer (the checkpoint) stores each repeated text once."""

    def __init__(self, capacity: int, priority_fraction: float, seed: int):
        self.capacity, self.priority_fraction = capacity, priority_fraction
        self.rng = random.Random(seed)
        self.items: list[Transition] = []
        self.start = 0  # ring position of the oldest item once full
        self._intern: dict[Any, Any] = {}
        self._positive: list[int] | None = None  # indices of rewarded items, rebuilt after each extend

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def _i(self, x: Any) -> Any:
        return self._intern.setdefault(x, x)

    def extend(self, items: Iterable[Transition]) -> None:
        self._positive = None
        for t in items:
            t = Transition(self._i(t.state), self._i(t.action), t.reward, t.done, self._i(t.next_state),
                           self._i(tuple(self._i(a) for a in t.next_actions)))
            if len(self.items) < self.capacity:
                self.items.append(t)
            else:
                self.items[self.start] = t
                self.start = (self.start + 1) % self.capacity
        if len(self._intern) > 4 * self.capacity:  # drop texts no held transition uses any more
            self._intern = {}
            self.items = [Transition(self._i(t.state), self._i(t.action), t.reward, t.done, self._i(t.next_state),
                                     self._i(tuple(self._i(a) for a in t.next_actions))) for t in self.items]

    def sample(self, n: int) -> list[Transition]:
        if self._positive is None:
            self._positive = [i for i, t in enumerate(self.items) if t.reward > 0]
        k = round(n * self.priority_fraction) if self._positive else 0
        return ([self.items[self.rng.choice(self._positive)] for _ in range(k)]
                + [self.rng.choice(self.items) for _ in range(n - k)])

    def stats(self) -> dict[str, int]:
        return {"transitions": len(self.items), "positive": sum(t.reward > 0 for t in self.items)}


def td_batch(batch: Sequence[Transition]) -> tuple[list[str], list[str], list[float], list[bool], list[str],
                                                   list[tuple[str, ...]]]:
    """A batch as columns (states, actions, rewards, dones, next states, next actions)."""
    return ([t.state for t in batch], [t.action for t in batch], [t.reward for t in batch],
            [t.done for t in batch], [t.next_state for t in batch], [t.next_actions for t in batch])
