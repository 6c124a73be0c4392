"""vgpu-scheduler on the real control plane: GPU nodes as HAMi's device plugin registers them, our services as
real processes (registrar, informer, N extender replicas over TLS behind a round-robin TCP balancer, as a
Service spreads connections; ``/filter`` and ``/bind`` only to kube-scheduler's client certificate, as the chart
deploys them), kube-scheduler configured from the chart's rendered KubeSchedulerConfiguration,
the chart's MutatingWebhookConfiguration pointed at the balancer, the device-plugin emulator, and
kube-controller-manager where ``Settings.controllers`` asks for controllers.

Used by the scenarios (``tests/controlplane/test_scenarios.py``) and ``benchmarks/bench_cluster.py``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import itertools
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.certs import Issued, make_ca
from tests.controlplane.control import ApiServer, Scheduler, make_serving_cert, start_scheduler
from tests.controlplane.controllers import ControllerManager, start_controller_manager
from tests.controlplane.devplugin import DEFAULT_ALLOCATE_LATENCY_S, HamiDevicePlugin
from tests.process import listening_addresses
from vgpu_scheduler.services.simulate.pools import SimulatedPlugin
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.register import encode_register_json
from vgpu_scheduler.shared.codec.topology import encode_topology
from vgpu_scheduler.shared.devconfig import parse_device_config
from vgpu_scheduler.shared.domain.model import NVIDIA, DeviceInfo, NvidiaConfig
from vgpu_scheduler.shared.k8s import KubeSettings, open_client
from vgpu_scheduler.shared.vendors import amd, ascend, awsneuron, cambricon, hygon
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors
from vgpu_scheduler.shared.vendors.registry import Vendors

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "manifests"
SCHEDULER_NAME = "vgpu-scheduler"
RUN_LABEL = "vgpu-test/run"
_STOP_TIMEOUT_S = 20.0
_WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"

# --- the chart's rendered manifests -------------------------------------------------------------------------


def _documents(file: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / file).read_text()) if isinstance(d, dict)]


def _kind(file: str, kind: str) -> dict[str, Any]:
    for doc in _documents(file):
        if doc.get("kind") == kind:
            return doc
    raise LookupError(f"no {kind} in {MANIFESTS / file}")


def chart_scheduler_config(
    url: str, ca_file: Path, client: Issued | None = None, vendor_resources: Sequence[str] = ()
) -> dict[str, Any]:
    """The chart's KubeSchedulerConfiguration with the extender's ``urlPrefix`` and CA pointed at the test's,
    ``client`` as the extender client certificate (``None``: kube-scheduler presents none) and
    ``vendor_resources`` added to ``managedResources`` (``ignoredByScheduler``), as the chart adds the resource
    names of the vendor sections of its device config (:func:`chart_vendor_resources`)."""
    config: dict[str, Any] = yaml.safe_load(_kind("kube-scheduler-config.yaml", "ConfigMap")["data"]["config.yaml"])
    for ext in config.get("extenders") or []:
        managed = ext.setdefault("managedResources", [])
        have = {m.get("name") for m in managed}
        managed.extend({"name": r, "ignoredByScheduler": True} for r in vendor_resources if r not in have)
        ext["urlPrefix"] = url
        tls = ext.setdefault("tlsConfig", {})
        tls["caFile"] = str(ca_file)
        tls.pop("certFile", None)
        tls.pop("keyFile", None)
        if client is not None:
            tls["certFile"], tls["keyFile"] = str(client.cert), str(client.key)
    return config


def native_scheduler_config() -> dict[str, Any]:
    """The same configuration without the extender: kube-scheduler places ``nvidia.com/gpu`` by itself."""
    config = chart_scheduler_config("https://unused", Path("/unused"))
    config.pop("extenders", None)
    return config


def chart_args(component: str) -> list[str]:
    """The container args of the chart's ``<component>`` Deployment, minus those the harness sets itself (listen
    addresses, certificate files, device config path, key prefix, log format)."""
    deployment = _kind(f"{component}.yaml", "Deployment")
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    own = (
        "--http_bind",
        "--webhook-bind",  # the balancer fronts --http_bind, which also serves /webhook without it
        "--cert_file",
        "--key_file",
        "--client-ca-file",
        "--insecure-allow-unauthenticated-scheduler",
        "--redis-password-file",  # the session's redis-server has no password
        "--metrics-bind-address",
        "--device-config-file",
        "--key-prefix",
        "--log-format",
    )
    return [a for a in args[1:] if not a.startswith(own)]


def chart_device_config() -> str:
    return str(_kind("device-config.yaml", "ConfigMap")["data"]["device-config.yaml"])


def device_config_document(sections: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The chart's device config with ``sections`` added (the vendor sections a test enables)."""
    doc: dict[str, Any] = yaml.safe_load(chart_device_config())
    doc.update(sections or {})
    return doc


