"""Random pod lifecycles (seeded): whatever the order of creations, binds, phase changes and deletions, Redis ends
equal to the usage recomputed from the API's pods, and a reconcile pass then finds no drift to repair."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.integration.informer.conftest import Harness
from tests.unit.informer.builders import Dev, devices, pod
from vgpu_scheduler.shared.codec.podannotations import allocation_labels
from vgpu_scheduler.shared.vendors.pods import allocation_annotations

NODES = ("n1", "n2", "n3")


def random_containers(rng: random.Random, node: str, n: int) -> list[list[Dev]]:
    out: list[list[Dev]] = []
    for _ in range(n):
        k = rng.choice((0, 1, 1, 2))
        gpus = rng.sample(range(4), k)
        out.append([(f"GPU-{node}-{g}", rng.randrange(100, 4000, 100), rng.choice((0, 10, 25, 100))) for g in gpus])
    return out


def bind_patch(rng: random.Random, obj: dict[str, Any]) -> dict[str, Any]:
    node = rng.choice(NODES)
    n_init = len(obj["spec"].get("initContainers", []))
    n_app = len(obj["spec"]["containers"])
    ctrs = random_containers(rng, node, n_init + n_app)
    return {
        "metadata": {
            "annotations": allocation_annotations(node, devices(*ctrs), (), 1_700_000_000),
            "labels": allocation_labels(node),
        },
        "spec": {"nodeName": node},
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_lifecycles_keep_redis_equal_to_the_api(harness: Harness, seed: int) -> None:
    rng = random.Random(seed)
    em = harness.emulator
    names = [f"p{i}" for i in range(12)]
    async with harness.run() as svc:
        for _ in range(80):
            name = rng.choice(names)
            ns = "ns" + name[-1]
            current = em.get("Pod", ns, name)
            op = rng.random()
            if current is None:
                if op < 0.5:
                    node = rng.choice(NODES)
                    init = random_containers(rng, node, rng.choice((0, 0, 1, 2)))
                    app = random_containers(rng, node, rng.choice((1, 2)))
                    em.put(pod(name, ns, node=node, init=init, app=app, phase=rng.choice(("Pending", "Running"))))
                else:
                    em.put(pod(name, ns, app_count=rng.choice((1, 2))))
            elif op < 0.25 and "hami.io/vgpu-node" not in current["metadata"]["annotations"]:
                em.patch("pods", ns, name, bind_patch(rng, current))
            elif op < 0.55:
                em.patch("pods", ns, name, {"status": {"phase": rng.choice(("Running", "Succeeded", "Failed"))}})
            elif op < 0.65:
                em.patch("pods", ns, name, {"metadata": {"deletionTimestamp": "2030-01-01T00:00:00Z"}})
            else:
                em.delete("pods", ns, name)
        await harness.assert_audit()
        report = await svc.term.reconcile()
        assert report.repairs == {}, report.repairs
