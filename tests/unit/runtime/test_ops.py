"""The ops server: /healthz, /readyz, /metrics over a real socket on a free port."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.metrics import new_registry, register_build_info
from vgpu_scheduler.shared.ops import (
    add_ops_routes,
    create_ops_app,
    running_server,
    serve,
    server_ssl_context,
    start_server,
)


async def get(url: str) -> tuple[int, str, str]:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


async def test_healthz_and_default_readiness() -> None:
    async with running_server(create_ops_app(), "127.0.0.1:0") as srv:
        assert srv.port > 0
        assert await get(srv.url + "/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
        assert (await get(srv.url + "/readyz"))[::2] == (200, "ok\n")
        assert (await get(srv.url + "/metrics"))[0] == 404  # no registry, no route


async def test_readiness_reflects_the_injected_check() -> None:
    state = {"ok": False, "detail": "snapshot not loaded"}

    async def ready() -> tuple[bool, str]:
        return bool(state["ok"]), str(state["detail"])

    async with running_server(create_ops_app(readiness=ready), "127.0.0.1:0") as srv:
        assert (await get(srv.url + "/readyz"))[::2] == (503, "snapshot not loaded\n")
        state.update(ok=True, detail="")
        assert (await get(srv.url + "/readyz"))[::2] == (200, "ok\n")


async def test_a_failing_or_hanging_readiness_check_is_not_ready() -> None:
    async def broken() -> tuple[bool, str]:
        raise ConnectionError("redis down")

    never = asyncio.Event()

    async def hanging() -> tuple[bool, str]:
        await never.wait()
        return True, ""

    async with running_server(create_ops_app(readiness=broken), "127.0.0.1:0") as srv:
        status, _, body = await get(srv.url + "/readyz")
        assert (status, body) == (503, "readiness check failed: ConnectionError('redis down')\n")
    app = create_ops_app(readiness=hanging, readiness_timeout_s=0.01)
    async with running_server(app, "127.0.0.1:0") as srv:
        status, _, body = await get(srv.url + "/readyz")
        assert (status, body) == (503, "readiness check timed out after 0.01s\n")


async def test_metrics_serves_the_injected_registry_as_prometheus_text() -> None:
    registry = new_registry()
    register_build_info(registry, service="extender", revision="abc123")
    hits = Counter("vgpu_test_hits_total", "hits", ["verb"], registry=registry)
    hits.labels("filter").inc(3)
    refreshed = Gauge("vgpu_test_refreshed", "set by the scrape hook", registry=registry)

    async def before_scrape() -> None:
        refreshed.set(42)

    async with running_server(create_ops_app(registry=registry, before_scrape=before_scrape), "127.0.0.1:0") as srv:
        status, content_type, body = await get(srv.url + "/metrics")
    assert status == 200
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert 'vgpu_test_hits_total{verb="filter"} 3.0' in body
    assert "vgpu_test_refreshed 42.0" in body
    assert 'vgpu_scheduler_build_info{python_version="' in body and 'service="extender"' in body
    assert 'hami_build_info{build_date="",compiler="' in body and 'zone="vGPU"} 1.0' in body
    assert "process_cpu_seconds_total" in body or "python_info" in body


async def test_a_scrape_leaves_the_event_loop_serving() -> None:
    """A collector that waits for the event loop to act: were the scrape rendered on the loop, it would never end."""
    started, loop_ran = threading.Event(), threading.Event()

    class WaitsForTheLoop(Collector):
        def collect(self) -> Iterable[Metric]:
            started.set()
            if not loop_ran.wait(timeout=10):
                raise AssertionError("the event loop did not run during the scrape")
            yield GaugeMetricFamily("vgpu_probe", "probe", value=1)

    registry = CollectorRegistry()
    registry.register(WaitsForTheLoop())
    async with running_server(create_ops_app(registry=registry), "127.0.0.1:0") as srv:
        scrape = asyncio.create_task(get(srv.url + "/metrics"))
        assert await asyncio.to_thread(started.wait, 10)  # the scrape is rendering; the loop still runs
        loop_ran.set()
        status, _, body = await scrape
    assert status == 200 and "vgpu_probe 1.0" in body


async def test_a_failing_scrape_hook_still_serves_metrics() -> None:
    registry = CollectorRegistry()
    Gauge("vgpu_test_value", "v", registry=registry).set(1)

    async def broken() -> None:
        raise RuntimeError("redis down")

    async with running_server(create_ops_app(registry=registry, before_scrape=broken), "127.0.0.1:0") as srv:
        status, _, body = await get(srv.url + "/metrics")
    assert status == 200 and "vgpu_test_value 1.0" in body


async def test_ops_routes_on_an_existing_app() -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="filter")

    app = web.Application()
    app.router.add_post("/filter", hello)
    add_ops_routes(app, registry=CollectorRegistry())
    async with running_server(app, "127.0.0.1:0") as srv:
        assert (await get(srv.url + "/healthz"))[0] == 200
        assert (await get(srv.url + "/metrics"))[0] == 200


async def test_serve_runs_until_cancelled_and_releases_the_port() -> None:
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(create_ops_app(), "127.0.0.1:0", started=lambda s: started.set_result(s.port)), name="ops-server"
    )
    port = await started
    assert (await get(f"http://127.0.0.1:{port}/healthz"))[0] == 200
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(aiohttp.ClientConnectionError):
        await get(f"http://127.0.0.1:{port}/healthz")


async def test_start_server_reports_a_busy_port() -> None:
    first = await start_server(create_ops_app(), "127.0.0.1:0")
    try:
        with pytest.raises(OSError):
            await start_server(create_ops_app(), f"127.0.0.1:{first.port}")
    finally:
        await first.stop()


async def test_ipv6_loopback_url() -> None:
    try:
        srv = await start_server(create_ops_app(), "[::1]:0")
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    try:
        assert srv.url == f"http://[::1]:{srv.port}"
        assert (await get(srv.url + "/healthz"))[0] == 200
    finally:
        await srv.stop()


# --- TLS: load, serve, hot reload ------------------------------------------------------------


def make_pair(directory: Path, name: str, cn: str) -> tuple[str, str]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={cn}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return str(cert), str(key)


def der_of(cert_file: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(Path(cert_file).read_text())


async def served_cert(port: int) -> bytes:
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=client), timeout=10)
    try:
        peer = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert peer is not None
        return bytes(peer)
    finally:
        writer.close()
        await writer.wait_closed()


async def test_tls_server_serves_the_pair(tmp_path: Path) -> None:
    """Rotation (reload when the files change) is the extender's, tested in tests/integration/extender/test_tls.py."""
    cert, key = make_pair(tmp_path, "live", "one")
    async with running_server(create_ops_app(), "127.0.0.1:0", ssl_context=server_ssl_context(cert, key)) as srv:
        assert await served_cert(srv.port) == der_of(cert)


def test_a_bad_pair_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ConfigError, match=r"^--cert_file/--key_file: cannot load "):
        server_ssl_context(str(bad), str(bad))
