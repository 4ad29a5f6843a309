"""An episode's resources are bounded as its task declares (Harbor's ``[environment] cpus`` and ``memory_mb``): per
process (the address space) and, where the host gives cgroups, for the episode's whole process tree, so a hostile
episode that starts a busy loop in every process it can cannot take every core from the episode beside it.

The kernel's scheduler already shares the CPU fairly between sessions (autogroups), so the hostile loops here each
start a session of their own (``setsid``), as a hack that leaves loops behind does: measured on a 2-core machine,
the honest episode's work took 3.8x its solo time beside six of them with no tree bound, 1.0-1.5x with one
(a whole-core burner; the test's burner declares a quarter of a core, see there)."""

from __future__ import annotations

import re
import statistics
import threading
import time

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401  (registers the envs)
from r2v_envs.sandbox import available_isolations
from r2v_envs.sandbox.cgroups import cgroup_version
from tests.support.terminalbench import harbor_task, play

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif("bwrap" not in available_isolations(), reason="a task's root needs bubblewrap")]
LIMITS_TESTS = """import resource


def test_the_test_phase_has_the_declared_memory():
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == 3072 << 20
"""
# A fixed amount of CPU work that reports its own wall time.
WORK = ("run python3 -c \"import time; t = time.perf_counter(); sum(i * i for i in range(6_000_000)); "
        "print('took', time.perf_counter() - t)\"")


def make(suite):
    return gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, backend="local", tasks_dir=suite,
                    split="all", max_episode_steps=20)


def test_a_task_gets_the_memory_it_declares(tmp_path):
    harbor_task(tmp_path, "big", environment="cpus = 2\nmemory_mb = 3072", tests=LIMITS_TESTS, solve="true\n")
    env = make(tmp_path)
    env.reset(options={"task_id": "big"})
    assert env.step("run ulimit -v")[0].splitlines()[2] == str(3072 << 10)  # KiB
    assert play(env, "big").info["outcome"] == "resolved"  # the test phase checks its own limit
    env.close()


def took(obs: str) -> float:
    return float(re.search(r"took ([\d.]+)", obs).group(1))


@pytest.mark.slow
@pytest.mark.skipif(cgroup_version() is None, reason="no cgroups for this process: the tree's CPU is not bounded")
def test_a_cpu_burning_episode_leaves_its_neighbour_its_share(tmp_path):
    """Best of three rounds (a busy machine slows a round's honest runs beside the burner and alone unequally), each
    the median of three runs beside over the median of three alone. The median, and ~0.5 s of work, because the
    scheduler lets a new short process run ahead of long-running loops: with 0.15 s of work and the least disturbed
    of three runs, the test passed without any tree group (0.92, 0.52, 0.18 s beside, 0.16 s alone). Measured on a
    2-core machine with this form: without a tree group every round was 2.5-5.1x (three runs, each failed); with one,
    1.25x, and 1.43x beside two more busy threads."""
    harbor_task(tmp_path, "honest", environment="cpus = 1\nmemory_mb = 1024")
    # A quarter of a core, so the bound's effect stands clear of what the other test worker takes. On 2 cores, with
    # that worker running two busy threads, the honest episode's fair share is (2 - 0.25) / 3 = 0.58 of a core: 1.7x
    # by arithmetic. Unbounded, six loops beside it leave it 2 / 8 or less: 4x. The bound passes below 2x. (A
    # half-core burner gave 1.5x by the same arithmetic, and CI measured 1.51 with it: no margin.)
    harbor_task(tmp_path, "burner", environment="cpus = 0.25\nmemory_mb = 1024")
    honest, burner = make(tmp_path), make(tmp_path)
    honest.reset(options={"task_id": "honest"})
    burner.reset(options={"task_id": "burner"})
    rounds = []
    for _ in range(3):
        solo = statistics.median(took(honest.step(WORK)[0]) for _ in range(3))
        # Six busy loops, each in a session of its own, for longer than the honest runs take beside them.
        hog = threading.Thread(target=burner.step, args=(
            'run[timeout=8] for i in 1 2 3 4 5 6; do setsid sh -c "while :; do :; done" & done; wait',))
        hog.start()
        time.sleep(0.5)
        beside = statistics.median(took(honest.step(WORK)[0]) for _ in range(3))
        hog.join()
        rounds.append((round(beside / solo, 2), solo, beside))
        if beside <= 2.0 * solo:
            break
    honest.close()
    burner.close()
    assert min(rounds)[0] <= 2.0, f"beside a CPU-burning episode / alone, (ratio, alone s, beside s) per round: {rounds}"
