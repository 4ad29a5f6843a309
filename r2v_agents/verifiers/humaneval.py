"""The HumanEval+ process verifier of Appendix C: smoke-test execution plus structural code checks.

Score of a candidate action (its code, or for ``test``/``submit`` the code saved last in the history)::

    s = .35 smoke + .20 definition + .15 control flow + .10 return + .10 imports + .10 length
    s *= hack penalty (lookup tables, bare literal returns, swallowed exceptions)
    s *= repetition penalty (the code already failed a visible test or a submission)
    s *= 0.85 if prompt-injection markers are in what the agent sees
    s = .6 s + .4 observed   when a test result of this very code is visible (its pass fraction)

The smoke test runs the code in :class:`r2v_envs.sandbox.Sandbox` on the examples written in the prompt
(doctest lines ``>>> f(x)`` and prose like ``f(x) ==> y``): agent-visible evidence only, never the hidden
tests. Smoke results are cached per (program, examples) hash.

Example:
    >>> from r2v_agents.context import Context
    >>> q = chr(34) * 3
    >>> prompt = f"def add(x, y):\\n    {q}Add.\\n    >>> add(2, 3)\\n    5\\n    {q}\\n"
    >>> ctx = Context.start(goal=prompt, observation=prompt, info={})
    >>> v = HumanEvalVerifier()
    >>> actions = ["write_code\\n```python\\nreturn x + y\\n```", "write_code ```\\nreturn None\\n```"]
    >>> good, bad = v.score_batch(ctx, actions)
    >>> good > 0.8 > 0.3 > bad
    True
"""

from __future__ import annotations

import ast
import doctest
import hashlib
import json
import re
import secrets
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from r2v_agents.context import Context
from r2v_agents.verifiers.base import Verifier, clamp
from r2v_envs.humaneval.actions import assemble_solution, defines, parse_action
from r2v_envs.perturbations.templates import INJECTION_MARKERS
from r2v_envs.sandbox import Sandbox, SandboxLimits

WEIGHTS = {"smoke": 0.35, "definition": 0.20, "control_flow": 0.15, "return": 0.10, "imports": 0.10,
           "length": 0.10}
SAFE_MODULES = frozenset({
    "math", "cmath", "re", "string", "itertools", "functools", "collections", "typing", "heapq", "bisect",
    "operator", "fractions", "decimal", "statistics", "hashlib", "copy", "datetime", "calendar", "random",
    "numbers", "array", "dataclasses", "enum", "abc", "unicodedata", "textwrap", "sys",
})
DANGEROUS_MODULES = frozenset({
    "os", "subprocess", "socket", "shutil", "ctypes", "importlib", "pickle", "marshal", "multiprocessing",
    "threading", "signal", "builtins", "requests", "urllib", "http", "pty", "resource", "pathlib", "glob",
    "tempfile", "asyncio", "gc", "inspect",
})
DANGEROUS_CALLS = frozenset({"exec", "eval", "compile", "__import__", "open", "globals", "setattr", "input"})
SMOKE_LIMITS = SandboxLimits(wall_time_s=5.0, cpu_time_s=5.0, memory_bytes=1 << 30, max_processes=16)
_SUMMARY = re.compile(r"=== (\d+) passed, (\d+) failed ===")
_FAILED_MARKS = ("FAILED", "Submission rejected", "error while loading")
# Runs inside the sandbox: one forked child per program (so candidates cannot touch each other), each loads
# its program, evaluates the example calls and compares them with the written values; results go back on a
# pipe and the parent prints them as one tagged JSON line at the end.
_HARNESS = r'''
import json, math, os, select, signal, sys
tag, jobs = json.load(sys.stdin)
def same(a, b):
    if a == b: return True
    if isinstance(a, float) or isinstance(b, float):
        try: return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
        except TypeError: return False
    return False
def alarm(*_): raise TimeoutError("time limit")
def run(program, examples):
    signal.signal(signal.SIGALRM, alarm)
    out = {"loaded": False, "passed": []}
    g = {"__name__": "__candidate__"}
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0); exec(program, g); signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException:
        return out
    out["loaded"] = True
    for call, want in examples:
        try:
            signal.setitimer(signal.ITIMER_REAL, 1.0)
            got = eval(call, g)
            signal.setitimer(signal.ITIMER_REAL, 0)
            out["passed"].append(bool(same(got, eval(want, g)) or repr(got) == want.strip()))
        except BaseException:
            signal.setitimer(signal.ITIMER_REAL, 0)
            out["passed"].append(False)
    return out
results = []
for program, examples in jobs:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            data = json.dumps(run(program, examples)).encode()
        except BaseException:
            data = b""
        os.write(w, data); os._exit(0)
    os.close(w)
    data = b""
    budget = 1.5 + 1.0 * len(examples)
    while True:
        ready, _, _ = select.select([r], [], [], budget)
        chunk = os.read(r, 1 << 16) if ready else b""
        if not chunk: break
        data += chunk
    os.close(r)
    try: os.kill(pid, signal.SIGKILL)
    except OSError: pass
    os.waitpid(pid, 0)
    try: results.append(json.loads(data))
    except ValueError: results.append({"loaded": False, "passed": []})
sys.stdout.write("\n" + tag + json.dumps(results) + "\n")
'''


