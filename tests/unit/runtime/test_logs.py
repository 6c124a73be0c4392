"""Logging: JSON lines with context fields, readable text on a terminal, configured once."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
from collections.abc import Iterator

import pytest

from vgpu_scheduler.shared.config import LogFormat, LogLevel, settings_for
from vgpu_scheduler.shared.logs import (
    JsonFormatter,
    TextFormatter,
    _timestamp,
    configure_from_settings,
    configure_logging,
)


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def record(msg: str = "pod bound", **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("vgpu_scheduler.services.extender.bind", logging.INFO, __file__, 1, msg, (), None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_json_line_has_context_fields() -> None:
    line = JsonFormatter().format(record(pod="ns/p", pod_uid="u-1", node="n1", devices=["GPU-a"], reason=None))
    assert "\n" not in line
    obj = json.loads(line)
    assert obj["level"] == "info" and obj["msg"] == "pod bound"
    assert obj["logger"] == "vgpu_scheduler.services.extender.bind"
    assert (obj["pod"], obj["pod_uid"], obj["node"], obj["devices"], obj["reason"]) == (
        "ns/p",
        "u-1",
        "n1",
        ["GPU-a"],
        None,
    )
    assert obj["ts"].endswith("Z") and "T" in obj["ts"]


@pytest.mark.parametrize(
    "created",
    [1764000000.9999995, 1764000000.9999994, 1764000000.9995, 1764000001.0004999, 1764000001.0, 1.5, 1764000000.123456],
)
def test_timestamps_round_as_datetime_does(created: float) -> None:
    """UTC to the millisecond, from the microsecond datetime rounds to (half to even, carrying into the second)."""
    rec = record()
    rec.created = created
    when = dt.datetime.fromtimestamp(created, tz=dt.UTC)
    assert _timestamp(rec) == when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
    rec.created = created + 2.0  # another second after a cached one
    when = dt.datetime.fromtimestamp(created + 2.0, tz=dt.UTC)
    assert _timestamp(rec) == when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def test_json_exception_stays_on_one_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        import sys

        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    assert "ValueError: bad\nvalue" in json.loads(line)["exc"]


def test_json_unserialisable_values_are_stringified() -> None:
    obj = json.loads(JsonFormatter().format(record(level_obj=LogLevel.DEBUG)))
    assert obj["level_obj"] == "LogLevel.DEBUG"


def test_text_line_quotes_values_with_spaces() -> None:
    line = TextFormatter().format(record(pod="ns/p", reason="2/4 CardInsufficientMemory", count=3))
    assert line.endswith(
        'INFO    vgpu_scheduler.services.extender.bind: pod bound pod=ns/p reason="2/4 CardInsufficientMemory" count=3'
    )


@pytest.mark.usefixtures("restore_root")
@pytest.mark.parametrize(
    ("fmt", "stream_type", "json_expected"),
    [
        (LogFormat.AUTO, io.StringIO, True),
        (LogFormat.AUTO, Tty, False),
        (LogFormat.JSON, Tty, True),
        (LogFormat.TEXT, io.StringIO, False),
    ],
    ids=["auto-pipe", "auto-tty", "json", "text"],
)
def test_format_selection(fmt: LogFormat, stream_type: type[io.StringIO], json_expected: bool) -> None:
    stream = stream_type()
    configure_logging(fmt=fmt, level=LogLevel.INFO, stream=stream)
    logging.getLogger("vgpu.test").info("hello", extra={"node": "n1"})
    line = stream.getvalue().strip()
    if json_expected:
        assert json.loads(line)["node"] == "n1"
    else:
        assert line.endswith("vgpu.test: hello node=n1")


@pytest.mark.usefixtures("restore_root")
def test_configuring_twice_replaces_the_handler_and_sets_levels() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(fmt=LogFormat.JSON, level=LogLevel.INFO, stream=first)
    configure_logging(fmt=LogFormat.JSON, level=LogLevel.WARNING, stream=second)
    log = logging.getLogger("vgpu.test")
    log.info("dropped")
    log.warning("kept")
    assert first.getvalue() == ""
    assert [json.loads(x)["msg"] for x in second.getvalue().splitlines()] == ["kept"]
    configure_logging(fmt=LogFormat.JSON, level=LogLevel.DEBUG, stream=second)
    assert logging.getLogger("kubernetes_asyncio").getEffectiveLevel() == logging.INFO


@pytest.mark.usefixtures("restore_root")
def test_configure_from_settings_logs_device_config_notes(tmp_path: pytest.TempPathFactory) -> None:
    import pathlib

    path = pathlib.Path(str(tmp_path)) / "dc.yaml"
    path.write_text("nvidia:\n  deviceSplitCount: 10\n")
    settings = settings_for("simulate", [f"--device-config-file={path}", "--debug", "--log-format=json"], {})
    stream = io.StringIO()
    configure_from_settings(settings.common, stream=stream)
    assert logging.getLogger().level == logging.DEBUG
    (line,) = stream.getvalue().splitlines()
    obj = json.loads(line)
    assert obj["msg"] == "device config entry not used"
    assert obj["note"] == "nvidia.deviceSplitCount: device-plugin key, ignored by the scheduler"
    assert obj["file"] == str(path)
