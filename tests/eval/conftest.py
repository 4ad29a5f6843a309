"""Fixtures shared by the viewer's tests: the miniature pipeline evaluation is built once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def viewer_pipeline_run(tmp_path_factory, trained_run_template):
    """``(run dir, results)`` of :func:`tests.support.view_runs.pipeline_run` (read it, do not write into it)."""
    from tests.support.view_runs import pipeline_run

    tmp = tmp_path_factory.mktemp("view-pipeline")
    return tmp, pipeline_run(tmp, trained_run_template)
