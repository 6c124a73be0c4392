"""Input manifests: what loads, and bad input as one line naming the file, the document and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vgpu_scheduler.services.simulate.documents import ManifestError
from vgpu_scheduler.services.simulate.main import EXAMPLE_CLUSTER, EXAMPLE_WORKLOAD, EXAMPLES_DIR
from vgpu_scheduler.services.simulate.manifests import load_cluster, load_workload
from vgpu_scheduler.shared.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]

REGISTER = (
    '[{"id":"GPU-a","count":10,"devmem":16000,"devcore":100,"type":"NVIDIA-T4","mode":"hami-core","health":true}]'
)

NODE = f"""
apiVersion: v1
kind: Node
metadata:
  name: n1
  annotations:
    hami.io/node-nvidia-register: '{REGISTER}'
status:
  allocatable: {{nvidia.com/gpu: "10"}}
"""

POD = """
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: ns}
spec:
  containers:
  - name: main
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: "3000"}}
"""


def write(tmp_path: Path, text: str, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_bundled_examples_load_and_the_repository_copies_are_identical() -> None:
    cluster = load_cluster(EXAMPLE_CLUSTER)
    workload = load_workload(EXAMPLE_WORKLOAD)
    assert 8 <= len(cluster.nodes) <= 30
    assert 40 <= len(workload.pods) <= 100
    assert cluster.pods and cluster.quotas
    for name in (
        "cluster.yaml",
        "workload.yaml",
        "device-config.yaml",
        "priority-cluster.yaml",
        "priority-workload.yaml",
        "disruption-workload.yaml",
    ):
        assert (EXAMPLES_DIR / name).read_bytes() == (REPO / "examples" / name).read_bytes(), name
    priority = load_workload(EXAMPLES_DIR / "priority-workload.yaml")
    assert len(priority.priority_classes) == 4 and len(priority.pod_groups) == 2
    assert len(load_cluster(EXAMPLES_DIR / "priority-cluster.yaml").nodes) == 3
    disruption = load_workload(EXAMPLES_DIR / "disruption-workload.yaml")
    assert (len(disruption.controllers), len(disruption.budgets), len(disruption.evictions)) == (3, 2, 6)


def test_multi_document_yaml_a_list_and_json_all_load(tmp_path: Path) -> None:
    import yaml

    node = yaml.safe_load(NODE)
    as_list = {"apiVersion": "v1", "kind": "List", "items": [node]}
    assert [n["metadata"]["name"] for n in load_cluster(write(tmp_path, json.dumps(as_list), "c.json")).nodes] == ["n1"]
    assert len(load_cluster(write(tmp_path, json.dumps([node]), "array.json")).nodes) == 1
    workload = load_workload(write(tmp_path, POD + "\n---\n" + POD.replace("p1", "p2")))
    assert [p["metadata"]["name"] for p in workload.pods] == ["p1", "p2"]


def test_cluster_pods_default_to_running_and_namespace_default(tmp_path: Path) -> None:
    running = POD.replace("namespace: ns", "annotations: {}").replace("spec:", "spec:\n  nodeName: n1")
    cluster = load_cluster(write(tmp_path, NODE + "---\n" + running))
    (pod,) = cluster.pods
    assert pod["metadata"]["namespace"] == "default" and pod["status"]["phase"] == "Running"


BAD_CLUSTER = [
    pytest.param("- [", "not valid YAML or JSON at line", id="yaml-syntax"),
    pytest.param("just a string\n", "document 1: expected a Kubernetes object (a mapping), got a string", id="scalar"),
    pytest.param(
        "kind: Deployment\nmetadata: {name: d}\n",
        "document 1: kind: 'Deployment' is not accepted here",
        id="wrong-kind",
    ),
    pytest.param("apiVersion: v1\nmetadata: {name: x}\n", "document 1: kind: missing", id="no-kind"),
    pytest.param("kind: Node\nmetadata: {}\n", "document 1: metadata.name: missing", id="no-name"),
    pytest.param(
        "kind: Node\napiVersion: apps/v1\nmetadata: {name: n}\n",
        "document 1: apiVersion: expected v1",
        id="api-version",
    ),
    pytest.param(
        NODE + "---\nkind: Node\nmetadata: {name: n2, annotations: {a: 1}}\n",
        "document 2: metadata.annotations[a]: expected a string, got a number",
        id="annotation-int",
    ),
    pytest.param(NODE.replace('"10"', "lots"), "status.allocatable[nvidia.com/gpu]", id="allocatable"),
    pytest.param(NODE + "---\n" + NODE, "document 2: metadata.name: Node n1 is already defined at", id="duplicate"),
    pytest.param(
        NODE + "---\n" + POD, "document 2: spec.nodeName: a pod in the cluster file must be placed", id="unplaced-pod"
    ),
    pytest.param(
        NODE + "---\n" + POD.replace("spec:", "spec:\n  nodeName: ghost"),
        "document 2: spec.nodeName: no Node 'ghost' in this file",
        id="unknown-node",
    ),
    pytest.param(
        NODE
        + "---\n"
        + POD.replace(
            "metadata: {name: p1, namespace: ns}",
            "metadata: {name: p1, annotations: {hami.io/vgpu-node: n1, "
            "hami.io/vgpu-devices-allocated: 'GPU-a,NVIDIA:;'}}",
        ).replace("spec:", "spec:\n  nodeName: n1"),
        "document 2: metadata.annotations: hami.io/vgpu-devices-allocated",
        id="allocation",
    ),
    pytest.param(
        "kind: ResourceQuota\nmetadata: {name: q}\nspec: {hard: {limits.nvidia.com/gpumem: '1x'}}\n",
        "document 1: spec.hard[limits.nvidia.com/gpumem]",
        id="quota-quantity",
    ),
    pytest.param(
        "kind: List\nitems: [{kind: Node, metadata: {name: a}}, {kind: Node}]\n",
        "document 1, items[1]: metadata.name: missing",
        id="list-item",
    ),
    pytest.param("kind: Namespace\nmetadata: {name: x}\n", "no Node in the cluster file", id="no-nodes"),
]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            NODE.replace(REGISTER, "[{broken"),
            "document 1: metadata.annotations[hami.io/node-nvidia-register]: invalid JSON",
            id="register",
        ),
        pytest.param(
            NODE.replace("\nstatus:", "\n    hami.io/node-nvidia-score: '[1'\nstatus:"),
            "document 1: metadata.annotations[hami.io/node-nvidia-score]: ",
            id="topology",
        ),
    ],
)
def test_a_registration_that_does_not_decode_is_a_bad_manifest(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text + "---\n" + NODE.replace("name: n1", "name: n2"))
    with pytest.raises(ManifestError) as info:
        load_cluster(path)
    assert str(info.value).startswith(f"{path}: {message}"), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            NODE.replace('"10"', '"0"'), "no allocatable nvidia.com/gpu: device plugin not registered", id="zero"
        ),
        pytest.param(
            NODE.replace('nvidia.com/gpu: "10"', 'cpu: "4"'),
            "no allocatable nvidia.com/gpu: device plugin not registered",
            id="missing",
        ),
    ],
)
def test_a_node_the_registrar_would_drop_is_kept_with_a_warning_and_the_rest_proceed(
    tmp_path: Path, text: str, message: str
) -> None:
    second = NODE.replace("name: n1", "name: n2")
    path = write(tmp_path, text + "---\n" + second)
    cluster = load_cluster(path)
    assert [n["metadata"]["name"] for n in cluster.nodes] == ["n1", "n2"]
    assert [node for node, _ in cluster.unregistered] == ["n1"]
    (warning,) = cluster.warnings
    assert warning == f"{path}: {message}: node n1 left unregistered, its devices not schedulable", warning


def test_the_warning_names_every_node_left_unregistered_for_one_reason_once(tmp_path: Path) -> None:
    zero = NODE.replace('"10"', '"0"')
    path = write(tmp_path, zero + "---\n" + zero.replace("name: n1", "name: n2"))
    assert load_cluster(path).warnings == [
        f"{path}: no allocatable nvidia.com/gpu: device plugin not registered: nodes n1, n2 left unregistered, "
        "their devices not schedulable"
    ]


@pytest.mark.parametrize(("text", "message"), BAD_CLUSTER)
def test_bad_cluster_files_give_one_line_naming_file_document_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ManifestError) as info:
        load_cluster(path)
    text_out = str(info.value)
    assert isinstance(info.value, ConfigError)
    assert "\n" not in text_out
    assert text_out.startswith(str(path)), text_out
    assert message in text_out, text_out


BAD_WORKLOAD = [
    pytest.param(
        NODE,
        "document 1: kind: 'Node' is not accepted here (expected Deployment, Eviction, Job, Pod, "
        "PodDisruptionBudget, PodGroup, PriorityClass, ReplicaSet, StatefulSet)",
        id="node",
    ),
    pytest.param("kind: Pod\nmetadata: {name: p}\nspec: {}\n", "document 1: spec.containers: a pod needs", id="empty"),
    pytest.param(POD.replace("- name: main", "- image: x"), "spec.containers[0].name: missing", id="no-ctr-name"),
    pytest.param(
        POD.replace('"3000"', "3 GiB"), "spec.containers[0].resources.limits[nvidia.com/gpumem]", id="quantity"
    ),
    pytest.param(
        POD.replace("spec:", "spec:\n  nodeName: n1"),
        "spec.nodeName: a workload pod must not be assigned",
        id="assigned",
    ),
    pytest.param(POD + "---\n" + POD, "document 2: metadata.name: Pod ns/p1 is already defined", id="duplicate"),
    pytest.param("# nothing\n", "no Pod in the workload file", id="empty-file"),
]


@pytest.mark.parametrize(("text", "message"), BAD_WORKLOAD)
def test_bad_workload_files_give_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ManifestError) as info:
        load_workload(path)
    assert "\n" not in str(info.value)
    assert message in str(info.value), str(info.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"nope\.yaml: no such file"):
        load_workload(tmp_path / "nope.yaml")


def test_workload_pods_lose_server_fields(tmp_path: Path) -> None:
    text = POD.replace("metadata: {name: p1, namespace: ns}", "metadata: {name: p1, uid: u, resourceVersion: '3'}")
    (pod,) = load_workload(write(tmp_path, text + "status: {phase: Running}\n")).pods
    assert "uid" not in pod["metadata"] and "resourceVersion" not in pod["metadata"] and "status" not in pod
    assert pod["metadata"]["namespace"] == "default"


PRIORITY_CLASS = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"""
POD_GROUP = """
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {name: train, namespace: ns}
spec: {schedulingPolicy: {gang: {minCount: 2}}}
"""
MEMBER = POD.replace("spec:", "spec:\n  schedulingGroup: {podGroupName: train}\n  priorityClassName: high")


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha2"])  # Kubernetes v1.37's and v1.36's PodGroup
def test_a_workload_carries_priority_classes_and_pod_groups(tmp_path: Path, version: str) -> None:
    text = "\n---\n".join([PRIORITY_CLASS, POD_GROUP.replace("v1alpha2", version), MEMBER])
    workload = load_workload(write(tmp_path, text))
    assert [c["metadata"]["name"] for c in workload.priority_classes] == ["high"]
    assert [(g["apiVersion"], g["metadata"]["name"]) for g in workload.pod_groups] == [
        (f"scheduling.k8s.io/{version}", "train")
    ]
    assert [p["metadata"]["name"] for p in workload.pods] == ["p1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            PRIORITY_CLASS.replace("1000", "1000000001") + "\n---\n" + POD,
            "document 1: value: maximum allowed value of a user defined priority is 1000000000",
            id="too-high",
        ),
        pytest.param(
            PRIORITY_CLASS.replace("value: 1000", "value: high") + "\n---\n" + POD,
            "document 1: value: Required value: an integer priority, got a string",
            id="not-an-integer",
        ),
        pytest.param(
            PRIORITY_CLASS.replace("high", "system-x") + "\n---\n" + POD,
            "document 1: metadata.name: priority class names with 'system-' prefix are reserved",
            id="reserved",
        ),
        pytest.param(
            "\n---\n".join(
                [
                    PRIORITY_CLASS + "globalDefault: true",
                    PRIORITY_CLASS.replace("high", "low") + "globalDefault: true",
                    POD,
                ]
            ),
            "document 2: globalDefault: PriorityClass high is already marked as default",
            id="two-defaults",
        ),
        pytest.param(
            POD_GROUP.replace("{gang: {minCount: 2}}", "{gang: {}}") + "\n---\n" + POD,
            "document 1: spec.schedulingPolicy.gang.minCount: expected an integer of at least 1, got None",
            id="no-min-count",
        ),
        pytest.param(
            POD_GROUP.replace("v1alpha2", "v1") + "\n---\n" + POD,
            "document 1: apiVersion: expected scheduling.k8s.io/v1beta1, scheduling.k8s.io/v1alpha2 or "
            "scheduling.x-k8s.io/v1alpha1 for a PodGroup",
            id="pod-group-version",
        ),
        pytest.param(
            MEMBER.replace("priorityClassName: high", "priority: high"),
            "document 1: spec.priority: expected an integer, got a string",
            id="priority-not-an-integer",
        ),
        pytest.param(
            MEMBER,
            "document 1: spec.schedulingGroup.podGroupName: no PodGroup ns/train "
            "(scheduling.k8s.io/v1beta1 or scheduling.k8s.io/v1alpha2)",
            id="no-such-group",
        ),
    ],
)
def test_bad_priority_classes_and_pod_groups_give_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        load_workload(write(tmp_path, text))
    assert "\n" not in str(info.value)
    assert message in str(info.value), str(info.value)
