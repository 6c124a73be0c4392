"""The Kubernetes API emulator: a real aiohttp server speaking core/v1 REST as kube-apiserver does, so
kubernetes-asyncio runs unmodified against it. Also the in-process helpers tests and the simulator use.

Served: ``nodes``, ``pods`` (+ ``/status``, ``/binding``, ``/eviction``: :mod:`.eviction`), ``resourcequotas``
(+ ``/status``), ``events``, ``namespaces``, ``podgroups`` of ``scheduling.k8s.io/v1beta1``, ``…/v1alpha2`` and
``scheduling.x-k8s.io/v1alpha1``, and ``policy/v1`` ``poddisruptionbudgets``, under ``/apis/<group>/<version>``;
list (label/field selectors), watch (newline-delimited JSON events, ``timeoutSeconds``, ``allowWatchBookmarks``,
410 ``Expired`` past the history window), get, create, update, patch (merge, strategic-as-merge, JSON patch),
delete. Nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from aiohttp import web

from vgpu_scheduler.shared.emulator.eviction import evict
from vgpu_scheduler.shared.emulator.paging import page
from vgpu_scheduler.shared.emulator.patch import merge_patch
from vgpu_scheduler.shared.emulator.resources import ResourceType, by_plural, resolve
from vgpu_scheduler.shared.emulator.selectors import parse_field_selector, parse_label_selector
from vgpu_scheduler.shared.emulator.status import ApiError, bad_request, reason_for, success_status
from vgpu_scheduler.shared.emulator.store import Obj, Store, Watcher, clone, dumps

logger = logging.getLogger(__name__)

_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})
_BATCH = 512  # watch frames written per socket write at most
_POD_POSTS = frozenset({"binding", "eviction"})


class WriteVerb(enum.Enum):
    CREATE = "create"
    UPDATE = "update"
    PATCH = "patch"
    DELETE = "delete"
    BIND = "bind"


@dataclass(frozen=True)
class WriteRecord:
    """One successful write request, as the hooks see it. ``result`` is the stored object afterwards (for a
    delete, its last state); ``body`` the parsed request body."""

    verb: WriteVerb
    resource: str
    namespace: str
    name: str
    subresource: str | None
    body: Any
    content_type: str | None
    result: Obj


@dataclass(frozen=True)
class RequestRecord:
    method: str
    path: str
    query: dict[str, str]


@dataclass
class _Fault:
    method: str | None
    path: re.Pattern[str]
    status: int | None  # None: answer normally, after the delay
    message: str
    remaining: int
    retry_after_s: int | None
    delay_s: float = 0.0


@dataclass(frozen=True)
class _Target:
    rtype: ResourceType
    namespace: str | None  # None: all namespaces (namespaced collection) or cluster-scoped
    name: str | None
    sub: str | None


def _json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=dumps(body), status=status, content_type="application/json", headers=headers)


def _for_list(obj: Obj) -> Obj:
    # list items carry no kind/apiVersion, as the real server serves typed lists
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


class Emulator:
    """An in-process Kubernetes API server for tests and ``vgpu-scheduler simulate``.

    ``history_limit`` is how many events watches can resume across (older versions get 410); ``bookmark_interval_s``
    how often idle watches that allow bookmarks get one (None: only on ``send_bookmarks()``);
    ``expired_as_http_status`` answers a too-old watch with HTTP 410 instead of an ERROR event in a 200 stream;
    ``graceful_pod_deletion`` deletes a pod bound to a node as kube-apiserver does (it stays, with
    ``deletionTimestamp``, until deleted again with ``gracePeriodSeconds: 0``, as a kubelet does).
    """

    def __init__(
        self,
        *,
        history_limit: int = 10_000,
        bookmark_interval_s: float | None = 60.0,
        default_watch_timeout_s: float = 1800.0,
        expired_as_http_status: bool = False,
        now: Callable[[], float] = time.time,
        graceful_pod_deletion: bool = False,
    ) -> None:
        self._waiters: list[asyncio.Future[None]] = []
        self._store = Store(
            history_limit=history_limit,
            now=now,
            on_change=self._changed,
            graceful_pod_deletion=graceful_pod_deletion,
        )
        self._types = by_plural()
        self._bookmark_interval_s = bookmark_interval_s
        self._default_watch_timeout_s = default_watch_timeout_s
        self._expired_as_http_status = expired_as_http_status
        self._faults: list[_Fault] = []
        self._runner: web.AppRunner | None = None
        self._url: str | None = None
        self.hooks: list[Callable[[WriteRecord], None]] = []
        self.requests: deque[RequestRecord] = deque(maxlen=10_000)

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    def create_app(self) -> web.Application:
        """The aiohttp application (for embedding; ``start()`` runs it on a TCP port)."""
        app = web.Application(client_max_size=16 * 2**20)
        app.router.add_route("*", "/api/v1/{path:.*}", self._handle)
        app.router.add_route("*", "/api/v1", self._not_found)
        app.router.add_route("*", "/apis/{group}/{version}/{path:.*}", self._handle)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host:port`` (0: a free port) and return the base URL."""
        if self._runner is not None:
            raise RuntimeError("the emulator is already started")
        runner = web.AppRunner(self.create_app(), handle_signals=False, handler_cancellation=True, shutdown_timeout=5)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        sockets = runner.addresses
        bound = sockets[0] if sockets else (host, port)
        self._url = f"http://{bound[0]}:{bound[1]}"
        return self._url

    async def stop(self) -> None:
        """End every watch stream and stop serving. Idempotent."""
        self._store.close_watches()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        self._changed()  # waiters re-test their predicate (and then time out if it never holds)

    async def __aenter__(self) -> Emulator:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("the emulator is not started")
        return self._url

    # ---- in-process helpers ------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The current (latest) resourceVersion."""
        return self._store.rv

    def put(self, obj: Obj) -> Obj:
        """Create or replace an object whole (status included), by its ``kind`` (and ``apiVersion`` outside the
        core group). Returns a copy of what is stored."""
        kind = obj.get("kind")
        if not isinstance(kind, str):
            raise ValueError("put: the object has no kind")
        api_version = obj.get("apiVersion")
        return clone(self._store.put(resolve(kind, api_version if api_version not in (None, "v1") else None), obj))

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """A copy of one object (``kind`` as ``Pod`` or ``pods``; namespace None for cluster-scoped), or None."""
        rtype = resolve(kind)
        obj = self._store.find(rtype, (namespace or "") if rtype.namespaced else "", name)
        return clone(obj) if obj is not None else None

    def list(self, kind: str, namespace: str | None = None) -> list[Obj]:
        """Copies of every object of a kind (optionally one namespace), in key order."""
        from vgpu_scheduler.shared.emulator.selectors import FieldSelector, LabelSelector

        items, _ = self._store.select(resolve(kind), namespace, LabelSelector("", ()), FieldSelector("", ()))
        return clone(items)

    def patch(self, kind: str, namespace: str | None, name: str, patch: dict[str, Any]) -> Obj:
        """Merge-patch one object whole (status included, no preconditions). KeyError when it does not exist."""
        rtype = resolve(kind)
        current = self._store.find(rtype, (namespace or "") if rtype.namespaced else "", name)
        if current is None:
            raise KeyError(f"{rtype.plural} {namespace}/{name} does not exist")
        return clone(self._store.put(rtype, merge_patch(current, patch)))

    def delete(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """Delete one object; its last state, or None when it did not exist."""
        rtype = resolve(kind)
        ns = (namespace or "") if rtype.namespaced else ""
        if self._store.find(rtype, ns, name) is None:
            return None
        return clone(self._store.delete(rtype, ns, name))

    def compact(self) -> None:
        """Drop the event history: every watch resuming from a version before now gets 410 Expired."""
        self._store.compact()

    def close_watches(self, kind: str | None = None) -> int:
        """End open watch streams cleanly (clients resume from their last version). Returns how many."""
        return self._store.close_watches(resolve(kind) if kind else None)

    def expire_watches(self, kind: str | None = None) -> int:
        """End open watch streams with an ERROR event carrying a 410 Expired Status. Returns how many."""
        return self._store.expire_watches(resolve(kind) if kind else None)

    def send_bookmarks(self, kind: str | None = None) -> int:
        """Send a BOOKMARK at the current version to every open watch that allows bookmarks. Returns how many."""
        return self._store.send_bookmarks(resolve(kind) if kind else None)

    def open_watches(self, kind: str | None = None) -> int:
        """How many watch streams are open (on one kind, or on all)."""
        return len(self._store.watchers(resolve(kind) if kind else None))

    def inject_error(
        self,
        status: int,
        *,
        method: str | None = None,
        path: str = ".*",
        times: int = 1,
        message: str = "injected failure",
        retry_after_s: int | None = None,
    ) -> None:
        """Answer the next ``times`` requests whose method and path (regex, searched) match with this status."""
        self._faults.append(
            _Fault(method.upper() if method else None, re.compile(path), status, message, times, retry_after_s)
        )

    def inject_delay(self, delay_s: float, *, method: str | None = None, path: str = ".*", times: int = 1) -> None:
        """Hold the next ``times`` matching requests for ``delay_s`` before answering them (deadline tests)."""
        self._faults.append(
            _Fault(method.upper() if method else None, re.compile(path), None, "", times, None, delay_s)
        )

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Wait until ``predicate()`` holds, re-testing after every write, watch change and request."""
        async with asyncio.timeout(timeout_s):
            while not predicate():
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiters.append(fut)
                try:
                    await fut
                finally:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(fut)

    def _changed(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # ---- HTTP --------------------------------------------------------------------------------------------------

    async def _not_found(self, request: web.Request) -> web.StreamResponse:
        return self._error(ApiError(404, "the server could not find the requested resource"))

    def _error(self, err: ApiError, headers: dict[str, str] | None = None) -> web.Response:
        return _json_response(err.status(), err.code, headers)

    def _take_fault(self, request: web.Request) -> _Fault | None:
        found = None
        for fault in self._faults:
            if fault.remaining > 0 and fault.method in (None, request.method) and fault.path.search(request.path):
                fault.remaining -= 1
                found = fault
                break
        self._faults = [f for f in self._faults if f.remaining > 0]
        return found

    def _target(self, path: str, types: dict[str, ResourceType]) -> _Target:
        segs = [s for s in path.split("/") if s]
        missing = ApiError(404, "the server could not find the requested resource")
        if not segs:
            raise missing
        namespaced = len(segs) >= 3 and segs[0] == "namespaces" and segs[2] in types and types[segs[2]].namespaced
        if namespaced:
            rtype, ns, rest = types[segs[2]], segs[1], segs[3:]
        else:
            found = types.get(segs[0])
            if found is None:
                raise missing
            rtype, ns, rest = found, None, segs[1:]
            if rtype.namespaced and rest:
                raise missing
        if len(rest) > 2:
            raise missing
        name = rest[0] if rest else None
        sub = rest[1] if len(rest) == 2 else None
        if sub is not None and not (
            (sub == "status" and rtype.has_status) or (sub in _POD_POSTS and rtype.kind == "Pod")
        ):
            raise missing
        return _Target(rtype, ns, name, sub)

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise bad_request(f"the request body is not valid JSON: {e}") from e

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(RequestRecord(request.method, request.path, dict(request.query)))
        self._changed()
        fault = self._take_fault(request)
        if fault is not None:
            if fault.delay_s > 0:
                await asyncio.sleep(fault.delay_s)
            if fault.status is not None:
                headers = {"Retry-After": str(fault.retry_after_s)} if fault.retry_after_s is not None else None
                return self._error(ApiError(fault.status, fault.message, reason_for(fault.status)), headers)
        try:
            group = request.match_info.get("group")
            types = self._types if group is None else by_plural(f"{group}/{request.match_info['version']}")
            return await self._dispatch(request, self._target(request.match_info["path"], types))
        except ApiError as err:
            return self._error(err)

    async def _dispatch(self, request: web.Request, t: _Target) -> web.StreamResponse:
        method, store = request.method, self._store
        ns = t.namespace if t.rtype.namespaced else ""
        if t.name is None:
            if method == "GET":
                if request.query.get("watch", "") in _TRUE:
                    return await self._watch(request, t)
                return self._list(request, t)
            if method == "POST":
                body = await self._body(request)
                obj = store.create(t.rtype, t.namespace, body)
                self._hook(WriteVerb.CREATE, t, obj, body, request)
                return _json_response(obj, 201)
            raise ApiError(405, f"the server does not allow this method on the requested resource ({method})")
        assert ns is not None
        if t.sub in _POD_POSTS:
            if method != "POST":
                raise ApiError(405, f"the server does not allow this method on the requested resource ({method})")
            body = await self._body(request)
            if t.sub == "eviction":
                evicted = evict(store, (t.rtype, resolve("poddisruptionbudgets", "policy/v1")), ns, t.name, body)
                self._hook(WriteVerb.DELETE, t, evicted, body, request)
            else:
                self._hook(WriteVerb.BIND, t, store.bind(t.rtype, ns, t.name, body), body, request)
            return _json_response(success_status(201), 201)
        if method == "GET":
            return _json_response(store.get(t.rtype, ns, t.name))
        if method == "PUT":
            body = await self._body(request)
            obj = store.replace(t.rtype, ns, t.name, body, subresource=t.sub)
            self._hook(WriteVerb.UPDATE, t, obj, body, request)
            return _json_response(obj)
        if method == "PATCH":
            body = await self._body(request)
            obj = store.patch(t.rtype, ns, t.name, request.headers.get("Content-Type", ""), body, subresource=t.sub)
            self._hook(WriteVerb.PATCH, t, obj, body, request)
            return _json_response(obj)
        if method == "DELETE" and t.sub is None:
            body = await self._body(request)
            obj = store.delete(t.rtype, ns, t.name, body)
            self._hook(WriteVerb.DELETE, t, obj, body, request)
            return _json_response(obj)
        raise ApiError(405, f"the server does not allow this method on the requested resource ({method})")

    def _hook(self, verb: WriteVerb, t: _Target, obj: Obj, body: Any, request: web.Request) -> None:
        if not self.hooks:
            return
        meta = obj.get("metadata", {})
        record = WriteRecord(
            verb,
            t.rtype.plural,
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            t.sub,
            body,
            request.headers.get("Content-Type"),
            clone(obj),
        )
        for hook in list(self.hooks):
            hook(record)

    def _selectors(self, request: web.Request, t: _Target) -> tuple[Any, Any]:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), t.rtype.field_labels)
        return labels, fields

    def _list(self, request: web.Request, t: _Target) -> web.Response:
        labels, fields = self._selectors(request, t)
        items, list_meta = page(*self._store.select(t.rtype, t.namespace, labels, fields), request.query)
        body = {
            "kind": t.rtype.list_kind,
            "apiVersion": t.rtype.group_version,
            "metadata": list_meta,
            "items": [_for_list(o) for o in items],
        }
        return _json_response(body)

    async def _watch(self, request: web.Request, t: _Target) -> web.StreamResponse:
        labels, fields = self._selectors(request, t)
        bookmarks = request.query.get("allowWatchBookmarks", "") in _TRUE
        raw_timeout = request.query.get("timeoutSeconds")
        try:
            timeout_s = float(raw_timeout) if raw_timeout else 0.0
        except ValueError:
            raise bad_request(f"invalid timeoutSeconds {raw_timeout!r}") from None
        if timeout_s <= 0:  # absent or 0: the server's default, as kube-apiserver does
            timeout_s = self._default_watch_timeout_s
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        try:
            watcher = self._store.watch(
                t.rtype, t.namespace, labels, fields, request.query.get("resourceVersion"), bookmarks=bookmarks
            )
        except ApiError as err:
            if err.code != 410 or self._expired_as_http_status:
                raise
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            await resp.write(b'{"type":"ERROR","object":' + dumps(err.status()) + b"}\n")
            await resp.write_eof()
            return resp
        try:
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            await self._stream(resp, watcher, timeout_s)
        finally:
            self._store.unwatch(watcher)
        with contextlib.suppress(ConnectionError):
            await resp.write_eof()
        return resp

    async def _stream(self, resp: web.StreamResponse, w: Watcher, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        interval = self._bookmark_interval_s if w.bookmarks else None
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            wait_s = min(remaining, interval) if interval is not None else remaining
            try:
                async with asyncio.timeout(wait_s):
                    frame = await w.queue.get()
            except TimeoutError:
                if interval is not None and deadline - loop.time() > 0:
                    await resp.write(w.bookmark_frame(self._store.rv))
                continue
            if frame is None:
                return
            frames = [frame]
            while len(frames) < _BATCH and not w.queue.empty():
                nxt = w.queue.get_nowait()
                if nxt is None:
                    await resp.write(b"".join(frames))
                    return
                frames.append(nxt)
            await resp.write(b"".join(frames))
