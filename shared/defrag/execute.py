"""Carrying out a defragmentation plan (``vgpu-scheduler defrag plan --execute``; docs/defrag.md, "Executing a
plan"). :func:`execute_plan` is the entry point; without ``ExecuteOptions(execute=True)`` it is a dry run that
evicts nothing: it checks that the helped pod still waits and fits on its cards once the moves are made, and
prints what would be done.

Executing, in order:

1. **Hold** (a plan ``--for`` a pod): the pod's cards are reserved on its node with the charges of the pods moved
   off that node counted as freed (``shared/defrag/hold.py``, the preemption hold), before the first eviction.
   A refused hold stops everything before anything is evicted. The hold's reservation is renewed every
   ``renew_every_s`` while the plan runs, so that the informer's ``--reservation-grace`` expiry does not take it.
2. **Waves** of at most ``wave_size`` moves: each pod is checked to be the one planned (same UID, still on its
   node, not being deleted) and evicted through the Eviction API (``pods/eviction``): the API server enforces
   PodDisruptionBudgets, and a 429 is a failure of that move. Then the wave waits, on watch events, until every
   evicted pod is gone and a replacement of each (a new pod of its controller) is bound
   (``shared/defrag/waves.py``), within ``wave_timeout_s``; then the next wave.
3. The helped pod is awaited bound (``bind_timeout_s``; not binding in time is reported, not a failure of the
   moves: kube-scheduler retries it and the hold keeps its cards).

A plan that frees cards (no waiting pod) holds the cards to free the same way while it runs, and releases them when
it ends (``prepare_card_holds``): the moved pods' replacements cannot land back on them.

A progress line per move (evicted, then settled) goes to ``out``; an Event is recorded on every moved pod
(``DefragMoved``) and on the helped pod (``DefragMakingRoom``, ``DefragFailed``). The first failure stops the run,
and the state reached is printed: the moves made, the failing one and why, what remains. The hold is released when
nothing was evicted, or when some of the pods its room depends on are still there (the pod is then planned
afresh); otherwise it is kept for the pod. A set ``stop`` event (SIGTERM) stops the run the same way; a
cancellation does too, and is then re-raised.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence

from vgpu_scheduler.shared.defrag.hold import (
    Hold,
    Placement,
    moved_pods_left,
    prepare_card_holds,
    prepare_hold,
    release_hold,
)
from vgpu_scheduler.shared.defrag.result import ExecuteOptions, ExecuteResult, freed_cards
from vgpu_scheduler.shared.defrag.waves import PodWatch, Stopped, T, Wave
from vgpu_scheduler.shared.domain.defragmodel import DefragPlan, Move
from vgpu_scheduler.shared.errors import NotFoundError, VgpuError
from vgpu_scheduler.shared.k8s import Api, DisruptionBudgetError, EventType, KubeObject
from vgpu_scheduler.shared.k8s.objects import meta, name_of, namespace_of, pod_ref, uid_of
from vgpu_scheduler.shared.runtime import cancel_until_done
from vgpu_scheduler.shared.store import Store

__all__ = ["DRY_RUN", "ExecuteOptions", "ExecuteResult", "execute_plan"]

DRY_RUN = ExecuteOptions()
"""The default: nothing is evicted."""

logger = logging.getLogger(__name__)

MOVED = "DefragMoved"
MAKING_ROOM = "DefragMakingRoom"
FAILED = "DefragFailed"


def _cards(devices: Sequence[str]) -> str:
    return ", ".join(devices) if devices else "no card"


class _Run:
    """One execution of one plan (the module docstring)."""

    def __init__(
        self,
        plan: DefragPlan,
        *,
        api: Api,
        store: Store,
        placement: Placement,
        options: ExecuteOptions,
        out: Callable[[str], None],
        stop: asyncio.Event | None,
        on_wait: Callable[[bool], None] | None = None,
    ) -> None:
        self.plan, self.api, self.store, self.placement = plan, api, store, placement
        self.options, self.out, self.stop = options, out, stop
        self.on_wait = on_wait
        self.result = ExecuteResult(executed=options.execute, moves=plan.moves)
        self.hold: Hold | None = None
        self.card_holds: list[Hold] = []
        self._index = {m.uid: i + 1 for i, m in enumerate(plan.moves)}
        self._reported: set[str] = set()

    # ---- texts ---------------------------------------------------------------------------------------------------

    def _tag(self, move: Move) -> str:
        return f"[{self._index[move.uid]}/{len(self.plan.moves)}]"

    def _purpose(self) -> str:
        target = self.plan.target
        if target is not None:
            cards = sorted({u for ctr in target.devices for u in ctr})
            return f"to make room for pod {target.namespace}/{target.name} on node {target.node} ({_cards(cards)})"
        return "to free cards " + ", ".join(f"{n}/{u}" for n, u in self.plan.freed)

    def _waves(self) -> list[tuple[Move, ...]]:
        size, moves = self.options.wave_size, self.plan.moves
        return [moves[i : i + size] for i in range(0, len(moves), size)]

    def _fail(self, move: Move | None, reason: str) -> bool:
        self.result.failed, self.result.reason = move, reason
        logger.info("defrag stopped", extra={"pod": move.key if move else None, "reason": reason})
        return False

    async def _event(self, ref: KubeObject, reason: str, message: str, event_type: EventType) -> None:
        try:
            await self.api.pod_event(ref, reason=reason, message=message, event_type=event_type)
        except VgpuError as e:
            logger.info("defrag: event not recorded", extra={"reason": reason, "error": str(e)})

    # ---- dry run -------------------------------------------------------------------------------------------------

    async def dry_run(self) -> None:
        self.out("dry run: nothing is evicted (--execute carries the plan out)")
        if self.plan.target is not None:
            checked = await self._prepare(reserve=False)
            if checked is None:
                self.out(f"cannot: {self.result.reason}")
                return
            self.result.hold = "checked"
            self.out(
                f"would hold node {checked.node}'s cards {_cards(checked.devices)} for pod {checked.key} "
                f"before the first eviction"
            )
        elif self.plan.freed:
            cards = ", ".join(f"{n}/{u}" for n, u in self.plan.freed)
            self.out(f"would hold the cards to free ({cards}) while the moves are made")
        for number, wave in enumerate(self._waves(), 1):
            self.out(f"wave {number}:")
            for m in wave:
                self.out(
                    f"  {self._tag(m)} would evict {m.key} from {m.source} ({_cards(m.source_devices)}, "
                    f"{m.memory_mib} MiB); its replacement fits on {m.dest} ({_cards(m.dest_devices)})"
                )

    async def _prepare(self, *, reserve: bool) -> Hold | None:
        assert self.plan.target is not None
        prepared = await prepare_hold(
            self.plan.target,
            self.plan.moves,
            api=self.api,
            store=self.store,
            placement=self.placement,
            reserve=reserve,
        )
        if isinstance(prepared, str):
            self._fail(None, prepared)
            return None
        return prepared

    # ---- execution -----------------------------------------------------------------------------------------------

    async def execute(self) -> None:
        renewer: asyncio.Task[None] | None = None
        try:
            await _shielded(self._hold())  # a hold is made whole or not at all, cancelled or not
            if not self.result.ok:
                self.out(f"cannot: {self.result.reason}")
                return
            renewer = asyncio.create_task(self._renew(), name="defrag-renew-hold")
            if self.hold is not None:
                await self._making_room(self.hold)
            for held in self.card_holds:
                self.out(f"holding node {held.node}'s cards {_cards(held.devices)} while the moves are made")
            await self._carry_out()
        except asyncio.CancelledError:
            if self.result.ok:
                self._fail(None, "cancelled")
            await _shielded(self._finish())
            raise
        except Exception as e:  # an outage or a bug: the hold is settled all the same, then the error goes on
            if self.result.ok:
                self._fail(None, f"{type(e).__name__}: {e}")
            await self._finish()
            raise
        finally:
            if renewer is not None:
                await cancel_until_done([renewer])
        await self._finish()

    async def _hold(self) -> None:
        if self.plan.target is not None:
            self.hold = await self._prepare(reserve=True)
            if self.hold is not None:
                self.result.hold = "kept"
            return
        if not self.plan.freed:
            return
        held = await prepare_card_holds(
            self.plan.moves, self.plan.freed, store=self.store, placement=self.placement, token=secrets.token_hex(4)
        )
        if isinstance(held, str):
            self._fail(None, held)
            return
        self.card_holds = held
        self.result.hold = "held"

    async def _making_room(self, hold: Hold) -> None:
        self.out(f"holding node {hold.node}'s cards {_cards(hold.devices)} for pod {hold.key}")
        moved = ", ".join(m.key for m in self.plan.moves)
        await self._event(
            pod_ref(hold.namespace, hold.name, hold.uid),
            MAKING_ROOM,
            f"Moving {len(self.plan.moves)} pod(s) ({moved}) {self._purpose()}",
            EventType.NORMAL,
        )

    async def _carry_out(self) -> None:
        namespaces = {m.namespace for m in self.plan.moves}
        if self.hold is not None:
            namespaces.add(self.hold.namespace)
        try:
            async with PodWatch(self.api.client, namespaces, stop=self.stop) as watch:
                for wave in self._waves():
                    if not await self._wave(watch, wave):
                        return
                if self.hold is not None:
                    await self._await_bound(watch, self.hold)
        except Stopped:
            self._fail(None, "stop requested (SIGTERM)")
        except TimeoutError:  # the waits of the waves and of the pod's bind catch their own
            self._fail(None, "the pods could not be watched (list and watch on pods are needed)")

    async def _wave(self, watch: PodWatch, moves: Sequence[Move]) -> bool:
        """Evict ``moves``, then wait until they settle; False on a failure (recorded)."""
        wave = Wave.begin(watch.pods())
        for move in moves:
            if self.stop is not None and self.stop.is_set():
                raise Stopped
            pod = watch.get(move.namespace, move.name)
            why = _not_as_planned(pod, move)
            if why is not None:
                return self._fail(move, why)
            assert pod is not None
            try:
                await self.api.evict_pod(move.namespace, move.name, uid=move.uid)
            except DisruptionBudgetError as e:
                return self._fail(move, f"its PodDisruptionBudget refuses the eviction ({e})")
            except NotFoundError:
                return self._fail(move, "it was deleted before its eviction")
            except VgpuError as e:
                return self._fail(move, f"the eviction failed ({e})")
            wave.evicted(move, pod)
            self.result.evicted.append(move)
            self.out(f"{self._tag(move)} evicted {move.key} from {move.source} ({_cards(move.source_devices)})")
            logger.info("defrag: pod evicted", extra={"pod": move.key, "node": move.source})
            await self._event(
                pod_ref(move.namespace, move.name, move.uid),
                MOVED,
                f"Evicted by {self.api.component} {self._purpose()}; its replacement fits on node {move.dest} "
                f"({_cards(move.dest_devices)})",
                EventType.NORMAL,
            )
        try:
            await self._until(watch, lambda: self._settled(watch, wave), self.options.wave_timeout_s)
        except TimeoutError:
            settled, waiting = wave.progress(watch.pods())
            first = next(m for m in wave.moves if m.uid not in settled)
            return self._fail(
                first, f"the wave did not settle within {self.options.wave_timeout_s:g}s: {'; '.join(waiting)}"
            )
        return True

    async def _until(self, watch: PodWatch, check: Callable[[], T | None], timeout_s: float) -> T:
        """``watch.until``, telling ``on_wait`` that the run waits for others (True) and then goes on (False)."""
        if self.on_wait is not None:
            self.on_wait(True)
        try:
            return await watch.until(check, timeout_s)
        finally:
            if self.on_wait is not None:
                self.on_wait(False)

    def _settled(self, watch: PodWatch, wave: Wave) -> bool | None:
        """Report the moves of ``wave`` that settled since last asked; True once all have."""
        settled, _ = wave.progress(watch.pods())
        for move in wave.moves:
            if move.uid in settled and move.uid not in self._reported:
                self._reported.add(move.uid)
                self.result.settled.append(move)
                replacement = settled[move.uid]
                if replacement:
                    where = f"{namespace_of(replacement)}/{name_of(replacement)} on {replacement['spec']['nodeName']}"
                    self.result.replacements[move.uid] = where
                    self.out(f"{self._tag(move)} {move.key} is gone; its replacement {where} is bound")
                else:
                    self.out(f"{self._tag(move)} {move.key} is gone (no controller recreates it)")
        return True if len(settled) == len(wave.moves) else None

    async def _await_bound(self, watch: PodWatch, hold: Hold) -> None:
        def bound() -> str | None:
            pod = watch.get(hold.namespace, hold.name)
            if pod is None or uid_of(pod) != hold.uid:
                return ""
            node = (pod.get("spec") or {}).get("nodeName")
            return str(node) if node else None

        try:
            node = await self._until(watch, bound, self.options.bind_timeout_s)
        except TimeoutError:
            self.out(
                f"every move is made; pod {hold.key} is not bound yet after {self.options.bind_timeout_s:g}s "
                f"(kube-scheduler retries it; its cards stay held for it)"
            )
            return
        if not node:
            self._fail(None, f"pod {hold.key} was deleted while room was made for it")
            return
        self.result.target_bound = node
        self.out(f"pod {hold.key} is bound on node {node}")

    def _holds(self) -> list[Hold]:
        return [*([self.hold] if self.hold is not None else []), *self.card_holds]

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.options.renew_every_s)  # a keep-alive, not a wait for state
            for hold in self._holds():
                try:
                    await self.store.reservations.renew(hold.uid, hold.node)
                except VgpuError as e:
                    logger.warning("defrag: a hold was not renewed", extra={"pod": hold.key, "error": str(e)})

    async def _finish(self) -> None:
        """Release or keep the hold, count the cards freed, print the state reached of a run that stopped."""
        self.result.cards_freed = freed_cards(self.plan, self.result.settled)
        if self.card_holds:  # nobody waits for them: free for any pod once the run ends
            for held in self.card_holds:
                await release_hold(self.store, held)
            self.card_holds = []
            self.result.hold = "released"
            if self.result.ok:
                self.out(f"released the hold of the {self.result.cards_freed} freed card(s)")
        if self.result.ok:
            return
        hold = self.hold
        if hold is not None:
            if not self.result.evicted or await moved_pods_left(self.store, hold) > 0:
                released = await release_hold(self.store, hold)
                self.result.hold = "released" if released else "kept (a bind has taken it)"
            message = (
                f"Making room for this pod stopped: {self.result.state_lines()[0]}; its hold is {self.result.hold}"
            )
            await self._event(pod_ref(hold.namespace, hold.name, hold.uid), FAILED, message, EventType.WARNING)
        for line in self.result.state_lines():
            self.out(line)


def _not_as_planned(pod: KubeObject | None, move: Move) -> str | None:
    """Why ``pod`` is not the pod ``move`` planned to evict (None: it is)."""
    if pod is None:
        return "it no longer exists"
    if uid_of(pod) != move.uid:
        return f"it was re-created since the plan (uid {uid_of(pod)}, planned {move.uid})"
    if meta(pod).get("deletionTimestamp"):
        return "it is already being deleted"
    node = (pod.get("spec") or {}).get("nodeName")
    if node != move.source:
        return f"it is on node {node}, not {move.source} as planned"
    return None


async def _shielded(work: Awaitable[None]) -> None:
    """Run ``work`` to its end although the caller is cancelled meanwhile (a supervisor may cancel again and again
    until it is done), then let the cancellation go on: a hold is never left half-made or half-released."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError


async def execute_plan(
    plan: DefragPlan,
    *,
    api: Api,
    store: Store,
    placement: Placement,
    options: ExecuteOptions = DRY_RUN,
    out: Callable[[str], None] = print,
    stop: asyncio.Event | None = None,
    on_wait: Callable[[bool], None] | None = None,
) -> ExecuteResult:
    """Carry out ``plan`` (the module docstring); a dry run unless ``options.execute``. Progress lines go to
    ``out``. ``stop`` set (SIGTERM) ends the run cleanly; the result says how far it went. ``on_wait`` is told when
    the run starts (True) and stops (False) waiting for others: the moved pods' replacements, the helped pod's bind
    (``simulate`` plays those others in the same process, and lets them act meanwhile)."""
    run = _Run(plan, api=api, store=store, placement=placement, options=options, out=out, stop=stop, on_wait=on_wait)
    if options.execute:
        await run.execute()
    else:
        await run.dry_run()
    return run.result
