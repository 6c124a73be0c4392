"""Namespace quotas (hami-wire §8): limits from ResourceQuotas, usage as per-pod charges summed per namespace.

NVIDIA's figures keep their fields (``lm``/``lc``/``um``/``uc``, a charge's ``mem,cores`` head); every other
vendor's are ``word=mem,cores`` parts (``lv``, ``uv``, the charge's ``;…`` tail), checked in the same atomic
script (docs/store.md).

Charges are keyed by pod UID, so charging the same pod twice never double-counts and the informer's
``record`` of a pod the extender already charged is a no-op. The extender charges first, then reserves
devices, and refunds if the device step fails (docs/store.md, Consistency).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.shared.codec.envelope import decode_quota_limits, encode_quota_limits
from vgpu_scheduler.shared.domain.model import NVIDIA
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState, QuotaUse, QuotaUses, is_quota_word
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.store._base import ScriptCall, StoreContext, as_bytes, as_int, check_fenced, fence_args, text
from vgpu_scheduler.shared.store.types import (
    Fence,
    PodQuotaCharge,
    QuotaCharged,
    QuotaChargeResult,
    QuotaDimension,
    QuotaExceeded,
)


def _limit_arg(v: int | None) -> str:
    return "" if v is None else str(int(v))


def _others_limits_arg(limits: QuotaLimits) -> str:
    """Every other vendor's limits as the ``lv`` field: ``W=mem,cores;…`` (an empty figure = no limit)."""
    return ";".join(f"{w}={_limit_arg(v.mem_mib)},{_limit_arg(v.cores_pct)}" for w, v in limits.others)


def _parse_others(raw: bytes | str | None, what: str) -> QuotaUses:
    """``W=mem,cores;…`` (``uv`` or a pod charge's tail) → sorted per-vendor figures."""
    if raw is None:
        return ()
    out: dict[str, QuotaUse] = {}
    for part in text(raw).split(";"):
        if not part:
            continue
        word, sep, figures = part.partition("=")
        m, comma, c = figures.partition(",")
        if not sep or not comma or not is_quota_word(word):
            raise DecodeError(what, "expected 'word=mem,cores' parts joined by ';'", text(raw))
        try:
            out[word] = QuotaUse(int(m), int(c))
        except ValueError as e:
            raise DecodeError(what, "expected integer figures", text(raw)) from e
    return tuple(sorted(out.items()))


def _check_others(others: QuotaUses) -> QuotaUses:
    """The per-vendor part of a charge in canonical form: no NVIDIA, no zero charge, sorted; rejects bad input."""
    kept: dict[str, QuotaUse] = {}
    for word, use in others:
        if word == NVIDIA or not is_quota_word(word):
            raise ValueError(f"quota charge vendor must be another vendor's common word, got {word!r}")
        if use.mem_mib < 0 or use.cores_pct < 0:
            raise ValueError(f"quota charge of {word} must not be negative: {use}")
        if word in kept:
            raise ValueError(f"quota charge names {word} twice")
        kept[word] = use
    return tuple((w, u) for w, u in sorted(kept.items()) if u.mem_mib or u.cores_pct)


def encode_charge(charge: PodQuotaCharge) -> str:
    """A pod's charge as stored: ``mem,cores`` (NVIDIA) then ``;W=mem,cores`` per other vendor (sorted)."""
    head = f"{charge.mem_mib},{charge.cores_pct}"
    return head + "".join(f";{w}={u.mem_mib},{u.cores_pct}" for w, u in _check_others(charge.others))


def decode_charge(raw: bytes | str) -> PodQuotaCharge:
    """The inverse of :func:`encode_charge` (a record without a tail is NVIDIA's only)."""
    value = text(raw)
    head, _, tail = value.partition(";")
    m, comma, c = head.partition(",")
    try:
        mem, cores = int(m), int(c)
    except ValueError as e:
        raise DecodeError("quota pod charge", "expected 'mem,cores[;word=mem,cores…]'", value) from e
    if not comma:
        raise DecodeError("quota pod charge", "expected 'mem,cores[;word=mem,cores…]'", value)
    return PodQuotaCharge(mem, cores, _parse_others(tail or None, "quota pod charge"))


QUOTA_FIELDS = ("env", "um", "uc", "uv")
"""The quota hash fields :func:`quota_state` reads (limits envelope, NVIDIA memory and cores used, other vendors'
usage)."""


