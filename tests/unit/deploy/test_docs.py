"""docs/deploy.md and the dashboard stay in step with the chart: every value is documented, and the dashboard
queries only the metrics the docs name (the names the extender must export)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import yaml

from tests.unit.deploy.conftest import REPO

CHART = REPO / "deploy" / "helm" / "vgpu-scheduler"
DOCS = REPO / "docs" / "deploy.md"
# Maps documented as a whole rather than key by key.
WHOLE = {"deviceConfig.config", "podSecurityContext", "containerSecurityContext"}
WHOLE_KEYS = {"resources", "labels", "nodeSelector"}

METRICS = {
    "vgpu_extender_request_duration_seconds",
    "vgpu_filter_outcomes_total",
    "vgpu_reservation_conflicts_total",
    "hami_gpu_memory_allocated_bytes",
    "hami_gpu_memory_limit_bytes",
    "hami_gpu_core_allocated_ratio",
    "hami_gpu_shared_count",
    "vgpu_fragmentation_ratio",
    "vgpu_defrag_moves_planned_total",
    "vgpu_defrag_moves_executed_total",
    "vgpu_defrag_moves_failed_total",
    "vgpu_defrag_cards_freed_total",
}


def value_paths(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = prefix + key
        if path in WHOLE or key in WHOLE_KEYS or not isinstance(value, dict) or not value:
            yield path
        else:
            yield from value_paths(value, path + ".")


def test_every_value_is_documented() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    documented = set(re.findall(r"`([A-Za-z][\w.]*)`", DOCS.read_text(encoding="utf-8")))
    missing = sorted(p for p in value_paths(values) if p not in documented)
    assert not missing, f"values not in docs/deploy.md: {missing}"


def test_dashboard_queries_only_documented_metrics() -> None:
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs
    names = {m for e in exprs for m in re.findall(r"\b(?:hami|vgpu)_\w+", e)}
    histogram = "vgpu_extender_request_duration_seconds"
    used = {histogram if n in (f"{histogram}_bucket", f"{histogram}_count") else n for n in names}
    assert used == METRICS


def test_docs_name_every_dashboard_metric() -> None:
    text = DOCS.read_text(encoding="utf-8")
    table = set(re.findall(r"^\| `((?:hami|vgpu)_\w+)` \|", text, flags=re.M))
    assert table == METRICS


def test_dashboard_panels_have_unique_ids_and_a_datasource_variable() -> None:
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text(encoding="utf-8"))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert "datasource" in {v["name"] for v in dashboard["templating"]["list"]}
