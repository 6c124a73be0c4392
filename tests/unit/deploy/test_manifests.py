"""The plain manifests (deploy/manifests/) and the chart they are rendered from: up to date, and the shapes
that matter — the kube-scheduler extender block, the webhook, least-privilege RBAC, probes, PDBs, replicas,
labels, TLS wiring and the device config — for the default values and for each values switch."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from tests.unit.deploy.conftest import MANIFESTS_DIR, Obj, Objects, render_objects

if TYPE_CHECKING:
    from deploy.render import Chart

NS = "vgpu-system"
FULL = "vgpu-scheduler"
NVIDIA_RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/priority",
]
DEFAULT_FAMILY_RESOURCES = [
    "cambricon.com/vmlu",
    "cambricon.com/mlu.smlu.vmemory",
    "cambricon.com/mlu.smlu.vcore",
    "hygon.com/dcunum",
    "hygon.com/dcumem",
    "hygon.com/dcucores",
    "amd.com/gpu",
    "amd.com/gpumem",
    "amd.com/gpucores",
    "mthreads.com/vgpu",
    "mthreads.com/sgpu-memory",
    "mthreads.com/sgpu-core",
    "birentech.com/gpu",
    "metax-tech.com/gpu",
    "vastaitech.com/va",
    "enflame.com/gcu",
    "enflame.com/drs-gcu",
    "enflame.com/gcu-memory",
    "enflame.com/gcu-core",
    "metax-tech.com/sgpu",
    "metax-tech.com/vmemory",
    "metax-tech.com/vcore",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "kunlunxin.com/xpu",
    "kunlunxin.com/vxpu",
    "kunlunxin.com/vxpu-memory",
]
"""The families HAMi schedules by default besides NVIDIA, with HAMi's default names (the chart with no values)."""
# Every values switch the tests render; Helm must lint each clean.
VALUES_SWITCHES: list[dict[str, Any]] = [
    {"tls": {"certManager": {"enabled": True}}},
    {"redis": {"enabled": False, "external": {"url": "rediss://cache:6380/2"}}},
    {"redis": {"enabled": False, "external": {"existingSecret": "redis-conn"}}},
    {"redis": {"sentinel": {"enabled": True}}},
    {"serviceMonitor": {"enabled": True}, "grafanaDashboard": {"enabled": True}},
    {"extender": {"replicas": 5, "antiAffinity": "hard"}},
    {"webhook": {"enabled": False}},
    {"deviceConfig": {"existingConfigMap": "hami-scheduler-device"}},
    {"schedulerName": "hami-scheduler"},
    {"registrar": {"nodeLabelSelector": "gpu=on,zone=a"}},
    {"deviceConfig": {"config": {"nvidia": {"overwriteEnv": True}}}},
    {
        "deviceConfig": {
            "config": {
                "hygon": {"resourceCountName": "hygon.com/hcunum"},
                "vnpus": {"configs": [{"resourceName": "huawei.com/Ascend310P"}]},
            }
        }
    },
]

# Exact ClusterRole rules per component: (apiGroup, resource) -> verbs. Anything more is a privilege leak.
EXPECTED_RULES: dict[str, dict[tuple[str, str], set[str]]] = {
    f"{FULL}-registrar": {
        ("", "nodes"): {"get", "list", "watch", "patch"},
        ("", "events"): {"create"},
    },
    f"{FULL}-informer": {
        ("", "pods"): {"get", "list", "watch", "patch"},
        ("", "resourcequotas"): {"get", "list", "watch"},
        ("", "nodes"): {"get", "list", "watch", "patch"},  # the node watch sees hami.io/mutex.lock
        ("", "events"): {"create"},
    },
    f"{FULL}-extender": {
        ("", "pods"): {"get", "patch", "list", "delete"},  # list, delete: device-aware preemption
        ("", "pods/binding"): {"create"},
        ("", "pods/status"): {"patch"},  # a victim's DisruptionTarget, the preemptor's nominatedNodeName
        ("policy", "poddisruptionbudgets"): {"list"},
        ("scheduling.k8s.io", "podgroups"): {"get"},  # a gang's minCount
        ("scheduling.x-k8s.io", "podgroups"): {"get"},  # a coscheduling group's minMember
        ("", "nodes"): {"get", "patch"},
        ("", "events"): {"create"},
    },
}


