"""How many binds may be in flight on one node before ``/filter`` passes over it: as many as the node's lock can
serve within most of a bind's lock wait, ``--max-binds-per-node`` at most.

HAMi's device plugin finds the pod it allocates through the node lock, so a node's binds run one after another,
each holding the lock for a whole *cycle* (the Binding, the kubelet's Allocate, the plugin's release). A bind that
queues behind ``n`` others waits about ``n`` cycles, and fails when that exceeds its lock wait (``--bind-timeout``
less the time its API calls need). How long a cycle takes is not a setting: it grows with the API server's load and
the device plugin's latency. So the limit is computed from cycles as they are measured:

* every replica sees every lock taken and released on the store's change feed; the time between the two is one
  cycle (:meth:`BindLimit.observe_cycle`), averaged (exponentially, ``CYCLE_WEIGHT``) with its variance: a queue
  is a sum of cycles, so it is planned on the average plus one deviation (a few slow Allocates shorten it);
* a pod reserved on a node by ``/filter`` reaches the node's lock only when kube-scheduler's asynchronous binding
  cycle calls ``/bind``: the *dispatch* delay, measured from the reservation to the bind's first try for the lock
  (:meth:`BindLimit.reserved`, :meth:`BindLimit.queued`; pods whose filter and bind reach different replicas are
  not measured), and averaged the same way. Meanwhile the lock serves ``dispatch ÷ cycle`` of the binds ahead;
* so a pod admitted behind ``n`` binds in flight waits about ``n × cycle − dispatch``, and the limit is
  ``1 + ⌊(QUEUE_SHARE × lock wait + dispatch) ÷ (cycle + deviation)⌋``, between 1 and ``--max-binds-per-node``: a bind
  admitted behind a full queue waits at most that share of its budget;
* a bind that gave up waiting shows that cycles are longer than measured (or that more binds queue there than
  this replica knows): the estimate is raised by ``TIMEOUT_RAISE`` at once, and measured cycles bring it back.

The limit does not collapse to one bind per node when a burst makes waits long: a collapse spreads a burst over
many nodes (each passed over while its one bind is in flight), which is what node binpack must not do. Keeping the
queue a node can serve lets a burst fill the best nodes in order (docs/extender.md, "Bind-aware placement").

Only binds of ordinary pods count (PodGroup members wait on their own schedule). Pure: no I/O, no clock.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Final

logger = logging.getLogger(__name__)

CYCLE_WEIGHT: Final = 0.2
"""Weight of a new cycle in the average (the last ten or so cycles count)."""
QUEUE_SHARE: Final = 0.5
"""The share of its lock wait a bind admitted behind a full queue may spend waiting."""
TIMEOUT_RAISE: Final = 1.25
"""A bind that gave up raises the cycle estimate by this factor."""
PENDING_MAX: Final = 4096
"""Reservations whose bind has not come yet that are remembered (the oldest are forgotten first)."""


class BindLimit:
    """The per-node bind limit for ``/filter``'s bind-aware placement (see the module docstring)."""

    def __init__(
        self, ceiling: int, wait_budget_s: float, on_change: Callable[[int], None] = lambda limit: None
    ) -> None:
        self.ceiling = max(1, ceiling)
        self.value = self.ceiling
        self._queue_s = QUEUE_SHARE * wait_budget_s
        self._on_change = on_change
        self.cycle_s: float | None = None
        """The average lock cycle (None until one is measured: the limit is the ceiling)."""
        self.cycle_var = 0.0
        """The cycles' variance, averaged the same way: a queue is planned on the average plus one deviation."""
        self.dispatch_s = 0.0
        """The average time from a pod's reservation to its bind's first try for the lock."""
        self._pending: dict[str, float] = {}

    def reserved(self, pod_uid: str, at: float) -> None:
        """``/filter`` reserved devices for ``pod_uid`` at ``at`` (the loop's clock)."""
        self._pending[pod_uid] = at
        if len(self._pending) > PENDING_MAX:
            del self._pending[next(iter(self._pending))]

    def queued(self, pod_uid: str, at: float) -> None:
        """The bind of ``pod_uid`` tries the node lock for the first time at ``at``."""
        since = self._pending.pop(pod_uid, None)
        if since is None or at < since or self._queue_s <= 0:
            return
        self.dispatch_s += CYCLE_WEIGHT * ((at - since) - self.dispatch_s)
        self._update(at - since)

    def observe_cycle(self, cycle_s: float) -> None:
        """One node lock held for ``cycle_s`` (taken to released, as the change feed showed them)."""
        if cycle_s < 0 or self._queue_s <= 0:
            return
        previous = self.cycle_s
        if previous is None:
            self.cycle_s = cycle_s
        else:
            diff = cycle_s - previous
            self.cycle_s = previous + CYCLE_WEIGHT * diff
            self.cycle_var = (1 - CYCLE_WEIGHT) * (self.cycle_var + CYCLE_WEIGHT * diff * diff)
        self._update(cycle_s)

    def observe(self, waited_s: float, *, timed_out: bool = False) -> None:
        """Record one bind's wait for its node lock (``timed_out``: it gave up after the whole budget)."""
        if not timed_out or self._queue_s <= 0:
            return
        floor = (self._queue_s + self.dispatch_s) / max(self.ceiling - 1, 1)  # the longest that gives the ceiling
        self.cycle_s = TIMEOUT_RAISE * max(self.cycle_s or floor, floor)
        self._update(waited_s)

    def _update(self, sample_s: float) -> None:
        if not self.cycle_s:
            return
        cycle = self.cycle_s + math.sqrt(self.cycle_var)
        value = max(1, min(self.ceiling, 1 + math.floor((self._queue_s + self.dispatch_s) / cycle)))
        if value == self.value:
            return
        logger.info(
            "binds per node limit changed",
            extra={
                "limit": value,
                "previous": self.value,
                "cycle_s": round(self.cycle_s, 3),
                "dispatch_s": round(self.dispatch_s, 3),
                "sample_s": round(sample_s, 3),
            },
        )
        self.value = value
        self._on_change(value)
