"""Runner-driven stages of Algorithm 1: task split, teacher trajectories, perturbation replay, router data.

Every episode is stepped by :func:`r2v_agents.runner.run` (the only place episodes are stepped), so each
stage's output is a runner directory of Parquet shards (``steps``/``episodes``/``router``, see
:mod:`r2v_agents.shards`) and a rerun resumes: finished (task, z) episodes are skipped.

* :func:`split_stage` (stage 1): the env's own task-level 70/15/15 split
  (seed 42, :func:`r2v_envs.core.split_tasks` through ``TextEnv.task_ids``), optionally capped to the first few
  tasks of each split for small runs. Written to ``split.json``.
* :func:`teacher_stage` (stage 2): the teacher on the train tasks, clean (no perturbations): D_exp.
* :func:`replay_stage` (stage 3): each clean trajectory's action sequence re-executed in the env perturbed with
  seeds z' (Appendix B: 5 seeds). The game is the same and the perturbations never change its state, so the
  (task, t) contexts of all seeds share their latent state while their observations differ: D_pert, and the
  paired views of the consistency term (Eq. 6). D_traj = D_exp U D_pert (:func:`traj_dirs`).
* :func:`router_data_stage` (stage 7): SLM-only rollouts of the fixed policy pi_theta under diverse seeds on the
  train and valid tasks; the runner labels each step's features f_t with y_t = 1[episode failed] (Eq. 7).

Example:
    >>> import tempfile, r2v_envs
    >>> env = EnvConfig("R2V/Scripted-v0", env_kwargs={"perturbations": None})
    >>> d = tempfile.mkdtemp()
    >>> split = split_stage(env, SplitConfig(max_train_tasks=2), d)
    >>> len(split["used"]["train"]), sorted(split) == ["test", "train", "used", "valid"]
    (2, True)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import r2v_envs  # noqa: F401
from r2v_agents.context import Context
from r2v_agents.policy import BatchPolicy, Decision
from r2v_agents.prompts import action_style
from r2v_agents.runner import RunConfig, run
from r2v_agents.samplers.openai_sampler import OpenAISampler
from r2v_agents.samplers.transformers_sampler import TransformersSampler
from r2v_agents.samplers.vllm_sampler import VLLMSampler
from r2v_agents.shards import load_rows
from r2v_agents.slm import SLMPolicy
from r2v_agents.teachers import HFTeacher, OpenAITeacher, OpenAITeacherConfig, OracleTeacher, fallback_action
from r2v_agents.verifiers import verifier_for
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.fileio import write_json_atomic
from r2v_envs.resolve import env_splits

SPLIT_FILE = "split.json"
SPLITS = ("train", "valid", "test")


@dataclass
class EnvConfig:
    """The environment every stage runs on."""

    env_id: str = "R2V/TextWorld-v0"
    """registered Gymnasium id"""
    env_kwargs: dict[str, Any] = field(default_factory=lambda: {"suite": "small"})
    """extra ``gym.make`` arguments shared by all stages (``perturbations`` is set per stage)"""
    max_steps: int = 50
    """episode step cap"""
    workers: int = 0
    """env worker processes of the runner (0: in-process)"""


@dataclass
class SplitConfig:
    """Stage 1 (split): which tasks of the env's 70/15/15 split (seed 42) the run uses."""

    max_train_tasks: int = 0
    """use only the first N train tasks (0: all)"""
    max_valid_tasks: int = 0
    """use only the first N valid tasks (0: all)"""


