"""Filter failure reasons, HAMi's ``GenReason`` / ``ParseReason`` (hami-wire §6.6).

Each reason becomes ``"<count>/<devices considered> <Reason>"``; the entries are sorted as strings and joined
with ``", "``: ``2/4 CardInsufficientMemory, 2/4 CardNotHealth``. Reasons are the :class:`Reason` values or other
vendors' plain words; a reason may not contain whitespace or ``,``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from vgpu_scheduler.shared.codec._go import fail
from vgpu_scheduler.shared.domain import reasons as domain_reasons
from vgpu_scheduler.shared.domain.model import Reason

WHAT = "filter reason"
_R = TypeVar("_R", bound=Reason | str)
_ENTRY_RE = re.compile(r"(?P<count>[0-9]{1,18})/(?P<total>[0-9]{1,18}) (?P<reason>[^\s,]+)\Z")


@dataclass(frozen=True, slots=True)
class ReasonCount:
    """One ``<count>/<total> <reason>`` entry."""

    reason: str
    count: int
    total: int

    @property
    def known(self) -> Reason | None:
        """The reason as the :class:`Reason` enum when it is one of HAMi's NVIDIA reasons."""
        try:
            return Reason(self.reason)
        except ValueError:
            return None


def gen_reason(counts: Mapping[_R, int], total: int) -> str:
    """Encode per-reason device counts over ``total`` devices considered, after checking that each reason is a word
    :func:`parse_reason` can read back and each count fits; the text is the domain's
    :func:`shared.domain.reasons.gen_reason` (reasons counted 0 times are left out; none left gives ``""``)."""
    for reason, count in counts.items():
        word = reason.value if isinstance(reason, Reason) else reason
        if not word or any(c.isspace() or c == "," for c in word):
            fail(WHAT, "a reason must be a non-empty word without spaces or ','", word)
        if not (0 <= count < 10**18 and 0 <= total < 10**18):
            fail(WHAT, "counts must be in 0..10^18-1", word)
    return domain_reasons.gen_reason(counts, total)


def parse_reason(text: str) -> tuple[ReasonCount, ...]:
    """Decode a ``GenReason`` string (``""`` gives no entries); anything else, e.g. a plain message such as
    ``node unregistered``, is a DecodeError."""
    if text == "":
        return ()
    out = []
    for entry in text.split(", "):
        m = _ENTRY_RE.match(entry)
        if m is None:
            fail(WHAT, "expected '<count>/<total> <Reason>'", entry)
        out.append(ReasonCount(m["reason"], int(m["count"]), int(m["total"])))
    return tuple(out)
