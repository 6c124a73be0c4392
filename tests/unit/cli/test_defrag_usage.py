"""``vgpu-scheduler defrag plan``'s usage errors: exit status 2 and one line saying what goes with what, before
anything is read (no Redis, no API server needed)."""

from __future__ import annotations

import pytest

from vgpu_scheduler.services.cli import main

CASES = [
    (["--for", "a/b", "--type", "A100"], "--type goes with --free-cards"),
    (["--for", "a/b", "--node", "x"], "--node and -l/--selector go with --free-cards or --free-nodes"),
    (["--free-cards", "1", "-n", "x"], "-n/--namespace goes with --for"),
    (["--free-cards", "1", "--node", "x", "-l", "a=b"], "give --node or -l/--selector, not both"),
    (["--free-cards", "0"], "expected a positive integer"),
    (["--free-nodes", "x"], "expected a positive integer"),
    (["--for", "a/b/c"], "--for: expected NAMESPACE/POD or POD"),
    (["--for", "a/b", "-n", "c"], "names namespace 'a' but -n says 'c'"),
    (["--free-cards", "1", "--workload", "w.yaml"], "--workload needs --cluster"),
    (["--free-cards", "1", "--free-nodes", "1"], "not allowed with argument"),
    (["--for", "a/b", "--execute", "--cluster", "c.yaml"], "--execute carries a plan out on the live cluster"),
    (["--for", "a/b", "--execute", "--wave-size", "0"], "expected a positive integer"),
    ([], "one of the arguments --for --free-cards --free-nodes is required"),
    (["--free-cards", "1"], "--redis-url is required to plan on the live cluster"),
    (
        ["--free-cards", "1", "--cluster", "c.yaml", "--redis-url", "redis://x"],
        "--redis-url does not apply with --cluster",
    ),
]


@pytest.mark.parametrize(("args", "message"), CASES, ids=[m for _, m in CASES])
def test_usage_errors_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VGPU_REDIS_URL", raising=False)
    with pytest.raises(SystemExit) as exited:
        code = main(["defrag", "plan", *args])
        raise SystemExit(code)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_defrag_alone_prints_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["defrag"]) == 2
    assert "plan" in capsys.readouterr().out
