"""The DPO stage (6/8 of the chain): DPO (Eq. 4) plus the JSD consistency term (Eq. 5-6), on TRL's DPOTrainer.

Loss per batch: L_DPO + lambda_cons * mean_i JSD(pi(.|x_i^(z)) || pi(.|x_i^(z'))), with the BC model frozen as
the DPO reference (pass ``ref_model=copy.deepcopy(bc_model)``: with ``ref_model=None`` TRL 1.16 reloads the
reference from ``config._name_or_path``, which fails for a model built in memory).

The action distribution pi(.|x). An SLM's action space is free text, so we restrict pi to a candidate set A_i
shared by both views of state i: the pair's chosen and rejected actions plus, optionally, more candidates (a
``candidates`` list column: the K BC samples or the admissible commands). pi(a|x) for a in A_i is the softmax
over A_i of the sequence log-probabilities log pi_theta(a + EOS | x) (the same quantity DPO's ratios use). This
is a proper categorical distribution over whole actions, so Eq. 6 and Lemma 1 (TV <= sqrt(2 JSD)) apply to it
as written; next-token distributions over the action span would instead compare token distributions
conditioned on a teacher-forced prefix, which is not the policy's action distribution.

Data: DPO's ``prompt`` / ``chosen`` / ``rejected`` text columns, plus ``prompt_alt`` (the prompt rendered from
another perturbation seed z' of the same latent state; None or "" where a row has none) and optional
``candidates``. The columns are tokenised in ``_prepare_dataset`` (after TRL's own tokenisation), kept through
``remove_unused_columns`` by extending the signature columns, and collated into extra ``cons_*`` tensors that
``compute_loss`` takes out before TRL's loss sees the batch. The JSD is logged as ``consistency/jsd`` (also at
``consistency_coef = 0``, computed without gradient, for the ablation of Table 4).

The trainer subclasses live at module level, as TRL's own do, so pickle (``training_args.bin``) and reprs find
them; the module therefore imports torch and TRL at its top: import it where training starts.

Example (not run here: it trains; see tests/train/chain/test_dpo_consistency.py):
    >>> args = ConsistencyDPOConfig(output_dir="runs/dpo", consistency_coef=0.2)  # doctest: +SKIP
    >>> trainer = ConsistencyDPOTrainer(model=bc_model, ref_model=copy.deepcopy(bc_model), args=args,
    ...                                 train_dataset=pairs, processing_class=tokenizer)  # doctest: +SKIP
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from trl import DPOConfig, DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference
from trl.trainer.utils import pad

from r2v_train.chain.saving import bf16_default, cuda_available
from r2v_train.router.losses import jsd

VIEW_COLUMN, CANDIDATES_COLUMN = "prompt_alt", "candidates"
_CONS_KEYS = ("cons_input_ids", "cons_attention_mask", "cons_completion_mask", "cons_pair", "cons_cand")
__all__ = ["ConsistencyDPOConfig", "ConsistencyDPOTrainer", "ConsistencyCollator", "VIEW_COLUMN", "CANDIDATES_COLUMN"]


@dataclass
class ConsistencyDPOConfig(DPOConfig):
    """``DPOConfig`` plus the consistency weight lambda_cons (Eq. 5) and CPU-safe precision defaults."""

    consistency_coef: float = field(default=0.2, metadata={
        "help": "lambda_cons: weight of the JSD between the action distributions of paired views (Table 4)"})
    view_column: str = field(default=VIEW_COLUMN, metadata={
        "help": "column holding the second perturbation view of each prompt"})
    candidates_column: str = field(default=CANDIDATES_COLUMN, metadata={
        "help": "optional column of extra candidate actions shared by both views"})
    gradient_checkpointing: bool = field(default=False, metadata={
        "help": "recompute activations in backward (TRL defaults to True, which only pays off on big GPUs)"})
    bf16: bool | None = field(default=None, metadata={
        "help": "bf16 mixed precision; None: on only where CUDA supports bf16 (TRL's True fails on CPU)"})

    def __post_init__(self):
        if self.consistency_coef < 0:
            raise ValueError(f"consistency_coef must be >= 0; got {self.consistency_coef}")
        if self.bf16 is None:
            self.bf16 = bf16_default(None)
        # `accelerate launch --cpu` on a GPU machine: the model stays on the CPU, so must the batches (else the
        # Trainer sends them to CUDA: "Expected all tensors to be on the same device")
        self.use_cpu = self.use_cpu or not cuda_available()
        super().__post_init__()


@dataclass
class ConsistencyCollator(DataCollatorForPreference):
    """TRL's preference collator plus the candidate sequences of both views (``cons_*`` tensors).

    Sequences are ordered [view 1 of every (pair, candidate); view 2 of the same], and truncated from the left
    (keeping the action) when longer than ``max_length``.
    """

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        out = super().torch_call(examples)
        views: tuple[list[list[int]], list[list[int]]] = ([], [])
        action_len: list[int] = []
        pair, cand = [], []
        for ex in (ex for ex in examples if ex.get("prompt_alt_ids")):
            index = len(set(pair))
            cands = [ex["chosen_ids"], ex["rejected_ids"]] + list(ex.get("candidate_ids") or [])
            for k, c in enumerate(cands):
                for view, prompt in zip(views, (ex["prompt_ids"], ex["prompt_alt_ids"])):
                    view.append(self._fit(list(prompt) + list(c)))
                action_len.append(len(c))
                pair.append(index)
                cand.append(k)
        if not pair:
            return out
        seqs = views[0] + views[1]
        masks = [[0] * (len(s) - min(n, len(s))) + [1] * min(n, len(s)) for s, n in
                 zip(seqs, action_len + action_len)]
        out["cons_input_ids"] = pad([torch.tensor(s) for s in seqs], padding_value=self.pad_token_id,
                                    padding_side="right", pad_to_multiple_of=self.pad_to_multiple_of)
        out["cons_attention_mask"] = pad([torch.ones(len(s), dtype=torch.long) for s in seqs], padding_value=0,
                                         padding_side="right", pad_to_multiple_of=self.pad_to_multiple_of)
        out["cons_completion_mask"] = pad([torch.tensor(m, dtype=torch.long) for m in masks], padding_value=0,
                                          padding_side="right", pad_to_multiple_of=self.pad_to_multiple_of)
        out["cons_pair"], out["cons_cand"] = torch.tensor(pair), torch.tensor(cand)
        return out

    def _fit(self, ids: list[int]) -> list[int]:
        return ids if self.max_length is None or len(ids) <= self.max_length else ids[-self.max_length:]


class ConsistencyDPOTrainer(DPOTrainer):
    """``DPOTrainer`` whose loss adds ``consistency_coef`` * JSD over paired perturbation views (Eq. 5)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        collator = self.data_collator
        if type(collator) is DataCollatorForPreference:  # TRL's default: extend it with the view tensors
            self.data_collator = ConsistencyCollator(
                pad_token_id=collator.pad_token_id, max_length=collator.max_length,
                truncation_mode=collator.truncation_mode, pad_to_multiple_of=collator.pad_to_multiple_of)

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        dataset = super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        first = next(iter(dataset))
        view_col, cand_col = args.view_column, args.candidates_column
        if view_col not in first:
            return dataset
        if not isinstance(first["prompt"], str):
            raise ValueError("consistency views support plain-text prompts, not conversational ones")
        tok = getattr(processing_class, "tokenizer", processing_class)
        eos = tok.eos_token

        def tokenize_views(example):
            alt = example.get(view_col)
            # no special tokens added, as TRL's own DPO tokenisation (a chat prompt holds its own)
            out = {"prompt_alt_ids": tok(alt, add_special_tokens=False)["input_ids"] if alt else [],
                   "candidate_ids": []}
            if alt and example.get(cand_col):
                # Candidate tokens as they follow the prompt (view 1); view 2 reuses the same ids, so both
                # views score exactly the same actions. The pair's own actions are already in chosen/rejected.
                prompt_ids = tok(example["prompt"], add_special_tokens=False)["input_ids"]
                known = {example["chosen"], example["rejected"]}
                for c in example[cand_col]:
                    text = c if c.endswith(eos) else c + eos
                    if text in known:
                        continue
                    known.add(text)
                    full = tok(example["prompt"] + text, add_special_tokens=False)["input_ids"]
                    start = _common_prefix(prompt_ids, full)
                    out["candidate_ids"].append(full[start:])
            return out

        kwargs = {"desc": f"Tokenizing consistency views of {dataset_name}"} if hasattr(dataset, "num_rows") else {}
        return dataset.map(tokenize_views, **kwargs)

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        for col in ("prompt_alt_ids", "candidate_ids"):
            if col not in self._signature_columns:
                self._signature_columns.append(col)

    def compute_ref_log_probs(self, model, inputs):
        return super().compute_ref_log_probs(model, {k: v for k, v in inputs.items() if k not in _CONS_KEYS})

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        cons = {k: inputs[k] for k in _CONS_KEYS if k in inputs}
        inputs = {k: v for k, v in inputs.items() if k not in _CONS_KEYS}
        out = super().compute_loss(model, inputs, return_outputs=return_outputs,
                                   num_items_in_batch=num_items_in_batch)
        if not cons:
            return out
        loss = out[0] if return_outputs else out
        coef = self.args.consistency_coef
        with nullcontext() if coef > 0 else torch.no_grad():
            value = self.consistency_jsd(model, cons)
        mode = "train" if self.model.training else "eval"
        gathered = self.accelerator.gather_for_metrics(value.detach())
        self._metrics[mode]["consistency/jsd"].append(gathered.mean().item())
        if coef > 0:
            loss = loss + coef * value
        return (loss, out[1]) if return_outputs else loss

    def consistency_jsd(self, model, cons: dict[str, Any]) -> Any:
        """Mean over pairs of JSD between the candidate-set action distributions of the two views."""
        ids, completion = cons["cons_input_ids"], cons["cons_completion_mask"]
        labels = ids.masked_fill(completion == 0, -100)
        outputs = model(input_ids=ids, attention_mask=cons["cons_attention_mask"], labels=labels,
                        use_cache=False, fused_lm_head=True)
        logps = outputs.log_probs[:, -(ids.size(1) - 1):].sum(dim=1)  # log pi(a + EOS | x), one per sequence
        half = logps.size(0) // 2
        pair, cand = cons["cons_pair"], cons["cons_cand"]
        shape = (int(pair.max()) + 1, int(cand.max()) + 1)

        def distribution(seq_logps):
            table = seq_logps.new_full(shape, float("-inf")).index_put((pair, cand), seq_logps)
            return torch.log_softmax(table, dim=-1)

        return jsd(distribution(logps[:half]), distribution(logps[half:])).mean()


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
