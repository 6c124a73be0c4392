"""PodDisruptionBudgets and evictions in a simulation: the workload file's ``PodDisruptionBudget`` and ``Eviction``
documents (checked), and the disruption controller's arithmetic (a budget's status from the pods it selects).

The API emulator honours a budget when a pod is evicted (``pods/{name}/eviction``, :mod:`shared.emulator.eviction`),
reading ``status.disruptionsAllowed`` as kube-apiserver does; keeping that status true is kube-controller-manager's
disruption controller, which the driver plays with :func:`budget_status`:

* the pods a budget selects: those of its namespace its selector matches (an empty selector matches none);
* ``currentHealthy``: those running (the simulation's pods are ready once running), not being deleted and not in
  ``disruptedPods`` (evicted, deletion not yet seen);
* ``minAvailable: N`` wants N healthy (``expectedPods`` = the pods selected); ``minAvailable: P%`` and
  ``maxUnavailable`` are read against ``expectedPods``, the sum of the selected pods' controllers' replicas
  (percentages rounded up); a selected pod without a controller then makes the budget allow nothing, as the
  disruption controller fails safe;
* ``disruptionsAllowed`` = ``currentHealthy`` − ``desiredHealthy``, never below 0.

An ``Eviction`` document (``policy/v1``) names a pod to evict, and ``vgpu-scheduler.io/simulate-at`` (a duration
such as ``90s``, or seconds; default 0) when, after the run began: an operator's drain, or the defrag executor's
move, played at that time (:class:`ScheduledEviction`). Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.services.simulate.documents import Located, field_error, mapping_at
from vgpu_scheduler.shared.config.values import parse_seconds
from vgpu_scheduler.shared.emulator.selectors import structured_selector
from vgpu_scheduler.shared.emulator.status import ApiError

KubeObject = dict[str, Any]

EVICT_AT_ANNOTATION = "vgpu-scheduler.io/simulate-at"
"""On an ``Eviction`` document of a workload file: when the eviction is requested, after the run began."""


@dataclass(frozen=True, slots=True)
class ScheduledEviction:
    """Evict ``namespace/name`` through the Eviction API ``at_s`` seconds after the run began."""

    namespace: str
    name: str
    at_s: float

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _int_or_percent(value: Any, where: str, field: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return
    raise field_error(where, field, f"expected a non-negative integer or a percentage such as 50%, got {value!r}")


def check_budget(loc: Located) -> None:
    """A ``policy/v1`` PodDisruptionBudget as the API server validates it: one of ``minAvailable`` and
    ``maxUnavailable``, and a well-formed ``selector``."""
    spec = mapping_at(loc.obj, "spec", loc.where, "spec")
    given = [k for k in ("minAvailable", "maxUnavailable") if k in spec]
    if len(given) != 1:
        raise field_error(loc.where, "spec", "exactly one of minAvailable and maxUnavailable is required")
    _int_or_percent(spec[given[0]], loc.where, f"spec.{given[0]}")
    try:
        structured_selector(mapping_at(spec, "selector", loc.where, "spec.selector"))
    except ApiError as e:
        raise field_error(loc.where, "spec.selector", e.message) from None
    loc.obj.pop("status", None)


def scheduled_eviction(loc: Located) -> ScheduledEviction:
    """A workload file's ``Eviction`` document (module docstring)."""
    raw = (loc.obj["metadata"].get("annotations") or {}).get(EVICT_AT_ANNOTATION, "0")
    try:
        at_s = parse_seconds(raw)
    except ValueError as e:
        raise field_error(loc.where, f"metadata.annotations[{EVICT_AT_ANNOTATION}]", str(e)) from None
    if not math.isfinite(at_s) or at_s < 0:
        raise field_error(
            loc.where, f"metadata.annotations[{EVICT_AT_ANNOTATION}]", f"expected a duration of 0 or more, got {raw!r}"
        )
    return ScheduledEviction(loc.namespace, loc.name, at_s)


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, int):
        return value
    return math.ceil(int(value[:-1]) * total / 100)


def _selected(pdb: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    meta = pdb.get("metadata") or {}
    selector = structured_selector((pdb.get("spec") or {}).get("selector"))
    if not selector.requirements:
        return []
    ns = meta.get("namespace") or "default"
    return [
        p
        for p in pods
        if (p.get("metadata") or {}).get("namespace") == ns
        and selector.matches((p.get("metadata") or {}).get("labels"))
    ]


def budget_status(
    pdb: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], scale: Mapping[str, int]
) -> dict[str, Any]:
    """The budget's ``status`` as the disruption controller computes it (module docstring). ``pods``: the cluster's
    pods; ``scale``: each controller's replicas by its UID."""
    spec = pdb.get("spec") or {}
    old = pdb.get("status") or {}
    selected = [p for p in _selected(pdb, pods) if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    disrupted = {
        name: at
        for name, at in (old.get("disruptedPods") or {}).items()
        if any(
            (p.get("metadata") or {}).get("name") == name and not (p.get("metadata") or {}).get("deletionTimestamp")
            for p in selected
        )
    }
    healthy = sum(
        1
        for p in selected
        if (p.get("status") or {}).get("phase") == "Running"
        and not (p.get("metadata") or {}).get("deletionTimestamp")
        and (p.get("metadata") or {}).get("name") not in disrupted
    )
    fail_safe = False
    if isinstance(spec.get("minAvailable"), int):
        expected, desired = len(selected), int(spec["minAvailable"])
    else:
        owners: dict[str, int] = {}
        for p in selected:
            refs = [r for r in (p.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller") is True]
            if not refs or str(refs[0].get("uid")) not in scale:
                fail_safe = True
                continue
            owners[str(refs[0]["uid"])] = scale[str(refs[0]["uid"])]
        expected = sum(owners.values())
        if "minAvailable" in spec:
            desired = _scaled(spec["minAvailable"], expected)
        else:
            desired = max(expected - _scaled(spec["maxUnavailable"], expected), 0)
    allowed = 0 if fail_safe else max(healthy - desired, 0)
    status: dict[str, Any] = {
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": allowed,
        "observedGeneration": (pdb.get("metadata") or {}).get("generation", 1),
    }
    if disrupted:
        status["disruptedPods"] = disrupted
    return status
