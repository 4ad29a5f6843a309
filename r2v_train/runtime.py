"""Process-level settings of the ``r2v`` command for CPU work.

PyTorch's CPU allocator hands large tensors straight to ``malloc``; glibc serves blocks above its mmap
threshold with fresh ``mmap`` pages and returns them on free, so a training loop that allocates the same
2 MB activations every step pays a page fault per 4 KB page, every step. Raising the mmap and trim thresholds
keeps those blocks in the heap for reuse (what PyTorch's CPU performance guide gets from jemalloc or tcmalloc).
Measured on the router benchmark (1M rows x 20 epochs, 2 threads): 29.9 -> 28.7 s.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # <malloc.h>
_applied: bool | None = None


def keep_freed_memory(mmap_threshold: int = 32 << 20, trim_threshold: int = 256 << 20,
                      top_pad: int = 16 << 20) -> bool:
    """Ask glibc malloc to keep freed blocks up to ``mmap_threshold`` bytes for reuse; False where the C
    library is not glibc (nothing changes there). Idempotent.

    Example:
        >>> keep_freed_memory() in (True, False)
        True
    """
    global _applied
    if _applied is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):
            _applied = False
        else:
            mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
            _applied = all(mallopt(option, value) == 1 for option, value in
                           ((M_MMAP_THRESHOLD, mmap_threshold), (M_TRIM_THRESHOLD, trim_threshold),
                            (M_TOP_PAD, top_pad)))
    return _applied
