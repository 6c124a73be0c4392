"""docs/config.md lists every option (generated), and the console script turns ConfigError into exit 2."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

import vgpu_scheduler.services.cli as cli
from vgpu_scheduler.shared.config import OPTIONS, Service, add_service_parser, settings_from_args
from vgpu_scheduler.shared.config.doc import render_options_markdown, replace_generated_block


def test_docs_config_md_is_generated_from_the_option_table(repo_root: Path) -> None:
    doc = (repo_root / "docs" / "config.md").read_text()
    assert replace_generated_block(doc) == doc, "docs/config.md is stale: run python scripts/gen_config_doc.py"
    for option in OPTIONS:
        assert f"`{option.flag}`" in doc and f"`{option.env_var}`" in doc


def test_generated_block_has_one_row_per_option() -> None:
    rows = [line for line in render_options_markdown().splitlines() if line.startswith("| `")]
    assert len(rows) == len(OPTIONS)


def test_gen_config_doc_check_mode(repo_root: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(repo_root / "scripts" / "gen_config_doc.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=repo_root,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


# A stand-in subcommand module, registered through cli.SUBCOMMANDS like the real services.
def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_service_parser(subparsers, Service.EXTENDER).set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(Service.EXTENDER, args, {})
    print(f"bind={settings.http_bind} lock={settings.node_lock_timeout_s}")
    return 0


@pytest.fixture
def fake_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "SUBCOMMANDS", (__name__,))


@pytest.mark.usefixtures("fake_cli")
def test_cli_runs_a_subcommand_with_hami_spellings(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["extender", "--redis-url=redis://h:1", "--http-bind=:8443", "--node_lock_timeout=1m"])
    assert code == 0
    assert capsys.readouterr().out == "bind=:8443 lock=60.0\n"


@pytest.mark.usefixtures("fake_cli")
def test_cli_config_error_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["extender", "--redis-url=redis://h:1", "--kube-burst=lots"])
    assert code == 2
    err = capsys.readouterr().err
    assert err == "vgpu-scheduler: error: --kube-burst: expected a non-negative integer, got 'lots'\n"


@pytest.mark.usefixtures("fake_cli")
def test_cli_missing_redis_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["extender"]) == 2
    assert capsys.readouterr().err.startswith("vgpu-scheduler: error: --redis-url is required by extender")


def test_cli_without_a_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: vgpu-scheduler" in capsys.readouterr().out


def test_version_comes_from_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.metadata

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"vgpu-scheduler {importlib.metadata.version('vgpu-scheduler')}\n"


def test_version_of_an_uninstalled_tree_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert cli.version() == "unknown (package not installed)"
