"""The chart's device config: NVIDIA on by default, the other vendors' sections as comments that parse."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from shared.devconfig import parse_device_config

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