@dataclass
class TeacherConfig:
    """Stage 2 (teacher): clean teacher trajectories on the train tasks."""

    teacher: str = "oracle"
    """teacher policy: oracle (the env's expert action), openai (any OpenAI-compatible chat endpoint) or hf (a local
    transformers model, greedy: no network)"""
    model: str = ""
    """openai teacher: model name at the endpoint; hf teacher: a model directory or a named backbone (smollm2)"""
    base_url: str = ""
    """openai teacher: endpoint (empty: api.openai.com; e.g. http://host:8000/v1 for `vllm serve`)"""
    api_key_env: str = "OPENAI_API_KEY"
    """openai teacher: environment variable holding the key"""
    budget: int = 0
    """openai teacher: most HTTP requests in total (0: unlimited)"""
    seed: int = 0
    """perturbation seed z of the clean episodes (no perturbation is applied; z names the episode)"""


@dataclass
class ReplayConfig:
    """Stage 3 (replay): replay each clean trajectory under perturbation seeds z'."""

    seeds: tuple[int, ...] = (1, 2, 3, 4, 5)
    """perturbation seeds z' (Appendix B: 5 per clean trajectory)"""
    perturbations: str = "composite"
    """perturbation setting of the replayed envs (see r2v_envs.perturbations)"""


@dataclass
class RouterDataConfig:
    """Stage 7 (router data): SLM-only rollouts of the fixed policy, labelled y_t (Eq. 7)."""

    train_seeds: tuple[int, ...] = (101, 102, 103)
    """perturbation seeds of the rollouts on the train tasks (diverse, disjoint from replay seeds)"""
    valid_seeds: tuple[int, ...] = (201, 202)
    """perturbation seeds of the rollouts on the valid tasks (router calibration and threshold)"""
    perturbations: str = "composite"
    """perturbation setting of the rollouts"""
    k: int = 5
    """candidates sampled per step (Algorithm 2)"""
    max_new_tokens: int = 16
    """token cap of a sampled action"""
    temperature: float = 1.0
    """sampling temperature"""
    sampler_seed: int = 0
    """seed of candidate sampling (reproducible reruns)"""
    sampler: str = "transformers"
    """candidate sampler: transformers (CPU/GPU, in-process), vllm (GPU, in-process) or openai (a `vllm serve`
    or other OpenAI-compatible completions server hosting the model)"""
    sampler_base_url: str = ""
    """openai sampler: the server's base URL, e.g. http://gpu-box:8000/v1"""
    max_steps: int | None = None
    """step cap of these rollouts (None: the env config's)"""
    admissible: str = "free"
    """SLM action grounding: free (the sampled text) | snap (closest visible admissible action); also used by
    the evaluation's SLM"""


