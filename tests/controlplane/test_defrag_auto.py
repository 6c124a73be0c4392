"""``--auto-defrag`` on the real control plane: kube-apiserver, kube-scheduler and kube-controller-manager v1.37, our
services as processes (the extender with the flag), the device-plugin emulator and the kubelet stand-in.

The cluster of ``test_defrag.py``: a Deployment of four shared pods (4,000 MiB each), one per card on two nodes of
two 16 GiB cards. A pod asking for a whole card is created, and nothing else is done: kube-scheduler's ``/filter``
finds no node for it, the extender plans by itself, holds a card for it and evicts the pod on that card through the
Eviction API; the ReplicaSet's replacement binds elsewhere, and the whole-card pod binds on the freed card. The
audit finds nothing over capacity and no reservation left unconfirmed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.controllers import has_controller_manager
from tests.controlplane.harness import gpu_pod
from tests.controlplane.test_defrag import MEM, REPLICAS, _audit, allocated, card_of, fragmented
from tests.waiting import eventually

pytestmark = [
    pytest.mark.timeout(400),
    pytest.mark.skipif(
        not has_controller_manager(),
        reason="needs kube-controller-manager in $KUBEBUILDER_ASSETS (scripts/install-control-plane.sh builds it)",
    ),
]


async def test_the_extender_moves_a_pod_by_itself_and_the_waiting_pod_binds_on_the_freed_card(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    async with fragmented(
        kube_apiserver, kube_cleanup, redis_url, tmp_path, budget=False, extra=("--auto-defrag",)
    ) as f:
        before = {name: card_of(p) for name, p in f.pods.items()}
        created = time.monotonic()
        await f.kube.create(f"/api/v1/namespaces/{f.ns}/pods", gpu_pod("big", mem=MEM, cores=None))
        await eventually(lambda: allocated(f.finisher.last.get("big", {"metadata": {}})), 180, "big allocated")
        print(f"\nbig allocated {time.monotonic() - created:.1f} s after its creation (a move made by the extender)")
        card = card_of(f.finisher.last["big"])
        [moved] = [name for name, c in before.items() if c == card]  # the pod that held the card big got
        events = await f.kube.items(f"/api/v1/namespaces/{f.ns}/events")
        reasons = {(e["reason"], e["involvedObject"]["name"]) for e in events}
        assert ("DefragMoved", moved) in reasons and ("DefragMakingRoom", "big") in reasons
        assert not any(e["reason"] == "Preempted" for e in events)

        def replaced() -> bool:
            web = {n: p for n, p in f.finisher.last.items() if n.startswith("web-")}
            live = {n: p for n, p in web.items() if not p["metadata"].get("deletionTimestamp")}
            return moved not in live and len(live) == REPLICAS and all(map(allocated, live.values()))

        await eventually(replaced, 120, "the moved pod's replacement allocated")
        web = [p for n, p in f.finisher.last.items() if n.startswith("web-") and n != moved]
        assert all(card_of(p) != card for p in web if not p["metadata"].get("deletionTimestamp"))
        await _audit(f)