def vendors_of(document: Mapping[str, Any], enable_flags: Collection[str] = ()) -> Vendors:
    """The vendors a device config document and HAMi's enable flags enable, as every service builds them."""
    parsed = parse_device_config(dict(document))
    return enabled_vendors(parsed.nvidia, parsed.vendor_sections, enable_flags)


def chart_vendor_resources(document: Mapping[str, Any], enable_flags: Collection[str] = ()) -> list[str]:
    """The chart's ``vgpu-scheduler.vendorResources``: every enabled vendor's count, memory and core resource
    names but NVIDIA's, as the services derive them (tests/unit/deploy/test_device_config.py checks that the
    chart's helper renders the same names)."""
    names = [
        n
        for v in vendors_of(document, enable_flags)
        if v.name != NVIDIA
        for n in (v.resources.count, v.resources.memory, v.resources.cores)
        if n
    ]
    return list(dict.fromkeys(names))


def chart_webhook(
    name: str, url: str, ca_pem: bytes, namespace_label: tuple[str, str], vendor_resources: Sequence[str] = ()
) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration with ``clientConfig.url`` and ``caBundle`` instead of a Service,
    renamed ``name``, limited to namespaces carrying ``namespace_label`` (the shared API server serves other
    tests too), and ``vendor_resources`` added to the resource list of its ``matchConditions`` as the chart adds
    the resource names of its device config's vendor sections."""
    config = _kind("webhook.yaml", "MutatingWebhookConfiguration")
    config["metadata"] = {"name": name}
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": url + "/webhook", "caBundle": base64.b64encode(ca_pem).decode()}
        selector = hook.setdefault("namespaceSelector", {})
        selector.setdefault("matchExpressions", []).append(
            {"key": namespace_label[0], "operator": "In", "values": [namespace_label[1]]}
        )
        for cond in hook.get("matchConditions") or []:
            cond["expression"] = _with_resources(cond["expression"], vendor_resources)
    return config


_CEL_LIST = re.compile(r'\[("[^"\]]*"(?:,"[^"\]]*")*)\]')


def _with_resources(expression: str, extra: Sequence[str]) -> str:
    """The chart's CEL condition with ``extra`` appended to its list literal of resource names."""
    if not extra:
        return expression
    match = _CEL_LIST.search(expression)
    if match is None:
        raise LookupError(f"no resource list in the webhook's matchConditions: {expression}")
    names = json.loads(match.group(0))
    names += [r for r in extra if r not in names]
    return expression[: match.start()] + json.dumps(names, separators=(",", ":")) + expression[match.end() :]


# --- nodes and pods -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeShape:
    gpus: int = 4
    slots: int = 10
    mem_mib: int = 16384
    cores: int = 100
    type: str = "NVIDIA-A100-SXM4-40GB"
    topology: bool = False
    """Write ``hami.io/node-nvidia-score`` (pairs in the same half of the node score higher)."""


def node_devices(name: str, shape: NodeShape) -> tuple[DeviceInfo, ...]:
    return tuple(
        DeviceInfo(
            id=f"GPU-{name}-{i}",
            index=i,
            count=shape.slots,
            devmem_mib=shape.mem_mib,
            devcore=shape.cores,
            type=shape.type,
            numa=0 if i < shape.gpus // 2 or shape.gpus == 1 else 1,
            mode="hami-core",
            health=True,
        )
        for i in range(shape.gpus)
    )


