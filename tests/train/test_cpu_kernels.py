"""`cpu_kernels`: pinning torch's, MKL's and oneDNN's CPU kernel paths (r2v_train.runtime.cpu.pin_cpu_kernels).

Each check runs in a fresh interpreter: torch fixes its kernels at the first op, and this process has run many."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # end to end: training in subprocesses with pinned kernels

from r2v_envs.errors import UnknownChoiceError
from r2v_train.chain.stages import ChainConfig, stage_key
from r2v_train.runtime.cpu import CPU_KERNELS

TRAIN = r"""
import hashlib, json, sys
from r2v_train.runtime.cpu import pin_cpu_kernels
pin_cpu_kernels(sys.argv[1])
import torch
torch.manual_seed(0); torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Embedding(64, 32), torch.nn.LayerNorm(32), torch.nn.SiLU(), torch.nn.Linear(32, 64))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x = torch.randint(0, 64, (16, 48))
for _ in range(5):
    torch.nn.functional.cross_entropy(model(x).flatten(0, 1).softmax(-1).log(), x.flatten()).backward()
    opt.step(); opt.zero_grad()
print(json.dumps({"md5": hashlib.md5(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest(),
                  "capability": torch.backends.cpu.get_cpu_capability(), "mkl": __import__("os").environ.get("MKL_CBWR")}))
"""


def _run(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in CPU_KERNELS["avx2"]}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**clean, **(env or {})}, timeout=300)


def _train(kernels: str) -> dict:
    out = _run(TRAIN, kernels)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_pinned_kernels_are_used_and_repeat_byte_for_byte():
    native, pinned, again = _train("native"), _train("avx2"), _train("avx2")
    if native["capability"] in ("DEFAULT", "AVX2") or not native["capability"].startswith("AVX"):
        pytest.skip(f"this CPU's native kernels are {native['capability']}: nothing to pin away from")
    assert pinned["capability"] == "AVX2" and pinned["mkl"] == "AVX2"
    assert pinned["md5"] == again["md5"]
    # the measured reason for the setting: the ISA path changes the trained floats (AVX512 here)
    assert pinned["md5"] != native["md5"]


def test_kernels_cannot_be_pinned_after_torch_chose_or_against_the_environment():
    late = _run("import torch; torch.ones(3).softmax(0)\nfrom r2v_train.runtime.cpu import pin_cpu_kernels\n"
                "pin_cpu_kernels('avx2')")
    import torch

    if torch.backends.cpu.get_cpu_capability() != "AVX2":  # else torch's own choice was already AVX2
        assert late.returncode != 0 and "KernelPinError" in late.stderr and "ran an op" in late.stderr
    clash = _run("from r2v_train.runtime.cpu import pin_cpu_kernels; pin_cpu_kernels('avx2')",
                 env={"MKL_CBWR": "COMPATIBLE"})
    assert clash.returncode != 0 and "KernelPinError" in clash.stderr and "MKL_CBWR" in clash.stderr


def test_the_setting_is_validated_and_pinned_runs_get_their_own_stage_keys():
    with pytest.raises(UnknownChoiceError):
        ChainConfig(cpu_kernels="avx7")
    native, pinned = ChainConfig(), ChainConfig(cpu_kernels="avx2")
    for stage in ("bc", "router_data"):  # a pinned run never resumes a native run's stages, nor the reverse
        assert stage_key(native, stage, ["u"]) != stage_key(pinned, stage, ["u"])
