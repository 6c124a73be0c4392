"""From the command line to the client: ``CommonSettings.kube`` (HAMi's flags) → :class:`KubeSettings`.

``--kube-timeout 0`` is HAMi's "no timeout"; we always keep a per-call deadline, so 0 becomes the service's
default. This module may import ``shared.config`` (``shared.config`` never imports ``shared.k8s``).
"""

from __future__ import annotations

from vgpu_scheduler.shared.config import CommonSettings
from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.k8s.client import KubeSettings

USER_AGENT = "vgpu-scheduler"
DEFAULT_CALL_TIMEOUT_S = 10.0
"""The per-call deadline when ``--kube-timeout`` is 0: well inside kube-scheduler's extender timeout."""


def kube_settings_from(common: CommonSettings, *, default_timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> KubeSettings:
    """The kube client settings of a service: ``--kubeconfig``/``--kube-server``, ``--kube-qps``, ``--kube-burst``,
    ``--kube-timeout`` (0 → ``default_timeout_s``). ConfigError, naming the flags, for a burst of 0 with a rate.
    The user agent names the service (``vgpu-scheduler-informer``), so the API server's audit log tells the
    services apart."""
    k = common.kube
    if k.qps > 0 and k.burst < 1:
        raise ConfigError(f"--kube-burst must be at least 1 while --kube-qps is above 0 (got {k.burst} and {k.qps:g})")
    return KubeSettings(
        kubeconfig=k.kubeconfig,
        server=k.server,
        qps=k.qps,
        burst=k.burst,
        timeout_s=k.timeout_s if k.timeout_s > 0 else default_timeout_s,
        user_agent=f"{USER_AGENT}-{common.service.value}",
    )
