"""Ready-made :class:`r2v_train.chain.stages.ChainConfig` presets (``r2v train --preset NAME``, ``preset:`` in a yaml).

Example:
    >>> preset("tiny").env.env_kwargs["suite"], preset("default").threads
    ('small', 2)
"""

from __future__ import annotations

from r2v_envs.errors import UnknownChoiceError
from r2v_train.chain.stages import ChainConfig
from r2v_train.configs.tiny import tiny_config

PRESETS = ("default", "tiny")


def preset(name: str) -> ChainConfig:
    """The chain config a preset names: ``default`` (the paper's settings) or ``tiny`` (a CPU smoke run)."""
    if name == "tiny":
        return tiny_config()
    if name == "default":
        return ChainConfig()
    raise UnknownChoiceError("chain preset", name, PRESETS)
