"""``vgpu-scheduler simulate`` / ``emulator`` flag and input errors: one line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from vgpu_scheduler.services import cli


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    err = capsys.readouterr().err
    return code, err


def assert_one_line_error(err: str, fragment: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("vgpu-scheduler: error: "), err
    assert fragment in lines[0], err
    assert "Traceback" not in err


def test_subcommands_are_registered() -> None:
    assert "vgpu_scheduler.services.simulate.command" in cli.SUBCOMMANDS
    assert "vgpu_scheduler.services.allinone.command" in cli.SUBCOMMANDS


def test_a_bad_cluster_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "cluster.yaml"
    bad.write_text(
        "kind: Node\nmetadata: {name: n1}\n---\nkind: Node\nmetadata: {name: n2, labels: []}\n", encoding="utf-8"
    )
    code, err = run_cli(capsys, "simulate", "--cluster", str(bad))
    assert code == 2
    assert_one_line_error(err, f"{bad}: document 2: metadata.labels: expected a mapping, got a list")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        pytest.param(["--extender-url=http://x"], "--extender-url needs --kube-server", id="extender-without-kube"),
        pytest.param(["--kube-server=http://x"], "--kube-server needs at least one --extender-url", id="kube-alone"),
        pytest.param(
            ["--kube-server=http://x", "--extender-url=http://y", "--compare"],
            "--compare does not apply with --kube-server",
            id="compare-external",
        ),
        pytest.param(["--policies=binpack"], "--policies: expected NODE/GPU", id="policies"),
        pytest.param(["--gpu-scheduler-policy=best"], "--gpu-scheduler-policy", id="table-flag"),
        pytest.param(
            ["--workload=/nonexistent/w.yaml", "--gpu-scheduler-policy=binpack"],
            "/nonexistent/w.yaml: no such file",
            id="missing-workload",
        ),
    ],
)
def test_flag_errors(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(capsys, "simulate", *argv)
    assert code == 2
    assert_one_line_error(err, fragment)


def test_plot_without_matplotlib_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.import_module

    def fake(name: str, *args: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", fake)
    code, err = run_cli(capsys, "simulate", "--plot", str(tmp_path / "charts"))
    assert code == 2
    assert_one_line_error(err, "--plot needs matplotlib, which is not installed: pip install matplotlib")


def test_emulator_bad_bind_and_bad_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(capsys, "emulator", "--bind", "nowhere")
    assert code == 2
    assert_one_line_error(err, "--bind: expected host:port")
    missing = tmp_path / "none.yaml"
    code, err = run_cli(capsys, "emulator", "--cluster", str(missing), "--bind", "127.0.0.1:0")
    assert code == 2
    assert_one_line_error(err, f"{missing}: no such file")
