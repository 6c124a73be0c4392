"""The search for another card assignment when the greedy walk refuses a pod of several containers.

The pod fits a node exactly when some assignment of all its containers does (checked against trying every
assignment on small nodes); the greedy's placement is kept when it succeeds, its refusal when nothing fits.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import gpu, pod, req, snap, use
from vgpu_scheduler.shared.domain import assignment, fit
from vgpu_scheduler.shared.domain.context import PodContext, pod_context
from vgpu_scheduler.shared.domain.model import (
    DEFAULT_NVIDIA_CONFIG,
    MEM_PCT_UNSET,
    NO_CONSTRAINTS,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    GpuPolicy,
    GpuPolicyToken,
    PodRequest,
    Reason,
)
from vgpu_scheduler.shared.domain.plan import Failure, plan
from vgpu_scheduler.shared.domain.reasons import NodeRejection
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

SPREAD = Policies(gpu=GpuPolicy((GpuPolicyToken.SPREAD,)))
BINPACK = Policies(gpu=GpuPolicy((GpuPolicyToken.BINPACK,)))
T4 = "NVIDIA-Tesla T4"
V100 = "NVIDIA-Tesla V100-SXM2-32GB"


def context(p: PodRequest, policies: Policies = SPREAD) -> PodContext:
    return pod_context(p, NO_CONSTRAINTS, policies, None, DEFAULT_NVIDIA_CONFIG)


def greedy(ctx: PodContext, node: NodeSnapshot) -> fit.NodeFit | NodeRejection:
    """The greedy walk alone, without the search."""
    return fit._NodeEval(ctx, node).run()


def t4_and_v100s() -> NodeSnapshot:
    devices = [
        gpu("GPU-t4", index=0, mem=15360, type=T4),
        *(gpu(f"GPU-v{i}", index=i, mem=32768, type=V100) for i in range(1, 4)),
    ]
    return snap(devices=devices, usage={"GPU-v3": use(1, mem=4096, cores=20)})


def test_the_first_container_leaves_the_cards_the_second_needs() -> None:
    """Issue 34's example: A on an idle V100 leaves B one whole V100; A on the T4 fits the pod."""
    p = pod(req(1, mem=1024), req(2, mem=32768, cores=50))
    ctx, node = context(p), t4_and_v100s()
    assert isinstance(greedy(ctx, node), NodeRejection)  # the greedy gives A a V100

    got = fit.evaluate_node(ctx, node)
    assert isinstance(got, fit.NodeFit)
    assert [d.uuid for d in got.devices[0]] == ["GPU-t4"]
    assert sorted(d.uuid for d in got.devices[1]) == ["GPU-v1", "GPU-v2"]


def test_init_containers_are_searched_too() -> None:
    """Init containers each see the node before the pod; only the pod-wide state links them: unchanged semantics."""
    p = pod(req(1, mem=1024), req(2, mem=32768, cores=50), init=[req(2, mem=32768)])
    got = fit.evaluate_node(context(p), t4_and_v100s())
    assert isinstance(got, fit.NodeFit)
    assert sorted(d.uuid for d in got.devices[0]) == ["GPU-v1", "GPU-v2"]  # released before the app containers
    assert [d.uuid for d in got.devices[1]] == ["GPU-t4"]


def test_no_assignment_keeps_the_greedy_refusal() -> None:
    p = pod(req(1, mem=1024), req(3, mem=32768, cores=50))
    ctx, node = context(p), t4_and_v100s()
    assert fit.evaluate_node(ctx, node) == greedy(ctx, node)


def test_equal_cards_are_tried_once() -> None:
    """Eight equal cards, two containers of four that cannot both fit: a proof within the bound, not a give-up."""
    node = snap(n=8, mem=32768, usage={0: use(1, mem=20000)})
    p = pod(req(4, mem=16384), req(4, mem=20000))
    ctx = context(p)
    got = fit.evaluate_node(ctx, node)
    assert isinstance(got, NodeRejection)
    assert not got.search_capped
    assert got == greedy(ctx, node)


