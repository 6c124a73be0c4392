"""The ``emulator`` subcommand, ``all-in-one`` (three services in one process) and the driver against a deployed
system (what docker-compose's ``driver`` runs)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from tests.integration.simulate.conftest import free_port, spawn
from tests.process import http_get, listening_addresses, service_process
from tests.waiting import eventually
from vgpu_scheduler.services.allinone.main import EMBEDDED_STORE_WARNING, serve_all_in_one
from vgpu_scheduler.services.allinone.service import AllInOneService
from vgpu_scheduler.services.simulate.driver import Defaults, Driver, DriverError, Extenders, KubeHttp, local_admission
from vgpu_scheduler.services.simulate.main import (
    EXAMPLE_CLUSTER,
    EXAMPLE_DEVICE_CONFIG,
    EXAMPLE_WORKLOAD,
    drive_deployed,
)
from vgpu_scheduler.services.simulate.manifests import load_cluster, load_workload
from vgpu_scheduler.shared.config import settings_for
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.store import ReservationState, Store, connect


def test_the_emulator_subcommand_serves_the_cluster_until_sigterm() -> None:
    port = free_port()
    proc = spawn("emulator", "--cluster", str(EXAMPLE_CLUSTER), f"--bind=127.0.0.1:{port}", "--log-format=json")
    assert proc.stderr is not None
    try:
        for line in proc.stderr:  # the JSON log line once it listens
            if "emulator serving" in line:
                break
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nodes", timeout=5) as resp:
            nodes = json.loads(resp.read())["items"]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted(
        n["metadata"]["name"] for n in load_cluster(EXAMPLE_CLUSTER).nodes
    )
    assert proc.returncode == 0, err


@pytest.fixture
async def seeded_emulator() -> AsyncIterator[Emulator]:
    async with Emulator() as em:
        for obj in load_cluster(EXAMPLE_CLUSTER).objects():
            em.put(obj)
        yield em


async def start_all_in_one(argv: list[str]) -> tuple[AllInOneService, asyncio.Event, asyncio.Task[None]]:
    settings = settings_for("all-in-one", ["--http_bind=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0", *argv], {})
    stop = asyncio.Event()
    started: asyncio.Future[AllInOneService] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve_all_in_one(settings, stop, started=started), name="test:all-in-one")
    service = await asyncio.wait_for(started, 10)
    ready = asyncio.create_task(service.ready.wait(), name="test:ready")
    done, _ = await asyncio.wait([ready, task], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if ready not in done:
        ready.cancel()
        stop.set()
        await asyncio.gather(ready, task, return_exceptions=True)
        pytest.fail(f"all-in-one did not become ready: {task.exception() if task.done() else 'timeout'}")
    return service, stop, task


def gpu_pod(name: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "20"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
    }


async def test_all_in_one_on_the_embedded_store_schedules_a_pod_and_stops_cleanly(
    seeded_emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    em = seeded_emulator
    with caplog.at_level(logging.WARNING, logger="vgpu_scheduler.services.allinone.main"):
        service, stop, task = await start_all_in_one([f"--kube-server={em.url}"])
    assert any(EMBEDDED_STORE_WARNING in r.getMessage() for r in caplog.records)
    try:
        ok, detail = await service.readiness()
        assert ok, detail
        assert detail.startswith("registrar: ") and "; informer: " in detail and "; extender: ok" in detail
        settings = service.settings
        assert service.extender.server is not None
        async with aiohttp.ClientSession() as session:

            async def no_quota(ns: str) -> None:
                return None

            driver = Driver(
                KubeHttp(session, em.url),
                Extenders(session, [service.extender.server.url]),
                local_admission(
                    cfg=settings.common.nvidia,
                    scheduler_name="",
                    force_overwrite_default_scheduler=True,
                    quota=no_quota,
                ),
                cfg=settings.common.nvidia,
                defaults=Defaults(settings.extender.node_policy, settings.extender.gpu_policy),
            )
            result = await driver.schedule(gpu_pod("one"))
        assert result.node is not None, result.reasons
        pod = em.get("Pod", "default", "one")
        assert pod is not None and pod["spec"]["nodeName"] == result.node
        assert pod["metadata"]["annotations"]["hami.io/vgpu-node"] == result.node
        assert pod["status"]["phase"] == "Running"
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await embedded_blocking_reads_ended()
    assert task.exception() is None


def vendor_pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    pod = gpu_pod(name)
    pod["spec"]["containers"][0]["resources"]["limits"] = limits
    return pod


async def test_all_in_one_serves_the_vendors_of_its_device_config(seeded_emulator: Emulator) -> None:
    """The extender, informer and registrar of all-in-one serve every vendor the device config enables: DCU, MLU
    and Ascend pods land on the bundled pools' nodes with their vendors' device lists."""
    em = seeded_emulator
    service, stop, task = await start_all_in_one(
        [f"--kube-server={em.url}", f"--device-config-file={EXAMPLE_DEVICE_CONFIG}", "--enable-ascend"]
    )
    try:
        names = service.vendors.names
        assert {"NVIDIA", "DCU", "MLU", "AMD", "Ascend910B3", "Ascend310P"} <= set(names)
        assert service.extender.deps.vendor_set is service.vendors
        assert service.informer.vendors is service.vendors
        assert [v.name for v in service.registrar.vendors] == list(names)
        settings = service.settings
        assert service.extender.server is not None
        async with aiohttp.ClientSession() as session:

            async def no_quota(ns: str) -> None:
                return None

            driver = Driver(
                KubeHttp(session, em.url),
                Extenders(session, [service.extender.server.url]),
                local_admission(
                    cfg=settings.common.nvidia,
                    scheduler_name="",
                    force_overwrite_default_scheduler=True,
                    quota=no_quota,
                    vendors=service.vendors,
                ),
                cfg=settings.common.nvidia,
                defaults=Defaults(settings.extender.node_policy, settings.extender.gpu_policy),
                vendors=service.vendors,
            )
            dcu = await driver.schedule(vendor_pod("dcu", {"hygon.com/dcunum": "1", "hygon.com/dcumem": "1000"}))
            mlu = await driver.schedule(
                vendor_pod("mlu", {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "4"})
            )
            npu = await driver.schedule(
                vendor_pod("npu", {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "100"})
            )
        assert dcu.node in ("dcu-z100-01", "dcu-z100-02", "mixed-a10-dcu-01"), dcu.reasons
        assert dcu.annotations["hami.io/dcu-devices-allocated"].split(",")[2] == "1000"
        assert mlu.node in ("mlu-370-01", "mlu-370-02"), mlu.reasons
        assert mlu.annotations["hami.io/cambricon-mlu-devices-allocated"].split(",")[2] == "1024"
        assert npu.node in ("npu-910b-01", "npu-910b-02"), npu.reasons
        assert npu.annotations["hami.io/Ascend910B3-devices-allocated"].split(",")[2] == "16384"
        node = em.get("Node", "", mlu.node)
        assert node is not None and "cambricon.com/dsmlu.lock" not in node["metadata"].get("annotations", {})
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await embedded_blocking_reads_ended()
    assert task.exception() is None


async def embedded_blocking_reads_ended() -> None:
    """fakeredis serves a blocking read (the extender's change-feed XREAD) from a task of its own that outlives the
    cancelled caller until the read's timeout (1 s): wait for those so the test leaks no task."""
    lingering = [t for t in asyncio.all_tasks() if "_async_blocking" in getattr(t.get_coro(), "__qualname__", "")]
    await asyncio.wait_for(asyncio.gather(*lingering, return_exceptions=True), 5)


async def test_the_driver_schedules_a_workload_on_a_deployed_system(
    seeded_emulator: Emulator, redis_url: str, tmp_path: Path
) -> None:
    """What docker-compose's ``driver`` does: ``simulate --kube-server URL --extender-url URL ...`` against running
    services (here an all-in-one on the real redis-server), admission through the extender's ``/webhook``."""
    em = seeded_emulator
    service, stop, task = await start_all_in_one([f"--kube-server={em.url}", f"--redis-url={redis_url}"])
    try:
        assert service.extender.server is not None
        url = service.extender.server.url
        pods = [p for p in load_workload(EXAMPLE_WORKLOAD).pods if p["metadata"]["namespace"] == "team-b"]
        path = tmp_path / "team-b.yaml"
        path.write_text(yaml.safe_dump_all(pods), encoding="utf-8")
        simulate = settings_for("simulate", [], {})
        outcome = await drive_deployed(
            simulate, kube_server=em.url, extender_urls=[url, url], workload=load_workload(path)
        )
        store = Store.create(connect(redis_url))
        try:
            records = await store.reservations.list_all()
        finally:
            await store.aclose()
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    results = {r.name: r for r in outcome.results}
    # quota 48000 MiB with 12000 used: three 10000 MiB notebooks fit, the webhook denies the rest
    assert [n for n, r in sorted(results.items()) if r.node is not None] == [
        "notebook-01",
        "notebook-02",
        "notebook-03",
    ]
    assert results["notebook-04"].reasons == {"*": "admission denied: exceeding resource quota"}
    confirmed = {r.allocation.name for recs in records.values() for r in recs if r.state is ReservationState.CONFIRMED}
    assert {"notebook-01", "notebook-02", "notebook-03", "notebook-0"} <= confirmed
    assert outcome.summary["over_capacity"] == []
    assert task.exception() is None


def test_the_compose_driver_and_emulator_commands_parse() -> None:
    """docker-compose.yml's ``emulator`` and ``driver`` commands are accepted by the registered subcommands."""
    from vgpu_scheduler.services import cli
    from vgpu_scheduler.shared.config import normalize_argv

    compose = yaml.safe_load((Path(__file__).resolve().parents[3] / "docker-compose.yml").read_text(encoding="utf-8"))
    parser = cli.build_parser()
    for name in ("emulator", "driver"):
        args = parser.parse_args(normalize_argv(compose["services"][name]["command"]))
        assert callable(args.run)
    driver = parser.parse_args(normalize_argv(compose["services"]["driver"]["command"]))
    assert driver.sim_kube_server == "http://emulator:8001"
    assert driver.extender_urls == ["http://extender-1:8080", "http://extender-2:8080"]


def _logged(log: Path, msg: str) -> list[dict[str, Any]]:
    """The JSON records of ``log`` whose message is ``msg``."""
    out = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("msg") == msg:
                out.append(record)
    return out


async def test_the_all_in_one_process_becomes_ready_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    emu_log, log = tmp_path / "emulator.log", tmp_path / "all-in-one.log"
    async with (
        service_process(emu_log, "emulator", "--cluster", str(EXAMPLE_CLUSTER), "--bind=127.0.0.1:0") as emulator,
        aiohttp.ClientSession() as session,
    ):
        await eventually(
            lambda: _logged(emu_log, "emulator serving") or emulator.returncode is not None, 30, "emulator serving"
        )
        served = _logged(emu_log, "emulator serving")
        assert served, emu_log.read_text()
        flags = ("--http_bind=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0")
        async with service_process(log, "all-in-one", f"--kube-server={served[0]['url']}", *flags) as proc:
            await eventually(
                lambda: len(listening_addresses(log)) >= 2 or proc.returncode is not None, 60, "both servers listening"
            )
            urls = [f"http://{a}" for a in listening_addresses(log)]
            assert len(urls) == 2, log.read_text()

            ops: list[str] = []

            async def find_ops() -> bool:
                for u in urls:
                    status, body = await http_get(session, f"{u}/readyz")
                    if status == 200 and "registrar: " in body:
                        ops.append(u)
                        return True
                return proc.returncode is not None

            await eventually(find_ops, 60, "the combined /readyz answering 200")
            assert ops, log.read_text()
            body = (await http_get(session, f"{ops[0]}/readyz"))[1]
            assert "informer: " in body and "extender: ok" in body
            (extender,) = [u for u in urls if u != ops[0]]
            assert (await http_get(session, f"{extender}/healthz"))[0] == 200
            metrics = (await http_get(session, f"{ops[0]}/metrics"))[1]
            for name in ("vgpu_registrar_leader", "vgpu_informer_leader", "vgpu_filter_outcomes_total"):
                assert name in metrics
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 30)
        emulator.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(emulator.wait(), 30) == 0, emu_log.read_text()
    assert code == 0, log.read_text()
    assert "embedded in-process store" in log.read_text()


