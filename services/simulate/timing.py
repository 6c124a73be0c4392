"""How the driver's kube-scheduler behaves in time (backoffs, the extender's timeout, the device plugin's Allocate
latency) and what it met on the way (:class:`Contention`: binds, failures, node-lock waits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class SchedulerTiming:
    """How the driver's kube-scheduler and device plugin behave in time (kube-scheduler v1.36's defaults)."""

    initial_backoff_s: float = 1.0
    """``podInitialBackoffSeconds``: the first backoff of a pod whose bind failed; doubled per attempt."""
    max_backoff_s: float = 10.0
    """``podMaxBackoffSeconds``: the cap of that doubling."""
    http_timeout_s: float = 30.0
    """The extender's ``httpTimeout`` (the Helm chart's ``kubeScheduler.extenderHTTPTimeout``)."""
    allocate_latency_s: float = 0.2
    """From the Binding to the device plugin's Allocate (kubelet's pod admission), as HAMi's plugin sees it."""
    unschedulable_flush_s: float = 300.0
    """``podMaxInUnschedulablePodsDuration``: a pod unschedulable this long is tried again without any event (the
    driver does it on the simulated clock once the run is otherwise quiet and a pod that may preempt waits, as long
    as the previous flush changed something)."""
    controller_delay_s: float = 1.0
    """kube-controller-manager: from an owned pod's deletion (a StatefulSet's: its end) to the creation of its
    replacement (``--controller-delay``, :mod:`services.simulate.kcm`)."""
    max_attempts: int = 20
    """A simulation must end: a pod still failing to bind after this many scheduling attempts is reported pending
    (kube-scheduler would go on retrying it every ``max_backoff_s``)."""

    def backoff_s(self, attempts: int) -> float:
        """kube-scheduler's backoff after ``attempts`` scheduling attempts: initial × 2^(attempts-1), capped."""
        return float(min(self.initial_backoff_s * 2.0 ** max(attempts - 1, 0), self.max_backoff_s))


LOCK_WAIT_THRESHOLD_S: Final = 0.01
"""A bind that took longer than this waited for a node lock (on the simulated clock a bind that does not wait
takes no time at all; the extender's first lock retry comes after 10 ms or more)."""


@dataclass(slots=True)
class Contention:
    """What the truthful kube-scheduler met: failed and retried binds, node-lock waits, extender timeouts."""

    clock: str = "real"
    """``simulated`` (an embedded run, :mod:`services.simulate.clock`) or ``real``."""
    binds: int = 0
    bind_failures: int = 0
    binds_retried: int = 0
    pods_retried: int = 0
    lock_waits: int = 0
    lock_wait_s: float = 0.0
    lock_wait_max_s: float = 0.0
    extender_timeouts: int = 0
    plugin_failures: int = 0
    duration_s: float = 0.0
    max_binds_in_flight: int = 0
    bind_errors: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "clock": self.clock,
            "duration_s": round(self.duration_s, 3),
            "binds": self.binds,
            "bind_failures": self.bind_failures,
            "binds_retried": self.binds_retried,
            "pods_retried": self.pods_retried,
            "lock_waits": self.lock_waits,
            "lock_wait_s": round(self.lock_wait_s, 3),
            "lock_wait_max_s": round(self.lock_wait_max_s, 3),
            "max_binds_in_flight": self.max_binds_in_flight,
            "extender_timeouts": self.extender_timeouts,
            "plugin_failures": self.plugin_failures,
            "bind_errors": dict(sorted(self.bind_errors.items())),
        }


def error_kind(error: str) -> str:
    """A short class of a bind error for the counts: ``node locked``, ``timeout`` or its first words."""
    if "is locked by" in error or "lock" in error.lower():
        return "node locked"
    if "timed out" in error.lower() or "TimeoutError" in error:
        return "timeout"
    return " ".join(error.split()[:4])
