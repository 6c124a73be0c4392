"""The ``pods/{name}/eviction`` subresource (policy/v1 Eviction), as kube-apiserver's eviction REST handler does it
(``pkg/registry/core/pod/storage/eviction.go``), and the PodDisruptionBudgets it honours.

* A pod that is ended, still ``Pending`` or already terminating is deleted without looking at any budget (the
  server's ``canIgnorePDB``).
* Otherwise the budgets of the pod's namespace whose selector matches its labels are read: more than one is a 500
  (the subresource does not support it); one whose ``status.observedGeneration`` lags its generation, or whose
  ``status.disruptionsAllowed`` is 0, refuses with 429 ``TooManyRequests`` and a ``DisruptionBudget`` cause;
  else its ``disruptionsAllowed`` is decremented and the pod recorded in ``disruptedPods`` before the pod is deleted
  with the Eviction's ``deleteOptions`` (preconditions and grace period honoured).

No disruption controller runs in the emulator: a test sets a budget's ``status`` itself (created with it, or
patched through ``/status``); the emulator keeps no ``metadata.generation``, so a budget lags only when a test
gives it one above its ``status.observedGeneration``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_scheduler.shared.emulator.resources import resolve
from vgpu_scheduler.shared.emulator.selectors import parse_field_selector, parse_label_selector
from vgpu_scheduler.shared.emulator.status import ApiError
from vgpu_scheduler.shared.emulator.store import Obj, Store, clone, rfc3339

REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
_PODS = resolve("pods")
_PDBS = resolve("poddisruptionbudgets", "policy/v1")


def _mapping(obj: Any, key: str) -> Mapping[str, Any]:
    v = obj.get(key) if isinstance(obj, Mapping) else None
    return v if isinstance(v, Mapping) else {}


def selector_text(selector: Mapping[str, Any]) -> str:
    """A LabelSelector object (``matchLabels``, ``matchExpressions``) in the string form selectors parse."""
    parts = [f"{k}={v}" for k, v in sorted(_mapping(selector, "matchLabels").items())]
    for e in selector.get("matchExpressions") or []:
        if not isinstance(e, Mapping):
            continue
        key, op, values = e.get("key"), e.get("operator"), ",".join(str(v) for v in e.get("values") or [])
        parts.append(
            {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": f"{key}"}.get(
                str(op), f"!{key}"
            )
        )
    return ",".join(parts)


def _budgets(store: Store, pod: Obj) -> list[Obj]:
    meta = pod["metadata"]
    out = []
    everything = parse_label_selector(None), parse_field_selector(None, frozenset())
    for pdb in store.select(_PDBS, meta.get("namespace"), *everything)[0]:
        selector = _mapping(pdb.get("spec"), "selector")
        if selector and parse_label_selector(selector_text(selector)).matches(meta.get("labels")):
            out.append(pdb)
    return out


def _refused(cause: str) -> ApiError:
    return ApiError(429, REFUSED, "TooManyRequests", {"causes": [{"reason": "DisruptionBudget", "message": cause}]})


def evict(store: Store, namespace: str, name: str, body: Any) -> Obj:
    """Evict pod ``namespace/name`` (module docstring); returns the pod as the delete left it."""
    pod = store.get(_PODS, namespace, name)
    options = body.get("deleteOptions") if isinstance(body, Mapping) else None
    status = _mapping(pod, "status")
    if status.get("phase") in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
        return store.delete(_PODS, namespace, name, options)
    budgets = _budgets(store, pod)
    if len(budgets) > 1:
        raise ApiError(
            500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        )
    if budgets:
        pdb = budgets[0]
        pdb_name = pdb["metadata"]["name"]
        pdb_status = _mapping(pdb, "status")
        if int(pdb_status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 0):
            raise _refused(f"The disruption budget {pdb_name} is still being processed by the server.")
        allowed = pdb_status.get("disruptionsAllowed")
        allowed = allowed if isinstance(allowed, int) else 0
        if allowed <= 0:
            raise _refused(
                f"The disruption budget {pdb_name} needs {pdb_status.get('desiredHealthy', 0)} healthy pods and has "
                f"{pdb_status.get('currentHealthy', 0)} currently"
            )
        updated = clone(pdb)
        updated["status"] = {
            **dict(pdb_status),
            "disruptionsAllowed": allowed - 1,
            "disruptedPods": {**dict(_mapping(pdb_status, "disruptedPods")), name: rfc3339(store.now())},
        }
        store.put(_PDBS, updated)
    return store.delete(_PODS, namespace, name, options)
