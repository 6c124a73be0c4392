"""The Lua scripts of ``shared/store/lua``, registered once per client.

Every script gets ``_prelude.lua`` (and the usage or quota helpers where it needs them) prepended, so each file is
self-contained once loaded. ``redis-py``'s ``Script`` objects run by EVALSHA and reload on NOSCRIPT (a Redis
restart), including inside pipelines.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

_USAGE_SCRIPTS = frozenset({"apply_allocation", "release_allocation", "recount_usage"})
_QUOTA_SCRIPTS = frozenset({"quota_charge", "quota_refund", "quota_reset"})


def _source(name: str) -> str:
    return resources.files("vgpu_scheduler.shared.store").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def script_text(name: str) -> str:
    """The full text of one script as sent to Redis (helpers included)."""
    parts = [_source("_prelude")]
    if name in _USAGE_SCRIPTS:
        parts.append(_source("_usage"))
    if name in _QUOTA_SCRIPTS:
        parts.append(_source("_quota"))
    parts.append(_source(name))
    return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class Scripts:
    """Every script, bound to one client."""

    put_inventory: AsyncScript
    delete_inventory: AsyncScript
    node_snapshot: AsyncScript
    apply_allocation: AsyncScript
    release_allocation: AsyncScript
    confirm_allocation: AsyncScript
    renew_reservation: AsyncScript
    claim_allocation: AsyncScript
    recount_usage: AsyncScript
    lease_acquire: AsyncScript
    lease_renew: AsyncScript
    lease_release: AsyncScript
    lease_inspect: AsyncScript
    lock_acquire: AsyncScript
    lock_release: AsyncScript
    lock_inspect: AsyncScript
    lock_release_settled: AsyncScript
    quota_set_limits: AsyncScript
    quota_charge: AsyncScript
    quota_refund: AsyncScript
    quota_reset: AsyncScript
    meta_ensure_epoch: AsyncScript
    meta_mark_synced: AsyncScript
    meta_follow_primary: AsyncScript

    @classmethod
    def register(cls, client: Redis) -> Scripts:
        """Register every script on ``client`` (no round trip: scripts load lazily on first use)."""
        names = [f for f in cls.__dataclass_fields__]
        return cls(**{n: client.register_script(script_text(n)) for n in names})
