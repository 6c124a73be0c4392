"""Which node locks a bind takes, by the vendors of its devices, and Cambricon's own time lock.

HAMi's ``Bind`` calls every vendor's ``LockNode``. Most vendors share ``hami.io/mutex.lock``
(:class:`~shared.vendors.base.NodeLockKind` ``HAMI``: :mod:`services.extender.bindlock`); some take none
(``NONE``); Cambricon writes its own node annotation ``cambricon.com/dsmlu.lock`` (``CAMBRICON``), read by its
device plugin. :func:`lock_kinds` says which a pod's devices need; :class:`TimedNodeLocker` takes and gives back a
lock of the Cambricon kind.

Cambricon's lock (HAMi ``pkg/device/cambricon/device.go``, ``LockNode`` / ``ReleaseNodeLock``): the value is the
time it was taken (RFC3339); absent → set it; set less than 2 minutes ago → the node is busy ("has been locked
within 2 minutes"); older → taken over. It names no pod: a bind only ever removes the value it wrote itself.
Unlike HAMi, a value that is not a time is taken over (logged) instead of failing every bind on the node until
someone removes it, and the writes are atomic (set-if-absent, then ``resourceVersion``-guarded patches), so two
replicas cannot both take it. On success the lock stays: Cambricon's device plugin removes it after Allocate.

The rules (key, value, expiry) are an interface, :class:`TimedLockRules`, so the vendor module's pure helpers can
be plugged in; :data:`DSMLU_LOCK` is HAMi's.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Protocol

from vgpu_scheduler.services.extender.bindlock import LockBusyError, LockTimeoutError
from vgpu_scheduler.shared.domain.model import PodDevices
from vgpu_scheduler.shared.errors import ConflictError, DecodeError, NotFoundError
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.k8s.objects import annotations_of, resource_version_of
from vgpu_scheduler.shared.vendors import cambricon
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.registry import Vendors

logger = logging.getLogger(__name__)

_MAX_PATCH_CONFLICTS: Final = 5
_POLL_S: Final = 0.1


def lock_kinds(devices: PodDevices, vendors: Vendors) -> frozenset[NodeLockKind]:
    """The node locks a pod given ``devices`` needs: the ``node_lock`` of every vendor its devices belong to
    (``NONE`` dropped). A pod with no device at all, or a device of a vendor not enabled, takes HAMi's lock, as
    every pod did before vendors were pluggable."""
    used = {d.type for ctr in devices for d in ctr}
    if not used:
        return frozenset({NodeLockKind.HAMI})
    kinds: set[NodeLockKind] = set()
    for name in used:
        vendor = vendors.get(name)
        kinds.add(vendor.node_lock if vendor is not None else NodeLockKind.HAMI)
    kinds.discard(NodeLockKind.NONE)
    return frozenset(kinds)


class TimedLockState(enum.Enum):
    """What a time lock's current value means now."""

    HELD = "held"
    EXPIRED = "expired"
    MALFORMED = "malformed"


class TimedLockRules(Protocol):
    """A node lock whose value is the time it was taken (Cambricon's ``cambricon.com/dsmlu.lock``)."""

    @property
    def key(self) -> str: ...

    def value(self, now: datetime) -> str:
        """The value to write when taking the lock at ``now`` (local time)."""
        ...

    def state(self, value: str, now: datetime) -> TimedLockState:
        """Whether a present value still holds the node at ``now``."""
        ...


@dataclass(frozen=True, slots=True)
class DsmluLockRules:
    """HAMi's Cambricon lock (:mod:`shared.vendors.cambricon`): an RFC3339 time, held for 2 minutes after it was
    taken. A value that does not parse is MALFORMED here (taken over, logged), where HAMi keeps the node locked."""

    key: str = cambricon.LOCK_KEY

    def value(self, now: datetime) -> str:
        return cambricon.lock_annotation(now)[self.key]

    def state(self, value: str, now: datetime) -> TimedLockState:
        try:
            cambricon.lock_time({self.key: value})
        except DecodeError:
            return TimedLockState.MALFORMED
        held = cambricon.lock_state({self.key: value}, now) is cambricon.LockState.HELD
        return TimedLockState.HELD if held else TimedLockState.EXPIRED


DSMLU_LOCK: Final = DsmluLockRules()


@dataclass(frozen=True, slots=True)
class HeldTimedLock:
    """A time lock this bind took: the value it wrote (released only while the node still shows it)."""

    node: str
    key: str
    value: str
    waited_s: float


class TimedNodeLocker:
    """Takes and gives back a time lock (:class:`TimedLockRules`) on nodes through the API server."""

    def __init__(
        self,
        api: Api,
        rules: TimedLockRules = DSMLU_LOCK,
        *,
        clock: Callable[[], float],
        call_timeout_s: float = 4.0,
        poll_s: float = _POLL_S,
    ) -> None:
        self._api = api
        self._rules = rules
        self._clock = clock
        self._call_timeout_s = call_timeout_s
        self._poll_s = poll_s

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock()).astimezone()

    async def acquire(self, node: str, *, wait_s: float) -> HeldTimedLock:
        """Take the lock, polling while another bind holds it, for up to ``wait_s``; then
        :class:`LockTimeoutError`. NotFoundError when the node is gone; other API errors propagate."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            try:
                value = await self._try(node)
            except LockBusyError as busy:
                waited = loop.time() - start
                if waited >= wait_s:
                    raise LockTimeoutError(busy, waited) from busy
                await asyncio.sleep(min(self._poll_s, wait_s - waited))
                continue
            return HeldTimedLock(node, self._rules.key, value, loop.time() - start)

    async def _try(self, node: str) -> str:
        key = self._rules.key
        value = self._rules.value(self._now())
        try:
            if await self._api.add_node_annotation_if_absent(node, key, value, timeout_s=self._call_timeout_s):
                return value
        except ConflictError:
            pass
        for _ in range(_MAX_PATCH_CONFLICTS):
            node_obj = await self._api.get_node(node, timeout_s=self._call_timeout_s)
            current = annotations_of(node_obj).get(key)
            now = self._now()
            if current is not None:
                state = self._rules.state(str(current), now)
                if state is TimedLockState.HELD:
                    raise LockBusyError(node, f"{key}={current}", "annotation")
            value = self._rules.value(now)
            try:
                await self._api.patch_node_metadata(
                    node,
                    annotations={key: value},
                    resource_version=resource_version_of(node_obj) or None,
                    timeout_s=self._call_timeout_s,
                )
            except ConflictError:
                continue
            if current is not None:
                logger.info("node time lock taken over", extra={"node": node, "key": key, "previous": current})
            return value
        raise LockBusyError(node, "concurrent node updates", "annotation")

    async def release(self, held: HeldTimedLock) -> None:
        """Remove the lock while the node still shows the value this bind wrote. Never raises (logged): the lock
        expires by itself."""
        try:
            for _ in range(_MAX_PATCH_CONFLICTS):
                node_obj = await self._api.get_node(held.node, timeout_s=self._call_timeout_s)
                if annotations_of(node_obj).get(held.key) != held.value:
                    return
                try:
                    await self._api.patch_node_metadata(
                        held.node,
                        annotations={held.key: None},
                        resource_version=resource_version_of(node_obj) or None,
                        timeout_s=self._call_timeout_s,
                    )
                except ConflictError:
                    continue
                return
        except NotFoundError:
            return
        except Exception as e:  # best effort: the lock expires by itself
            logger.warning("node time lock not released", extra={"node": held.node, "key": held.key, "error": str(e)})
