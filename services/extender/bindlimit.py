"""How many binds may be in flight on one node before ``/filter`` passes over it: ``--max-binds-per-node`` at most,
fewer while binds wait too long for node locks.

HAMi's device plugin finds the pod it allocates through the node lock, so a node's binds run one after another,
each holding the lock for a whole cycle (the Binding, the kubelet's Allocate, the plugin's release). A bind that
queues behind ``n`` others waits about ``n`` cycles, and fails when that exceeds its lock wait (``--bind-timeout``
less the time its API calls need). How long a cycle takes is not a setting: it grows with the API server's load
and the device plugin's latency. So the limit follows what binds actually wait, additive-increase /
multiplicative-decrease style:

* a bind that waited more than half its lock wait, or timed out, lowers the limit by one (not below 1);
* ``RAISE_AFTER`` binds in a row that waited less than a quarter of it raise the limit by one (up to
  ``--max-binds-per-node``);
* anything in between keeps it.

Only binds of ordinary pods count (PodGroup members wait on their own schedule). Pure: no I/O, no clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

logger = logging.getLogger(__name__)

RAISE_AFTER: Final = 20
"""Short waits in a row before the limit goes up by one."""


class AdaptiveBindLimit:
    """The per-node bind limit for ``/filter``'s bind-aware placement (see the module docstring)."""

    def __init__(
        self, ceiling: int, wait_budget_s: float, on_change: Callable[[int], None] = lambda limit: None
    ) -> None:
        self.ceiling = max(1, ceiling)
        self.value = self.ceiling
        self._budget_s = wait_budget_s
        self._on_change = on_change
        self._short = 0

    def observe(self, waited_s: float, *, timed_out: bool = False) -> None:
        """Record one bind's wait for its node lock (``timed_out``: it gave up after the whole budget)."""
        if self._budget_s <= 0:
            return
        if timed_out or waited_s > self._budget_s / 2:
            self._short = 0
            if self.value > 1:
                self._set(self.value - 1, waited_s)
        elif waited_s < self._budget_s / 4:
            self._short += 1
            if self._short >= RAISE_AFTER:
                self._short = 0
                if self.value < self.ceiling:
                    self._set(self.value + 1, waited_s)
        else:
            self._short = 0

    def _set(self, value: int, waited_s: float) -> None:
        logger.info(
            "binds per node limit changed",
            extra={"limit": value, "previous": self.value, "waited_s": round(waited_s, 3), "budget_s": self._budget_s},
        )
        self.value = value
        self._on_change(value)
