"""HAMi's device config file: golden load of the chart-shaped example, validation with key paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vgpu_scheduler.shared.devconfig import (
    LegacyOverrides,
    apply_legacy_overrides,
    load_device_config,
    parse_device_config,
)
from vgpu_scheduler.shared.domain.model import MigAllowlistEntry, MigGeometryEntry, MigTemplate, NvidiaConfig
from vgpu_scheduler.shared.errors import ConfigError


def test_golden_load_of_the_chart_shaped_example(repo_root: Path) -> None:
    path = repo_root / "examples" / "device-config.yaml"
    loaded = load_device_config(str(path))
    n = loaded.nvidia
    assert n.resource_names == frozenset(
        {
            "nvidia.com/gpu",
            "nvidia.com/gpumem",
            "nvidia.com/gpumem-percentage",
            "nvidia.com/gpucores",
            "nvidia.com/priority",
        }
    )
    assert (n.default_memory, n.default_cores, n.default_gpu_num, n.memory_factor) == (0, 0, 1, 1)
    assert (n.overwrite_env, n.gpu_core_policy, n.runtime_class_name, n.disable_core_limit) == (
        False,
        "default",
        "",
        False,
    )
    assert n.mig_profile_allowlist[:2] == (
        MigAllowlistEntry(models=("A30",), profiles=("1g.6gb", "2g.12gb", "4g.24gb")),
        MigAllowlistEntry(
            models=("A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"),
            profiles=("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"),
        ),
    )
    assert len(n.mig_profile_allowlist) == 4
    a30, a100 = n.known_mig_geometries
    assert a30 == MigGeometryEntry(
        models=("A30",),
        geometries=(
            (MigTemplate("1g.6gb", 6144, 25, 4),),
            (MigTemplate("2g.12gb", 12288, 50, 2),),
            (MigTemplate("4g.24gb", 24576, 100, 1),),
        ),
    )
    assert a100.geometries[1] == (MigTemplate("2g.10gb", 10240, 28, 3), MigTemplate("1g.5gb", 5120, 14, 1))
    assert [t.core_pct for g in a100.geometries for t in g] == [14, 28, 14, 42, 100]
    # the other vendors' sections go to their vendors (shared.vendors.catalog), unparsed here
    sections = {"cambricon", "hygon", "iluvatars", "amd", "vnpus", "biren", "vastai", "mthreads", "metax", "enflame"}
    sections |= {"awsneuron"}
    sections |= {"kunlun"}
    assert set(loaded.vendor_sections) == sections
    assert set(loaded.notes) == {
        "nvidia.preConfiguredDeviceMemory: device-plugin key, ignored by the scheduler",
        "nvidia.deviceSplitCount: device-plugin key, ignored by the scheduler",
        "nvidia.deviceMemoryScaling: device-plugin key, ignored by the scheduler",
        "nvidia.deviceCoreScaling: device-plugin key, ignored by the scheduler",
        "nvidia.enableNumaTopology: device-plugin key, ignored by the scheduler",
        "nvidia.libCudaLogLevel: device-plugin key, ignored by the scheduler",
    }
    assert loaded.source == str(path)


def test_non_default_scalars() -> None:
    doc = {
        "nvidia": {
            "resourceCountName": "example.com/vgpu",
            "defaultMemory": 4096,
            "defaultCores": 50,
            "defaultGPUNum": 2,
            "memoryFactor": 1024,
            "overwriteEnv": True,
            "gpuCorePolicy": "force",
            "runtimeClassName": "nvidia",
            "disableCoreLimit": "true",  # HAMi's docs spell it as a string
        }
    }
    n = parse_device_config(doc).nvidia
    assert n == NvidiaConfig(
        resource_count_name="example.com/vgpu",
        default_memory=4096,
        default_cores=50,
        default_gpu_num=2,
        memory_factor=1024,
        overwrite_env=True,
        gpu_core_policy="force",
        runtime_class_name="nvidia",
        disable_core_limit=True,
    )


def test_other_vendor_only_file_keeps_nvidia_defaults() -> None:
    loaded = parse_device_config({"cambricon": {"resourceCountName": "cambricon.com/vmlu"}, "extra": {"a": 1}})
    assert loaded.nvidia == NvidiaConfig()
    assert "extra: unknown top-level section ignored" in loaded.notes


def test_empty_keys_keep_defaults_with_a_note() -> None:
    loaded = parse_device_config({"nvidia": {"defaultMemory": None, "gpuCorePolicy": None, "memoryfactor": 3}})
    assert loaded.nvidia == NvidiaConfig()
    assert "nvidia.defaultMemory: empty, HAMi's default kept" in loaded.notes
    assert "nvidia.memoryfactor: unknown key ignored" in loaded.notes


BAD = [
    ({"nvidia": {"memoryFactor": "x"}}, "nvidia.memoryFactor: expected a positive integer, got 'x'"),
    ({"nvidia": {"memoryFactor": 0}}, "nvidia.memoryFactor: expected a positive integer, got 0"),
    ({"nvidia": {"memoryFactor": True}}, "nvidia.memoryFactor: expected a positive integer, got True"),
    ({"nvidia": {"defaultCores": 101}}, "nvidia.defaultCores: expected an integer from 0 to 100, got 101"),
    ({"nvidia": {"defaultMemory": -1}}, "nvidia.defaultMemory: expected a non-negative integer (MiB), got -1"),
    ({"nvidia": {"defaultGPUNum": "1"}}, "nvidia.defaultGPUNum: expected a non-negative integer, got '1'"),
    ({"nvidia": {"resourceCountName": ""}}, "nvidia.resourceCountName: expected a non-empty string, got ''"),
    ({"nvidia": {"overwriteEnv": "yes"}}, "nvidia.overwriteEnv: expected true or false, got 'yes'"),
    ({"nvidia": {"gpuCorePolicy": "strict"}}, "nvidia.gpuCorePolicy: expected one of default, force, disable"),
    ({"nvidia": {"runtimeClassName": 3}}, "nvidia.runtimeClassName: expected a string, got 3"),
    ({"nvidia": ["a"]}, "nvidia: expected a mapping, got list"),
    ({}, "(top level): expected a mapping with at least one non-empty vendor section"),
    ({"nvidia": {}, "hygon": None}, "(top level): expected a mapping with at least one non-empty vendor section"),
    (["nvidia"], "(top level): expected a mapping"),
    # migProfileAllowlist (hami-wire §7.1)
    ({"nvidia": {"migProfileAllowlist": {"models": ["A30"]}}}, "nvidia.migProfileAllowlist: expected a list"),
    (
        {"nvidia": {"migProfileAllowlist": [{"profiles": ["1g.6gb"]}]}},
        "nvidia.migProfileAllowlist[0].models: expected a list, got None",
    ),
    (
        {"nvidia": {"migProfileAllowlist": [{"models": [], "profiles": ["1g.6gb"]}]}},
        "nvidia.migProfileAllowlist[0].models: expected a non-empty list",
    ),
    (
        {"nvidia": {"migProfileAllowlist": [{"models": ["A30"], "profiles": []}]}},
        "nvidia.migProfileAllowlist[0].profiles: expected a non-empty list",
    ),
    (
        {"nvidia": {"migProfileAllowlist": [{"models": ["A30"], "profiles": ["1g.6gb", "big"]}]}},
        "nvidia.migProfileAllowlist[0].profiles[1]: expected a MIG profile like 1g.5gb, got 'big'",
    ),
    (
        {"nvidia": {"migProfileAllowlist": [{"models": ["A30"], "profiles": ["0g.1gb"]}]}},
        "nvidia.migProfileAllowlist[0].profiles[0]: expected a MIG profile like 1g.5gb, got '0g.1gb'",
    ),
    (
        {"nvidia": {"migProfileAllowlist": [{"models": [""], "profiles": ["1g.6gb"]}]}},
        "nvidia.migProfileAllowlist[0].models[0]: expected a non-empty string",
    ),
    # knownMigGeometries (hami-wire §7.2)
    (
        {"nvidia": {"knownMigGeometries": [{"models": ["A30"]}]}},
        "nvidia.knownMigGeometries[0].allowedGeometries: expected a list, got None",
    ),
    (
        {"nvidia": {"knownMigGeometries": [{"models": ["A30"], "allowedGeometries": []}]}},
        "nvidia.knownMigGeometries[0].allowedGeometries: expected a non-empty list of geometries",
    ),
    (
        {"nvidia": {"knownMigGeometries": [{"models": ["A30"], "allowedGeometries": [[]]}]}},
        "nvidia.knownMigGeometries[0].allowedGeometries[0]: expected a non-empty list of templates",
    ),
    (
        {"nvidia": {"knownMigGeometries": [{"models": ["A30"], "allowedGeometries": [{"name": "1g.6gb"}]}]}},
        "nvidia.knownMigGeometries[0].allowedGeometries[0]: expected a list",
    ),
    (
        {
            "nvidia": {
                "knownMigGeometries": [{"models": ["A30"], "allowedGeometries": [[{"name": "1g.6gb", "memory": 6144}]]}]
            }
        },
        "nvidia.knownMigGeometries[0].allowedGeometries[0][0].count: expected a positive integer, got None",
    ),
    (
        {
            "nvidia": {
                "knownMigGeometries": [
                    {"models": ["A30"], "allowedGeometries": [[{"name": "1g.6gb", "memory": "6G", "count": 4}]]}
                ]
            }
        },
        "nvidia.knownMigGeometries[0].allowedGeometries[0][0].memory: expected a positive integer (MiB), got '6G'",
    ),
    (
        {
            "nvidia": {
                "knownMigGeometries": [
                    {
                        "models": ["A30"],
                        "allowedGeometries": [[{"name": "1g.6gb", "memory": 6144, "count": 4, "core": 200}]],
                    }
                ]
            }
        },
        "nvidia.knownMigGeometries[0].allowedGeometries[0][0].core: expected an integer from 0 to 100, got 200",
    ),
    (
        {
            "nvidia": {
                "knownMigGeometries": [
                    {"models": ["A30"], "allowedGeometries": [[{"name": "six", "memory": 6144, "count": 4}]]}
                ]
            }
        },
        "nvidia.knownMigGeometries[0].allowedGeometries[0][0].name: expected a MIG profile like 1g.5gb, got 'six'",
    ),
]


@pytest.mark.parametrize(("doc", "message"), BAD, ids=[m.split(":")[0] + f"#{i}" for i, (_, m) in enumerate(BAD)])
def test_bad_device_config_names_the_file_and_key_path(doc: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_device_config(doc, source="/device-config.yaml")
    assert str(info.value).startswith("device config file /device-config.yaml: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_template_core_may_be_omitted_as_in_hamis_docs() -> None:
    doc = {
        "nvidia": {
            "knownMigGeometries": [
                {"models": ["A30"], "allowedGeometries": [[{"name": "1g.6gb", "memory": 6144, "count": 4}]]}
            ]
        }
    }
    (entry,) = parse_device_config(doc).nvidia.known_mig_geometries
    assert entry.geometries == ((MigTemplate("1g.6gb", 6144, 0, 4),),)


def test_yaml_errors_and_missing_files_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nvidia: [\n")
    with pytest.raises(ConfigError, match=rf"^device config file {bad}: not valid YAML"):
        load_device_config(str(bad))
    with pytest.raises(ConfigError, match="cannot read"):
        load_device_config(str(tmp_path / "missing.yaml"))


def test_round_trip_through_yaml_text(tmp_path: Path) -> None:
    path = tmp_path / "dc.yaml"
    path.write_text(
        yaml.safe_dump(
            {"nvidia": {"memoryFactor": 2, "migProfileAllowlist": [{"models": ["H100"], "profiles": ["1g.10gb"]}]}}
        )
    )
    n = load_device_config(str(path)).nvidia
    assert n.memory_factor == 2
    assert n.mig_profile_allowlist == (MigAllowlistEntry(("H100",), ("1g.10gb",)),)


def test_legacy_overrides_only_replace_given_fields() -> None:
    base = NvidiaConfig(default_memory=100, resource_core_name="x/cores")
    assert apply_legacy_overrides(base, LegacyOverrides()) is base
    out = apply_legacy_overrides(base, LegacyOverrides(default_cores=20, overwrite_env=False))
    assert out == NvidiaConfig(default_memory=100, resource_core_name="x/cores", default_cores=20)
