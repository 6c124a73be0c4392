"""Admission warnings on a real kube-apiserver: a request HAMi accepts and silently adjusts
(``nvidia.com/gpucores: 120``, scheduled as 100) is admitted, and the webhook's ``response.warnings`` reaches the
client as the API server's ``Warning`` response headers (what kubectl prints as ``Warning: …``)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.controlplane.control import ApiServer, Cleanup, make_ca, make_serving_cert
from tests.controlplane.test_webhook_gate import pod, register, serves_tls, webhook_in_force
from tests.process import listening_addresses, service_process
from tests.waiting import eventually


def create_with_warnings(api: ApiServer, ns: str, body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Create ``body`` (a dry run); the object the API server answers and its ``Warning`` headers."""
    req = urllib.request.Request(
        f"{api.url}/api/v1/namespaces/{ns}/pods?dryRun=All", data=json.dumps(body).encode(), method="POST"
    )
    req.add_header("Authorization", f"Bearer {api.token}")
    req.add_header("Content-Type", "application/json")
    req.add_header("Accept", "application/json")
    with urllib.request.urlopen(req, context=api.ssl_context(), timeout=30) as resp:
        created: dict[str, Any] = json.loads(resp.read())
        return created, resp.headers.get_all("Warning") or []


async def test_an_adjusted_request_is_admitted_and_the_client_gets_the_warning(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    namespace = kube_cleanup.namespace(f"webhook-warn-{uuid.uuid4().hex[:6]}")
    ca = make_ca(tmp_path)
    cert, key = make_serving_cert(tmp_path, "extender", ca)
    log = tmp_path / "extender.log"
    async with service_process(
        log,
        "extender",
        f"--kubeconfig={kube_apiserver.kubeconfig}",
        f"--redis-url={redis_url}",
        f"--key-prefix=warn-{uuid.uuid4().hex[:6]}",
        "--http_bind=127.0.0.1:0",
        "--metrics-bind-address=127.0.0.1:0",
        f"--cert_file={cert}",
        f"--key_file={key}",
        "--scheduler-name=vgpu-scheduler",
    ) as proc:

        async def listening() -> bool:
            assert proc.returncode is None, log.read_text()
            return len(listening_addresses(log)) == 2

        await eventually(listening, 30, "the extender listening")
        urls = [f"https://{address}/webhook" for address in listening_addresses(log)]
        [webhook_url] = [u for u in urls if await serves_tls(u, ca[0])]
        register(kube_apiserver, kube_cleanup, webhook_url, ca[0].read_bytes(), [namespace])
        await webhook_in_force(kube_apiserver, namespace)

        over = pod("cores-120", limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "120"})
        created, warnings = await asyncio.to_thread(create_with_warnings, kube_apiserver, namespace, over)
        dcu = pod("dcu-cores-150", limits={"hygon.com/dcunum": "1", "hygon.com/dcucores": "150"})
        dcu_created, dcu_warnings = await asyncio.to_thread(create_with_warnings, kube_apiserver, namespace, dcu)
        plain, plain_warnings = await asyncio.to_thread(
            create_with_warnings, kube_apiserver, namespace, pod("fine", limits={"nvidia.com/gpu": "1"})
        )

    assert created["spec"]["schedulerName"] == "vgpu-scheduler"
    # the header is RFC 7234's: 299 - "<text>"
    assert warnings == [
        '299 - "container \\"app\\": nvidia.com/gpucores: \\"120\\" is more than 100 (a whole GPU); scheduled as 100,'
        ' as HAMi does"'
    ], warnings
    # a family HAMi schedules by default, with no device config at all (the extender has none here)
    assert dcu_created["spec"]["schedulerName"] == "vgpu-scheduler"
    assert len(dcu_warnings) == 1 and "hygon.com/dcucores" in dcu_warnings[0], dcu_warnings
    assert plain["spec"]["schedulerName"] == "vgpu-scheduler" and plain_warnings == []
