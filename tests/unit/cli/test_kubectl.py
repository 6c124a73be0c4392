"""``kubectl-vgpu`` (issue 23 item 8): run as ``kubectl vgpu …``, it names itself ``kubectl vgpu`` in its usage and
error lines, as kubectl plugins do, never ``vgpu-scheduler``."""

from __future__ import annotations

import pytest

from vgpu_scheduler.services.inspect.command import kubectl_main


@pytest.fixture(autouse=True)
def _no_vgpu_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VGPU_REDIS_URL", raising=False)
    monkeypatch.delenv("VGPU_CONFIG", raising=False)


def test_an_argument_error_names_kubectl_vgpu(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        kubectl_main(["usage", "-o", "yaml"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kubectl vgpu usage ")
    assert err.splitlines()[-1].startswith("kubectl vgpu usage: error: argument -o/--output: invalid choice: 'yaml'")


def test_an_unknown_flag_names_kubectl_vgpu(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        kubectl_main(["usage", "--bogus"])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == "kubectl vgpu: error: unrecognized arguments: --bogus"


def test_a_config_error_names_kubectl_vgpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_main(["usage"]) == 2
    assert capsys.readouterr().err.startswith("kubectl vgpu: error: --redis-url is required by usage")


def test_a_failure_names_kubectl_vgpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_main(["usage", "--redis-url", "redis://127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kubectl vgpu usage: error: cannot reach Redis at redis://127.0.0.1:1"), err
    assert "vgpu-scheduler" not in err


def test_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_main([]) == 2
    err = capsys.readouterr().err
    assert err == "kubectl vgpu: error: expected a command: explain NAMESPACE/POD, usage, or defrag plan\n"


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: kubectl vgpu {explain NAMESPACE/POD | usage | defrag plan}")


def test_defrag_plan_is_a_kubectl_vgpu_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        kubectl_main(["defrag", "plan", "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("usage: kubectl vgpu defrag plan ")


def test_explain_help_is_kubectl_vgpu_explain(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        kubectl_main(["explain", "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("usage: kubectl vgpu explain ")
