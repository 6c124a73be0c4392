"""``POST /bind`` over HTTP: decode ``ExtenderBindingArgs``, run :meth:`Binder.bind`, answer ``{"Error": ...}``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from aiohttp import web

from vgpu_scheduler.services.extender.bind import Binder
from vgpu_scheduler.services.extender.bindlock import lock_wait_budget
from vgpu_scheduler.services.extender.bindresult import BindOutcome
from vgpu_scheduler.services.extender.deps import ExtenderDeps
from vgpu_scheduler.services.extender.metrics import ExtenderMetrics
from vgpu_scheduler.services.extender.wakeups import NodeWakeups
from vgpu_scheduler.shared.config.settings import ExtenderSettings
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol.extender import (
    EMPTY_BODY_MESSAGE,
    MAX_BODY_BYTES,
    binding_result,
    parse_binding_args,
)

logger = logging.getLogger(__name__)

_JSON: Final = "application/json"


class BindHandler:
    """``POST /bind`` for the aiohttp app: decode, :meth:`Binder.bind`, answer ``{"Error": ...}`` (HTTP 200; 400
    only for an empty body, as HAMi)."""

    def __init__(
        self,
        settings: ExtenderSettings,
        deps: ExtenderDeps,
        metrics: ExtenderMetrics,
        *,
        lock_wait_s: float | None = None,
        on_lock_wait: Callable[[float, bool], None] | None = None,
        on_lock_queue: Callable[[str], None] | None = None,
        wakeups: NodeWakeups | None = None,
    ) -> None:
        if lock_wait_s is None:
            lock_wait_s = lock_wait_budget(settings.bind_timeout_s)
        self.lock_wait_s = lock_wait_s
        self.binder = Binder(
            store=deps.store,
            api=deps.api,
            nvidia=deps.nvidia,
            node_lock_timeout_s=settings.node_lock_timeout_s,
            pod_group_wait_s=settings.node_lock_retry_timeout_s,
            lock_wait_s=lock_wait_s,
            clock=deps.clock,
            events=deps.event_sink,
            metrics=metrics,
            rng=deps.rng,
            vendors=deps.vendor_set,
            on_lock_wait=on_lock_wait,
            on_lock_queue=on_lock_queue,
            wakeups=wakeups,
        )
        self._metrics = metrics

    async def handle(self, request: web.Request) -> web.Response:
        """Answer one ``/bind`` request."""
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._bad(f"extender binding args: request body larger than {MAX_BODY_BYTES} bytes")
        if not body:
            self._metrics.bind_outcomes.labels(BindOutcome.BAD_REQUEST.value).inc()
            return web.Response(status=400, text=EMPTY_BODY_MESSAGE + "\n")  # Go http.Error adds the newline
        try:
            args = parse_binding_args(body)
        except DecodeError as e:
            return self._bad(str(e))
        result = await self.binder.bind(args)
        return web.Response(body=binding_result(result.error), content_type=_JSON)

    def _bad(self, message: str) -> web.Response:
        self._metrics.bind_outcomes.labels(BindOutcome.BAD_REQUEST.value).inc()
        logger.info("bind request rejected", extra={"error": message})
        return web.Response(body=binding_result(message), content_type=_JSON)
