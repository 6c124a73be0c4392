"""The chart's security wiring, rendered by real Helm (helm-python-sdk): kube-scheduler's client certificate and
the extender's client CA (mTLS on /filter and /bind), the Redis password in every component, and the
NetworkPolicies, evaluated against the pod labels of the rendered workloads: only our components reach Redis,
only kube-scheduler reaches the /filter,/bind port, the API server's addresses reach the webhook port."""

from __future__ import annotations

import base64
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

helm_python = pytest.importorskip("helm_python")

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "vgpu-scheduler"
NS = "vgpu-system"
FULL = "vgpu-scheduler"
Obj = dict[str, Any]


def render(values: dict[str, Any] | None = None) -> list[Obj]:
    chart = helm_python.Chart.load(str(CHART))
    try:
        out = chart.render(values or {}, name=FULL, namespace=NS, is_install=True)
    finally:
        chart.close()
    docs: list[Obj] = []
    for path, text in sorted(out.items()):
        if path.endswith(".yaml"):
            docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def get(docs: list[Obj], kind: str, name: str) -> Obj:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)}"
    return found[0]


def pod_spec(docs: list[Obj], deployment: str) -> Obj:
    spec: Obj = get(docs, "Deployment", deployment)["spec"]["template"]["spec"]
    return spec


def pod_labels(docs: list[Obj], deployment: str) -> dict[str, str]:
    labels: dict[str, str] = get(docs, "Deployment", deployment)["spec"]["template"]["metadata"]["labels"]
    return labels


def args_of(container: Obj) -> list[str]:
    return list(container.get("command", [])) + list(container.get("args", []))


def mounted_secret(spec: Obj, container: Obj, mount_path: str) -> Obj:
    """The secret volume source mounted at ``mount_path`` in ``container``."""
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == mount_path)
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    secret: Obj = volume["secret"]
    return secret


# ---- a NetworkPolicy evaluator (ingress; pod, namespace and ipBlock peers) -------------------------------------


@dataclass(frozen=True)
class Peer:
    namespace: str = NS
    labels: dict[str, str] = field(default_factory=dict)
    ip: str = "10.244.3.7"  # a pod address, unless the peer is the API server or another host


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def peer_matches(rule_peer: Obj, peer: Peer, policy_ns: str) -> bool:
    if "ipBlock" in rule_peer:
        block = rule_peer["ipBlock"]
        ip = ipaddress.ip_address(peer.ip)
        net = ipaddress.ip_network(block["cidr"])
        excepted = any(ip in ipaddress.ip_network(x) for x in block.get("except") or [] if ip.version == net.version)
        return ip.version == net.version and ip in net and not excepted
    ns_sel, pod_sel = rule_peer.get("namespaceSelector"), rule_peer.get("podSelector")
    if ns_sel is None:
        in_ns = peer.namespace == policy_ns
    else:
        in_ns = selects(ns_sel, {"kubernetes.io/metadata.name": peer.namespace})
    return in_ns and (pod_sel is None or selects(pod_sel, peer.labels))


def admits(docs: list[Obj], target: dict[str, str], peer: Peer, port: int) -> bool:
    """Would the rendered NetworkPolicies let ``peer`` connect to ``port`` of a pod labelled ``target`` in NS?"""
    policies = [
        p for p in docs
        if p["kind"] == "NetworkPolicy" and p["metadata"]["namespace"] == NS
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"]) and selects(p["spec"]["podSelector"], target)
    ]  # fmt: skip
    if not policies:
        return True
    for policy in policies:
        for rule in policy["spec"].get("ingress") or []:
            ports = rule.get("ports")
            if ports is not None and not any(p.get("port") == port for p in ports):
                continue
            peers = rule.get("from")
            if peers is None or any(peer_matches(r, peer, NS) for r in peers):
                return True
    return False


# ---- defaults --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs() -> list[Obj]:
    return render()


def container_port(spec: Obj, name: str) -> int:
    port: int = next(p["containerPort"] for c in spec["containers"] for p in c["ports"] if p["name"] == name)
    return port


def test_redis_admits_only_our_components(docs: list[Obj]) -> None:
    redis = pod_labels(docs, f"{FULL}-redis")
    port = container_port(pod_spec(docs, f"{FULL}-redis"), "redis")
    for component in ("registrar", "informer", "extender"):
        assert admits(docs, redis, Peer(labels=pod_labels(docs, f"{FULL}-{component}")), port), component
    ours_elsewhere = Peer(namespace="default", labels=pod_labels(docs, f"{FULL}-extender"))
    for stranger in (
        Peer(labels=pod_labels(docs, f"{FULL}-kube-scheduler")),  # kube-scheduler never talks to Redis
        Peer(labels={"app": "curious"}),
        Peer(namespace="default", labels={"app": "curious"}),
        ours_elsewhere,  # the same labels in another namespace are not ours
    ):
        assert not admits(docs, redis, stranger, port), stranger


