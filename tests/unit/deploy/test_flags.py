"""The command lines in the manifests and in docker-compose.yml are accepted by ``shared.config`` — the same
option table the services parse at start-up — and mean what the chart's values say."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.conftest import REPO, Obj, Objects
from vgpu_scheduler.shared.config import ExtenderSettings, InformerSettings, RegistrarSettings, Service, settings_for

FULL = "vgpu-scheduler"


def container_of(objs: Objects, name: str) -> Obj:
    containers: list[Obj] = objs.get("Deployment", name)["spec"]["template"]["spec"]["containers"]
    return containers[0]


def env_of(c: Obj) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def localise(args: list[str], replacements: dict[str, str]) -> list[str]:
    """Point in-container file paths at local files so the settings loader can read them."""
    out = []
    for arg in args:
        localised = arg
        for container_path, local in replacements.items():
            localised = localised.replace(f"={container_path}", f"={local}")
        out.append(localised)
    return out


@pytest.fixture
def files(manifests: Objects, tmp_path: Path) -> dict[str, str]:
    device = tmp_path / "device-config.yaml"
    device.write_text(manifests.get("ConfigMap", f"{FULL}-device")["data"]["device-config.yaml"], encoding="utf-8")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("cert", encoding="utf-8")
    key.write_text("key", encoding="utf-8")
    ca, password = tmp_path / "ca.crt", tmp_path / "password"
    ca.write_text("ca", encoding="utf-8")
    password.write_text("secret", encoding="utf-8")
    return {
        "/device-config.yaml": str(device),
        "/tls/tls.crt": str(cert),
        "/tls/tls.key": str(key),
        "/client-ca/ca.crt": str(ca),
        "/etc/vgpu-scheduler/redis/password": str(password),
    }


def settings_of(objs: Objects, component: str, files: dict[str, str]) -> Any:
    c = container_of(objs, f"{FULL}-{component}")
    subcommand, *args = c["args"]
    assert subcommand == component
    return settings_for(Service(component), localise(args, files), env_of(c))


def test_extender_flags(manifests: Objects, files: dict[str, str]) -> None:
    settings = settings_of(manifests, "extender", files)
    assert isinstance(settings, ExtenderSettings)
    assert (settings.http_bind.host, settings.http_bind.port) == ("0.0.0.0", 8443)
    assert settings.cert_file == files["/tls/tls.crt"] and settings.key_file == files["/tls/tls.key"]
    assert settings.scheduler_name == "vgpu-scheduler"
    assert settings.node_lock_timeout_s == 300 and settings.node_lock_retry_timeout_s == 28
    assert settings.reservation_grace_s == 120
    assert settings.common.redis_url == f"redis://{FULL}-redis.vgpu-system.svc:6379/0"
    assert settings.common.key_prefix == "vgpu"
    assert settings.client_ca_file == files["/client-ca/ca.crt"]
    assert settings.common.redis_password_file == files["/etc/vgpu-scheduler/redis/password"]
    assert settings.bind_timeout_s == 25
    assert settings.common.metrics_bind.port == 9395
    assert settings.common.nvidia.resource_count_name == "nvidia.com/gpu"


def test_registrar_flags(manifests: Objects, files: dict[str, str]) -> None:
    settings = settings_of(manifests, "registrar", files)
    assert isinstance(settings, RegistrarSettings)
    assert settings.lease_ttl_s == 15 and settings.node_label_selector == ()
    assert settings.common.key_prefix == "vgpu"


def test_informer_flags(manifests: Objects, files: dict[str, str]) -> None:
    settings = settings_of(manifests, "informer", files)
    assert isinstance(settings, InformerSettings)
    assert settings.lease_ttl_s == 15 and settings.reconcile_interval_s == 300
    assert settings.node_lock_timeout_s == 300 and settings.reservation_grace_s == 120


def test_the_node_label_selector_value_reaches_the_registrar(chart: Any, files: dict[str, str]) -> None:
    from tests.unit.deploy.conftest import render_objects

    objs = render_objects(chart, {"registrar": {"nodeLabelSelector": "gpu=on,zone=a"}})
    settings = settings_of(objs, "registrar", files)
    assert settings.node_label_selector == (("gpu", "on"), ("zone", "a"))


def test_auto_defrag_values_reach_the_extender_with_the_rights_they_need(
    chart: Any, manifests: Objects, files: dict[str, str]
) -> None:
    from tests.unit.deploy.conftest import render_objects

    off = settings_of(manifests, "extender", files)
    assert isinstance(off, ExtenderSettings) and not off.auto_defrag
    values = {"extender": {"autoDefrag": {"enabled": True, "movesPerMinute": 6, "movesPerNodePerMinute": 2}}}
    objs = render_objects(chart, values)
    on = settings_of(objs, "extender", files)
    assert isinstance(on, ExtenderSettings)
    assert (on.auto_defrag, on.defrag_moves_per_minute, on.defrag_moves_per_node_per_minute) == (True, 6, 2)
    rules = objs.get("ClusterRole", f"{FULL}-extender")["rules"]
    assert {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]} in rules
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["watch"]} in rules


# --------------------------------------------------------------------------------------------
# docker-compose.yml
# --------------------------------------------------------------------------------------------

COMPOSE_SERVICES = {"registrar": Service.REGISTRAR, "informer": Service.INFORMER, "extender-1": Service.EXTENDER}


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("name", sorted(COMPOSE_SERVICES))
def test_compose_commands_parse(name: str) -> None:
    service = compose()["services"][name]
    subcommand, *args = service["command"]
    assert subcommand == COMPOSE_SERVICES[name].value
    args = localise(args, {"/examples/device-config.yaml": str(REPO / "examples" / "device-config.yaml")})
    settings = settings_for(COMPOSE_SERVICES[name], args, service["environment"])
    common = settings.common
    assert common.kube.server == "http://emulator:8001"
    assert common.redis_url == "redis://redis:6379/0"


@pytest.mark.parametrize("name", ["emulator", "driver"])
def test_compose_commands_of_subcommands_not_in_the_option_table(name: str) -> None:
    """``emulator`` and the driver's ``simulate`` flags are parsed by their own modules (registered in cli.py)."""
    from vgpu_scheduler.services import cli
    from vgpu_scheduler.shared.config import normalize_argv

    command = compose()["services"][name]["command"]
    args = cli.build_parser().parse_args(normalize_argv(command))
    assert args.command == command[0]
    assert callable(args.run)
