"""Namespace quotas (hami-wire §8): limits from ResourceQuotas, usage as per-pod charges summed per namespace.

Charges are keyed by pod UID, so charging the same pod twice never double-counts and the informer's
``record`` of a pod the extender already charged is a no-op. The extender charges first, then reserves
devices, and refunds if the device step fails (docs/store.md, Consistency).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shared.codec.envelope import decode_quota_limits, encode_quota_limits
from shared.domain.model import QuotaLimits, QuotaState
from shared.store._base import StoreContext, as_bytes, as_int, check_fenced, fence_args, text
from shared.store.types import Fence, PodQuotaCharge, QuotaCharged, QuotaChargeResult, QuotaDimension, QuotaExceeded


def _limit_arg(v: int | None) -> str:
    return "" if v is None else str(int(v))


QUOTA_FIELDS = ("env", "um", "uc")
"""The quota hash fields :func:`quota_state` reads (limits envelope, memory and cores used)."""


def quota_state(fields: Sequence[bytes | str | None]) -> QuotaState:
    """A namespace's ``QuotaState`` from the values of :data:`QUOTA_FIELDS` (HMGET order)."""
    env, um, uc = fields
    limits = decode_quota_limits(as_bytes(env)) if env is not None else QuotaLimits()
    return QuotaState(limits=limits, used_mem_mib=int(um or 0), used_cores_pct=int(uc or 0))


class QuotaRepo:
    """Per-namespace quota limits and usage."""

    def __init__(self, ctx: StoreContext) -> None:
        self._ctx = ctx

    def _keys(self, namespace: str, fence: Fence | None, *, with_set: bool = True) -> tuple[list[str], str]:
        k = self._ctx.keys
        extra_keys, token = fence_args(k, fence)
        keys = [k.quota(namespace), k.quota_pods(namespace)]
        if with_set:
            keys.append(k.quota_namespaces())
        return keys + extra_keys, token

    async def set_limits(self, namespace: str, limits: QuotaLimits, fence: Fence | None = None) -> None:
        """Replace the namespace's limits (``None`` = no limit, ``0`` blocks every positive charge)."""
        k = self._ctx.keys
        extra_keys, token = fence_args(k, fence)
        args: list[str | bytes | int] = [
            token,
            namespace,
            encode_quota_limits(limits),
            _limit_arg(limits.mem_mib),
            _limit_arg(limits.cores_pct),
        ]
        async with self._ctx.translated("set quota limits"):
            reply = await self._ctx.scripts.quota_set_limits(
                keys=[k.quota(namespace), k.quota_namespaces(), *extra_keys], args=args
            )
        check_fenced(reply, fence)

    async def charge(
        self, namespace: str, pod_uid: str, mem_mib: int, cores_pct: int, *, mem_limit_factor: int = 1
    ) -> QuotaChargeResult:
        """Charge the pod (replacing its earlier charge) if every grown dimension stays within its limit.

        ``mem_limit_factor`` is the device config's ``memoryFactor``: charges are scaled MiB, like the requests,
        while the stored limit is the ResourceQuota's raw value, so the check compares against limit × factor
        (hami-wire §8). A refusal reports the raw limit.
        """
        if mem_limit_factor < 1:
            raise ValueError(f"mem_limit_factor must be >= 1, got {mem_limit_factor}")
        return await self._charge(
            namespace, pod_uid, mem_mib, cores_pct, force=False, fence=None, mem_limit_factor=mem_limit_factor
        )

    async def record(
        self, namespace: str, pod_uid: str, mem_mib: int, cores_pct: int, fence: Fence | None = None
    ) -> bool:
        """Charge an observed pod unconditionally (the API is the truth); True if the stored charge changed."""
        result = await self._charge(namespace, pod_uid, mem_mib, cores_pct, force=True, fence=fence)
        return isinstance(result, QuotaCharged) and result.changed

    async def _charge(
        self,
        namespace: str,
        pod_uid: str,
        mem_mib: int,
        cores_pct: int,
        *,
        force: bool,
        fence: Fence | None,
        mem_limit_factor: int = 1,
    ) -> QuotaChargeResult:
        if mem_mib < 0 or cores_pct < 0:
            raise ValueError(f"quota charge must not be negative: mem={mem_mib} cores={cores_pct}")
        keys, token = self._keys(namespace, fence)
        args: list[str | int] = [token, namespace, pod_uid, mem_mib, cores_pct, "1" if force else "0", mem_limit_factor]
        async with self._ctx.translated("charge quota"):
            reply = await self._ctx.scripts.quota_charge(keys=keys, args=args)
        check_fenced(reply, fence)
        if reply[0] == b"exceeded":
            return QuotaExceeded(
                dimension=QuotaDimension(text(reply[1])),
                limit=as_int(reply[2]),
                used=as_int(reply[3]),
                needed=as_int(reply[4]),
            )
        return QuotaCharged(changed=as_int(reply[1]) == 1)

    async def refund(self, namespace: str, pod_uid: str, fence: Fence | None = None) -> PodQuotaCharge | None:
        """Remove the pod's charge; returns what it was, or None if it had none."""
        keys, token = self._keys(namespace, fence, with_set=False)
        async with self._ctx.translated("refund quota"):
            reply = await self._ctx.scripts.quota_refund(keys=keys, args=[token, pod_uid])
        check_fenced(reply, fence)
        if reply[0] != b"ok":
            return None
        return PodQuotaCharge(mem_mib=as_int(reply[1]), cores_pct=as_int(reply[2]))

    async def get(self, namespace: str) -> QuotaState:
        """The namespace's limits and usage (no limits and zero usage if unknown)."""
        async with self._ctx.translated("get quota"):
            fields = await self._ctx.client.hmget(self._ctx.keys.quota(namespace), list(QUOTA_FIELDS))
        return quota_state(fields)

    async def pod_charges(self, namespace: str) -> dict[str, PodQuotaCharge]:
        """Every pod's charge in the namespace."""
        async with self._ctx.translated("list quota charges"):
            flat = await self._ctx.client.hgetall(self._ctx.keys.quota_pods(namespace))
        out: dict[str, PodQuotaCharge] = {}
        for uid, value in flat.items():
            m, c = as_bytes(value).split(b",")
            out[text(uid)] = PodQuotaCharge(mem_mib=int(m), cores_pct=int(c))
        return out

    async def reset_usage(
        self, namespace: str, charges: Mapping[str, PodQuotaCharge], fence: Fence | None = None
    ) -> int:
        """Replace every pod charge of the namespace (reconcile from the API); returns how many differed."""
        keys, token = self._keys(namespace, fence)
        args: list[str | int] = [token, namespace]
        for uid, ch in sorted(charges.items()):
            if ch.mem_mib < 0 or ch.cores_pct < 0:
                raise ValueError(f"quota charge of {uid} must not be negative")
            args += [uid, f"{ch.mem_mib},{ch.cores_pct}"]
        async with self._ctx.translated("reset quota usage"):
            reply = await self._ctx.scripts.quota_reset(keys=keys, args=args)
        check_fenced(reply, fence)
        return as_int(reply[1])

    async def namespaces(self) -> list[str]:
        """Namespaces with limits or charges, sorted."""
        async with self._ctx.translated("list quota namespaces"):
            members = await self._ctx.client.smembers(self._ctx.keys.quota_namespaces())
        return sorted(text(m) for m in members)
