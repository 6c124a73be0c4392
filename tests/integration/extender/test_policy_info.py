"""``simulate --extender-url`` reports the extender's own default policies: the extender publishes them as
``vgpu_extender_policy_info`` and simulate reads them back from ``/metrics``."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from tests.integration.extender.filter_harness import running_extender, seed, settings
from vgpu_scheduler.services.simulate.main import extender_policies
from vgpu_scheduler.shared.domain.model import GpuPolicy, GpuPolicyToken, NodePolicy
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import Store


async def test_simulate_reads_the_policies_a_running_extender_serves_with(store: Store, api: Api) -> None:
    await seed(store)
    served = settings(node_policy=NodePolicy.SPREAD, gpu_policy=GpuPolicy((GpuPolicyToken.BINPACK,)))
    async with running_extender(store, api, extender_settings=served) as ext:
        assert await extender_policies(ext.http, ext.url) == ("spread", "binpack")


async def test_an_extender_without_the_metric_gives_no_policies() -> None:
    app = web.Application()

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text="# nothing here\nother_metric 1\n")

    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as session:
            assert await extender_policies(session, f"http://127.0.0.1:{port}") is None
            assert await extender_policies(session, "http://127.0.0.1:1") is None  # nothing listening
    finally:
        await runner.cleanup()