def test_only_kube_scheduler_reaches_filter_and_bind(docs: list[Obj]) -> None:
    spec = pod_spec(docs, f"{FULL}-extender")
    extender = pod_labels(docs, f"{FULL}-extender")
    https, webhook, metrics = (container_port(spec, n) for n in ("https", "webhook", "metrics"))
    assert admits(docs, extender, Peer(labels=pod_labels(docs, f"{FULL}-kube-scheduler")), https)
    for stranger in (
        Peer(labels=pod_labels(docs, f"{FULL}-registrar")),
        Peer(labels={"app": "curious"}),
        Peer(namespace="kube-system", labels={"component": "kube-apiserver"}, ip="172.18.0.2"),
    ):
        assert not admits(docs, extender, stranger, https), stranger
    # the API server (an address, not a pod) reaches the webhook port; scrapers reach /metrics; nothing else is open
    assert admits(docs, extender, Peer(namespace="", ip="172.18.0.2"), webhook)
    assert admits(docs, extender, Peer(namespace="monitoring", labels={"app": "prometheus"}), metrics)
    assert not admits(docs, extender, Peer(labels=pod_labels(docs, f"{FULL}-kube-scheduler")), 6379)


def test_the_webhook_peers_can_be_narrowed_to_the_control_plane() -> None:
    docs = render({"networkPolicy": {"webhookFrom": [{"ipBlock": {"cidr": "172.18.0.0/24"}}]}})
    extender = pod_labels(docs, f"{FULL}-extender")
    webhook = container_port(pod_spec(docs, f"{FULL}-extender"), "webhook")
    assert admits(docs, extender, Peer(namespace="", ip="172.18.0.2"), webhook)
    assert not admits(docs, extender, Peer(labels={"app": "curious"}, ip="10.244.3.7"), webhook)


def test_network_policies_can_be_left_to_the_operator() -> None:
    assert not [d for d in render({"networkPolicy": {"enabled": False}}) if d["kind"] == "NetworkPolicy"]


