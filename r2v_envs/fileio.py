"""Atomic file writes and JSON normalisation, shared by every r2v package.

One crash-safety policy everywhere: a file is written to a unique temporary name beside its final path and
renamed into place (``os.replace``), so readers see it whole or not at all, and concurrent writers of the same
path (parallel game generators, env workers filling a cache) never interleave. Files are not fsync'ed: the
guarantee covers a killed process (the OS already holds what was written), not a power cut, which would cost a
sync per runner episode for no benefit to a resumable run. Leftover temporary files match ``.*.tmp``.

Example:
    >>> import json, os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> write_json_atomic(os.path.join(d, "a.json"), {"b": (1, 2), "a": {3}})
    >>> open(os.path.join(d, "a.json")).read()
    '{\\n "a": [\\n  3\\n ],\\n "b": [\\n  1,\\n  2\\n ]\\n}'
    >>> sorted(os.listdir(d))
    ['a.json']
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def temp_path(path: str | os.PathLike) -> Path:
    """A unique temporary name beside ``path`` (hidden, ending in ``.tmp``)."""
    p = Path(path)
    return p.with_name(f".{p.name}.{uuid.uuid4().hex[:12]}.tmp")


def atomic_write(path: str | os.PathLike, data: bytes | str | Callable[[IO[bytes]], None], *,
                 mode: int | None = None) -> None:
    """Write ``data`` (bytes, text as UTF-8, or a ``write(fileobj)`` callback) to ``path`` atomically.

    The parent directory is created; a failed write leaves no temporary file and the old ``path`` untouched.
    ``mode`` sets the file's permissions regardless of the umask (e.g. 0o644 for a file another uid reads).
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(p)
    try:
        with open(tmp, "xb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """``obj`` as indented, key-sorted JSON (normalised by :func:`jsonable`), written atomically."""
    atomic_write(path, json.dumps(jsonable(obj), indent=1, sort_keys=True))


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        try:
            return sorted(o)
        except TypeError:
            return sorted(o, key=repr)
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    return str(o)


def jsonable(x: Any) -> Any:
    """``x`` as plain JSON values: tuples -> lists, sets -> sorted lists, anything else unknown -> ``str``.

    Example:
        >>> jsonable({"t": (1, 2), "s": {"b", "a"}, "o": object}) == {"t": [1, 2], "s": ["a", "b"], "o": str(object)}
        True
    """
    return json.loads(json.dumps(x, default=_json_default))
