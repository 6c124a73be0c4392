"""How the operator commands reach Redis and the API server, and how their failures become one line.

They connect like the services (``--redis-url``, ``--key-prefix``, ``--kubeconfig`` / ``--kube-server``), with one
difference suited to a command run from a laptop: with neither kube flag and outside a cluster, the kubeconfig
comes from ``$KUBECONFIG`` (its first file) or ``~/.kube/config``, as ``kubectl`` finds it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from vgpu_scheduler.shared.config import CommonSettings
from vgpu_scheduler.shared.errors import ConfigError, TransientError
from vgpu_scheduler.shared.k8s import Api, kube_settings_from, open_client
from vgpu_scheduler.shared.k8s.client import KubeSettings
from vgpu_scheduler.shared.store import ConnectionSettings, Store, StoreStatus, SyncMarker, connect

CALL_TIMEOUT_S = 10.0
"""The deadline of one API call when ``--kube-timeout`` is 0."""
REDIS_SETTINGS = ConnectionSettings(
    socket_timeout_s=5.0, connect_timeout_s=3.0, max_connections=4, client_name="vgpu-scheduler-inspect"
)


class InspectError(Exception):
    """A failure the command reports as one line (exit code 1)."""


def one_line(text: object) -> str:
    """``text`` with every run of whitespace (newlines included) collapsed to one space."""
    return " ".join(str(text).split())


def default_kubeconfig(env: Mapping[str, str], home: Path) -> str | None:
    """Where ``kubectl`` would look outside a cluster: ``$KUBECONFIG``'s first file, else ``~/.kube/config``.
    None inside a cluster (``KUBERNETES_SERVICE_HOST`` set: the service account is used) or when neither exists."""
    if env.get("KUBERNETES_SERVICE_HOST"):
        return None
    for path in env.get("KUBECONFIG", "").split(os.pathsep):
        if path and Path(path).expanduser().is_file():
            return str(Path(path).expanduser())
    candidate = home / ".kube" / "config"
    return str(candidate) if candidate.is_file() else None


def kube_settings(common: CommonSettings, env: Mapping[str, str]) -> KubeSettings:
    """The kube client settings: the flags, with the kubectl-like fallback of the module docstring."""
    settings = dataclasses.replace(
        kube_settings_from(common, default_timeout_s=CALL_TIMEOUT_S), user_agent="vgpu-scheduler-inspect"
    )
    if settings.server or settings.kubeconfig:
        return settings
    fallback = default_kubeconfig(env, Path.home())
    if fallback is None and not env.get("KUBERNETES_SERVICE_HOST"):
        raise ConfigError(
            "no Kubernetes configuration: give --kubeconfig or --kube-server, set KUBECONFIG, or run inside a cluster"
        )
    return dataclasses.replace(settings, kubeconfig=fallback)


@asynccontextmanager
async def open_store(common: CommonSettings) -> AsyncIterator[Store]:
    """The store at ``--redis-url``, checked to answer (a ping) before anything else is read."""
    assert common.redis_url is not None  # required by the settings
    store = Store.create(connect(common.redis_url, REDIS_SETTINGS), prefix=common.key_prefix)
    try:
        try:
            await store.meta.ping()
        except TransientError as e:
            raise InspectError(f"cannot reach Redis at {_safe_url(common.redis_url)}: {one_line(e)}") from e
        yield store
    finally:
        await store.aclose()


@asynccontextmanager
async def open_api(settings: KubeSettings) -> AsyncIterator[Api]:
    """An API client (read-only use) for the operator commands."""
    async with open_client(settings) as client:
        yield Api(client, component="vgpu-scheduler-inspect")


def store_warning(status: StoreStatus) -> str | None:
    """Why the store's figures may be incomplete right now (None: the registrar and informer have synced)."""
    if status.epoch is None:
        return "the store is empty: the registrar and informer have not loaded it (are they running on this Redis?)"
    missing = sorted(m.value for m in SyncMarker if not status.is_synced(m))
    if missing:
        return f"the store is not fully synced yet (missing: {', '.join(missing)}): figures may be incomplete"
    return None


def _safe_url(url: str) -> str:
    """The URL without its password."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"
