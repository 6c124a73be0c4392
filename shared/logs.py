"""Logging set-up for a process: one JSON object per line, or readable text on a terminal.

Only composition roots (``__main__``, ``run(args)``) call :func:`configure_logging`; libraries just do
``logger = logging.getLogger(__name__)`` and log constant messages with context in ``extra=``::

    logger.info("pod bound", extra={"pod": "ns/name", "pod_uid": uid, "node": node, "devices": ids})

Every ``extra`` field becomes a top-level JSON key (or ``key=value`` in text).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import sys
from collections.abc import Mapping
from typing import TextIO

from vgpu_scheduler.shared.config.settings import CommonSettings
from vgpu_scheduler.shared.config.values import LogFormat, LogLevel

logger = logging.getLogger(__name__)

_LEVELS: Mapping[LogLevel, int] = {
    LogLevel.DEBUG: logging.DEBUG,
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
}

# LogRecord attributes that are not context fields.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}

# Libraries that are chatty at DEBUG: kept at INFO or above so --debug shows our decisions, not their internals.
_QUIET_LIBRARIES = ("aiohttp.access", "kubernetes_asyncio", "asyncio", "urllib3")

_HANDLER_MARK = "_vgpu_handler"


def python_level(level: LogLevel) -> int:
    """The ``logging`` module's number for a :class:`LogLevel`."""
    return _LEVELS[level]


def context_fields(record: logging.LogRecord) -> dict[str, object]:
    """The ``extra=`` fields of a record, in insertion order."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}


_second: tuple[int, str] = (-1, "")
"""The last whole second formatted by :func:`_timestamp` and its text up to the milliseconds."""


def _timestamp(record: logging.LogRecord) -> str:
    """``record.created`` in UTC to the millisecond, as ``datetime.fromtimestamp`` rounds it (to the nearest
    microsecond, half to even); the text of each second is made once."""
    global _second
    fraction, whole = math.modf(record.created)
    us = round(fraction * 1e6)
    second = int(whole) + us // 1_000_000
    us %= 1_000_000
    if second != _second[0]:
        when = dt.datetime.fromtimestamp(second, tz=dt.UTC)
        _second = (second, when.strftime("%Y-%m-%dT%H:%M:%S."))
    return f"{_second[1]}{us // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, the context fields, and ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in context_fields(record).items():
            out.setdefault(key, value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = record.stack_info
        return json.dumps(out, default=str, ensure_ascii=False, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``<ts> LEVEL logger: msg key=value ...`` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"]
        for key, value in context_fields(record).items():
            text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
            if not text or any(c.isspace() or c in '"=' for c in text):
                text = json.dumps(text, ensure_ascii=False)
            parts.append(f"{key}={text}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + record.stack_info
        return line


def configure_logging(
    *, fmt: LogFormat = LogFormat.AUTO, level: LogLevel = LogLevel.INFO, stream: TextIO | None = None
) -> logging.Handler:
    """Install one handler on the root logger (replacing one installed before); return it.

    ``auto`` picks text when ``stream`` is a terminal, JSON otherwise. Chatty libraries stay at INFO or above.
    """
    target = stream if stream is not None else sys.stderr
    if fmt is LogFormat.AUTO:
        fmt = LogFormat.TEXT if _isatty(target) else LogFormat.JSON
    # Neither format shows the caller, thread or process: the logging HOWTO's "Optimization" switches skip
    # collecting them for every record (a frame walk, the current thread, the process id).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(target)
    handler.setFormatter(TextFormatter() if fmt is LogFormat.TEXT else JsonFormatter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    numeric = python_level(level)
    root.setLevel(numeric)
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(numeric, logging.INFO))
    return handler


def configure_from_settings(common: CommonSettings, *, stream: TextIO | None = None) -> logging.Handler:
    """Configure logging from a service's settings, then log what the device config file left unused."""
    handler = configure_logging(fmt=common.log_format, level=common.effective_log_level, stream=stream)
    for note in common.device_config_notes:
        logger.info("device config entry not used", extra={"file": common.device_config_file, "note": note})
    return handler


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
