"""Process-level settings of the ``r2v`` command for CPU work: malloc's thresholds, and the CPU kernels torch uses.

PyTorch's CPU allocator hands large tensors straight to ``malloc``; glibc serves blocks above its mmap
threshold with fresh ``mmap`` pages and returns them on free, so a training loop that allocates the same
2 MB activations every step pays a page fault per 4 KB page, every step. Raising the mmap and trim thresholds
keeps those blocks in the heap for reuse (what PyTorch's CPU performance guide gets from jemalloc or tcmalloc).
Measured on the router benchmark (1M rows x 20 epochs, 2 threads): 29.9 -> 28.7 s.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Mapping

from r2v_envs.errors import R2VError, UnknownChoiceError

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


# ------------------------------------------------------------------------------------------------ threads
def thread_count(n: int, environ: Mapping[str, str] = os.environ) -> int:
    """The torch CPU threads a config asking for ``n`` gets: at least one, and no more than ``OMP_NUM_THREADS``.

    ``OMP_NUM_THREADS`` is how a machine shared with other jobs says how many threads a process may spin (torch reads
    it as its default, but an explicit ``set_num_threads`` would override it), so a config's ``threads`` cannot
    oversubscribe what the caller allowed. Measured on a 2-core AMD EPYC, the tiny chain with one busy core beside
    it: two threads BC 21.6 s and DPO 29.6 s, one thread 14.9 s and 22.2 s (alone, two threads: 13.5 s and 12.8 s).

    Example:
        >>> thread_count(2, {"OMP_NUM_THREADS": "1"}), thread_count(2, {}), thread_count(0, {}), thread_count(4, {"OMP_NUM_THREADS": "x"})
        (1, 2, 1, 4)
    """
    cap = environ.get("OMP_NUM_THREADS", "")
    return max(1, min(n, int(cap)) if cap.isdigit() and int(cap) > 0 else n)


def set_threads(n: int) -> int:
    """Set torch's CPU threads to :func:`thread_count` of ``n`` and return it; with ``n`` 0 and torch not imported
    yet, nothing is set (nothing imports torch for it)."""
    count = thread_count(n)
    if "torch" in sys.modules or n:
        import torch

        torch.set_num_threads(count)
    return count


# ------------------------------------------------------------------------------------------------ CPU kernels
# PyTorch picks its elementwise/reduction kernels (softmax, RMSNorm, SiLU, AdamW's update, ...) by the CPU's
# vector ISA at the first op it runs, from ATEN_CPU_CAPABILITY if set; MKL (torch's BLAS here) picks its GEMM code
# path likewise (MKL_CBWR pins it, "conditional numerical reproducibility") and oneDNN caps its ISA at
# ONEDNN_MAX_CPU_ISA. Different paths round differently. Measured on this project's AMD EPYC (AVX512) machine:
# 20 AdamW steps of the default's tiny Qwen2 gave other weight bytes under ATEN_CPU_CAPABILITY=avx2 than natively
# (avx512), the same bytes on a rerun of either; MKL_CBWR=COMPATIBLE changed a 256x384 @ 384x128 matmul's bytes.
# So a run's numbers depend on which ISA the machine has, from the first BC step on, and pinning every dispatcher
# to one ISA most x86-64 CPUs have (AVX2) makes runs on AVX2 and AVX512 machines comparable.
CPU_KERNELS: dict[str, dict[str, str] | None] = {
    "native": None,  # whatever torch, MKL and oneDNN pick for this CPU
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}
"""``cpu_kernels`` settings -> the environment they pin (``native`` pins nothing)."""


class KernelPinError(R2VError, RuntimeError):
    """The CPU kernels asked for cannot be pinned in this process (torch already chose, or the CPU lacks them)."""


def pin_cpu_kernels(kernels: str) -> str | None:
    """Pin torch's, MKL's and oneDNN's CPU kernel paths to ``kernels`` (a key of :data:`CPU_KERNELS`) for this
    process and its children, before torch runs its first op; returns torch's CPU capability when torch is
    imported (None otherwise), ``native`` changes nothing.

    Raises :class:`KernelPinError` when torch already chose other kernels (an op ran before this call, or the
    environment pinned others) or the CPU cannot run the ones asked for.

    Example:
        >>> pin_cpu_kernels("avx7")
        Traceback (most recent call last):
        ...
        r2v_envs.errors.UnknownChoiceError: unknown cpu_kernels 'avx7'; did you mean 'avx2'? ...
    """
    if kernels not in CPU_KERNELS:
        raise UnknownChoiceError("cpu_kernels", kernels, CPU_KERNELS)
    env = CPU_KERNELS[kernels]
    if env is None:
        return torch_cpu_capability()
    clash = {k: os.environ[k] for k, v in env.items() if os.environ.get(k, v).upper() != v.upper()}
    if clash:
        raise KernelPinError(f"cpu_kernels: {kernels} asks for {env}, but the environment sets {clash}")
    os.environ.update(env)
    got = torch_cpu_capability()
    if got is not None and got.lower() != env["ATEN_CPU_CAPABILITY"]:
        raise KernelPinError(f"cpu_kernels: {kernels}: torch runs {got} kernels (it ran an op before they could be "
                             f"pinned, or this CPU lacks them); set ATEN_CPU_CAPABILITY={env['ATEN_CPU_CAPABILITY']} "
                             "in the environment of the command")
    return got


def torch_cpu_capability() -> str | None:
    """torch's CPU kernel capability (e.g. ``AVX512``) when torch is imported, else None (nothing is imported)."""
    if "torch" not in sys.modules:
        return None
    import torch

    return str(torch.backends.cpu.get_cpu_capability())
