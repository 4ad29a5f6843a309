"""r2v's perturbed benchmarks as Inspect AI tasks: any model Inspect can call, played turn by turn as ``r2v eval``
plays its model agents (the ``inspect`` extra; docs/inspect.md).

:func:`r2v_task` builds one :class:`inspect_ai.Task` over a registered env id and one perturbation setting; the
``r2v/<benchmark>`` tasks that ``inspect eval`` finds are thin ``@task`` wrappers in :mod:`r2v.inspect_tasks`
(Inspect names a task after the installed distribution its module belongs to, hence the ``r2v`` package).

* **Dataset**: one sample per (task, seed z), id ``<task_id>@<z>`` (:func:`r2v_agents.episodes.episode_key`), the
  tasks chosen as ``r2v eval`` chooses them (:func:`r2v_eval.grid.resolve_tasks`).
* **Solver** (:func:`play_env`): the env is built and stepped by the runner's own env side
  (:class:`r2v_agents.workers.EnvSlots`: the episode is a fresh ``gym.make(id, seed=z, perturbations=...)``'s, with
  the runner's reset options), every step's chat is ``r2v eval``'s (:func:`r2v_eval.model_agents.chat_messages`:
  system prompt plus the bounded prompt of the agent-visible context), the reply becomes an action through the same
  :class:`r2v_eval.model_agents.ReplyReader` (grounding chain), and the episode is folded and recorded by the
  runner's :func:`r2v_agents.episodes.observe` / :func:`~r2v_agents.episodes.finish`. The prompt is built from a
  :class:`r2v_agents.context.Context`, which never holds the oracle keys of ``info`` (``r2v_envs.visibility``): the
  expert's action and the outcome never reach the model. The sample's messages hold the episode as a chat (each
  step's prompt and reply); each model call's exact input is in its model event.
* **Scorer** (:func:`env_outcome`): the env's own outcome, 1 for a won episode and 0 otherwise (``accuracy`` is the
  SR), with the env's final ``score``, return and steps in the score's metadata, and every step's perturbation
  events in the sample's metadata and as ``r2v`` info events of the transcript, where Inspect's viewer shows them.

With the same replies the SR equals ``r2v eval``'s on the same episodes (tests/eval/test_inspect_tasks.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import gymnasium as gym
from inspect_ai import Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.log import transcript
from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
    get_model,
)
from inspect_ai.scorer import Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import Generate, TaskState, solver

import r2v_envs  # noqa: F401 - registers the envs
from r2v_agents.episodes import Episode, RunConfig, RunContext, episode_key, finish, observe
from r2v_agents.policy import Decision
from r2v_agents.workers import EnvSlots
from r2v_eval.grid import GridConfig, parse_settings, resolve_tasks
from r2v_eval.model_agents import ReplyReader, chat_messages, max_tokens_for

ENV_OF = {"textworld": "R2V/TextWorld-v0", "alfworld": "R2V/ALFWorld-v0", "scienceworld": "R2V/ScienceWorld-v0",
          "babyai": "R2V/BabyAI-v0", "humaneval": "R2V/HumanEval-v0", "terminalbench": "R2V/TerminalBench-v0",
          "scripted": "R2V/Scripted-v0"}
"""The ``r2v/<name>`` Inspect tasks and the env ids they play."""
EPISODE_KEY = "r2v_episode"
EVENTS_KEY = "perturbation_events"
_ENV_LOCK = threading.Lock()


async def _env_call(fn: Callable[..., Any], *args: Any) -> Any:
    """Run an env call in a worker thread, one at a time across the samples in flight: the engines block (so they
    stay off the event loop and model calls overlap with them), and not every engine is thread-safe (TextWorld
    parses its games with one module-level parser, which concurrent resets corrupt)."""
    def locked() -> Any:
        with _ENV_LOCK:
            return fn(*args)

    return await anyio.to_thread.run_sync(locked)


def _seeds(seed: int | Sequence[int]) -> tuple[int, ...]:
    """``-T seed=0`` or ``-T seed=[0,1,2]`` (Inspect reads ``-T`` values as YAML)."""
    seeds = (seed,) if isinstance(seed, (int, str)) else tuple(seed)
    if not seeds:
        raise ValueError("seed must name at least one perturbation seed")
    return tuple(int(z) for z in seeds)


def _grid(env_id: str, perturbations: str, seed: int | Sequence[int], split: str,
          tasks: int | Sequence[str] | None, max_steps: int | None) -> GridConfig:
    """``r2v eval``'s grid for one env id and one setting: ``tasks`` is a count (first N of the split; 0 or None:
    all) or a list of task ids."""
    if isinstance(tasks, str):  # -T tasks=tw-cooking-easy-000: one id
        tasks = [tasks]
    count, ids = (tasks or 0, ()) if tasks is None or isinstance(tasks, int) else (0, tuple(tasks))
    return GridConfig(env_ids=(env_id,), perturbations=(perturbations,), seeds=_seeds(seed), split=split,
                      tasks=count, task_ids=ids, max_steps=max_steps, progress=False)


def r2v_task(env_id: str, perturbations: str = "none", seed: int | Sequence[int] = 0, split: str = "test",
             tasks: int | Sequence[str] | None = None, max_steps: int | None = None, system_prompt: str = "",
             max_tokens: int | None = None, wrappers: Sequence[str] = ()) -> Task:
    """The Inspect task over ``env_id`` under one perturbation setting (``none``, a type, ``composite`` or a YAML
    file, as ``r2v eval --perturbations``), for the perturbation seeds ``seed`` and the ``tasks`` of ``split``.

    ``max_steps`` caps episodes (None: the env's cap); ``system_prompt`` and ``max_tokens`` override the model
    agents' defaults (:func:`r2v_eval.model_agents.system_for`, :func:`~r2v_eval.model_agents.max_tokens_for`);
    ``wrappers`` are extra ``gym.Wrapper`` import paths, as :attr:`r2v_agents.episodes.RunConfig.wrappers`."""
    grid = _grid(env_id, perturbations, seed, split, tasks, max_steps)
    (setting,) = parse_settings(grid.perturbations)
    samples = [Sample(id=episode_key(t, z), input=f"{env_id} task {t}, perturbation setting {setting.name}, seed {z}",
                      metadata={"env_id": env_id, "task_id": t, "z": z, "perturbation": setting.name})
               for t in resolve_tasks(grid, env_id) for z in grid.seeds]
    # Settings are data (a YAML file's content is read here), so the solver, the log and a retry replay them.
    return Task(dataset=MemoryDataset(samples, name=f"{env_id}/{setting.name}"),
                solver=play_env(env_id, setting.spec, grid.split, max_steps, system_prompt, max_tokens,
                                tuple(wrappers)),
                scorer=env_outcome(),
                # greedy, as r2v eval's model agents by default; `inspect eval --temperature T` overrides a task's config
                config=GenerateConfig(temperature=0.0),
                metadata={"env_id": env_id, "perturbation": setting.name, "split": grid.split,
                          "seeds": list(grid.seeds)})


def _inspect_messages(messages: Sequence[dict[str, str]]) -> list[ChatMessage]:
    kinds = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}
    return [kinds[m["role"]](content=m["content"]) for m in messages]


@solver
def play_env(env_id: str, perturbations: Any = None, split: str = "test", max_steps: int | None = None,
             system_prompt: str = "", max_tokens: int | None = None, wrappers: tuple[str, ...] = ()):
    """Play one episode of the sample's (task, z) with the task's model, one model call per env step."""
    cap = max_steps if max_steps is not None else gym.spec(env_id).max_episode_steps
    reader = ReplyReader()

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        model = get_model()
        meta = state.metadata
        run = RunContext(RunConfig(env_id, "", split=split, max_steps=max_steps), f"inspect:{model}", env_id, cap)
        slots = EnvSlots(env_id, {"perturbations": perturbations}, max_steps, wrappers)
        ep = Episode.start(0, meta["task_id"], int(meta["z"]))
        state.messages = []
        error = None
        try:
            result = await _env_call(slots.handle, [("reset", 0, ep.task_id, ep.z)])
            done = observe(ep, result[0][1:], run)
            error = result[0][-1]
            while not done:
                ctx = ep.ctx
                if events := ep.info.get("perturbations"):  # what perturbed the text this step's prompt shows
                    transcript().info({"t": len(ep.steps), "perturbations": events}, source="r2v")
                chat = _inspect_messages(chat_messages(ctx, system_prompt))
                state.messages.extend(chat if not state.messages else chat[-1:])
                output = await model.generate(chat, config=GenerateConfig(max_tokens=max_tokens_for(ctx, max_tokens)))
                action, reply_meta = reader(output.completion, ctx)
                state.messages.append(ChatMessageAssistant(content=output.completion))
                usage = output.usage
                ep.decision = Decision(action=action, source="agent", meta={
                    **reply_meta, "prompt_tokens": usage.input_tokens if usage else 0,
                    "completion_tokens": usage.output_tokens if usage else 0})
                result = await _env_call(slots.handle, [("step", 0, action)])
                done = observe(ep, result[0][1:], run)
                error = result[0][-1]
        finally:
            await _env_call(slots.close)
        if error is not None:
            # Not the agent's failure: r2v eval leaves such an episode out of SR and reruns it; Inspect does the
            # same with an errored sample (left out of the metrics, rerun by `inspect eval-retry`).
            raise RuntimeError(f"{env_id} could not run {ep.episode_id}: {error}")
        record = finish(ep, run, None)
        state.metadata[EPISODE_KEY] = {**record["episode"], "score": ep.info.get("score")}
        state.metadata[EVENTS_KEY] = [{"t": s["t"], "events": json.loads(s["perturbations"])}
                                      for s in record["steps"] if s["perturbations"] not in ("[]", None)]
        state.completed = True
        return state

    return solve


@scorer(metrics=[accuracy(), stderr()])
def env_outcome():
    """1 when the env says the episode was won (``info["won"]``, the runner's ``success``), else 0."""

    async def score(state: TaskState, target: Target) -> Score:
        ep = state.metadata[EPISODE_KEY]
        last = next((m.text for m in reversed(state.messages) if m.role == "assistant"), "")
        how = "won" if ep["success"] else "not won"
        return Score(value=1.0 if ep["success"] else 0.0, answer=last,
                     explanation=f"{how} after {ep['steps']} steps (return {ep['return']:g})",
                     metadata={k: ep[k] for k in ("score", "return", "steps", "terminated", "truncated", "verdict")})

    return score
