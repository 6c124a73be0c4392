"""The driver's HTTP clients: the API server's few core/v1 calls (as the emulator serves them, no credentials) and
kube-scheduler's side of the extender protocol (``/filter``, ``/bind``, ``/webhook``), with the exact JSON bodies the
real components send."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

import aiohttp

from vgpu_scheduler.shared.errors import TransientError

KubeObject = dict[str, Any]

MERGE_PATCH: Final = "application/merge-patch+json"
REQUEST_TIMEOUT_S: Final = 30.0


class DriverError(TransientError):
    """An HTTP call of the driver failed (status and body in the message; ``status`` is the HTTP status when the
    server answered, None when it did not)."""

    def __init__(self, message: str, *, status: int | None = None, timed_out: bool = False, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.timed_out = timed_out
        self.reason = reason
        """The API server's own message (its ``Status``), when it answered with one."""


def _status_message(text: bytes) -> str:
    """The ``message`` of a Kubernetes ``Status`` body ("" when the body is not one)."""
    try:
        body = json.loads(text)
    except ValueError:
        return ""
    return str(body.get("message") or "") if isinstance(body, dict) and body.get("kind") == "Status" else ""


# --------------------------------------------------------------------------------------------
# HTTP: the API server (core/v1 REST, as the emulator serves it) and the extenders
# --------------------------------------------------------------------------------------------


