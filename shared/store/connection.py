"""Redis clients: a real ``redis.asyncio`` client for a URL, or an embedded fakeredis server for ``simulate``.

Both speak RESP2 and return bytes. The embedded server runs the same Lua scripts (fakeredis runs them on
Lua 5.1 through lupa, like Redis; of the libraries Redis bundles it offers only ``cjson``, which is the only
one our scripts use).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.credentials import CredentialProvider, UsernamePasswordCredentialProvider

from vgpu_scheduler.shared.config.redisurl import is_sentinel_url, parse_sentinel_url
from vgpu_scheduler.shared.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Deadlines of every Redis call. ``socket_timeout_s`` bounds each reply (blocking reads stay below it);
    ``pool_timeout_s`` bounds the wait for a free connection when all ``max_connections`` are busy."""

    socket_timeout_s: float = 5.0
    connect_timeout_s: float = 3.0
    health_check_interval_s: float = 15.0
    max_connections: int = 64
    pool_timeout_s: float = 5.0
    client_name: str = "vgpu-scheduler"


DEFAULT_SETTINGS = ConnectionSettings()


class PasswordFileCredentials(CredentialProvider):
    """AUTH credentials whose password is read from a file for every new connection, so that a rotated Kubernetes
    Secret (a symlink swap in the mounted volume) applies to the next connection without a restart. The user, if
    any, is the URL's (``redis://USER@host``; none = Redis' ``default`` user)."""

    def __init__(self, password_file: str, username: str | None = None) -> None:
        self.password_file = password_file
        self.username = username

    def password(self) -> str:
        try:
            text = Path(self.password_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"--redis-password-file: cannot read {self.password_file}: {e}") from e
        return text.rstrip("\r\n")  # `echo pass > file` and `kubectl create secret --from-file` leave a newline

    def get_credentials(self) -> tuple[str] | tuple[str, str]:
        password = self.password()
        return (password,) if self.username is None else (self.username, password)

    async def get_credentials_async(self) -> tuple[str] | tuple[str, str]:
        return self.get_credentials()  # a small local file: reading it does not stall the loop


def _without_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without its ``user[:password]@`` part, and the user name it named (percent-decoded)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    username = urllib.parse.unquote(parts.username) if parts.username else None
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), username


OnPrimary = Callable[[AbstractConnection], Awaitable[None]]


class PrimaryCheck:
    """Runs on every new connection of a Sentinel client, right after AUTH/SELECT and before any command:
    ``on_primary(connection)`` (set by ``Store.create``) compares the server's replication id with the store's and
    starts a new store epoch when the primary changed, so that no write reaches a new primary before the failover
    is known (docs/store.md, failover). Connections are pooled: this costs two round trips per new connection."""

    def __init__(self) -> None:
        self.on_primary: OnPrimary | None = None

    async def connect(self, connection: AbstractConnection) -> None:
        """The ``redis_connect_func`` of the client's connections (a coroutine function, as redis-py requires)."""
        await connection.on_connect_check_health(check_health=True)  # what redis-py does without this hook
        if self.on_primary is not None:
            await self.on_primary(connection)


def primary_check(client: Redis) -> PrimaryCheck | None:
    """The :class:`PrimaryCheck` of a Sentinel client (None for any other)."""
    hook = getattr(client.connection_pool.connection_kwargs.get("redis_connect_func"), "__self__", None)
    return hook if isinstance(hook, PrimaryCheck) else None