# --------------------------------------------------------------------------------------------------- stage 1: split
def split_stage(env: EnvConfig, cfg: SplitConfig, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Write ``out_dir/split.json``: every split's task ids and the ``used`` train/valid subsets."""
    split = env_splits(env.env_id, SPLITS, **env.env_kwargs)  # an id, module:Id or an r2v serve URL
    cap = lambda ids, n: ids[:n] if n else ids  # noqa: E731
    split["used"] = {"train": cap(split["train"], cfg.max_train_tasks),
                     "valid": cap(split["valid"], cfg.max_valid_tasks)}
    if not split["used"]["train"] or not split["used"]["valid"]:
        sizes = {k: len(split[k]) for k in SPLITS}
        raise ValueError(f"{env.env_id}: the split leaves no train or no valid task ({sizes})")
    os.makedirs(out_dir, exist_ok=True)
    write_json_atomic(os.path.join(out_dir, SPLIT_FILE), split)
    return split


def load_split(split_dir: str | os.PathLike) -> dict[str, Any]:
    with open(os.path.join(split_dir, SPLIT_FILE)) as fh:
        return json.load(fh)


# --------------------------------------------------------------------------------------------------- stage 2: teacher
def make_teacher(cfg: TeacherConfig | str, env_id: str = "R2V/TextWorld-v0") -> BatchPolicy:
    """The teacher pi_T: the env's oracle, an OpenAI-compatible chat model (``cfg.model`` at ``cfg.base_url``), or
    a local transformers model (``cfg.model``: a directory or ``smollm2``; it writes ``env_id``'s action style)."""

    cfg = TeacherConfig(teacher=cfg) if isinstance(cfg, str) else cfg
    if cfg.teacher == "oracle":
        return OracleTeacher()
    if cfg.teacher == "openai":
        if not cfg.model:
            raise ValueError("the openai teacher needs teacher.model (the model name at the endpoint)")
        return OpenAITeacher(OpenAITeacherConfig(model=cfg.model, base_url=cfg.base_url or None,
                                                 api_key_env=cfg.api_key_env, budget=cfg.budget or None))
    if cfg.teacher == "hf":
        if not cfg.model:
            raise ValueError("the hf teacher needs teacher.model (a model directory or a backbone name: smollm2)")
        return HFTeacher.from_pretrained(cfg.model, style=action_style(env_id))

    raise UnknownChoiceError("teacher", cfg.teacher, ["oracle", "openai", "hf"])


def teacher_stage(env: EnvConfig, cfg: TeacherConfig, task_ids: Sequence[str], out_dir: str | os.PathLike,
                  progress: bool = True):
    """Clean teacher episodes (D_exp) on ``task_ids``; returns the runner's summary."""

    rc = RunConfig(env.env_id, os.fspath(out_dir), task_ids=tuple(task_ids), seeds=(cfg.seed,), split="train",
                   env_kwargs={**env.env_kwargs, "perturbations": None}, max_steps=env.max_steps,
                   workers=env.workers, progress=progress,
                   # a local model teacher batches across envs in this process instead of a copy per worker
                   policy_in_workers=env.workers > 0 and cfg.teacher != "hf")
    return run(make_teacher(cfg, env.env_id), rc, policy_name=cfg.teacher)


# --------------------------------------------------------------------------------------------------- stage 3: replay
class ReplayPolicy(BatchPolicy):
    """Re-executes a logged action sequence per task: action t of task i is ``actions[i][t]``.

    Picklable (plain dicts), so it can run inside the runner's workers. Past the end of a sequence (the
    perturbed episode outlived the clean one, which a deterministic game should not allow) it falls back to a
    harmless action and marks the decision.

    Example:
        >>> from r2v_agents.context import Context
        >>> from dataclasses import replace
        >>> pol = ReplayPolicy({"t0": ["go east", "take coin"]})
        >>> ctx = replace(Context.start("g", "o", {}), task_id="t0").advance("go east", "o2", 0.0, {})
        >>> pol.act_batch([ctx], [{}])[0].action
        'take coin'
    """

    name = "replay"

    def __init__(self, actions: Mapping[str, Sequence[str]]):
        self.actions = {k: list(v) for k, v in actions.items()}

    def act_batch(self, contexts: Sequence[Context], infos: Sequence[Mapping[str, Any]]) -> list[Decision]:
        out = []
        for ctx in contexts:
            seq = self.actions.get(ctx.task_id or "", [])
            t = len(ctx.history)
            if t < len(seq):
                out.append(Decision(action=seq[t], source="replay"))
            else:
                out.append(Decision(action=fallback_action(ctx), source="replay", meta={"beyond_log": True}))
        return out


def logged_actions(run_dir: str | os.PathLike, successful_only: bool = True) -> dict[str, list[str]]:
    """task_id -> the action sequence of its (first) logged episode in a runner directory."""
    ok = {e["episode_id"] for e in load_rows(run_dir, "episodes", ["episode_id", "success"])
          if e["success"] or not successful_only}
    seqs: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    for r in load_rows(run_dir, "steps", ["episode_id", "task_id", "t", "action"]):
        if r["episode_id"] in ok and owner.setdefault(r["task_id"], r["episode_id"]) == r["episode_id"]:
            seqs.setdefault(r["task_id"], []).append(r["action"])
    return seqs


def replay_stage(env: EnvConfig, cfg: ReplayConfig, teacher_dir: str | os.PathLike, out_dir: str | os.PathLike,
                 progress: bool = True):
    """Replay the successful clean trajectories of ``teacher_dir`` under ``cfg.seeds`` (D_pert)."""

    actions = logged_actions(teacher_dir)
    if not actions:
        raise ValueError(f"{teacher_dir} holds no successful teacher episode to replay")
    rc = RunConfig(env.env_id, os.fspath(out_dir), task_ids=tuple(sorted(actions)), seeds=tuple(cfg.seeds),
                   split="train", env_kwargs={**env.env_kwargs, "perturbations": cfg.perturbations},
                   max_steps=env.max_steps, workers=env.workers, policy_in_workers=env.workers > 0, progress=progress)
    return run(ReplayPolicy(actions), rc, policy_name="replay")


def traj_dirs(run_dir: str | os.PathLike) -> list[str]:
    """The runner directories whose union is D_traj = D_exp U D_pert."""
    return [os.path.join(run_dir, "teacher"), os.path.join(run_dir, "replay")]


# --------------------------------------------------------------------------------------------------- stage 7: router data
def make_sampler(model_dir: str, cfg: RouterDataConfig, style: str = "line"):
    """The SLM's candidate sampler over a saved model (``cfg.sampler``: transformers, vllm or openai); ``style``:
    how actions end (:func:`r2v_agents.prompts.action_style`; the transformers sampler cuts them accordingly)."""
    opts = {"max_new_tokens": cfg.max_new_tokens, "temperature": cfg.temperature}
    if cfg.sampler == "transformers":
        return TransformersSampler.from_pretrained(model_dir, seed=cfg.sampler_seed, style=style, **opts)
    if cfg.sampler == "vllm":
        return VLLMSampler(model_dir, seed=cfg.sampler_seed, **opts)
    if cfg.sampler == "openai":
        if not cfg.sampler_base_url:
            raise ValueError("the openai sampler needs router_data.sampler_base_url (the `vllm serve` endpoint)")
        return OpenAISampler(model=model_dir, base_url=cfg.sampler_base_url, **opts)

    raise UnknownChoiceError("sampler", cfg.sampler, ["transformers", "vllm", "openai"])


def slm_policy(model_dir: str, cfg: RouterDataConfig, env_id: str = "R2V/TextWorld-v0", sampler: Any = None,
               verifier: bool = True):
    """The SLM-only policy of Algorithm 2 (lines 3-5) on a saved model: K samples, the benchmark's verifier, f_t.

    ``sampler`` (e.g. a :class:`r2v_agents.samplers.memo.MemoSampler` shared by several policies) replaces the one
    :func:`make_sampler` would load. ``verifier=False`` leaves the benchmark's verifier out (the policy alone:
    with ``cfg.k == 1`` it plays its own sample)."""

    sampler = make_sampler(model_dir, cfg, action_style(env_id)) if sampler is None else sampler
    return SLMPolicy(sampler, verifier_for(env_id) if verifier else None, k=cfg.k, admissible=cfg.admissible)


def router_data_stage(env: EnvConfig, cfg: RouterDataConfig, model_dir: str, split: Mapping[str, Any],
                      out_dir: str | os.PathLike, progress: bool = True) -> dict[str, Any]:
    """SLM-only rollouts into ``out_dir/train`` and ``out_dir/valid``; returns both runner summaries."""

    policy = slm_policy(model_dir, cfg, env.env_id)
    out = {}
    for part, seeds in (("train", cfg.train_seeds), ("valid", cfg.valid_seeds)):
        # the SLM batches across envs in this process; env workers only step the games
        rc = RunConfig(env.env_id, os.path.join(out_dir, part), task_ids=tuple(split["used"][part]),
                       seeds=tuple(seeds), split=part,
                       env_kwargs={**env.env_kwargs, "perturbations": cfg.perturbations},
                       max_steps=cfg.max_steps or env.max_steps, workers=env.workers, progress=progress)
        out[part] = asdict(run(policy, rc, policy_name="slm"))
    return out
