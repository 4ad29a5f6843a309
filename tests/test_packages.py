"""Every package of r2v says what it holds: a docstring, and an ``__all__`` that is either the names it exports or,
for a package of modules that import nothing at package level, exactly its modules (a new module must be listed)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.parent for top in ("r2v_envs", "r2v_agents", "r2v_eval", "r2v_train")
                  for p in (ROOT / top).rglob("__init__.py") if "shipped_tasks" not in p.parts)


def _all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return None


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_package_has_a_docstring_and_lists_its_modules(package: Path) -> None:
    tree = ast.parse((package / "__init__.py").read_text())
    assert ast.get_docstring(tree), f"{package.relative_to(ROOT)}/__init__.py has no docstring"
    names = _all(tree)
    modules = {p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")}
    modules |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    imports = any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body)
    if names is not None and not imports:  # a map of modules: complete, and nothing else
        assert set(names) == modules, f"{package.relative_to(ROOT)}: __all__ {sorted(names)} vs modules {sorted(modules)}"
