"""What one extender replica talks to: :class:`ExtenderDeps`, built by a composition root (``main.py``,
``all-in-one``, ``simulate``, tests) and handed to the service and its handlers.

A module of its own so that the handlers (``filter``, ``bindhttp``, ``webhook``) name it without importing the
service, which imports them: the package has no import cycle (``tests/unit/extender/test_import_cycles.py``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from prometheus_client import CollectorRegistry

from vgpu_scheduler.services.extender.events import EventSink
from vgpu_scheduler.services.extender.snapshot import CacheSettings
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors


@dataclass(frozen=True)
class ExtenderDeps:
    """Everything the extender talks to, built by the composition root (``main.py``, ``all-in-one``, tests).

    ``event_sink`` posts Kubernetes Events off the request path (its worker runs inside ``ExtenderService.run``).
    """

    store: Store
    api: Api
    registry: CollectorRegistry
    instance_id: str
    nvidia: NvidiaConfig
    event_sink: EventSink
    clock: Callable[[], float] = time.time
    cache_settings: CacheSettings = field(default_factory=CacheSettings)
    rng: random.Random | None = None
    """The jitter of ``/bind``'s node-lock retries (None: a fresh ``random.Random()``; ``simulate`` seeds it)."""
    vendors: Vendors | None = None
    """The enabled device vendors (``shared.vendors.catalog.enabled_vendors``); None: NVIDIA only, with ``nvidia``."""

    @cached_property
    def vendor_set(self) -> Vendors:
        """:attr:`vendors`, or NVIDIA alone (with :attr:`nvidia`) when none were given."""
        return self.vendors if self.vendors is not None else Vendors((NvidiaVendor(self.nvidia),))
