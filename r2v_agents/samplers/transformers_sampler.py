"""K-candidate sampling with Hugging Face transformers (CPU or GPU), with per-token log-probs and entropies.

Log-probs and entropies come from the model's raw logits, i.e. the policy's own distribution before
temperature/top-p. Each prompt is encoded once and its KV cache shared by its k samples. Each candidate is cut
at its first stop token: EOS or any EOS of the generation config (a chat model's end of turn), and with
``style="line"`` (the default) also a token containing a newline; with ``style="block"`` (multi-line actions,
:func:`r2v_agents.prompts.action_style`) at the token that closes its first code fence instead. Padding after
a finished sequence is masked out (``generate`` still scores the pad positions). Prompts from :func:`r2v_agents.prompts.build_prompt` are
rendered with :func:`r2v_agents.prompts.render_prompt` first: a chat model (a tokenizer with a chat template)
reads them as a chat turn, exactly as BC and DPO trained it; the tiny model reads the plain text.

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

from typing import Any

from r2v_agents.backbones import load_backbone
from r2v_agents.policy import Candidate
from r2v_agents.prompts import check_style, fence_closed, parse_completion, render_prompt
from r2v_agents.samplers import ChunkedSampler, stream_seed


class TransformersSampler(ChunkedSampler):
    """Samples with a KV-cached decoding loop; prompts longer than ``max_prompt_tokens`` keep their end.

    With a ``seed`` (or per-prompt ``keys``), each prompt's k samples come from its own generator seeded by
    (seed, key, prompt text): the same prompt gives the same candidates in any batch, on any worker layout."""

    accepts_keys = True

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int = 16, temperature: float = 1.0,
                 top_p: float = 1.0, max_prompt_tokens: int = 1024, batch_size: int = 8, device: str | None = None,
                 seed: int | None = None, style: str = "line"):
        check_style(style)
        self.style = style
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
        """A sampler over a model directory or a named backbone (``smollm2``: :mod:`r2v_agents.backbones`)."""

        model, tok = load_backbone(path)
        return cls(model, tok, device=device, **kwargs)

    def _stop_ids(self) -> set[int]:
        if self._newline_ids is None:
            ids = set()
            if self.style == "line":  # block actions span lines: only EOS / end of turn (and the fence) end them
                vocab = self.tokenizer.get_vocab()
                ids = {i for i in vocab.values() if "\n" in self.tokenizer.decode([i])}
            ids.add(self.tokenizer.eos_token_id)
            # a chat model may end its turn with another token than the tokenizer's EOS (a list in the config)
            extra = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
            ids.update(i for i in ([extra] if isinstance(extra, int) else extra or ()) if i is not None)
            self._newline_ids = ids
        return self._newline_ids

    def _sample_chunk(self, prompts: list[str], k: int, keys: list[int] | None = None) -> list[list[Candidate]]:
        import torch

        # special tokens are in the rendered text already (chat) or not used (plain prompts of the tiny model)
        enc = self.tokenizer([render_prompt(p, self.tokenizer, self.style) for p in prompts], return_tensors="pt", padding=True,
                             add_special_tokens=False)
        device = next(self.model.parameters()).device
        ids = enc["input_ids"][:, -self.max_prompt_tokens:].to(device)
        mask = enc["attention_mask"][:, -self.max_prompt_tokens:].to(device)
        streams = None
        if self.seed is not None or keys is not None:  # one stream per prompt: batch make-up cannot change it
            streams = []
            for i, prompt in enumerate(prompts):
                seed = stream_seed(self.seed, None if keys is None else keys[i], prompt)
                streams.append(torch.Generator(device=device).manual_seed(seed))
        new, logits = self._decode(ids, mask, k, streams)
        logp = torch.log_softmax(logits.float(), dim=-1).cpu()
        new = new.cpu()
        tok_lp = logp.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        ent = -(logp.exp() * logp).nan_to_num().sum(-1)
        stop, eos = self._stop_ids(), self.tokenizer.eos_token_id
        result: list[list[Candidate]] = []
        ids_cpu, mask_cpu = ids.cpu(), mask.cpu().bool()
        for p in range(len(prompts)):
            prompt_ids = tuple(ids_cpu[p][mask_cpu[p]].tolist())  # left padding removed
            cands = []
            for row in range(p * k, (p + 1) * k):
                toks = new[row].tolist()
                end = self._cut(toks, stop)
                text = self.tokenizer.decode([t for t in toks[:end] if t != eos], skip_special_tokens=True)
                lps = tuple(float(x) for x in tok_lp[row, :end])
                cands.append(Candidate(action=parse_completion(text, self.style), logprob=sum(lps), token_logprobs=lps,
                                       token_entropies=tuple(float(x) for x in ent[row, :end]),
                                       token_ids=tuple(toks[:end]), prompt_token_ids=prompt_ids))
            result.append(cands)
        return result

    def _cut(self, toks: list[int], stop: set[int]) -> int:
        """Tokens kept of a sampled row: up to its first stop token, or (block style) its fence-closing token."""
        end = next((j + 1 for j, t in enumerate(toks) if t in stop), len(toks))
        if self.style == "block":
            text = ""
            for j, t in enumerate(toks[:end]):
                text += self.tokenizer.decode([t])
                if fence_closed(text):
                    return j + 1
        return end

    def _decode(self, ids: Any, mask: Any, k: int, streams: list[Any] | None = None) -> tuple[Any, Any]:
        """Sample ``k`` continuations of each left-padded prompt: (token ids (B k, T), raw logits (B k, T, V)).

        The prompt is encoded once and its KV cache repeated k times (``generate(num_return_sequences=k)``
        encodes each prompt k times, which dominated sampling on CPU); decoding stops as soon as every
        sequence has emitted a stop token (EOS or a newline; block style: EOS or a closed fence), since
        candidates are cut there anyway.
        ``streams`` (one ``torch.Generator`` per prompt) make each prompt's draws its own.
        """
        import torch

        stop = torch.tensor(sorted(self._stop_ids()), device=ids.device)
        position = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=position, use_cache=True,
                             logits_to_keep=1)
            cache = out.past_key_values
            cache.batch_repeat_interleave(k)
            mask = mask.repeat_interleave(k, dim=0)
            position = position[:, -1:].repeat_interleave(k, dim=0)
            logits = out.logits[:, -1].repeat_interleave(k, dim=0)
            tokens, raw = [], []
            done = torch.zeros(len(logits), dtype=torch.bool, device=ids.device)
            texts = [""] * len(logits) if self.style == "block" else None
            for t in range(self.max_new_tokens):
                raw.append(logits)
                nxt = self._pick(logits, streams, k)
                nxt = torch.where(done, self.tokenizer.pad_token_id, nxt)  # finished rows only pad
                tokens.append(nxt)
                done |= torch.isin(nxt, stop)
                if texts is not None:  # a row is finished once its text closes a code fence
                    for r, tok in enumerate(nxt.tolist()):
                        if not done[r]:
                            texts[r] += self.tokenizer.decode([tok])
                            if fence_closed(texts[r]):
                                done[r] = True
                if bool(done.all()) or t == self.max_new_tokens - 1:
                    break
                mask = torch.cat([mask, mask.new_ones(len(mask), 1)], dim=1)
                position = position + 1
                out = self.model(input_ids=nxt[:, None], attention_mask=mask, position_ids=position,
                                 past_key_values=cache, use_cache=True)
                logits = out.logits[:, -1]
        return torch.stack(tokens, dim=1), torch.stack(raw, dim=1)

    def _pick(self, logits: Any, streams: list[Any] | None = None, k: int = 1) -> Any:
        """One token per row from softmax(logits / temperature), restricted to the top-p nucleus.

        With ``streams`` (a generator per block of ``k`` rows) the draw is an exponential race,
        argmax_v p_v / E_v with E_v ~ Exp(1) from the row's own generator, which picks v with probability p_v.
        """
        import torch

        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            outside = sorted_p.cumsum(-1) - sorted_p > self.top_p  # keep the smallest prefix reaching top_p
            probs = probs.scatter(-1, order, sorted_p.masked_fill(outside, 0.0))
        if streams is None:
            return torch.multinomial(probs, 1).squeeze(-1)
        width = probs.shape[-1]
        race = torch.cat([torch.empty(k, width, device=probs.device).exponential_(generator=g) for g in streams])
        return (probs / race).argmax(dim=-1)
