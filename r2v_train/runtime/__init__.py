"""What the ``r2v`` command does for the process around its stages: CPU settings, progress lines, games fetched ahead.

Modules:

* :mod:`~r2v_train.runtime.cpu`: malloc thresholds and the CPU kernels torch uses;
* :mod:`~r2v_train.runtime.narrate`: one stderr line per stage, what it does, its ETA;
* :mod:`~r2v_train.runtime.prefetch`: the run's TextWorld games generated ahead, in parallel.
"""

__all__ = [
    # process
    "cpu",
    # progress
    "narrate", "prefetch",
]
