"""The tiny-model test corpus: scripted-env text and a byte-level BPE tokenizer trained on it, built once."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def scripted_corpus_and_tokenizer(vocab_size: int = 400):
    """Prompt/action texts of 4 clean scripted episodes and a tokenizer trained on them (cached per process)."""
    from r2v_agents.tiny import env_corpus, train_tokenizer

    texts = env_corpus("R2V/Scripted-v0", task_ids=[f"scripted-{i}" for i in range(4)], seeds=(0,),
                       perturbations=None)
    return texts, train_tokenizer(texts, vocab_size=vocab_size)