class KubeHttp:
    """The few core/v1 calls the driver makes, over plain HTTP (the emulator needs no credentials)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._session = session
        self._root = base_url.rstrip("/")
        self._base = self._root + "/api/v1"
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def _call(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json", root: bool = False
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        url = (self._root if root else self._base) + path
        try:
            async with self._session.request(method, url, data=data, headers=headers, timeout=self._timeout) as resp:
                text = await resp.read()
                if resp.status >= 300:
                    raise DriverError(
                        f"{method} {path}: HTTP {resp.status}: {text[:300].decode(errors='replace')}",
                        status=resp.status,
                        reason=_status_message(text),
                    )
                return json.loads(text) if text else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise DriverError(f"{method} {path}: {type(e).__name__}: {e}") from e

    async def list_nodes(self) -> list[KubeObject]:
        body = await self._call("GET", "/nodes")
        return list(body.get("items") or [])

    async def create_pod(self, pod: KubeObject) -> KubeObject:
        ns = pod["metadata"].get("namespace") or "default"
        created: KubeObject = await self._call("POST", f"/namespaces/{ns}/pods", pod)
        return created

    async def get_pod(self, namespace: str, name: str) -> KubeObject:
        pod: KubeObject = await self._call("GET", f"/namespaces/{namespace}/pods/{name}")
        return pod

    async def list_pods(self, *, node_name: str | None = None) -> list[KubeObject]:
        """Every pod, or those with ``spec.nodeName=<node_name>``."""
        query = f"?fieldSelector=spec.nodeName%3D{node_name}" if node_name is not None else ""
        body = await self._call("GET", f"/pods{query}")
        return list(body.get("items") or [])

    async def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any], *, status: bool = False) -> None:
        sub = "/status" if status else ""
        await self._call("PATCH", f"/namespaces/{namespace}/pods/{name}{sub}", patch, content_type=MERGE_PATCH)

    async def get_node(self, name: str) -> KubeObject:
        node: KubeObject = await self._call("GET", f"/nodes/{name}")
        return node

    async def patch_node(self, name: str, patch: Mapping[str, Any]) -> None:
        await self._call("PATCH", f"/nodes/{name}", patch, content_type=MERGE_PATCH)

    async def delete_pod(self, namespace: str, name: str, *, grace_period_s: int, uid: str | None = None) -> None:
        """DELETE a pod with DeleteOptions ``gracePeriodSeconds`` (0: at once, as the kubelet's final delete) and a
        uid precondition; a pod already gone is not an error."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace_period_s}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self._call("DELETE", f"/namespaces/{namespace}/pods/{name}", body)
        except DriverError as e:
            if e.status != 404:
                raise

    async def list_events(self, namespace: str, *, field_selector: str) -> list[KubeObject]:
        body = await self._call("GET", f"/namespaces/{namespace}/events?fieldSelector={quote(field_selector)}")
        return list(body.get("items") or [])

    async def create_namespaced(self, obj: Mapping[str, Any], plural: str) -> KubeObject:
        """Create an object of another API group (``obj['apiVersion']``: ``<group>/<version>``), e.g. a PodGroup."""
        ns = obj["metadata"].get("namespace") or "default"
        created: KubeObject = await self._call(
            "POST", f"/apis/{obj['apiVersion']}/namespaces/{ns}/{plural}", dict(obj), root=True
        )
        return created

    async def list_group(self, api_version: str, plural: str) -> list[KubeObject]:
        """Every object of another API group's resource (``policy/v1``, ``poddisruptionbudgets``)."""
        body = await self._call("GET", f"/apis/{api_version}/{plural}", root=True)
        return list(body.get("items") or [])

    async def put_status(self, obj: Mapping[str, Any], plural: str) -> None:
        """PUT an object of another API group on its ``/status`` (a controller's write)."""
        meta = obj["metadata"]
        path = f"/apis/{obj['apiVersion']}/namespaces/{meta['namespace']}/{plural}/{meta['name']}/status"
        await self._call("PUT", path, dict(obj), root=True)

    async def evict_pod(self, namespace: str, name: str) -> tuple[int, str]:
        """POST a ``policy/v1`` Eviction for the pod: ``(201, "")`` when it is being deleted, else the API server's
        HTTP status and message (``429`` when a PodDisruptionBudget forbids it, ``404`` when there is no such pod)."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            await self._call("POST", f"/namespaces/{namespace}/pods/{name}/eviction", body)
        except DriverError as e:
            if e.status is None or not e.reason:
                raise
            return e.status, e.reason
        return 201, ""


class Extenders:
    """kube-scheduler's side of the extender protocol, over one or more extender base URLs (used in turn)."""

    def __init__(self, session: aiohttp.ClientSession, urls: Sequence[str], *, timeout_s: float = REQUEST_TIMEOUT_S):
        if not urls:
            raise ValueError("at least one extender URL is needed")
        self._session = session
        self.urls = [u.rstrip("/") for u in urls]
        self._turn = itertools.count()
        self.timeout_s = timeout_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    def next_url(self) -> str:
        return self.urls[next(self._turn) % len(self.urls)]

    async def post(self, url: str, verb: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            async with self._session.post(
                f"{url}/{verb}",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
                timeout=self._timeout,
            ) as resp:
                text = await resp.read()
                if resp.status != 200:
                    raise DriverError(
                        f"POST {url}/{verb}: HTTP {resp.status}: {text[:300].decode(errors='replace')}",
                        status=resp.status,
                    )
                answer = json.loads(text)
        except TimeoutError as e:
            raise DriverError(f"POST {url}/{verb}: no answer within {self.timeout_s:g}s", timed_out=True) from e
        except (aiohttp.ClientError, ValueError) as e:
            raise DriverError(f"POST {url}/{verb}: {type(e).__name__}: {e}") from e
        if not isinstance(answer, dict):
            raise DriverError(f"POST {url}/{verb}: expected a JSON object, got {type(answer).__name__}")
        return answer

    async def filter(self, pod: KubeObject, node_names: Sequence[str]) -> dict[str, Any]:
        """``ExtenderArgs`` as kube-scheduler sends it with ``nodeCacheCapable: true``."""
        return await self.post(self.next_url(), "filter", {"Pod": pod, "Nodes": None, "NodeNames": list(node_names)})

    async def bind(self, pod: KubeObject, node: str) -> str:
        """``ExtenderBindingArgs``; returns the ``Error`` text ("" on success)."""
        meta = pod["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
        answer = await self.post(self.next_url(), "bind", body)
        return str(answer.get("Error") or "")
