"""The built wheel installs one top-level import package, ``vgpu_scheduler``, and nothing else into site-packages.

A distribution that shipped top-level packages named ``shared`` or ``services`` would clash with any other one using
those common names. The repository keeps its folders at the root (``shared/``, ``services/``) and links them into
``vgpu_scheduler/`` (docs/layout.md); the wheel holds them as a real tree, links resolved. This test builds the
wheel from a copy of the tree (so the build leaves nothing in the checkout) and reads what it would install.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DIST_INFO = "vgpu_scheduler-0.1.0.dist-info"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    pytest.importorskip("setuptools", minversion="70.1")
    pytest.importorskip("wheel")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("vgpu_scheduler", "shared", "services"):
        # symlinks=True keeps the package's links to the root's folders links, as in a clone
        shutil.copytree(REPO / name, src / name, symlinks=True, ignore=ignore)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("vgpu_scheduler-*.whl")
    return zipfile.ZipFile(built)


def test_one_top_level_import_package(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/", 1)[0] for name in wheel.namelist()}
    assert tops == {"vgpu_scheduler", DIST_INFO}
    assert wheel.read(f"{DIST_INFO}/top_level.txt").decode().split() == ["vgpu_scheduler"]


def test_every_module_of_the_tree_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    expected = {
        f"vgpu_scheduler/{path.relative_to(REPO).as_posix()}"
        for top in ("shared", "services")
        for path in (REPO / top).rglob("*")
        if path.suffix in (".py", ".lua") and "__pycache__" not in path.parts
    }
    assert expected, "found no sources to expect"
    assert sorted(expected - names) == []
    assert "vgpu_scheduler/__init__.py" in names
    assert not any(name.startswith(("shared/", "services/", "tests/", "benchmarks/")) for name in names)


def test_console_scripts_point_into_the_package(wheel: zipfile.ZipFile) -> None:
    entry_points = wheel.read(f"{DIST_INFO}/entry_points.txt").decode()
    assert "vgpu-scheduler = vgpu_scheduler.services.cli:main" in entry_points
    assert "kubectl-vgpu = vgpu_scheduler.services.inspect.command:kubectl_main" in entry_points


def test_the_wheel_is_a_real_tree_without_links(wheel: zipfile.ZipFile) -> None:
    """What pip installs is plain folders and files, readable by any tool; the repository's links end at the build."""
    links = [info.filename for info in wheel.infolist() if stat.S_ISLNK(info.external_attr >> 16)]
    assert links == []
    assert "vgpu_scheduler/shared/__init__.py" in wheel.namelist()
    assert "vgpu_scheduler/services/__init__.py" in wheel.namelist()
