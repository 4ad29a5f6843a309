"""Tiny Qwen2/Llama causal LMs with a byte-level BPE tokenizer trained locally on env text (nothing from a hub).

For tests and the CPU pipeline. :func:`env_corpus` rolls the env's expert out and renders every step with
the shared prompt builder (prompt + completion), :func:`train_tokenizer` fits a tokenizer on that text in
well under a second, and :func:`build_tiny_model` makes a randomly initialised model sized for it (the defaults are
a 3.4M-parameter Qwen2: hidden 256, 4 layers, 4/2 heads, FFN 768). Save both with ``save_pretrained(dir)`` and
reload with ``AutoModelForCausalLM.from_pretrained(dir)`` / ``AutoTokenizer.from_pretrained(dir)``.

Special tokens: ``<|endoftext|>`` is BOS, EOS and PAD (causal-LM training masks PAD through the attention
mask, and the samplers cut each candidate at its first EOS).

Example:
    >>> tok = train_tokenizer(["Goal: take the coin\\nAction: go east"] * 20, vocab_size=300)
    >>> tok.eos_token, tok.decode(tok(" go east")["input_ids"])
    ('<|endoftext|>', ' go east')
    >>> model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
    ...                          intermediate_size=64)
    >>> type(model).__name__, model.config.vocab_size == len(tok)
    ('Qwen2ForCausalLM', True)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from r2v_agents.prompts import DEFAULT_PROMPT, PromptConfig, action_style, build_prompt, format_completion
from r2v_agents.runner import RunConfig, run
from r2v_agents.shards import contexts_from_steps, load_rows
from r2v_agents.teachers import OracleTeacher
from r2v_envs.errors import UnknownChoiceError

EOS = "<|endoftext|>"
ARCHS = ("qwen2", "llama")


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048, min_frequency: int = 2):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts`` (every byte is covered, so no
    text is ever unknown). ``padding_side`` is left, as batched generation needs."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=EOS,
                                   padding_side="left", model_max_length=4096)


def build_tiny_model(tokenizer: Any, arch: str = "qwen2", hidden_size: int = 256, num_layers: int = 4,
                     num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int = 768,
                     max_positions: int = 2048, seed: int = 0):
    """A randomly initialised ``Qwen2ForCausalLM`` or ``LlamaForCausalLM`` (tied embeddings) for ``tokenizer``."""
    if arch not in ARCHS:
        raise UnknownChoiceError("tiny-model architecture", arch, ARCHS)
    import torch
    import transformers

    cfg_cls = transformers.Qwen2Config if arch == "qwen2" else transformers.LlamaConfig
    model_cls = transformers.Qwen2ForCausalLM if arch == "qwen2" else transformers.LlamaForCausalLM
    config = cfg_cls(vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=num_layers,
                     num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                     intermediate_size=intermediate_size, max_position_embeddings=max_positions,
                     tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                     eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = model_cls(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def env_corpus(env_id: str, task_ids: Sequence[str] | None = None, seeds: Sequence[int] = (0,),
               split: str = "train", max_steps: int = 50, prompt: PromptConfig = DEFAULT_PROMPT,
               **env_kwargs: Any) -> list[str]:
    """Expert rollouts rendered as ``prompt + completion + EOS`` texts (one per step), for tokenizer training.

    Episodes go through the rollout runner (in-process, into a temporary directory), so the text is exactly
    what the SLM sees at inference: same contexts, same prompt builder (``prompt``: the SLM's by default; a model
    agent's, ``r2v_eval.model_agents.AGENT_PROMPT``, for a model served to ``r2v eval --agent openai``).
    """
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cfg = RunConfig(env_id=env_id, out_dir=tmp, task_ids=None if task_ids is None else tuple(task_ids),
                        seeds=tuple(seeds), split=split, max_steps=max_steps, env_kwargs=dict(env_kwargs),
                        progress=False)
        run(OracleTeacher(), cfg)
        return [build_prompt(ctx, prompt) + format_completion(row["action"], style=action_style(env_id)) + EOS
                for ctx, row in contexts_from_steps(load_rows(tmp, "steps"))]
