"""The Kubernetes edge: the only package that imports kubernetes_asyncio.

``open_client(KubeSettings)`` → ``KubeClient``; ``Api`` for typed calls; ``Informer`` for list-then-watch.
Objects are the API server's JSON dicts (``KubeObject``), never kubernetes-asyncio model classes.
"""

from vgpu_scheduler.shared.k8s.api import Api, metadata_patch
from vgpu_scheduler.shared.k8s.client import KubeClient, KubeSettings, TokenBucket, load_configuration, open_client
from vgpu_scheduler.shared.k8s.errors import (
    AlreadyBoundError,
    DisruptionBudgetError,
    ExpiredError,
    KubeRequestError,
    StaleVersionError,
    UidMismatchError,
)
from vgpu_scheduler.shared.k8s.informer import (
    EventKind,
    Handler,
    Informer,
    InformerSettings,
    InformerStats,
    Resource,
    WatchEvent,
)
from vgpu_scheduler.shared.k8s.objects import KubeObject, ObjectKey
from vgpu_scheduler.shared.k8s.settings import DEFAULT_CALL_TIMEOUT_S, kube_settings_from
from vgpu_scheduler.shared.protocol.events import EventType

__all__ = [
    "DEFAULT_CALL_TIMEOUT_S",
    "AlreadyBoundError",
    "Api",
    "DisruptionBudgetError",
    "EventKind",
    "EventType",
    "ExpiredError",
    "Handler",
    "Informer",
    "InformerSettings",
    "InformerStats",
    "KubeClient",
    "KubeObject",
    "KubeRequestError",
    "KubeSettings",
    "ObjectKey",
    "Resource",
    "StaleVersionError",
    "TokenBucket",
    "UidMismatchError",
    "WatchEvent",
    "kube_settings_from",
    "load_configuration",
    "metadata_patch",
    "open_client",
]
