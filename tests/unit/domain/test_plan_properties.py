"""Invariants of plan() over random clusters and pods (hypothesis).

* the fast path returns exactly what the exhaustive evaluation returns, and a node its summary calls hopeless
  never fits;
* the answer is deterministic and does not depend on the order the nodes are given in;
* nodes with a bind in flight (``busy``) are chosen only when no other node fits; reasons do not depend on them;
* binpack chooses a feasible node of maximal score, spread one of minimal score;
* no device ever exceeds its slots, memory or cores (MIG GPUs: slots, memory, non-overlapping placements),
  however many decisions are applied in a row;
* walking the nodes in ``rank_key`` order (``plan_ranked``) finds the decision ``plan`` takes, or none when it fails;
* nodes of one shape (clones but for names and UUIDs), which a failure evaluates once, get the reasons each
  would get alone.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_scheduler.shared.domain.context import PodContext, normalize_request
from vgpu_scheduler.shared.domain.model import (
    DEFAULT_NVIDIA_CONFIG,
    MEM_PCT_UNSET,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    GpuPolicy,
    GpuPolicyToken,
    MigPlacement,
    MigProfile,
    NodeInventory,
    NodePolicy,
    PodConstraints,
    PodRequest,
    ScoringWeights,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, apply_decision, plan, plan_ranked, rank_key
from vgpu_scheduler.shared.domain.prefilter import PodNeeds, may_fit
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState
from vgpu_scheduler.shared.domain.scoring import Policies, device_sort_key, effective_policy
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

PROFILES = (
    MigProfile("1g.5gb", 4864, 15, 1, tuple(MigPlacement(s, 1) for s in range(7))),
    MigProfile("2g.10gb", 9984, 29, 2, tuple(MigPlacement(s, 2) for s in (0, 2, 4))),
    MigProfile("3g.20gb", 19968, 43, 3, (MigPlacement(0, 4), MigPlacement(4, 4))),
)

T = GpuPolicyToken
GPU_POLICIES = [
    GpuPolicy((T.SPREAD,)),
    GpuPolicy((T.BINPACK,)),
    GpuPolicy((T.MUTEX,)),
    GpuPolicy((T.NUMA,)),
    GpuPolicy((T.TOPOLOGY_AWARE,)),
    GpuPolicy((T.BINPACK, T.NUMA)),
    GpuPolicy((T.NUMA, T.SPREAD)),
    GpuPolicy((T.MUTEX, T.BINPACK)),
]


@st.composite
def device_and_usage(draw: st.DrawFn, node: str, index: int, mig_ok: bool) -> tuple[DeviceInfo, DeviceUsage]:
    uuid = f"GPU-{node}-{index}"
    if mig_ok and draw(st.integers(0, 5)) == 0:
        dev = DeviceInfo(
            uuid, index, 7, 40960, 100, "NVIDIA A100-PCIE-40GB", draw(st.integers(0, 1)), "mig", True, PROFILES
        )
        return dev, DeviceUsage()
    count = draw(st.integers(1, 4))
    mem = draw(st.sampled_from([1000, 4000, 8000, 16000]))
    core = draw(st.sampled_from([100, 100, 100, 200]))
    dev = DeviceInfo(
        id=uuid,
        index=index,
        count=count,
        devmem_mib=mem,
        devcore=core,
        type=draw(st.sampled_from(["NVIDIA-Tesla V100", "NVIDIA A100-SXM4-80GB"])),
        numa=draw(st.integers(0, 1)),
        mode="hami-core",
        health=draw(st.integers(0, 9)) > 0,
    )
    used = draw(st.integers(0, count))
    if used == 0:
        return dev, DeviceUsage()
    usage = DeviceUsage(
        used=used, used_mem_mib=draw(st.integers(0, mem)), used_cores=draw(st.sampled_from([0, 10, 50, core]))
    )
    return dev, usage


@st.composite
def node_snapshot(draw: st.DrawFn, name: str, mig_ok: bool) -> NodeSnapshot:
    n = draw(st.integers(1, 4))
    pairs = [draw(device_and_usage(name, i, mig_ok)) for i in range(n)]
    devices = tuple(d for d, _ in pairs)
    scores: dict[str, dict[str, int]] = {d.id: {} for d in devices}
    for i in range(n):
        for j in range(i + 1, n):
            s = draw(st.sampled_from([0, 20, 100, 600]))
            scores[devices[i].id][devices[j].id] = s
            scores[devices[j].id][devices[i].id] = s
    cordoned = frozenset(d.id for d in devices if draw(st.integers(0, 11)) == 0)
    inv = NodeInventory(node=name, vendor="NVIDIA", devices=devices, pair_scores=scores, cordoned=cordoned)
    return NodeSnapshot(inv, {d.id: u for d, u in pairs})


@st.composite
def cluster(draw: st.DrawFn, mig_ok: bool = True) -> list[NodeSnapshot]:
    names = draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True))
    return [draw(node_snapshot(f"node-{x}", mig_ok)) for x in names]


def _clone(snap: NodeSnapshot, name: str, cordon: int | None, first_mem: int | None) -> NodeSnapshot:
    """``snap`` renamed, with new device UUIDs (pair scores follow them); ``cordon``: the inventory position of
    the only cordoned device instead of the template's cordons (when within range); ``first_mem``: the first
    device's used memory instead of the template's (one task, when it is not a MIG device)."""
    inv = snap.inventory
    ids = {d.id: f"GPU-{name}-{d.index}" for d in inv.devices}
    devices = tuple(replace(d, id=ids[d.id]) for d in inv.devices)
    scores = {ids[a]: {ids[b]: s for b, s in row.items()} for a, row in inv.pair_scores.items()}
    cordoned = frozenset(ids[u] for u in inv.cordoned)
    if cordon is not None:
        cordoned = frozenset(d.id for i, d in enumerate(devices) if i == cordon)
    clone = NodeInventory(node=name, vendor=inv.vendor, devices=devices, pair_scores=scores, cordoned=cordoned)
    usage = {ids[u]: used for u, used in snap.usage.items()}
    if first_mem is not None and devices[0].mode != "mig":
        usage[devices[0].id] = DeviceUsage(used=1, used_mem_mib=min(first_mem, devices[0].devmem_mib))
    return NodeSnapshot(clone, usage)


@st.composite
def cloned_cluster(draw: st.DrawFn) -> list[NodeSnapshot]:
    """A few node templates, each cloned under several names: many nodes share a shape."""
    templates = draw(st.lists(node_snapshot("template", mig_ok=True), min_size=1, max_size=3))
    picks = draw(st.lists(st.integers(0, len(templates) - 1), min_size=1, max_size=8))
    cordons = st.one_of(st.none(), st.integers(0, 3))
    mems = st.one_of(st.none(), st.sampled_from([0, 2000, 8000]))
    return [_clone(templates[t], f"node-{i}", draw(cordons), draw(mems)) for i, t in enumerate(picks)]


@st.composite
def container(draw: st.DrawFn) -> ContainerRequest:
    nums = draw(st.integers(0, 3))
    kind = draw(st.sampled_from(["mib", "pct", "bare"]))
    mem = draw(st.integers(1, 16000)) if kind == "mib" else 0
    pct = draw(st.integers(1, 100)) if kind == "pct" else MEM_PCT_UNSET
    cores = draw(st.sampled_from([0, 0, 10, 25, 50, 100]))
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=pct, cores_pct=cores)


@st.composite
def pod_request(draw: st.DrawFn) -> PodRequest:
    containers = tuple(draw(st.lists(container(), min_size=1, max_size=3)))
    return PodRequest(containers=containers, init_count=draw(st.integers(0, len(containers) - 1)))


@st.composite
def constraints(draw: st.DrawFn) -> PodConstraints:
    weights = draw(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)).filter(any))
    return PodConstraints(
        use_types=draw(st.sampled_from([(), ("A100",), ("V100", "A100")])),
        nouse_uuids=frozenset(draw(st.lists(st.sampled_from(["GPU-node-a-0", "GPU-node-b-1"]), max_size=2))),
        numa_bind=draw(st.integers(0, 3)) == 0,
        node_policy=draw(st.sampled_from([None, NodePolicy.BINPACK, NodePolicy.SPREAD])),
        gpu_policy=draw(st.sampled_from([None, *GPU_POLICIES])),
        weights=ScoringWeights(*weights),
    )


quotas = st.one_of(
    st.none(),
    st.builds(
        QuotaState,
        limits=st.builds(
            QuotaLimits,
            mem_mib=st.one_of(st.none(), st.integers(0, 40000)),
            cores_pct=st.one_of(st.none(), st.integers(0, 400)),
        ),
        used_mem_mib=st.integers(0, 10000),
        used_cores_pct=st.integers(0, 100),
    ),
)
policies = st.builds(Policies, node=st.sampled_from(NodePolicy), gpu=st.sampled_from(GPU_POLICIES))


@settings(max_examples=300, deadline=None)
@given(cluster(), pod_request(), constraints(), policies, quotas)
def test_fast_path_equals_exhaustive(
    nodes: list[NodeSnapshot], p: PodRequest, c: PodConstraints, pol: Policies, quota: QuotaState | None
) -> None:
    fast = plan(p, c, nodes, policies=pol, quota=quota)
    full = plan(p, c, nodes, policies=pol, quota=quota, exhaustive=True)
    assert fast == full
    if isinstance(fast, Failure):
        assert set(fast.reasons) == {n.name for n in nodes}


@settings(max_examples=300, deadline=None)
@given(cluster(), pod_request(), constraints(), policies, quotas)
def test_ranked_walk_finds_the_same_decision(
    nodes: list[NodeSnapshot], p: PodRequest, c: PodConstraints, pol: Policies, quota: QuotaState | None
) -> None:
    ranked = sorted(nodes, key=rank_key(effective_policy(pol, c).node))
    walked = plan_ranked(p, c, iter(ranked), policies=pol, quota=quota)
    full = plan(p, c, nodes, policies=pol, quota=quota)
    if isinstance(full, Decision):
        assert walked == full
    else:
        assert walked is None
        assert plan(p, c, nodes, policies=pol, quota=quota, none_fit=True) == full  # the reasons alone


@settings(max_examples=300, deadline=None)
@given(cloned_cluster(), pod_request(), constraints(), policies, quotas)
def test_nodes_of_one_shape_get_their_own_reasons(
    nodes: list[NodeSnapshot], p: PodRequest, c: PodConstraints, pol: Policies, quota: QuotaState | None
) -> None:
    fast = plan(p, c, nodes, policies=pol, quota=quota)
    assert fast == plan(p, c, nodes, policies=pol, quota=quota, exhaustive=True)
    if isinstance(fast, Failure):
        for node in nodes:
            alone = plan(p, c, [node], policies=pol, quota=quota, exhaustive=True)
            assert isinstance(alone, Failure)
            assert fast.reasons[node.name] == alone.reasons[node.name]
            assert fast.rejections[node.name] == alone.rejections[node.name]


@settings(max_examples=200, deadline=None)
@given(cluster(), pod_request(), constraints(), policies, quotas, st.data())
def test_busy_nodes_are_chosen_only_when_no_other_fits(
    nodes: list[NodeSnapshot],
    p: PodRequest,
    c: PodConstraints,
    pol: Policies,
    quota: QuotaState | None,
    data: st.DataObject,
) -> None:
    names = [n.name for n in nodes]
    busy = frozenset(data.draw(st.lists(st.sampled_from(names), unique=True)) if names else [])
    free = [n for n in nodes if n.name not in busy]
    result = plan(p, c, nodes, policies=pol, quota=quota, busy=busy)
    assert result == plan(p, c, nodes, policies=pol, quota=quota, busy=busy, exhaustive=True)
    alone = plan(p, c, free, policies=pol, quota=quota)
    if isinstance(alone, Decision):
        assert isinstance(result, Decision) and result.node == alone.node and result.devices == alone.devices
    elif isinstance(result, Decision):
        assert result.node in busy
        only_busy = plan(p, c, [n for n in nodes if n.name in busy], policies=pol, quota=quota)
        assert isinstance(only_busy, Decision) and only_busy.node == result.node
    else:
        unaware = plan(p, c, nodes, policies=pol, quota=quota)
        assert isinstance(unaware, Failure) and unaware.reasons == result.reasons


@settings(max_examples=150, deadline=None)
@given(cluster(), pod_request(), constraints(), policies, st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_node_order(
    nodes: list[NodeSnapshot], p: PodRequest, c: PodConstraints, pol: Policies, rnd: random.Random
) -> None:
    first = plan(p, c, nodes, policies=pol)
    assert plan(p, c, nodes, policies=pol) == first
    shuffled = list(nodes)
    rnd.shuffle(shuffled)
    assert plan(p, c, shuffled, policies=pol) == first


@settings(max_examples=150, deadline=None)
@given(cluster(), pod_request(), constraints(), policies)
def test_node_policy_picks_an_extreme_feasible_node(
    nodes: list[NodeSnapshot], p: PodRequest, c: PodConstraints, pol: Policies
) -> None:
    got = plan(p, c, nodes, policies=pol)
    if not isinstance(got, Decision):
        return
    node_policy = c.node_policy or pol.node
    feasible = [n for n in nodes if isinstance(plan(p, c, [n], policies=pol), Decision)]
    chosen = next(n for n in nodes if n.name == got.node)
    assert chosen in feasible
    assert got.score == chosen.summary.score
    for other in feasible:
        if node_policy is NodePolicy.BINPACK:
            assert other.summary.score <= got.score
        else:
            assert other.summary.score >= got.score
        if other.summary.score == got.score:
            assert got.node <= other.name


def _check_capacity(nodes: list[NodeSnapshot]) -> None:
    for n in nodes:
        for dev, u in zip(n.inventory.devices, n.usages, strict=True):
            assert u.used <= dev.count, (n.name, dev.id, u)
            assert u.used_mem_mib <= dev.devmem_mib, (n.name, dev.id, u)
            # MIG profile cores are rounded up (7 × 1g = 105 %): on a MIG GPU the placement grid is the capacity
            if dev.mode != "mig":
                assert u.used_cores <= dev.devcore, (n.name, dev.id, u)
            placements = u.mig_in_use
            for i, a in enumerate(placements):
                assert not any(a.overlaps(b) for b in placements[i + 1 :]), (n.name, dev.id, placements)


@settings(max_examples=100, deadline=None)
@given(cluster(), st.lists(st.tuples(pod_request(), constraints()), min_size=1, max_size=8), policies)
def test_no_device_is_ever_over_committed(
    nodes: list[NodeSnapshot], pods: list[tuple[PodRequest, PodConstraints]], pol: Policies
) -> None:
    _check_capacity(nodes)
    for p, c in pods:
        got = plan(p, c, nodes, policies=pol)
        if isinstance(got, Decision):
            nodes = [apply_decision(n, got) if n.name == got.node else n for n in nodes]
            _check_capacity(nodes)
            # every container got exactly what it asked for, on distinct cards unless the card is MIG
            for req, devs in zip(p.containers, got.devices, strict=True):
                assert len(devs) == max(req.nums, 0)


@settings(max_examples=300, deadline=None)
@given(cluster(), pod_request(), constraints(), policies, quotas)
def test_a_node_skipped_by_summary_or_quick_check_never_fits(
    nodes: list[NodeSnapshot], p: PodRequest, c: PodConstraints, pol: Policies, quota: QuotaState | None
) -> None:
    requests = [normalize_request(r, DEFAULT_NVIDIA_CONFIG) for r in p.containers]
    policy = effective_policy(pol, c)
    needs = PodNeeds.of(requests, policy.mutex)
    ctx = PodContext(p, tuple(requests), c, policy, device_sort_key(policy), DEFAULT_NVIDIA_CONFIG, quota)
    for node in nodes:
        if needs.hopeless(node.summary) or not may_fit(ctx, node):
            assert isinstance(plan(p, c, [node], policies=pol, quota=quota, exhaustive=True), Failure)
