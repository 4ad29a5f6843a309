"""Harbor-format (Terminal-Bench 2.x) task folders written by tests: the shapes real TB 2.x tasks take."""

from __future__ import annotations

from pathlib import Path

DEFAULT_TESTS = """from pathlib import Path


def test_answer():
    assert Path("/app/answer.txt").read_text().strip() == "42"
"""


def harbor_task(root: Path, name: str, *, dockerfile: str = "FROM python:3.11-slim\nWORKDIR /app\n",
                test_sh: str = "#!/bin/bash\ncd /app\npython3 -m pytest /tests/test_outputs.py -rA\n",
                tests: str = DEFAULT_TESTS, solve: str = "echo 42 > /app/answer.txt\n",
                env_files: dict[str, str] | None = None, test_files: dict[str, str] | None = None) -> Path:
    """Write ``root/name`` in Harbor's layout and return it."""
    task = root / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text('version = "1.0"\n[metadata]\ndifficulty = "easy"\ncategory = "test"\n'
                                    "[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 60.0\n")
    (task / "instruction.md").write_text("Write the answer, 42, to `/app/answer.txt`.\n")
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "tests" / "test.sh").write_text(test_sh)
    (task / "tests" / "test_outputs.py").write_text(tests)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    for rel, text in (env_files or {}).items():
        (task / "environment" / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / "environment" / rel).write_text(text)
    for rel, text in (test_files or {}).items():
        (task / "tests" / rel).write_text(text)
    return task


def play(env, task_id: str, actions: list[str] | None = None) -> dict:
    """One episode: the expert (``actions`` None) or ``actions`` until the episode ends; the last info."""
    _obs, info = env.reset(options={"task_id": task_id})
    i, terminated = 0, False
    while not terminated:
        action = info["expert_action"] if actions is None else actions[min(i, len(actions) - 1)]
        _obs, _reward, terminated, truncated, info = env.step(action)
        i += 1
        assert not truncated
    return info
