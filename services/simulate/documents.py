"""Reading the simulator's input files: YAML or JSON documents (multi-document, a ``*List``, a top-level array),
each with where it came from (``<file>: document <n>[, items[<i>]]``), the envelope every object shares (``kind``,
``apiVersion``, ``metadata``), one name per object, and the field checks the loaders build on.

A bad input is a :class:`ManifestError` whose one line names the file, the document and the field. What each kind
must hold (Nodes, Pods, quotas, PriorityClasses, PodGroups) is :mod:`services.simulate.manifests`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.errors import ConfigError, DecodeError

KubeObject = dict[str, Any]

PRIORITY_CLASS_API = "scheduling.k8s.io/v1"
POD_GROUP_APIS = ("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha2")
"""Kubernetes' own PodGroup (gang scheduling: ``spec.schedulingPolicy.gang.minCount``): ``v1beta1`` from v1.37,
``v1alpha2`` on v1.36, the same fields in both."""
COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
"""scheduler-plugins' PodGroup (coscheduling: ``spec.minMember``), named by the label
``scheduling.x-k8s.io/pod-group``."""
API_VERSIONS: dict[str, tuple[str, ...]] = {
    "PriorityClass": (PRIORITY_CLASS_API,),
    "PodGroup": (*POD_GROUP_APIS, COSCHEDULING_API),
    "Deployment": ("apps/v1",),
    "ReplicaSet": ("apps/v1",),
    "StatefulSet": ("apps/v1",),
    "Job": ("batch/v1",),
    "PodDisruptionBudget": ("policy/v1",),
    "Eviction": ("policy/v1",),
}
"""The apiVersions accepted for the kinds outside the core group (every other kind is ``v1``)."""
CONTROLLER_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job")
"""The workload controllers a workload file may hold (:mod:`.controllers`)."""
NAMESPACED = frozenset({"Pod", "ResourceQuota", "PodGroup", "PodDisruptionBudget", "Eviction", *CONTROLLER_KINDS})


def either(options: tuple[str, ...]) -> str:
    """``a``, ``a or b``, ``a, b or c``: the accepted values an error names."""
    return " or ".join(options) if len(options) < 3 else f"{', '.join(options[:-1])} or {options[-1]}"


class ManifestError(ConfigError):
    """A bad input manifest. The message is one line: ``<file>: document <n>[, items[<i>]]: <field>: <problem>``."""


@dataclass(frozen=True, slots=True)
class Located:
    """One object of an input file and where it came from (for error messages)."""

    obj: KubeObject
    where: str

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"].get("namespace") or "default")

    @property
    def api_version(self) -> str:
        return str(self.obj.get("apiVersion") or "v1")


def read_documents(path: Path) -> list[tuple[str, Any]]:
    """``(location, document)`` pairs of a YAML/JSON file; Lists and top-level arrays are expanded."""
    label = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"{label}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"{label}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ManifestError(f"{label}: not valid YAML or JSON{where}: {problem}") from None
    out: list[tuple[str, Any]] = []
    for i, doc in enumerate(docs, start=1):
        where = f"{label}: document {i}"
        if doc is None:
            continue
        if isinstance(doc, list):
            out += [(f"{where}, [{j}]", item) for j, item in enumerate(doc)]
        elif isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and "items" in doc:
            items = doc.get("items")
            if items is None:
                continue
            if not isinstance(items, list):
                raise ManifestError(f"{where}: items: expected a list, got {type_name(items)}")
            out += [(f"{where}, items[{j}]", item) for j, item in enumerate(items)]
        else:
            out.append((where, doc))
    return out


def type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a mapping"
    return type(v).__name__


def field_error(where: str, field: str, problem: str) -> ManifestError:
    return ManifestError(f"{where}: {field}: {problem}")


def mapping_at(obj: Mapping[str, Any], key: str, where: str, field: str) -> dict[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise field_error(where, field, f"expected a mapping, got {type_name(value)}")
    return value


def string_map_at(obj: Mapping[str, Any], key: str, where: str, field: str) -> dict[str, str]:
    values = mapping_at(obj, key, where, field)
    for k, v in values.items():
        if not isinstance(k, str):
            raise field_error(where, field, f"keys must be strings, got {type_name(k)}")
        if not isinstance(v, str):
            raise field_error(where, f"{field}[{k}]", f"expected a string, got {type_name(v)} (quote it)")
    return values


def check_object(where: str, doc: Any, kinds: frozenset[str]) -> KubeObject:
    """Check the envelope every object shares: kind, apiVersion, metadata.name/namespace, labels, annotations."""
    if not isinstance(doc, dict):
        raise ManifestError(f"{where}: expected a Kubernetes object (a mapping), got {type_name(doc)}")
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise field_error(where, "kind", "missing")
    if kind not in kinds:
        expected = ", ".join(sorted(kinds))
        raise field_error(where, "kind", f"{kind!r} is not accepted here (expected {expected})")
    api_version = doc.get("apiVersion", "v1")
    accepted = API_VERSIONS.get(kind, ("v1",))
    if api_version not in accepted:
        raise field_error(where, "apiVersion", f"expected {either(accepted)} for a {kind}, got {api_version!r}")
    meta = mapping_at(doc, "metadata", where, "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise field_error(where, "metadata.name", "missing (a non-empty string is required)")
    ns = meta.get("namespace")
    if ns is not None and (not isinstance(ns, str) or not ns):
        raise field_error(where, "metadata.namespace", f"expected a non-empty string, got {type_name(ns)}")
    string_map_at(meta, "labels", where, "metadata.labels")
    string_map_at(meta, "annotations", where, "metadata.annotations")
    obj = copy.deepcopy(doc)
    obj["apiVersion"] = api_version
    return obj


def check_quantity(value: Any, where: str, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise field_error(where, field, f'expected a quantity such as 4 or "16Gi", got {type_name(value)}')
    try:
        parse_quantity(value, field)
    except DecodeError as e:
        raise field_error(where, field, e.detail) from None


def located(path: Path, kinds: frozenset[str]) -> list[Located]:
    return [Located(check_object(where, doc, kinds), where) for where, doc in read_documents(path)]


def check_unique(items: Sequence[Located]) -> None:
    seen: dict[tuple[str, str, str], str] = {}
    for loc in items:
        namespaced = loc.kind in NAMESPACED
        kind = loc.kind if loc.api_version == "v1" else f"{loc.kind} {loc.api_version}"
        key = (kind, loc.namespace if namespaced else "", loc.name)
        if key in seen:
            shown = f"{key[1]}/{key[2]}" if namespaced else key[2]
            raise field_error(loc.where, "metadata.name", f"{kind} {shown} is already defined at {seen[key]}")
        seen[key] = loc.where
