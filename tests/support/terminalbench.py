"""Terminal-Bench test support: one ``play`` helper for every Terminal-Bench test, Harbor-format task folders written
by tests (the shapes real TB 2.x tasks take), and the workspace file operations and tree snapshots of the
differential test (``tests/envs/test_terminalbench_workspace.py``)."""

from __future__ import annotations

import json
import random
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TESTS = """from pathlib import Path


def test_answer():
    assert Path("/app/answer.txt").read_text().strip() == "42"
"""


def harbor_task(root: Path, name: str, *, dockerfile: str = "FROM python:3.11-slim\nWORKDIR /app\n",
                test_sh: str = "#!/bin/bash\ncd /app\npython3 -m pytest /tests/test_outputs.py -rA\n",
                tests: str = DEFAULT_TESTS, solve: str = "echo 42 > /app/answer.txt\n",
                env_files: dict[str, str] | None = None, test_files: dict[str, str] | None = None,
                environment: str = "") -> Path:
    """Write ``root/name`` in Harbor's layout and return it (``environment``: lines of its ``[environment]``)."""
    task = root / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text('version = "1.0"\n[metadata]\ndifficulty = "easy"\ncategory = "test"\n'
                                    "[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 60.0\n"
                                    + (f"[environment]\n{environment}\n" if environment else ""))
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


@dataclass
class Episode:
    """What :func:`play` saw: the last info, the last reward, and every observation (the reset's first)."""

    info: dict
    reward: float
    observations: list[str]


def play(env, task_id: str, actions: list[str] | None = None) -> Episode:
    """One episode of ``task_id``: the expert (``actions`` None) or ``actions`` (the last one repeated) until the
    episode ends; it must end before the step cap."""
    obs, info = env.reset(options={"task_id": task_id})
    observations, reward, i, terminated = [obs], 0.0, 0, False
    while not terminated:
        action = info["expert_action"] if actions is None else actions[min(i, len(actions) - 1)]
        obs, reward, terminated, truncated, info = env.step(action)
        observations.append(obs)
        i += 1
        assert not truncated, f"{task_id}: the episode hit the step cap"
    return Episode(info, float(reward), observations)


# ------------------------------------------------------------------------------ workspace differential
# A tree snapshot: every path under the current folder with its type, mode, link target and content digest. The
# same Python source runs inside the sandbox (through the agent's shell) and on the plain copy, so both sides
# describe their tree in the same words; its markers are split in the source, which the screen echoes.
TREE_SCRIPT = r"""
import hashlib, json, os, stat
tree = {}
for top, dirs, files in os.walk(".", followlinks=False):
    for name in dirs + files:
        p = os.path.join(top, name)
        st = os.lstat(p)
        rel = os.path.relpath(p, ".")
        if stat.S_ISLNK(st.st_mode):
            tree[rel] = ["link", os.readlink(p)]
        elif stat.S_ISDIR(st.st_mode):
            tree[rel] = ["dir", oct(stat.S_IMODE(st.st_mode))]
        else:
            tree[rel] = ["file", oct(stat.S_IMODE(st.st_mode)), hashlib.sha256(open(p, "rb").read()).hexdigest()]
print("<" + "tree>" + json.dumps(tree, sort_keys=True) + "</" + "tree>")
"""
TREE_COMMAND = f"run python3 -c {shlex.quote(TREE_SCRIPT)}"


def parse_tree(text: str) -> dict:
    """The snapshot printed by :data:`TREE_SCRIPT` in ``text`` (an observation or a process's output)."""
    start, end = text.index("<tree>") + 6, text.rindex("</tree>")
    return json.loads(text[start:end])


def plain_tree(folder: Path) -> dict:
    return parse_tree(subprocess.run(["python3", "-c", TREE_SCRIPT], cwd=folder, capture_output=True, text=True,
                                     check=True).stdout)


def workspace_ops(rng: random.Random, build_files: list[str], n: int = 10) -> list[str]:
    """``n`` shell commands, each one file operation an agent does in its working folder: create, overwrite by
    redirection (a heredoc too), append, ``chmod``, ``mkdir -p``, ``rm``, ``mv``, a symlink inside the workspace,
    on files the task's build created (``build_files``, relative paths) and on files it did not. The first two
    touch a build file and a new file, so every sequence has both. Read-only modes too: root (the agent in a task's
    container, shown as root in the sandbox) writes its own read-only files."""
    made: list[str] = []
    dirs = sorted({str(Path(f).parent) for f in build_files if str(Path(f).parent) != "."})

    def new_name() -> str:
        where = rng.choice(["", "", *(d + "/" for d in dirs), "made/"])
        return f"{where}new-{len(made)}-{rng.randrange(100)}.txt"

    def any_file() -> str:
        return rng.choice(build_files + made) if made and rng.random() < 0.5 else rng.choice(build_files)

    def into(name: str) -> str:  # a path whose folder is made first
        return f"mkdir -p $(dirname {shlex.quote(name)}) && "

    ops: list[str] = []
    for k in range(n):
        kind = ("overwrite", "create")[k] if k < 2 else rng.choice(
            ["create", "overwrite", "heredoc", "append", "chmod", "mkdir", "rm", "mv", "symlink", "chmod_dir"])
        text, target = f"line {k} {rng.randrange(10 ** 6)}", any_file()  # the target before any new name
        if kind in ("create", "mv", "symlink"):  # these make a file of their own
            made.append(f"link-{k}" if kind == "symlink" else new_name())
        if kind == "create":
            ops.append(into(made[-1]) + f"printf '%s\\n' {shlex.quote(text)} > {shlex.quote(made[-1])}")
        elif kind == "mv":
            ops.append(into(made[-1]) + f"mv {shlex.quote(target)} {shlex.quote(made[-1])}")
        elif kind == "symlink":  # a relative symlink inside the workspace
            ops.append(f"ln -sfn {shlex.quote(target)} {made[-1]}")
        elif kind == "overwrite":
            ops.append(f"echo {shlex.quote(text)} > {shlex.quote(target)}")
        elif kind == "heredoc":
            ops.append(f"cat > {shlex.quote(target)} <<'EOF'\n{text}\nsecond line\nEOF")
        elif kind == "append":
            ops.append(f"echo {shlex.quote(text)} >> {shlex.quote(target)}")
        elif kind == "chmod":
            ops.append(f"chmod {rng.choice(['600', '640', '644', '700', '755', 'u+x', 'go-r', '444', 'a-w', '000'])} "
                       f"{shlex.quote(target)}")
        elif kind == "chmod_dir":
            ops.append(f"chmod {rng.choice(['700', '750', '755'])} {shlex.quote(rng.choice(dirs or ['.']))}")
        elif kind == "mkdir":
            ops.append(f"mkdir -p made/sub{k}/deeper")
        else:
            ops.append(f"rm -f {shlex.quote(target)}")
    return ops


def play_plain(folder: Path, ops: list[str]) -> list[int]:
    """``ops`` one by one with plain bash (root, no sandbox) in ``folder``; their exit statuses."""
    return [subprocess.run(["bash", "--noprofile", "--norc", "-c", op], cwd=folder, capture_output=True).returncode
            for op in ops]
