"""Kunlunxin's whole-XPU node score through the bounded walk: on random fleets the plan takes exactly the node an
evaluation of every node ranks first (its usage score plus HAMi's ``ScoreNode`` term for the XPUs it gets there,
binpack the highest, spread the lowest, ties by name), and every node's term stays inside the bound the walk
prunes with."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_scheduler.shared.domain.model import (
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    NodePolicy,
    PodConstraints,
    PodRequest,
    Selectors,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan, plan_ranked, rank_key
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.vendors import kunlun
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

X, V = kunlun.build(None)
VENDORS = Vendors((NvidiaVendor(), X, V))
MAX = kunlun.XPU_MEMORY_MIB


def _node(rnd: random.Random, k: int) -> NodeSnapshot:
    """An XPU board (usually 8, sometimes 4 or 16 XPUs) with random busy, cordoned and unhealthy XPUs; some nodes
    also hold a busy NVIDIA GPU (their usage score differs) or a vXPU (another family: HAMi's term is 0)."""
    name = f"n{rnd.randint(0, 30):02d}-{k}"
    size = rnd.choice((8, 8, 8, 4, 16))
    devices = [
        DeviceInfo(
            f"{name}-kunlun-{i}",
            i,
            100,
            MAX,
            100,
            "kunlun",
            int(i >= size // 2),
            "",
            rnd.random() > 0.05,
            vendor="kunlun",
        )
        for i in range(size)
    ]
    usage = {d.id: DeviceUsage(1, MAX, 100) for d in devices if rnd.random() < 0.4}
    extra = rnd.random()
    if extra < 0.2:
        devices.append(DeviceInfo(f"GPU-{name}", 0, 10, 16384, 100, "NVIDIA-T4", 0, "hami-core", True))
        usage[f"GPU-{name}"] = DeviceUsage(1, rnd.choice((1000, 8000, 16000)), rnd.choice((10, 50, 100)))
    elif extra < 0.3:
        devices.append(DeviceInfo(f"{name}-vxpu", 0, 4, MAX, 100, "XPU", 0, "", True, vendor="XPU"))
    cordoned = frozenset(d.id for d in devices if d.type == "kunlun" and rnd.random() < 0.05)
    vendors = ",".join(sorted({d.vendor for d in devices}))
    return NodeSnapshot(NodeInventory(name, vendors, tuple(devices), cordoned=cordoned), usage)


Ranked = tuple[float, str, Decision, float, float]


def _reference(pod: PodRequest, c: PodConstraints, nodes: list[NodeSnapshot], policy: NodePolicy) -> list[Ranked]:
    """Every node that fits on its own, as (rank key, name, decision, term, total), best first."""
    out: list[Ranked] = []
    for snap in nodes:
        alone = plan(pod, c, [snap], policies=Policies(node=policy), rules=VENDORS.rules)
        if not isinstance(alone, Decision):
            continue
        previous = [(d.type, d.index, u.used) for d, u in zip(snap.inventory.devices, snap.usages, strict=True)]
        index = {d.id: d.index for d in snap.inventory.devices}
        mine = [[(d.type, index[d.uuid]) for d in ctr] for ctr in alone.devices]
        term = kunlun.score_node(previous, mine) if any(mine) else 0.0
        total = snap.summary.score + term
        out.append(((-total if policy is NodePolicy.BINPACK else total), snap.name, alone, term, total))
    return sorted(out, key=lambda r: (r[0], r[1]))


@settings(max_examples=250, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(NodePolicy))
def test_the_bounded_walk_takes_the_node_every_node_evaluated_would(seed: int, policy: NodePolicy) -> None:
    rnd = random.Random(seed)
    nodes = [_node(rnd, k) for k in range(rnd.randint(1, 9))]
    apps = [ContainerRequest(rnd.choice((1, 1, 2, 2, 4, 8, 3)), 0, 100, 0, "kunlun") for _ in range(rnd.randint(1, 2))]
    inits = [ContainerRequest(rnd.choice((1, 2)), 0, 100, 0, "kunlun") for _ in range(int(rnd.random() < 0.3))]
    pod = PodRequest(containers=(*inits, *apps), init_count=len(inits))
    c = PodConstraints()
    if rnd.random() < 0.15:  # a UUID selector leaves only some XPUs free: the bound must hold still
        ids = [d.id for snap in nodes for d in snap.inventory.devices if d.type == "kunlun"]
        c = PodConstraints(
            vendor_selectors={"kunlun": Selectors(nouse_uuids=frozenset(rnd.sample(ids, len(ids) // 3)))}
        )
    policies = Policies(node=policy)
    ref = _reference(pod, c, nodes, policy)
    got = plan(pod, c, nodes, policies=policies, rules=VENDORS.rules)
    shuffled = sorted(nodes, key=rank_key(policy))
    ranked = plan_ranked(pod, c, iter(shuffled), policies=policies, rules=VENDORS.rules)
    # the bound the walk prunes with holds on every node that fits (binpack: term ≤ bound; spread: −term ≤ bound)
    bounds = {s.name: X.rules.pod_score_bound(s, pod.containers, policy, c) for s in nodes}  # type: ignore[attr-defined]
    for _, name, _, term, _ in ref:
        assert (term if policy is NodePolicy.BINPACK else -term) <= bounds[name], (name, term, bounds[name])
    if not ref:
        assert isinstance(got, Failure) and set(got.reasons) == {s.name for s in nodes}
        assert ranked is None
        return
    _, name, alone, _, total = ref[0]
    assert isinstance(got, Decision), got
    assert (got.node, got.devices) == (name, alone.devices), [(r[0], r[1]) for r in ref]
    assert got.score == total
    assert ranked is not None and (ranked.node, ranked.devices, ranked.score) == (got.node, got.devices, got.score)
