"""Run configs: the chain presets and the YAML files of ``r2v pipeline`` (``extends:`` and overrides).

A YAML file (``r2v_train/configs/*.yaml``) names a chain ``preset`` and overrides any field of the chain
(:class:`r2v_train.chain.stages.ChainConfig`), the evaluation (:class:`r2v_train.evaluation.methods.EvalConfig`;
its env defaults to the chain's), the router study (:class:`r2v_train.evaluation.study.StudyConfig`) and lists
``ablations`` to run. ``extends: other.yaml`` reads another file first and overrides it key by key.

Presets (``r2v train --preset NAME``, ``preset:`` in a yaml): ``default`` (the paper's settings) and ``tiny``
(the whole chain on a few games of the ``small`` TextWorld suite in about a minute: 3 train and 2 valid games,
2 replay seeds, a 2-layer Qwen2 of ~0.2M parameters, a few dozen BC/DPO steps, K=3 candidates; it checks that
every stage runs and connects, not that the SLM learns to play).

Example:
    >>> preset("tiny").env.env_kwargs["suite"], preset("default").threads
    ('small', 2)
    >>> cfg = load_config({"preset": "tiny", "chain": {"router": {"epochs": 2}},
    ...                    "evaluate": {"seeds": [0, 1], "per_type": []}})
    >>> cfg.chain.router.epochs, cfg.evaluate.seeds, cfg.evaluate.env_id
    (2, (0, 1), 'R2V/TextWorld-v0')
    >>> load_config({"chain": {"rooter": {}}})
    Traceback (most recent call last):
    ...
    r2v_envs.errors.UnknownChoiceError: unknown ChainConfig field 'rooter'; did you mean 'router'? ...
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r2v_envs.errors import UnknownChoiceError
from r2v_train.chain.bc import BCConfig
from r2v_train.chain.collect import EnvConfig, ReplayConfig, RouterDataConfig, SplitConfig, TeacherConfig
from r2v_train.chain.dpo import DPOConfig
from r2v_train.chain.preferences import PreferenceConfig
from r2v_train.chain.stages import ChainConfig
from r2v_train.evaluation.ablations import ABLATION_NAMES
from r2v_train.evaluation.methods import EvalConfig
from r2v_train.evaluation.study import StudyConfig
from r2v_train.router.config import RouterTrainConfig

CONFIG_DIR = Path(__file__).parent / "configs"
DEFAULT_CONFIG = CONFIG_DIR / "default.yaml"
PRESETS = ("default", "tiny")


def preset(name: str) -> ChainConfig:
    """The chain config a preset names: ``default`` (the paper's settings) or ``tiny`` (a CPU smoke run)."""
    if name == "tiny":
        return tiny_config()
    if name == "default":
        return ChainConfig()
    raise UnknownChoiceError("chain preset", name, PRESETS)


def tiny_config() -> ChainConfig:
    return ChainConfig(
        env=EnvConfig(env_kwargs={"suite": "small"}, max_steps=30, workers=0),
        split=SplitConfig(max_train_tasks=3, max_valid_tasks=2),
        teacher=TeacherConfig(),
        replay=ReplayConfig(seeds=(1, 2)),
        bc=BCConfig(tiny_hidden=64, tiny_layers=2, tiny_heads=2, tiny_kv_heads=1, tiny_ffn=128, vocab_size=600,
                         max_steps=20, learning_rate=3e-3, batch_size=4, save_steps=10),
        preferences=PreferenceConfig(k=3, max_contexts=24, max_new_tokens=8, chunk_size=12),
        dpo=DPOConfig(max_steps=6, learning_rate=1e-3, batch_size=4, save_steps=3),
        router_data=RouterDataConfig(train_seeds=(101, 102), valid_seeds=(201, 202), k=3, max_new_tokens=8,
                                     max_steps=6),
        router=RouterTrainConfig(epochs=3, batch_size=64, hidden=(16,), progress=False),
        threads=2)


@dataclass
class PipelineConfig:
    chain: Any
    """the training chain's config (r2v_train.chain.stages.ChainConfig)"""
    evaluate: EvalConfig = field(default_factory=EvalConfig)
    """evaluation of the six methods (and the policy alone)"""
    ablations: tuple[str, ...] = ()
    """ablations to run after the evaluation: features, closed_source, cvar, consistency, cvar_scaled,
    cvar_deviation, feature_sets"""
    baseline_slm: str = ""
    """an untrained SLM (a model directory or a backbone name, e.g. smollm2) also run as SLM-only on the main
    condition (``<run>/eval_baseline``): the SR before the chain's training, in the report's Run lines"""
    study: StudyConfig = field(default_factory=StudyConfig)
    """named router settings, the counterfactual oracle and repeats (``router_variants``, ``counterfactual``,
    ``repeats`` in the yaml; r2v_train.evaluation.study)"""


def override(obj: Any, values: Mapping[str, Any]) -> Any:
    """``obj`` (a dataclass) with ``values`` set, recursing into nested dataclasses; lists become tuples where
    the field's default is a tuple."""

    names = {f.name: f for f in dataclasses.fields(obj)}
    changes = {}
    for key, value in (values or {}).items():
        key = key.replace("-", "_")
        if key not in names:
            raise UnknownChoiceError(f"{type(obj).__name__} field", key, list(names))
        cur = getattr(obj, key)
        if dataclasses.is_dataclass(cur) and isinstance(value, Mapping):
            value = override(cur, value)
        elif isinstance(cur, tuple) and isinstance(value, list):
            value = tuple(value)
        changes[key] = value
    return dataclasses.replace(obj, **changes)


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, recursing into mappings (lists and scalars are replaced)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def read_config(source: str | os.PathLike | Mapping[str, Any] | None, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A yaml's mapping; ``extends: other.yaml`` (relative to the file, or to r2v_train/configs) is read first
    and overridden key by key."""
    if source is None or isinstance(source, (str, os.PathLike)):
        import yaml

        path = Path(source or DEFAULT_CONFIG)
        with open(path) as fh:
            data = yaml.safe_load(fh) or {}
        here = path.parent
    else:
        data, here = dict(source), CONFIG_DIR
    base = data.pop("extends", None)
    if base is None:
        return data
    base_path = here / base if (here / base).exists() else CONFIG_DIR / base
    if str(base_path.resolve()) in seen:
        raise ValueError(f"config 'extends' loops through {base_path}")
    return merge(read_config(base_path, (*seen, str(base_path.resolve()))), data)


def load_config(source: str | os.PathLike | Mapping[str, Any] | None = None) -> PipelineConfig:
    """A :class:`PipelineConfig` from a YAML path (or an already-parsed mapping); None: the embedded default."""

    data = read_config(source)
    keys = ["preset", "chain", "evaluate", "ablations", "description", "progress", "router_variants",
            "counterfactual", "repeats", "baseline_slm"]
    unknown = set(data) - set(keys)
    if unknown:
        raise UnknownChoiceError("pipeline config key", sorted(unknown)[0], keys)
    chain = override(preset(data.get("preset", "default")), data.get("chain") or {})
    # a top-level ``progress:`` switches every bar of the run at once; a section's own ``progress`` wins
    chain_set, top = data.get("chain") or {}, {"progress": data["progress"]} if "progress" in data else {}
    if top:
        chain = dataclasses.replace(chain, progress=chain_set.get("progress", top["progress"]),
                                    router=dataclasses.replace(chain.router, progress=(chain_set.get("router") or {})
                                                               .get("progress", top["progress"])))
    env = chain.env  # the evaluation runs on the chain's env unless the file says otherwise
    ev = EvalConfig(env_id=env.env_id, env_kwargs=dict(env.env_kwargs), max_steps=env.max_steps, workers=env.workers)
    ev = override(ev, {**top, **(data.get("evaluate") or {})})

    for a in data.get("ablations") or ():
        if a not in ABLATION_NAMES:
            raise UnknownChoiceError("ablation", a, ABLATION_NAMES)
    return PipelineConfig(chain=chain, evaluate=ev, ablations=tuple(data.get("ablations") or ()),
                          baseline_slm=data.get("baseline_slm") or "", study=StudyConfig.from_yaml(data))
