"""benchmarks/gpu_scale.py runs end to end in smoke mode on the CPU: sampler vs generate(), a BC step and a
DPO + consistency step of the tiny shape, each with a time and a peak memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_scale_smoke_reports_every_phase(tmp_path):
    out = tmp_path / "scale.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_scale.py"), "--smoke", "--threads", "1",
                           "--json-out", str(out)], check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["device"].startswith("CPU")
    tiny = result["shapes"]["tiny"]
    for batch in (1, 2):
        s = tiny[f"sampler_b{batch}"]
        assert s["ratio"] > 0 and s["sampler_s"] > 0 and s["peak_gb_sampler"] > 0.05
    for phase in ("bc", "dpo"):
        assert tiny[phase]["step_s"] > 0 and tiny[phase]["peak_gb"] > 0.05
        assert tiny[phase]["gradient_checkpointing"] is False  # a 1M-parameter model keeps the fast path
    assert "sampler vs generate(), batch  2" in proc.stdout and "DPO + consistency" in proc.stdout
