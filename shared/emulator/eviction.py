"""The ``pods/{name}/eviction`` subresource (a ``policy/v1`` Eviction) as kube-apiserver's ``EvictionREST`` serves
it, over the emulator's store: PodDisruptionBudgets (``policy/v1``) are honoured.

* A pod that is ``Pending``, ``Succeeded`` or ``Failed``, or already being deleted, is deleted without looking at
  budgets (``canIgnorePDB``).
* Otherwise the budgets of its namespace whose selector matches its labels are found (an empty selector matches
  nothing). More than one: ``500``, as the API server refuses to choose. One whose ``status.observedGeneration``
  lags its ``metadata.generation`` (the disruption controller has not computed it yet), or with
  ``status.disruptionsAllowed`` of 0 (or absent): ``429 TooManyRequests`` ``Cannot evict pod as it would violate the
  pod's disruption budget.`` with a ``DisruptionBudget`` cause naming the budget's desired and current healthy pods.
  Otherwise the budget's ``disruptionsAllowed`` is decremented and the pod recorded in its ``disruptedPods``.
* The pod then gets the ``DisruptionTarget`` condition (``EvictionByEvictionAPI``) and is deleted with the
  Eviction's ``deleteOptions`` (a pod bound to a node terminates with its grace period when the emulator deletes
  gracefully). The answer is a ``Status`` of success, code 201.

Recomputing a budget's status from the pods (the disruption controller) is not the API server's work: whoever
plays kube-controller-manager does it (``simulate``'s driver does).
"""

from __future__ import annotations

from typing import Any

from vgpu_scheduler.shared.emulator.resources import ResourceType
from vgpu_scheduler.shared.emulator.selectors import FieldSelector, LabelSelector, structured_selector
from vgpu_scheduler.shared.emulator.status import ApiError, bad_request
from vgpu_scheduler.shared.emulator.store import Obj, Store, clone, rfc3339

EVICTION_APIS = frozenset({"policy/v1", "policy/v1beta1"})
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."
SEVERAL = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."


def _check_body(name: str, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
        raise bad_request("the body of an eviction must be a policy/v1 Eviction object")
    if body.get("apiVersion", "policy/v1") not in EVICTION_APIS:
        raise bad_request(f"unsupported Eviction apiVersion {body.get('apiVersion')!r}")
    meta = body.get("metadata") or {}
    if not isinstance(meta, dict) or meta.get("name") not in (None, "", name):
        raise bad_request("name in URL does not match name in Eviction object")
    options = body.get("deleteOptions")
    if options is not None and not isinstance(options, dict):
        raise bad_request("deleteOptions must be a JSON object")
    return options or {}


def _budgets_of(store: Store, pdbs: ResourceType, pod: Obj) -> list[Obj]:
    meta = pod["metadata"]
    items, _ = store.select(pdbs, meta.get("namespace", ""), LabelSelector("", ()), FieldSelector("", ()))
    out = []
    for pdb in items:
        selector = structured_selector((pdb.get("spec") or {}).get("selector"))
        if selector.requirements and selector.matches(meta.get("labels")):
            out.append(pdb)
    return out


def _spend(store: Store, pdbs: ResourceType, pdb: Obj, pod_name: str) -> None:
    """``checkAndDecrement``: 429 when the budget allows no disruption, else one disruption spent."""
    status = pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 0):
        cause = f"The disruption budget {pdb['metadata']['name']} is still being processed by the server."
        raise ApiError(429, VIOLATES, details={"causes": [{"reason": "DisruptionBudget", "message": cause}]})
    allowed = status.get("disruptionsAllowed")
    allowed = allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0
    if allowed < 0:
        raise ApiError(403, "pdb disruptions allowed is negative")
    if allowed == 0:
        cause = (
            f"The disruption budget {pdb['metadata']['name']} needs {status.get('desiredHealthy', 0)} healthy pods "
            f"and has {status.get('currentHealthy', 0)} currently"
        )
        raise ApiError(429, VIOLATES, details={"causes": [{"reason": "DisruptionBudget", "message": cause}]})
    spent = clone(pdb)
    spent_status = spent.setdefault("status", {})
    spent_status["disruptionsAllowed"] = allowed - 1
    spent_status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: rfc3339(store.now())}
    store.put(pdbs, spent)


def evict(store: Store, types: tuple[ResourceType, ResourceType], namespace: str, name: str, body: Any) -> Obj:
    """``POST pods/{name}/eviction`` (module docstring); ``types``: pods and poddisruptionbudgets. The pod as the
    delete left it (gone, or terminating with its grace period); an ``ApiError`` when the eviction is refused."""
    pods, pdbs = types
    options = _check_body(name, body)
    pod = store.get(pods, namespace, name)
    phase = (pod.get("status") or {}).get("phase")
    ignore_budgets = phase in ("Pending", "Succeeded", "Failed") or bool(pod["metadata"].get("deletionTimestamp"))
    if not ignore_budgets:
        budgets = _budgets_of(store, pdbs, pod)
        if len(budgets) > 1:
            raise ApiError(500, SEVERAL)
        if budgets:
            _spend(store, pdbs, budgets[0], name)
    if phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp"):
        marked = clone(pod)
        status = marked.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "EvictionByEvictionAPI",
                "message": "Eviction API: evicting",
                "lastTransitionTime": rfc3339(store.now()),
            }
        )
        status["conditions"] = conditions
        store.put(pods, marked)
    return store.delete(pods, namespace, name, options)
