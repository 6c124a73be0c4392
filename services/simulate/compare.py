"""Running one scenario, or the same scenario under several policy combinations, and rendering the comparison.

Each run gets a fresh emulator and a fresh store (a new embedded server, or a scratch key prefix of its own on
``--redis-url``, deleted after the run), so runs never see each other's allocations.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.services.simulate.cycles import PodCycles
from vgpu_scheduler.services.simulate.driver import schedule_all
from vgpu_scheduler.services.simulate.harness import EmbeddedCluster, HarnessTiming, with_store_prefix
from vgpu_scheduler.services.simulate.manifests import Cluster, Workload
from vgpu_scheduler.services.simulate.report import (
    PodResult,
    controllers_json,
    device_states,
    policy_label,
    summarize,
)
from vgpu_scheduler.shared.codec.selectors import decode_gpu_policy, decode_node_policy
from vgpu_scheduler.shared.config import SimulateSettings
from vgpu_scheduler.shared.domain.model import GpuPolicy, GpuPolicyToken, NodePolicy
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

Progress = Callable[[int, int, PodResult], None]


@dataclass(frozen=True, slots=True)
class Combination:
    """One node policy and one GPU policy (the extender's ``--node-scheduler-policy``/``--gpu-scheduler-policy``)."""

    node: NodePolicy
    gpu: GpuPolicy

    @property
    def label(self) -> str:
        return policy_label(self.node.value, str(self.gpu))


DEFAULT_COMBINATIONS: tuple[Combination, ...] = tuple(
    Combination(node, GpuPolicy((gpu,)))
    for node in (NodePolicy.BINPACK, NodePolicy.SPREAD)
    for gpu in (GpuPolicyToken.BINPACK, GpuPolicyToken.SPREAD, GpuPolicyToken.TOPOLOGY_AWARE)
)
"""Node binpack/spread × GPU binpack/spread/topology-aware."""


def parse_policies(values: Sequence[str]) -> tuple[Combination, ...]:
    """``--policies`` values: ``NODE/GPU`` items (the GPU part may be a chain such as ``binpack,numa``), separated by
    spaces or ``;``, in one value or several. ConfigError (one line) on a bad item."""
    out: list[Combination] = []
    for value in values:
        for item in re.split(r"[;\s]+", value.strip()):
            if not item:
                continue
            node_text, sep, gpu_text = item.partition("/")
            if not sep:
                raise ConfigError(f"--policies: expected NODE/GPU such as binpack/spread, got {item!r}")
            try:
                combo = Combination(decode_node_policy(node_text), decode_gpu_policy(gpu_text))
            except DecodeError as e:
                raise ConfigError(f"--policies: {item!r}: {e.detail}") from None
            if combo not in out:
                out.append(combo)
    if not out:
        raise ConfigError("--policies: no NODE/GPU combination given")
    return tuple(out)


def settings_with(settings: SimulateSettings, combo: Combination) -> SimulateSettings:
    """``settings`` with the combination's policies."""
    return dataclasses.replace(
        settings, extender=dataclasses.replace(settings.extender, node_policy=combo.node, gpu_policy=combo.gpu)
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run: the pods' results in workload order, and the summary."""

    results: tuple[PodResult, ...]
    summary: dict[str, Any]
    complete: bool = True
    """False when the run was stopped before every pod was scheduled."""
    replacements: tuple[PodResult, ...] = ()
    """The pods controllers created in place of deleted ones, in creation order."""

    def to_json(self) -> dict[str, Any]:
        """The interface shape of ``simulate --output json``: ``{"pods": [...], "summary": {...}}``; added:
        ``replacements`` (the same shape as ``pods``)."""
        return {
            "pods": [r.to_json() for r in self.results],
            "summary": self.summary,
            "replacements": [r.to_json() for r in self.replacements],
        }


async def run_scenario(
    settings: SimulateSettings,
    cluster: Cluster,
    workload: Workload,
    *,
    stop: asyncio.Event | None = None,
    progress: Progress | None = None,
    timing: HarnessTiming | None = None,
) -> Outcome:
    """Schedule the workload on a fresh embedded cluster with ``settings``' policies.

    On a real Redis (``--redis-url``) the run uses a scratch key prefix of its own, ``<key-prefix>-simulate-<random>``,
    deleted afterwards: a simulation never writes into a deployment's keyspace.
    """
    scratch = settings.common.redis_url is not None
    if scratch:
        settings = with_store_prefix(settings, f"{settings.common.key_prefix}-simulate-{uuid.uuid4().hex[:8]}")
    async with EmbeddedCluster(settings, cluster, timing=timing, purge_store=scratch) as ec:
        driver = ec.driver(workload)
        results = await schedule_all(driver, list(workload.pods), stop=stop, progress=progress)
        nodes, pods = ec.emulator.list("nodes"), ec.emulator.list("pods")
    return outcome_of(settings, workload, results, nodes, pods, driver=driver)


def outcome_of(
    settings: SimulateSettings,
    workload: Workload,
    results: Sequence[PodResult],
    nodes: Sequence[dict[str, Any]],
    pods: Sequence[dict[str, Any]],
    *,
    driver: PodCycles | None = None,
) -> Outcome:
    """The outcome of a run: its results, the summary of the cluster's final ``nodes`` and ``pods``, and what the
    ``driver`` met on the way (its contention, preemptions, gangs, controllers' replacements and evictions)."""
    ext = settings.extender
    common = settings.common
    states = device_states(
        nodes, pods, common.nvidia, enabled_vendors(common.nvidia, common.device_sections, common.enable_flags)
    )
    summary = summarize(
        results,
        states,
        node_policy=ext.node_policy.value,
        gpu_policy=str(ext.gpu_policy),
        preemptions=driver.preemptions if driver is not None else (),
        gangs=driver.gangs if driver is not None else None,
        controllers=controllers_json(results, driver.replacements, [r.to_json() for r in driver.kcm.recreations])
        if driver is not None
        else None,
        evictions=[e.to_json() for e in driver.eviction_requests] if driver is not None else (),
        replacements=driver.replacements if driver is not None else (),
    )
    moves = list(driver.defrag_moves) if driver is not None else []
    summary["defrag"] = {"auto": ext.auto_defrag, "moved": len(moves), "moves": moves}
    if driver is not None:
        summary["contention"] = driver.contention.to_json()
    replacements = tuple(driver.replacements) if driver is not None else ()
    return Outcome(tuple(results), summary, complete=len(results) == len(workload.pods), replacements=replacements)


async def run_comparison(
    settings: SimulateSettings,
    cluster: Cluster,
    workload: Workload,
    combos: Sequence[Combination],
    *,
    stop: asyncio.Event | None = None,
    progress: Callable[[int, Combination], Progress | None] | None = None,
    timing: HarnessTiming | None = None,
) -> list[tuple[Combination, Outcome]]:
    """Run the scenario once per combination, one after the other, each on a fresh emulator and store."""
    rows: list[tuple[Combination, Outcome]] = []
    for i, combo in enumerate(combos):
        if stop is not None and stop.is_set():
            break
        outcome = await run_scenario(
            settings_with(settings, combo),
            cluster,
            workload,
            stop=stop,
            progress=progress(i, combo) if progress is not None else None,
            timing=timing,
        )
        rows.append((combo, outcome))
    return rows


def comparison_json(rows: Sequence[tuple[Combination, Outcome]]) -> dict[str, Any]:
    """``simulate --compare --output json``: ``{"combinations": [<summary>, ...]}`` in run order."""
    return {"combinations": [outcome.summary for _, outcome in rows]}


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def render_comparison(rows: Sequence[tuple[Combination, Outcome]]) -> str:
    """One line per combination: placed, pending, utilisation, fragmentation, nodes touched."""
    headers = [
        "NODE",
        "GPU",
        "PLACED",
        "PENDING",
        "GPU MEM",
        "GPU CORES",
        "FRAGMENTATION",
        "NODES TOUCHED",
        "BIND RETRIES",
        "LOCK WAITS",
    ]
    table = [headers]
    for combo, outcome in rows:
        s = outcome.summary
        table.append(
            [
                combo.node.value,
                str(combo.gpu),
                f"{s['placed']}/{s['pods']}",
                str(s["pending"]),
                _pct(s["gpu"]["memory_utilisation"]),
                _pct(s["gpu"]["core_utilisation"]),
                _pct(s["fragmentation"]["ratio"]),
                str(s["nodes_touched"]),
                str(s.get("contention", {}).get("binds_retried", "-")),
                str(s.get("contention", {}).get("lock_waits", "-")),
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    lines = []
    for row in table:
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def render_vendor_comparison(rows: Sequence[tuple[Combination, Outcome]]) -> str:
    """Per vendor, per combination: ``memory%/cores%`` allocated and ``used/devices`` (empty when every run's devices
    are of one vendor)."""
    vendors: list[str] = []
    for _, outcome in rows:
        vendors += [v for v in outcome.summary.get("by_vendor") or {} if v not in vendors]
    if len(vendors) < 2:
        return ""
    table = [["NODE", "GPU", *vendors]]
    for combo, outcome in rows:
        by_vendor = outcome.summary.get("by_vendor") or {}
        cells = []
        for name in vendors:
            v = by_vendor.get(name)
            cells.append(
                "-"
                if v is None
                else f"{_pct(v['memory_utilisation'])}/{_pct(v['core_utilisation'])} {v['devices_used']}/{v['devices']}"
            )
        table.append([combo.node.value, str(combo.gpu), *cells])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = []
    for row in table:
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
