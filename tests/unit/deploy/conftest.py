"""Fixtures for the deployment artefact tests: the chart as Helm loads it, its committed plain manifests,
object lookups. The rendering is real Helm (Helm's Go SDK through ``helm-python-sdk``, in the test extra)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
MANIFESTS_DIR = REPO / "deploy" / "manifests"

if TYPE_CHECKING:
    from deploy.render import Chart

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


def render_objects(
    chart: Chart, values: dict[str, Any] | None = None, *, release: str | None = None, namespace: str | None = None
) -> Objects:
    """The chart rendered by Helm with ``values`` over its defaults, parsed."""
    from deploy.render import DEFAULT_NAMESPACE, DEFAULT_RELEASE, objects, render_chart

    rendered = render_chart(
        chart, values=values, release=release or DEFAULT_RELEASE, namespace=namespace or DEFAULT_NAMESPACE
    )
    return Objects(objects(rendered))


@pytest.fixture(scope="session")
def chart() -> Iterator[Chart]:
    pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's SDK, Linux x86_64 only) is not installed")
    from deploy.render import load_chart

    with load_chart() as loaded:
        yield loaded


@pytest.fixture(scope="session")
def manifests() -> Objects:
    return committed_objects()
