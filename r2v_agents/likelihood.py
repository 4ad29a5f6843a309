"""Choosing an action by likelihood: score every admissible action by a causal LM's log-probability of saying
exactly that action after the prompt, and play the best (the classic language-model baseline for text games).

The score of action ``a`` is ``sum_j log p(a_j | prompt, a_<j)`` over the action's tokens followed by the end
token (the chat template's end of turn, else EOS): the probability that the model's whole reply is ``a``, so a
prefix of a longer action ("go" vs "go south") is not favoured for being short.

One forward pass per decision: the prompt and every action are packed into one sequence, each action placed
right after the prompt (its position ids continue the prompt's) and masked so that it sees the prompt and its
own earlier tokens only (a 4-D attention mask). The cost is the prompt plus the actions' tokens, not one
prompt per action; the scores equal those of scoring each ``prompt + action`` on its own (tested).

Example:
    >>> pack_layout(prompt_len=2, action_lens=[2, 1])
    ([0, 1, 2, 3, 2], [[1, 2], [1]], [[2, 3], [4]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def end_token_id(tokenizer: Any) -> int | None:
    """The token that ends a reply: the chat template's end of turn when the tokenizer has one, else EOS."""
    for tok in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        tid = tokenizer.convert_tokens_to_ids(tok) if getattr(tokenizer, "chat_template", None) else None
        if isinstance(tid, int) and tid != getattr(tokenizer, "unk_token_id", None):
            return tid
    return tokenizer.eos_token_id


def pack_layout(prompt_len: int, action_lens: Sequence[int]) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """``(position_ids, predictor_rows, target_rows)`` of the packed sequence: for action ``i``, the logits of
    row ``predictor_rows[i][j]`` predict the token at row ``target_rows[i][j]``."""
    positions = list(range(prompt_len))
    predictors, targets = [], []
    start = prompt_len
    for n in action_lens:
        positions += list(range(prompt_len, prompt_len + n))
        rows = list(range(start, start + n))
        predictors.append([prompt_len - 1] + rows[:-1])
        targets.append(rows)
        start += n
    return positions, predictors, targets


def score_actions(model: Any, tokenizer: Any, prompt: str, actions: Sequence[str]) -> list[float]:
    """``log p(action + end | prompt)`` of each action (module doc), in one forward pass of ``model``."""
    import torch

    if not actions:
        return []
    end = end_token_id(tokenizer)
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if not p_ids:
        raise ValueError("the prompt must not be empty")
    a_ids = [tokenizer(a, add_special_tokens=False)["input_ids"] + ([end] if end is not None else [])
             for a in actions]
    positions, predictors, targets = pack_layout(len(p_ids), [len(a) for a in a_ids])
    ids = p_ids + [t for a in a_ids for t in a]
    n = len(ids)
    allowed = torch.zeros(n, n, dtype=torch.bool)
    allowed[:len(p_ids), :len(p_ids)] = torch.tril(torch.ones(len(p_ids), len(p_ids), dtype=torch.bool))
    for rows in targets:
        lo, hi = rows[0], rows[-1] + 1
        allowed[lo:hi, :len(p_ids)] = True
        allowed[lo:hi, lo:hi] = torch.tril(torch.ones(hi - lo, hi - lo, dtype=torch.bool))
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(n, n, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)[None, None]
    device = model.device
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids], device=device), attention_mask=mask.to(device),
                       position_ids=torch.tensor([positions], device=device)).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return [float(sum(logp[r, ids[t]] for r, t in zip(pr, tr))) for pr, tr in zip(predictors, targets)]


def best_action(actions: Sequence[str], scores: Sequence[float]) -> str:
    """The highest-scoring action (the first listed on ties, so a choice never depends on float noise order).

    Example:
        >>> best_action(["look", "go south", "inventory"], [-3.0, -1.5, -1.5])
        'go south'
    """
    best = max(range(len(actions)), key=lambda i: (scores[i], -i))
    return actions[best]
