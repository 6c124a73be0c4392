"""``kube_settings_from``: HAMi's kube flags → the client's settings; ``--kube-timeout 0`` still has a deadline."""

from __future__ import annotations

import pytest

from vgpu_scheduler.shared.config import CommonSettings, KubeSettings, Service
from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.k8s import DEFAULT_CALL_TIMEOUT_S, kube_settings_from


def common(**kube: object) -> CommonSettings:
    return CommonSettings(service=Service.INFORMER, instance_id="i", kube=KubeSettings(**kube))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("timeout_s", "default_s", "expected_s"),
    [
        pytest.param(0.0, None, DEFAULT_CALL_TIMEOUT_S, id="zero-means-the-shared-default"),
        pytest.param(0.0, 30.0, 30.0, id="zero-means-the-service-default"),
        pytest.param(7.5, None, 7.5, id="given"),
        pytest.param(7.5, 30.0, 7.5, id="given-beats-the-service-default"),
    ],
)
def test_every_call_keeps_a_deadline(timeout_s: float, default_s: float | None, expected_s: float) -> None:
    c = common(server="http://emulator", qps=3.0, burst=4, timeout_s=timeout_s)
    k = kube_settings_from(c) if default_s is None else kube_settings_from(c, default_timeout_s=default_s)
    assert (k.server, k.kubeconfig, k.qps, k.burst, k.timeout_s) == ("http://emulator", None, 3.0, 4, expected_s)


def test_the_kubeconfig_is_passed_on() -> None:
    k = kube_settings_from(common(kubeconfig="/etc/kube/config"))
    assert (k.kubeconfig, k.server) == ("/etc/kube/config", None)


@pytest.mark.parametrize(
    ("qps", "burst", "ok"),
    [
        pytest.param(5.0, 0, False, id="rate-without-burst"),
        pytest.param(0.0, 0, True, id="no-rate-limit-needs-no-burst"),
        pytest.param(5.0, 1, True, id="smallest-burst"),
    ],
)
def test_a_zero_burst_with_a_rate_is_a_config_error_naming_the_flags(qps: float, burst: int, ok: bool) -> None:
    c = common(qps=qps, burst=burst)
    if ok:
        assert kube_settings_from(c).burst == burst
    else:
        with pytest.raises(ConfigError, match=r"--kube-burst must be at least 1 while --kube-qps is above 0"):
            kube_settings_from(c)


def test_the_user_agent_names_the_service_so_the_api_servers_audit_log_tells_services_apart() -> None:
    assert kube_settings_from(common()).user_agent == "vgpu-scheduler-informer"
    extender = CommonSettings(service=Service.EXTENDER, instance_id="i")
    assert kube_settings_from(extender).user_agent == "vgpu-scheduler-extender"
