"""mTLS on the extender (``--client-ca-file``): ``/filter`` and ``/bind`` answer only a client certificate signed by
the configured CA; without one the request is refused (403) before any work, so nothing is reserved, locked or
bound; a certificate from another CA fails the handshake. ``/webhook`` and the probes take no client certificate,
on ``--http_bind`` or on their own ``--webhook-bind`` listener. The CA bundle rotates like the serving pair; an
extender that would serve ``/filter`` and ``/bind`` to anyone on a non-loopback address refuses to start."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.certs import HAVE_OPENSSL, Ca, Issued, install, make_ca
from tests.integration.extender.bindkit import node_obj
from tests.integration.extender.filter_harness import Replica, running_extender, seed, settings, wire, wire_doc
from tests.waiting import eventually
from vgpu_scheduler.services.extender.tls import CertificateReloader
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.config.values import BindAddress
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import Store

pytestmark = pytest.mark.skipif(not HAVE_OPENSSL, reason="needs the openssl command")

JSON = {"Content-Type": "application/json"}
POD_UID = "84b6aa31-78e6-4344-b242-d2eb58f60cb9"
ADMISSION_REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "req-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": "default",
        "object": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
    },
}


@dataclass(frozen=True)
class Pki:
    ca: Ca
    serving: Issued
    scheduler: Issued  # kube-scheduler's client certificate, signed by the CA the extender trusts
    stranger: Issued  # a client certificate from another CA
    client_ca: Path  # the file given as --client-ca-file


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = make_ca(tmp_path / "ca", "vgpu-scheduler-ca")
    other = make_ca(tmp_path / "other", "someone-else")
    client_ca = tmp_path / "client-ca.crt"
    install(ca.cert, client_ca)
    return Pki(
        ca=ca,
        serving=ca.issue(tmp_path / "serving", "extender", server=True),
        scheduler=ca.issue(tmp_path / "scheduler", "kube-scheduler", client=True),
        stranger=other.issue(tmp_path / "stranger", "intruder", client=True),
        client_ca=client_ca,
    )


def client_tls(pki: Pki, cert: Issued | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    if cert is not None:
        context.load_cert_chain(str(cert.cert), str(cert.key))
    return context


async def post(port: int, path: str, body: bytes | str, tls: ssl.SSLContext) -> tuple[int, Any]:
    """POST over a fresh connection (a new handshake each time); (status, JSON or text)."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"https://127.0.0.1:{port}{path}", data=body, ssl=tls, headers=JSON) as r,
    ):
        text = await r.text()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text


@pytest.fixture
async def replica(pki: Pki, store: Store, api: Api, emulator: Emulator) -> AsyncIterator[Replica]:
    await seed(store)
    for name, n in (("gpu-node-1", 4), ("gpu-node-2", 8)):
        emulator.put(node_obj(name, n=n))
    emulator.put({"apiVersion": "v1", "kind": "Pod", **wire_doc("001-filter.json")["Pod"]})
    mtls = settings(cert_file=str(pki.serving.cert), key_file=str(pki.serving.key), client_ca_file=str(pki.client_ca))
    async with running_extender(store, api, extender_settings=mtls) as r:
        yield r


def port(replica: Replica) -> int:
    assert replica.service.server is not None
    return replica.service.server.port


async def nothing_bound_or_locked(store: Store, emulator: Emulator) -> None:
    assert await store.locks.inspect("gpu-node-1") is None
    node = emulator.get("Node", None, "gpu-node-1")
    assert node is not None and keys.NODE_LOCK not in (node["metadata"].get("annotations") or {})
    pod = emulator.get("Pod", "default", "gpu-pod-1")
    assert pod is not None and not pod["spec"].get("nodeName")


async def test_without_a_client_certificate_filter_and_bind_are_refused_and_do_nothing(
    pki: Pki, replica: Replica, store: Store, emulator: Emulator
) -> None:
    anonymous = client_tls(pki, None)
    status, text = await post(port(replica), "/filter", wire("001-filter.json"), anonymous)
    assert status == 403 and "requires a client certificate" in text
    assert await store.reservations.node_of(POD_UID) is None

    # kube-scheduler reserves through its certificate; a bind without one must not lock or bind anything
    status, answer = await post(port(replica), "/filter", wire("001-filter.json"), client_tls(pki, pki.scheduler))
    assert (status, answer["NodeNames"]) == (200, ["gpu-node-1"])
    status, text = await post(port(replica), "/bind", wire("002-bind.json"), anonymous)
    assert status == 403 and "requires a client certificate" in text
    await nothing_bound_or_locked(store, emulator)
    assert replica.metric("vgpu_extender_unauthenticated_requests_total", verb="filter") == 1
    assert replica.metric("vgpu_extender_unauthenticated_requests_total", verb="bind") == 1
    assert replica.metric("vgpu_bind_outcomes_total", outcome="bound") == 0


async def test_a_certificate_from_another_ca_fails_the_handshake(
    pki: Pki, replica: Replica, store: Store, emulator: Emulator
) -> None:
    for path, body in (("/filter", "001-filter.json"), ("/bind", "002-bind.json")):
        with pytest.raises(aiohttp.ClientError):
            await post(port(replica), path, wire(body), client_tls(pki, pki.stranger))
    assert await store.reservations.node_of(POD_UID) is None
    await nothing_bound_or_locked(store, emulator)


