"""The API server's Priority admission plugin, as the driver plays it before the webhook's mutation: a new pod's
``spec.priority`` and ``spec.preemptionPolicy`` come from the PriorityClass its ``spec.priorityClassName`` names, or
from the class marked ``globalDefault`` (else priority 0, ``PreemptLowerPriority``). The two system classes exist in
every cluster. What the plugin forbids is refused with its message (``pods "x" is forbidden: ...``), and the pod
is never created:

* a ``priorityClassName`` naming no class;
* a ``spec.priority`` other than the one the class gives (a pod may carry it only when it agrees, as one read back
  from a cluster does), and the same for ``spec.preemptionPolicy``.

Pure: PriorityClass objects and a pod in, the admitted pod or the refusal out.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

KubeObject = dict[str, Any]

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
SYSTEM_CLASSES: Mapping[str, int] = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
"""The PriorityClasses kube-apiserver creates at start-up."""


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    global_default: bool = False


@dataclass(frozen=True, slots=True)
class Forbidden:
    """The Priority plugin refused the pod: the API server's message."""

    message: str


class PriorityAdmission:
    """The Priority admission plugin over a fixed set of PriorityClasses (the workload's, plus the system ones)."""

    def __init__(self, classes: Iterable[Mapping[str, Any]] = ()) -> None:
        self.classes: dict[str, PriorityClass] = {
            name: PriorityClass(name, value) for name, value in SYSTEM_CLASSES.items()
        }
        for obj in classes:
            name = str(obj["metadata"]["name"])
            self.classes[name] = PriorityClass(
                name,
                int(obj["value"]),
                str(obj.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY),
                bool(obj.get("globalDefault", False)),
            )
        defaults = [c for c in self.classes.values() if c.global_default]
        self.default = min(defaults, key=lambda c: c.value) if defaults else None
        """The global default (the lowest value when several, as the plugin picks)."""

    def admit(self, pod: Mapping[str, Any]) -> KubeObject | Forbidden:
        """The pod with ``spec.priority`` (and ``preemptionPolicy``, ``priorityClassName``) set, or the refusal."""
        out: KubeObject = copy.deepcopy(dict(pod))
        spec = out.setdefault("spec", {})
        name = str((out.get("metadata") or {}).get("name") or "")
        named = spec.get("priorityClassName")
        if named:
            pc = self.classes.get(str(named))
            if pc is None:
                return Forbidden(f'pods "{name}" is forbidden: no PriorityClass with name {named} was found')
            value, policy = pc.value, pc.preemption_policy
        elif self.default is not None:
            value, policy = self.default.value, self.default.preemption_policy
            spec["priorityClassName"] = self.default.name
        else:
            value, policy = 0, PREEMPT_LOWER_PRIORITY
        given = spec.get("priority")
        if given is not None and given != value:
            return Forbidden(
                f'pods "{name}" is forbidden: the integer value of priority ({given}) must not be provided in pod '
                f"spec; priority admission controller computed {value} from the given PriorityClass name"
            )
        spec["priority"] = value
        given_policy = spec.get("preemptionPolicy")
        if given_policy is not None and given_policy != policy:
            return Forbidden(
                f'pods "{name}" is forbidden: the string value of PreemptionPolicy ({given_policy}) must not be '
                f"provided in pod spec; priority admission controller computed {policy} from the given "
                "PriorityClass name"
            )
        spec["preemptionPolicy"] = policy
        return out