def test_kube_scheduler_presents_the_client_certificate_the_extender_trusts(docs: list[Obj]) -> None:
    config = yaml.safe_load(get(docs, "ConfigMap", f"{FULL}-kube-scheduler")["data"]["config.yaml"])
    tls = config["extenders"][0]["tlsConfig"]
    sched_spec = pod_spec(docs, f"{FULL}-kube-scheduler")
    sched = sched_spec["containers"][0]
    cert_dir = str(Path(tls["certFile"]).parent)
    assert str(Path(tls["keyFile"]).parent) == cert_dir
    client_secret = mounted_secret(sched_spec, sched, cert_dir)
    assert {i["key"] for i in client_secret["items"]} == {"tls.crt", "tls.key"}

    ext_spec = pod_spec(docs, f"{FULL}-extender")
    ext = ext_spec["containers"][0]
    args = args_of(ext)
    ca_file = next(a.partition("=")[2] for a in args if a.startswith("--client-ca-file="))
    ca_secret = mounted_secret(ext_spec, ext, str(Path(ca_file).parent))
    assert ca_secret["secretName"] == client_secret["secretName"]
    assert ca_secret["items"] == [{"key": "ca.crt", "path": Path(ca_file).name}]  # never the client's key
    assert not any(a.startswith("--insecure-allow-unauthenticated-scheduler") for a in args)

    # /webhook has a listener of its own, which the webhook Service targets
    webhook_bind = next(a for a in args if a.startswith("--webhook-bind="))
    webhook_port = container_port(ext_spec, "webhook")
    assert webhook_bind.endswith(f":{webhook_port}")
    service = get(docs, "Service", f"{FULL}-webhook")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["webhook"]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_the_generated_client_certificate_is_valid_for_client_auth(docs: list[Obj], tmp_path: Path) -> None:
    secret = get(docs, "Secret", f"{FULL}-scheduler-client")
    for key, value in secret["data"].items():
        (tmp_path / key).write_bytes(base64.b64decode(value))
    verify = ["openssl", "verify", "-purpose", "sslclient", "-CAfile", str(tmp_path / "ca.crt")]
    result = subprocess.run([*verify, str(tmp_path / "tls.crt")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_every_component_authenticates_to_a_password_protected_redis(docs: list[Obj]) -> None:
    secret = get(docs, "Secret", f"{FULL}-redis-auth")
    assert len(base64.b64decode(secret["data"]["password"])) >= 32
    redis = pod_spec(docs, f"{FULL}-redis")["containers"][0]
    args = args_of(redis)
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in redis["env"]}
    assert env["REDIS_PASSWORD"] == env["REDISCLI_AUTH"] == {"name": f"{FULL}-redis-auth", "key": "password"}
    for component in ("registrar", "informer", "extender"):
        spec = pod_spec(docs, f"{FULL}-{component}")
        c = spec["containers"][0]
        flag = next(a for a in args_of(c) if a.startswith("--redis-password-file="))
        path = Path(flag.partition("=")[2])
        source = mounted_secret(spec, c, str(path.parent))
        assert source["secretName"] == f"{FULL}-redis-auth", component
        assert source["items"] == [{"key": "password", "path": path.name}], component
        assert "PASSWORD" not in str(c.get("env")), component  # the password is a file, never a variable or argv


def test_turning_authentication_off_takes_an_explicit_value() -> None:
    docs = render({"schedulerAuth": {"enabled": False}, "redis": {"auth": {"enabled": False}}})
    ext = pod_spec(docs, f"{FULL}-extender")["containers"][0]
    assert "--insecure-allow-unauthenticated-scheduler" in args_of(ext)
    assert not any(a.startswith("--client-ca-file") for a in args_of(ext))
    config = yaml.safe_load(get(docs, "ConfigMap", f"{FULL}-kube-scheduler")["data"]["config.yaml"])
    assert "certFile" not in config["extenders"][0]["tlsConfig"]
    assert "--requirepass" not in args_of(pod_spec(docs, f"{FULL}-redis")["containers"][0])
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_existing_secrets_replace_the_generated_ones() -> None:
    docs = render({"schedulerAuth": {"existingSecret": "my-client"}, "redis": {"auth": {"existingSecret": "my-redis"}}})
    assert not [d for d in docs if d["kind"] == "Secret"]  # nothing random: what plain manifests need
    sched_spec = pod_spec(docs, f"{FULL}-kube-scheduler")
    assert mounted_secret(sched_spec, sched_spec["containers"][0], "/etc/vgpu-scheduler/client")["secretName"] == (
        "my-client"
    )
    informer = pod_spec(docs, f"{FULL}-informer")
    assert mounted_secret(informer, informer["containers"][0], "/etc/vgpu-scheduler/redis")["secretName"] == (
        "my-redis"
    )


def test_an_external_redis_with_auth_needs_the_secret() -> None:
    external = {"enabled": False, "external": {"url": "rediss://vgpu@redis.example:6380/0"}}
    with pytest.raises(helm_python.HelmError, match=r"redis\.auth\.existingSecret is required"):
        render({"redis": external})
    docs = render({"redis": {**external, "auth": {"existingSecret": "ext-redis", "existingSecretPasswordKey": "pw"}}})
    registrar = pod_spec(docs, f"{FULL}-registrar")
    source = mounted_secret(registrar, registrar["containers"][0], "/etc/vgpu-scheduler/redis")
    assert source == {"secretName": "ext-redis", "items": [{"key": "pw", "path": "password"}]}
    assert not [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-redis")]


def test_cert_manager_issues_the_client_certificate_from_a_ca_of_its_own() -> None:
    docs = render({"tls": {"certManager": {"enabled": True}}})
    assert not [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-scheduler-client")]
    cert = get(docs, "Certificate", f"{FULL}-scheduler-client")
    assert cert["spec"]["secretName"] == f"{FULL}-scheduler-client"
    assert "client auth" in cert["spec"]["usages"] and "server auth" not in cert["spec"]["usages"]
    issuer = get(docs, "Issuer", cert["spec"]["issuerRef"]["name"])
    serving = get(docs, "Certificate", f"{FULL}-serving-cert")
    assert issuer["metadata"]["name"] != serving["spec"]["issuerRef"]["name"]  # not the serving CA


def test_sentinel_redis_admits_our_components_and_its_own_pods_only() -> None:
    docs = render({"redis": {"sentinel": {"enabled": True}}})
    sts = get(docs, "StatefulSet", f"{FULL}-redis")["spec"]["template"]
    redis, spec = sts["metadata"]["labels"], sts["spec"]
    ports = (container_port(spec, "redis"), container_port(spec, "sentinel"))
    for port in ports:
        for component in ("registrar", "informer", "extender"):
            assert admits(docs, redis, Peer(labels=pod_labels(docs, f"{FULL}-{component}")), port), component
        assert admits(docs, redis, Peer(labels=redis), port)  # replication and the Sentinels' own traffic
        for stranger in (
            Peer(labels=pod_labels(docs, f"{FULL}-kube-scheduler")),
            Peer(labels={"app": "curious"}),
            Peer(namespace="default", labels=redis),  # the same labels in another namespace are not ours
        ):
            assert not admits(docs, redis, stranger, port), stranger
    # the password reaches both containers from the Secret, and no command line carries it
    for c in spec["containers"]:
        env = {e["name"]: e for e in c["env"]}
        assert env["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"]["name"] == f"{FULL}-redis-auth"
        assert not any("REDIS_PASSWORD" in a for a in args_of(c))
