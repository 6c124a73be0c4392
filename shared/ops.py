"""The ops HTTP surface every service serves: ``/healthz``, ``/readyz``, ``/metrics``.

``create_ops_app(...)`` builds a standalone aiohttp app (registrar, informer: on ``--metrics-bind-address``);
``add_ops_routes(app, ...)`` adds the same routes to an existing app (the extender's ``--http_bind`` app).
``serve(app, bind)`` is the root-task form of a server: it listens until cancelled, then cleans up.

* ``/healthz``: liveness; 200 ``ok`` while the event loop answers (HAMi: always 200).
* ``/readyz``: readiness from an injected ``async () -> (ok, detail)``; 200 or 503 with the detail. A check
  that raises or overruns its deadline counts as not ready.
* ``/metrics``: Prometheus text (format 0.0.4) of the injected registry, by ``shared.metrics.render_text``; an
  optional async ``before_scrape`` hook refreshes scrape-time gauges from one snapshot first.

TLS (``--cert_file``/``--key_file``): :func:`server_ssl_context` loads the pair; the extender reloads it when the
files change (``services/extender/tls.py``), as HAMi's certwatcher does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from vgpu_scheduler.shared.config.values import BindAddress, parse_bind_address
from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.metrics import render_text

logger = logging.getLogger(__name__)

ReadinessCheck = Callable[[], Awaitable[tuple[bool, str]]]
ScrapeHook = Callable[[], Awaitable[None]]

__all__ = [
    "BindAddress",
    "ReadinessCheck",
    "RunningServer",
    "ScrapeHook",
    "add_ops_routes",
    "create_ops_app",
    "parse_bind_address",
    "running_server",
    "serve",
    "server_ssl_context",
    "start_server",
]


@dataclass(frozen=True, slots=True)
class _OpsState:
    readiness: ReadinessCheck | None
    registry: CollectorRegistry | None
    before_scrape: ScrapeHook | None
    readiness_timeout_s: float
    scrape_timeout_s: float


OPS_STATE = web.AppKey("vgpu_ops_state", _OpsState)


async def _always_ready() -> tuple[bool, str]:
    return True, "ok"


def add_ops_routes(
    app: web.Application,
    *,
    readiness: ReadinessCheck | None = None,
    registry: CollectorRegistry | None = None,
    before_scrape: ScrapeHook | None = None,
    readiness_timeout_s: float = 2.0,
    scrape_timeout_s: float = 5.0,
) -> None:
    """Add ``/healthz``, ``/readyz`` and (with a registry) ``/metrics`` to ``app``."""
    app[OPS_STATE] = _OpsState(readiness, registry, before_scrape, readiness_timeout_s, scrape_timeout_s)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    if registry is not None:
        app.router.add_get("/metrics", _metrics)


def create_ops_app(
    *,
    readiness: ReadinessCheck | None = None,
    registry: CollectorRegistry | None = None,
    before_scrape: ScrapeHook | None = None,
    readiness_timeout_s: float = 2.0,
) -> web.Application:
    """A standalone ops app (see the module docstring). ``readiness`` defaults to always ready."""
    app = web.Application()
    add_ops_routes(
        app,
        readiness=readiness,
        registry=registry,
        before_scrape=before_scrape,
        readiness_timeout_s=readiness_timeout_s,
    )
    return app


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    state = request.app[OPS_STATE]
    check = state.readiness or _always_ready
    try:
        async with asyncio.timeout(state.readiness_timeout_s):
            ok, detail = await check()
    except TimeoutError:
        ok, detail = False, f"readiness check timed out after {state.readiness_timeout_s:g}s"
    except Exception as e:
        logger.warning("readiness check failed", extra={"error": repr(e)})
        ok, detail = False, f"readiness check failed: {e!r}"
    return web.Response(status=200 if ok else 503, text=(detail or ("ok" if ok else "not ready")) + "\n")


async def _metrics(request: web.Request) -> web.Response:
    state = request.app[OPS_STATE]
    assert state.registry is not None
    if state.before_scrape is not None:
        try:
            async with asyncio.timeout(state.scrape_timeout_s):
                await state.before_scrape()
        except Exception as e:
            # Serve what the registry holds (stale gauges beat no metrics); the hook's own metrics show the gap.
            logger.warning("metrics refresh failed", extra={"error": repr(e)})
    # Off the event loop: at 1,000 GPU nodes the per-device families make ~9 MB of text (rendered again only for
    # the nodes that changed, but 0.15 s of Python when all did), which on the loop would stall every request in
    # flight (kube-scheduler's /filter calls) for the whole scrape.
    body = await asyncio.to_thread(render_text, state.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})


@dataclass(frozen=True, slots=True)
class RunningServer:
    """A listening aiohttp server. ``port`` is the real port (useful with port 0)."""

    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_server(
    app: web.Application,
    bind: BindAddress | str,
    *,
    ssl_context: ssl.SSLContext | None = None,
    shutdown_timeout_s: float = 5.0,
) -> RunningServer:
    """Start serving ``app`` on ``bind`` (Go-style address; port 0 = a free port). Stop with ``.stop()``."""
    address = parse_bind_address(bind) if isinstance(bind, str) else bind
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=shutdown_timeout_s)
    await runner.setup()
    try:
        site = web.TCPSite(runner, address.listen_host, address.port, ssl_context=ssl_context)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    host, port = _bound_address(runner, address)
    logger.info("listening", extra={"address": f"{host}:{port}", "tls": ssl_context is not None})
    return RunningServer(runner=runner, host=host, port=port)


def _bound_address(runner: web.AppRunner, address: BindAddress) -> tuple[str, int]:
    for sock_addr in runner.addresses:
        if isinstance(sock_addr, tuple) and len(sock_addr) >= 2:
            return str(sock_addr[0]), int(sock_addr[1])
    return address.host, address.port


@contextlib.asynccontextmanager
async def running_server(
    app: web.Application, bind: BindAddress | str, *, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[RunningServer]:
    """``async with running_server(app, "127.0.0.1:0") as srv:`` — serve for the block's duration."""
    server = await start_server(app, bind, ssl_context=ssl_context)
    try:
        yield server
    finally:
        await server.stop()


async def serve(
    app: web.Application,
    bind: BindAddress | str,
    *,
    ssl_context: ssl.SSLContext | None = None,
    started: Callable[[RunningServer], None] | None = None,
) -> None:
    """Root-task form: serve until cancelled, then clean up. ``started`` is called once listening."""
    async with running_server(app, bind, ssl_context=ssl_context) as server:
        if started is not None:
            started(server)
        await asyncio.Event().wait()  # until cancelled


def server_ssl_context(cert_file: str, key_file: str, client_ca_file: str | None = None) -> ssl.SSLContext:
    """A server TLS context holding the pair; a pair that does not load is a one-line :class:`ConfigError`.

    With ``client_ca_file`` the server asks for a client certificate and verifies one that is presented against
    that CA bundle (a certificate that does not verify fails the handshake); a client may still present none
    (``CERT_OPTIONAL``): the application decides per path whether one is required.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"--cert_file/--key_file: cannot load {cert_file} and {key_file}: {e}") from e
    if client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=client_ca_file)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"--client-ca-file: cannot load {client_ca_file}: {e}") from e
        context.verify_mode = ssl.CERT_OPTIONAL
    return context
