"""The emulator must stay independent of the client it emulates for: no kubernetes_asyncio, no redis, no shared.k8s.
(import-linter does not cover shared.emulator yet; this guard does.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EMULATOR = Path(__file__).resolve().parents[3] / "shared" / "emulator"
FORBIDDEN = (
    "kubernetes_asyncio",
    "redis",
    "fakeredis",
    "vgpu_scheduler.shared.k8s",
    "vgpu_scheduler.shared.store",
    "vgpu_scheduler.services",
)


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("path", sorted(EMULATOR.glob("*.py")), ids=lambda p: p.name)
def test_emulator_imports_no_client_and_no_redis(path: Path) -> None:
    bad = sorted(m for m in _imports(path) if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    assert bad == []
