"""``simulate --auto-defrag``: the embedded extender moves pods by itself (``services/extender/autodefrag.py``), the
driver's kube-controller-manager recreates the moved pods and its kube-scheduler places the replacements, and the
whole-card pod that waited binds to the card a move left idle. Without the flag it stays pending."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.integration.simulate.conftest import run_cli, run_cli_json
from tests.integration.simulate.test_controllers import bare, by_name, owned, pod_spec, pool

SPREAD = ("--node-scheduler-policy", "spread", "--gpu-scheduler-policy", "spread")


def fragmented(tmp_path: Path) -> tuple[str, ...]:
    """Two nodes of two T4 cards; a Deployment of four 6000 MiB pods, one per card (spread policies); then a pod
    asking for a whole card (16000 MiB): it fits nowhere although two pods could share a card."""
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(pool(2)), encoding="utf-8")
    docs: list[dict[str, Any]] = [owned("Deployment", "web", pod_spec(6000), replicas=4), bare("big", pod_spec(16000))]
    (tmp_path / "w.yaml").write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return ("simulate", "--cluster", str(tmp_path / "c.yaml"), "--workload", str(tmp_path / "w.yaml"), *SPREAD)


def test_with_auto_defrag_the_waiting_pod_is_placed_after_a_move(tmp_path: Path) -> None:
    run = run_cli_json(*fragmented(tmp_path), "--auto-defrag")
    pods = by_name(run["pods"])
    assert pods["big"]["node"] is not None, pods["big"]
    summary = run["summary"]
    defrag = summary["defrag"]
    assert defrag["auto"] is True and defrag["moved"] == 1
    [move] = defrag["moves"]
    assert move["for"] == "ml/big" and move["from"]["node"] == pods["big"]["node"]
    assert move["pod"].startswith("ml/web-") and move["replacement"] is not None
    # the moved pod's replacement, created by the Deployment's ReplicaSet, shares a card with another web pod
    [replacement] = run["replacements"]
    assert replacement["node"] is not None and f"ml/{replacement['name']}" in move["replacement"]
    assert summary["controllers"]["recreated"] == 1
    assert summary["pending"] == 0 and summary["over_capacity"] == []
    assert summary["fragmentation"]["idle_devices"] == 0
    code, text, _ = run_cli(*fragmented(tmp_path), "--auto-defrag")
    assert code == 0 and "defrag (--auto-defrag): 1 pod(s) moved" in text


def test_without_the_flag_the_pod_stays_pending(tmp_path: Path) -> None:
    run = run_cli_json(*fragmented(tmp_path))
    assert by_name(run["pods"])["big"]["node"] is None
    assert run["summary"]["defrag"] == {"auto": False, "moved": 0, "moves": []}
    assert run["summary"]["pending"] == 1 and run["replacements"] == []