def _connect_sentinel(url: str, settings: ConnectionSettings, password_file: str | None) -> Redis:
    """A client of the primary that Sentinel names, following a failover: every new connection asks the Sentinels
    where the primary is, idle connections to a former primary are dropped, and a former primary answering
    READONLY closes the connection (redis-py's ``SentinelConnectionPool``)."""
    parsed = parse_sentinel_url(url)
    provider: CredentialProvider | None = None
    if password_file is not None:
        provider = PasswordFileCredentials(password_file, parsed.username)
    elif parsed.password is not None:
        provider = UsernamePasswordCredentialProvider(parsed.username, parsed.password)
    common: dict[str, Any] = {
        "protocol": 2,
        "socket_timeout": settings.socket_timeout_s,
        "socket_connect_timeout": settings.connect_timeout_s,
        "decode_responses": False,
    }
    if parsed.tls:
        common["ssl"] = True
    sentinel_kwargs = dict(common)
    if provider is not None and parsed.sentinel_auth:
        sentinel_kwargs["credential_provider"] = provider
    data_kwargs: dict[str, Any] = dict(common)
    data_kwargs["redis_connect_func"] = PrimaryCheck().connect
    if provider is not None:
        data_kwargs["credential_provider"] = provider
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs, **data_kwargs
    )
    client: Redis = sentinel.master_for(
        parsed.service,
        redis_class=Redis,
        connection_pool_class=SentinelConnectionPool,
        db=parsed.db,
        max_connections=settings.max_connections,
        health_check_interval=int(settings.health_check_interval_s),
        client_name=settings.client_name,
    )
    return client


async def aclose_client(client: Redis) -> None:
    """Close ``client``'s connections, and for a Sentinel client also those to the Sentinels."""
    await client.aclose()
    pool = client.connection_pool
    if isinstance(pool, SentinelConnectionPool):
        for sentinel in pool.sentinel_manager.sentinels:
            await sentinel.aclose()


def is_embedded(client: Redis) -> bool:
    """True for the embedded in-process server of ``connect(None)`` (no replicas, no INFO, no WAIT)."""
    return type(client).__module__.startswith("fakeredis")


def is_sentinel(client: Redis) -> bool:
    """True for a client that follows a Sentinel-managed primary (it may fail over to a replica)."""
    return isinstance(client.connection_pool, SentinelConnectionPool)


def connect(
    url: str | None, settings: ConnectionSettings = DEFAULT_SETTINGS, *, password_file: str | None = None
) -> Redis:
    """A client for ``url`` (``redis://`` / ``rediss://`` / ``unix://``, or ``redis+sentinel://`` /
    ``rediss+sentinel://``: see :class:`SentinelUrl`), or an embedded in-memory server if None.

    Credentials come from the URL (``redis://user:password@host``) or, with ``password_file``, from that file
    (read again for each new connection) with the URL's user. Nothing is contacted until the first command; close
    with ``await client.aclose()``. Each ``connect(None)`` call creates a new, empty embedded server: share the
    returned client.
    """
    if url is None:
        import fakeredis

        server = fakeredis.FakeServer(version=(7,))
        fake: Redis = fakeredis.FakeAsyncRedis(
            server=server,
            protocol=2,
            connection_pool_class=BlockingConnectionPool,
            max_connections=settings.max_connections,
        )
        return fake
    if is_sentinel_url(url):
        return _connect_sentinel(url, settings, password_file)
    credentials: dict[str, CredentialProvider] = {}
    if password_file is not None:
        url, username = _without_userinfo(url)
        credentials["credential_provider"] = PasswordFileCredentials(password_file, username)
    pool = BlockingConnectionPool.from_url(
        url,
        **credentials,
        max_connections=settings.max_connections,
        timeout=settings.pool_timeout_s,
        protocol=2,
        socket_timeout=settings.socket_timeout_s,
        socket_connect_timeout=settings.connect_timeout_s,
        health_check_interval=int(settings.health_check_interval_s),
        client_name=settings.client_name,
        decode_responses=False,
    )
    return Redis.from_pool(pool)


def socket_timeout_s(client: Redis) -> float | None:
    """The reply deadline configured on ``client`` (None for the embedded server or no timeout)."""
    value = client.connection_pool.connection_kwargs.get("socket_timeout")
    return float(value) if isinstance(value, int | float) else None