def gpu_node(name: str, shape: NodeShape, labels: Mapping[str, str]) -> dict[str, Any]:
    """A Node as kubelet + HAMi's device plugin leave it: Ready, allocatable GPU slots, the register annotation."""
    devices = node_devices(name, shape)
    annotations = {keys.NODE_NVIDIA_REGISTER: encode_register_json(devices)}
    if shape.topology:
        half = max(1, shape.gpus // 2)
        annotations[keys.NODE_NVIDIA_SCORE] = encode_topology(
            {
                a.id: {b.id: (100 if a.index // half == b.index // half else 10) for b in devices if b.id != a.id}
                for a in devices
            }
        )
    resources = {"cpu": "64", "memory": "512Gi", "pods": "250", "nvidia.com/gpu": str(shape.gpus * shape.slots)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name}, "annotations": annotations},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


@dataclass(frozen=True)
class VendorPart:
    """One vendor's devices on a node, as its device plugin registers them: ``vendor`` is the common word
    (``NVIDIA``, ``DCU``, ``MLU``, ``AMD`` or an Ascend chip such as ``Ascend910B3``)."""

    vendor: str
    devices: int = 2
    mem_mib: int = 16384
    slots: int = 10
    cores: int = 100
    type: str = ""
    """The device type (``""``: the common word; NVIDIA: an A100)."""
    mode: str = ""
    """Ascend: ``hami-core`` writes the node annotation ``hami-vnpu-core: "true"`` (HAMi's Ascend plugin on a
    node running the soft split), ``template`` writes ``"false"``; ``""`` writes none."""


def _part_devices(node: str, part: VendorPart) -> tuple[DeviceInfo, ...]:
    if part.vendor == awsneuron.NAME:  # ``cores`` NeuronCores per device; ``type`` the node's instance type
        return awsneuron.devices_from_capacity(
            node, part.devices, part.devices * part.cores, part.type or "inf2.xlarge"
        )
    if part.vendor == cambricon.MLU:
        devices = cambricon.devices_from_capacity(
            node, cambricon.CARD_CORES * part.devices, part.devices * part.mem_mib // cambricon.MEMORY_UNIT_MIB
        )
        kind = part.type or cambricon.MLU
        return tuple(dataclasses.replace(d, type=kind) for d in devices)
    kind = part.type or ("NVIDIA-A100-SXM4-40GB" if part.vendor == "NVIDIA" else part.vendor)
    return tuple(
        DeviceInfo(
            id=f"{part.vendor}-{node}-{i}",
            index=i,
            count=part.slots,
            devmem_mib=part.mem_mib,
            devcore=part.cores,
            type=kind,
            numa=0,
            mode="hami-core" if part.vendor == "NVIDIA" else "",
            health=True,
            vendor=part.vendor,
        )
        for i in range(part.devices)
    )


def vendor_node(name: str, parts: Sequence[VendorPart], labels: Mapping[str, str], vendors: Vendors) -> dict[str, Any]:
    """A Ready Node carrying the devices of every part, each registered the way its vendor's device plugin does
    (NVIDIA: JSON register annotation; DCU: the colon format; AMD: JSON; Ascend: ``hami.io/node-register-<cw>``;
    Cambricon: node capacity and the ``Model`` label) and its count resource allocatable."""
    annotations: dict[str, str] = {}
    node_labels = {**labels, "kubernetes.io/hostname": name}
    resources = {"cpu": "64", "memory": "512Gi", "pods": "250"}
    for part in parts:
        vendor = vendors.get(part.vendor)
        if vendor is None:
            raise LookupError(f"vendor {part.vendor} is not enabled by the scenario's device config")
        devices = _part_devices(name, part)
        count = {vendor.resources.count: str(sum(d.count for d in devices))}
        if part.vendor == "NVIDIA":
            annotations[keys.NODE_NVIDIA_REGISTER] = encode_register_json(devices)
        elif part.vendor == hygon.NAME:
            annotations.update(hygon.registration_annotations(devices))
        elif part.vendor == amd.NAME:
            annotations.update(amd.registration_annotations(devices))
        elif part.vendor == cambricon.MLU:
            assert isinstance(vendor, cambricon.CambriconVendor)
            count = cambricon.node_capacity(devices, vendor)
            node_labels.update(cambricon.node_labels(devices))
        elif isinstance(vendor, ascend.AscendVendor):
            annotations.update(vendor.registration_annotations(devices))
            if part.mode:
                annotations[ascend.VNPU_NODE_ANNOTATION] = "true" if part.mode == "hami-core" else "false"
        elif isinstance(vendor, SimulatedPlugin):
            annos, count, more_labels = vendor.node_registration(devices)
            annotations.update(annos)
            node_labels.update(more_labels)
        else:
            raise LookupError(f"no node builder for vendor {part.vendor}")
        resources.update(count)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels, "annotations": annotations},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def vendor_pod(
    name: str,
    containers: Sequence[Mapping[str, str]],
    *,
    scheduler: str | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod with one container per ``limits`` mapping (no schedulerName by default: the webhook sets it)."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": f"c{i}", "image": "app", "resources": {"limits": dict(limits)}}
            for i, limits in enumerate(containers)
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": spec,
    }


