"""The chart's Redis-with-Sentinel start scripts, run as real processes: three "pods" on three loopback addresses
(127.0.0.2-4, the same ports on each, as pods have), each a redis-server and a Sentinel started by the chart's own
``start-redis.sh`` and ``start-sentinel.sh`` with a password, in the StatefulSet's order. The components' URL
finds the primary; the primary is SIGKILLed and fails over; its pod restarts and rejoins as a replica of the new
primary, not as a second, empty one; nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.store import Reserved, Store, connect

helm_python = pytest.importorskip("helm_python", reason="helm-python-sdk renders the chart")

IPS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
PASSWORD = "s3cret-sentinel"


def _port_free_everywhere() -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind((IPS[0], 0))
            port = int(s.getsockname()[1])
        try:
            for ip in IPS[1:]:
                with socket.socket() as s:
                    s.bind((ip, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on every loopback address")


def _scripts(redis_port: int, sentinel_port: int) -> dict[str, str]:
    from deploy.render import load_chart, objects, render_chart

    values = {
        "redis": {
            "port": redis_port,
            "sentinel": {
                "enabled": True,
                "port": sentinel_port,
                "downAfterMilliseconds": 500,
                "failoverTimeout": 3000,
            },
        }
    }
    with load_chart() as chart:
        docs = objects(render_chart(chart, values=values, release="vgpu-scheduler", namespace="vgpu-system"))
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-redis-scripts")]
    data: dict[str, str] = cm["data"]
    return data


class Pod:
    """One StatefulSet pod: its redis-server and its Sentinel, started by the chart's scripts."""

    def __init__(self, ip: str, root: Path, env: dict[str, str]) -> None:
        self.ip = ip
        self.env = env
        self.dirs = {role: root / ip / role for role in ("redis", "sentinel")}
        for d in self.dirs.values():
            d.mkdir(parents=True)
        self.procs: dict[str, asyncio.subprocess.Process] = {}

    async def start(self, role: str, port: int) -> None:
        env = {**self.env, "REDIS_SELF": self.ip, "REDIS_BIND": self.ip, "DATA_DIR": str(self.dirs[role])}
        proc = await asyncio.create_subprocess_exec(
            "sh",
            f"{env['SCRIPTS_DIR']}/start-{role}.sh",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        self.procs[role] = proc
        for _ in range(1000):  # the Sentinel's script waits for the primary first
            if proc.returncode is not None:
                raise RuntimeError(f"{role} on {self.ip} exited with {proc.returncode}")
            try:
                _, writer = await asyncio.open_connection(self.ip, port)
                writer.close()
                await writer.wait_closed()
                return
            except OSError:
                await asyncio.sleep(0.02)  # an external process starting: nothing to await
        raise RuntimeError(f"{role} on {self.ip} did not listen")

    async def kill(self, role: str) -> None:
        proc = self.procs.pop(role)
        proc.kill()
        await proc.wait()

    async def stop(self) -> None:
        for role in list(self.procs):
            await self.kill(role)


async def _info(ip: str, port: int) -> dict[str, str]:
    client = connect(f"redis://:{PASSWORD}@{ip}:{port}/0")
    try:
        raw: Any = await client.info("replication")
        return {str(k): str(v) for k, v in raw.items()}
    finally:
        await client.aclose()


@pytest.fixture
async def pods(tmp_path: Path) -> AsyncIterator[tuple[list[Pod], int, int]]:
    redis_port, sentinel_port = _port_free_everywhere(), _port_free_everywhere()
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name, text in _scripts(redis_port, sentinel_port).items():
        (scripts / name).write_text(text)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HEADLESS": "unused.invalid",
        "REDIS_PEERS": " ".join(IPS),
        "SCRIPTS_DIR": str(scripts),
        "REDIS_PASSWORD": PASSWORD,
        "REDISCLI_AUTH": PASSWORD,
    }
    started = [Pod(ip, tmp_path, env) for ip in IPS]
    try:
        for pod in started:  # OrderedReady: one pod after the other
            await pod.start("redis", redis_port)
            await pod.start("sentinel", sentinel_port)
        yield started, redis_port, sentinel_port
    finally:
        for pod in started:
            await pod.stop()


async def _eventually(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if await check():
                return
        except (OSError, TransientError, ConnectionError, RedisConnectionError):
            # a restarted redis-server may reset a connection while it starts (redis-py wraps that in its own
            # ConnectionError, which is not an OSError)
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.1)  # external processes (replication, Sentinel elections): nothing to await


async def test_the_charts_sentinel_pods_fail_over_and_a_restarted_pod_rejoins_as_a_replica(
    pods: tuple[list[Pod], int, int], tmp_path: Path
) -> None:
    group, redis_port, sentinel_port = pods

    async def replicas_online() -> bool:
        info = await _info(IPS[0], redis_port)
        online = [k for k, v in info.items() if k.startswith("slave") and "online" in v]
        return info["role"] == "master" and len(online) == 2

    await _eventually(replicas_online, 20, "pod 0 the primary with two replicas online")
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    url = "redis+sentinel://" + ",".join(f"{ip}:{sentinel_port}" for ip in IPS) + "/mymaster/0"
    # a generous WAIT timeout: a loaded test machine may not run a replica within the default 250 ms
    store = Store.create(connect(url, password_file=str(password_file)), prefix="chart", wait_timeout_s=2.0)
    try:
        await store.inventory.put(node("n1", gpu("GPU-a", count=100)))
        epoch = await store.meta.ensure_epoch()
        for i in range(20):
            assert isinstance(await store.reservations.reserve(alloc(f"p{i}", "n1", (("GPU-a", 10, 1),))), Reserved)

        await group[0].kill("redis")  # the primary's node dies

        async def served() -> bool:
            return await store.meta.ping() >= 0

        await _eventually(served, 30, "the store answering through a new primary")
        assert [i for i in range(20) if await store.reservations.get(f"p{i}") is None] == []
        assert (await store.meta.status()).epoch != epoch  # the new primary started a new epoch

        await group[0].start("redis", redis_port)  # pod 0 restarts, empty

        async def rejoined() -> bool:
            info = await _info(IPS[0], redis_port)
            return info["role"] == "slave" and info.get("master_link_status") == "up"

        await _eventually(rejoined, 30, "pod 0 back as a replica of the new primary")
        assert (await _info(IPS[0], redis_port))["master_host"] in IPS[1:]
        assert await store.reservations.get("p0") is not None  # its empty start wiped nothing
    finally:
        await store.aclose()
