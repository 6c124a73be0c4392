"""kube-scheduler's extender preemption wire (``k8s.io/kube-scheduler/extender/v1``): ``ExtenderPreemptionArgs`` in,
``ExtenderPreemptionResult`` out.

kube-scheduler (``HTTPExtender.ProcessPreemption``) sends the pod and, per candidate node, the victims its own dry
run chose: as UIDs in ``NodeNameToMetaVictims`` when the extender is ``nodeCacheCapable``, as whole pods in
``NodeNameToVictims`` otherwise. It reads back ``NodeNameToMetaVictims`` only: each UID must name a pod on that
node in its cache (``convertPodUIDToPod``), and a node left out is no longer a candidate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol import gojson

_ARGS = "extender preemption args"


@dataclass(frozen=True, slots=True)
class NodeVictims:
    uids: tuple[str, ...]
    pdb_violations: int


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    pod: dict[str, Any]
    victims: dict[str, NodeVictims]
    """Per candidate node, kube-scheduler's victims (from either form of the request)."""


def _uid_of(doc: gojson.Document, pod: Any, where: str) -> str:
    if not isinstance(pod, dict):
        raise DecodeError(_ARGS, f"{where} must be an object")
    meta = doc.fold_get(pod, "metadata")
    uid = doc.fold_get(pod, "UID") if meta is gojson.MISSING else doc.fold_get(meta, "uid")
    if not isinstance(uid, str) or not uid:
        raise DecodeError(_ARGS, f"{where} has no UID")
    return uid


def parse_preemption_args(body: bytes | str) -> PreemptionArgs:
    """Decode ``ExtenderPreemptionArgs`` (Go's rules: any key case). A malformed body raises :class:`DecodeError`."""
    doc, top = gojson.loads_object(body, _ARGS)
    pod = doc.fold_get(top, "Pod")
    if not isinstance(pod, dict):
        raise DecodeError(_ARGS, "Pod is missing or not an object")
    victims: dict[str, NodeVictims] = {}
    for field in ("NodeNameToVictims", "NodeNameToMetaVictims"):
        table = doc.fold_get(top, field)
        if table is gojson.MISSING or table is None:
            continue
        if not isinstance(table, dict):
            raise DecodeError(_ARGS, f"{field} must be an object")
        for node, entry in table.items():
            if entry is None:
                victims[node] = NodeVictims((), 0)
                continue
            if not isinstance(entry, dict):
                raise DecodeError(_ARGS, f"{field}[{node}] must be an object")
            pods = doc.fold_get(entry, "Pods")
            pods = [] if pods is gojson.MISSING or pods is None else pods
            if not isinstance(pods, list):
                raise DecodeError(_ARGS, f"{field}[{node}].Pods must be an array")
            n = doc.fold_get(entry, "NumPDBViolations")
            n = 0 if n is gojson.MISSING or n is None else n
            if not isinstance(n, int) or isinstance(n, bool):
                raise DecodeError(_ARGS, f"{field}[{node}].NumPDBViolations must be an integer")
            uids = tuple(_uid_of(doc, p, f"{field}[{node}].Pods[{i}]") for i, p in enumerate(pods))
            victims[node] = NodeVictims(uids, n)
    return PreemptionArgs(pod=pod, victims=victims)


def preemption_result(victims: Mapping[str, tuple[Sequence[str], int]]) -> bytes:
    """``ExtenderPreemptionResult``: per node kept, the victims' UIDs and the PDB violations they cause."""
    table = {
        node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
        for node, (uids, violations) in sorted(victims.items())
    }
    return json.dumps({"NodeNameToMetaVictims": table}, separators=(",", ":")).encode()
