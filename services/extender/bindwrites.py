"""What a bind writes on the pod, and how it recognises its own write.

One bind's write is the ``hami.io/vgpu-node``, ``hami.io/vgpu-time`` and ``hami.io/bind-time`` annotations with
every vendor's *allocated* device list (the device plugin changes the *to-allocate* list and the phase later),
carried by the Binding. :func:`foreign_allocation` tells another decision's write from this one before the pod is
bound; :func:`carries` tells whether a pod found bound (after a Binding whose answer was lost) carries this one.
:func:`create_binding` is the write itself: one Binding carrying the annotations and the label, its failures as
the bind's outcomes (:class:`BindingUnknown` when a lost answer cannot be looked up).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from vgpu_scheduler.services.extender.bindresult import BindFailed, BindOutcome
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.errors import ConflictError, NotFoundError, TransientError, VgpuError
from vgpu_scheduler.shared.k8s import AlreadyBoundError, Api, StaleVersionError, UidMismatchError
from vgpu_scheduler.shared.k8s.objects import meta
from vgpu_scheduler.shared.protocol.extender import ExtenderBindingArgs

BINDING_ATTEMPTS: Final = 3
"""Attempts of one guarded Binding (a stale resourceVersion re-reads the pod and tries again at its version)."""

_OWN_KEYS: Final = (keys.VGPU_NODE, keys.VGPU_TIME, keys.BIND_TIME)
"""With every vendor's allocated key, the annotations that identify one bind's write (the device plugin changes
to-allocate and the phase)."""


def carries(
    pod: Mapping[str, Any], annos: Mapping[str, str], allocated_keys: tuple[str, ...] = (keys.DEVICES_ALLOCATED,)
) -> bool:
    """The pod still shows the allocation annotations exactly as ``annos`` (one bind's write) set them."""
    have = meta(pod).get("annotations") or {}
    return all(have.get(k) == annos.get(k) for k in (*_OWN_KEYS, *allocated_keys) if k in annos)


def foreign_allocation(
    pod: Mapping[str, Any], annos: Mapping[str, str], allocated_keys: tuple[str, ...] = (keys.DEVICES_ALLOCATED,)
) -> str:
    """Describe another decision's allocation on the pod ('' when none, or when it is the same devices)."""
    have = meta(pod).get("annotations") or {}
    node = have.get(keys.VGPU_NODE)
    lists = {k: have.get(k) for k in allocated_keys if have.get(k) is not None or k in annos}
    if node is None and all(v is None for v in lists.values()):
        return ""
    if node == annos.get(keys.VGPU_NODE) and all(v == annos.get(k) for k, v in lists.items()):
        return ""
    devices = "; ".join(f"{k}={v}" for k, v in lists.items() if v is not None) or "none"
    if lists.keys() == {keys.DEVICES_ALLOCATED}:
        devices = str(lists[keys.DEVICES_ALLOCATED])
    return f"node {node}, devices {devices}"


class BindingUnknown(VgpuError):
    """The Binding's outcome could not be learned."""


async def create_binding(
    api: Api,
    args: ExtenderBindingArgs,
    *,
    timeout_s: float,
    allocated_keys: tuple[str, ...],
    resource_version: str = "",
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> bool:
    """Bind the pod to ``args.node`` with ``annotations`` and ``labels`` (one write). True when this Binding
    bound it; False when it was already bound to this node (another bind's write: with ``annotations``, its
    are the ones on the pod). StaleVersionError propagates for the caller to re-read; every call times out after
    ``timeout_s``."""
    ns, name, node = args.pod_namespace, args.pod_name, args.node
    try:
        await api.bind_pod(
            ns,
            name,
            node,
            uid=args.pod_uid,
            resource_version=resource_version or None,
            annotations=annotations,
            labels=labels,
            timeout_s=timeout_s,
        )
        return True
    except AlreadyBoundError as e:
        if e.node == node:
            return False
        raise BindFailed(
            BindOutcome.BOUND_ELSEWHERE, f"pod {ns}/{name} is already bound to node {e.node or '?'}"
        ) from e
    except NotFoundError:
        raise BindFailed(BindOutcome.POD_GONE, f"pod {ns}/{name} not found") from None
    except StaleVersionError:
        raise
    except UidMismatchError as e:
        raise BindFailed(BindOutcome.POD_GONE, f"pod {ns}/{name} was re-created (asked uid {args.pod_uid}): {e}") from e
    except ConflictError as e:
        raise BindFailed(BindOutcome.POD_GONE, f"binding pod {ns}/{name} refused: {e}") from e
    except TransientError as e:
        # the Binding may have been made: look before undoing anything
        try:
            pod = await api.get_pod(ns, name, timeout_s=timeout_s)
        except NotFoundError:
            raise BindFailed(BindOutcome.POD_GONE, f"pod {ns}/{name} not found") from None
        except VgpuError as e2:
            raise BindingUnknown(f"binding pod {ns}/{name} to {node}: outcome unknown ({e}; then {e2})") from e2
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to == node:
            return annotations is None or carries(pod, annotations, allocated_keys)
        if bound_to:
            raise BindFailed(BindOutcome.BOUND_ELSEWHERE, f"pod {ns}/{name} is already bound to {bound_to}") from e
        raise
