"""The wire form of values: what a served env's client gets, as JSON types.

Its own light module (no OpenEnv, no pydantic): the env worker processes (:mod:`r2v_envs.serving.pool`) convert each
info here, and importing OpenEnv's stack costs 7-17 s on a busy 2-core machine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def jsonable(value: Any) -> Any:
    """``value`` as JSON types (what the client gets back): tuples become lists, numpy scalars Python numbers,
    anything else its ``str``.

    Example:
        >>> import numpy as np
        >>> jsonable({"a": (1, np.int64(2)), "b": {3: np.float32(0.5)}, "c": None})
        {'a': [1, 2], 'b': {'3': 0.5}, 'c': None}
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return jsonable(item())
        except (TypeError, ValueError):
            pass
    return str(value)
