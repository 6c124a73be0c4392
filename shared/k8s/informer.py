"""A list-then-watch informer for one resource (nodes, pods or resourcequotas), delivering typed events to an
async handler.

Loop: list (the known set becomes the server's, diffed into ADDED/MODIFIED/DELETED events, then a RELISTED
marker) → watch from the list's resourceVersion with bookmarks and a jittered server-side ``timeoutSeconds`` →
when the stream ends, watch again from the last version seen → on 410 (HTTP status or an ERROR event) re-list
and diff; the stale version is never retried (kubernetes-asyncio's own ``Watch`` retries it once, so it is not
used). Other API errors back off exponentially with jitter and resume; a long outage is logged at WARNING only on
the 1st, 2nd, 4th, … consecutive failure, and its end at INFO.

Delivery: ``await on_event(ev)`` for each event, in order, one at a time (backpressure: the stream is not read
while the handler runs). The known set and the resume version advance only after the handler returns, so a
handler that raises ``TransientError`` gets the same event again after a backoff (at-least-once). Any other
handler exception ends ``run()``: it is a bug the supervisor should see.

Objects are kept and delivered without ``metadata.managedFields`` (as client-go's informers are commonly
transformed): nothing here reads them, and on a pod that several writers touched they are a large part of it.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from vgpu_scheduler.shared.errors import TransientError, VgpuError
from vgpu_scheduler.shared.k8s.client import KubeClient
from vgpu_scheduler.shared.k8s.errors import ExpiredError, error_for
from vgpu_scheduler.shared.k8s.objects import KubeObject, ObjectKey, key_of, resource_version_of, uid_of

logger = logging.getLogger(__name__)


class EventKind(enum.Enum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    RELISTED = "RELISTED"  # a (re-)list finished: the known set now equals the server's at resource_version


@dataclass(frozen=True)
class WatchEvent:
    """One change. ``obj`` is the object (for DELETED its last known state; for RELISTED an empty dict);
    ``resource_version`` the version it was seen at."""

    kind: EventKind
    obj: KubeObject
    resource_version: str


Handler = Callable[[WatchEvent], Awaitable[None]]


class Resource(enum.Enum):
    """What an informer can watch, with the kubernetes-asyncio list method (all namespaces / one namespace)."""

    NODES = ("Node", "list_node", None)
    PODS = ("Pod", "list_pod_for_all_namespaces", "list_namespaced_pod")
    RESOURCEQUOTAS = ("ResourceQuota", "list_resource_quota_for_all_namespaces", "list_namespaced_resource_quota")

    def __init__(self, kind: str, list_all: str, list_namespaced: str | None) -> None:
        self.kind = kind
        self.list_all = list_all
        self.list_namespaced = list_namespaced


@dataclass(frozen=True)
class InformerSettings:
    """``watch_timeout_s``: server-side ``timeoutSeconds`` (jittered up to twice, as client-go's reflector);
    the client gives up reading ``read_grace_s`` after that. Backoff: ``initial * 2**n`` capped at ``max``,
    each delay jittered into [d/2, d]."""

    watch_timeout_s: int = 300
    read_grace_s: float = 30.0
    list_timeout_s: float = 60.0
    bookmarks: bool = True
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0


@dataclass
class InformerStats:
    """Counters for metrics and tests."""

    lists: int = 0
    watches: int = 0
    expired: int = 0
    errors: int = 0
    bookmarks: int = 0
    events: int = 0


def backoff_delay_s(failures: int, settings: InformerSettings, jitter: float, hint_s: float = 0.0) -> float:
    """Delay before retry number ``failures + 1``: ``initial * 2**failures`` capped at ``max``, jittered into
    [d/2, d] by ``jitter`` in [0, 1); never shorter than the server's hint (Retry-After), itself capped."""
    base = min(settings.backoff_max_s, settings.backoff_initial_s * (2.0 ** min(failures, 30)))
    delay = base / 2 + jitter * base / 2
    return max(delay, min(hint_s, settings.backoff_max_s))


def _loads(line: bytes) -> Any:
    """One watch line decoded: orjson (a pod or node in about half the stdlib's time), and the stdlib for what
    orjson refuses but the stdlib reads (a lone surrogate escape). Integers beyond 64 bits, which orjson reads as
    floats, cannot occur: the API server's objects are Go types (int64 at most)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


class _ApiFailure(Exception):
    """An API-side failure (as opposed to one raised by the handler)."""

    def __init__(self, error: VgpuError) -> None:
        super().__init__(str(error))
        self.error = error


class Informer:
    """List-then-watch one resource and keep the known set; see the module docstring for the contract.

    ``ready`` is set once the first list has been delivered. ``get``/``objects`` read the known set (shared
    dicts: do not modify them). ``run()`` runs until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        on_event: Handler,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        settings: InformerSettings | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if namespace is not None and resource.list_namespaced is None:
            raise ValueError(f"{resource.kind} is cluster-scoped: no namespace")
        self._client = client
        self.resource = resource
        self._on_event = on_event
        self._namespace = namespace
        self._label_selector = label_selector or None
        self._field_selector = field_selector or None
        self.settings = settings or InformerSettings()
        self._rng = rng or random.Random()
        self._known: dict[ObjectKey, KubeObject] = {}
        self._rv = ""
        self._need_list = True
        self._progress = False
        self._outage = 0  # consecutive list/watch failures of the API server (not the handler's)
        self.ready = asyncio.Event()
        self.stats = InformerStats()

    # ---- the known set -----------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        """The version the next watch resumes from (last event, bookmark or list)."""
        return self._rv

    def get(self, name: str, namespace: str = "") -> KubeObject | None:
        return self._known.get((namespace, name))

    def objects(self) -> list[KubeObject]:
        return list(self._known.values())

    def __len__(self) -> int:
        return len(self._known)

    # ---- the loop ----------------------------------------------------------------------------------------------

    def _what(self, verb: str) -> str:
        return f"{verb} {self.resource.name.lower()}"

    def _list_fn(self) -> tuple[Any, tuple[Any, ...]]:
        core = self._client.core
        if self._namespace is not None:
            assert self.resource.list_namespaced is not None
            return getattr(core, self.resource.list_namespaced), (self._namespace,)
        return getattr(core, self.resource.list_all), ()

    def _selectors(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self._label_selector:
            out["label_selector"] = self._label_selector
        if self._field_selector:
            out["field_selector"] = self._field_selector
        return out

    def _backoff_s(self, failures: int, error: VgpuError) -> float:
        hint = error.delay if isinstance(error, TransientError) else 0.0
        return backoff_delay_s(failures, self.settings, self._rng.random(), hint)

    async def run(self) -> None:
        """List, watch, resume, re-list on 410 and back off on errors, until cancelled."""
        failures = 0
        while True:
            self._progress = False  # set by every watch event handled, never by a list
            api_failed = False
            try:
                if self._need_list:
                    await self._list()
                await self._watch()
                failures = 0
                continue
            except _ApiFailure as f:
                error: VgpuError = f.error
                if isinstance(error, ExpiredError):
                    self.stats.expired += 1
                    self._need_list = True
                    logger.info("watch version expired, re-listing", extra={"resource": self.resource.name})
                    if self._progress or failures == 0:
                        failures = 1  # re-list at once; back off if it expires again before any watch event
                        continue
                else:
                    self.stats.errors += 1
                    self._outage += 1
                    api_failed = True
            except TransientError as handler_error:  # from the handler: redeliver after a backoff
                error = handler_error
                self.stats.errors += 1
                logger.warning(
                    "event handler failed, will retry", extra={"resource": self.resource.name, "error": str(error)}
                )
            if self._progress:
                failures = 0
            delay = self._backoff_s(failures, error)
            failures += 1
            if api_failed:
                self._log_outage(error, delay)
            await asyncio.sleep(delay)

    def _log_outage(self, error: VgpuError, delay_s: float) -> None:
        """An unreachable or failing API server is retried with backoff; say so at WARNING on the 1st, 2nd, 4th,
        8th, … consecutive failure (a few lines an hour once the delay is capped), at DEBUG otherwise."""
        n = self._outage
        level = logging.WARNING if n & (n - 1) == 0 else logging.DEBUG
        logger.log(
            level,
            "kubernetes list/watch failed, retrying with backoff",
            extra={
                "resource": self.resource.name,
                "error": str(error),
                "failures": n,
                "retry_in_s": round(delay_s, 2),
            },
        )

    def _api_answered(self) -> None:
        """A list or a watch went through: end an outage, saying how long it was."""
        if self._outage:
            logger.info(
                "kubernetes list/watch recovered", extra={"resource": self.resource.name, "failures": self._outage}
            )
            self._outage = 0

    async def _deliver(self, kind: EventKind, obj: KubeObject, rv: str) -> None:
        await self._on_event(WatchEvent(kind, obj, rv))
        self.stats.events += 1

    async def _list(self) -> None:
        fn, args = self._list_fn()
        try:
            body = await self._client.call_json(
                self._what("list"), fn, *args, timeout_s=self.settings.list_timeout_s, **self._selectors()
            )
            items = body["items"] or []
            rv = str(body["metadata"]["resourceVersion"])
            if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
                raise TypeError("items is not a list of objects")
        except VgpuError as e:
            raise _ApiFailure(e) from e
        except (KeyError, TypeError) as e:
            raise _ApiFailure(TransientError(f"{self._what('list')}: malformed list body: {e!r}")) from e
        kind = self.resource.kind
        fresh: dict[ObjectKey, KubeObject] = {}
        for item in items:
            _slim(item)
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", "v1")
            fresh[key_of(item)] = item
        # deletions first: consumers free what is gone before counting what is new
        for key, gone in list(self._known.items()):
            if key not in fresh:
                await self._deliver(EventKind.DELETED, gone, rv)
                del self._known[key]
        for key, obj in fresh.items():
            old = self._known.get(key)
            if old is None:
                await self._deliver(EventKind.ADDED, obj, resource_version_of(obj))
            elif uid_of(old) != uid_of(obj):  # deleted and re-created while we were not watching
                await self._deliver(EventKind.DELETED, old, rv)
                del self._known[key]
                await self._deliver(EventKind.ADDED, obj, resource_version_of(obj))
            elif resource_version_of(old) != resource_version_of(obj):
                await self._deliver(EventKind.MODIFIED, obj, resource_version_of(obj))
            else:
                continue
            self._known[key] = obj
        await self._deliver(EventKind.RELISTED, {}, rv)
        self._rv = rv
        self._need_list = False
        self._api_answered()
        self.stats.lists += 1
        self.ready.set()
        logger.debug("listed", extra={"resource": self.resource.name, "count": len(fresh), "resource_version": rv})

    async def _watch(self) -> None:
        fn, args = self._list_fn()
        s = self.settings
        timeout_s = int(s.watch_timeout_s * (1 + self._rng.random()))
        try:
            resp = await self._client.open_stream(
                self._what("watch"),
                fn,
                *args,
                read_timeout_s=timeout_s + s.read_grace_s,
                watch=True,
                resource_version=self._rv,
                allow_watch_bookmarks=s.bookmarks,
                timeout_seconds=timeout_s,
                **self._selectors(),
            )
        except VgpuError as e:
            raise _ApiFailure(e) from e
        self._api_answered()
        self.stats.watches += 1
        # One timer per watch, not a timeout per line (about 5 µs each, and every line of every pod counts): a
        # server that overruns its own timeoutSeconds has the stream closed under the pending read, which then
        # fails or ends; a handler running at that moment is not interrupted (the next read finds it closed).
        overran = False

        def overrun() -> None:
            nonlocal overran
            overran = True
            resp.close()

        timer = asyncio.get_running_loop().call_later(timeout_s + s.read_grace_s, overrun)
        try:
            while True:
                try:
                    line = await resp.content.readline()
                except TimeoutError:
                    return  # nothing read for timeoutSeconds + the grace (aiohttp's sock_read): watch again
                except (aiohttp.ClientError, ValueError) as e:  # ValueError: a line beyond the read buffer
                    if overran:
                        return  # the server overran its own timeoutSeconds: watch again
                    raise _ApiFailure(TransientError(f"{self._what('watch')}: {type(e).__name__}: {e}")) from e
                if not line or overran:
                    return  # timeoutSeconds reached: the server ended the stream (or overran it)
                await self._on_line(line)
        finally:
            timer.cancel()
            resp.close()

    async def _on_line(self, line: bytes) -> None:
        try:
            event = _loads(line)
            etype = event["type"]
            obj = event["object"]
            if not isinstance(obj, dict):
                raise TypeError("object is not a JSON object")
        except (ValueError, KeyError, TypeError) as e:
            # a torn or garbled line: the connection is not trustworthy, resume from the last version
            raise _ApiFailure(TransientError(f"{self._what('watch')}: malformed watch event: {e!r}")) from e
        if etype == "ERROR":
            code = obj.get("code")
            raise _ApiFailure(error_for(self._what("watch"), code if isinstance(code, int) else 500, obj))
        _slim(obj)
        rv = resource_version_of(obj)
        if etype == "BOOKMARK":
            if rv:
                self._rv = rv
            self.stats.bookmarks += 1
            self._progress = True
            return
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            logger.debug("unknown watch event type ignored", extra={"resource": self.resource.name, "type": etype})
            return
        key = key_of(obj)
        old = self._known.get(key)
        if etype == "DELETED":
            await self._deliver(EventKind.DELETED, obj, rv)
            self._known.pop(key, None)
        else:
            if old is not None and uid_of(old) != uid_of(obj):
                await self._deliver(EventKind.DELETED, old, rv)
                del self._known[key]
                old = None
            await self._deliver(EventKind.ADDED if old is None else EventKind.MODIFIED, obj, rv)
            self._known[key] = obj
        self._rv = rv
        self._progress = True


def _slim(obj: KubeObject) -> None:
    """Drop what no consumer reads before the object is kept (module docstring)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
