"""The README's commands run, at a miniature size, and every relative link of the docs resolves.

Every fenced ``bash`` / ``sh`` / ``python`` block of README.md, and of the "Quick start" section of each page under
docs/, is run here:

* python blocks are executed as written in a subprocess (cwd: the repository root), with ``runs/`` pointed at a
  temporary directory so nothing lands in the checkout;
* each shell command (continuation lines joined, comments dropped) must have an entry in :data:`SHELL`, which
  says how it runs at a miniature size (``r2v`` is the installed console script, so its exit status is the one a
  user's shell sees; run dirs go to a temporary directory, sizes shrink) and whether it is slow. A command with no
  entry fails :func:`test_every_documented_command_is_mapped`, so a command cannot enter the README or a quick
  start untested. ``bash scripts/main.sh`` runs as written with the miniature config's flags after it (the
  install skipped: it is done), and must exit 0; ``bash scripts/test.sh`` is what CI runs: it is only checked to
  exist and to run pytest.

Other checks: the README stays a front door (at most 220 lines, only bash/sh/python fences), its command table
is exactly the ``r2v`` dispatch table, docs/architecture.md names every module of the four packages, and every
relative link of README.md and docs/**/*.md names an existing file, without an anchor (headings move; files are
what the test can hold to).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from r2v_train.cli import COMMANDS
from tests.support.miniatures import MINIATURE_PIPELINE, R2V, ROOT, Mini, run_command, run_once

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
RUN_LANGS = ("bash", "sh", "python")
FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
README_MAX_LINES = 220


# ------------------------------------------------------------------------------------------------ what is documented
def fences(text: str) -> Iterator[tuple[str, str]]:
    """``(language, body)`` of each fenced block of a markdown text."""
    for m in FENCE.finditer(text):
        yield m.group(1).lower(), m.group(2)


def quick_start(text: str) -> str:
    """The "Quick start" section of a docs page (up to the next heading of its level or above); "" if none."""
    m = re.search(r"^(#+) Quick start[^\n]*\n", text, re.MULTILINE)
    if not m:
        return ""
    end = re.compile(rf"^#{{1,{len(m.group(1))}}} ", re.MULTILINE).search(text, m.end())
    return text[m.end(): end.start() if end else len(text)]


def documented_blocks() -> list[tuple[str, int, str, str]]:
    """``(page, index, language, body)`` of every block this test runs: the README's and the docs' quick starts."""
    out = []
    for path, text in [(README, README.read_text())] + [(p, quick_start(p.read_text())) for p in DOCS]:
        page = path.relative_to(ROOT).as_posix()
        out += [(page, i, lang, body) for i, (lang, body) in enumerate(fences(text)) if lang in RUN_LANGS]
    return out


def shell_commands(body: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments and blank lines dropped, each command
    normalised to ``shlex.join`` of its words (the key of :data:`SHELL`)."""
    commands = []
    for line in body.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append(shlex.join(words))
    return commands


# ------------------------------------------------------------------------------------------------ how each one runs
def _eval_report(tmp: Path, out: str) -> None:
    results = json.loads((tmp / "eval" / "results.json").read_text())
    assert (tmp / "eval" / "report.md").is_file() and str(tmp / "eval" / "report.md") in out
    assert [c["perturbation"] for c in results["cells"]] == ["none", "composite"]
    assert all(c["episodes"] == 2 and c["not_run"] == 0 for c in results["cells"]), results["cells"]


def _third_party(tmp: Path, out: str) -> None:
    assert json.loads(out.strip().splitlines()[-1])["episodes"] > 0
    assert list((tmp / "third-party").glob("episodes-*.parquet"))


def _served_episode(tmp: Path, out: str) -> None:
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["steps"] > 0 and seen["goal"] and seen["oracle_hidden"] and seen["listening"], seen
    assert seen["returncode"] == 0 and not seen["traceback"], seen  # Ctrl-C: a graceful stop, exit status 0


MINIATURE_EVAL = Mini(lambda tmp: R2V + ["eval", "--agent", "r2v_eval.agents:first_admissible", "--envs",
                                         "R2V/TextWorld-v0", "--tasks", "2", "--seeds", "0", "--perturbations", "none",
                                         "composite", "--max-steps", "10", "--out", str(tmp / "eval"), "--no-progress"],
                      check=_eval_report)
