"""Redis clients: a real ``redis.asyncio`` client for a URL, or an embedded fakeredis server for ``simulate``.

Both speak RESP2 and return bytes. The embedded server runs the same Lua scripts (fakeredis runs them on
Lua 5.1 through lupa, like Redis; of the libraries Redis bundles it offers only ``cjson``, which is the only
one our scripts use).
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import BlockingConnectionPool, Redis


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


def connect(url: str | None, settings: ConnectionSettings = DEFAULT_SETTINGS) -> Redis:
    """A client for ``url`` (``redis://`` / ``rediss://`` / ``unix://``), or an embedded in-memory server if None.

    Nothing is contacted until the first command; close with ``await client.aclose()``.
    Each ``connect(None)`` call creates a new, empty embedded server: share the returned client.
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
    pool = BlockingConnectionPool.from_url(
        url,
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
