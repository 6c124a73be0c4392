"""The chart's device config: NVIDIA on by default, the other vendors' sections as comments that parse."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from shared.devconfig import parse_device_config
from tests.unit.deploy.conftest import render_objects
from tests.unit.deploy.test_manifests import FULL, NVIDIA_RESOURCES, cel_resource_names, scheduler_config

if TYPE_CHECKING:
    from deploy.render import Chart

VALUES = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "vgpu-scheduler" / "values.yaml"


def _device_config(text: str) -> dict[str, object]:
    config = yaml.safe_load(text)["deviceConfig"]["config"]
    assert isinstance(config, dict)
    return config


def test_only_nvidia_is_enabled_by_default() -> None:
    parsed = parse_device_config(_device_config(VALUES.read_text()))
    assert parsed.vendor_sections == {}
    assert parsed.nvidia.resource_count_name == "nvidia.com/gpu"


def test_the_commented_vendor_sections_parse_when_uncommented() -> None:
    text = VALUES.read_text()
    # the commented block: "    # <section>:" lines and their indented bodies, right under deviceConfig.config
    uncommented = re.sub(r"^    # ((?:cambricon|hygon|amd|vnpus):|  )", r"    \1", text, flags=re.MULTILINE)
    config = _device_config(uncommented)
    parsed = parse_device_config(config)
    assert set(parsed.vendor_sections) == {"cambricon", "hygon", "amd", "vnpus"}
    assert config["hygon"] == {
        "resourceCountName": "hygon.com/hcunum",
        "resourceMemoryName": "hygon.com/hcumem",
        "resourceCoreName": "hygon.com/hcucores",
        "memoryFactor": 1,
    }
    vnpus = config["vnpus"]
    assert isinstance(vnpus, dict)
    assert [c["commonWord"] for c in vnpus["configs"]] == ["Ascend910B3", "Ascend310P"]
    assert vnpus["configs"][1]["templates"][0] == {"name": "vir01", "memory": 3072, "aiCore": 1, "aiCPU": 1}


VENDOR_SECTIONS: dict[str, object] = {
    "hygon": {"resourceCountName": "hygon.com/hcunum", "resourceMemoryName": "hygon.com/hcumem"},
    "amd": {"resourceCountName": "amd.com/gpu", "resourceCoreName": "amd.com/gpucores"},
    "vnpus": {
        "configs": [
            {"resourceName": "huawei.com/Ascend310P", "resourceMemoryName": "huawei.com/Ascend310P-memory"},
        ]
    },
    "metax": {"resourceCountName": "metax-tech.com/gpu"},  # accepted and ignored: not scheduled
}
VENDOR_RESOURCES = [
    "hygon.com/hcunum",
    "hygon.com/hcumem",
    "amd.com/gpu",
    "amd.com/gpucores",
    "huawei.com/Ascend310P",
    "huawei.com/Ascend310P-memory",
]


def test_enabled_vendors_resources_reach_kube_scheduler_and_the_webhook(chart: Chart) -> None:
    objs = render_objects(chart, {"deviceConfig": {"config": VENDOR_SECTIONS}})
    [extender] = scheduler_config(objs)["extenders"]
    managed = [r["name"] for r in extender["managedResources"]]
    assert managed == NVIDIA_RESOURCES + VENDOR_RESOURCES
    assert all(r["ignoredByScheduler"] is True for r in extender["managedResources"])
    [hook] = objs.get("MutatingWebhookConfiguration", f"{FULL}-webhook")["webhooks"]
    names = cel_resource_names(hook)
    assert sorted(names[:5]) == sorted(NVIDIA_RESOURCES) and names[5:] == VENDOR_RESOURCES
    document = yaml.safe_load(objs.get("ConfigMap", f"{FULL}-device")["data"]["device-config.yaml"])
    assert set(parse_device_config(document).vendor_sections) == {"hygon", "amd", "vnpus", "metax"}
