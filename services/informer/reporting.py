"""Reporting unreadable objects: one log line, one counter increment and one Warning event per distinct problem."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from vgpu_scheduler.services.informer.metrics import InformerMetrics, Malformed
from vgpu_scheduler.shared.errors import VgpuError
from vgpu_scheduler.shared.k8s import Api, EventType
from vgpu_scheduler.shared.k8s.objects import name_of, namespace_of, uid_of

logger = logging.getLogger(__name__)


class ProblemReporter:
    """Reports each (object uid, problem text) once; ``forget`` when the object is gone."""

    def __init__(self, api: Api, metrics: InformerMetrics) -> None:
        self._api = api
        self._metrics = metrics
        self._seen: dict[str, str] = {}

    @staticmethod
    def _key(event_kind: str, obj: Mapping[str, Any]) -> str:
        return f"{event_kind}/{uid_of(obj) or namespace_of(obj) + '/' + name_of(obj)}"

    def forget(self, event_kind: str, obj: Mapping[str, Any]) -> None:
        """Report ``obj``'s problems again if they come back (it was deleted or became readable)."""
        self._seen.pop(self._key(event_kind, obj), None)

    async def report(self, kind: Malformed, event_kind: str, obj: Mapping[str, Any], reason: str, text: str) -> None:
        """Log, count and record a Warning event on ``obj`` (``event_kind`` Pod or ResourceQuota) — once per text."""
        key = self._key(event_kind, obj)
        if self._seen.get(key) == text:
            return
        self._seen[key] = text
        self._metrics.malformed.labels(kind.value).inc()
        logger.warning(
            "unreadable value skipped",
            extra={
                "kind": kind.value,
                "object": f"{namespace_of(obj)}/{name_of(obj)}",
                "uid": uid_of(obj),
                "reason": text,
            },
        )
        try:
            await self._api.create_event(event_kind, obj, reason=reason, message=text, event_type=EventType.WARNING)
        except VgpuError as e:
            logger.warning("event not recorded", extra={"reason": reason, "error": str(e)})
