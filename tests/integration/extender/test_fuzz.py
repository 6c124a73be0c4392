"""Property-based fuzzing of ``/filter``, ``/bind`` and ``/webhook`` from the real request bodies.

Each example takes a captured kube-scheduler body (``tests/data/kube-scheduler-wire``; for ``/webhook``, an
AdmissionReview around the captured pod) and damages it: a subtree replaced by arbitrary JSON (strings with lone
surrogate escapes, huge or path-like names, deep nesting), the raw bytes truncated or spliced, a bogus
``Content-Encoding``. Whatever arrives, the replica must answer in its protocol's own shape (HTTP 200 with an
``Error`` or a review, 400 only for an empty body, 413 never reached here), log no traceback, and keep the
keep-alive connection usable. The default run tries a few dozen bodies per endpoint; ``-m slow`` a few thousand.

The replica runs in a thread with its own event loop (hypothesis drives plain functions), on the real
redis-server fixture and the API emulator.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import http.client
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.extender.filter_harness import running_extender, seed, wire_doc
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api, KubeSettings, open_client
from vgpu_scheduler.shared.store import Store, connect

FILTER = wire_doc("001-filter.json")
FILTER_MIG = wire_doc("005-filter.json")
BIND = wire_doc("002-bind.json")
REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "default",
        "operation": "CREATE",
        "object": FILTER["Pod"],
    },
}
FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
LONG = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))


class _Replica:
    """One extender replica served from a background thread; ``post`` uses one keep-alive connection."""

    def __init__(self, redis_url: str) -> None:
        self._redis_url = redis_url
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._run, name="fuzz-replica", daemon=True)
        self.conn: http.client.HTTPConnection | None = None
        self.reconnects = 0

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # reported to the test thread
            self._error = e
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        em = Emulator(bookmark_interval_s=None)
        await em.start()
        store = Store.create(connect(self._redis_url), prefix="fuzz")
        try:
            await seed(store)
            async with open_client(KubeSettings(server=em.url, qps=0, timeout_s=5.0)) as kube:
                api = Api(kube, component="vgpu-scheduler", instance="fuzz")
                async with running_extender(store, api) as replica:
                    self.port = int(replica.url.rsplit(":", 1)[1])
                    self._ready.set()
                    await self._stop.wait()
        finally:
            await store.aclose()
            await em.stop()

    def __enter__(self) -> _Replica:
        self._thread.start()
        assert self._ready.wait(30), "fuzz replica did not start"
        if self._error is not None:
            raise self._error
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.conn is not None:
            self.conn.close()
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        assert self.conn is not None
        self.conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **headers})
        r = self.conn.getresponse()
        return r.status, r.read()

    def connection_kept(self) -> bool:
        """The same keep-alive connection still answers (it was not reset by the bad request)."""
        assert self.conn is not None
        try:
            self.conn.request("GET", "/healthz")
            r = self.conn.getresponse()
            r.read()
            return r.status == 200 and not r.will_close
        except (ConnectionError, http.client.HTTPException):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            return False


class _Tracebacks(logging.Handler):
    """Every log record carrying a traceback, or at ERROR and above, while installed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


@pytest.fixture
def replica(redis_url: str) -> Iterator[_Replica]:
    with _Replica(redis_url) as r:
        yield r


@pytest.fixture
def tracebacks() -> Iterator[_Tracebacks]:
    handler = _Tracebacks()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


# ---- damage ------------------------------------------------------------------------------------------------

_SURROGATE = st.sampled_from(["\ud800", "\udfff", "a\udc00b", "\ud83d"])
_NAMES = st.sampled_from(["../etc", "a/b", "x" * 100_000, "UPPER", "", "-x", "ns.", "%2e%2e", "\x00", "\ufffd"])
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    _SURROGATE,
    _NAMES,
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=12), _SURROGATE), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _nested(depth: int) -> str:
    """JSON text nested ``depth`` levels deep (objects and arrays alternating), built as text: Python's encoder
    would hit its own recursion limit first."""
    opens = "".join('{"k":' if i % 2 == 0 else "[" for i in range(depth))
    closes = "".join("}" if i % 2 == 0 else "]" for i in reversed(range(depth)))
    return opens + '"x"' + closes


_DEEP = "__deep__"


@st.composite
def damaged(draw: st.DrawFn, base: Any) -> tuple[bytes, dict[str, str]]:
    """A body derived from ``base`` plus request headers."""
    doc = base
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_paths(doc)))
        value = draw(st.one_of(_JSON, st.just(_DEEP), _NAMES, _SURROGATE))
        doc = _replace(doc, path, value)
    text = json.dumps(doc)  # ensure_ascii: lone surrogates travel as "\udXXX" escapes, as Go would send
    if f'"{_DEEP}"' in text:
        text = text.replace(f'"{_DEEP}"', _nested(draw(st.integers(100, 1200))), 1)
    raw = text.encode()
    cut = draw(st.sampled_from(["none", "none", "truncate", "splice"]))
    if cut == "truncate" and raw:
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    elif cut == "splice":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    headers: dict[str, str] = {}
    encoding = draw(st.sampled_from([None, None, "gzip", "deflate", "br", "identity"]))
    if encoding is not None:
        headers["Content-Encoding"] = encoding
    return raw or b" ", headers


