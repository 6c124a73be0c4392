"""``hami.io/mutex.lock``: the node lock value (hami-wire §4.1, HAMi ``pkg/util/nodelock``).

Current format ``<RFC3339>,<pod namespace>,<pod name>`` (e.g. ``2025-01-23T10:00:00+08:00,default,gpu-pod-1``),
the time being Go ``time.Now().Format(time.RFC3339)`` in the writer's local zone. Legacy format: the time alone.
As ``ParseNodeLock``: no comma means legacy; otherwise exactly three comma parts, else an error.

RFC 3339 is read as Go's ``time.Parse(time.RFC3339, …)`` reads it: ``T`` and ``Z`` upper-case, an optional
fractional second (kept to the microsecond), offsets ``Z`` or ``±hh:mm``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import fail

WHAT = keys.NODE_LOCK

_RFC3339_RE = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})T(?P<h>[0-9]{1,2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})"
    r"(?:[.,](?P<frac>[0-9]+))?(?:(?P<z>Z)|(?P<sign>[+-])(?P<oh>[0-9]{2}):(?P<om>[0-9]{2}))\Z"
)


@dataclass(frozen=True, slots=True)
class NodeLock:
    """A decoded lock: when it was taken (aware datetime) and by which pod (``None`` for a legacy lock)."""

    at: datetime
    namespace: str | None = None
    name: str | None = None

    @property
    def legacy(self) -> bool:
        return self.namespace is None

    def owned_by(self, namespace: str, name: str) -> bool:
        """HAMi's release owner check: a current-format lock naming exactly this pod."""
        return self.namespace == namespace and self.name == name


def parse_rfc3339(text: str, what: str = WHAT) -> datetime:
    """Go ``time.Parse(time.RFC3339, text)`` into an aware datetime."""
    m = _RFC3339_RE.match(text)
    if m is None:
        fail(what, "not an RFC 3339 time", text)
    if m["z"]:
        tz = UTC
    else:
        oh, om = int(m["oh"]), int(m["om"])
        if oh > 23 or om > 59:
            fail(what, "time zone offset out of range", text)
        offset = timedelta(hours=oh, minutes=om)
        tz = timezone(-offset if m["sign"] == "-" else offset)
    micro = int((m["frac"] or "0")[:6].ljust(6, "0"))
    try:
        return datetime(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), micro, tz)
    except ValueError as e:
        fail(what, f"time out of range: {e}", text)


def format_rfc3339(at: datetime) -> str:
    """Go ``t.Format(time.RFC3339)``: whole seconds, ``Z`` for a zero offset, else ``±hh:mm``.

    Pass the local time as an aware datetime (``datetime.now().astimezone()``), which is what HAMi writes.
    """
    offset = at.utcoffset()
    if offset is None:
        raise ValueError("format_rfc3339 needs an aware datetime")
    if not 0 <= at.year <= 9999:
        raise ValueError("year outside 0..9999")
    stamp = f"{at.year:04d}-{at.month:02d}-{at.day:02d}T{at.hour:02d}:{at.minute:02d}:{at.second:02d}"
    seconds = int(offset.total_seconds())
    if seconds == 0:
        return stamp + "Z"
    minutes = abs(seconds) // 60
    return f"{stamp}{'-' if seconds < 0 else '+'}{minutes // 60:02d}:{minutes % 60:02d}"


def parse_node_lock(value: str) -> NodeLock:
    """Decode a lock value; DecodeError when it is neither a legacy time nor exactly ``time,ns,name``."""
    if "," not in value:
        return NodeLock(parse_rfc3339(value))
    parts = value.split(",")
    if len(parts) != 3:
        fail(WHAT, f"malformed lock: expected 3 comma-separated parts, got {len(parts)}", value)
    return NodeLock(parse_rfc3339(parts[0]), parts[1], parts[2])


def encode_node_lock(at: datetime, namespace: str | None = None, name: str | None = None) -> str:
    """``<RFC3339>,<ns>,<name>``; without namespace and name the legacy time-only value.

    ``at`` must be aware (the writer's local zone, as HAMi writes it). Raises DecodeError when namespace or
    name is empty or contains ``,``.
    """
    stamp = format_rfc3339(at)
    if namespace is None and name is None:
        return stamp
    for part in (namespace, name):
        if not part or "," in part:
            fail(WHAT, "cannot encode an empty namespace/name or one containing ','", part)
    return f"{stamp},{namespace},{name}"
