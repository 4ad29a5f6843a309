"""How :class:`~r2v_envs.core.TextSpace` observations travel through Gymnasium's vector API.

``AsyncVectorEnv`` (shared memory on by default) asks three singledispatch functions of
``gymnasium.vector.utils`` how to move a space's values between processes: ``create_shared_memory`` (a buffer
per env), ``write_to_shared_memory`` (worker side, every step) and ``read_from_shared_memory`` (called *once*,
in ``__init__``: its result must be a live view of the buffer, as the numpy views of ``Box`` are). Gymnasium 1.4's
``Text`` implementation returns a tuple of ``str`` decoded at that one call, so every later observation reads
as the initial all-zero buffer (``'0' * max_length``: a million ``'0'`` for our spaces), and it encodes
characters by index into a fixed charset, which arbitrary Unicode game text does not fit.

Registering our space with those functions is the hook Gymnasium provides for custom spaces: each env gets a
slot of UTF-8 bytes (4 bytes per character, the worst case, so any valid value fits) plus its byte length, and
the read side returns :class:`SharedTexts`, a sequence view that decodes the slots when indexed. The vector env
deep-copies it before returning (``copy=True``, the default), which yields a plain ``tuple`` of ``str``: the
same type and bytes that ``SyncVectorEnv`` returns. Batching (``batch_space`` -> ``Tuple`` of text spaces,
``concatenate`` -> tuple) needs nothing of ours: Gymnasium's ``Text`` rules already fit.

Importing :mod:`r2v_envs` registers these functions (both in the parent and in spawned workers, which import the
env's entry point before they write anything).

Example:
    >>> import multiprocessing as mp
    >>> from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory
    >>> from r2v_envs.core import TextSpace
    >>> sp = TextSpace(max_length=8)
    >>> mem = create_shared_memory(sp, n=2, ctx=mp)
    >>> view = read_from_shared_memory(sp, mem, n=2)
    >>> write_to_shared_memory(sp, 1, "héllo", mem)
    >>> view[1], tuple(view)
    ('héllo', ('', 'héllo'))
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from gymnasium.vector.utils import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

from r2v_envs.core import TextSpace

UTF8_MAX_BYTES = 4  # bytes per character in the worst case


def _slot_bytes(space: TextSpace) -> int:
    return UTF8_MAX_BYTES * space.max_length


class SharedTexts(Sequence):
    """A live, read-only view of ``n`` text slots in shared memory (what ``read_from_shared_memory`` returns).

    Indexing decodes the slot's current bytes; ``copy.deepcopy`` (what ``AsyncVectorEnv`` applies before
    returning observations) gives a ``tuple`` of ``str``.
    """

    def __init__(self, space: TextSpace, memory: tuple[Any, Any], n: int):
        self._lengths, self._data = memory
        self._slot, self._n = _slot_bytes(space), n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(self._n)))
        if not -self._n <= i < self._n:
            raise IndexError(f"text slot {i} out of range for {self._n} envs")
        i %= self._n
        start = i * self._slot
        return bytes(memoryview(self._data).cast("B")[start:start + self._lengths[i]]).decode("utf-8", "surrogatepass")

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __copy__(self) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@create_shared_memory.register(TextSpace)
def _create_text_shared_memory(space: TextSpace, n: int = 1, ctx: ModuleType | None = None) -> tuple[Any, Any]:
    import multiprocessing as mp

    ctx = ctx or mp
    # Raw (lock-free) arrays: each slot has exactly one writer (its worker), and the parent reads only after
    # that worker's pipe message, so there is never a concurrent access to guard.
    return ctx.RawArray("q", n), ctx.RawArray("B", n * _slot_bytes(space))


@read_from_shared_memory.register(TextSpace)
def _read_text_from_shared_memory(space: TextSpace, shared_memory: tuple[Any, Any], n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)


@write_to_shared_memory.register(TextSpace)
def _write_text_to_shared_memory(space: TextSpace, index: int, value: str, shared_memory: tuple[Any, Any]) -> None:
    lengths, data = shared_memory
    payload = value.encode("utf-8", "surrogatepass")
    slot = _slot_bytes(space)
    if len(payload) > slot:
        raise ValueError(f"observation of {len(value)} characters exceeds the space's max_length "
                         f"{space.max_length}")
    start = index * slot
    memoryview(data).cast("B")[start:start + len(payload)] = payload
    lengths[index] = len(payload)


__all__ = ["SharedTexts"]
