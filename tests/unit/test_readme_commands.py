"""The README's commands run from a fresh clone as written (issue 23 item 8): the README creates ``.venv`` and calls
its programs by path (``.venv/bin/python``, ``.venv/bin/vgpu-scheduler``), so no command may call a bare
``python`` (on many systems there is none, or it is not the virtual environment's)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BARE_PYTHON = re.compile(r"(?<![\w./-])python3?(?= )(?! -m venv)")


def bare_python_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if BARE_PYTHON.search(line)]


@pytest.mark.parametrize("name", ["README.md", "docs/controlplane.md"])
def test_commands_call_the_virtual_environments_python(name: str) -> None:
    assert bare_python_lines((REPO / name).read_text(encoding="utf-8")) == []


def test_the_check_catches_a_bare_python() -> None:
    assert bare_python_lines("KUBEBUILDER_ASSETS=x python -m benchmarks.bench_cluster\n`python3 -m a`") == [
        "KUBEBUILDER_ASSETS=x python -m benchmarks.bench_cluster",
        "`python3 -m a`",
    ]
    assert bare_python_lines("python3 -m venv .venv && .venv/bin/python -m x; /usr/bin/python3 -c 1") == []