def gpu_pod(
    name: str,
    *,
    gpus: int = 1,
    mem: int | None = 2000,
    cores: int | None = 10,
    scheduler: str | None = SCHEDULER_NAME,
    annotations: Mapping[str, str] | None = None,
    init: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A pod with one GPU container (``mem``/``cores`` None: not requested) and optional init containers."""
    limits = {"nvidia.com/gpu": str(gpus)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if init:
        spec["initContainers"] = [dict(c) for c in init]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": spec,
    }


def gpu_container(name: str, *, mem: int = 1000, cores: int = 10, sidecar: bool = False) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem), "nvidia.com/gpucores": str(cores)}
    ctr: dict[str, Any] = {"name": name, "image": "cuda", "resources": {"limits": limits}}
    if sidecar:
        ctr["restartPolicy"] = "Always"
    return ctr


# --- an asynchronous API client for the test itself ---------------------------------------------------------


class Kube:
    """A thin aiohttp client on the admin token (creating pods in bulk, listing, watching binds)."""

    def __init__(self, api: ApiServer, session: aiohttp.ClientSession) -> None:
        self.api = api
        self.session = session
        self.ssl = api.ssl_context()
        self.headers = {"Authorization": f"Bearer {api.token}"}

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, api: ApiServer) -> AsyncIterator[Kube]:
        connector = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
            yield cls(api, session)

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(status, decoded body); retried on 429 and 5xx a few times."""
        for attempt in range(8):
            async with self.session.request(
                method,
                self.api.url + path,
                json=body,
                ssl=self.ssl,
                headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=60),
            ) as resp:
                data = await resp.json(content_type=None) if resp.content_length != 0 else None
                if resp.status == 429 or resp.status >= 500:
                    await asyncio.sleep(0.1 * (attempt + 1))  # the API server asked us to back off
                    continue
                return resp.status, data
        return resp.status, data

    async def create(self, path: str, body: Mapping[str, Any]) -> Any:
        status, data = await self.call("POST", path, body)
        if status >= 300:
            raise RuntimeError(f"POST {path} {body.get('metadata', {}).get('name')}: {status} {data}")
        return data

    async def create_all(self, path: str, bodies: Iterable[Mapping[str, Any]], concurrency: int = 16) -> None:
        sem = asyncio.Semaphore(concurrency)

        async def one(b: Mapping[str, Any]) -> None:
            async with sem:
                await self.create(path, b)

        await asyncio.gather(*(one(b) for b in bodies))

    async def merge_patch(self, path: str, patch: Mapping[str, Any]) -> int:
        """A JSON merge patch (``Kube.call`` sends plain JSON, which PATCH refuses); the answer's status."""
        async with self.session.patch(
            self.api.url + path,
            data=json.dumps(patch),
            ssl=self.ssl,
            headers={**self.headers, "Content-Type": "application/merge-patch+json"},
            timeout=aiohttp.ClientTimeout(total=60),
        ) as resp:
            await resp.read()
            return resp.status

    async def text(self, path: str) -> str:
        """A plain-text GET (``/metrics``); empty on any error status."""
        async with self.session.get(
            self.api.url + path, ssl=self.ssl, headers=self.headers, timeout=aiohttp.ClientTimeout(total=60)
        ) as resp:
            return await resp.text() if resp.status == 200 else ""

    async def items(self, path: str) -> list[dict[str, Any]]:
        status, data = await self.call("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {data}")
        items: list[dict[str, Any]] = data["items"]
        return items


