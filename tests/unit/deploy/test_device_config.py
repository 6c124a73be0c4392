"""The chart's device config: the families HAMi schedules by default on with HAMi's names, Ascend behind
``deviceConfig.enableAscend``, the other vendors' sections as comments that parse."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from tests.unit.deploy.conftest import render_objects
from tests.unit.deploy.test_manifests import (
    DEFAULT_FAMILY_RESOURCES,
    FULL,
    NVIDIA_RESOURCES,
    cel_resource_names,
    container,
    scheduler_config,
)
from vgpu_scheduler.shared.devconfig import parse_device_config
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

if TYPE_CHECKING:
    from deploy.render import Chart

VALUES = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "vgpu-scheduler" / "values.yaml"


def _device_config(text: str) -> dict[str, object]:
    config = yaml.safe_load(text)["deviceConfig"]["config"]
    assert isinstance(config, dict)
    return config


def test_the_default_values_hold_only_nvidias_section() -> None:
    parsed = parse_device_config(_device_config(VALUES.read_text()))
    assert parsed.vendor_sections == {}  # the other families run on HAMi's defaults
    assert parsed.nvidia.resource_count_name == "nvidia.com/gpu"
    assert enabled_vendors(parsed.nvidia, parsed.vendor_sections).names == (
        "NVIDIA",
        "DCU",
        "MLU",
        "AMD",
        "Biren",
        "Vastai",
        "Mthreads",
        "Metax-GPU",
        "Metax-SGPU",
        "GCU",
        "Enflame",
        "AWSNeuron",
        "kunlun",
        "XPU",
    )


def test_the_commented_vendor_sections_parse_when_uncommented() -> None:
    text = VALUES.read_text()
    # the commented block: "    # <section>:" lines and their indented bodies, right under deviceConfig.config
    uncommented = re.sub(r"^    # ((?:cambricon|hygon|amd|vnpus|kunlun):|  )", r"    \1", text, flags=re.MULTILINE)
    config = _device_config(uncommented)
    parsed = parse_device_config(config)
    assert set(parsed.vendor_sections) == {"cambricon", "hygon", "amd", "vnpus", "kunlun"}
    assert config["hygon"] == {
        "resourceCountName": "hygon.com/dcunum",
        "resourceMemoryName": "hygon.com/dcumem",
        "resourceCoreName": "hygon.com/dcucores",
        "memoryFactor": 1,
    }
    vnpus = config["vnpus"]
    assert isinstance(vnpus, dict)
    assert [c["commonWord"] for c in vnpus["configs"]] == ["Ascend910B3", "Ascend310P"]
    assert vnpus["configs"][1]["templates"][0] == {"name": "vir01", "memory": 3072, "aiCore": 1, "aiCPU": 1}


NPU_310P = {
    "chipName": "310P3",
    "commonWord": "Ascend310P",
    "resourceMemoryName": "example.com/npu-memory",
    "memoryAllocatable": 21527,
    "memoryCapacity": 24576,
    "aiCore": 8,
    "templates": [{"name": "vir01", "memory": 3072, "aiCore": 1, "aiCPU": 1}],
}
VENDOR_SECTIONS: dict[str, object] = {
    "hygon": {"resourceCountName": "example.com/dcu", "resourceMemoryName": "example.com/dcumem"},
    "cambricon": None,  # present without keys: enabled with HAMi's names
    "amd": {},
    "vnpus": {"configs": [NPU_310P]},
    "metax": {"resourceCountName": "metax-tech.com/gpu", "resourceVCountName": "example.com/sgpu"},  # sGPU renamed
}
ASCEND = frozenset({"enable-ascend"})


def _service_names(sections: dict[str, object], flags: frozenset[str] = frozenset()) -> list[str]:
    """The resource names the services take as a vendor's, from the same device config (NVIDIA's left out)."""
    vendors = enabled_vendors(NvidiaConfig(), sections, flags)
    names = [
        n
        for v in vendors
        if v.name != "NVIDIA"
        for n in (v.resources.count, v.resources.memory, v.resources.cores, *v.resources.extra)
    ]
    return [n for n in names if n]


def _chart_names(
    chart: Chart, sections: dict[str, object], ascend: bool = False, iluvatar: bool = False
) -> tuple[list[str], list[str]]:
    values = {"config": sections, "enableAscend": ascend, "enableIluvatar": iluvatar}
    objs = render_objects(chart, {"deviceConfig": values})
    [extender] = scheduler_config(objs)["extenders"]
    assert all(r["ignoredByScheduler"] is True for r in extender["managedResources"])
    managed = [r["name"] for r in extender["managedResources"]]
    assert managed[:5] == NVIDIA_RESOURCES
    [hook] = objs.get("MutatingWebhookConfiguration", f"{FULL}-webhook")["webhooks"]
    names = cel_resource_names(hook)
    assert sorted(names[:5]) == sorted(NVIDIA_RESOURCES)
    return managed[5:], names[5:]


def test_enabled_vendors_resources_reach_kube_scheduler_and_the_webhook(chart: Chart) -> None:
    managed, matched = _chart_names(chart, VENDOR_SECTIONS, ascend=True)
    want = _service_names(VENDOR_SECTIONS, ASCEND)
    assert "example.com/dcu" in want and "cambricon.com/vmlu" in want and "amd.com/gpucores" in want
    assert "huawei.com/Ascend310P" in want and "example.com/npu-memory" in want
    assert sorted(managed) == sorted(matched) == sorted(want)
    objs = render_objects(chart, {"deviceConfig": {"config": VENDOR_SECTIONS, "enableAscend": True}})
    document = yaml.safe_load(objs.get("ConfigMap", f"{FULL}-device")["data"]["device-config.yaml"])
    assert set(parse_device_config(document).vendor_sections) == {"hygon", "cambricon", "amd", "vnpus", "metax"}
    for name in ("extender", "registrar", "informer"):
        assert "--enable-ascend" in container(objs, f"{FULL}-{name}")["args"]


def test_without_enable_ascend_a_vnpus_section_enables_nothing_anywhere(chart: Chart) -> None:
    managed, matched = _chart_names(chart, VENDOR_SECTIONS)
    want = _service_names(VENDOR_SECTIONS)
    assert not any(n.startswith("huawei.com/") or n == "example.com/npu-memory" for n in want)
    assert sorted(managed) == sorted(matched) == sorted(want)
    objs = render_objects(chart, {"deviceConfig": {"config": VENDOR_SECTIONS}})
    for name in ("extender", "registrar", "informer"):
        assert not any(a.startswith("--enable-") for a in container(objs, f"{FULL}-{name}")["args"])


def test_no_vendor_section_still_schedules_hamis_default_families(chart: Chart) -> None:
    managed, matched = _chart_names(chart, {})
    want = _service_names({})
    assert sorted(want) == sorted(DEFAULT_FAMILY_RESOURCES)
    assert sorted(managed) == sorted(matched) == sorted(want)


def test_enable_iluvatar_reaches_every_component(chart: Chart) -> None:
    objs = render_objects(chart, {"deviceConfig": {"enableIluvatar": True}})
    for name in ("extender", "registrar", "informer"):
        assert "--enable-iluvatar" in container(objs, f"{FULL}-{name}")["args"]


def test_iluvatar_biren_and_vastai_names_reach_kube_scheduler_and_the_webhook(chart: Chart) -> None:
    cases: list[dict[str, object]] = [
        {"iluvatars": None},
        {"iluvatars": [{"commonWord": "BI-V150", "resourceCountName": "x.io/v"}]},
        {"biren": None},
        {"biren": {"resourceCountName": "biren.com/gpu"}},
        {"vastai": None, "biren": {}},
        {"mthreads": None},
        {"mthreads": {"resourceMemoryName": "x.io/mem"}},
        {"metax": None},
        {"metax": {"resourceCountName": "x.io/gpu"}},
        {"enflame": None},
        {"enflame": {"resourceNameGCU": "x.io/gcu", "resourceNameVGCU": "enflame.com/vgcu", "resourceNameGCUCore": ""}},
        {"enflame": {"resourceNameDRSGCU": "x.io/drs", "resourceNameVGCU": "enflame.com/vgcu"}},
        {"kunlun": None},
        {"kunlun": {"resourceCountName": "x.io/xpu", "resourceVMemoryName": "x.io/vmem"}},
    ]
    for sections in cases:
        for iluvatar in (False, True):
            managed, matched = _chart_names(chart, sections, iluvatar=iluvatar)
            want = _service_names(sections, frozenset({"enable-iluvatar"}) if iluvatar else frozenset())
            assert sorted(managed) == sorted(matched) == sorted(want), (sections, iluvatar)
    assert "iluvatar.ai/BI-V100.vCore" in _service_names({"iluvatars": None}, frozenset({"enable-iluvatar"}))
    assert "iluvatar.ai/BI-V100.vCore" not in _service_names({"iluvatars": None})


def test_an_empty_vnpus_section_enables_hamis_default_chips_everywhere(chart: Chart) -> None:
    sections: dict[str, object] = {"vnpus": None}
    managed, matched = _chart_names(chart, sections, ascend=True)
    want = _service_names(sections, ASCEND)
    assert "huawei.com/Ascend910B3-memory" in want
    assert sorted(managed) == sorted(matched) == sorted(want)
