"""``defrag plan``'s read side and flow (``shared/defrag/read.py``, ``services/defrag/planning.py``) in process,
against the API emulator and the real redis-server: which pods may move and why not, the ``--for`` pod as
``/filter`` reads it, and plans made from what the store and the API hold."""

from __future__ import annotations

import pytest

from tests.integration.defrag.planbuild import A, B, fragmented, gpu_nodes, place, pod_obj
from tests.integration.extender.filter_harness import node, seed
from vgpu_scheduler.services.defrag.planning import PlanAsk, make_plan
from vgpu_scheduler.shared.config import CommonSettings, InspectSettings, Service
from vgpu_scheduler.shared.defrag.read import STATIC_POD, read_state
from vgpu_scheduler.shared.domain.defragmodel import OPT_OUT_ANNOTATION, Cannot, DefragPlan
from vgpu_scheduler.shared.domain.defragwork import BARE_POD, DAEMON_SET, NOT_NEEDED, OPTED_OUT
from vgpu_scheduler.shared.domain.model import DEFAULT_NVIDIA_CONFIG
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api, KubeClient
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

SETTINGS = InspectSettings(common=CommonSettings(service=Service.DEFRAG, instance_id="t"))
VENDORS = enabled_vendors(DEFAULT_NVIDIA_CONFIG)


@pytest.fixture
def api(kube: KubeClient) -> Api:
    return Api(kube, component="vgpu-scheduler-defrag")


async def test_who_may_move_is_read_from_owner_and_annotation(store: Store, api: Api, emulator: Emulator) -> None:
    await seed(store, [node(A, 2)])
    await place(store, emulator, "rs", A, 0, 1000)
    await place(store, emulator, "sts", A, 0, 1000, kind="StatefulSet")
    await place(store, emulator, "job", A, 0, 1000, kind="Job")
    await place(store, emulator, "bare", A, 0, 1000, kind=None)
    await place(store, emulator, "ds", A, 1, 1000, kind="DaemonSet")
    await place(store, emulator, "static", A, 1, 1000, kind="Node")
    await place(store, emulator, "wf", A, 1, 1000, kind="Workflow")
    await place(store, emulator, "keep", A, 1, 1000, annotations={OPT_OUT_ANNOTATION: "false"})
    emulator.put(pod_obj("no-record", 1000, node_name=A))  # holds nothing in the store: not a candidate
    state = await read_state(store, api, VENDORS)
    verdicts = {c.resident.name: c.unmovable for c in state.candidates}
    assert verdicts == {
        "rs": None,
        "sts": None,
        "job": None,
        "bare": BARE_POD,
        "ds": DAEMON_SET,
        "static": STATIC_POD,
        "wf": "owned by a Workflow (not known to recreate its pods elsewhere)",
        "keep": OPTED_OUT,
    }
    rs = next(c for c in state.candidates if c.resident.name == "rs")
    assert rs.node == A and rs.devices == (f"GPU-{A}-0",) and rs.memory_mib == 1000
    assert rs.request.containers[0].mem_mib == 1000
    assert [s.name for s in state.snapshots] == [A]


async def test_a_plan_for_a_pending_pod(store: Store, api: Api, emulator: Emulator) -> None:
    await fragmented(store, emulator)
    emulator.put(pod_obj("whole", 0, whole=True))
    out = await make_plan(SETTINGS, store, api, PlanAsk(for_pod=("default", "whole")))
    result = out.result
    assert isinstance(result, DefragPlan), result
    assert [m.name for m in result.moves] == ["a2"]
    assert result.target is not None and result.target.node == A
    assert result.target.devices == ((f"GPU-{A}-1",),)
    assert result.moves[0].dest_devices != (f"GPU-{A}-1",)
    assert {x.name: x.reason for x in result.left} == {"a0": NOT_NEEDED, "a1": NOT_NEEDED}
    assert out.warnings == ()


async def test_bare_pods_and_priorities_leave_no_plan(store: Store, api: Api, emulator: Emulator) -> None:
    await gpu_nodes(store, emulator, A, gpus=1)
    await place(store, emulator, "bare", A, 0, 4000, kind=None)
    emulator.put(pod_obj("whole", 0, whole=True))
    out = await make_plan(SETTINGS, store, api, PlanAsk(for_pod=("default", "whole")))
    assert isinstance(out.result, Cannot)
    assert "may not move" in out.result.reason and [x.name for x in out.result.left] == ["bare"]


async def test_the_for_pod_must_be_pending(store: Store, api: Api, emulator: Emulator) -> None:
    await fragmented(store, emulator)
    for ask, reason in [
        (("default", "a0"), f"pod default/a0 is already placed on node {A}"),
        (("default", "nope"), "pod default/nope not found"),
    ]:
        out = await make_plan(SETTINGS, store, api, PlanAsk(for_pod=ask))
        assert out.result == Cannot(reason)


async def test_free_cards_on_selected_nodes(store: Store, api: Api, emulator: Emulator) -> None:
    await fragmented(store, emulator, labels={A: {"pool": "a"}, B: {"pool": "b"}})
    out = await make_plan(SETTINGS, store, api, PlanAsk(free_cards=1, selector="pool=b"))
    assert isinstance(out.result, DefragPlan), out.result
    # b's first card holds a bare pod: its second card (two pods) is the one freed
    assert out.result.freed == ((B, f"GPU-{B}-1"),) and sorted(m.name for m in out.result.moves) == ["b1", "b2"]
    out = await make_plan(SETTINGS, store, api, PlanAsk(free_nodes=1, nodes=frozenset({B, "gpu-node-x"})))
    assert isinstance(out.result, Cannot)
    assert out.warnings == ("node gpu-node-x is not a registered GPU node",)


async def test_no_destination_on_an_unschedulable_node(store: Store, api: Api, emulator: Emulator) -> None:
    """a1 can only go to b (a's other card is nearly full); once b is cordoned, no plan."""
    await gpu_nodes(store, emulator, A, B)
    await place(store, emulator, "a0", A, 0, 14000)
    await place(store, emulator, "a1", A, 1, 4000)
    await place(store, emulator, "b0", B, 0, 14000, kind=None)
    await place(store, emulator, "b1", B, 1, 4000, kind=None)
    emulator.put(pod_obj("whole", 0, whole=True))
    out = await make_plan(SETTINGS, store, api, PlanAsk(for_pod=("default", "whole")))
    assert isinstance(out.result, DefragPlan) and [(m.name, m.dest) for m in out.result.moves] == [("a1", B)]
    node_b = emulator.get("nodes", None, B)
    assert node_b is not None
    node_b["spec"] = {"unschedulable": True}
    emulator.put(node_b)
    out = await make_plan(SETTINGS, store, api, PlanAsk(for_pod=("default", "whole")))
    assert isinstance(out.result, Cannot) and out.result.reason.startswith("no destination"), out.result


async def test_the_for_pod_goes_where_its_node_selector_says(store: Store, api: Api, emulator: Emulator) -> None:
    await fragmented(store, emulator, labels={A: {"pool": "a"}, B: {"pool": "b"}})
    emulator.put(pod_obj("whole-b", 0, whole=True, node_selector={"pool": "b"}))
    out = await make_plan(SETTINGS, store, api, PlanAsk(for_pod=("default", "whole-b")))
    # a's single-pod card would be cheaper, but the pod may only go to b: b's second card, two moves
    assert isinstance(out.result, DefragPlan) and out.result.target is not None, out.result
    assert out.result.target.node == B and sorted(m.name for m in out.result.moves) == ["b1", "b2"]
