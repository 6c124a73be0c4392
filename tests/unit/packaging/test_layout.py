"""The repository's layout: one import package, ``vgpu_scheduler``, whose two subpackages are the top-level folders
``shared/`` and ``services/``, linked in by exactly two relative symbolic links (docs/layout.md).

Each reader the project's gates rely on must see the same, whole tree under the import names: Python's own
import system (``pkgutil``), import-linter's graph (grimp) and mypy's module discovery. A reader that saw only
``vgpu_scheduler/__init__.py`` would pass silently (mypy checking nothing under the package, import contracts
checked on an empty graph), which is what a build mapping such as setuptools' ``package-dir`` does to the last two.
"""

from __future__ import annotations

import ast
import os
import pkgutil
import shutil
import subprocess
from pathlib import Path

import grimp
import pytest
from mypy import config_parser
from mypy.find_sources import create_source_list
from mypy.fscache import FileSystemCache
from mypy.options import Options

import vgpu_scheduler

REPO = Path(__file__).resolve().parents[3]
FOLDERS = ("shared", "services")
PACKAGE = "vgpu_scheduler"


def tree_modules() -> set[str]:
    """Every module the top-level folders hold, named as the code imports it."""
    modules = {PACKAGE}
    for folder in FOLDERS:
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules.add(".".join((PACKAGE, *parts)))
    return modules


def test_the_top_level_folders_are_real_folders() -> None:
    for folder in FOLDERS:
        assert (REPO / folder).is_dir() and not (REPO / folder).is_symlink(), folder
        assert (REPO / folder / "__init__.py").is_file(), folder


def test_the_package_links_are_relative_and_point_at_the_top_level_folders() -> None:
    package = REPO / PACKAGE
    assert not package.is_symlink()
    for folder in FOLDERS:
        link = package / folder
        assert link.is_symlink(), f"{link} is not a link"
        # relative, so a clone anywhere (and a copy of the tree) resolves it
        assert os.readlink(link) == f"../{folder}"
        assert link.resolve() == (REPO / folder).resolve()


def test_the_package_links_are_the_only_links_in_the_repository() -> None:
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listing = subprocess.run(
        [git, "-C", str(REPO), "ls-files", "--stage"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    # mode 120000 is git's symbolic link
    links = sorted(line.split("\t", 1)[1] for line in listing.splitlines() if line.startswith("120000 "))
    assert links == [f"{PACKAGE}/{folder}" for folder in sorted(FOLDERS)]


def test_python_imports_every_module_of_the_tree() -> None:
    walked = {PACKAGE} | {m.name for m in pkgutil.walk_packages(vgpu_scheduler.__path__, f"{PACKAGE}.")}
    assert walked == tree_modules()


def test_import_linter_graph_holds_every_module_of_the_tree() -> None:
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    assert graph.modules == tree_modules()
    # and it reads their imports: the extender imports the planner
    assert graph.direct_import_exists(
        importer=f"{PACKAGE}.services.extender.filter", imported=f"{PACKAGE}.shared.domain.plan", as_packages=True
    )


def test_mypy_checks_every_module_of_the_tree_under_its_import_name() -> None:
    options = Options()
    config_parser.parse_config_file(options, lambda: None, str(REPO / "pyproject.toml"), None, None)
    assert options.files is not None and PACKAGE in options.files
    sources = create_source_list([str(REPO / PACKAGE)], options, FileSystemCache())
    assert {source.module for source in sources} == tree_modules()


def test_nothing_imports_the_top_level_folders_by_their_own_names() -> None:
    """The repository's root is on sys.path when pytest or ``python -m`` runs from it, so ``import shared.x``
    would work, and load a second copy of a module already loaded as ``vgpu_scheduler.shared.x``."""
    offenders = []
    for top in (*FOLDERS, "tests", "benchmarks", "scripts", "deploy"):
        for path in (REPO / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] in FOLDERS]
    assert offenders == []
