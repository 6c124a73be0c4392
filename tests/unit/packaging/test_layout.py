"""The repository's layout: one import package, ``vgpu_scheduler``, whose two subpackages are the top-level folders
``shared/`` and ``services/``, linked in by exactly two relative symbolic links (docs/layout.md).

Each reader the project's gates rely on must see the same, whole tree under the import names: Python's own
import system (``pkgutil``), import-linter's graph (grimp) and mypy's module discovery. A module a reader misses is
checked less without a word (mypy does not type-check it, the import contracts do not cover it); a build mapping
such as setuptools' ``package-dir`` leaves all three nothing but ``vgpu_scheduler/__init__.py`` (imports still work,
through its import hook).
"""

from __future__ import annotations

import os
import pkgutil
import re
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
    folder = "|".join(FOLDERS)
    module = rf"(?:{folder})(?:\.[\w.]+)?"
    by_own_name = re.compile(
        rf"^[ \t]*(?:from[ \t]+{module}[ \t]+import\b|import[ \t]+(?:[\w.]+[ \t]*,[ \t]*)*{module}[ \t]*(?:$|,|as\b))",
        re.M,
    )
    offenders = [
        f"{path.relative_to(REPO)}: {match.group(0).strip()}"
        for top in (*FOLDERS, "tests", "benchmarks", "scripts", "deploy")
        for path in (REPO / top).rglob("*.py")
        for match in by_own_name.finditer(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
    assert by_own_name.search("from shared.domain import model") and by_own_name.search("    import os, services.cli")
    for fine in (
        "from vgpu_scheduler.shared import x",
        "import sharedx",
        "    from shared memory, the",
        "import services that",
    ):
        assert not by_own_name.search(fine), fine