def quota_state(fields: Sequence[bytes | str | None]) -> QuotaState:
    """A namespace's ``QuotaState`` from the values of :data:`QUOTA_FIELDS` (HMGET order)."""
    env, um, uc, uv = fields
    limits = decode_quota_limits(as_bytes(env)) if env is not None else QuotaLimits()
    return QuotaState(
        limits=limits,
        used_mem_mib=int(um or 0),
        used_cores_pct=int(uc or 0),
        used_others=_parse_others(uv, "quota usage 'uv'"),
    )


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
            _others_limits_arg(limits),
        ]
        async with self._ctx.translated("set quota limits"):
            reply = await self._ctx.scripts.quota_set_limits(
                keys=[k.quota(namespace), k.quota_namespaces(), *extra_keys], args=args
            )
        check_fenced(reply, fence)

    async def charge(
        self,
        namespace: str,
        pod_uid: str,
        mem_mib: int,
        cores_pct: int,
        *,
        mem_limit_factor: int = 1,
        others: QuotaUses = (),
    ) -> QuotaChargeResult:
        """Charge the pod (replacing its earlier charge) if every grown dimension of every vendor stays within its
        limit.

        ``mem_mib`` / ``cores_pct`` are NVIDIA's; ``others`` every other vendor's charge by common word.
        ``mem_limit_factor`` is the device config's ``memoryFactor``: NVIDIA's charges are scaled MiB, like the
        requests, while its stored limit is the ResourceQuota's raw value, so the check compares against limit ×
        factor (hami-wire §8). Other vendors' limits are stored in MiB. A refusal reports the stored limit.
        """
        if mem_limit_factor < 1:
            raise ValueError(f"mem_limit_factor must be >= 1, got {mem_limit_factor}")
        charge = PodQuotaCharge(mem_mib, cores_pct, others)
        return await self._charge(namespace, pod_uid, charge, force=False, fence=None, factor=mem_limit_factor)

    async def record(
        self,
        namespace: str,
        pod_uid: str,
        mem_mib: int,
        cores_pct: int,
        fence: Fence | None = None,
        *,
        others: QuotaUses = (),
    ) -> bool:
        """Charge an observed pod unconditionally (the API is the truth); True if the stored charge changed."""
        charge = PodQuotaCharge(mem_mib, cores_pct, others)
        result = await self._charge(namespace, pod_uid, charge, force=True, fence=fence)
        return isinstance(result, QuotaCharged) and result.changed

    def record_call(
        self, namespace: str, pod_uid: str, charge: PodQuotaCharge, fence: Fence | None = None
    ) -> ScriptCall:
        """:meth:`record` as one script call to send in a pipeline; its reply goes to :meth:`recorded`."""
        keys, args = self._charge_call(namespace, pod_uid, charge, force=True, fence=fence)
        return ScriptCall(self._ctx.scripts.quota_charge, list(keys), args)

    @staticmethod
    def recorded(reply: Any, fence: Fence | None = None) -> bool:
        """Whether a :meth:`record_call` changed the stored charge. Raises StaleFenceError when it was fenced out."""
        result = QuotaRepo._charge_result(reply, fence)
        return isinstance(result, QuotaCharged) and result.changed

    def _charge_call(
        self, namespace: str, pod_uid: str, charge: PodQuotaCharge, *, force: bool, fence: Fence | None, factor: int = 1
    ) -> tuple[list[str], list[str | int]]:
        if charge.mem_mib < 0 or charge.cores_pct < 0:
            raise ValueError(f"quota charge must not be negative: mem={charge.mem_mib} cores={charge.cores_pct}")
        keys, token = self._keys(namespace, fence)
        args: list[str | int] = [
            token,
            namespace,
            pod_uid,
            charge.mem_mib,
            charge.cores_pct,
            "1" if force else "0",
            factor,
        ]
        for word, use in _check_others(charge.others):
            args += [word, use.mem_mib, use.cores_pct]
        return keys, args

    @staticmethod
    def _charge_result(reply: Any, fence: Fence | None) -> QuotaChargeResult:
        check_fenced(reply, fence)
        if reply[0] == b"exceeded":
            return QuotaExceeded(
                dimension=QuotaDimension(text(reply[1])),
                limit=as_int(reply[2]),
                used=as_int(reply[3]),
                needed=as_int(reply[4]),
                vendor=text(reply[5]) or NVIDIA,
            )
        return QuotaCharged(changed=as_int(reply[1]) == 1)

    async def _charge(
        self,
        namespace: str,
        pod_uid: str,
        charge: PodQuotaCharge,
        *,
        force: bool,
        fence: Fence | None,
        factor: int = 1,
    ) -> QuotaChargeResult:
        keys, args = self._charge_call(namespace, pod_uid, charge, force=force, fence=fence, factor=factor)
        async with self._ctx.translated("charge quota"):
            reply = await self._ctx.scripts.quota_charge(keys=keys, args=args)
        return self._charge_result(reply, fence)

    async def refund(self, namespace: str, pod_uid: str, fence: Fence | None = None) -> PodQuotaCharge | None:
        """Remove the pod's charge; returns what it was, or None if it had none."""
        keys, token = self._keys(namespace, fence, with_set=False)
        async with self._ctx.translated("refund quota"):
            reply = await self._ctx.scripts.quota_refund(keys=keys, args=[token, pod_uid])
        check_fenced(reply, fence)
        if reply[0] != b"ok":
            return None
        return PodQuotaCharge(
            mem_mib=as_int(reply[1]), cores_pct=as_int(reply[2]), others=_parse_others(reply[3], "quota refund")
        )

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
            out[text(uid)] = decode_charge(value)
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
            args += [uid, encode_charge(ch)]
        async with self._ctx.translated("reset quota usage"):
            reply = await self._ctx.scripts.quota_reset(keys=keys, args=args)
        check_fenced(reply, fence)
        return as_int(reply[1])

    async def namespaces(self) -> list[str]:
        """Namespaces with limits or charges, sorted."""
        async with self._ctx.translated("list quota namespaces"):
            members = await self._ctx.client.smembers(self._ctx.keys.quota_namespaces())
        return sorted(text(m) for m in members)