# ---- properties -------------------------------------------------------------------------------------------


def _check_filter(status: int, body: bytes) -> None:
    assert status == 200, (status, body[:300])
    answer = json.loads(body)
    assert list(answer) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
    assert isinstance(answer["Error"], str)


def _check_bind(status: int, body: bytes) -> None:
    assert status == 200, (status, body[:300])
    answer = json.loads(body)
    assert list(answer) == ["Error"] and isinstance(answer["Error"], str)


def _check_webhook(status: int, body: bytes) -> None:
    assert status == 200, (status, body[:300])
    review = json.loads(body)
    assert review["kind"] == "AdmissionReview"
    response = review["response"]
    assert isinstance(response["allowed"], bool)
    if "patch" in response:
        json.loads(base64.b64decode(response["patch"]))


def _fuzz(replica: _Replica, tb: _Tracebacks, path: str, check: Callable[[int, bytes], None], sample: Any) -> None:
    raw, headers = sample
    status, body = replica.post(path, raw, headers)
    check(status, body)
    assert replica.connection_kept(), f"{path}: the keep-alive connection was reset"
    assert tb.records == [], [ascii(r.getMessage())[:300] for r in tb.records]


_ENDPOINTS = [
    pytest.param("/filter", _check_filter, st.one_of(damaged(FILTER), damaged(FILTER_MIG)), id="filter"),
    pytest.param("/bind", _check_bind, damaged(BIND), id="bind"),
    pytest.param("/webhook", _check_webhook, damaged(REVIEW), id="webhook"),
]


@pytest.mark.parametrize("path, check, bodies", _ENDPOINTS)
def test_damaged_real_bodies_get_a_clear_answer(
    replica: _Replica, tracebacks: _Tracebacks, path: str, check: Callable[[int, bytes], None], bodies: Any
) -> None:
    @FAST
    @given(bodies)
    def run(sample: tuple[bytes, dict[str, str]]) -> None:
        _fuzz(replica, tracebacks, path, check, sample)

    run()


@pytest.mark.slow
@pytest.mark.parametrize("path, check, bodies", _ENDPOINTS)
def test_damaged_real_bodies_long_run(
    replica: _Replica, tracebacks: _Tracebacks, path: str, check: Callable[[int, bytes], None], bodies: Any
) -> None:
    @LONG
    @given(bodies)
    def run(sample: tuple[bytes, dict[str, str]]) -> None:
        _fuzz(replica, tracebacks, path, check, sample)

    run()


@pytest.mark.parametrize(
    "path, body, headers, check",
    [
        pytest.param("/webhook", _nested(1000).encode(), {}, _check_webhook, id="webhook-deep-nesting"),
        pytest.param(
            "/webhook",
            json.dumps(_replace(REVIEW, ("request", "object"), _DEEP)).replace(f'"{_DEEP}"', _nested(400)).encode(),
            {},
            _check_webhook,
            id="webhook-object-too-deep-to-copy",
        ),
        pytest.param("/filter", json.dumps(FILTER).encode(), {"Content-Encoding": "gzip"}, _check_filter, id="gzip"),
        pytest.param("/bind", json.dumps(BIND).encode(), {"Content-Encoding": "deflate"}, _check_bind, id="deflate"),
        pytest.param(
            "/filter",
            json.dumps(_replace(FILTER, ("Pod", "metadata", "uid"), "\ud800")).encode(),
            {},
            _check_filter,
            id="lone-surrogate-uid",
        ),
        pytest.param(
            "/bind",
            json.dumps({**BIND, "PodName": "x" * 100_000}).encode(),
            {},
            _check_bind,
            id="huge-pod-name",
        ),
        pytest.param(
            "/bind", json.dumps({**BIND, "PodNamespace": "../kube-system"}).encode(), {}, _check_bind, id="dotdot"
        ),
    ],
)
def test_the_reported_inputs_get_a_clear_answer(
    replica: _Replica,
    tracebacks: _Tracebacks,
    path: str,
    body: bytes,
    headers: dict[str, str],
    check: Callable[[int, bytes], None],
) -> None:
    _fuzz(replica, tracebacks, path, check, (body, headers))


def test_bad_names_are_refused_before_any_api_call(replica: _Replica) -> None:
    status, body = replica.post("/bind", json.dumps({**BIND, "PodNamespace": "../kube-system"}).encode(), {})
    assert status == 200
    assert "PodNamespace must be a DNS label" in json.loads(body)["Error"]
    status, body = replica.post("/bind", json.dumps({**BIND, "PodName": "x" * 100_000}).encode(), {})
    assert "PodName must be a DNS subdomain" in json.loads(body)["Error"]
    assert "100000 characters" in json.loads(body)["Error"]


def test_a_bogus_content_encoding_on_plain_json_is_read_as_sent(replica: _Replica) -> None:
    status, body = replica.post("/filter", json.dumps(FILTER).encode(), {"Content-Encoding": "gzip"})
    assert status == 200
    answer = json.loads(body)
    assert answer["Error"] == "" and answer["NodeNames"] == ["gpu-node-1"]