async def _no_quota(namespace: str) -> None:
    return None


async def test_driver_errors_carry_the_http_status_and_a_conflict_on_the_node_lock_is_retried(
    seeded_emulator: Emulator,
) -> None:
    em = seeded_emulator
    node = em.list("nodes")[0]["metadata"]["name"]
    em.patch("nodes", None, node, {"metadata": {"annotations": {"hami.io/mutex.lock": "2026-01-01T00:00:00Z,ns,p"}}})
    settings = settings_for("simulate", [], {})
    async with aiohttp.ClientSession() as session:
        kube = KubeHttp(session, em.url)
        em.inject_error(409, method="PATCH", path=f"/nodes/{node}$")
        with pytest.raises(DriverError) as raised:
            await kube.patch_node(node, {"metadata": {"labels": {"x": "y"}}})
        assert raised.value.status == 409
        with pytest.raises(DriverError) as unreachable:
            await KubeHttp(session, f"http://127.0.0.1:{free_port()}").list_nodes()
        assert unreachable.value.status is None

        driver = Driver(
            kube,
            Extenders(session, [em.url]),
            local_admission(
                cfg=settings.common.nvidia, scheduler_name="", force_overwrite_default_scheduler=False, quota=_no_quota
            ),
            cfg=settings.common.nvidia,
            defaults=Defaults(settings.extender.node_policy, settings.extender.gpu_policy),
        )
        em.inject_error(409, method="PATCH", path=f"/nodes/{node}$", times=2)
        await driver._release_node_lock(node, "ns", "p")
    annotations = (em.get("nodes", None, node) or {})["metadata"].get("annotations") or {}
    assert "hami.io/mutex.lock" not in annotations


async def test_a_2xx_body_that_is_not_json_is_a_driver_error() -> None:
    async def text(request: web.Request) -> web.Response:
        return web.Response(text="<html>a proxy page</html>")

    app = web.Application()
    app.router.add_get("/api/v1/nodes", text)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(DriverError, match="GET /nodes: JSONDecodeError"):
                await KubeHttp(session, f"http://127.0.0.1:{port}").list_nodes()
    finally:
        await runner.cleanup()