@dataclass(frozen=True)
class SmokeResult:
    loaded: bool
    passed: tuple[bool, ...]

    @property
    def score(self) -> float:
        if not self.loaded:
            return 0.0
        return sum(self.passed) / len(self.passed) if self.passed else 0.5  # nothing to check: neutral


class HumanEvalVerifier(Verifier):
    """V(x, a) for R2V/HumanEval-v0 actions (see the module doc).

    Args:
        isolation: sandbox level for the smoke test (``"auto"``: the strongest available).
        blend: weight of the structural estimate when a visible test result exists (paper: 0.6).
        injection_discount: factor when injection markers are present (paper: 0.85).
        repetition_penalty: factor for code that already failed visibly.
    """

    name: ClassVar[str] = "humaneval"

    def __init__(self, isolation: str = "auto", blend: float = 0.6, injection_discount: float = 0.85,
                 repetition_penalty: float = 0.5, cache_size: int = 4096):
        self.sandbox = Sandbox(isolation, limits=SMOKE_LIMITS)
        self.blend, self.injection_discount = blend, injection_discount
        self.repetition_penalty = repetition_penalty
        self.cache_size = cache_size
        self._smoke_cache: dict[str, SmokeResult] = {}

    # ------------------------------------------------------------------------------------------ score
    def score(self, ctx: Context, action: str) -> float:
        act = parse_action(action)
        if act.command is None or (act.command == "write_code" and act.code is None):
            return 0.05
        history_code, failed, tested = _replay(ctx)
        code = act.code if act.code is not None else history_code
        if code is None:
            return 0.1  # test/submit with nothing saved
        prompt = clean_prompt(ctx.goal)
        entry = entry_point(prompt, code)
        parts = self.components(prompt, entry, code)
        s = sum(WEIGHTS[k] * v for k, v in parts.items()) * hack_penalty(code, entry)
        key = _norm(code)
        if key in failed:
            s *= self.repetition_penalty
        seen = f"{ctx.goal}\n{ctx.observation}\n{action}".lower()
        if any(m in seen for m in INJECTION_MARKERS):
            s *= self.injection_discount
        observed = tested.get(key)
        if observed is not None:
            s = self.blend * s + (1 - self.blend) * observed
        return clamp(s)

    def components(self, prompt: str, entry: str | None, code: str) -> dict[str, float]:
        """The six weighted signals, each in [0, 1]."""
        tree = _parse(code, entry)
        if tree is None:
            return dict.fromkeys(WEIGHTS, 0.0)
        fn = _function(tree, entry)
        return {
            "smoke": self.smoke(prompt, entry, code).score if entry else 0.0,
            "definition": 1.0 if entry and defines(code, entry) else 0.75 if fn is not None else 0.0,
            "control_flow": control_flow_score(fn or tree),
            "return": return_score(fn or tree),
            "imports": import_score(tree),
            "length": length_score(code),
        }

    # ------------------------------------------------------------------------------------------ smoke
    def smoke(self, prompt: str, entry: str, code: str) -> SmokeResult:
        return self.smoke_many([(prompt, entry, code)])[0]

    def smoke_many(self, jobs: Sequence[tuple[str, str, str]]) -> list[SmokeResult]:
        """Smoke results of several (prompt, entry, code) at once: one sandbox run for the uncached ones."""
        keyed = []
        for prompt, entry, code in jobs:
            job = (assemble_solution(prompt, entry, code), prompt_examples(prompt, entry))
            keyed.append((hashlib.sha256(json.dumps(job).encode()).hexdigest(), job))
        todo = {k: job for k, job in keyed if k not in self._smoke_cache}
        if todo:
            for k, res in zip(todo, self._run_smoke(list(todo.values()))):
                while len(self._smoke_cache) >= self.cache_size:
                    self._smoke_cache.pop(next(iter(self._smoke_cache)))
                self._smoke_cache[k] = res
        return [self._smoke_cache[k] for k, _ in keyed]

    def _run_smoke(self, jobs: list[tuple[str, list[tuple[str, str]]]]) -> list[SmokeResult]:
        tag = f"__R2V_SMOKE_{secrets.token_hex(8)}__"
        wall = sum(2.0 + len(ex) for _, ex in jobs) + 2.0
        limits = replace(SMOKE_LIMITS, wall_time_s=wall, cpu_time_s=wall)
        with tempfile.TemporaryDirectory(prefix="r2v-verify-") as work:
            # -S: stdlib only, which HumanEval needs, and a 3x faster start than with site-packages.
            r = self.sandbox.run([sys.executable, "-I", "-S", "-c", _HARNESS], workdir=work, limits=limits,
                                 stdin=json.dumps([tag, jobs]), max_output_bytes=1_000_000)
        line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith(tag)), None)
        try:
            outs = json.loads(line[len(tag):]) if line else []
            results = [SmokeResult(bool(o["loaded"]), tuple(bool(p) for p in o["passed"])) for o in outs]
        except (ValueError, KeyError, TypeError):
            results = []
        return results if len(results) == len(jobs) else [SmokeResult(False, ())] * len(jobs)

    def score_batch(self, ctx: Context, actions: Sequence[str]) -> list[float]:
        """Scores of several candidates; their smoke tests share one sandbox run."""
        prompt = clean_prompt(ctx.goal)
        history_code = _replay(ctx)[0]
        jobs = []
        for a in actions:
            act = parse_action(a)
            code = act.code if act.code is not None else history_code
            entry = entry_point(prompt, code or "")
            if code is not None and entry and act.command is not None and _parse(code, entry) is not None:
                jobs.append((prompt, entry, code))
        if jobs:
            self.smoke_many(jobs)
        return [self.score(ctx, a) for a in actions]


