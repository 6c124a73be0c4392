"""The Dockerfile and docker-compose.yml, checked without a Docker engine: the Dockerfile copies paths that
exist and are not excluded from the build context, runs as the non-root uid the chart expects and starts the
console script; the compose file wires every service with health checks and health-gated start-up order."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import tomllib
from typing import Any

import pytest
import yaml

from tests.unit.deploy.conftest import REPO

VGPU_SERVICES = ("emulator", "registrar", "informer", "extender-1", "extender-2", "driver")


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            instruction, _, rest = stripped.partition(" ")
            out.append((instruction.upper(), rest.strip()))
    return out


def dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, enough for our patterns: a pattern excludes the path or any of its parents."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        if pattern.startswith("**/"):  # any depth: match one path component
            if any(fnmatch.fnmatch(part, pattern[3:]) for part in parts):
                return True
        elif any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes):
            return True
    return False


def test_dockerfile_copies_existing_paths_that_reach_the_build_context() -> None:
    patterns = dockerignore_patterns()
    sources = []
    for instruction, rest in dockerfile_instructions():
        if instruction == "COPY" and not rest.startswith("--from"):
            *srcs, _dest = rest.split()
            sources += srcs
    assert sources, "the Dockerfile copies nothing"
    for src in sources:
        assert (REPO / src).exists(), f"COPY {src}: no such path"
        assert not ignored(src, patterns), f"COPY {src}: excluded by .dockerignore"


def test_dockerfile_copies_the_package_with_the_folders_its_links_point_at() -> None:
    """vgpu_scheduler/ is its __init__.py and two relative links (docs/layout.md): copied without the folders they
    point at, side by side as in the repository, the links dangle and `pip install .` builds a package without its
    subpackages, and the build does not fail."""
    copies = {}
    for instruction, rest in dockerfile_instructions():
        if instruction == "COPY" and not rest.startswith("--from"):
            *srcs, dest = rest.split()
            for src in srcs:
                copies[src] = os.path.normpath(dest if len(srcs) == 1 else os.path.join(dest, src))
    assert copies.get("vgpu_scheduler") == "vgpu_scheduler"
    links = [path for path in (REPO / "vgpu_scheduler").iterdir() if path.is_symlink()]
    assert links, "vgpu_scheduler/ has no links"
    for link in links:
        target = os.path.normpath(os.path.join("vgpu_scheduler", os.readlink(link)))
        assert copies.get(target) == target, f"{link.name} -> {target}: not copied beside the package"


def test_dockerfile_installs_the_package_and_starts_the_console_script() -> None:
    steps = dockerfile_instructions()
    bases = [rest for instruction, rest in steps if instruction == "FROM"]
    assert all(base.startswith("python:3.11-slim") for base in bases)
    assert any(instruction == "RUN" and re.search(r"pip install \.$", rest) for instruction, rest in steps)
    [entrypoint] = [rest for instruction, rest in steps if instruction == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["vgpu-scheduler"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert "vgpu-scheduler" in scripts


def test_image_runs_as_the_non_root_user_the_chart_expects() -> None:
    [user] = [rest for instruction, rest in dockerfile_instructions() if instruction == "USER"]
    uid, _, gid = user.partition(":")
    values = yaml.safe_load((REPO / "deploy/helm/vgpu-scheduler/values.yaml").read_text(encoding="utf-8"))
    assert int(uid) != 0
    assert int(uid) == values["podSecurityContext"]["runAsUser"]
    assert int(gid) == values["podSecurityContext"]["runAsGroup"]
    exposes = [rest for instruction, rest in dockerfile_instructions() if instruction == "EXPOSE"]
    exposed = {int(port) for rest in exposes for port in rest.split()}
    assert exposed == {values["extender"]["port"], values["metricsPort"]}


def test_dockerignore_keeps_the_context_small_but_the_build_inputs_in() -> None:
    patterns = dockerignore_patterns()
    for path in (".git", ".venv", "tests", "shared/codec/__pycache__"):
        assert ignored(path, patterns), path
    for path in ("pyproject.toml", "README.md", "shared/domain/model.py", "services/cli.py"):
        assert not ignored(path, patterns), path


# --------------------------------------------------------------------------------------------
# docker-compose.yml
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    result: dict[str, Any] = data["services"]
    return result


def test_compose_runs_the_whole_system(services: dict[str, Any]) -> None:
    assert set(services) == {"redis", *VGPU_SERVICES}
    assert services["redis"]["image"].startswith("redis:")
    for name in VGPU_SERVICES:
        service = services[name]
        assert service["image"] == "vgpu-scheduler:dev" and service["build"]["context"] == "."
        assert (REPO / service["build"]["context"] / "Dockerfile").is_file()
        for volume in service["volumes"]:
            source = volume.split(":")[0]
            assert (REPO / source).exists(), f"{name}: volume source {source} missing"


@pytest.mark.parametrize(
    ("name", "needs"),
    [
        pytest.param("registrar", {"redis", "emulator"}, id="registrar"),
        pytest.param("informer", {"redis", "emulator"}, id="informer"),
        pytest.param("extender-1", {"redis", "emulator", "registrar", "informer"}, id="extender-1"),
        pytest.param("extender-2", {"redis", "emulator", "registrar", "informer"}, id="extender-2"),
        pytest.param("driver", {"extender-1", "extender-2"}, id="driver"),
    ],
)
def test_compose_starts_in_health_gated_order(services: dict[str, Any], name: str, needs: set[str]) -> None:
    depends = services[name]["depends_on"]
    assert set(depends) == needs
    for dependency in needs:
        assert depends[dependency] == {"condition": "service_healthy"}
        assert services[dependency]["healthcheck"]["test"], f"{dependency} has no health check"


def test_compose_health_checks_probe_the_ports_the_commands_bind(services: dict[str, Any]) -> None:
    for name in ("registrar", "informer", "extender-1", "extender-2", "emulator"):
        service = services[name]
        probe = " ".join(service["healthcheck"]["test"])
        port = re.search(r"127\.0\.0\.1:(\d+)/", probe)
        assert port is not None, name
        binds = [a for a in service["command"] if re.match(r"--(http_bind|metrics-bind-address|bind)=", a)]
        path = re.search(r":\d+(/\w+)", probe)
        assert path is not None
        expected = "--http_bind" if name.startswith("extender") else "--metrics-bind-address"
        if name == "emulator":
            expected = "--bind"
        assert any(b.startswith(expected) and b.endswith(f":{port.group(1)}") for b in binds), name
    assert services["driver"]["restart"] == "no"


def test_compose_points_every_service_at_the_emulator_and_redis(services: dict[str, Any]) -> None:
    emulator_bind = next(a for a in services["emulator"]["command"] if a.startswith("--bind="))
    port = emulator_bind.rsplit(":", 1)[1]
    for name in ("registrar", "informer", "extender-1", "extender-2", "driver"):
        assert f"--kube-server=http://emulator:{port}" in services[name]["command"], name
        assert services[name]["environment"]["VGPU_REDIS_URL"] == "redis://redis:6379/0"
    extender_urls = [a for a in services["driver"]["command"] if a.startswith("--extender-url=")]
    assert extender_urls == ["--extender-url=http://extender-1:8080", "--extender-url=http://extender-2:8080"]
