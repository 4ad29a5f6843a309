"""The documented ``accelerate launch`` commands of the BC and DPO stages, run for real on the CPU path, and
the shipped accelerate/DeepSpeed configs parse."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end to end: BC and DPO through accelerate launch in subprocesses

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("accelerate")

from r2v_agents.tiny import EOS, build_tiny_model, env_corpus, train_tokenizer  # noqa: E402
from r2v_train.chain.saving import DONE_FILE  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "r2v_train" / "configs" / "accelerate"


def test_accelerate_configs_parse():
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    seen = {}
    for name in ("ddp_1gpu", "ddp_4gpu", "zero3_1gpu", "zero3_4gpu"):
        cfg = load_config_from_file(str(CONFIGS / f"{name}.yaml"))
        seen[name] = (cfg.distributed_type, cfg.num_processes)
        if name.startswith("zero3"):
            ds = json.loads((ROOT / cfg.deepspeed_config["deepspeed_config_file"]).read_text())
            assert ds["zero_optimization"]["stage"] == 3
            assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"]  # rank 0 saves whole weights
    assert seen == {"ddp_1gpu": (DistributedType.NO, 1), "ddp_4gpu": (DistributedType.MULTI_GPU, 4),
                    "zero3_1gpu": (DistributedType.DEEPSPEED, 1), "zero3_4gpu": (DistributedType.DEEPSPEED, 4)}


def accelerate(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("accelerate")
    cmd = [exe] if exe else [sys.executable, "-m", "accelerate.commands.accelerate_cli"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([*cmd, "launch", "--cpu", "--num_processes", "1", "--num_machines", "1",
                           "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "r2v_train.chain.launch", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_bc_then_dpo_through_accelerate_launch(tmp_path):
    torch.manual_seed(0)
    texts = env_corpus("R2V/Scripted-v0", task_ids=[f"scripted-{i}" for i in range(4)], seeds=(0,),
                       perturbations=None)
    tok = train_tokenizer(texts, vocab_size=400)
    build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                     intermediate_size=64).save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    bc, pairs = [], []
    for text in texts:
        prompt, action = text[: -len(EOS)].rsplit("\nAction:", 1)
        bc.append({"prompt": prompt + "\nAction:", "completion": action})
        pairs.append({"prompt": prompt + "\nAction:", "chosen": action, "rejected": " look",
                      "prompt_alt": prompt + "\nAction:", "candidates": [" go west", action]})
    (tmp_path / "bc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bc))
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))

    done = accelerate("bc", "--model", str(tmp_path / "base"), "--data", str(tmp_path / "bc.jsonl"),
                      "--output-dir", str(tmp_path / "bc"), "--cfg.max-steps", "2",
                      "--cfg.batch-size", "4", "--cfg.learning-rate", "1e-3")
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads((tmp_path / "bc" / "model" / DONE_FILE).read_text())
    assert info["stage"] == "bc" and info["global_step"] == 2

    done = accelerate("dpo", "--model", str(tmp_path / "bc" / "model"), "--data", str(tmp_path / "pairs.jsonl"),
                      "--output-dir", str(tmp_path / "dpo"), "--cfg.max-steps", "2", "--cfg.batch-size",
                      "4", "--cfg.learning-rate", "1e-3")
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads((tmp_path / "dpo" / "model" / DONE_FILE).read_text())
    assert info["stage"] == "dpo" and info["global_step"] == 2
    assert any("consistency/jsd" in h for h in info["log_history"])
