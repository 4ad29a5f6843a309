"""``r2v drrn-matrix`` at a miniature size: every (train, test) cell with a CI, paired differences from the
clean-trained agent and from the reference agents, the heatmap, and a rerun that resumes instead of retraining."""

from __future__ import annotations

import json

import pytest
import torch

from r2v_train.cli import main
from r2v_train.drrn.matrix import MATRIX_JSON, MATRIX_PNG

FLAGS = ["--train", "none", "partial", "--test", "none", "injection", "--seeds", "0", "1", "--tasks", "3",
         "--references", "random", "--bootstrap", "50", "--drrn.env-id", "R2V/Scripted-v0", "--drrn.episodes", "16",
         "--drrn.max-steps", "8", "--drrn.encoder", "bag", "--drrn.buckets", "512", "--drrn.embed", "8",
         "--drrn.hidden", "8", "--drrn.learning-starts", "16", "--drrn.no-progress"]


@pytest.mark.slow  # two trainings, three evaluation grids and their reports, twice: about 10 s on a quiet machine
def test_matrix_cells_pairs_heatmap_and_resume(tmp_path, capsys):
    torch.set_num_threads(1)
    out = tmp_path / "m"
    main(["drrn-matrix", "--out", str(out), *FLAGS])
    m = json.loads((out / MATRIX_JSON).read_text())
    assert m["train"] == ["none", "partial"] and m["test"] == ["none", "injection"]
    for t in m["train"]:
        for s in m["test"]:
            c = m["cells"][t][s]
            assert c["episodes"] == 6 and c["sr_ci"][0] <= c["sr"] <= c["sr_ci"][1]
    assert "vs_clean" not in m["cells"]["none"]["none"]  # the clean-trained row is the baseline
    assert all(m["cells"]["partial"][s]["vs_clean_ci"][0] <= m["cells"]["partial"][s]["vs_clean"]
               <= m["cells"]["partial"][s]["vs_clean_ci"][1] for s in m["test"])
    assert set(m["references"]["random"]["drrn_minus_ref"]["partial"]) == {"none", "injection"}
    assert m["training"]["partial"]["perturbations"] == "partial"
    assert (out / MATRIX_PNG).read_bytes()[:4] == b"\x89PNG"
    assert "| partial |" in capsys.readouterr().out
    mtime = (out / "train" / "none" / "model.pt").stat().st_mtime_ns
    main(["drrn-matrix", "--out", str(out), *FLAGS])  # resumes: nothing is retrained
    assert (out / "train" / "none" / "model.pt").stat().st_mtime_ns == mtime
    assert json.loads((out / MATRIX_JSON).read_text())["cells"] == m["cells"]
