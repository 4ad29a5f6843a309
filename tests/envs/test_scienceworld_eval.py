"""R2V/ScienceWorld-v0 through r2v's tools: `r2v eval` with the reference agents, `r2v view`, `r2v doctor`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.support import ROOT

ENV_ID = "R2V/ScienceWorld-v0"
TASKS = ["find-non-living-thing/225", "lifespan-longest-lived/93"]  # gold sequences of 7 and 4 actions


@pytest.mark.slow  # ScienceWorld JVMs (a closed env's is kept for the next cell), ~25 s per agent at load average 10
@pytest.mark.skipif(not shutil.which("java"), reason="ScienceWorld needs Java (scripts/install.sh)")
@pytest.mark.parametrize("agent", ["random", "expert"])
def test_r2v_eval_reports(agent, tmp_path):
    pytest.importorskip("scienceworld", reason="pip install 'r2v[scienceworld]'")
    from r2v_eval.cli import main

    out = tmp_path / agent
    main(["--agent", agent, "--envs", ENV_ID, "--perturbations", "none", "composite", "--seeds", "0",
          "--task-ids", *TASKS, "--max-steps", "10", "--out", str(out), "--no-progress", "--bootstrap", "50"])
    results = json.loads((out / "results.json").read_text())
    cells = {c["perturbation"]: c for c in results["cells"]}
    assert set(cells) == {"none", "composite"} and all(c["episodes"] == 2 and c["not_run"] == 0
                                                       for c in cells.values())
    assert (out / "report.md").is_file()
    if agent == "expert":
        assert all(c["sr"] == 100.0 for c in cells.values())
        from r2v_eval.view.page import write_page

        page = write_page(out).read_text()  # `r2v view`: one page with the episodes as the agent saw them
        assert f"{TASKS[0]}@0" in page and "Your task is to find" in page
    else:
        assert cells["none"]["sr"] < 100.0  # ten random admissible actions do not find, focus and carry


def test_doctor_reports_scienceworld_without_starting_it():
    code = ("import sys, r2v_train.doctor as d; r = d.data_section()['scienceworld']; "
            "print(r['scienceworld'], r['java'], r['task_types'], 'scienceworld' in sys.modules, "
            "'py4j' in sys.modules, 'scienceworld' in d.format_report(d.gather()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    version, java, types, imported, py4j, shown = out.stdout.split()
    assert types == "30" and imported == py4j == "False" and shown == "True"
    assert java == str(shutil.which("java")) if shutil.which("java") else java == "None"
    assert version[0].isdigit() or version == "None"
