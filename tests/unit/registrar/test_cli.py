"""``vgpu-scheduler registrar``: the subcommand exists and its ``--help`` documents every flag it takes."""

from __future__ import annotations

import pytest

from vgpu_scheduler.services import cli
from vgpu_scheduler.services.registrar.service import label_selector
from vgpu_scheduler.shared.config import Service, options_for, settings_for


def test_registrar_is_a_subcommand() -> None:
    assert "vgpu_scheduler.services.registrar.command" in cli.SUBCOMMANDS


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["registrar", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    options = options_for(Service.REGISTRAR)
    for name in ("redis-url", "kube-server", "node-label-selector", "lease-ttl", "metrics-bind-address"):
        assert name in {o.name for o in options}
    missing = [o.flag for o in options if o.flag not in text or o.env_var not in text]
    assert missing == []
    assert "--http_bind" not in text  # an extender flag


def test_missing_redis_url_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["registrar", "--kube-server", "http://127.0.0.1:1"]) == 2
    assert "--redis-url is required by registrar" in capsys.readouterr().err


def test_flags_reach_the_settings() -> None:
    s = settings_for(
        Service.REGISTRAR,
        ["--redis-url", "redis://x", "--lease-ttl", "3s", "--node-label-selector", "gpu=on,zone=a"],
        {},
    )
    assert s.lease_ttl_s == 3.0
    assert label_selector(s.node_label_selector) == "gpu=on,zone=a"
    assert label_selector(()) is None