async def test_with_the_scheduler_certificate_filter_then_bind_places_the_pod(
    pki: Pki, replica: Replica, emulator: Emulator
) -> None:
    tls = client_tls(pki, pki.scheduler)
    status, answer = await post(port(replica), "/filter", wire("001-filter.json"), tls)
    assert (status, answer["NodeNames"]) == (200, ["gpu-node-1"])
    assert await post(port(replica), "/bind", wire("002-bind.json"), tls) == (200, {"Error": ""})
    pod = emulator.get("Pod", "default", "gpu-pod-1")
    assert pod is not None and pod["spec"]["nodeName"] == "gpu-node-1"
    assert replica.metric("vgpu_extender_unauthenticated_requests_total", verb="filter") == 0


async def test_webhook_and_probes_need_no_client_certificate(pki: Pki, replica: Replica) -> None:
    anonymous = client_tls(pki, None)
    status, review = await post(port(replica), "/webhook", json.dumps(ADMISSION_REVIEW), anonymous)
    assert status == 200 and review["response"]["uid"] == "req-1", review
    assert review["response"]["allowed"] is True, review
    async with aiohttp.ClientSession() as http:
        for path in ("/healthz", "/readyz"):
            async with http.get(f"https://127.0.0.1:{port(replica)}{path}", ssl=anonymous) as r:
                assert r.status == 200, path


async def test_webhook_bind_serves_the_webhook_on_its_own_listener(pki: Pki, store: Store, api: Api) -> None:
    await seed(store)
    mtls = settings(
        cert_file=str(pki.serving.cert),
        key_file=str(pki.serving.key),
        client_ca_file=str(pki.client_ca),
        webhook_bind=BindAddress("127.0.0.1", 0),
    )
    async with running_extender(store, api, extender_settings=mtls) as r:
        hook = r.service.webhook_server
        assert hook is not None and hook.port != port(r)
        anonymous = client_tls(pki, None)
        status, review = await post(hook.port, "/webhook", json.dumps(ADMISSION_REVIEW), anonymous)
        assert status == 200 and review["response"]["allowed"] is True, review
        assert (await post(hook.port, "/filter", wire("001-filter.json"), anonymous))[0] == 404
        scheduler = client_tls(pki, pki.scheduler)
        assert (await post(port(r), "/webhook", json.dumps(ADMISSION_REVIEW), scheduler))[0] == 404


async def test_a_rotated_client_ca_applies_to_new_connections(pki: Pki, replica: Replica, tmp_path: Path) -> None:
    new_ca = make_ca(tmp_path / "new-ca", "vgpu-scheduler-ca-2")
    new_scheduler = new_ca.issue(tmp_path / "new-scheduler", "kube-scheduler", client=True)
    new_tls = client_tls(pki, new_scheduler)
    with pytest.raises(aiohttp.ClientError):
        await post(port(replica), "/filter", wire("001-filter.json"), new_tls)

    install(new_ca.cert, pki.client_ca)  # the Secret volume swaps the file; checked on the next handshakes
    status, answer = await eventually_post(replica, new_tls)
    assert status == 200 and answer["NodeNames"] == ["gpu-node-1"]
    with pytest.raises(aiohttp.ClientError):  # the old CA is no longer trusted
        await post(port(replica), "/filter", wire("001-filter.json"), client_tls(pki, pki.scheduler))


async def eventually_post(replica: Replica, tls: ssl.SSLContext) -> tuple[int, Any]:
    """POST /filter until the handshake succeeds: the reloader checks the files at most once per second."""
    results: list[tuple[int, Any]] = []

    async def attempt() -> bool:
        try:
            results.append(await post(port(replica), "/filter", wire("001-filter.json"), tls))
        except aiohttp.ClientError:
            return False
        return True

    await eventually(attempt, timeout_s=10, what="the rotated client CA accepted")
    return results[-1]


def test_the_reloader_watches_the_client_ca_file(pki: Pki, tmp_path: Path) -> None:
    now = [0.0]
    reloader = CertificateReloader(
        str(pki.serving.cert), str(pki.serving.key), client_ca_file=str(pki.client_ca), clock=lambda: now[0]
    )
    assert reloader.context.verify_mode == ssl.CERT_OPTIONAL
    assert not reloader.check()
    install(make_ca(tmp_path / "ca2", "second").cert, pki.client_ca)
    assert reloader.check() and reloader.reloads == 1
    pki.client_ca.write_text("not a certificate\n")  # a broken rotation keeps the bundle in force
    assert not reloader.check() and reloader.reloads == 1


async def test_an_open_scheduler_on_a_non_loopback_address_refuses_to_start(store: Store, api: Api) -> None:
    with pytest.raises(ConfigError, match="--client-ca-file"):
        async with running_extender(store, api, extender_settings=settings(http_bind=BindAddress("0.0.0.0", 0))):
            pass


async def test_the_insecure_flag_serves_an_open_scheduler_on_purpose(store: Store, api: Api) -> None:
    await seed(store)
    open_ = settings(http_bind=BindAddress("0.0.0.0", 0), insecure_allow_unauthenticated_scheduler=True)
    async with running_extender(store, api, extender_settings=open_) as r:
        answer = await r.filter(wire("001-filter.json"))
    assert answer["NodeNames"] == ["gpu-node-1"]
