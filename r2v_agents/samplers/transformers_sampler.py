"""K-candidate sampling with Hugging Face transformers (CPU or GPU), with per-token log-probs and entropies.

Log-probs and entropies come from the model's raw logits (``output_logits=True``), i.e. the policy's own
distribution before temperature/top-p. Each candidate is cut at its first EOS or newline token; padding
after a finished sequence is masked out (NOTES.md, pitfall 5).

Example:
    >>> from r2v_agents.tiny import build_tiny_model, train_tokenizer
    >>> tok = train_tokenizer(["Goal: x\\nAction: go east\\n"] * 10, vocab_size=280)
    >>> model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
    ...                          intermediate_size=64)
    >>> sampler = TransformersSampler(model, tok, max_new_tokens=4, seed=0)
    >>> cands = sampler.sample(["Goal: x\\nAction:", "Goal: y\\nAction:"], k=3)
    >>> [len(c) for c in cands], len(cands[0][0].token_logprobs) == len(cands[0][0].token_entropies) <= 4
    ([3, 3], True)
"""

from __future__ import annotations

import zlib
from typing import Any

from r2v_agents.policy import Candidate
from r2v_agents.prompts import parse_completion
from r2v_agents.samplers import ChunkedSampler


class TransformersSampler(ChunkedSampler):
    """Samples with ``model.generate``; prompts longer than ``max_prompt_tokens`` keep their end."""

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int = 16, temperature: float = 1.0,
                 top_p: float = 1.0, max_prompt_tokens: int = 1024, batch_size: int = 8, device: str | None = None,
                 seed: int | None = None):
        if temperature <= 0:
            raise ValueError("temperature must be > 0 (K samples need sampling); use k=1 for greedy decoding")
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.max_prompt_tokens, self.batch_size, self.seed = max_prompt_tokens, batch_size, seed
        if device is not None:
            self.model.to(device)
        self.model.eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._newline_ids: set[int] | None = None

    @classmethod
    def from_pretrained(cls, path: str, device: str | None = None, **kwargs: Any) -> TransformersSampler:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return cls(AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), device=device,
                   **kwargs)

    def _stop_ids(self) -> set[int]:
        if self._newline_ids is None:
            vocab = self.tokenizer.get_vocab()
            ids = {i for i in vocab.values() if "\n" in self.tokenizer.decode([i])}
            ids.add(self.tokenizer.eos_token_id)
            self._newline_ids = ids
        return self._newline_ids

    def _sample_chunk(self, prompts: list[str], k: int) -> list[list[Candidate]]:
        import torch

        if self.seed is not None:  # reproducible for a given batch of prompts
            torch.manual_seed(self.seed + zlib.crc32("\x00".join(prompts).encode()))
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        ids = enc["input_ids"][:, -self.max_prompt_tokens:]
        mask = enc["attention_mask"][:, -self.max_prompt_tokens:]
        device = next(self.model.parameters()).device
        with torch.no_grad():
            gen = self.model.generate(
                input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=True, num_return_sequences=k,
                max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p, top_k=0,
                return_dict_in_generate=True, output_logits=True, pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id)
        new = gen.sequences[:, ids.shape[1]:].cpu()
        logp = torch.log_softmax(torch.stack(gen.logits, dim=1).float(), dim=-1).cpu()
        tok_lp = logp.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        ent = -(logp.exp() * logp).nan_to_num().sum(-1)
        stop, eos = self._stop_ids(), self.tokenizer.eos_token_id
        result: list[list[Candidate]] = []
        for p in range(len(prompts)):
            cands = []
            for row in range(p * k, (p + 1) * k):
                toks = new[row].tolist()
                end = next((j + 1 for j, t in enumerate(toks) if t in stop), len(toks))
                text = self.tokenizer.decode([t for t in toks[:end] if t != eos], skip_special_tokens=True)
                lps = tuple(float(x) for x in tok_lp[row, :end])
                cands.append(Candidate(action=parse_completion(text), logprob=sum(lps), token_logprobs=lps,
                                       token_entropies=tuple(float(x) for x in ent[row, :end]),
                                       token_ids=tuple(toks[:end])))
            result.append(cands)
        return result
