"""Redis URLs: the Sentinel form, parsed without importing redis (configuration validates it at start-up)."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")


@dataclass(frozen=True, slots=True)
class SentinelUrl:
    """``redis+sentinel://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB][?sentinel_auth=no]``.

    The hosts are Sentinels (port 26379 by default); ``SERVICE`` is the monitored primary's name (Sentinel's
    ``sentinel monitor <name> ...``); ``DB`` the database number (0). ``rediss+sentinel://`` speaks TLS to the
    Sentinels and to the data nodes. The credentials (from the URL or ``--redis-password-file``) are used for the
    data nodes and, unless ``sentinel_auth=no``, for the Sentinels too (a Sentinel with ``requirepass``)."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = None
    sentinel_auth: bool = True


def is_sentinel_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SENTINEL_SCHEMES


def parse_sentinel_url(url: str) -> SentinelUrl:
    """Parse a Sentinel URL (see :class:`SentinelUrl`); ``ValueError`` with what is wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SENTINEL_SCHEMES:
        raise ValueError("expected redis+sentinel:// or rediss+sentinel://")
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        hosts, userinfo = netloc, ""
    username: str | None = None
    password: str | None = None
    if userinfo:
        user, colon, pw = userinfo.partition(":")
        username = urllib.parse.unquote(user) or None
        password = urllib.parse.unquote(pw) if colon else None
    sentinels: list[tuple[str, int]] = []
    for item in hosts.split(","):
        if not item:
            raise ValueError("an empty Sentinel address (expected HOST[:PORT],HOST[:PORT]...)")
        if item.startswith("["):  # [IPv6]:port
            host, _, tail = item[1:].partition("]")
            port_text = tail[1:] if tail.startswith(":") else ""
        else:
            host, _, port_text = item.partition(":")
        if not host:
            raise ValueError(f"Sentinel address {item!r} has no host")
        if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
            raise ValueError(f"Sentinel address {item!r}: bad port")
        sentinels.append((host, int(port_text) if port_text else 26379))
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise ValueError("no service name: expected redis+sentinel://HOST:PORT,.../SERVICE[/DB]")
    if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise ValueError(f"bad path {'/' + path!r}: expected /SERVICE or /SERVICE/DB (a number)")
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(params) - {"sentinel_auth"})
    if unknown:
        raise ValueError(f"unknown parameter {unknown[0]!r} (only sentinel_auth=yes|no)")
    auth_text = (params.get("sentinel_auth") or ["yes"])[-1].lower()
    if auth_text not in ("yes", "no", "true", "false", "1", "0"):
        raise ValueError("sentinel_auth must be yes or no")
    return SentinelUrl(
        sentinels=tuple(sentinels),
        service=urllib.parse.unquote(parts[0]),
        db=int(parts[1]) if len(parts) == 2 else 0,
        tls=scheme.lower().startswith("rediss"),
        username=username,
        password=password,
        sentinel_auth=auth_text in ("yes", "true", "1"),
    )