def test_a_pod_needing_more_than_the_node_has_free_is_refused_without_a_walk() -> None:
    node = snap(n=8, mem=32768)
    p = pod(req(4, mem=32768, cores=100), req(5, mem=32768))
    ctx = context(p)
    assert assignment.over_capacity(ctx, node)
    assert not assignment.over_capacity(context(pod(req(4, mem=32768), req(4, mem=32768))), node)
    assert fit.evaluate_node(ctx, node) == greedy(ctx, node)


def test_past_the_bound_the_greedy_refusal_stands_marked() -> None:
    """Eight different cards, two containers of four that cannot both fit: more walks than the bound allows."""
    node = snap(devices=[gpu(f"GPU-{i}", index=i, mem=32768 + i) for i in range(8)], usage={0: use(1, mem=20000)})
    p = pod(req(4, mem=16384), req(4, mem=20000))
    ctx = context(p)
    before = greedy(ctx, node)
    got = fit.evaluate_node(ctx, node)
    assert isinstance(before, NodeRejection)
    assert isinstance(got, NodeRejection)
    assert got.search_capped
    assert replace(got, search_capped=False) == before


def test_plan_keeps_the_mark_for_every_node_of_one_shape() -> None:
    devices = [gpu(f"GPU-{i}", index=i, mem=32768 + i) for i in range(8)]
    nodes = [snap(name, devices=devices, usage={0: use(1, mem=20000)}) for name in ("a", "b")]
    got = plan(pod(req(4, mem=16384), req(4, mem=20000)), NO_CONSTRAINTS, nodes, policies=SPREAD)
    assert isinstance(got, Failure)
    assert got.rejections["a"].search_capped and got.rejections["b"].search_capped


def test_a_search_with_no_budget_gives_up_at_once() -> None:
    refusal = NodeRejection("n", plain=Reason.NODE_INSUFFICIENT_DEVICE)
    walks: list[assignment.Bans] = []

    def walk(bans: assignment.Bans) -> assignment.Stuck:
        walks.append(bans)
        return assignment.Stuck(failed=1, picked=((0, (0,)),))

    got = assignment.search(refusal, assignment.Stuck(failed=1, picked=((0, (0,)),)), walk, limit=0)
    assert got == replace(refusal, search_capped=True)
    assert walks == []


# ---- against every assignment, on small nodes --------------------------------------------------------------

_Usage = list[list[int]]  # per card: used, mem, cores


def _mem_of(r: ContainerRequest, dev: DeviceInfo) -> int:
    return r.mem_mib if r.mem_mib > 0 else dev.devmem_mib * r.mem_pct // 100


def _card_ok(r: ContainerRequest, dev: DeviceInfo, u: Sequence[int]) -> bool:
    """HAMi's per-card checks for a plain NVIDIA request, written out independently of ``fit``."""
    used, mem, cores = u
    if dev.count <= used or dev.devmem_mib - mem < _mem_of(r, dev) or dev.devcore - cores < r.cores_pct:
        return False
    if dev.devcore == 100 and r.cores_pct == 100 and used > 0:
        return False
    return not (dev.devcore != 0 and cores == dev.devcore and r.cores_pct == 0)


def _valid(p: PodRequest, devices: Sequence[DeviceInfo], base: _Usage, choice: Sequence[Sequence[int]]) -> bool:
    """Whether ``choice`` (per container, card positions) is an assignment every card check accepts."""
    app = [u.copy() for u in base]
    for ci, (r, cards) in enumerate(zip(p.containers, choice, strict=True)):
        if len(set(cards)) != len(cards) or len(cards) != (0 if r.empty else r.nums):
            return False
        work = base if p.is_init(ci) else app
        for pos in cards:
            if not _card_ok(r, devices[pos], work[pos]):
                return False
        if not p.is_init(ci):
            for pos in cards:
                app[pos] = [app[pos][0] + 1, app[pos][1] + _mem_of(r, devices[pos]), app[pos][2] + r.cores_pct]
    return True


