"""A watch whose server overruns its own ``timeoutSeconds`` (keeps sending, or sends nothing and keeps the
connection): the informer ends that watch itself once ``timeoutSeconds`` + the grace have passed, quietly (no
error counted, no re-list), and watches again from the last version it saw."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.integration.k8s.conftest import Recorder, make_node, running
from tests.waiting import eventually
from vgpu_scheduler.services.simulate.clock import VirtualClockLoop
from vgpu_scheduler.shared.k8s import Informer, InformerSettings, KubeSettings, Resource, open_client

SETTINGS = InformerSettings(watch_timeout_s=1, read_grace_s=0.3, backoff_initial_s=0.01, backoff_max_s=0.05)


class Overrunning:
    """Serves ``/api/v1/nodes``: a list of one node, and watches that never end by themselves. ``chatty``: a
    bookmark every 50 ms; otherwise nothing after the first event."""

    def __init__(self, *, chatty: bool) -> None:
        self.chatty = chatty
        self.lists = 0
        self.watches: list[dict[str, str]] = []  # the query of each watch
        self.rv = 10

    async def nodes(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") not in ("true", "1", "True"):
            self.lists += 1
            body = {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}, "items": []}
            return web.json_response(body)
        self.watches.append(dict(request.query))
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        resp.content_type = "application/json"
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            self.rv += 1
            node = make_node("n1")
            node["metadata"]["resourceVersion"] = str(self.rv)
            await resp.write(json.dumps({"type": "ADDED", "object": node}).encode() + b"\n")
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.05)
                if self.chatty:
                    self.rv += 1
                    mark = {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}}
                    await resp.write(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")
        return resp


@contextlib.asynccontextmanager
async def serving(server: Overrunning) -> AsyncIterator[str]:
    """``server`` on a free loopback port, for the block's duration; yields its URL."""
    app = web.Application()
    app.router.add_get("/api/v1/nodes", server.nodes)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("chatty", [True, False], ids=["chatty", "silent"])
def test_a_watch_the_server_overruns_is_ended_and_resumed(chatty: bool) -> None:
    # on a simulated clock (time moves only when every party here is idle), so that how long the watches last is
    # the informer's doing, not the machine's speed
    server = Overrunning(chatty=chatty)
    recorder = Recorder()

    async def three_watches() -> tuple[Informer, float]:
        async with serving(server) as url, open_client(KubeSettings(server=url, timeout_s=5.0)) as kube:
            informer = Informer(kube, Resource.NODES, recorder, settings=SETTINGS, rng=random.Random(3))
            loop = asyncio.get_running_loop()
            started = loop.time()
            async with running(informer):
                await eventually(lambda: len(server.watches) >= 3, 15, "three watches")
                return informer, loop.time() - started

    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        informer, elapsed = runner.run(three_watches())
    assert informer.get("n1") is not None
    assert informer.stats.errors == 0 and server.lists == 1  # ended quietly, never re-listed
    # the first two watches each lasted timeoutSeconds (1 s here) + the grace, not less
    assert elapsed >= 2 * (1 + SETTINGS.read_grace_s)
    seen: list[Any] = [w.get("resourceVersion") for w in server.watches]
    assert all(rv not in (None, "", "0") for rv in seen[1:])  # resumed from a version, not from scratch
    assert seen[1] != seen[0]
