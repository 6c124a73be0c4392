"""The ``hami.io/vgpu-node`` pod label on API servers that drop a Binding's labels.

The extender binds a pod with one Binding that carries its allocation annotations and the ``hami.io/vgpu-node``
label (HAMi's node monitor lists a node's pods by that label). The API server always copies a Binding's
annotations onto the pod, but its labels only from v1.35 (``PodTopologyLabelsAdmission``, on by default there;
off before, or when an operator turns it off). On such a server the bound pod arrives without the label, and this
worker adds it: one merge patch per pod, only where it is missing, so a v1.35+ server costs nothing here.

Pure decision (:func:`missing_label`) plus a small queue the informer's term drains (:class:`PodLabeler`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from vgpu_scheduler.services.informer.pods import TERMINAL_PHASES
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import is_valid_label_value
from vgpu_scheduler.shared.errors import NotFoundError, VgpuError
from vgpu_scheduler.shared.k8s import Api

logger = logging.getLogger(__name__)

_QUEUE_LIMIT: Final = 10_000
"""Pods waiting for their label; beyond it a pod is skipped now and picked up by its next update."""


def missing_label(pod: Mapping[str, Any]) -> str | None:
    """The node to label ``pod`` with, or None: bound to the node its ``hami.io/vgpu-node`` annotation names,
    not terminated or being deleted, and without that label (or with another value)."""
    meta = pod.get("metadata")
    spec = pod.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return None
    annotations = meta.get("annotations")
    node = annotations.get(keys.VGPU_NODE) if isinstance(annotations, Mapping) else None
    if not isinstance(node, str) or not node or spec.get("nodeName") != node or not is_valid_label_value(node):
        return None
    if meta.get("deletionTimestamp") is not None:
        return None
    status = pod.get("status")
    if isinstance(status, Mapping) and status.get("phase") in TERMINAL_PHASES:
        return None
    labels = meta.get("labels")
    if isinstance(labels, Mapping) and labels.get(keys.VGPU_NODE_LABEL) == node:
        return None
    return node


class PodLabeler:
    """Adds the missing ``hami.io/vgpu-node`` label to bound pods (see the module docstring)."""

    def __init__(self, api: Api, *, added: Callable[[], None] | None = None, call_timeout_s: float = 4.0) -> None:
        """``added``: called once per label added (the informer's counter)."""
        self._api = api
        self._on_added = added
        self._call_timeout_s = call_timeout_s
        self._queue: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue(_QUEUE_LIMIT)
        self._queued: set[tuple[str, str]] = set()
        self._warned = False

    def on_pod(self, pod: Mapping[str, Any]) -> None:
        """Queue the pod when its label is missing (cheap: no I/O)."""
        node = missing_label(pod)
        if node is None:
            return
        meta = pod["metadata"]
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if not all(key) or key in self._queued:
            return
        try:
            self._queue.put_nowait((*key, node))
        except asyncio.QueueFull:
            return
        self._queued.add(key)

    async def run(self) -> None:
        """Patch queued pods one at a time until cancelled."""
        while True:
            namespace, name, node = await self._queue.get()
            self._queued.discard((namespace, name))
            try:
                await self._api.patch_pod_metadata(
                    namespace, name, labels={keys.VGPU_NODE_LABEL: node}, timeout_s=self._call_timeout_s
                )
            except NotFoundError:
                continue
            except VgpuError as e:  # its next update queues it again
                logger.warning("pod label not added", extra={"pod": f"{namespace}/{name}", "error": str(e)})
                continue
            if self._on_added is not None:
                self._on_added()
            if not self._warned:
                self._warned = True
                logger.warning(
                    "a bound pod arrived without its hami.io/vgpu-node label: this API server does not copy a "
                    "Binding's labels (before v1.35, or PodTopologyLabelsAdmission off); the informer adds it, "
                    "one request per pod",
                    extra={"pod": f"{namespace}/{name}", "node": node},
                )
