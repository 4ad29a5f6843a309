"""K-candidate sampling with Hugging Face transformers (CPU or GPU), with per-token log-probs and entropies.

Log-probs and entropies come from the model's raw logits, i.e. the policy's own distribution before
temperature/top-p (``score="tempered"``: from the logits over the temperature, as TRL's GRPO scores a rollout). Each prompt is encoded once and its KV cache shared by its k samples. Each candidate is cut
at its first stop token: EOS or any EOS of the generation config (a chat model's end of turn), and, by the
``stop`` rule (:data:`STOPS`): ``"newline"`` (``style="line"``'s default, the SLM's one-line actions) a token
containing a newline; ``"fence"`` (``style="block"``'s default: multi-line actions,
:func:`r2v_agents.prompts.action_style`) the token that closes its first code fence; ``"reply"`` the token that
completes a chat model's first answer line (:func:`r2v_agents.grounding.reply_complete`: a preamble such as
``Thought:`` does not end it); ``"eos"`` nothing else. Padding after a finished sequence is masked out.
Prompts from :func:`r2v_agents.prompts.build_prompt` are rendered with :func:`r2v_agents.prompts.render_prompt`
first: a chat model (a tokenizer with a chat template) reads them as a chat turn, exactly as BC and DPO trained
it; the tiny model reads the plain text. With ``render=False`` the prompts are the model's input as given (a chat
agent renders its own turns and demonstrations). :meth:`sample_ids` continues token-id sequences instead (a
multi-turn rollout whose model reads its own earlier tokens verbatim).

This is the one local-generation loop of r2v: the SLM's K candidates, greedy teachers
(:class:`r2v_agents.teachers.HFTeacher`), chat agents (:class:`r2v_eval.model_agents.HFChatAgent`) and TRL's
``rollout_func`` (:class:`r2v_train.rl.grpo_env.EpisodeRollout`) all decode here.

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

import re
from collections.abc import Sequence
from typing import Any

from r2v_agents.backbones import load_backbone
from r2v_agents.grounding import reply_complete
from r2v_agents.policy import Candidate
from r2v_agents.prompts import check_style, parse_completion, render_prompt
from r2v_agents.samplers import ChunkedSampler, stream_seed
from r2v_envs.errors import UnknownChoiceError

STOPS = ("newline", "fence", "reply", "eos")
"""What ends a candidate besides EOS (the module doc)."""
SCORES = ("raw", "tempered")
"""Which distribution the log-probs and entropies describe: the raw logits', or the sampling temperature's."""


class TransformersSampler(ChunkedSampler):
    """Samples with a KV-cached decoding loop; prompts longer than ``max_prompt_tokens`` keep their end.

    With a ``seed`` (or per-prompt ``keys``), each prompt's k samples come from its own generator seeded by
    (seed, key, prompt text): the same prompt gives the same draws in any batch, on any worker layout (its
    scores agree to float rounding: a left-padded batch sums attention over longer rows). On CPU the draws are an
    exponential race per prompt and step, as in the published runs; on an accelerator, inverse-CDF lookups of
    uniforms drawn up front from the same per-prompt generators (other draws than the CPU's, same distribution)."""

    accepts_keys = True
    #: On CPU, draw and reduce as the published runs did (see :meth:`_decode`); tests set it False to run the
    #: accelerator's algorithm on the CPU.
    replay_cpu_draws = True

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int = 16, temperature: float = 1.0,
                 top_p: float = 1.0, max_prompt_tokens: int = 1024, batch_size: int = 8, device: str | None = None,
                 seed: int | None = None, style: str = "line", stop: str | None = None, render: bool = True,
                 score: str = "raw"):
        check_style(style)
        if score not in SCORES:
            raise UnknownChoiceError("log-prob score", score, SCORES)
        self.style, self.render, self.score = style, render, score
        self.stop = stop or ("fence" if style == "block" else "newline")
        if self.stop not in STOPS:
            raise UnknownChoiceError("stop rule", self.stop, STOPS)
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0: greedy decoding), got {temperature}")
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.max_prompt_tokens, self.batch_size, self.seed = max_prompt_tokens, batch_size, seed
        if device is not None:
            self.model.to(device)
        self.model.eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._stop_sets: dict[str, set[int]] = {}  # per stop rule, the token ids that end a candidate
        self._fences: Any = None  # token tables of block style's fence test (_fence_tables)

    @classmethod
    def from_pretrained(cls, path: str, device: str | None = None, **kwargs: Any) -> TransformersSampler:
        """A sampler over a model directory or a named backbone (``smollm2``: :mod:`r2v_agents.backbones`)."""

        model, tok = load_backbone(path)
        return cls(model, tok, device=device, **kwargs)

    def stop_ids(self, stop: str | None = None) -> set[int]:
        """The token ids that end a candidate by themselves under ``stop`` (default: the sampler's rule)."""
        stop = stop or self.stop
        if stop not in self._stop_sets:
            ids = set()
            if stop == "newline":  # other rules end at EOS / end of turn, or by the text (fence, reply)
                vocab = self.tokenizer.get_vocab()
                ids = {i for i in vocab.values() if "\n" in self.tokenizer.decode([i])}
            ids.add(self.tokenizer.eos_token_id)
            # a chat model may end its turn with another token than the tokenizer's EOS (a list in the config)
            extra = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
            ids.update(i for i in ([extra] if isinstance(extra, int) else extra or ()) if i is not None)
            self._stop_sets[stop] = ids
        return self._stop_sets[stop]

    def _sample_chunk(self, prompts: list[str], k: int, keys: list[int] | None = None, *,
                      max_new_tokens: int | None = None, stop: str | None = None) -> list[list[Candidate]]:
        """``max_new_tokens`` and ``stop`` override the sampler's for this call (a chat agent's code steps)."""
        import torch

        if self.temperature == 0 and k > 1:
            raise ValueError(f"temperature 0 decodes greedily: k={k} candidates would all be the same; use k=1")
        if stop is not None and stop not in STOPS:
            raise UnknownChoiceError("stop rule", stop, STOPS)

        # special tokens are in the rendered text already (chat) or not used (plain prompts of the tiny model)
        texts = [render_prompt(p, self.tokenizer, self.style) for p in prompts] if self.render else list(prompts)
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        device = next(self.model.parameters()).device
        keep = -self.max_prompt_tokens if self.max_prompt_tokens else 0  # None: the whole prompt
        ids, mask = enc["input_ids"][:, keep:], enc["attention_mask"][:, keep:]
        streams = None
        if self.seed is not None or keys is not None:  # one stream per prompt: batch make-up cannot change it
            # CPU: a generator per prompt drives the exponential race each step (the published runs' draws);
            # an accelerator: the same per-prompt generators, on the host, draw every step's uniform up front
            streams = [torch.Generator().manual_seed(
                stream_seed(self.seed, None if keys is None else keys[i], prompt)) for i, prompt in enumerate(prompts)]
        new, tok_lp, ent, ends = self._decode(ids.to(device), mask.to(device), k, streams,
                                              max_new_tokens or self.max_new_tokens, stop or self.stop)
        prompt_ids = [tuple(ids[p][mask[p].bool()].tolist()) for p in range(len(prompts))]  # left padding removed
        cands = self._candidates(new, tok_lp, ent, ends, [prompt_ids[row // k] for row in range(len(prompts) * k)])
        return [cands[p * k:(p + 1) * k] for p in range(len(prompts))]

    def sample_ids(self, seqs: Sequence[Sequence[int]], *, max_new_tokens: int | None = None) -> list[Candidate]:
        """One continuation of each token-id sequence, by the sampler's stop rule and draws (unseeded: the global
        generator), its ``token_ids`` and ``token_logprobs`` cut at the stop token. The sequences are the model's
        input as they are: not rendered, not truncated."""
        import torch

        pad = self.tokenizer.pad_token_id
        width = max(len(s) for s in seqs)
        ids = torch.tensor([[pad] * (width - len(s)) + list(s) for s in seqs])
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
        device = next(self.model.parameters()).device
        new, tok_lp, ent, ends = self._decode(ids.to(device), mask.to(device), 1, None, max_new_tokens)
        return self._candidates(new, tok_lp, ent, ends, [tuple(s) for s in seqs])

    def _candidates(self, new: Any, tok_lp: Any, ent: Any, ends: Any, prompt_ids: list[tuple[int, ...]]
                    ) -> list[Candidate]:
        """One :class:`Candidate` per decoded row of :meth:`_decode`, cut at the row's kept length; ``prompt_ids``:
        the ids each row was conditioned on."""
        new, tok_lp, ent, ends = new.tolist(), tok_lp.tolist(), ent.tolist(), ends.tolist()
        eos, out = self.tokenizer.eos_token_id, []
        for row, end in enumerate(ends):
            toks, lps = new[row][:end], tuple(tok_lp[row][:end])
            text = self.tokenizer.decode([t for t in toks if t != eos], skip_special_tokens=True)
            out.append(Candidate(action=parse_completion(text, self.style), logprob=sum(lps), token_logprobs=lps,
                                 token_entropies=tuple(ent[row][:end]), token_ids=tuple(toks),
                                 prompt_token_ids=prompt_ids[row], text=text))
        return out

    def _decode(self, ids: Any, mask: Any, k: int, streams: list[Any] | None = None, budget: int | None = None,
                stop: str | None = None) -> tuple[Any, Any, Any, Any]:
        """Sample ``k`` continuations of each left-padded prompt: token ids, their log-probs and the entropies of
        the raw next-token distributions (each (B k, T), on the host) and each row's kept length (B k,).

        The prompt is encoded once and its KV cache repeated k times (``generate(num_return_sequences=k)``
        encodes each prompt k times, which dominated sampling on CPU); a row ends at its first stop token (EOS
        or a newline; block style: EOS, or the token that closes its first code fence, tracked on token tables
        without decoding), and decoding stops once every row has ended. ``streams`` (one ``torch.Generator``
        per prompt) make each prompt's draws its own. ``budget``: new tokens at most (default ``max_new_tokens``);
        ``stop``: the stop rule (default the sampler's).

        On CPU the raw logits of every step are kept and reduced together at the end, as the published runs
        did (a per-step reduction can move the last bit of an entropy), and the stop test reads ``done`` each
        step. On an accelerator each step is reduced on the device to (B k,) numbers, the draws are inverse-CDF
        lookups of uniforms taken up front from the per-prompt streams, and the stop test reads a flag copied
        asynchronously, so the host never waits for the device inside the loop.
        """
        import torch

        budget, stop = budget or self.max_new_tokens, stop or self.stop
        exact = ids.device.type == "cpu" and self.replay_cpu_draws
        scale = self.temperature if self.score == "tempered" and self.temperature > 0 else 1.0
        cuda = ids.device.type == "cuda"
        position = (mask.cumsum(-1) - 1).clamp(min=0)
        uniforms = None
        if streams is not None and not exact:  # (B k, T) uniforms in (0, 1], one host draw per prompt
            uniforms = 1.0 - torch.cat([torch.rand(k, budget, generator=g, dtype=torch.float64)
                                        for g in streams]).to(ids.device, non_blocking=True)
        with torch.no_grad():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=position, use_cache=True,
                             logits_to_keep=1)
            cache = out.past_key_values
            cache.batch_repeat_interleave(k)
            mask = mask.repeat_interleave(k, dim=0)
            position = position[:, -1:].repeat_interleave(k, dim=0)
            logits = out.logits[:, -1].repeat_interleave(k, dim=0)
            rows, width = logits.shape
            is_stop = self._stop_table(width, ids.device, stop)
            fences = self._fence_tables(width, ids.device) if stop == "fence" else None
            state = (torch.zeros(rows, dtype=torch.long, device=ids.device),) * 2  # closed fences, open backticks
            tokens, raw, tok_lp, ent = [], [], [], []
            done = torch.zeros(rows, dtype=torch.bool, device=ids.device)
            ends = torch.full((rows,), budget, dtype=torch.long, device=ids.device)
            watch = _DoneWatch() if cuda else None
            for t in range(budget):
                if exact:
                    raw.append(logits)
                    nxt = self._pick(logits, streams, k)
                else:
                    logp = torch.log_softmax(logits.float() / scale, dim=-1)
                    nxt = self._pick(logits, None if uniforms is None else uniforms[:, t], k)
                nxt = torch.where(done, self.tokenizer.pad_token_id, nxt)  # finished rows only pad
                if not exact:
                    tok_lp.append(logp.gather(-1, nxt[:, None])[:, 0])
                    ent.append(-(logp.exp() * logp).nan_to_num().sum(-1))
                tokens.append(nxt)
                live = ~done
                done = done | is_stop[nxt]
                if fences is not None:  # a row is finished once its text closes a code fence
                    state, closed = _advance_fences(fences, state, nxt, live & ~done)
                    done = done | (live & closed)
                if stop == "reply":  # a row ends once its text holds a complete answer line
                    done = done | self._replied(tokens, live & ~done)
                ends = torch.where(live & done, t + 1, ends)
                if t == budget - 1:
                    break
                if not cuda:
                    if bool(done.all()):
                        break
                elif watch.all_done(done):
                    break
                mask = torch.cat([mask, mask.new_ones(len(mask), 1)], dim=1)
                position = position + 1
                out = self.model(input_ids=nxt[:, None], attention_mask=mask, position_ids=position,
                                 past_key_values=cache, use_cache=True)
                logits = out.logits[:, -1]
            new = torch.stack(tokens, dim=1)
            ends = ends.clamp(max=new.shape[1])
            if exact:
                logp = torch.log_softmax(torch.stack(raw, dim=1).float() / scale, dim=-1)
                return (new, logp.gather(-1, new.unsqueeze(-1)).squeeze(-1),
                        -(logp.exp() * logp).nan_to_num().sum(-1), ends)
            return new.cpu(), torch.stack(tok_lp, dim=1).cpu(), torch.stack(ent, dim=1).cpu(), ends.cpu()

    def _stop_table(self, width: int, device: Any, stop: str | None = None) -> Any:
        """(V,) bool: which token ids end a candidate (:meth:`stop_ids`)."""
        import torch

        table = torch.zeros(width, dtype=torch.bool)
        table[[i for i in self.stop_ids(stop) if 0 <= i < width]] = True
        return table.to(device)

    def _replied(self, tokens: list[Any], rows: Any) -> Any:
        """(B k,) bool: which of ``rows`` (a mask) hold a complete answer line in the tokens so far (the ``reply``
        rule; it decodes each live row every step, as a ``generate`` stopping criterion on text would)."""
        import torch

        out = torch.zeros_like(rows)
        which = rows.nonzero()[:, 0].tolist()
        if which:
            seqs = torch.stack(tokens, dim=1)[which].tolist()
            texts = self.tokenizer.batch_decode(seqs, skip_special_tokens=True)
            out[which] = torch.tensor([reply_complete(t) for t in texts], dtype=torch.bool, device=rows.device)
        return out

    def _fence_tables(self, width: int, device: Any) -> Any:
        """Per token id, the code-fence facts of its decoded text: (all backticks, its length, leading backticks,
        fences closed inside it, trailing backticks), as (5, V) longs; built once per sampler by decoding every
        id, as the per-token decode this replaces did."""
        import torch

        if self._fences is None or self._fences.shape[1] != width:
            facts = [_backtick_facts(self._piece(i)) for i in range(width)]
            self._fences = torch.tensor(facts, dtype=torch.long).T.contiguous()
        return self._fences.to(device)

    def _piece(self, token: int) -> str:
        try:
            return self.tokenizer.decode([token])
        except (IndexError, KeyError, OverflowError, TypeError):  # an id past the tokenizer's table (padded vocab)
            return ""

    def _pick(self, logits: Any, streams: Any = None, k: int = 1) -> Any:
        """One token per row from softmax(logits / temperature), restricted to the top-p nucleus; at temperature 0
        the most likely token (greedy decoding: the policy's mode, what `slm:RUN?greedy=1` evaluates).

        ``streams``: a list of generators, one per block of ``k`` rows (CPU): the draw is an exponential race,
        argmax_v p_v / E_v with E_v ~ Exp(1) from the row's own generator, which picks v with probability p_v.
        Or a (rows,) tensor of uniforms u in (0, 1] (an accelerator): the first v whose cumulative probability
        reaches u times the total, one batched lookup. None: ``torch.multinomial`` on the global generator.
        """
        import torch

        if self.temperature == 0:
            return logits.float().argmax(dim=-1)
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            outside = sorted_p.cumsum(-1) - sorted_p > self.top_p  # keep the smallest prefix reaching top_p
            probs = probs.scatter(-1, order, sorted_p.masked_fill(outside, 0.0))
        if streams is None:
            return torch.multinomial(probs, 1).squeeze(-1)
        if isinstance(streams, torch.Tensor):
            cdf = probs.cumsum(-1)
            target = (streams.to(cdf.dtype) * cdf[:, -1])[:, None].contiguous()
            return torch.searchsorted(cdf, target)[:, 0].clamp(max=probs.shape[-1] - 1)
        width = probs.shape[-1]
        race = torch.cat([torch.empty(k, width, device=probs.device).exponential_(generator=g) for g in streams])
        return (probs / race).argmax(dim=-1)


def _backtick_facts(text: str) -> tuple[int, int, int, int, int]:
    """(all backticks, length, leading backticks, fences closed by its inner backtick runs, trailing backticks)
    of one token's text: enough to count ``FENCE`` in a concatenation of such texts without the texts.

    Example:
        >>> _backtick_facts("``"), _backtick_facts("`x```y``"), _backtick_facts("abc")
        ((1, 2, 2, 0, 0), (0, 8, 1, 1, 2), (0, 3, 0, 0, 0))
    """
    if set(text) <= {"`"}:
        return 1, len(text), len(text), 0, 0
    lead = len(text) - len(text.lstrip("`"))
    trail = len(text) - len(text.rstrip("`"))
    inner = text[lead:len(text) - trail]
    closed = sum(len(run) // 3 for run in re.findall(r"`+", inner))
    return 0, len(text), lead, closed, trail


def _advance_fences(tables: Any, state: tuple[Any, Any], tokens: Any, live: Any) -> tuple[tuple[Any, Any], Any]:
    """Append each live row's token to its text's fence count: ``state`` is (fences closed, backticks in the
    open run at the end); returns the new state and whether each row's text now holds two fences
    (:func:`r2v_agents.prompts.fence_closed`: ``text.count(FENCE) >= 2``, FENCE being three backticks)."""
    import torch

    closed, run = state
    whole, length, lead, inner, trail = tables[:, tokens]
    grown = torch.where(whole.bool(), closed, closed + (run + lead) // 3 + inner)
    run_after = torch.where(whole.bool(), run + length, trail)
    closed, run = torch.where(live, grown, closed), torch.where(live, run_after, run)
    return (closed, run), closed + run // 3 >= 2


class _DoneWatch:
    """Whether every row had ended at some step the CUDA device has finished, without waiting for the device:
    each step queues a non-blocking copy of ``done.all()`` to pinned host memory and an event after it, and
    reads only the copies whose events have completed (the loop may run a step or two past the end; the rows
    that ended only pad)."""

    def __init__(self) -> None:
        self.flags: list[tuple[Any, Any]] = []
        self.seen = 0

    def all_done(self, done: Any) -> bool:
        import torch

        event = torch.cuda.Event()
        self.flags.append((done.all().to("cpu", non_blocking=True), event))
        event.record()
        while self.seen < len(self.flags) and self.flags[self.seen][1].query():
            if bool(self.flags[self.seen][0]):
                return True
            self.seen += 1
        return False
