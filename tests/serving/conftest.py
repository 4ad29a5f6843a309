"""Fixtures of the serving tests: a server on a background thread of the test process (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import pytest

pytest.importorskip("openenv", reason="needs the serve extra (pip install -e '.[serve]')")


@pytest.fixture(scope="module")
def alfworld_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("alfworld-serving")
