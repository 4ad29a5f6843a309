"""The packages' own import graph: no loops between r2v modules, and our own modules imported at file tops.

Every ``import``/``from ... import`` of an r2v module anywhere in a file counts, inside functions too, so a loop
cannot hide behind a lazy import. The layers run one way: r2v_train -> r2v_agents -> r2v_envs (and r2v_eval, when
present, between r2v_train and r2v_agents).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = tuple(p for p in ("r2v_envs", "r2v_agents", "r2v_eval", "r2v_train") if (ROOT / p).is_dir())
LAYER = {name: i for i, name in enumerate(PACKAGES)}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "shipped_tasks" in path.relative_to(ROOT / pkg).parts[:-1]:
                continue  # shipped benchmark task files are data, not r2v code
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The r2v module an import names (``a.b.c`` may be a function of module ``a.b``)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> list[tuple[str, int, bool]]:
    """(imported r2v module, line, at top level) for every import in ``module``'s file."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    for n in tree.body:  # `if TYPE_CHECKING:` / try blocks at top level count as top level
        if isinstance(n, (ast.If, ast.Try)):
            top |= {id(c) for c in ast.walk(n)}
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{a.name}" for a in node.names] if base else []
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                found.append((target, node.lineno, id(node) in top))
    return found


def _graph() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in imports_of(m)} for m in MODULES}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package_edge_ok(src: str, dst: str) -> bool:
    """A package __init__ may import its own submodules (registration); nothing else imports upward."""
    a, b = src.split(".")[0], dst.split(".")[0]
    return LAYER[b] <= LAYER[a]


def test_no_import_loops_between_r2v_modules():
    graph = _graph()
    # A package's __init__ importing its children is not a loop with a child that imports the package's
    # constants; drop those parent -> child edges only for __init__ modules that re-export.
    cycles = find_cycles(graph)
    assert cycles == [], f"import loops: {cycles}"


def test_layers_only_import_downward():
    bad = [(m, t, line) for m in MODULES for t, line, _ in imports_of(m) if not _package_edge_ok(m, t)]
    assert bad == [], f"upward imports: {bad}"


def test_own_modules_imported_at_top():
    lazy = [(m, t, line) for m in MODULES for t, line, top in imports_of(m) if not top
            and not _allowed_lazy(m, t)]
    assert lazy == [], f"r2v modules imported inside functions ({len(lazy)}): {lazy[:20]}"


# Lazy on purpose: these modules import torch (and TRL) at their top, as modules that define torch/TRL subclasses
# must; importing them inside the function that trains or loads keeps `import r2v_train.cli` and the runner light.
HEAVY_R2V = {"r2v_agents.router_mlp", "r2v_train.chain.dpo_consistency",
             # the env server stack (FastAPI, uvicorn, openenv: ~7 s to import): `r2v serve` and remote envs only
             "r2v_envs.serving.app", "r2v_envs.serving.client",
             # TRL's GRPOTrainer subclass, and `r2v rl`'s stages over it (transformers callbacks): `r2v rl` only
             "r2v_train.rl.trainer", "r2v_train.rl.run",
             # DRRN's training loop and matrix (torch at the top): `r2v drrn` / `r2v drrn-matrix` only
             "r2v_train.drrn.trainer", "r2v_train.drrn.matrix"}


def _allowed_lazy(module: str, target: str) -> bool:
    return target in HEAVY_R2V


def test_find_cycles_sees_a_loop():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("module", ["r2v_envs", "r2v_agents.runner"])
def test_resolve_finds_modules(module):
    assert module in MODULES
