"""Few-shot demonstrations for the model agents (``r2v eval --shots K``): expert episodes of *train*-split tasks,
shown to the model as earlier chat turns before each step.

This is the in-context protocol of the ReAct baselines on ALFWorld (demonstrations of the same task type, taken
from training tasks): for a step of task ``t``, the demonstrations are the ``K`` train tasks of ``t``'s family
(:func:`task_family`) whose expert episodes are shortest (ties by task id), else the shortest train tasks of any
family when ``t``'s family has fewer than ``K`` in the train split. Test tasks are never shown. Each demonstration
step is one user turn (the same prompt builder as the agent's own step, without history: the demonstration's
earlier turns already precede it, and without the list of admissible actions, which the step's own prompt
shows) and one assistant turn (the expert's action). To bound the prompt, a demonstration shows at most its first
``max_steps`` steps, and all demonstration turns together at most ``max_chars`` characters (whole steps, in
order: SmolLM2 reads 8,192 tokens, and an ALFWorld step with its action list is about 400).

Demonstrations are built once per (benchmark, family), on the env's unperturbed clean game, and are the same
for every episode of the run, so a run stays deterministic.

Example:
    >>> task_family("tw-coin_collector-easy-001"), task_family("0043-look_at_obj_in_light")
    ('tw-coin_collector', 'look_at_obj_in_light')
    >>> task_family("scripted-12"), task_family("word-frequency")
    ('scripted', 'word-frequency')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from r2v_agents.context import Context
from r2v_agents.prompts import PromptConfig, build_prompt

LEVELS = frozenset({"easy", "medium", "hard"})
_INDEX = re.compile(r"^\d+$")


def task_family(task_id: str) -> str:
    """The family of a task id: its ``-``-separated parts without numeric indices and difficulty levels."""
    parts = [p for p in task_id.split("-") if not _INDEX.match(p) and p not in LEVELS]
    return "-".join(parts) or task_id


@dataclass(frozen=True)
class Demo:
    """One expert episode of a train task: the contexts the expert saw and the actions it took."""

    task_id: str
    steps: tuple[tuple[Context, str], ...]
    won: bool


def expert_demo(env: Any, task_id: str, max_steps: int) -> Demo:
    """Play ``info["expert_action"]`` on ``task_id`` (seed 0, no perturbation) for up to ``max_steps`` steps."""
    obs, info = env.reset(seed=0, options={"task_id": task_id})
    if "expert_action" not in info:
        raise ValueError(f"{env.unwrapped.spec.id if env.unwrapped.spec else env}: its info has no expert_action, "
                         "so it cannot give demonstrations (--shots)")
    ctx = replace(Context.start(str(info.get("goal", "")), obs, info), benchmark=str(info.get("benchmark", "")))
    steps: list[tuple[Context, str]] = []
    won = False
    for _ in range(max_steps):
        action = str(info["expert_action"])
        steps.append((ctx, action))
        obs, reward, terminated, truncated, info = env.step(action)
        ctx = ctx.advance(action, obs, reward, info)
        if terminated or truncated:
            won = bool(info.get("won"))
            break
    return Demo(task_id, tuple(steps), won)


class DemoBank:
    """The demonstrations of a run: ``shots`` expert episodes per task family, built lazily per benchmark.

    ``envs`` maps each env id of the run to its ``gym.make`` arguments; the bank makes the env (train split, no
    perturbation) the first time a step of its benchmark asks for demonstrations.
    """

    def __init__(self, shots: int, envs: Mapping[str, Mapping[str, Any]], prompt: PromptConfig,
                 max_steps: int = 12, max_chars: int = 6000, candidates: int = 8):
        if shots < 1:
            raise ValueError(f"shots must be >= 1, got {shots}")
        self.shots, self.max_steps, self.max_chars, self.candidates = shots, max_steps, max_chars, candidates
        self.envs = {env_id: dict(kw) for env_id, kw in envs.items()}
        # Demonstration turns carry no history (the demonstration's own earlier turns precede them).
        self.prompt = replace(prompt, history_turns=0)
        self._by_benchmark: dict[str, Any] = {}
        self._cache: dict[tuple[str, str], list[Demo]] = {}
        self._turns: dict[tuple[str, str], list[dict[str, str]]] = {}

    def _env(self, benchmark: str) -> Any:
        import gymnasium as gym

        while benchmark not in self._by_benchmark and self.envs:
            env_id, kw = self.envs.popitem()
            env = gym.make(env_id, seed=0, **{**kw, "perturbations": None, "split": "train"})
            self._by_benchmark[env.unwrapped.benchmark] = env
        if benchmark not in self._by_benchmark:
            raise KeyError(f"no env of benchmark {benchmark!r} was given to the demonstration bank")
        return self._by_benchmark[benchmark]

    def demos(self, benchmark: str, task_id: str) -> list[Demo]:
        """The demonstrations for a step of ``task_id`` (module doc), played once and cached."""
        family = task_family(task_id)
        key = (benchmark, family)
        if key not in self._cache:
            env = self._env(benchmark)
            train = sorted(env.unwrapped.task_ids("train"))
            same = [t for t in train if task_family(t) == family]
            pool = same if len(same) >= self.shots else same + [t for t in train if t not in same]
            # Play at most `candidates` tasks: the family's first ones by id, then others.
            played = [expert_demo(env, t, self.max_steps) for t in pool[:max(self.candidates, self.shots)]]
            ranked = sorted(played, key=lambda d: (task_family(d.task_id) != family, not d.won, len(d.steps),
                                                    d.task_id))
            self._cache[key] = ranked[:self.shots]
        return self._cache[key]

    def messages(self, ctx: Context) -> list[dict[str, str]]:
        """The demonstrations as alternating user/assistant chat turns, for a step of ``ctx.task_id`` (built once
        per family, like the demonstrations)."""
        key = (ctx.benchmark, task_family(ctx.task_id))
        if key not in self._turns:
            turns: list[dict[str, str]] = []
            used = 0
            for step, action in (x for demo in self.demos(*key) for x in demo.steps):
                prompt = build_prompt(replace(step, admissible_actions=None), self.prompt)
                used += len(prompt) + len(action)
                if used > self.max_chars and turns:
                    break
                turns += [{"role": "user", "content": prompt}, {"role": "assistant", "content": action}]
            self._turns[key] = turns
        return self._turns[key]

    def close(self) -> None:
        for env in self._by_benchmark.values():
            env.close()
        self._by_benchmark.clear()