@dataclass
class BindWatch:
    """When each pod of a namespace was first seen bound (a watch on the real API server)."""

    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    """The node each bound pod went to."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, kube: Kube, namespace: str) -> None:
        await watch_objects(kube, f"/api/v1/namespaces/{namespace}/pods", self._seen)

    async def _seen(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name", "")
        node_name = (obj.get("spec") or {}).get("nodeName")
        if node_name and name not in self.bound:
            self.bound[name] = time.monotonic()
            self.nodes[name] = node_name
            self.changed.set()


async def watch_objects(kube: Kube, path: str, handle: Callable[[str, dict[str, Any]], Awaitable[None]]) -> None:
    """Watch ``path`` for ever: ``handle(event type, object)`` for each event; re-opened where it stopped when it
    drops (an API server restart), re-listed (from resourceVersion 0) on an ERROR (410 Gone)."""
    rv = "0"
    while True:
        url = f"{kube.api.url}{path}?watch=1&allowWatchBookmarks=false"
        if rv != "0":
            url += f"&resourceVersion={rv}"
        try:
            timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
            async with kube.session.get(url, ssl=kube.ssl, headers=kube.headers, timeout=timeout) as resp:
                async for line in resp.content:
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        rv = "0"
                        break
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    await handle(str(event.get("type")), obj)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            await asyncio.sleep(0.2)  # the watch dropped: re-open it


# --- a Service: round-robin over the extender replicas, per connection --------------------------------------


class TcpBalancer:
    """A loopback TCP balancer: each new connection goes to the next live backend (round robin), bytes piped both
    ways, TLS passed through, as kube-proxy spreads a Service's connections over its endpoints."""

    def __init__(self, backends: Sequence[tuple[str, int]]) -> None:
        self.backends = list(backends)
        self.down: set[int] = set()
        self.unready: set[int] = set()
        """Backends failing their readiness probe (:mod:`tests.controlplane.readiness`): no new connection either."""
        self._next = itertools.count()
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            upstream = await self._connect()
            if upstream is None:
                return
            up_reader, up_writer = upstream
            try:
                await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
            finally:
                up_writer.close()
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()
            self._conns.discard(task)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for _ in range(len(self.backends)):
            i = next(self._next) % len(self.backends)
            if i in self.down or i in self.unready:
                continue
            try:
                return await asyncio.open_connection(*self.backends[i])
            except OSError:
                continue
        return None

    async def _flowing(self) -> None:
        """Awaited before each write: a subclass holds the bytes back here (a network partition)."""

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                await self._flowing()
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                dst.write_eof()


# --- our services as real processes -------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """How vgpu-scheduler runs: ``chart`` takes every flag from the chart's Deployments; otherwise the flag
    defaults. ``extra`` flags apply to every extender replica (e.g. ``--kube-qps=100``)."""

    replicas: int = 1
    chart: bool = True
    node_policy: str | None = None
    gpu_policy: str | None = None
    extra: tuple[str, ...] = ()
    webhook: bool = True
    allocate_latency_s: float = DEFAULT_ALLOCATE_LATENCY_S
    scheduler_qps: int | None = None
    """kube-scheduler's clientConnection qps (burst twice); None: its defaults."""
    scheduler_feature_gates: str = ""
    """kube-scheduler's ``--feature-gates`` (the release's ``gangapi.GangApi.feature_gates`` for the gang scenarios)."""
    scheduler_client_cert: bool = True
    """kube-scheduler presents its client certificate to the extenders (``--client-ca-file``); False: none."""
    device_sections: Mapping[str, Any] = field(default_factory=dict)
    """Vendor sections added to the chart's device config (``hygon:``, ``vnpus:`` …): they enable those vendors
    in every service, and their resource names join kube-scheduler's ``managedResources`` as the chart does.
    Only with ``chart=True`` (the flag defaults read no device config)."""
    enable_flags: tuple[str, ...] = ()
    """HAMi's flags enabling opt-in families (``enable-ascend``), given to every service as the chart's
    ``deviceConfig.enableAscend`` gives them."""
    controllers: tuple[str, ...] = ()
    """kube-controller-manager's controllers to run beside the system (``controllers.WORKLOAD_CONTROLLERS``:
    Deployments, ReplicaSets, the disruption controller, the garbage collector); empty: no controller-manager."""
    replica_redis: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    """Extender replica index → its Redis flags instead of the run's ``--redis-url`` (a replica reaching Redis
    through a proxy the chaos run can stall)."""

    def device_document(self) -> dict[str, Any] | None:
        """The device config the services read (None: none, every flag at its default)."""
        return device_config_document(self.device_sections) if self.chart else None

    def vendors(self) -> Vendors:
        """The vendors the services enable (HAMi's default families without a device config)."""
        doc = self.device_document()
        return vendors_of(doc, self.enable_flags) if doc is not None else enabled_vendors(NvidiaConfig())


