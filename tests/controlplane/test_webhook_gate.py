"""The rendered MutatingWebhookConfiguration on a real kube-apiserver: its match condition lets only pods that
name a managed resource (in any init or app container, limits or requests) reach the webhook, so with the
extenders down (``failurePolicy: Fail``, URL on a closed port) a plain pod is still created and a GPU pod is
refused; with a real extender behind it, a GPU pod is mutated and a plain pod never reaches it."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import shutil
import ssl
import urllib.error
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane.control import ApiServer, Cleanup, free_port, make_ca, make_serving_cert
from tests.process import listening_addresses, service_process
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
WEBHOOK_MANIFEST = REPO / "deploy" / "manifests" / "webhook.yaml"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def rendered_webhook() -> dict[str, Any]:
    """The MutatingWebhookConfiguration of the committed manifests (a fresh Helm rendering, checked by a test)."""
    [config] = [d for d in yaml.safe_load_all(WEBHOOK_MANIFEST.read_text(encoding="utf-8")) if d]
    assert config["kind"] == "MutatingWebhookConfiguration"
    return dict(config)


def register(api: ApiServer, cleanup: Cleanup, url: str, ca_pem: bytes, namespaces: list[str]) -> str:
    """Register the rendered webhook, pointed at ``url`` and narrowed to ``namespaces`` (the session's API server
    is shared with other tests); every other field — rules, match conditions, failure policy — as rendered."""
    config = copy.deepcopy(rendered_webhook())
    name = f"{config['metadata']['name']}-{uuid.uuid4().hex[:6]}"
    config["metadata"] = {"name": name}
    [hook] = config["webhooks"]
    hook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_pem).decode()}
    hook["namespaceSelector"]["matchExpressions"].append(
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
    )
    api.request("POST", WEBHOOKS, config)
    cleanup.path(f"{WEBHOOKS}/{name}")
    return name


def pod(name: str, *, limits: dict[str, str] | None = None, requests: dict[str, str] | None = None,
        init: bool = False) -> dict[str, Any]:  # fmt: skip
    """A pod whose app container (or, with ``init``, its init container) carries ``limits``/``requests``."""
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    app: dict[str, Any] = {"name": "app", "image": "busybox"}
    spec: dict[str, Any] = {"containers": [app]}
    if init:
        spec["initContainers"] = [{"name": "init", "image": "busybox", "resources": resources}]
    elif resources:
        app["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def create(api: ApiServer, ns: str, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    query = "?dryRun=All" if dry_run else ""
    created: dict[str, Any] = await asyncio.to_thread(api.request, "POST", f"/api/v1/namespaces/{ns}/pods{query}", body)
    return created


async def refusal(api: ApiServer, ns: str, body: dict[str, Any]) -> tuple[int, str]:
    """(HTTP status, message) of a create the API server refuses; fails if it is admitted."""
    try:
        await create(api, ns, body, dry_run=True)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["message"]
    raise AssertionError(f"{body['metadata']['name']} was admitted")


async def webhook_in_force(api: ApiServer, ns: str) -> None:
    """The API server loads webhook configurations asynchronously: wait until a GPU pod meets the webhook."""

    async def gpu_pod_meets_it() -> bool:
        try:
            created = await create(api, ns, pod("probe", limits={"nvidia.com/gpu": "1"}), dry_run=True)
        except urllib.error.HTTPError as e:
            return "vgpu.hami.io" in json.loads(e.read())["message"]
        return bool(created["spec"].get("schedulerName") == "vgpu-scheduler")

    await eventually(gpu_pod_meets_it, 30, "the registered webhook is called")


@pytest.fixture
def namespace(kube_apiserver: ApiServer, kube_cleanup: Cleanup) -> str:
    return kube_cleanup.namespace(f"webhook-gate-{uuid.uuid4().hex[:6]}")


def test_the_rendered_webhook_fails_closed_behind_a_match_condition() -> None:
    [hook] = rendered_webhook()["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert [c["name"] for c in hook["matchConditions"]] == ["asks-for-a-managed-resource"]


@pytest.mark.parametrize(
    "gpu_pod",
    [
        pytest.param(pod("count", limits={"nvidia.com/gpu": "1"}), id="gpu-in-limits"),
        pytest.param(pod("memory", limits={"nvidia.com/gpumem": "20480"}), id="gpumem-only"),
        pytest.param(pod("pct", requests={"nvidia.com/gpumem-percentage": "50"}), id="percentage-in-requests"),
        pytest.param(pod("cores", limits={"nvidia.com/gpucores": "30"}, init=True), id="init-container"),
        pytest.param(pod("priority", limits={"nvidia.com/priority": "1"}), id="priority"),
    ],
)
async def test_extenders_down_a_gpu_pod_is_refused_and_a_plain_pod_admitted(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, namespace: str, gpu_pod: dict[str, Any]
) -> None:
    closed = f"https://127.0.0.1:{free_port()}/webhook"  # nothing listens: every extender is down
    register(kube_apiserver, kube_cleanup, closed, kube_apiserver.ca_file.read_bytes(), [namespace])
    await webhook_in_force(kube_apiserver, namespace)

    status, message = await refusal(kube_apiserver, namespace, gpu_pod)
    assert status == 500 and 'failed calling webhook "vgpu.hami.io"' in message, message

    plain = await create(kube_apiserver, namespace, pod("plain"))
    assert plain["metadata"]["uid"]
    other = await create(kube_apiserver, namespace, pod("other-resource", limits={"example.com/fpga": "1"}))
    assert other["spec"]["containers"][0]["resources"]["limits"] == {"example.com/fpga": "1"}


async def test_a_namespace_labelled_ignore_is_never_gated(kube_apiserver: ApiServer, kube_cleanup: Cleanup) -> None:
    ns = kube_cleanup.namespace(f"webhook-ignored-{uuid.uuid4().hex[:6]}", {"hami.io/webhook": "ignore"})
    gated = kube_cleanup.namespace(f"webhook-gate-{uuid.uuid4().hex[:6]}")
    register(kube_apiserver, kube_cleanup, f"https://127.0.0.1:{free_port()}/webhook",
             kube_apiserver.ca_file.read_bytes(), [ns, gated])  # fmt: skip
    await webhook_in_force(kube_apiserver, gated)
    created = await create(kube_apiserver, ns, pod("gpu", limits={"nvidia.com/gpu": "1"}))
    assert created["spec"]["schedulerName"] == "default-scheduler"


async def test_extender_up_a_gpu_pod_is_mutated_and_a_plain_pod_never_sent(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, namespace: str, redis_url: str, tmp_path: Path
) -> None:
    ca = make_ca(tmp_path)
    cert, key = make_serving_cert(tmp_path, "extender", ca)
    log = tmp_path / "extender.log"
    async with service_process(
        log,
        "extender",
        f"--kubeconfig={kube_apiserver.kubeconfig}",
        f"--redis-url={redis_url}",
        f"--key-prefix=gate-{uuid.uuid4().hex[:6]}",
        "--http_bind=127.0.0.1:0",
        "--metrics-bind-address=127.0.0.1:0",
        f"--cert_file={cert}",
        f"--key_file={key}",
        "--scheduler-name=vgpu-scheduler",
        "--log-level=debug",
    ) as proc:

        async def listening() -> bool:
            assert proc.returncode is None, log.read_text()
            return len(listening_addresses(log)) == 2

        await eventually(listening, 30, "the extender listening")
        # --http_bind (/webhook) is the one of the two servers that speaks TLS with the certificate we made.
        urls = [f"https://{address}/webhook" for address in listening_addresses(log)]
        [webhook_url] = [u for u in urls if await serves_tls(u, ca[0])]
        register(kube_apiserver, kube_cleanup, webhook_url, ca[0].read_bytes(), [namespace])
        await webhook_in_force(kube_apiserver, namespace)

        gpu = await create(kube_apiserver, namespace, pod("gpu", limits={"nvidia.com/gpu": "1"}))
        plain = await create(kube_apiserver, namespace, pod("plain"))
        # a scheduling annotation /filter cannot read is refused at creation, with what to write instead
        bad = pod("bad-policy", limits={"nvidia.com/gpu": "1"})
        bad["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": "foo"}
        with pytest.raises(urllib.error.HTTPError) as denied:
            await create(kube_apiserver, namespace, bad)
        denial = json.loads(denied.value.read())

    assert gpu["spec"]["schedulerName"] == "vgpu-scheduler"
    # HAMi's exclusive default: a bare count gets the whole card's cores.
    assert gpu["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"
    assert plain["spec"]["schedulerName"] == "default-scheduler"
    assert denied.value.code == 403, denial
    assert denial["message"] == (
        'admission webhook "vgpu.hami.io" denied the request: hami.io/gpu-scheduler-policy: unknown GPU scheduler '
        'policy token \'foo\' (at \'foo\'); write "binpack", "spread", "topology-aware", "mutex" or "numa", or a '
        'comma-separated chain of them such as "binpack,numa"'
    ), denial
    seen = [json.loads(line).get("pod") for line in log.read_text().splitlines() if line.startswith("{")]
    assert "gpu" in seen and "plain" not in seen


async def serves_tls(url: str, ca_file: Path) -> bool:
    """Whether ``url``'s host:port completes a TLS handshake verified by ``ca_file``."""
    host, _, port = url.removeprefix("https://").partition("/")[0].rpartition(":")
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        _, writer = await asyncio.open_connection(host, int(port), ssl=context)
    except (ssl.SSLError, OSError):
        return False
    writer.close()
    await writer.wait_closed()
    return True
