"""The control-plane suite without ``KUBEBUILDER_ASSETS``: skipped with its one-line reason on a user's clone,
failed under CI (``CI=true``), which must never pass without having run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ONE_TEST = "tests/controlplane/test_fixture.py::test_unauthenticated_request_is_refused"


def run_without_assets(ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBEBUILDER_ASSETS", "CI")}
    if ci is not None:
        env["CI"] = ci
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", ONE_TEST]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=100, check=False)


@pytest.mark.parametrize("ci", [None, "false"])
def test_without_assets_the_suite_skips_with_the_install_command(ci: str | None) -> None:
    done = run_without_assets(ci)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    assert "scripts/install-control-plane.sh .cache/k8s" in done.stdout


def test_under_ci_without_assets_the_suite_fails() -> None:
    done = run_without_assets("true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 error" in done.stdout and "skipped" not in done.stdout
    assert "CI=true and KUBEBUILDER_ASSETS is unset" in done.stdout
