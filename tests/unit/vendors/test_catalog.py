"""Which device families a deployment schedules (shared/vendors/catalog.py), as HAMi v2.10.0 decides it.

HAMi's ``pkg/scheduler/config/config.go`` initialises every family it knows whatever the device config holds
(``InitDevicesWithConfig``; ``InitDefaultDevices`` when there is no file), each with its defaults; Ascend and
Iluvatar return no device unless ``--enable-ascend`` / ``--enable-iluvatar`` is set (``ascend.InitDevices``,
``iluvatar.InitIluvatarDevice``).
"""

from __future__ import annotations

import pytest

from vgpu_scheduler.shared.config.options import ENABLE_FLAG_OPTIONS, OPTIONS_BY_NAME, Service
from vgpu_scheduler.shared.config.settings import settings_for
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.vendors import amd, ascend, cambricon, hygon
from vgpu_scheduler.shared.vendors.catalog import (
    BUILDERS,
    ENABLE_FLAGS,
    FAMILIES,
    all_vendors,
    enable_flag_of,
    enabled_vendors,
)

DEFAULT_ON: tuple[str, ...] = ("NVIDIA", "DCU", "MLU", "AMD", "Biren", "Vastai", "Mthreads", "Metax-GPU")
DEFAULT_ON += ("Metax-SGPU", "GCU", "Enflame", "AWSNeuron", "kunlun", "XPU")
"""What HAMi v2.10 schedules with no device config and no flag (NVIDIA first, then the families' order)."""

ILUVATAR_DEFAULT_CHIPS = ("MR-V100", "MR-V50", "BI-V150", "BI-V100")

ASCEND_DEFAULT_CHIPS = (
    "Ascend910A",
    "Ascend910B2",
    "Ascend910B3",
    "Ascend910B4-1",
    "Ascend910B4",
    "Ascend310P",
    "Ascend910C",
)


def test_no_device_config_enables_every_default_family_with_hamis_names() -> None:
    vendors = enabled_vendors(NvidiaConfig())
    assert vendors.names == DEFAULT_ON
    names = {v.name: (v.resources.count, v.resources.memory, v.resources.cores) for v in vendors}
    assert {k: v for k, v in names.items() if k in ("NVIDIA", "DCU", "MLU", "AMD")} == {
        "NVIDIA": ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"),
        "DCU": ("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"),
        "MLU": ("cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"),
        "AMD": ("amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores"),
    }


def test_a_section_overrides_the_defaults_key_by_key() -> None:
    vendors = enabled_vendors(NvidiaConfig(), {"hygon": {"resourceCountName": "example.com/dcu"}})
    dcu = vendors.get("DCU")
    assert dcu is not None
    assert (dcu.resources.count, dcu.resources.memory) == ("example.com/dcu", "hygon.com/dcumem")
    assert vendors.names == DEFAULT_ON


def test_ascend_is_opt_in_as_in_hami() -> None:
    # the section alone does not enable it (HAMi's InitDevices returns nothing without --enable-ascend)
    assert enabled_vendors(NvidiaConfig(), {"vnpus": None}).names == DEFAULT_ON
    # the flag alone: HAMi's default chips
    assert enabled_vendors(NvidiaConfig(), None, {"enable-ascend"}).names[4:11] == ASCEND_DEFAULT_CHIPS
    # the flag and a section: the section's chips
    section = {"configs": [{"commonWord": "Ascend310P", "chipName": "310P3", "memoryAllocatable": 21527}]}
    assert enabled_vendors(NvidiaConfig(), {"vnpus": section}, {"enable-ascend"}).names[4:] == (
        "Ascend310P",
        *DEFAULT_ON[4:],
    )


def test_a_bad_section_is_an_error_even_when_its_family_is_not_enabled() -> None:
    with pytest.raises(ConfigError, match="vnpus"):
        enabled_vendors(NvidiaConfig(), {"vnpus": {"hamiVnpuMode": "nonsense"}})


def test_iluvatar_is_opt_in_as_in_hami() -> None:
    assert not set(ILUVATAR_DEFAULT_CHIPS) & set(enabled_vendors(NvidiaConfig(), {"iluvatars": None}).names)
    names = enabled_vendors(NvidiaConfig(), None, {"enable-iluvatar"}).names
    assert names == (*DEFAULT_ON[:4], *ILUVATAR_DEFAULT_CHIPS, *DEFAULT_ON[4:])


def test_every_family_exports_the_contract_and_its_flag_is_an_option() -> None:
    sections = [hygon.SECTION, cambricon.SECTION, amd.SECTION, "vnpus", "iluvatars", "biren", "vastai", "mthreads"]
    sections += ["metax", "enflame"]
    sections += ["awsneuron", "kunlun"]
    assert [f.SECTION for f in FAMILIES] == list(BUILDERS) == sections
    assert ENABLE_FLAGS == ENABLE_FLAG_OPTIONS
    for family in FAMILIES:
        assert family.ENABLE_FLAG is None or family.ENABLE_FLAG in ENABLE_FLAGS
        assert family.build(None), family.SECTION  # HAMi's defaults give at least one vendor
    assert ascend.ENABLE_FLAG == "enable-ascend"
    for flag in ENABLE_FLAGS:
        assert OPTIONS_BY_NAME[flag].default == "false"


def test_all_vendors_holds_the_opt_in_families_too() -> None:
    assert all_vendors().names == (*DEFAULT_ON[:4], *ASCEND_DEFAULT_CHIPS, *ILUVATAR_DEFAULT_CHIPS, *DEFAULT_ON[4:])


def test_enable_flag_of_names_the_flag_of_an_opt_in_vendor() -> None:
    assert enable_flag_of("Ascend910B3") == "enable-ascend"
    assert enable_flag_of("DCU") is None
    assert enable_flag_of("nonsense") is None


@pytest.mark.parametrize("service", [Service.REGISTRAR, Service.INFORMER, Service.EXTENDER, Service.SIMULATE])
def test_the_flags_reach_every_process_settings(service: Service) -> None:
    extra = ["--redis-url=redis://127.0.0.1"] if service is not Service.SIMULATE else []
    plain = settings_for(service, extra, {})
    assert plain.common.enable_flags == frozenset()
    given = settings_for(service, [*extra, "--enable-ascend", "--enable-iluvatar=false"], {})
    assert given.common.enable_flags == frozenset({"enable-ascend"})
    from_env = settings_for(service, extra, {"VGPU_ENABLE_ASCEND": "true", "VGPU_ENABLE_ILUVATAR": "1"})
    assert from_env.common.enable_flags == frozenset({"enable-ascend", "enable-iluvatar"})
