"""The webhook's answer on the wire (hami-wire §5.3, §1.3) and what the mutation means downstream: a bare
``nvidia.com/gpu: 2`` becomes two whole exclusive cards in the device list ``/bind`` writes (§1.2, §3.1)."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.compat.conftest import SCHEDULER
from tests.compat.kit import RecordingEmulator, running_extender
from tests.compat.test_bind_wire import NODE, _setup
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.protocol.jsonpatch import apply_patch
from vgpu_scheduler.shared.store import Store

UID = "705ab4f5-6393-11e8-b7cc-42010a800002"


def defaulted_pod() -> dict[str, Any]:
    """A pod as the API server hands it to a mutating webhook: defaults applied (``default-scheduler``)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "infer", "namespace": "team-b"},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "env": [{"name": "A", "value": "1"}],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "2", "nvidia.com/priority": "1"},
                        "requests": {"nvidia.com/gpu": "2", "nvidia.com/priority": "1"},
                    },
                }
            ],
        },
        "status": {},
    }


def review(version: str, pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": version,
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "team-b",
            "operation": "CREATE",
            "object": pod,
        },
    }


async def test_the_mutation_on_the_wire_and_the_exclusive_cards_it_leads_to(
    store: Store, emulator: RecordingEmulator, api: Api
) -> None:
    await _setup(store, emulator)
    pod = defaulted_pod()
    async with running_extender(store, api) as ext:
        answer = await ext.post("webhook", review("admission.k8s.io/v1beta1", pod))
        assert answer["apiVersion"] == "admission.k8s.io/v1beta1" and answer["kind"] == "AdmissionReview"
        response = answer["response"]
        assert set(response) == {"uid", "allowed", "patch", "patchType"}
        assert (response["uid"], response["allowed"], response["patchType"]) == (UID, True, "JSONPatch")
        ops = json.loads(base64.b64decode(response["patch"]))
        assert sorted(ops, key=json.dumps) == sorted(
            [
                {
                    "op": "add",
                    "path": "/spec/containers/0/env/1",
                    "value": {"name": "CUDA_TASK_PRIORITY", "value": "1"},
                },
                {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores", "value": "100"},
                {"op": "replace", "path": "/spec/schedulerName", "value": SCHEDULER},
            ],
            key=json.dumps,
        )

        created = emulator.put(apply_patch(pod, ops))
        filtered = await ext.post("filter", {"Pod": created, "Nodes": None, "NodeNames": [NODE]})
        assert filtered["NodeNames"] == [NODE]
        meta = created["metadata"]
        bind = {"PodName": "infer", "PodNamespace": "team-b", "PodUID": meta["uid"], "Node": NODE}
        assert await ext.post("bind", bind) == {"Error": ""}

    annos = emulator.pod("team-b", "infer")["metadata"]["annotations"]
    # gpumem-percentage 100 resolved on the 16384 MiB cards, gpucores 100: two distinct whole cards, the last two
    # (equal cards are walked from the last, as HAMi's Fit does)
    assert annos["hami.io/vgpu-devices-allocated"] == f"GPU-{NODE}-3,NVIDIA,16384,100:GPU-{NODE}-2,NVIDIA,16384,100:;"