# ------------------------------------------------------------------------------------ context parsing
def _norm(code: str) -> str:
    return "\n".join(line.rstrip() for line in code.strip().splitlines() if line.strip())


def _replay(ctx: Context) -> tuple[str | None, set[str], dict[str, float]]:
    """From the visible history: the code saved last, codes that visibly failed, and the pass fraction of
    each tested code (from the runner's summary line, when it survived the perturbations)."""
    code: str | None = None
    failed: set[str] = set()
    tested: dict[str, float] = {}
    for turn in ctx.history:
        act = parse_action(turn.action)
        if act.code is not None:
            code = act.code
        if act.command in ("test", "submit") and code is not None:
            key = _norm(code)
            if any(m in turn.observation for m in _FAILED_MARKS):
                failed.add(key)
            m = _SUMMARY.search(turn.observation)
            if m and act.command == "test":
                passed, n_failed = int(m.group(1)), int(m.group(2))
                tested[key] = passed / max(1, passed + n_failed)
    return code, failed, tested


def clean_prompt(goal: str) -> str:
    """The goal as Python: lines carrying prompt-injection markers removed, text outside the code cut."""
    if _parses(goal):
        return goal
    lines = [ln for ln in goal.splitlines() if not any(m in ln.lower() for m in INJECTION_MARKERS)]
    text = "\n".join(lines)
    if _parses(text):
        return text
    start = re.search(r"^(from |import |def )", text, re.M)
    text = text[start.start():] if start else text
    while text and not _parses(text):  # drop trailing junk lines (e.g. injected text after the docstring)
        text = text.rsplit("\n", 1)[0] if "\n" in text else ""
    return text


def _parses(src: str) -> bool:
    try:
        ast.parse(src)
        return True
    except (SyntaxError, ValueError):
        return False


def entry_point(prompt: str, code: str) -> str | None:
    """The function the task asks for: the last ``def`` of the prompt (HumanEval puts helpers first)."""
    names = re.findall(r"^def\s+([A-Za-z_]\w*)\s*\(", prompt, re.M)
    if names:
        return names[-1]
    names = re.findall(r"^\s*def\s+([A-Za-z_]\w*)\s*\(", code, re.M)
    return names[0] if names else None


_PROSE = re.compile(r"(?P<call>{name}\((?P<args>.*)\))\s*(?:==>|==|->|➞|=>|should return|returns|= )\s*(?P<want>.+)$")


def prompt_examples(prompt: str, entry: str) -> list[tuple[str, str]]:
    """(call, expected) pairs written in the prompt: doctest lines and ``f(x) ==> y``-style prose."""
    out: list[tuple[str, str]] = []
    try:
        for ex in doctest.DocTestParser().get_examples(prompt):
            # the closing quotes of the docstring follow the last example without a blank line
            src, want = ex.source.strip(), re.split(r"\"\"\"|\'\'\'", ex.want)[0].strip()
            if entry in src and want and _is_expr(src) and _is_expr(want):
                out.append((src, want))
    except ValueError:  # malformed doctest text (e.g. after perturbation)
        pass
    if out:
        return out
    pattern = re.compile(_PROSE.pattern.format(name=re.escape(entry)))
    for line in prompt.splitlines():
        m = pattern.search(line.strip())
        if m:
            want = m.group("want").strip().rstrip(".,;")
            if _is_expr(m.group("call")) and _is_expr(want):
                out.append((m.group("call"), want))
    return out


