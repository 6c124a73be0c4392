"""Fixtures for the deployment artefact tests: the chart, its committed plain manifests, object lookups."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.render import MANIFESTS_DIR, Chart, load_chart, objects, render_chart

REPO = Path(__file__).resolve().parents[3]

Obj = dict[str, Any]


class Objects:
    """Parsed Kubernetes objects with lookups by kind and name."""

    def __init__(self, items: list[Obj]) -> None:
        self.items = items

    def of_kind(self, kind: str) -> list[Obj]:
        return [o for o in self.items if o["kind"] == kind]

    def get(self, kind: str, name: str) -> Obj:
        found = [o for o in self.of_kind(kind) if o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
        return found[0]

    def maybe(self, kind: str, name: str) -> Obj | None:
        found = [o for o in self.of_kind(kind) if o["metadata"]["name"] == name]
        return found[0] if found else None

    def pod_templates(self) -> Iterator[tuple[Obj, Obj]]:
        """(workload object, pod template) for every Deployment and Job."""
        for o in self.items:
            if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
                yield o, o["spec"]["template"]


def committed_objects() -> Objects:
    """Every object of the committed plain manifests."""
    items: list[Obj] = []
    for path in sorted(MANIFESTS_DIR.glob("*.yaml")):
        items += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    return Objects(items)


def render_objects(chart: Chart, values: dict[str, Any] | None = None) -> Objects:
    return Objects(objects(render_chart(chart, values=values)))


@pytest.fixture(scope="session")
def chart() -> Chart:
    return load_chart()


@pytest.fixture(scope="session")
def manifests() -> Objects:
    return committed_objects()
