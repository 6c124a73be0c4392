"""The Sentinel form of --redis-url: parsed into Sentinels, service, database, TLS and credentials; checked at
start-up with one line naming what is wrong."""

from __future__ import annotations

import re

import pytest

from vgpu_scheduler.shared.config import Service, settings_for
from vgpu_scheduler.shared.config.redisurl import SentinelUrl, is_sentinel_url, parse_sentinel_url
from vgpu_scheduler.shared.errors import ConfigError


def test_sentinel_url_names_every_sentinel_the_service_and_the_database() -> None:
    assert parse_sentinel_url("redis+sentinel://h1:26379,h2:26380,h3/mymaster/2") == SentinelUrl(
        sentinels=(("h1", 26379), ("h2", 26380), ("h3", 26379)), service="mymaster", db=2
    )


def test_sentinel_url_with_tls_credentials_ipv6_and_no_sentinel_auth() -> None:
    parsed = parse_sentinel_url("rediss+sentinel://app:p%40ss@[::1]:5000,s2/primary?sentinel_auth=no")
    assert parsed == SentinelUrl(
        sentinels=(("::1", 5000), ("s2", 26379)),
        service="primary",
        db=0,
        tls=True,
        username="app",
        password="p@ss",
        sentinel_auth=False,
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://h1,h2", "no service name"),
        ("redis+sentinel://h1,,h2/m", "an empty Sentinel address"),
        ("redis+sentinel://:26379/m", "has no host"),
        ("redis+sentinel://h1:0/m", "bad port"),
        ("redis+sentinel://h1:99999/m", "bad port"),
        ("redis+sentinel://h1/m/0/extra", "bad path"),
        ("redis+sentinel://h1/m?sentinel_auth=maybe", "sentinel_auth must be yes or no"),
        ("redis://h1/m", "expected redis+sentinel://"),
    ],
)
def test_bad_sentinel_urls_say_what_is_wrong(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_sentinel_url(url)


def test_only_the_sentinel_schemes_are_sentinel_urls() -> None:
    assert is_sentinel_url("redis+sentinel://h/m") and is_sentinel_url("REDISS+SENTINEL://h/m")
    assert not is_sentinel_url("redis://h:6379/0") and not is_sentinel_url("unix:///run/redis.sock")


def test_every_service_accepts_a_sentinel_url_and_the_wait_flags() -> None:
    url = "redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster/0"
    for service in (Service.REGISTRAR, Service.INFORMER, Service.EXTENDER):
        settings = settings_for(service, [f"--redis-url={url}", "--redis-wait-timeout=100ms"], {})
        assert settings.common.redis_url == url
        assert settings.common.redis_wait_replicas is None  # the store decides: 1 for Sentinel
        assert settings.common.redis_wait_timeout_s == pytest.approx(0.1)
    explicit = settings_for(Service.EXTENDER, [f"--redis-url={url}", "--redis-wait-replicas=2"], {})
    assert explicit.common.redis_wait_replicas == 2


def test_a_password_in_a_sentinel_url_excludes_the_password_file() -> None:
    with pytest.raises(ConfigError, match="give one"):
        settings_for(
            Service.EXTENDER,
            ["--redis-url=redis+sentinel://:secret@s1/mymaster", "--redis-password-file=/etc/hostname"],
            {},
        )


def test_waiting_for_replicas_needs_a_redis_url() -> None:
    with pytest.raises(ConfigError, match="--redis-wait-replicas needs --redis-url"):
        settings_for(Service.ALL_IN_ONE, ["--redis-wait-replicas=1"], {})
    assert settings_for(Service.ALL_IN_ONE, ["--redis-wait-replicas=0"], {}).common.redis_wait_replicas == 0
