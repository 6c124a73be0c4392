"""``defrag plan --cluster FILE [--workload FILE]``: plan on the state a ``simulate`` run reaches, without a live
cluster.

The files are simulate's (docs/simulate.md). The cluster is started in process as ``simulate`` starts it (the API
emulator, the embedded store, the real registrar, informer and extender, on the simulated clock), the workload is
scheduled through it to its end, and then the plan is made exactly as on a live cluster, through the emulator's API
and the run's store (:func:`.planning.make_plan`). A pod the workload left pending can be named with ``--for``;
pods move only if the files give them a controller (``metadata.ownerReferences``), as on a real cluster.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from vgpu_scheduler.services.simulate.driver import schedule_all
from vgpu_scheduler.services.simulate.harness import EmbeddedCluster, HarnessTiming
from vgpu_scheduler.services.simulate.manifests import Workload, load_cluster, load_workload
from vgpu_scheduler.shared.config import SimulateSettings
from vgpu_scheduler.shared.k8s import Api, KubeSettings, open_client
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

T = TypeVar("T")


async def on_simulated(
    settings: SimulateSettings,
    cluster_file: Path,
    workload_file: Path | None,
    then: Callable[[Store, Api], Awaitable[T]],
    *,
    warn: Callable[[str], None] = lambda _: None,
) -> T:
    """Run the workload on the cluster (module docstring), then ``then(store, api)`` on the state reached."""
    common = settings.common
    cluster = load_cluster(
        cluster_file,
        count_resource=common.nvidia.resource_count_name,
        vendors=enabled_vendors(common.nvidia, common.device_sections, common.enable_flags),
    )
    for line in cluster.warnings:
        warn(line)
    workload = load_workload(workload_file) if workload_file is not None else Workload(())
    async with EmbeddedCluster(settings, cluster, timing=HarnessTiming()) as ec:
        await schedule_all(ec.driver(workload), list(workload.pods))
        assert ec.store is not None
        kube = KubeSettings(server=ec.emulator.url, qps=0, burst=1, timeout_s=10.0, user_agent="vgpu-scheduler-defrag")
        async with open_client(kube) as client:
            return await then(ec.store, Api(client, component="vgpu-scheduler-defrag"))