# Every shell command of the README and of the docs' quick starts, exactly as written (after shlex.join).
SHELL: dict[str, Mini | None] = {
    # the main job at a miniature size (its exit status checked); CI runs the tests (see test_setup_scripts_exist)
    "bash scripts/main.sh": MINIATURE_PIPELINE,
    "bash scripts/test.sh": None,
    # the fast lane: collected with its marker expression, in one process (running it here would run the suite
    # inside the suite; `-n 2` only spreads the same tests over two workers)
    "python -m pytest -n 2 -m 'not slow'": Mini(
        lambda tmp: [sys.executable, "-m", "pytest", "-m", "not slow", "--collect-only", "-q", "-p",
                     "no:cacheprovider"], slow=True, timeout_s=600,
        check=lambda tmp, out: re.search(r"\d+/\d+ tests collected \(\d+ deselected\)", out) or pytest.fail(out)),
    # README quick start 1's minimal install: resolved against what is installed, nothing changed
    "pip install -e '.[textworld]'": Mini(
        lambda tmp: [sys.executable, "-m", "pip", "install", "--dry-run", "--no-build-isolation", "-e", ".[textworld]"],
        slow=True, check=lambda tmp, out: "Would install r2v-" in out and "does not provide the extra" not in out
        or pytest.fail(out)),
    # README quick start 2: two perturbation settings instead of six, 10 steps per episode instead of 50, the
    # report in a temporary directory; then the viewer on that run
    "r2v eval --agent r2v_eval.agents:first_admissible --envs R2V/TextWorld-v0 --tasks 2 --seeds 0": MINIATURE_EVAL,
    "r2v view runs/eval": Mini(
        lambda tmp: R2V + ["view", str(tmp / "eval")], needs=MINIATURE_EVAL,
        check=lambda tmp, out: out.strip() == str(tmp / "eval" / "view.html") and (tmp / "eval" / "view.html").is_file()
        or pytest.fail(out)),
    # README quick start 3: the main job becomes the miniature config
    "r2v pipeline --config r2v_train/configs/default.yaml --run-dir runs/r2v": MINIATURE_PIPELINE,
    # docs/training.md
    "r2v pipeline --config r2v_train/configs/miniature.yaml --run-dir runs/miniature": MINIATURE_PIPELINE,
    # docs/textworld.md: the small suite into the user's cache; its games are generated in the background from the
    # session's start (generation itself: tests/envs/test_textworld_env.py), so the command checks a warm cache
    "r2v textworld-generate --suite small --workers 2": Mini(
        lambda tmp: R2V + ["textworld-generate", "--suite", "small", "--workers", "2"], slow=True, timeout_s=900,
        games=("small", "all"),
        check=lambda tmp, out: re.search(r"^24 games in ", out, re.MULTILINE) or pytest.fail(out)),
    # README and docs/serving.md: the server started as documented (on a free port), one episode through OpenEnv's own
    # client, stopped with SIGINT (tests/support/serving.py); two processes import OpenEnv's stack (~7 s each)
    "r2v serve --env R2V/Scripted-v0 --port 8000": Mini(
        lambda tmp: [sys.executable, "-m", "tests.support.serving", "serve", "--env", "R2V/Scripted-v0", "--port",
                     "8000"], slow=True, timeout_s=600, check=_served_episode),
    # docs/agents.md
    "python -m r2v_agents.examples.third_party_agent runs/third-party": Mini(
        lambda tmp: [sys.executable, "-m", "r2v_agents.examples.third_party_agent", str(tmp / "third-party")],
        check=_third_party),
}

# Python blocks slower than a few seconds (heavy engines, several episodes), and blocks that need data.
SLOW_PYTHON_PAGES = {"docs/alfworld.md", "docs/humaneval.md", "docs/terminalbench.md", "docs/agents.md",
                     "docs/runner-and-rl.md", "docs/scienceworld.md"}
NEEDS_ENV = {"docs/humaneval.md": "HUMANEVAL_OVERRIDE_PATH"}