def _exists(p: PodRequest, devices: Sequence[DeviceInfo], base: _Usage) -> bool:
    per = [() if r.empty else tuple(itertools.combinations(range(len(devices)), r.nums)) for r in p.containers]
    options = [o if o else ((),) for o in per]
    return any(_valid(p, devices, base, c) for c in itertools.product(*options))


_card = st.builds(
    lambda i, mem, kind, count, u_used, u_mem, u_cores: (
        gpu(f"GPU-{i}", index=i, mem=mem, type=kind, count=count),
        use(u_used, mem=min(u_mem, mem), cores=u_cores) if u_used else None,
    ),
    st.just(0),
    st.sampled_from([4096, 8192, 16384]),
    st.sampled_from([T4, V100]),
    st.sampled_from([1, 2, 4]),
    st.integers(0, 2),
    st.sampled_from([0, 1024, 4096, 8192]),
    st.sampled_from([0, 30, 50, 100]),
)
_request = st.builds(
    lambda nums, mem, pct, cores: ContainerRequest(
        nums=nums, mem_mib=mem if pct is None else 0, mem_pct=MEM_PCT_UNSET if pct is None else pct, cores_pct=cores
    ),
    st.integers(0, 3),
    st.sampled_from([1024, 4096, 8192]),
    st.sampled_from([None, 25, 50, 100]),
    st.sampled_from([0, 25, 50, 100]),
)


@st.composite
def _cases(draw: Callable[..., object]) -> tuple[PodRequest, NodeSnapshot, Policies]:
    cards = draw(st.lists(_card, min_size=1, max_size=4))
    assert isinstance(cards, list)
    devices = [replace(d, id=f"GPU-{i}", index=i) for i, (d, _) in enumerate(cards)]
    usage: dict[int | str, DeviceUsage] = {i: u for i, (_, u) in enumerate(cards) if u is not None}
    apps = draw(st.lists(_request, min_size=1, max_size=3))
    inits = draw(st.lists(_request, max_size=1))
    policies = draw(st.sampled_from([SPREAD, BINPACK]))
    assert isinstance(apps, list) and isinstance(inits, list) and isinstance(policies, Policies)
    return pod(*apps, init=inits), snap(devices=devices, usage=usage), policies


def _positions(node: NodeSnapshot, got: fit.NodeFit) -> list[list[int]]:
    where = {d.id: i for i, d in enumerate(node.inventory.devices)}
    return [[where[d.uuid] for d in ctr] for ctr in got.devices]


@settings(max_examples=400, deadline=None)
@given(_cases())
def test_fits_exactly_when_some_assignment_does(case: tuple[PodRequest, NodeSnapshot, Policies]) -> None:
    p, node, policies = case
    ctx = context(p, policies)
    devices = node.inventory.devices
    base = [[u.used, u.used_mem_mib, u.used_cores] for u in node.usages]
    with mock.patch.object(assignment, "WALK_LIMIT", 100_000):  # exhaustive: the bound out of the way
        got = fit.evaluate_node(ctx, node)
    if isinstance(got, fit.NodeFit):
        assert _valid(p, devices, base, _positions(node, got))
    else:
        assert not got.search_capped
        assert not _exists(p, devices, base)


@settings(max_examples=200, deadline=None)
@given(_cases())
def test_the_greedy_answer_is_kept_when_it_fits_and_its_reasons_when_nothing_does(
    case: tuple[PodRequest, NodeSnapshot, Policies],
) -> None:
    p, node, policies = case
    ctx = context(p, policies)
    before, got = greedy(ctx, node), fit.evaluate_node(ctx, node)
    if isinstance(before, fit.NodeFit):
        assert got == before
    elif isinstance(got, NodeRejection):
        assert replace(got, search_capped=False) == before