def _is_expr(src: str) -> bool:
    try:
        ast.parse(src, mode="eval")
        return True
    except (SyntaxError, ValueError):
        return False


# ----------------------------------------------------------------------------------- structural checks
def _parse(code: str, entry: str | None) -> ast.Module | None:
    """The code as a module; a bare body (no ``def entry``) is parsed inside a stand-in function."""
    body = "def __body__():\n" + "\n".join("    " + ln for ln in textwrap.dedent(code).splitlines())
    for src in ((code, body) if entry and defines(code, entry) else (body, code)):
        try:
            return ast.parse(src)
        except (SyntaxError, ValueError):
            continue
    return None


def _function(tree: ast.Module, entry: str | None) -> ast.FunctionDef | None:
    fns = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    named = [f for f in fns if f.name == entry]
    return (named or [f for f in fns if f.name == "__body__"] or [None])[0]


def control_flow_score(node: ast.AST) -> float:
    kinds = (ast.For, ast.While, ast.If, ast.IfExp, ast.comprehension, ast.Try, ast.Match, ast.BoolOp)
    if any(isinstance(n, kinds) for n in ast.walk(node)):
        return 1.0
    return 0.5 if any(isinstance(n, (ast.Call, ast.BinOp, ast.Compare, ast.Subscript)) for n in ast.walk(node)) \
        else 0.0


def return_score(node: ast.AST) -> float:
    returns = [n for n in ast.walk(node) if isinstance(n, ast.Return)]
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(node)):
        return 1.0
    if any(r.value is not None and not isinstance(r.value, ast.Constant) for r in returns):
        return 1.0
    return 0.3 if any(r.value is not None and r.value.value is not None for r in returns) else 0.0


def import_score(tree: ast.Module) -> float:
    modules = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            modules |= {a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module:
            modules.add(n.module.split(".")[0])
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    if modules & DANGEROUS_MODULES or calls & DANGEROUS_CALLS:
        return 0.0
    return 1.0 if modules <= SAFE_MODULES else 0.5


def length_score(code: str) -> float:
    lines = [ln for ln in code.splitlines() if ln.strip()]
    if not lines:
        return 0.0
    score = 1.0 if len(lines) <= 40 else 0.6 if len(lines) <= 100 else 0.2
    return score * (0.5 if max(len(ln) for ln in lines) > 200 else 1.0)


_LITERALS = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set)


def hack_penalty(code: str, entry: str | None) -> float:
    """Multiplicative reward-hacking penalty: hard-coded lookup tables, bare literal returns, swallowed
    exceptions (Appendix C)."""
    tree = _parse(code, entry)
    if tree is None:
        return 1.0
    fn = _function(tree, entry) or tree
    penalty = 1.0
    # `if arg == <literal>: return <literal>` chains: several on composite inputs, or many on scalars
    # (a couple of scalar base cases, as in fib, are normal code).
    literal_ifs = [n for n in ast.walk(fn) if isinstance(n, ast.If) and isinstance(n.test, ast.Compare)
                   and len(n.body) == 1 and isinstance(n.body[0], ast.Return)
                   and isinstance(n.body[0].value, _LITERALS)
                   and any(isinstance(c, _LITERALS) for c in n.test.comparators)]
    composite = [n for n in literal_ifs if any(isinstance(c, (ast.List, ast.Tuple)) for c in n.test.comparators)]
    table_returns = [r for r in ast.walk(fn) if isinstance(r, ast.Return) and isinstance(r.value, ast.Subscript)
                     and isinstance(r.value.value, ast.Dict) and len(r.value.value.keys) >= 4]
    if len(composite) >= 2 or len(literal_ifs) >= 5 or table_returns:
        penalty *= 0.5
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    logic = any(isinstance(n, (ast.For, ast.While, ast.If, ast.IfExp, ast.comprehension, ast.Try))
                for n in ast.walk(fn))
    if returns and not logic and all(r.value is None or isinstance(r.value, ast.Constant) for r in returns):
        penalty *= 0.5
    for h in (n for n in ast.walk(fn) if isinstance(n, ast.ExceptHandler)):
        broad = h.type is None or (isinstance(h.type, ast.Name) and h.type.id in ("Exception", "BaseException"))
        trivial = all(isinstance(s, (ast.Pass, ast.Continue)) or (isinstance(s, ast.Return) and (
            s.value is None or isinstance(s.value, ast.Constant))) for s in h.body)
        if broad and trivial:
            penalty *= 0.7
            break
    return penalty
