"""``simulate``'s device-plugin step must behave like HAMi's plugin (hami-wire §3.1, §4.3): it finds the pod
through the node lock (``GetPendingPod``) and consumes the to-allocate list container by container. If a bind
left the node in a state where the real plugin would serve another pod, or hand a container the wrong number of
devices, the simulation must say so instead of settling the pod it just bound.

The extenders here are a scripted fake so the written state can be made wrong on purpose."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from vgpu_scheduler.services.simulate.driver import Defaults, Driver, DriverError, Extenders, KubeHttp, local_admission
from vgpu_scheduler.shared.domain.model import GpuPolicy, GpuPolicyToken, NodePolicy, NvidiaConfig
from vgpu_scheduler.shared.emulator import Emulator

NODE = "n1"
GOOD_LIST = "GPU-a,NVIDIA,1000,10:;"

BindEffect = Callable[[Emulator, dict[str, Any]], None]


def _pod(name: str, containers: int = 1) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": f"c{i}", "image": "x", "resources": {"limits": limits}} for i in range(containers)]
        },
    }


def bind_like_hami(lock_owner: str | None = "self", device_list: str = GOOD_LIST) -> BindEffect:
    """What /bind leaves behind: annotations, the Binding and ``hami.io/mutex.lock`` naming ``lock_owner``
    (``self``: the pod itself; None: no lock)."""

    def effect(em: Emulator, args: dict[str, Any]) -> None:
        ns, name = args["PodNamespace"], args["PodName"]
        em.patch(
            "Pod",
            ns,
            name,
            {
                "metadata": {
                    "annotations": {
                        "hami.io/vgpu-node": NODE,
                        "hami.io/vgpu-time": "1",
                        "hami.io/vgpu-devices-to-allocate": device_list,
                        "hami.io/vgpu-devices-allocated": device_list,
                        "hami.io/bind-phase": "allocating",
                        "hami.io/bind-time": "1",
                    }
                },
                "spec": {"nodeName": NODE},
            },
        )
        if lock_owner is not None:
            owner = f"{ns},{name}" if lock_owner == "self" else lock_owner
            em.patch(
                "Node",
                None,
                NODE,
                {"metadata": {"annotations": {"hami.io/mutex.lock": f"2030-01-01T00:00:00Z,{owner}"}}},
            )

    return effect


@contextlib.asynccontextmanager
async def fake_extender(em: Emulator, effect: BindEffect) -> AsyncIterator[str]:
    async def filter_(request: web.Request) -> web.Response:
        return web.json_response({"NodeNames": [NODE], "FailedNodes": {}, "Error": ""})

    async def bind(request: web.Request) -> web.Response:
        effect(em, await request.json())
        return web.json_response({"Error": ""})

    app = web.Application()
    app.router.add_post("/filter", filter_)
    app.router.add_post("/bind", bind)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def _schedule(em: Emulator, effect: BindEffect, pod: dict[str, Any]) -> Any:
    em.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})

    async def no_quota(ns: str) -> None:
        return None

    cfg = NvidiaConfig()
    async with fake_extender(em, effect) as url, aiohttp.ClientSession() as session:
        driver = Driver(
            KubeHttp(session, em.url),
            Extenders(session, [url]),
            local_admission(cfg=cfg, scheduler_name="", force_overwrite_default_scheduler=True, quota=no_quota),
            cfg=cfg,
            defaults=Defaults(NodePolicy.BINPACK, GpuPolicy((GpuPolicyToken.SPREAD,))),
        )
        return await driver.schedule(pod)


@pytest.fixture
async def em() -> AsyncIterator[Emulator]:
    async with Emulator(bookmark_interval_s=None) as e:
        yield e


async def test_a_correct_bind_is_settled(em: Emulator) -> None:
    result = await _schedule(em, bind_like_hami(), _pod("p"))
    assert result.node == NODE
    pod = em.get("Pod", "default", "p")
    assert pod is not None and pod["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    node = em.get("Node", None, NODE)
    assert node is not None and "hami.io/mutex.lock" not in (node["metadata"].get("annotations") or {})


async def test_a_lock_naming_another_pod_is_reported(em: Emulator) -> None:
    em.put({**_pod("other"), "status": {"phase": "Pending"}})
    with pytest.raises(DriverError, match="default/other"):
        await _schedule(em, bind_like_hami(lock_owner="default,other"), _pod("p"))
    pod = em.get("Pod", "default", "p")
    assert pod is not None and pod["metadata"]["annotations"]["hami.io/bind-phase"] == "allocating"


async def test_without_a_lock_the_fallback_may_pick_another_pod(em: Emulator) -> None:
    decoy = _pod("a-decoy")
    decoy["metadata"]["annotations"] = {
        "hami.io/vgpu-node": NODE,
        "hami.io/bind-time": "1",
        "hami.io/bind-phase": "success",
        "hami.io/vgpu-devices-to-allocate": GOOD_LIST,
    }
    decoy["spec"]["nodeName"] = NODE
    em.put({**decoy, "status": {"phase": "Pending"}})
    with pytest.raises(DriverError, match="default/a-decoy"):
        await _schedule(em, bind_like_hami(lock_owner=None), _pod("p"))


async def test_a_lock_naming_a_missing_pod_fails_allocate(em: Emulator) -> None:
    with pytest.raises(DriverError, match="default/gone"):
        await _schedule(em, bind_like_hami(lock_owner="default,gone"), _pod("p"))


@pytest.mark.parametrize(
    "device_list",
    [
        pytest.param("GPU-a,NVIDIA,1000,10:GPU-b,NVIDIA,1000,10:;GPU-c,NVIDIA,1000,10:;", id="too-many-devices"),
        pytest.param("GPU-a,NVIDIA,1000,10:;", id="second-container-missing"),
        pytest.param(";GPU-a,NVIDIA,1000,10:;GPU-b,NVIDIA,1000,10:;", id="shifted"),
    ],
)
async def test_a_device_list_the_plugin_cannot_serve_is_reported(em: Emulator, device_list: str) -> None:
    with pytest.raises(DriverError, match="device"):
        await _schedule(em, bind_like_hami(device_list=device_list), _pod("p", containers=2))
