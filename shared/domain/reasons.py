"""Why a node was rejected, as data and as HAMi's ``GenReason`` text (hami-wire §6.6)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from vgpu_scheduler.shared.domain.model import Reason

_R = TypeVar("_R", bound=Reason | str)


def gen_reason(counts: Mapping[_R, int], total: int) -> str:
    """HAMi's ``GenReason``: ``"<count>/<total> <Reason>"`` per reason, sorted as strings, joined with ``", "``.

    ``total`` is the number of devices Fit considered. Reasons counted 0 times are left out. A reason is a
    :class:`Reason` or another vendor's plain word; ``shared.codec.reasons.gen_reason`` checks the words first.
    """
    return ", ".join(
        sorted(f"{n}/{total} {r.value if isinstance(r, Reason) else r}" for r, n in counts.items() if n > 0)
    )


@dataclass(frozen=True, slots=True)
class NodeRejection:
    """One node's refusal of a pod: the first container that did not fit, and why.

    Either ``plain`` is set (a node-level reason such as ``NodeInsufficientDevice``), or ``counts`` holds how
    many of the ``total`` devices Fit considered failed each check.
    """

    node: str
    counts: Mapping[Reason, int] = field(default_factory=dict)
    total: int = 0
    plain: Reason | None = None
    container_index: int | None = None
    entry_index: int | None = None
    """The request entry that failed when a container asks several vendors (``PodRequest.owners``); None when
    entries are containers."""
    search_capped: bool = False
    """The greedy walk failed and ``assignment.search`` stopped at its bound before finding an assignment or
    proving there is none (the reasons are the greedy walk's)."""

    @property
    def text(self) -> str:
        """The ``FailedNodes`` value for this node: the plain reason, or the ``GenReason`` string."""
        if self.plain is not None:
            return self.plain.value
        return gen_reason(self.counts, self.total) or Reason.NODE_UNFIT_POD.value
