"""``services/extender`` has no import cycle: every import between its modules counts, including those under
``if TYPE_CHECKING:`` and inside functions (a cycle hidden that way still ties the modules together).

The dependencies type lives in ``deps.py`` and the app names the service through a protocol, so the handlers
(``filter``, ``bindhttp``, ``webhook``) and the app never import ``service.py``, which imports them.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = "vgpu_scheduler.services.extender"
FOLDER = REPO / "services" / "extender"


def imports_within(folder: Path, package: str) -> dict[str, set[str]]:
    """module → the modules of ``package`` it imports (anywhere in its source)."""
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module in modules:
        tree = ast.parse((folder / f"{module}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from . import x / from .x import y
                    base = node.module or ""
                    names = [base] if base else [a.name for a in node.names]
                    names = [f"{package}.{n}" for n in names]
                elif node.module == package:
                    names = [f"{package}.{a.name}" for a in node.names]
                elif node.module:
                    names = [node.module]
            for name in names:
                if name.startswith(package + "."):
                    target = name[len(package) + 1 :].split(".")[0]
                    if target in modules and target != module:
                        graph[module].add(target)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted; sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_extender_package_has_no_import_cycle() -> None:
    graph = imports_within(FOLDER, PACKAGE)
    assert {"service", "filter", "bind", "webhook", "app", "deps"} <= set(graph)
    assert all("deps" in graph[m] for m in ("filter", "bindhttp", "webhook", "app"))
    assert cycles(graph) == []


def test_the_check_finds_cycles_however_they_are_imported(tmp_path: Path) -> None:
    pkg = "p.ext"
    (tmp_path / "service.py").write_text("from p.ext.filter import FilterHandler\nimport p.ext.app\n")
    (tmp_path / "filter.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.ext.service import Deps\n"
    )
    (tmp_path / "app.py").write_text("def f():\n    from . import service\n")
    (tmp_path / "leaf.py").write_text("from p.ext import deps\n")
    (tmp_path / "deps.py").write_text("import os\n")
    graph = imports_within(tmp_path, pkg)
    assert graph == {"service": {"filter", "app"}, "filter": {"service"}, "app": {"service"}, "leaf": {"deps"},
                     "deps": set()}  # fmt: skip
    assert cycles(graph) == [["app", "filter", "service"]]