@dataclass
class Service:
    name: str
    proc: asyncio.subprocess.Process
    log: Path
    killed: bool = False
    exit_code: int | None = None
    args: tuple[str, ...] = ()
    """Its command-line arguments (to start it again as a Deployment replaces a pod)."""
    starts: int = 1


@dataclass
class System:
    """The running system; :meth:`crashed` lists the project processes that did not stay up or stop cleanly."""

    api: ApiServer
    services: list[Service]
    balancer: TcpBalancer
    scheduler: Scheduler
    plugin: HamiDevicePlugin
    extender_urls: list[str]
    scheduler_client: Issued | None = None
    """kube-scheduler's client certificate (``cert``/``key`` paths): what another caller of /filter and /bind
    must present, as a second scheduler would."""
    controller_manager: ControllerManager | None = None
    """kube-controller-manager, when ``Settings.controllers`` names controllers."""

    def extenders(self) -> list[Service]:
        return [s for s in self.services if s.name.startswith("extender")]

    async def kill_extender(self, index: int) -> None:
        """SIGKILL one replica (a node failure: no drain); the balancer stops sending it new connections."""
        await self.kill(self.extenders()[index].name)

    def service(self, name: str) -> Service:
        for s in self.services:
            if s.name == name:
                return s
        raise LookupError(f"no service {name}")

    async def kill(self, name: str) -> None:
        """SIGKILL the service ``name`` (a node failure: no drain); an extender leaves the balancer."""
        service = self.service(name)
        service.killed = True
        if name.startswith("extender"):
            self.balancer.down.add(self.extenders().index(service))
        service.proc.kill()
        await service.proc.wait()

    async def restart(self, name: str) -> None:
        """Start the (killed) service ``name`` again with its arguments, logging to a new file, as a Deployment
        replaces a pod; an extender rejoins the balancer at its new address once ready."""
        old = self.service(name)
        log = old.log.with_name(f"{name}.{old.starts}.log")
        new = await _start(name, log, old.args)
        new.starts = old.starts + 1
        self.services[self.services.index(old)] = new
        async with aiohttp.ClientSession(trust_env=False) as session:
            if not name.startswith("extender"):
                (metrics,) = (await _listening(new, 1))[:1]
                await _ready(session, f"http://{metrics}/healthz", None, new)
                return
            index = self.extenders().index(new)
            await _listening(new, 2)
            tls = _tls_address(new.log)
            host, port = tls.rsplit(":", 1)
            await _ready(session, f"https://{tls}/readyz", self.api.ssl_context(), new)
            self.balancer.backends[index] = (host, int(port))
            self.extender_urls[index] = f"https://{tls}"
            self.balancer.down.discard(index)

    def crashed(self) -> list[str]:
        out = []
        for s in self.services:
            code = s.proc.returncode if s.exit_code is None else s.exit_code
            if s.killed or code is None or code == 0:
                continue
            tail = "\n".join(s.log.read_text(errors="replace").splitlines()[-5:])
            out.append(f"{s.name} exited with code {code}: {tail}")
        return out

    def log_count(self, needle: str) -> int:
        return sum(s.log.read_text(errors="replace").count(needle) for s in self.services)


async def _start(name: str, log: Path, args: Sequence[str]) -> Service:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vgpu_scheduler.services.cli",
            *args,
            "--log-format=json",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    _profile(name, proc.pid)
    return Service(name, proc, log, args=tuple(args))


