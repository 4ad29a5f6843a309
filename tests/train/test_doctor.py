"""``r2v doctor``: each section reports what this host really offers, and the command stays light and fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from r2v_envs.sandbox import Sandbox, available_isolations
from r2v_train import doctor


def test_sandbox_section_is_the_level_the_code_envs_pick():
    sb = doctor.sandbox_section()
    assert sb["available"] == available_isolations() and sb["level"] == available_isolations()[0]
    assert set(sb["contains"]) == set(Sandbox().guarantees)
    assert set(sb["contains"]) | set(sb["lacks"]) == doctor.ALL_GUARANTEES
    assert not set(sb["contains"]) & set(sb["lacks"])


def test_cache_section_measures_the_cache_it_is_pointed_at(tmp_path, monkeypatch):
    monkeypatch.setenv("R2V_CACHE", str(tmp_path / "cache"))
    empty = doctor.cache_section()
    assert empty["root"] == str(tmp_path / "cache") and empty["from_env"] and not empty["exists"]
    assert empty["bytes"] == 0 and empty["free_bytes"] > 0
    (tmp_path / "cache" / "textworld" / "g1").mkdir(parents=True)
    (tmp_path / "cache" / "textworld" / "g1" / "game.z8").write_bytes(b"x" * 1000)
    (tmp_path / "cache" / "textworld" / "g1" / "game.json").write_bytes(b"y" * 24)
    (tmp_path / "cache" / "humaneval").mkdir()
    (tmp_path / "cache" / "humaneval" / "t.pkl").write_bytes(b"z" * 5)
    full = doctor.cache_section()
    assert full["kinds"] == {"humaneval": {"bytes": 5, "files": 1}, "textworld": {"bytes": 1024, "files": 2}}
    assert (full["bytes"], full["files"]) == (1029, 3)
    assert "1.0 KB" in doctor.format_report({**doctor.gather(), "cache": full})


def test_extras_report_missing_distributions_from_the_real_requirements():
    extras = doctor.extras_section()
    assert {"textworld", "humaneval", "train", "vllm", "docker", "test"} <= set(extras)
    assert extras["test"]["installed"] and "pytest" in extras["test"]["requires"]  # we are running under it
    fake = doctor.extras_status(['pytest>=8; extra == "test"', 'no-such-dist-r2v>=1; extra == "ghost"', "numpy"])
    assert fake == {"test": {"requires": ["pytest"], "missing": [], "installed": True},
                    "ghost": {"requires": ["no-such-dist-r2v"], "missing": ["no-such-dist-r2v"], "installed": False}}


def test_humaneval_source_follows_the_override(tmp_path, monkeypatch):
    data = tmp_path / "HumanEvalPlus.jsonl.gz"
    monkeypatch.setenv("HUMANEVAL_OVERRIDE_PATH", str(data))
    he = doctor.data_section()["humaneval"]
    assert he["source"] == "file" and not he["exists"] and "(MISSING)" in doctor.format_report(
        {**doctor.gather(), "data": doctor.data_section()})
    data.write_bytes(b"")
    he = doctor.data_section()["humaneval"]
    assert he["source"] == "file" and he["exists"] and he["override"] == str(data)
    monkeypatch.delenv("HUMANEVAL_OVERRIDE_PATH")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert doctor.data_section()["humaneval"]["source"] == "evalplus-download"
    (tmp_path / "xdg" / "evalplus").mkdir(parents=True)
    (tmp_path / "xdg" / "evalplus" / "HumanEvalPlus-v0.1.10.jsonl").write_text("{}")
    assert doctor.data_section()["humaneval"]["source"] == "evalplus-cache"


def test_cpu_threads_follow_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert doctor.cpu_section()["torch_threads"] == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert doctor.cpu_section()["torch_threads"] == len(os.sched_getaffinity(0))


@pytest.mark.timeout(60)
def test_cli_prints_json_fast_without_heavy_imports(tmp_path):
    code = ("import sys, time; t = time.monotonic(); from r2v_train.cli import main; main(['doctor', '--json']); "
            "heavy = [m for m in ('torch', 'transformers', 'evalplus', 'textworld', 'alfworld', 'vllm', 'ray') "
            "if m in sys.modules]; print('HEAVY', heavy, file=sys.stderr)")
    env = {**os.environ, "R2V_CACHE": str(tmp_path)}
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    elapsed = time.monotonic() - start
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert sorted(report) == sorted(doctor.SECTIONS) and report["cache"]["root"] == str(tmp_path)
    assert "HEAVY []" in res.stderr
    # the sections themselves (probes, walks, a Docker ping) take well under the 2 s budget on an idle
    # machine; the bound here leaves room for a shared CI box
    assert report["python"]["doctor_s"] < 5.0, report["python"]["doctor_s"]
    assert elapsed < 30, elapsed
