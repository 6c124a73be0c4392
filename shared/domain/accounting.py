"""Usage accounting: a pod's device list collapsed into per-device charges (hami-wire §5.4).

The same function serves the core (what a decision will add), the informer (what a running pod holds)
and the audit in tests, so all three agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_scheduler.shared.domain.model import DeviceCharge, MigAllocation, MigPlacement, PodDevices


@dataclass(slots=True)
class _Acc:
    init_mem: int = 0
    init_cores: int = 0
    init_seen: bool = False
    app_mem: int = 0
    app_cores: int = 0
    app_slots: int = 0
    whole_card: bool = False


def collapse(
    devices: PodDevices,
    init_count: int,
    mig: tuple[MigAllocation, ...] = (),
    *,
    device_totals: dict[str, int] | None = None,
) -> tuple[DeviceCharge, ...]:
    """Collapse a pod's per-container device list into one charge per physical device, in first-seen order.

    ``mem``/``cores`` = max(peak over init containers, sum over app containers); ``slots`` =
    max(1 if an init container uses it, count of app-container occurrences). ``device_totals`` maps UUID to
    the device's core total: a charge is ``exclusive`` when some container claimed all of a 100-core card.
    """
    acc: dict[str, _Acc] = {}
    legacy: dict[str, list[tuple[int, int]]] = {}
    for ci, container in enumerate(devices):
        is_init = ci < init_count
        per_ctr: dict[str, tuple[int, int, int]] = {}
        for dev in container:
            a = acc.setdefault(dev.uuid, _Acc())
            mem, cores, n = per_ctr.get(dev.uuid, (0, 0, 0))
            per_ctr[dev.uuid] = (mem + dev.used_mem_mib, cores + dev.used_cores, n + 1)
            if dev.legacy_mig is not None:
                legacy.setdefault(dev.uuid, []).append(dev.legacy_mig)
            total = (device_totals or {}).get(dev.uuid, 100)
            if dev.used_cores >= 100 and total == 100:
                a.whole_card = True
        for uuid, (mem, cores, n) in per_ctr.items():
            a = acc[uuid]
            if is_init:
                a.init_seen = True
                a.init_mem = max(a.init_mem, mem)
                a.init_cores = max(a.init_cores, cores)
            else:
                a.app_mem += mem
                a.app_cores += cores
                a.app_slots += n
    mig_by_gpu: dict[str, list[MigPlacement]] = {}
    for m in mig:
        mig_by_gpu.setdefault(m.gpu_uuid, []).append(m.placement)
    return tuple(
        DeviceCharge(
            uuid=uuid,
            slots=max(1 if a.init_seen else 0, a.app_slots),
            mem_mib=max(a.init_mem, a.app_mem),
            cores_pct=max(a.init_cores, a.app_cores),
            exclusive=a.whole_card,
            mig_placements=tuple(mig_by_gpu.get(uuid, ())),
            legacy_mig=tuple(legacy.get(uuid, ())),
        )
        for uuid, a in acc.items()
    )