PROFILE_ENV = "VGPU_PROFILE_DIR"


def _profile(name: str, pid: int) -> None:
    """With ``VGPU_PROFILE_DIR`` set (and py-spy beside the interpreter or on the PATH), attach a sampling profiler
    to the service: ``<dir>/<name>-<pid>.txt`` in py-spy's raw (collapsed stack) format, written when the service
    stops. For benchmarks; the tests never set it."""
    out = os.environ.get(PROFILE_ENV)
    if not out:
        return
    spy = shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if spy is None:
        raise RuntimeError(f"{PROFILE_ENV} is set but py-spy is not installed (pip install py-spy)")
    Path(out).mkdir(parents=True, exist_ok=True)
    subprocess.Popen(  # ends by itself when the service exits
        [spy, "record", "--gil", "-f", "raw", "-r", "50", "-p", str(pid), "-o", f"{out}/{name}-{pid}.txt"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _listening(service: Service, count: int, timeout_s: float = 60.0) -> list[str]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        addresses = listening_addresses(service.log)
        if len(addresses) >= count:
            return addresses
        if service.proc.returncode is not None:
            break
        await asyncio.sleep(0.05)  # another process' log: no event to await
    raise RuntimeError(f"{service.name} never listened:\n{service.log.read_text(errors='replace')[-3000:]}")


async def _ready(session: aiohttp.ClientSession, url: str, ctx: ssl.SSLContext | None, service: Service) -> None:
    end = time.monotonic() + 90
    while time.monotonic() < end:
        if service.proc.returncode is not None:
            break
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            timeout = aiohttp.ClientTimeout(total=2)
            async with session.get(url, ssl=ctx if ctx is not None else False, timeout=timeout) as r:
                if r.status == 200:
                    return
        await asyncio.sleep(0.1)  # another process becoming ready: no event to await
    raise RuntimeError(f"{service.name} not ready at {url}:\n{service.log.read_text(errors='replace')[-3000:]}")


async def _stop(service: Service) -> None:
    if service.proc.returncode is None:
        service.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(service.proc.wait(), _STOP_TIMEOUT_S)
        except TimeoutError:
            service.proc.kill()
            await service.proc.wait()
            service.exit_code = -9
            return
    if service.exit_code is None:
        service.exit_code = service.proc.returncode


@contextlib.asynccontextmanager
async def running_system(
    api: ApiServer, redis_url: str, tmp: Path, settings: Settings, *, run_id: str, node_selector: str
) -> AsyncIterator[System]:
    """Start registrar, informer, ``settings.replicas`` extenders (TLS), the balancer, the webhook registration,
    kube-scheduler and the device plugin; stop them all (SIGTERM) on exit, recording each exit code."""
    tmp.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - set-up before anything runs
    ca = (api.cert_dir / "ca.crt", api.cert_dir / "ca.key")
    cert, key = make_serving_cert(tmp, "extender", ca, ecdsa=True)  # as the chart issues it
    client_ca = make_ca(tmp / "scheduler-client-ca", "vgpu-scheduler-client-ca")
    client_cert = client_ca.issue(tmp / "scheduler-client", "kube-scheduler", client=True)
    device_config = tmp / "device-config.yaml"
    document = settings.device_document()
    device_config.write_text(yaml.safe_dump(document) if document is not None else chart_device_config())
    vendor_resources = chart_vendor_resources(document, settings.enable_flags) if document is not None else []
    prefix = f"--key-prefix=vgpu-{run_id}"
    common = [f"--redis-url={redis_url}", f"--kubeconfig={api.kubeconfig}", prefix]
    common.append("--metrics-bind-address=127.0.0.1:0")
    if settings.chart:
        common.append(f"--device-config-file={device_config}")
    common.extend(f"--{flag}" for flag in settings.enable_flags)

    def flags(component: str) -> list[str]:
        return chart_args(component) if settings.chart else []

    services: list[Service] = []
    balancer = TcpBalancer([])
    hooks = TcpBalancer([])  # the webhook's Service (publishNotReadyAddresses): the same replicas, readiness ignored
    hooks.backends, hooks.down = balancer.backends, balancer.down
    webhook_name = f"vgpu-{run_id}"
    stack = contextlib.AsyncExitStack()
    try:
        async with aiohttp.ClientSession(trust_env=False) as session:
            registrar = await _start(
                "registrar",
                tmp / "registrar.log",
                ["registrar", *common, *flags("registrar"), f"--node-label-selector={node_selector}"],
            )
            services.append(registrar)
            informer = await _start("informer", tmp / "informer.log", ["informer", *common, *flags("informer")])
            services.append(informer)
            policy = []
            if settings.node_policy:
                policy.append(f"--node-scheduler-policy={settings.node_policy}")
            if settings.gpu_policy:
                policy.append(f"--gpu-scheduler-policy={settings.gpu_policy}")
            for i in range(settings.replicas):
                redis = settings.replica_redis.get(i)
                ext = await _start(
                    f"extender-{i}",
                    tmp / f"extender-{i}.log",
                    [
                        "extender",
                        *(common if redis is None else [*redis, *common[1:]]),
                        *flags("extender"),
                        "--http_bind=127.0.0.1:0",
                        f"--cert_file={cert}",
                        f"--key_file={key}",
                        f"--client-ca-file={client_ca.cert}",
                        f"--scheduler-name={SCHEDULER_NAME}",
                        *policy,
                        *settings.extra,
                    ],
                )
                services.append(ext)
            ctx = api.ssl_context()
            for s in (registrar, informer):
                (metrics,) = (await _listening(s, 1))[:1]
                await _ready(session, f"http://{metrics}/healthz", None, s)
            urls = []
            for s in services[2:]:
                await _listening(s, 2)
                tls = _tls_address(s.log)
                host, port = tls.rsplit(":", 1)
                balancer.backends.append((host, int(port)))
                urls.append(f"https://{tls}")
                await _ready(session, f"https://{tls}/readyz", ctx, s)
            await balancer.start()
            await hooks.start()
            # One replica: kube-scheduler calls it directly, as through a Service's kernel-level balancing; the
            # balancer (bytes relayed in this Python process) would cost as much CPU as the extender itself.
            front = urls[0] if len(urls) == 1 else f"https://127.0.0.1:{balancer.port}"
            if settings.webhook:
                hook_url = urls[0] if len(urls) == 1 else f"https://127.0.0.1:{hooks.port}"
                hook = chart_webhook(
                    webhook_name, hook_url, api.ca_file.read_bytes(), (RUN_LABEL, run_id), vendor_resources
                )
                api.request("POST", _WEBHOOKS, hook)
            sched_config = chart_scheduler_config(
                front, api.ca_file, client_cert if settings.scheduler_client_cert else None, vendor_resources
            )
            if settings.scheduler_qps:
                sched_config["clientConnection"] = {"qps": settings.scheduler_qps, "burst": 2 * settings.scheduler_qps}
            scheduler = stack.enter_context(
                start_scheduler(
                    api, sched_config, tmp / "kube-scheduler", feature_gates=settings.scheduler_feature_gates
                )
            )
            manager = (
                stack.enter_context(start_controller_manager(api, tmp / "kcm", controllers=settings.controllers))
                if settings.controllers
                else None
            )
            kube_client = await stack.enter_async_context(
                open_client(KubeSettings(kubeconfig=str(api.kubeconfig), qps=0, burst=1, user_agent="devplugin"))
            )
            plugin = HamiDevicePlugin(kube_client, latency_s=settings.allocate_latency_s, vendors=settings.vendors())
            plugin_task = asyncio.create_task(plugin.run(), name="device-plugin")
            try:
                yield System(
                    api,
                    services,
                    balancer,
                    scheduler,
                    plugin,
                    urls,
                    scheduler_client=client_cert,
                    controller_manager=manager,
                )
            finally:
                plugin_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await plugin_task
    finally:
        await stack.aclose()
        if settings.webhook:
            with contextlib.suppress(Exception):
                api.request("DELETE", f"{_WEBHOOKS}/{webhook_name}")
        await balancer.stop()
        await hooks.stop()
        for s in reversed(services):
            await _stop(s)


def _tls_address(log: Path) -> str:
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("msg") == "listening" and record.get("tls"):
                return str(record["address"])
    raise RuntimeError(f"no TLS listener in {log}")
