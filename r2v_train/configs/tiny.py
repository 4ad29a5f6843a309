"""The tiny CPU preset: the whole chain on a few games of the ``small`` TextWorld suite in about a minute.

Sized for tests and smoke runs on 2 cores: 3 train and 2 valid games, 2 replay seeds, a 2-layer Qwen2 of
~0.2M parameters, a few dozen BC/DPO steps, K=3 candidates, short router-data episodes and a few router epochs.
It checks that every stage runs and connects, not that the SLM learns to play.

Example:
    >>> cfg = tiny_config()
    >>> cfg.env.env_kwargs["suite"], cfg.replay.seeds, cfg.preferences.k
    ('small', (1, 2), 3)
"""

from __future__ import annotations

from r2v_train.chain.collect import EnvConfig, ReplayConfig, RouterDataConfig, SplitConfig, TeacherConfig
from r2v_train.chain.policy_stages import BCStageConfig, DPOStageConfig
from r2v_train.chain.preferences import PreferenceConfig
from r2v_train.chain.stages import ChainConfig
from r2v_train.router.train import RouterTrainConfig


def tiny_config() -> ChainConfig:
    return ChainConfig(
        env=EnvConfig(env_kwargs={"suite": "small"}, max_steps=30, workers=0),
        split=SplitConfig(max_train_tasks=3, max_valid_tasks=2),
        teacher=TeacherConfig(),
        replay=ReplayConfig(seeds=(1, 2)),
        bc=BCStageConfig(tiny_hidden=64, tiny_layers=2, tiny_heads=2, tiny_kv_heads=1, tiny_ffn=128, vocab_size=600,
                         max_steps=20, learning_rate=3e-3, batch_size=4, save_steps=10),
        preferences=PreferenceConfig(k=3, max_contexts=24, max_new_tokens=8, chunk_size=12),
        dpo=DPOStageConfig(max_steps=6, learning_rate=1e-3, batch_size=4, save_steps=3),
        router_data=RouterDataConfig(train_seeds=(101, 102), valid_seeds=(201, 202), k=3, max_new_tokens=8,
                                     max_steps=6),
        router=RouterTrainConfig(epochs=3, batch_size=64, hidden=(16,), progress=False),
        threads=2)
