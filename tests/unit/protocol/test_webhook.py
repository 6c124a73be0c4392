"""The webhook's mutations and denials (hami-wire §5.3, §1.3, §8), checked through the JSONPatch it answers."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState
from vgpu_scheduler.shared.protocol.admission import (
    AdmissionOutcome,
    decode_patch,
    parse_admission_review,
    review_response,
)
from vgpu_scheduler.shared.protocol.extender import parse_extender_args
from vgpu_scheduler.shared.protocol.webhook import QuotaDemand, apply_patch, fits_quota, mutate_pod, quota_demand

CFG = NvidiaConfig()
SCHED = "hami-scheduler"
GPU, MEM, PCT, CORES, PRIO = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
)
WIRE = Path(__file__).resolve().parents[2] / "data" / "kube-scheduler-wire"


def ctr(
    name: str = "main",
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    if limits is not None or requests is not None:
        c["resources"] = resources
    c.update(extra)
    return c


def pod(
    *containers: dict[str, Any],
    init: tuple[dict[str, Any], ...] = (),
    scheduler: str | None = "default-scheduler",
    **spec_extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    spec.update(spec_extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def run(
    p: dict[str, Any],
    cfg: NvidiaConfig = CFG,
    *,
    scheduler_name: str = SCHED,
    force: bool = True,
    quota: QuotaState | None = None,
) -> tuple[AdmissionOutcome, dict[str, Any]]:
    """Mutate, check the input is untouched, and return the outcome and the patched pod."""
    before = copy.deepcopy(p)
    outcome = mutate_pod(
        p, cfg=cfg, scheduler_name=scheduler_name, force_overwrite_default_scheduler=force, quota=quota
    )
    assert p == before, "mutate_pod must not modify its input"
    return outcome, apply_patch(p, outcome.patch_ops)


def env(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


# --------------------------------------------------------------------------------------------
# Mutations: (id, config, pod, expected containers after the patch, expected spec extras)
# --------------------------------------------------------------------------------------------

MUTATIONS: list[tuple[str, NvidiaConfig, dict[str, Any], list[dict[str, Any]]]] = [
    (
        "bare-gpu-becomes-exclusive",
        CFG,
        pod(ctr(limits={GPU: "1"}, requests={GPU: "1"})),
        [ctr(limits={GPU: "1", CORES: "100"}, requests={GPU: "1"})],
    ),
    (
        "bare-gpu-2",
        CFG,
        pod(ctr(limits={GPU: 2})),
        [ctr(limits={GPU: 2, CORES: "100"})],
    ),
    (
        "gpumem-given-no-exclusive",
        CFG,
        pod(ctr(limits={GPU: "1", MEM: "3k"})),
        [ctr(limits={GPU: "1", MEM: "3k"})],
    ),
    (
        "gpumem-in-requests-no-exclusive",
        CFG,
        pod(ctr(limits={GPU: "1"}, requests={MEM: "1024"})),
        [ctr(limits={GPU: "1"}, requests={MEM: "1024"})],
    ),
    (
        "percentage-100-exclusive",
        CFG,
        pod(ctr(limits={GPU: "1", PCT: "100"})),
        [ctr(limits={GPU: "1", PCT: "100", CORES: "100"})],
    ),
    (
        "percentage-50-shared",
        CFG,
        pod(ctr(limits={GPU: "1", PCT: "50"})),
        [ctr(limits={GPU: "1", PCT: "50"})],
    ),
    (
        "percentage-100-with-gpumem-exclusive",
        CFG,
        pod(ctr(limits={GPU: "1", PCT: "100", MEM: "1000"})),
        [ctr(limits={GPU: "1", PCT: "100", MEM: "1000", CORES: "100"})],
    ),
    (
        "cores-given-untouched",
        CFG,
        pod(ctr(limits={GPU: "1", CORES: "30"})),
        [ctr(limits={GPU: "1", CORES: "30"})],
    ),
    (
        "cores-in-requests-untouched",
        CFG,
        pod(ctr(limits={GPU: "1"}, requests={CORES: "30"})),
        [ctr(limits={GPU: "1"}, requests={CORES: "30"})],
    ),
    (
        "only-gpumem-gets-default-count",
        CFG,
        pod(ctr(limits={MEM: "2000"})),
        [ctr(limits={MEM: "2000", GPU: "1"})],
    ),
    (
        "only-percentage-100-gets-count-and-cores",
        CFG,
        pod(ctr(limits={PCT: "100"})),
        [ctr(limits={PCT: "100", GPU: "1", CORES: "100"})],
    ),
    (
        "only-cores-gets-count",
        CFG,
        pod(ctr(limits={CORES: "20"})),
        [ctr(limits={CORES: "20", GPU: "1"})],
    ),
    (
        "default-gpu-num-3",
        replace(CFG, default_gpu_num=3),
        pod(ctr(limits={MEM: "2000"})),
        [ctr(limits={MEM: "2000", GPU: "3"})],
    ),
    (
        "count-only-in-requests-creates-limits",
        CFG,
        pod(ctr(requests={GPU: "1"})),
        [ctr(requests={GPU: "1"}, limits={CORES: "100"})],
    ),
    (
        "priority-env-created",
        CFG,
        pod(ctr(limits={GPU: "1", MEM: "1000", PRIO: "1"})),
        [ctr(limits={GPU: "1", MEM: "1000", PRIO: "1"}, env=[env("CUDA_TASK_PRIORITY", "1")])],
    ),
    (
        "priority-env-appended",
        CFG,
        pod(ctr(limits={GPU: "1", MEM: "1000", PRIO: "1"}, env=[env("A", "x")])),
        [ctr(limits={GPU: "1", MEM: "1000", PRIO: "1"}, env=[env("A", "x"), env("CUDA_TASK_PRIORITY", "1")])],
    ),
    (
        "priority-in-requests-ignored",
        CFG,
        pod(ctr(limits={GPU: "1", MEM: "1000"}, requests={PRIO: "1"})),
        [ctr(limits={GPU: "1", MEM: "1000"}, requests={PRIO: "1"})],
    ),
    (
        "core-policy-env-every-container",
        replace(CFG, gpu_core_policy="force"),
        pod(ctr(limits={GPU: "1", MEM: "1000"}), ctr("side")),
        [
            ctr(limits={GPU: "1", MEM: "1000"}, env=[env("GPU_CORE_UTILIZATION_POLICY", "force")]),
            ctr("side", env=[env("GPU_CORE_UTILIZATION_POLICY", "force")]),
        ],
    ),
    (
        "core-policy-default-no-env",
        replace(CFG, gpu_core_policy="default"),
        pod(ctr(limits={GPU: "1", MEM: "1000"})),
        [ctr(limits={GPU: "1", MEM: "1000"})],
    ),
    (
        "overwrite-env-only-non-gpu",
        replace(CFG, overwrite_env=True),
        pod(ctr(limits={GPU: "1", MEM: "1000"}), ctr("side", env=[env("A", "x")])),
        [
            ctr(limits={GPU: "1", MEM: "1000"}),
            ctr("side", env=[env("A", "x"), env("NVIDIA_VISIBLE_DEVICES", "none")]),
        ],
    ),
    (
        "init-container-mutated",
        CFG,
        pod(ctr(), init=(ctr("init", limits={GPU: "1"}),)),
        [ctr()],
    ),
    (
        "wire-005-pod",
        CFG,
        parse_extender_args((WIRE / "005-filter.json").read_bytes()).pod,
        parse_extender_args((WIRE / "005-filter.json").read_bytes()).pod["spec"]["containers"],
    ),
    (
        "wire-001-pod",
        CFG,
        parse_extender_args((WIRE / "001-filter.json").read_bytes()).pod,
        [
            {
                **parse_extender_args((WIRE / "001-filter.json").read_bytes()).pod["spec"]["containers"][0],
                "resources": {"limits": {GPU: "1", CORES: "100"}, "requests": {GPU: "1"}},
            }
        ],
    ),
]


@pytest.mark.parametrize(("cfg", "p", "containers"), [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_mutations(cfg: NvidiaConfig, p: dict[str, Any], containers: list[dict[str, Any]]) -> None:
    outcome, mutated = run(p, cfg)
    assert outcome.allowed, outcome.message
    assert outcome.code == 200
    assert mutated["spec"]["containers"] == containers
    assert mutated["spec"]["schedulerName"] == SCHED
    assert mutated["metadata"] == p["metadata"]


def test_init_container_gets_exclusive_default() -> None:
    _, mutated = run(pod(ctr(), init=(ctr("init", limits={GPU: "1"}),)))
    assert mutated["spec"]["initContainers"] == [ctr("init", limits={GPU: "1", CORES: "100"})]
    assert mutated["spec"]["schedulerName"] == SCHED


def test_exact_patch_for_a_bare_gpu() -> None:
    outcome, _ = run(pod(ctr(limits={GPU: "1"}, requests={GPU: "1"})))
    assert list(outcome.patch_ops) == [
        {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores", "value": "100"},
        {"op": "replace", "path": "/spec/schedulerName", "value": SCHED},
    ]


def test_exact_patch_when_maps_do_not_exist() -> None:
    p = pod(ctr(requests={GPU: "1", PRIO: "1"}), scheduler=None)
    outcome, _ = run(p, replace(CFG, gpu_core_policy="disable"))
    assert list(outcome.patch_ops) == [
        {"op": "add", "path": "/spec/containers/0/resources/limits", "value": {CORES: "100"}},
        {"op": "add", "path": "/spec/containers/0/env", "value": [env("GPU_CORE_UTILIZATION_POLICY", "disable")]},
        {"op": "add", "path": "/spec/schedulerName", "value": SCHED},
    ]


def test_exact_patch_appends_env_by_index() -> None:
    p = pod(ctr(limits={GPU: "1", MEM: "10", PRIO: "0"}, env=[env("A", "1"), env("B", "2")]))
    outcome, _ = run(p)
    assert outcome.patch_ops[0] == {
        "op": "add",
        "path": "/spec/containers/0/env/2",
        "value": env("CUDA_TASK_PRIORITY", "0"),
    }


def test_runtime_class_set_when_absent_and_kept_when_present() -> None:
    cfg = replace(CFG, runtime_class_name="nvidia")
    _, mutated = run(pod(ctr(limits={GPU: "1"})), cfg)
    assert mutated["spec"]["runtimeClassName"] == "nvidia"
    _, mutated = run(pod(ctr(limits={GPU: "1"}), runtimeClassName="kata"), cfg)
    assert mutated["spec"]["runtimeClassName"] == "kata"
    _, mutated = run(pod(ctr(limits={GPU: "1"}), runtimeClassName=None), cfg)
    assert mutated["spec"]["runtimeClassName"] == "nvidia"
    _, mutated = run(pod(ctr()), cfg)
    assert "runtimeClassName" not in mutated["spec"]


def test_non_gpu_pod_is_left_alone() -> None:
    p = pod(ctr(limits={"cpu": "1"}))
    outcome, mutated = run(p)
    assert outcome == AdmissionOutcome.allow()
    assert mutated == p


def test_default_gpu_num_zero_refuses_memory_without_a_count() -> None:
    # HAMi lets this pod through unscheduled by us (it would run without a GPU); we say what is missing
    outcome, _ = run(pod(ctr(limits={MEM: "2000"})), replace(CFG, default_gpu_num=0))
    assert not outcome.allowed
    assert outcome.code == 403
    assert (
        outcome.message
        == 'container "main": nvidia.com/gpumem needs nvidia.com/gpu, the number of GPUs: add nvidia.com/gpu: 1'
    )


def test_bad_value_of_another_schedulers_pod_is_not_judged() -> None:
    p = pod(ctr(limits={GPU: "-1"}), scheduler="other-scheduler")
    outcome, _ = run(p)
    assert outcome.allowed


def test_custom_resource_names() -> None:
    cfg = replace(CFG, resource_count_name="example.com/vgpu", resource_core_name="example.com/vcores")
    _, mutated = run(pod(ctr(limits={"example.com/vgpu": "1"})), cfg)
    assert mutated["spec"]["containers"][0]["resources"]["limits"] == {
        "example.com/vgpu": "1",
        "example.com/vcores": "100",
    }


# --------------------------------------------------------------------------------------------
# schedulerName (step 2 and step 5)
# --------------------------------------------------------------------------------------------

SCHEDULER_RULES = [
    # (current schedulerName, --scheduler-name, force, expected schedulerName after, mutated?)
    (None, SCHED, False, SCHED, True),
    ("", SCHED, False, SCHED, True),
    ("default-scheduler", SCHED, True, SCHED, True),
    ("default-scheduler", SCHED, False, "default-scheduler", False),
    ("other", SCHED, True, "other", False),
    (SCHED, SCHED, False, SCHED, True),
    ("default-scheduler", "", True, "default-scheduler", True),
    ("other", "", True, "other", False),
]


@pytest.mark.parametrize(
    ("current", "configured", "force", "after", "mutated"),
    SCHEDULER_RULES,
    ids=[f"{r[0]!r}-{r[1] or 'unset'}-force={r[2]}" for r in SCHEDULER_RULES],
)
def test_scheduler_name_rules(current: str | None, configured: str, force: bool, after: str, mutated: bool) -> None:
    p = pod(ctr(limits={GPU: "1"}), scheduler=current)
    outcome, out = run(p, scheduler_name=configured, force=force)
    assert outcome.allowed
    assert out["spec"]["schedulerName"] == after
    assert ("nvidia.com/gpucores" in out["spec"]["containers"][0]["resources"]["limits"]) is mutated
    if not mutated:
        assert outcome.message == "pod already has different scheduler assigned"
        assert not outcome.patch_ops


# --------------------------------------------------------------------------------------------
# Denials and errors
# --------------------------------------------------------------------------------------------

DENIALS: list[tuple[str, dict[str, Any], int, str]] = [
    ("no-containers", pod(), 403, "pod has no containers"),
    ("containers-null", {"spec": {"containers": None}}, 403, "pod has no containers"),
    ("no-spec", {"metadata": {}}, 403, "pod has no containers"),
    (
        "no-containers-before-scheduler-rule",
        pod(scheduler="other"),
        403,
        "pod has no containers",
    ),
    (
        "privileged-gpu-container",
        pod(ctr(limits={GPU: "1"}, securityContext={"privileged": True})),
        403,
        "container main is privileged",
    ),
    (
        "privileged-sidecar-of-gpu-pod",
        pod(ctr(limits={GPU: "1"}), ctr("side", securityContext={"privileged": True})),
        403,
        "container side is privileged",
    ),
    (
        "privileged-init-first",
        pod(
            ctr("a", securityContext={"privileged": True}, limits={GPU: "1"}),
            init=(ctr("i", securityContext={"privileged": True}),),
        ),
        403,
        "container i is privileged",
    ),
    (
        "node-assigned",
        pod(ctr(limits={GPU: "1"}), nodeName="gpu-node-1"),
        403,
        "pod has node assigned",
    ),
    (
        "percentage-101",
        pod(ctr(limits={GPU: "1", PCT: "101"})),
        403,
        'container "main": nvidia.com/gpumem-percentage is a percentage of one GPU: "101" is more than 100',
    ),
    ("percentage-negative", pod(ctr(limits={GPU: "1", PCT: "-1"})), 403, "gpumem-percentage cannot be negative"),
    ("percentage-fraction", pod(ctr(limits={GPU: "1", PCT: "100.5"})), 403, '"100.5" is 100.5; did you mean 101?'),
    ("percentage-in-requests", pod(ctr(limits={GPU: "1"}, requests={PCT: "150"})), 403, '"150" is more than 100'),
    (
        "percentage-in-init-container-without-gpu",
        pod(ctr(), init=(ctr("init", limits={PCT: "200"}),)),
        403,
        'init container "init": nvidia.com/gpumem-percentage',
    ),
    # the cases: a pod that asks for a GPU resource it cannot get as written is told what to write
    (
        "gpumem-20Gi",
        pod(ctr(limits={GPU: "1", MEM: "20Gi"})),
        403,
        'container "main": nvidia.com/gpumem is in MiB: "20Gi" would be 21474836480 MiB; did you mean 20480?',
    ),
    ("gpumem-negative", pod(ctr(limits={GPU: "1", MEM: "-100"})), 403, 'gpumem cannot be negative: got "-100"'),
    ("gpumem-fraction", pod(ctr(limits={GPU: "1", MEM: "100.5"})), 403, '"100.5" is 100.5; did you mean 101?'),
    ("gpumem-not-a-number", pod(ctr(limits={GPU: "1", MEM: "20GB"})), 403, '"20GB" is not a number; did you mean'),
    ("gpu-negative", pod(ctr(limits={GPU: "-1"})), 403, 'nvidia.com/gpu cannot be negative: got "-1"'),
    ("gpu-fraction", pod(ctr(limits={GPU: "500m"})), 403, "nvidia.com/gpu counts whole GPUs"),
    ("gpu-unit", pod(ctr(limits={GPU: "2Ki"})), 403, "did you mean 2?"),
    ("gpu-huge", pod(ctr(limits={GPU: "3000000000"})), 403, "is too large (at most 2147483647)"),
    ("gpucores-negative", pod(ctr(limits={GPU: "1", CORES: "-5"})), 403, "gpucores cannot be negative"),
    ("priority-negative", pod(ctr(limits={GPU: "1", PRIO: "-1"})), 403, "nvidia.com/priority cannot be negative"),
    ("priority-fraction", pod(ctr(limits={GPU: "1", PRIO: "500m"})), 403, "nvidia.com/priority must be a whole number"),
    ("memory-on-zero-gpus", pod(ctr(limits={GPU: "0", MEM: "1000"})), 403, "nvidia.com/gpu is 0 but"),
    (
        "every-container-at-once",
        pod(ctr("a", limits={GPU: "-1"}), ctr("b", limits={GPU: "1", MEM: "1Gi"})),
        403,
        'container "a": nvidia.com/gpu cannot be negative: got "-1"; write a whole number of GPUs, e.g. '
        'nvidia.com/gpu: 1; container "b": nvidia.com/gpumem is in MiB',
    ),
    (
        "privileged-and-bad-value",
        pod(ctr(limits={GPU: "1", MEM: "-1"}, securityContext={"privileged": True})),
        403,
        "gpumem cannot be negative",
    ),
    ("spec-not-object", {"spec": "x"}, 400, "spec must be an object, got string"),
    ("containers-not-array", {"spec": {"containers": {}}}, 400, "spec.containers must be an array"),
    ("container-not-object", {"spec": {"containers": ["c"]}}, 400, "spec.containers[0] must be an object"),
    (
        "limits-not-object",
        pod({"name": "c", "resources": {"limits": ["x"]}}),
        400,
        "spec.containers[0].resources.limits",
    ),
    ("bad-quantity", pod(ctr(limits={GPU: "1", PCT: "lots"})), 403, '"lots" is not a number; write a whole number'),
    ("env-not-array", pod(ctr(limits={GPU: "1", PRIO: "1"}, env={})), 400, "spec.containers[0].env must be an array"),
    (
        "scheduler-not-string",
        pod(ctr(limits={GPU: "1"}), scheduler=5),  # type: ignore[arg-type]
        400,
        "spec.schedulerName must be a string",
    ),
]


@pytest.mark.parametrize(("p", "code", "message"), [d[1:] for d in DENIALS], ids=[d[0] for d in DENIALS])
def test_denials(p: dict[str, Any], code: int, message: str) -> None:
    outcome, _ = run(p)
    assert not outcome.allowed
    assert outcome.code == code
    assert message in outcome.message
    assert not outcome.patch_ops


def test_privileged_without_hami_resource_is_allowed() -> None:
    outcome, _ = run(pod(ctr(securityContext={"privileged": True})))
    assert outcome.allowed


def test_node_assigned_is_allowed_without_configured_scheduler_name() -> None:
    outcome, mutated = run(pod(ctr(limits={GPU: "1"}), nodeName="n1"), scheduler_name="")
    assert outcome.allowed
    assert mutated["spec"]["nodeName"] == "n1"


def test_node_assigned_non_gpu_pod_is_allowed() -> None:
    outcome, _ = run(pod(ctr(), nodeName="n1"))
    assert outcome.allowed


# --------------------------------------------------------------------------------------------
# Quota pre-check
# --------------------------------------------------------------------------------------------


def quota(mem: int | None = None, cores: int | None = None, used_mem: int = 0, used_cores: int = 0) -> QuotaState:
    return QuotaState(QuotaLimits(mem_mib=mem, cores_pct=cores), used_mem_mib=used_mem, used_cores_pct=used_cores)


def init_and_two_apps(init_mem: int, app_mem: int) -> dict[str, Any]:
    """One init container and two app containers, each asking one GPU with this much memory."""
    return pod(
        ctr("a", limits={GPU: "1", MEM: str(app_mem)}),
        ctr("b", limits={GPU: "1", MEM: str(app_mem)}),
        init=(ctr("i", limits={GPU: "1", MEM: str(init_mem)}),),
    )


QUOTA_CASES: list[tuple[str, dict[str, Any], NvidiaConfig, QuotaState | None, bool]] = [
    ("no-quota-state", pod(ctr(limits={GPU: "1", MEM: "3k"})), CFG, None, True),
    ("no-limits", pod(ctr(limits={GPU: "1", MEM: "3k"})), CFG, quota(used_mem=10**9), True),
    ("under", pod(ctr(limits={GPU: "1", MEM: "3k"})), CFG, quota(mem=4000, used_mem=1000), True),
    ("over", pod(ctr(limits={GPU: "1", MEM: "3k"})), CFG, quota(mem=4000, used_mem=1001), False),
    ("nums-multiply", pod(ctr(limits={GPU: "2", MEM: "1000"})), CFG, quota(mem=1999), False),
    ("explicit-zero-blocks", pod(ctr(limits={GPU: "1", MEM: "1"})), CFG, quota(mem=0), False),
    (
        "percentage-only-counts-zero",
        pod(ctr(limits={GPU: "1", PCT: "50", CORES: "10"})),
        CFG,
        quota(mem=0),
        True,
    ),
    ("bare-gpu-counts-100-cores", pod(ctr(limits={GPU: "1"})), CFG, quota(cores=99), False),
    ("bare-gpu-cores-fit", pod(ctr(limits={GPU: "1"})), CFG, quota(cores=100), True),
    ("cores-over", pod(ctr(limits={GPU: "2", MEM: "1", CORES: "30"})), CFG, quota(cores=100, used_cores=41), False),
    ("init-peak-wins", init_and_two_apps(init_mem=3000, app_mem=1000), CFG, quota(mem=2999), False),
    ("init-peak-fits", init_and_two_apps(init_mem=3000, app_mem=1000), CFG, quota(mem=3000), True),
    ("app-sum-wins", init_and_two_apps(init_mem=3000, app_mem=2000), CFG, quota(mem=3999), False),
    (
        "memory-factor-scales-limit",
        pod(ctr(limits={GPU: "1", MEM: "1000"})),
        replace(CFG, memory_factor=2),
        quota(mem=1000),
        True,
    ),
    (
        "memory-factor-over",
        pod(ctr(limits={GPU: "1", MEM: "1000"})),
        replace(CFG, memory_factor=2),
        quota(mem=1000, used_mem=1),
        False,
    ),
    ("non-gpu-pod-over-quota-allowed", pod(ctr()), CFG, quota(mem=0, cores=0, used_mem=5, used_cores=5), True),
]


@pytest.mark.parametrize(
    ("p", "cfg", "state", "allowed"), [q[1:] for q in QUOTA_CASES], ids=[q[0] for q in QUOTA_CASES]
)
def test_quota_precheck(p: dict[str, Any], cfg: NvidiaConfig, state: QuotaState | None, allowed: bool) -> None:
    outcome, _ = run(p, cfg, quota=state)
    assert outcome.allowed is allowed
    if not allowed:
        assert outcome == AdmissionOutcome.deny("exceeding resource quota")


def test_quota_demand_and_fit_directly() -> None:
    p = pod(
        ctr("a", limits={GPU: "2", MEM: "1000", CORES: "20"}),
        ctr("b", limits={GPU: "1", PCT: "50"}),
        init=(ctr("i", limits={GPU: "1", MEM: "1500", CORES: "50"}),),
    )
    assert quota_demand(p, CFG) == QuotaDemand(mem_mib=2000, cores_pct=50)
    assert fits_quota(QuotaDemand(2000, 50), quota(mem=2000, cores=50), CFG)
    assert not fits_quota(QuotaDemand(2001, 0), quota(mem=2000), CFG)
    assert fits_quota(QuotaDemand(0, 0), quota(mem=0, cores=0), CFG)


# --------------------------------------------------------------------------------------------
# The whole admission round trip, and properties of the patch
# --------------------------------------------------------------------------------------------


def test_admission_round_trip() -> None:
    p = pod(ctr(limits={GPU: "1"}, requests={GPU: "1"}))
    body = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1beta1",
            "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "namespace": "ns", "object": p},
        }
    ).encode()
    req = parse_admission_review(body)
    assert req.object is not None
    outcome = mutate_pod(req.object, cfg=CFG, scheduler_name=SCHED, force_overwrite_default_scheduler=True)
    response = json.loads(review_response(req, outcome))["response"]
    assert response["uid"] == "u-1"
    patched = apply_patch(p, decode_patch(response))
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {GPU: "1", CORES: "100"}
    assert patched["spec"]["schedulerName"] == SCHED


ALLOWED_PATHS = re.compile(
    r"/spec/(schedulerName|runtimeClassName"
    r"|(initContainers|containers)/\d+/(env(/\d+)?|resources(/limits(/[^/]+)?)?))"
)

RESOURCE_VALUES = st.sampled_from(["0", "1", "2", "50", "100", "3k", "1Gi", 4])
LIMITS = st.dictionaries(st.sampled_from([GPU, MEM, PCT, CORES, PRIO, "cpu"]), RESOURCE_VALUES, max_size=4)
CONTAINERS = st.builds(
    lambda name, limits, requests, privileged: ctr(
        name,
        limits=limits or None,
        requests=requests or None,
        **({"securityContext": {"privileged": True}} if privileged else {}),
    ),
    st.sampled_from(["a", "b"]),
    LIMITS,
    LIMITS,
    st.booleans(),
)


@given(
    st.lists(CONTAINERS, min_size=1, max_size=3),
    st.lists(CONTAINERS, max_size=2),
    st.sampled_from([None, "default-scheduler", SCHED, "other"]),
    st.builds(
        NvidiaConfig,
        gpu_core_policy=st.sampled_from(["default", "force"]),
        overwrite_env=st.booleans(),
        runtime_class_name=st.sampled_from(["", "nvidia"]),
        default_gpu_num=st.integers(0, 2),
    ),
)
def test_patch_only_touches_what_the_webhook_may_change(
    app: list[dict[str, Any]], init: list[dict[str, Any]], scheduler: str | None, cfg: NvidiaConfig
) -> None:
    p = pod(*app, init=tuple(init), scheduler=scheduler)
    outcome, mutated = run(p, cfg)
    if not outcome.allowed:
        assert outcome.code in (403, 500)
        return
    for op in outcome.patch_ops:
        assert op["op"] in ("add", "replace"), op
        assert ALLOWED_PATHS.fullmatch(op["path"]), op
    # Nothing the user wrote is removed or changed, except schedulerName.
    for key, value in p["spec"].items():
        if key != "schedulerName":
            assert _contained(value, mutated["spec"][key]), key


def _contained(original: Any, mutated: Any) -> bool:
    """Every value of ``original`` is still in ``mutated`` (lists may have grown at the end)."""
    if isinstance(original, dict):
        return isinstance(mutated, dict) and all(
            k in mutated and _contained(v, mutated[k]) for k, v in original.items()
        )
    if isinstance(original, list):
        return (
            isinstance(mutated, list)
            and len(mutated) >= len(original)
            and all(_contained(a, b) for a, b in zip(original, mutated, strict=False))
        )
    return bool(original == mutated)