# ------------------------------------------------------------------------------------------------ the tests
BLOCKS = documented_blocks()
COMMAND_CASES = sorted({c for _, _, lang, body in BLOCKS if lang != "python" for c in shell_commands(body)})


def test_readme_is_a_front_door() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    langs = {lang for lang, _ in fences(text)}
    assert langs <= set(RUN_LANGS), f"README fences the test cannot run: {langs - set(RUN_LANGS)}"
    assert "r2v eval --agent r2v_eval.agents:first_admissible --envs R2V/TextWorld-v0 --tasks 2 --seeds 0" in text


def test_every_documented_command_is_mapped() -> None:
    unmapped = [c for c in COMMAND_CASES if c not in SHELL]
    assert not unmapped, f"documented commands with no miniature run in tests/docs/test_readme_commands.py: {unmapped}"
    assert len(COMMAND_CASES) >= 4 and sum(lang == "python" for _, _, lang, _ in BLOCKS) >= 2


def test_setup_scripts_exist() -> None:
    assert (ROOT / "scripts" / "main.sh").is_file()
    assert re.search(r"^[^#\n]*-m pytest\b", (ROOT / "scripts" / "test.sh").read_text(), re.MULTILINE)


def test_command_table_is_the_dispatch_table() -> None:
    rows = re.findall(r"^\| `r2v ([\w-]+)` \|", README.read_text(), re.MULTILINE)
    assert rows == list(COMMANDS), "README's command table must list every r2v command once, in COMMANDS' order"


def _marks(mini: Mini) -> list:
    """``slow`` where it is; under pytest-xdist, the commands that share a session's outputs on one worker."""
    marks = [pytest.mark.slow] if mini.slow else []
    if mini.games is not None:
        marks.append(pytest.mark.textworld_games(*mini.games))
    if mini.chain is not None:
        marks.append(pytest.mark.xdist_group("tiny-chain"))  # the session's tiny chain, built once
    elif mini.needs is not None or any(m.needs is mini for m in SHELL.values() if m is not None):
        root = mini.needs or mini
        name = next(c for c, m in SHELL.items() if m is root)  # the same in every worker process
        marks.append(pytest.mark.xdist_group(f"readme:{name[:40]}"))  # one run, read by both
    return marks


@pytest.mark.parametrize("command", [
    pytest.param(c, marks=_marks(SHELL[c]), id=c[:60]) for c in COMMAND_CASES if SHELL.get(c) is not None])
def test_documented_command_runs(command: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    mini = SHELL[command]
    if mini.games is not None:
        request.getfixturevalue("textworld_games")  # wait for the background generation
    template = request.getfixturevalue("tiny_chain_template")[0] if mini.chain is not None else None
    mini.check(*run_once(mini, tmp_path, template))


@pytest.mark.parametrize("page,index,body", [
    pytest.param(page, i, body, marks=[pytest.mark.slow] if page in SLOW_PYTHON_PAGES else [], id=f"{page}:{i}")
    for page, i, lang, body in BLOCKS if lang == "python"])
def test_documented_python_runs(page: str, index: int, body: str, tmp_path: Path) -> None:
    if page in NEEDS_ENV and not os.environ.get(NEEDS_ENV[page]):
        pytest.skip(f"{page} needs ${NEEDS_ENV[page]}")
    code = re.sub(r"(?<=[\"'])runs/", f"{tmp_path.as_posix()}/runs/", body)
    run_command([sys.executable, "-c", code], 600 if page in SLOW_PYTHON_PAGES else 120)


def test_architecture_lists_every_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    modules = [p.relative_to(ROOT).as_posix() for pkg in ("r2v_envs", "r2v_agents", "r2v_eval", "r2v_train")
               for p in sorted((ROOT / pkg).rglob("*.py"))
               if p.name != "__init__.py" and "shipped_tasks" not in p.parts]
    missing = [m for m in modules if f"`{m}`" not in text]
    assert not missing, f"docs/architecture.md's module map lacks {missing}"


def test_relative_links_resolve() -> None:
    bad = []
    for path in [README] + DOCS:
        for target in LINK.findall(path.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            if "#" in target or not (path.parent / target).resolve().is_file():
                bad.append(f"{path.relative_to(ROOT)}: {target}")
    assert not bad, f"relative links must name an existing file, without an anchor: {bad}"
