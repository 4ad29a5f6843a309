"""The Terminal-Bench judge: one test phase for every backend (:mod:`.phase`), the verdict read from the judge's own
record (:mod:`.verdict`), the offline runtime the tests run with (:mod:`.runtime`), and the programs that run inside
the sandbox, standard library only (:mod:`.inside`: the shim, the judge's daemon, its pytest plugin)."""

from r2v_envs.terminalbench.judge.phase import JUDGE_DIR, TestPhase, TestView, run_tests
from r2v_envs.terminalbench.judge.runtime import RUNTIME_MOUNT, build_test_runtime
from r2v_envs.terminalbench.judge.verdict import TestRun, parse_pytest_summary, tests_passed

__all__ = ["JUDGE_DIR", "RUNTIME_MOUNT", "TestPhase", "TestRun", "TestView", "build_test_runtime",
           "parse_pytest_summary", "run_tests", "tests_passed"]
