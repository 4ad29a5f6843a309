"""What pinning the CPU kernels costs, and what it changes: BC-like AdamW steps of the default's tiny Qwen2.

Each round trains the same model from the same seed on the same batch for ``--steps`` steps in a fresh
interpreter, once with ``cpu_kernels: native`` (torch, MKL and oneDNN pick by this CPU's ISA) and once with
``cpu_kernels: avx2`` (r2v_train.runtime.cpu.pin_cpu_kernels); rounds alternate the two so machine load hits both
alike. It prints each side's seconds per step, the ratio, torch's CPU capability and an md5 of the trained weights:
equal digests within a side show the run is deterministic, different digests across sides show that the ISA
path changes the floats (on a machine whose native ISA is AVX2 the two sides are the same kernels).

    python benchmarks/cpu_kernels.py --steps 20 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import hashlib, json, sys, time
from r2v_train.runtime.cpu import pin_cpu_kernels
pin_cpu_kernels(sys.argv[1])
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
torch.manual_seed(0); torch.set_num_threads(int(sys.argv[3]))
cfg = Qwen2Config(vocab_size=2048, hidden_size=128, intermediate_size=384, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
model = Qwen2ForCausalLM(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
x = torch.randint(0, 2048, (8, 256))
model(input_ids=x[:1, :8], labels=x[:1, :8]).loss.backward(); opt.zero_grad()  # warm-up, not timed
t0 = time.perf_counter()
for _ in range(int(sys.argv[2])):
    model(input_ids=x, labels=x).loss.backward(); opt.step(); opt.zero_grad()
dt = time.perf_counter() - t0
digest = hashlib.md5(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
print(json.dumps({"s": dt, "md5": digest, "capability": torch.backends.cpu.get_cpu_capability()}))
"""


def one(kernels: str, steps: int, threads: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, kernels, str(steps), str(threads)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"native": [], "avx2": []}
    for r in range(args.rounds):
        for kernels in (("native", "avx2") if r % 2 == 0 else ("avx2", "native")):
            runs[kernels].append(one(kernels, args.steps, args.threads))
            print(f"round {r + 1} {kernels}: {runs[kernels][-1]}", file=sys.stderr)
    per_step = {k: statistics.median(x["s"] for x in v) / args.steps for k, v in runs.items()}
    for k, v in runs.items():
        print(f"{k:6s} capability {v[0]['capability']}: {per_step[k]:.3f} s/step (median of {len(v)}), "
              f"weights md5 {sorted({x['md5'][:12] for x in v})}")
    print(f"avx2 / native time per step: {per_step['avx2'] / per_step['native']:.2f}x; same weights across "
          f"sides: {runs['native'][0]['md5'] == runs['avx2'][0]['md5']}")


if __name__ == "__main__":
    main()
