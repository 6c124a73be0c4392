"""The informer adds the ``hami.io/vgpu-node`` label to a bound pod that arrived without it (an API server that
does not copy a Binding's labels), and patches nothing when the label is there."""

from __future__ import annotations

from tests.integration.informer.conftest import Harness, metric
from tests.unit.informer.builders import pod
from tests.waiting import eventually
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.emulator import WriteVerb


async def test_a_bound_pod_without_its_label_gets_it_once(harness: Harness) -> None:
    em = harness.emulator
    await harness.put_inventory("n1")
    writes: list[tuple[WriteVerb, str]] = []
    em.hooks.append(lambda rec: writes.append((rec.verb, rec.resource)))
    async with harness.run() as svc:
        labelled = pod("with", node="n1", app=[[("GPU-n1-0", 1000, 10)]])
        bare = pod("without", node="n1", app=[[("GPU-n1-1", 1000, 10)]])
        bare["metadata"]["labels"].pop(keys.VGPU_NODE_LABEL)
        em.put(labelled)
        em.put(bare)

        def label_of(name: str) -> str | None:
            stored = em.get("Pod", "default", name)
            assert stored is not None
            return (stored["metadata"].get("labels") or {}).get(keys.VGPU_NODE_LABEL)

        await eventually(lambda: label_of("without") == "n1", what="the label added")
        await eventually(lambda: metric(svc, "vgpu_informer_pod_labels_added_total") == 1)
        em.patch("pods", "default", "without", {"status": {"phase": "Running"}})  # a later update: nothing to do
        await harness.assert_audit()
    assert label_of("with") == "n1"
    assert writes == [(WriteVerb.PATCH, "pods")]  # the one label: none for the labelled pod, none for the update
