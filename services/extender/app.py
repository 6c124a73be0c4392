"""The extender's aiohttp apps: ``/filter``, ``/bind``, ``/webhook`` plus ``/healthz``, ``/readyz``, ``/metrics``.

With ``--client-ca-file``, ``/filter`` and ``/bind`` answer only a client that presented a certificate the TLS
layer verified against that bundle (kube-scheduler's); any other request gets ``403`` before its body is read, so
nothing is planned, reserved or locked for it, and counts in ``vgpu_extender_unauthenticated_requests_total``.
``/webhook``, ``/healthz``, ``/readyz`` and ``/metrics`` take no client certificate (the API server and the kubelet
present none). With ``--webhook-bind``, ``/webhook`` is served by a second app on its own listener
(:func:`create_webhook_app`) and left off the ``--http_bind`` one.

Bodies are capped at 1 MiB (HAMi's ``io.LimitReader(r.Body, 1<<20)``); the handlers answer an oversized body with
a clear ``Error``. Every extender verb is timed into ``vgpu_extender_request_duration_seconds{verb}``. An
exception escaping a handler is logged once and answered in the verb's own error shape (never a stack trace):
``{"Error": ...}`` for ``/filter`` and ``/bind``, HTTP 500 for ``/webhook``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web

from vgpu_scheduler.services.extender.deps import ExtenderDeps
from vgpu_scheduler.services.extender.metrics import ExtenderMetrics, Verb
from vgpu_scheduler.services.extender.tls import peer_certificate
from vgpu_scheduler.shared.config import ExtenderSettings
from vgpu_scheduler.shared.ops import add_ops_routes
from vgpu_scheduler.shared.protocol.admission import HTTP_BAD_REQUEST, error_review
from vgpu_scheduler.shared.protocol.extender import MAX_BODY_BYTES, ExtenderFilterResult, binding_result

logger = logging.getLogger(__name__)


class Handler(Protocol):
    """What an endpoint object offers the app: an aiohttp handler."""

    async def handle(self, request: web.Request) -> web.Response: ...


class Endpoints(Protocol):
    """What the apps serve: one extender replica's handlers and ops hooks (an ``ExtenderService``; named by this
    protocol so that the app does not import the service, which imports the app)."""

    @property
    def settings(self) -> ExtenderSettings: ...
    @property
    def deps(self) -> ExtenderDeps: ...
    @property
    def metrics(self) -> ExtenderMetrics: ...
    @property
    def filter(self) -> Handler: ...
    @property
    def bind(self) -> Handler: ...
    @property
    def webhook(self) -> Handler: ...
    @property
    def preemptor(self) -> Handler: ...

    async def readiness(self) -> tuple[bool, str]: ...

    async def refresh_quota_metrics(self) -> None: ...


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


def client_certificate_required(verb: Verb, handler: HandlerFn, metrics: ExtenderMetrics) -> HandlerFn:
    """Wrap ``handler``: answer ``403`` unless the connection carries a verified client certificate."""
    refused = metrics.unauthenticated_requests.labels(verb.value)

    async def wrapped(request: web.Request) -> web.Response:
        if peer_certificate(request.transport) is None:
            refused.inc()
            logger.warning(
                "extender request without a client certificate refused",
                extra={"verb": verb.value, "peer": request.remote},
            )
            return web.Response(
                status=403,
                text=f"/{verb.value} requires a client certificate signed by the extender's --client-ca-file\n",
            )
        return await handler(request)

    return wrapped


def create_app(service: Endpoints, *, webhook: bool = True) -> web.Application:
    """The extender's ``--http_bind`` application for one service (served by ``ExtenderService.run`` or a test);
    ``webhook=False`` leaves ``/webhook`` to the ``--webhook-bind`` app."""
    # Bodies are read as sent, whatever Content-Encoding says (Go's net/http server never decodes request
    # bodies either): a bogus "gzip" on plain JSON still parses, compressed bytes are a JSON error like any other,
    # and aiohttp's decoder never fails mid-parse (it answered with a traceback and a reset connection).
    app = web.Application(client_max_size=MAX_BODY_BYTES + 1, handler_args={"auto_decompress": False})
    metrics = service.metrics
    filter_handler = timed(Verb.FILTER, service.filter.handle, metrics)
    bind_handler = timed(Verb.BIND, service.bind.handle, metrics)
    if service.settings.client_ca_file is not None:
        filter_handler = client_certificate_required(Verb.FILTER, filter_handler, metrics)
        bind_handler = client_certificate_required(Verb.BIND, bind_handler, metrics)
    preempt_handler = timed(Verb.PREEMPT, service.preemptor.handle, metrics)
    if service.settings.client_ca_file is not None:
        preempt_handler = client_certificate_required(Verb.PREEMPT, preempt_handler, metrics)
    app.router.add_post("/filter", filter_handler)
    app.router.add_post("/bind", bind_handler)
    app.router.add_post("/preempt", preempt_handler)
    if webhook:
        app.router.add_post("/webhook", timed(Verb.WEBHOOK, service.webhook.handle, metrics))
    add_ops_routes(
        app,
        readiness=service.readiness,
        registry=service.deps.registry,
        before_scrape=service.refresh_quota_metrics,
    )
    return app


def create_webhook_app(service: Endpoints) -> web.Application:
    """The ``--webhook-bind`` application: ``/webhook``, ``/healthz`` and ``/readyz``, no client certificates."""
    app = web.Application(client_max_size=MAX_BODY_BYTES + 1, handler_args={"auto_decompress": False})
    app.router.add_post("/webhook", timed(Verb.WEBHOOK, service.webhook.handle, service.metrics))
    add_ops_routes(app, readiness=service.readiness)
    return app
