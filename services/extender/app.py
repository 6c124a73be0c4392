"""The extender's aiohttp app: ``/filter``, ``/bind``, ``/webhook`` plus ``/healthz``, ``/readyz``, ``/metrics``.

Bodies are capped at 1 MiB (HAMi's ``io.LimitReader(r.Body, 1<<20)``); the handlers answer an oversized body with
a clear ``Error``. Every extender verb is timed into ``vgpu_extender_request_duration_seconds{verb}``. An
exception escaping a handler is logged once and answered in the verb's own error shape (never a stack trace):
``{"Error": ...}`` for ``/filter`` and ``/bind``, HTTP 500 for ``/webhook``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from services.extender.metrics import ExtenderMetrics, Verb
from shared.ops import add_ops_routes
from shared.protocol.admission import HTTP_BAD_REQUEST, error_review
from shared.protocol.extender import MAX_BODY_BYTES, ExtenderFilterResult, binding_result

if TYPE_CHECKING:
    from services.extender.service import ExtenderService

logger = logging.getLogger(__name__)

HandlerFn = Callable[[web.Request], Awaitable[web.Response]]
_JSON = "application/json"


def _internal_error(verb: Verb, error: Exception) -> web.Response:
    message = f"internal error: {type(error).__name__}: {error}"
    if verb is Verb.FILTER:
        return web.Response(body=ExtenderFilterResult.from_error(message).to_json(), content_type=_JSON)
    if verb is Verb.BIND:
        return web.Response(body=binding_result(message), content_type=_JSON)
    return web.Response(status=500, text=message + "\n")


def _too_deep(verb: Verb) -> web.Response:
    message = "request body is nested too deeply"
    if verb is Verb.FILTER:
        return web.Response(body=ExtenderFilterResult.from_error(message).to_json(), content_type=_JSON)
    if verb is Verb.BIND:
        return web.Response(body=binding_result(message), content_type=_JSON)
    return web.Response(body=error_review(message, code=HTTP_BAD_REQUEST), content_type=_JSON)


def timed(verb: Verb, handler: HandlerFn, metrics: ExtenderMetrics) -> HandlerFn:
    """Wrap ``handler``: observe its duration under ``verb`` and turn an unexpected exception into an answer."""
    histogram = metrics.request_duration.labels(verb.value)

    async def wrapped(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except RecursionError:  # a body nested too deeply for some step: bad input, not a bug to trace
            logger.info("extender request rejected: nested too deeply", extra={"verb": verb.value})
            return _too_deep(verb)
        except Exception as e:
            logger.exception("extender handler failed", extra={"verb": verb.value})
            return _internal_error(verb, e)
        finally:
            histogram.observe(time.perf_counter() - started)

    return wrapped


def create_app(service: ExtenderService) -> web.Application:
    """The extender's HTTP application for one service (served by ``ExtenderService.run`` or a test)."""
    # Bodies are read as sent, whatever Content-Encoding says (Go's net/http server never decodes request
    # bodies either): a bogus "gzip" on plain JSON still parses, compressed bytes are a JSON error like any other,
    # and aiohttp's decoder never fails mid-parse (it answered with a traceback and a reset connection).
    app = web.Application(client_max_size=MAX_BODY_BYTES + 1, handler_args={"auto_decompress": False})
    metrics = service.metrics
    app.router.add_post("/filter", timed(Verb.FILTER, service.filter.handle, metrics))
    app.router.add_post("/bind", timed(Verb.BIND, service.bind.handle, metrics))
    app.router.add_post("/webhook", timed(Verb.WEBHOOK, service.webhook.handle, metrics))
    add_ops_routes(
        app,
        readiness=service.readiness,
        registry=service.deps.registry,
        before_scrape=service.refresh_quota_metrics,
    )
    return app