def rules_of(role: Obj) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def container(objs: Objects, deployment: str, name: str | None = None) -> Obj:
    pod = objs.get("Deployment", deployment)["spec"]["template"]["spec"]
    containers: list[Obj] = pod["containers"]
    if name is None:
        assert len(containers) == 1
        return containers[0]
    return next(c for c in containers if c["name"] == name)


def args_map(c: Obj) -> dict[str, str]:
    """``--flag=value`` arguments of a container as a mapping (flag without dashes -> value)."""
    out: dict[str, str] = {}
    for arg in c.get("args", []) + c.get("command", []):
        if arg.startswith("--") and "=" in arg:
            key, _, value = arg[2:].partition("=")
            out[key] = value
    return out


def duration_s(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text):
        total += float(number) * units[unit]
    assert total > 0, text
    return total


def scheduler_config(objs: Objects) -> Obj:
    cm = objs.get("ConfigMap", f"{FULL}-kube-scheduler")
    config: Obj = yaml.safe_load(cm["data"]["config.yaml"])
    return config


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# --------------------------------------------------------------------------------------------
# Invariants that hold for every values combination.
# --------------------------------------------------------------------------------------------


def check_invariants(objs: Objects) -> None:
    # RBAC: no wildcards anywhere, no access to secrets except the certgen Role in our namespace.
    for role in objs.of_kind("ClusterRole") + objs.of_kind("Role"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(key, []), f"{role['metadata']['name']}: wildcard in {key}"
            if "secrets" in rule["resources"]:
                assert role["kind"] == "Role" and set(rule["verbs"]) <= {"get", "create"}, role["metadata"]["name"]
    # Bindings point at roles and service accounts that exist (or upstream system roles).
    service_accounts = {o["metadata"]["name"] for o in objs.of_kind("ServiceAccount")}
    roles = {(o["kind"], o["metadata"]["name"]) for o in objs.of_kind("ClusterRole") + objs.of_kind("Role")}
    upstream = {
        ("ClusterRole", "system:kube-scheduler"),
        ("ClusterRole", "system:volume-scheduler"),
        ("Role", "extension-apiserver-authentication-reader"),
    }
    for binding in objs.of_kind("ClusterRoleBinding") + objs.of_kind("RoleBinding"):
        ref = (binding["roleRef"]["kind"], binding["roleRef"]["name"])
        assert ref in roles or ref in upstream, binding["metadata"]["name"]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["name"] in service_accounts
    # Pods: never sent to our own webhook; run as non-root; hardened containers; probes on Deployments.
    for workload, template in objs.pod_templates():
        name = workload["metadata"]["name"]
        assert template["metadata"]["labels"].get("hami.io/webhook") == "ignore", name
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        if "serviceAccountName" in pod:
            assert pod["serviceAccountName"] in service_accounts, name
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, name
            assert sc["capabilities"]["drop"] == ["ALL"] and not sc.get("privileged"), name
            if workload["kind"] in ("Deployment", "StatefulSet"):
                assert "livenessProbe" in c and "readinessProbe" in c, f"{name}/{c['name']} lacks probes"
                port_names = {p["name"] for p in c.get("ports", [])}
                for probe in (c["livenessProbe"], c["readinessProbe"]):
                    port = (probe.get("httpGet") or probe.get("tcpSocket") or {}).get("port")
                    assert port is None or port in port_names, f"{name}: probe on unknown port {port}"
            mounts = {m["name"] for m in c.get("volumeMounts", [])}
            assert mounts <= {v["name"] for v in pod.get("volumes", [])}, name
        if workload["kind"] in ("Deployment", "StatefulSet"):
            assert selector_matches(workload["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
    # Every namespaced object lives in the release namespace, except the auth-reader binding.
    for o in objs.items:
        if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "Namespace"):
            continue
        expected = "kube-system" if o["metadata"]["name"].endswith("-auth-reader") else NS
        assert o["metadata"].get("namespace") == expected, f"{o['kind']} {o['metadata']['name']}"
    # Services select pods that exist and target ports those pods name.
    pod_sets = [t for w, t in objs.pod_templates() if w["kind"] in ("Deployment", "StatefulSet")]
    for svc in objs.of_kind("Service"):
        matching = [t for t in pod_sets if selector_matches(svc["spec"]["selector"], t["metadata"]["labels"])]
        assert matching, f"Service {svc['metadata']['name']} selects no pods"
        names = {p["name"] for t in matching for c in t["spec"]["containers"] for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in names, f"Service {svc['metadata']['name']}: {port['targetPort']}"
    # PDBs cover every long-running component except the single Redis.
    for name in (f"{FULL}-extender", f"{FULL}-registrar", f"{FULL}-informer", f"{FULL}-kube-scheduler"):
        pdb = objs.get("PodDisruptionBudget", name)
        labels = objs.get("Deployment", name)["spec"]["template"]["metadata"]["labels"]
        assert selector_matches(pdb["spec"]["selector"]["matchLabels"], labels)
        assert pdb["spec"]["maxUnavailable"] >= 1


# --------------------------------------------------------------------------------------------
# The committed plain manifests.
# --------------------------------------------------------------------------------------------


def test_helm_lints_the_chart_clean() -> None:
    pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's SDK, Linux x86_64 only) is not installed")
    from deploy.render import lint

    assert lint() == []
    for values in VALUES_SWITCHES:
        assert lint(values=values) == [], values


def test_lint_reports_what_helm_finds(tmp_path: Path) -> None:
    """The lint wrapper is not blind: a chart whose template does not parse is reported."""
    pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's SDK, Linux x86_64 only) is not installed")
    from deploy.render import CHART_DIR, lint

    broken = tmp_path / "vgpu-scheduler"
    shutil.copytree(CHART_DIR, broken)
    (broken / "templates" / "broken.yaml").write_text("kind: {{ .Values.x | nosuchfunction }}\n", encoding="utf-8")
    found = lint(broken)
    assert any("nosuchfunction" in line for line in found), found


def test_committed_manifests_are_the_chart_rendered_with_default_values(chart: Chart) -> None:
    from deploy.render import manifest_files, stale_files

    stale = stale_files(MANIFESTS_DIR, manifest_files(chart))
    assert not stale, f"run `python -m deploy.render`: stale {stale}"


def test_render_check_flags_a_hand_edited_manifest(
    chart: Chart, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deploy.render import main

    out = tmp_path / "manifests"
    assert main(["--out", str(out)]) == 0
    written = capsys.readouterr().out.splitlines()
    files = sorted(p.name for p in out.glob("*.yaml"))
    assert sorted(line.removeprefix(f"wrote {out}/") for line in written[:-1]) == files
    assert written[-1] == f"render: {len(files)} files in {out}, {len(files)} written"
    assert main(["--out", str(out), "--check"]) == 0
    assert capsys.readouterr().out == f"render: {out} is up to date ({len(files)} files)\n"
    edited = out / "webhook.yaml"
    edited.write_text(edited.read_text(encoding="utf-8").replace("failurePolicy: Fail", "failurePolicy: Ignore"))
    (out / "leftover.yaml").write_text("{}\n", encoding="utf-8")
    assert main(["--out", str(out), "--check"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"stale: {out / 'leftover.yaml'}", f"stale: {out / 'webhook.yaml'}"]
    assert main(["--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"removed {out / 'leftover.yaml'}",
        f"wrote {out / 'webhook.yaml'}",
        f"render: {len(files)} files in {out}, 1 written, 1 removed",
    ]


def test_plain_manifests_hold_every_component(manifests: Objects) -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in manifests.items}
    for name, replicas in (("extender", 3), ("registrar", 2), ("informer", 2), ("kube-scheduler", 2), ("redis", 1)):
        assert ("Deployment", f"{FULL}-{name}") in kinds
        assert manifests.get("Deployment", f"{FULL}-{name}")["spec"]["replicas"] == replicas
    for kind, name in [
        ("Namespace", NS),
        ("Service", f"{FULL}-extender"),
        ("Service", f"{FULL}-webhook"),
        ("Service", f"{FULL}-redis"),
        ("ConfigMap", f"{FULL}-device"),
        ("ConfigMap", f"{FULL}-kube-scheduler"),
        ("MutatingWebhookConfiguration", f"{FULL}-webhook"),
        ("Job", f"{FULL}-certgen-create"),
        ("Job", f"{FULL}-certgen-patch"),
    ]:
        assert (kind, name) in kinds
    check_invariants(manifests)


def test_the_namespace_is_excluded_from_the_webhook(manifests: Objects) -> None:
    assert manifests.get("Namespace", NS)["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    assert (MANIFESTS_DIR / "00-namespace.yaml").is_file()


def test_kube_scheduler_configuration_calls_the_extender(manifests: Objects) -> None:
    config = scheduler_config(manifests)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["percentageOfNodesToScore"] == 100
    assert config["profiles"] == [{"schedulerName": "vgpu-scheduler"}]
    election = config["leaderElection"]
    assert election == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": FULL,
        "resourceNamespace": NS,
    }
    [extender] = config["extenders"]
    assert extender["urlPrefix"] == f"https://{FULL}-extender.{NS}.svc:443"
    assert extender["filterVerb"] == "filter" and extender["bindVerb"] == "bind"
    assert "prioritizeVerb" not in extender and extender["preemptVerb"] == "preempt"
    assert extender["nodeCacheCapable"] is True and extender["ignorable"] is False
    assert extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {
        "insecure": False,
        "caFile": "/etc/vgpu-scheduler/tls/ca.crt",
        # kube-scheduler's client certificate: only it may call /filter and /bind (mTLS)
        "certFile": "/etc/vgpu-scheduler/client/tls.crt",
        "keyFile": "/etc/vgpu-scheduler/client/tls.key",
    }
    assert extender["managedResources"] == [
        {"name": r, "ignoredByScheduler": True} for r in NVIDIA_RESOURCES + DEFAULT_FAMILY_RESOURCES
    ]
    # The bind's lock retry must finish inside kube-scheduler's timeout for the call.
    args = args_map(container(manifests, f"{FULL}-extender"))
    assert extender["httpTimeout"] == "30s"
    for flag in ("node-lock-retry-timeout", "bind-timeout"):
        assert duration_s(args[flag]) < duration_s(extender["httpTimeout"]), flag


def test_kube_scheduler_deployment_mounts_its_config_and_the_extender_ca(manifests: Objects) -> None:
    deployment = manifests.get("Deployment", f"{FULL}-kube-scheduler")
    c = container(manifests, f"{FULL}-kube-scheduler")
    assert c["image"].startswith("registry.k8s.io/kube-scheduler:v1.")
    assert "--config=/etc/kubernetes/vgpu-scheduler/config.yaml" in c["command"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert volumes[mounts["/etc/kubernetes/vgpu-scheduler"]]["configMap"]["name"] == f"{FULL}-kube-scheduler"
    ca = volumes[mounts["/etc/vgpu-scheduler/tls"]]["secret"]
    assert ca["secretName"] == f"{FULL}-tls" and ca["items"] == [{"key": "ca", "path": "ca.crt"}]
    for probe in (c["livenessProbe"], c["readinessProbe"]):
        assert probe["httpGet"]["scheme"] == "HTTPS" and probe["httpGet"]["port"] == "https"
    assert {p["containerPort"] for p in c["ports"]} == {10259}


def test_kube_scheduler_rbac_is_the_upstream_roles_plus_its_own_lease(manifests: Objects) -> None:
    sa = f"{FULL}-kube-scheduler"
    bound = {
        b["roleRef"]["name"]
        for b in manifests.of_kind("ClusterRoleBinding") + manifests.of_kind("RoleBinding")
        if any(s["name"] == sa for s in b["subjects"])
    }
    assert bound == {
        "system:kube-scheduler",
        "system:volume-scheduler",
        "extension-apiserver-authentication-reader",
        f"{sa}-lease",
    }
    lease_role = manifests.get("Role", f"{sa}-lease")
    assert lease_role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [scheduler_config(manifests)["leaderElection"]["resourceName"]],
            "verbs": ["get", "update"],
        },
    ]


@pytest.mark.parametrize("role", sorted(EXPECTED_RULES))
def test_component_rbac_is_exactly_least_privilege(manifests: Objects, role: str) -> None:
    assert rules_of(manifests.get("ClusterRole", role)) == EXPECTED_RULES[role]
    binding = manifests.get("ClusterRoleBinding", role)
    assert binding["roleRef"]["name"] == role
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": role, "namespace": NS}]
    assert manifests.get("Deployment", role)["spec"]["template"]["spec"]["serviceAccountName"] == role


def test_webhook_fails_closed_and_skips_ignored_objects(manifests: Objects) -> None:
    config = manifests.get("MutatingWebhookConfiguration", f"{FULL}-webhook")
    [hook] = config["webhooks"]
    assert hook["name"] == "vgpu.hami.io"
    assert hook["admissionReviewVersions"] == ["v1", "v1beta1"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["timeoutSeconds"] == 10
    assert hook["reinvocationPolicy"] == "Never"
    assert hook["rules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "*"}
    ]
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert hook["objectSelector"]["matchExpressions"] == [ignore]
    assert hook["namespaceSelector"]["matchExpressions"] == [
        ignore,
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
    ]
    service = hook["clientConfig"]["service"]
    assert service == {"name": f"{FULL}-webhook", "namespace": NS, "path": "/webhook", "port": 443}
    svc = manifests.get("Service", f"{FULL}-webhook")
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert [p["port"] for p in svc["spec"]["ports"]] == [443]
    extender_labels = manifests.get("Deployment", f"{FULL}-extender")["spec"]["template"]["metadata"]["labels"]
    assert selector_matches(svc["spec"]["selector"], extender_labels)


def cel_resource_names(hook: Obj) -> list[str]:
    """The resource names in the match condition's CEL list literal (its only list of quoted strings)."""
    [condition] = hook["matchConditions"]
    [literal] = re.findall(r'\[("[^"\]]+"(?:,"[^"\]]+")*)\]', condition["expression"])
    return [name.strip('"') for name in literal.split(",")]


def test_webhook_sees_only_pods_that_name_a_managed_resource(manifests: Objects) -> None:
    """Semantics are proven on a real API server (tests/controlplane/test_webhook_gate.py); here, the shape."""
    [hook] = manifests.get("MutatingWebhookConfiguration", f"{FULL}-webhook")["webhooks"]
    [condition] = hook["matchConditions"]
    assert condition["name"] == "asks-for-a-managed-resource"
    expression = condition["expression"]
    for part in ("object.spec.initContainers", "object.spec.containers", "c.resources.limits", "c.resources.requests"):
        assert part in expression
    assert sorted(cel_resource_names(hook)) == sorted(NVIDIA_RESOURCES + DEFAULT_FAMILY_RESOURCES)


def test_webhook_match_condition_follows_the_device_config(chart: Chart) -> None:
    renamed = {"resourceCountName": "acme.com/gpu", "resourcePriorityName": ""}
    objs = render_objects(chart, {"deviceConfig": {"config": {"nvidia": renamed}}})
    [hook] = objs.get("MutatingWebhookConfiguration", f"{FULL}-webhook")["webhooks"]
    expected = set(NVIDIA_RESOURCES) - {"nvidia.com/gpu", "nvidia.com/priority"} | {"acme.com/gpu"}
    assert set(cel_resource_names(hook)) == expected | set(DEFAULT_FAMILY_RESOURCES)


def test_overwrite_env_sends_every_pod_to_the_webhook(chart: Chart) -> None:
    """With overwriteEnv the webhook hides the GPUs from pods that ask for none, so it must see them all."""
    objs = render_objects(chart, {"deviceConfig": {"config": {"nvidia": {"overwriteEnv": True}}}})
    [hook] = objs.get("MutatingWebhookConfiguration", f"{FULL}-webhook")["webhooks"]
    assert "matchConditions" not in hook
    assert hook["failurePolicy"] == "Fail"


def test_extender_deployment(manifests: Objects) -> None:
    deployment = manifests.get("Deployment", f"{FULL}-extender")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    c = container(manifests, f"{FULL}-extender")
    assert c["args"][0] == "extender"
    flags = args_map(c)
    assert flags["http_bind"] == "0.0.0.0:8443"
    assert (flags["cert_file"], flags["key_file"]) == ("/tls/tls.crt", "/tls/tls.key")
    assert flags["scheduler-name"] == "vgpu-scheduler"
    for probe, path in ((c["livenessProbe"], "/healthz"), (c["readinessProbe"], "/readyz")):
        assert probe["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}
    tls = next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]
    assert tls["secretName"] == f"{FULL}-tls"
    assert {i["path"] for i in tls["items"]} == {"tls.crt", "tls.key", "ca.crt"}
    ports = {p["name"]: p["port"] for p in manifests.get("Service", f"{FULL}-extender")["spec"]["ports"]}
    assert ports == {"https": 443, "metrics": 9395}


API_CALLS_PER_BIND = 5
"""GET pod, GET node, PATCH node (lock), PATCH pod (annotations), POST binding."""


def test_api_rate_limits_leave_room_for_binds(manifests: Objects) -> None:
    """HAMi's client defaults (5 QPS, burst 10) would cap an extender at about one bind per second."""
    flags = args_map(container(manifests, f"{FULL}-extender"))
    assert float(flags["kube-qps"]) / API_CALLS_PER_BIND >= 10
    assert int(flags["kube-burst"]) >= 2 * API_CALLS_PER_BIND
    for component in ("registrar", "informer"):
        flags = args_map(container(manifests, f"{FULL}-{component}"))
        assert float(flags["kube-qps"]) > 5 and int(flags["kube-burst"]) > 10


@pytest.mark.parametrize("component", ["registrar", "informer"])
def test_leased_components_probe_their_metrics_port(manifests: Objects, component: str) -> None:
    c = container(manifests, f"{FULL}-{component}")
    assert c["args"][0] == component
    assert args_map(c)["metrics-bind-address"] == ":9395"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 9395}


def test_all_components_agree_on_redis_and_key_prefix(manifests: Objects) -> None:
    urls, prefixes = set(), set()
    for name in ("extender", "registrar", "informer"):
        c = container(manifests, f"{FULL}-{name}")
        urls.add(next(e["value"] for e in c["env"] if e["name"] == "VGPU_REDIS_URL"))
        prefixes.add(args_map(c)["key-prefix"])
    assert urls == {f"redis://{FULL}-redis.{NS}.svc:6379/0"}
    assert prefixes == {"vgpu"}


def test_redis_is_a_cache_without_persistence_or_eviction(manifests: Objects) -> None:
    c = container(manifests, f"{FULL}-redis")
    args = c["args"]
    assert args[args.index("--save") + 1] == ""
    assert args[args.index("--appendonly") + 1] == "no"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"


def test_certgen_makes_the_secret_every_consumer_mounts(manifests: Objects) -> None:
    create = manifests.get("Job", f"{FULL}-certgen-create")["spec"]["template"]["spec"]["containers"][0]
    patch = manifests.get("Job", f"{FULL}-certgen-patch")["spec"]["template"]["spec"]["containers"][0]
    created = args_map(create)
    assert created["secret-name"] == f"{FULL}-tls" and created["namespace"] == NS
    hosts = created["host"].split(",")
    for svc in (f"{FULL}-extender", f"{FULL}-webhook"):
        assert f"{svc}.{NS}.svc" in hosts
    patched = args_map(patch)
    assert patched["webhook-name"] == f"{FULL}-webhook" and patched["secret-name"] == f"{FULL}-tls"
    assert patched["patch-mutating"] == "true" and patched["patch-validating"] == "false"
    hooks = manifests.get("Job", f"{FULL}-certgen-create")["metadata"]["annotations"]["helm.sh/hook"]
    assert hooks == "pre-install,pre-upgrade"
    role = manifests.get("ClusterRole", f"{FULL}-certgen")
    assert role["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": [f"{FULL}-webhook"],
            "verbs": ["get", "update"],
        }
    ]


def test_device_config_is_hamis_shape_and_mounted_for_every_service(manifests: Objects) -> None:
    from vgpu_scheduler.shared.devconfig import DEVICE_PLUGIN_KEYS, parse_device_config

    cm = manifests.get("ConfigMap", f"{FULL}-device")
    document = yaml.safe_load(cm["data"]["device-config.yaml"])
    loaded = parse_device_config(document, source="ConfigMap")
    assert loaded.nvidia.resource_count_name == "nvidia.com/gpu"
    assert all(note.split(":")[0].split(".")[-1] in DEVICE_PLUGIN_KEYS for note in loaded.notes), loaded.notes
    for name in ("extender", "registrar", "informer"):
        deployment = manifests.get("Deployment", f"{FULL}-{name}")
        c = container(manifests, f"{FULL}-{name}")
        assert args_map(c)["device-config-file"] == "/device-config.yaml"
        mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/device-config.yaml")
        assert mount["subPath"] == "device-config.yaml"
        volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
        assert volume["configMap"]["name"] == f"{FULL}-device"


# --------------------------------------------------------------------------------------------
# Values switches.
# --------------------------------------------------------------------------------------------


def test_cert_manager_replaces_certgen(chart: Chart) -> None:
    objs = render_objects(chart, {"tls": {"certManager": {"enabled": True}}})
    check_invariants(objs)
    assert not objs.of_kind("Job")
    cert = objs.get("Certificate", f"{FULL}-serving-cert")
    assert cert["spec"]["secretName"] == f"{FULL}-tls"
    assert {f"{FULL}-extender.{NS}.svc", f"{FULL}-webhook.{NS}.svc"} <= set(cert["spec"]["dnsNames"])
    hook = objs.get("MutatingWebhookConfiguration", f"{FULL}-webhook")
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NS}/{FULL}-serving-cert"
    ca_issuer = objs.get("Issuer", cert["spec"]["issuerRef"]["name"])
    assert objs.get("Certificate", ca_issuer["spec"]["ca"]["secretName"])["spec"]["isCA"] is True
    extender_tls = next(
        v
        for v in objs.get("Deployment", f"{FULL}-extender")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "tls"
    )
    assert "items" not in extender_tls["secret"]  # cert-manager already writes tls.crt, tls.key, ca.crt
    scheduler_ca = next(
        v
        for v in objs.get("Deployment", f"{FULL}-kube-scheduler")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "tls-ca"
    )
    assert scheduler_ca["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]


@pytest.mark.parametrize(
    ("external", "expected_env"),
    [
        pytest.param({"url": "rediss://cache:6380/2"}, {"value": "rediss://cache:6380/2"}, id="url"),
        pytest.param(
            {"existingSecret": "redis-conn"},
            {"valueFrom": {"secretKeyRef": {"name": "redis-conn", "key": "redis-url"}}},
            id="secret",
        ),
    ],
)
def test_external_redis(chart: Chart, external: dict[str, str], expected_env: dict[str, Any]) -> None:
    # the URL (or the Secret holding it) carries the credentials: no separate password Secret
    objs = render_objects(chart, {"redis": {"enabled": False, "external": external, "auth": {"enabled": False}}})
    check_invariants(objs)
    assert objs.maybe("Deployment", f"{FULL}-redis") is None and objs.maybe("Service", f"{FULL}-redis") is None
    for name in ("extender", "registrar", "informer"):
        env = next(e for e in container(objs, f"{FULL}-{name}")["env"] if e["name"] == "VGPU_REDIS_URL")
        assert {k: v for k, v in env.items() if k != "name"} == expected_env


def test_redis_with_sentinel(chart: Chart) -> None:
    objs = render_objects(chart, {"redis": {"sentinel": {"enabled": True}}})
    check_invariants(objs)
    assert objs.maybe("Deployment", f"{FULL}-redis") is None  # instead of the single Redis
    sts = objs.get("StatefulSet", f"{FULL}-redis")
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] == f"{FULL}-redis-headless"
    pod = sts["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"redis", "sentinel"}
    assert {p["containerPort"] for c in containers.values() for p in c["ports"]} == {6379, 26379}
    for c in containers.values():  # the password comes from the Secret, never from a command line
        assert c["command"] == ["sh", f"/scripts/start-{c['name']}.sh"] and "args" not in c
        env = {e["name"]: e for e in c["env"]}
        assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == f"{FULL}-redis-auth"
    service = objs.get("Service", f"{FULL}-redis-headless")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert objs.get("PodDisruptionBudget", f"{FULL}-redis")["spec"]["maxUnavailable"] == 1
    # every component finds the primary through the three Sentinels, by the pods' stable names
    from vgpu_scheduler.shared.config.redisurl import parse_sentinel_url

    urls = set()
    for name in ("extender", "registrar", "informer"):
        env = {e["name"]: e for e in container(objs, f"{FULL}-{name}")["env"]}
        urls.add(env["VGPU_REDIS_URL"]["value"])
        assert "VGPU_REDIS_WAIT_REPLICAS" not in env  # the built-in default: 1 replica with Sentinel
    (url,) = urls
    parsed = parse_sentinel_url(url)
    hosts = [f"{FULL}-redis-{i}.{FULL}-redis-headless.{NS}.svc" for i in range(3)]
    assert parsed.sentinels == tuple((h, 26379) for h in hosts) and parsed.service == "mymaster"
    # the start scripts are valid sh, and name the same pods as the URL
    scripts = objs.get("ConfigMap", f"{FULL}-redis-scripts")["data"]
    assert set(scripts) == {"common.sh", "start-redis.sh", "start-sentinel.sh"}
    for name, text in scripts.items():
        checked = subprocess.run(["sh", "-n"], input=text, text=True, capture_output=True, check=False)
        assert checked.returncode == 0, f"{name}: {checked.stderr}"
    headless = {e["name"]: e.get("value") for e in containers["redis"]["env"]}["HEADLESS"]
    assert headless == f"{FULL}-redis-headless.{NS}.svc"
    assert all(f"{FULL}-redis-{i}.${{HEADLESS}}" in scripts["common.sh"] for i in range(3))


def test_redis_wait_flags_reach_every_component(chart: Chart) -> None:
    objs = render_objects(chart, {"redis": {"sentinel": {"enabled": True}, "waitReplicas": 2, "waitTimeout": "1s"}})
    for name in ("extender", "registrar", "informer"):
        env = {e["name"]: e.get("value") for e in container(objs, f"{FULL}-{name}")["env"]}
        assert env["VGPU_REDIS_WAIT_REPLICAS"] == "2" and env["VGPU_REDIS_WAIT_TIMEOUT"] == "1s"


def test_redis_with_fewer_than_three_sentinels_is_refused(chart: Chart) -> None:
    from deploy.render import RenderError

    with pytest.raises(RenderError, match="at least 3"):
        render_objects(chart, {"redis": {"sentinel": {"enabled": True, "replicas": 2}}})


def test_external_redis_without_a_url_is_refused(chart: Chart) -> None:
    from deploy.render import RenderError

    with pytest.raises(RenderError, match=r"redis\.external\.url"):
        render_objects(chart, {"redis": {"enabled": False}})


def test_monitoring_switches(chart: Chart) -> None:
    objs = render_objects(chart, {"serviceMonitor": {"enabled": True}, "grafanaDashboard": {"enabled": True}})
    check_invariants(objs)
    monitor = objs.get("ServiceMonitor", FULL)
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = {
        s["metadata"]["name"] for s in objs.of_kind("Service") if selector_matches(selector, s["metadata"]["labels"])
    }
    assert scraped == {f"{FULL}-extender", f"{FULL}-registrar-metrics", f"{FULL}-informer-metrics"}
    for name in scraped:
        assert "metrics" in {p["name"] for p in objs.get("Service", name)["spec"]["ports"]}
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    dashboard = objs.get("ConfigMap", f"{FULL}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert yaml.safe_load(dashboard["data"]["vgpu-scheduler.json"])["uid"] == "vgpu-scheduler"


def test_monitoring_is_off_by_default(manifests: Objects) -> None:
    assert not manifests.of_kind("ServiceMonitor")
    assert manifests.maybe("ConfigMap", f"{FULL}-dashboard") is None


def test_hard_anti_affinity_and_replicas(chart: Chart) -> None:
    objs = render_objects(chart, {"extender": {"replicas": 5, "antiAffinity": "hard"}})
    check_invariants(objs)
    deployment = objs.get("Deployment", f"{FULL}-extender")
    assert deployment["spec"]["replicas"] == 5
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert list(anti) == ["requiredDuringSchedulingIgnoredDuringExecution"]


def test_webhook_can_be_disabled(chart: Chart) -> None:
    objs = render_objects(chart, {"webhook": {"enabled": False}})
    check_invariants(objs)
    assert not objs.of_kind("MutatingWebhookConfiguration")
    assert objs.maybe("Job", f"{FULL}-certgen-patch") is None
    assert objs.maybe("ClusterRole", f"{FULL}-certgen") is None
    assert objs.maybe("Job", f"{FULL}-certgen-create") is not None  # kube-scheduler -> extender still uses TLS


def test_hamis_device_config_map_can_be_reused(chart: Chart) -> None:
    objs = render_objects(chart, {"deviceConfig": {"existingConfigMap": "hami-scheduler-device"}})
    check_invariants(objs)
    assert objs.maybe("ConfigMap", f"{FULL}-device") is None
    for name in ("extender", "registrar", "informer"):
        volumes = objs.get("Deployment", f"{FULL}-{name}")["spec"]["template"]["spec"]["volumes"]
        assert next(v for v in volumes if v["name"] == "device-config")["configMap"]["name"] == "hami-scheduler-device"


def test_scheduler_name_reaches_the_profile_and_the_webhook(chart: Chart) -> None:
    objs = render_objects(chart, {"schedulerName": "hami-scheduler"})
    assert scheduler_config(objs)["profiles"] == [{"schedulerName": "hami-scheduler"}]
    assert args_map(container(objs, f"{FULL}-extender"))["scheduler-name"] == "hami-scheduler"


def test_release_name_and_namespace_flow_everywhere(chart: Chart) -> None:
    objs = render_objects(chart, release="gpu", namespace="infra")
    names = {o["metadata"]["name"] for o in objs.items}
    assert "gpu-vgpu-scheduler-extender" in names
    config = scheduler_config_named(objs, "gpu-vgpu-scheduler-kube-scheduler")
    assert config["extenders"][0]["urlPrefix"] == "https://gpu-vgpu-scheduler-extender.infra.svc:443"
    assert config["leaderElection"]["resourceNamespace"] == "infra"


def scheduler_config_named(objs: Objects, name: str) -> Obj:
    config: Obj = yaml.safe_load(objs.get("ConfigMap", name)["data"]["config.yaml"])
    return config
