"""``hami.io/node-handshake``: the liveness handshake between scheduler and ≤ v2.7 device plugins (hami-wire §2.2).

Values: ``Requesting_<2006-01-02 15:04:05>`` (scheduler, its *local* time), ``Deleted_<same layout>`` (scheduler
≤ v2.9, node judged dead), ``Reported <Go time.Time.String()>`` (device plugin ≤ v2.7). v2.4 wrote the scheduler
times with the layout ``2006.01.02 15:04:05``; both layouts are read, the dashed one is written.

Parsing is strict: anything else is a DecodeError. (HAMi itself treats a value that merely *contains*
``Requesting`` but carries no parsable time as "requested just now, healthy"; a caller wanting that quirk can
check ``"Requesting" in value`` on DecodeError.)
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import fail

WHAT = keys.NODE_HANDSHAKE


class HandshakeKind(enum.Enum):
    """Which party wrote the value, by its prefix."""

    REQUESTING = "Requesting_"
    REPORTED = "Reported "
    DELETED = "Deleted_"


@dataclass(frozen=True, slots=True)
class Handshake:
    """A decoded handshake value.

    ``at`` is a *naive* datetime in the scheduler's local time for ``REQUESTING``/``DELETED`` (that is how HAMi
    writes and reads it), and an *aware* datetime for ``REPORTED`` (Go's ``Time.String`` carries the offset).
    """

    kind: HandshakeKind
    at: datetime


# Go time.Parse with layout 2006-01-02 15:04:05 (or 2006.01.02 15:04:05): fixed-width fields except the hour,
# and an optional fractional second that Parse accepts even though the layout has none.
_LOCAL_RE = re.compile(
    r"(?P<y>[0-9]{4})(?P<sep>[-.])(?P<mo>[0-9]{2})(?P=sep)(?P<d>[0-9]{2}) "
    r"(?P<h>[0-9]{1,2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})(?:[.,](?P<frac>[0-9]+))?\Z"
)
# Go time.Time.String(): 2006-01-02 15:04:05.999999999 -0700 MST, then " m=±<monotonic>" when present.
_REPORTED_RE = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2}) (?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})"
    r"(?:\.(?P<frac>[0-9]{1,9}))? (?P<sign>[+-])(?P<oh>[0-9]{2})(?P<om>[0-9]{2}) (?P<zone>[^ ]+)"
    r"(?: m=[+-][0-9]+\.[0-9]{9})?\Z"
)


def _micro(frac: str | None) -> int:
    return int((frac or "0")[:6].ljust(6, "0"))


def _build(m: re.Match[str], tz: timezone | None, value: str) -> datetime:
    try:
        return datetime(
            int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), _micro(m["frac"]), tz
        )
    except ValueError as e:  # month 13, day 31 in April, hour 24, second 60 ...: Go rejects them too
        fail(WHAT, f"time out of range: {e}", value)


def parse_handshake(value: str) -> Handshake:
    """Decode a handshake value; raises DecodeError for anything that is not one of the three forms."""
    for kind in (HandshakeKind.REQUESTING, HandshakeKind.DELETED):
        if value.startswith(kind.value):
            rest = value[len(kind.value) :]
            m = _LOCAL_RE.match(rest)
            if m is None:
                fail(WHAT, f"{kind.value} not followed by a '2006-01-02 15:04:05' time", value)
            return Handshake(kind, _build(m, None, value))
    if value.startswith(HandshakeKind.REPORTED.value):
        rest = value[len(HandshakeKind.REPORTED.value) :]
        m = _REPORTED_RE.match(rest)
        if m is None:
            fail(WHAT, "Reported not followed by a Go time string", value)
        offset = timedelta(hours=int(m["oh"]), minutes=int(m["om"]))
        if offset >= timedelta(hours=24):
            fail(WHAT, "zone offset out of range", value)
        tz = timezone(-offset if m["sign"] == "-" else offset)
        return Handshake(HandshakeKind.REPORTED, _build(m, tz, value))
    fail(WHAT, "not a Requesting_/Reported/Deleted_ handshake value", value)


def _format_local(kind: HandshakeKind, now: datetime) -> str:
    if now.tzinfo is not None:
        raise ValueError("handshake times are naive local datetimes (Go time.Local); got an aware datetime")
    return f"{kind.value}{now.year:04d}-{now.month:02d}-{now.day:02d} {now.hour:02d}:{now.minute:02d}:{now.second:02d}"


def format_requesting(now: datetime) -> str:
    """``Requesting_<2006-01-02 15:04:05>`` from a naive local datetime (fractions dropped, as Go's layout does)."""
    return _format_local(HandshakeKind.REQUESTING, now)


def format_deleted(now: datetime) -> str:
    """``Deleted_<2006-01-02 15:04:05>`` (what ≤ v2.9 schedulers wrote for a dead node; for tests and simulation)."""
    return _format_local(HandshakeKind.DELETED, now)
