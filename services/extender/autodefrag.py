"""Automatic defragmentation (``--auto-defrag``; docs/defrag.md, "Automatic mode").

When ``/filter`` finds no node for a pod, :meth:`AutoDefrag.consider` works out, off the request path, the
defragmentation plan that lets the pod fit (``shared/defrag/reading.py``, the plan ``defrag plan --for`` makes)
and carries it out (``shared/defrag/execute.py``: the pod's cards held, evictions through the Eviction API in
waves, each moved pod's replacement awaited bound). Moving is preferred to killing: only when no plan exists is the
pod handed to the GPU-aware preemption (:class:`~.preempt.Preemptor`).

Bounds:

* one plan in flight per pod: per replica (the running tasks), and across replicas the pod's preemption right in
  the store (``Reservations.begin_preemption``, the key preemption takes), renewed while the run lasts and given
  back when it ends (a replica that dies leaves it to expire within :data:`RIGHT_TTL_S`); a pod already holding a
  reservation (being bound, or held by an earlier run) is never planned for (``pod_goal`` refuses it);
* moves per minute, overall and off any one node, per replica (:class:`MoveBudget`): a plan that would exceed
  either waits for a later ``/filter`` (and nobody is preempted meanwhile);
* a pod is considered at most once per :data:`COOLDOWN_S` per replica, and :data:`MAX_RUNNING` plans run at once;
* ``stop`` (SIGTERM) ends the runs cleanly through the executor's stop event (:meth:`AutoDefrag.aclose`).

Events on the pods come from the executor; the counters here are the ``vgpu_defrag_*`` metrics.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from prometheus_client import Counter

from vgpu_scheduler.services.extender.preempt import Cooldown, Preemptor, Unplaced
from vgpu_scheduler.shared.codec.gang import pod_group_name
from vgpu_scheduler.shared.config import ExtenderSettings
from vgpu_scheduler.shared.defrag.execute import ExecuteOptions, ExecuteResult, execute_plan
from vgpu_scheduler.shared.defrag.hold import Placement as HoldPlacement
from vgpu_scheduler.shared.defrag.reading import plan_for_pod
from vgpu_scheduler.shared.domain.defrag import Placement
from vgpu_scheduler.shared.domain.defragmodel import DefragPlan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.errors import VgpuError
from vgpu_scheduler.shared.runtime import cancel_until_done

if TYPE_CHECKING:
    from vgpu_scheduler.services.extender.deps import ExtenderDeps

logger = logging.getLogger(__name__)

COOLDOWN_S = 10.0
"""A pod is considered at most once in this time per replica (kube-scheduler retries it)."""
MAX_RUNNING = 4
"""Plans worked out or carried out at once per replica; another pod waits for kube-scheduler's next retry."""
WINDOW_S = 60.0
"""The window of the move budgets (per minute)."""
RIGHT_TTL_S = 60.0
"""How long the pod's right (its preemption key in the store) outlives this replica's last renewal."""
OPTIONS = ExecuteOptions(execute=True, wave_size=2)
"""How the extender carries a plan out: the executor's defaults, evicting."""


class MoveBudget:
    """Moves made in the last :data:`WINDOW_S` (on ``clock``), overall and per source node: :meth:`admit` takes a
    plan's moves only when both stay within their limits."""

    def __init__(self, per_minute: int, per_node_per_minute: int, clock: Callable[[], float]) -> None:
        self.per_minute, self.per_node = per_minute, per_node_per_minute
        self._clock = clock
        self._moves: collections.deque[tuple[float, str]] = collections.deque()

    def _trim(self) -> None:
        now = self._clock()
        while self._moves and now - self._moves[0][0] >= WINDOW_S:
            self._moves.popleft()

    def admit(self, sources: Sequence[str]) -> str | None:
        """Count the moves off ``sources`` (one node per move) if they fit; else why not (nothing counted)."""
        self._trim()
        if len(self._moves) + len(sources) > self.per_minute:
            return f"{len(sources)} move(s) would pass {self.per_minute} per minute ({len(self._moves)} made)"
        made = collections.Counter(node for _, node in self._moves)
        for node, n in collections.Counter(sources).items():
            if made[node] + n > self.per_node:
                return f"{n} move(s) off node {node} would pass {self.per_node} per minute ({made[node]} made)"
        now = self._clock()
        self._moves.extend((now, node) for node in sources)
        return None


class AutoDefrag:
    """Automatic defragmentation for one extender replica (module docstring)."""

    def __init__(self, settings: ExtenderSettings, deps: ExtenderDeps, preemptor: Preemptor) -> None:
        self._deps = deps
        self._preemptor = preemptor
        policies = Policies(node=settings.node_policy, gpu=settings.gpu_policy)
        vendors = deps.vendor_set
        self._placement = Placement(policies, deps.nvidia, vendors.rules)
        self._hold_placement = HoldPlacement(vendors=vendors, nvidia=deps.nvidia, policies=policies)
        self.budget = MoveBudget(
            settings.defrag_moves_per_minute,
            settings.defrag_moves_per_node_per_minute,
            lambda: asyncio.get_running_loop().time(),
        )
        self._cooldown = Cooldown(COOLDOWN_S)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._waiting: set[str] = set()
        """The pods whose run waits for others (the moved pods' replacements, the pod's bind)."""
        self._changed = asyncio.Event()
        self.moves: list[dict[str, object]] = []
        """Every move evicted here, recorded when its run ends: ``pod``, ``from`` and ``to`` (node and cards as
        planned), ``for`` (the pod it made room for), ``replacement`` (``ns/name on node`` once bound, else None);
        ``simulate`` reports them."""
        self.stopping = asyncio.Event()
        registry = deps.registry
        self.attempts = Counter(
            "vgpu_defrag_attempts_total",
            "Automatic defragmentation attempts, by outcome",
            ["outcome"],
            registry=registry,
        )
        self.planned, self.executed, self.failed, self.cards_freed = (
            Counter(name, doc, registry=registry)
            for name, doc in (
                ("vgpu_defrag_moves_planned_total", "Moves of the plans carried out"),
                ("vgpu_defrag_moves_executed_total", "Pods evicted by those plans"),
                ("vgpu_defrag_moves_failed_total", "Moves that failed (a run stops at the first)"),
                ("vgpu_defrag_cards_freed_total", "Cards the moves left idle (every pod planned off them gone)"),
            )
        )

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """Stop the runs (the executor settles each hold), waiting ``timeout_s`` before cancelling them."""
        self.stopping.set()
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        await cancel_until_done(tasks)

    async def idle(self) -> None:
        """Wait until every plan here is carried out, or waits for others (the moved pods' replacements, the
        helped pod's bind: ``simulate``, which plays them in this process, then lets them act)."""
        while busy := [t for uid, t in self._tasks.items() if uid not in self._waiting]:
            self._changed.clear()
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait([*busy, changed], return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()

    def _set_waiting(self, uid: str, waiting: bool) -> None:
        (self._waiting.add if waiting else self._waiting.discard)(uid)
        self._changed.set()

    def consider(self, unplaced: Unplaced) -> None:
        """``/filter`` found no node for the pod: plan and move for it off the request path, or preempt for it
        when no plan exists. Never waits, never raises."""
        meta = unplaced.pod.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        uid = str(meta.get("uid") or "")
        if not uid or uid in self._tasks or self.stopping.is_set():
            return
        if pod_group_name(unplaced.pod) is not None:  # a gang member: preemption's rules (it waits for its gang)
            self._preemptor.consider(unplaced)
            return
        if len(self._tasks) >= MAX_RUNNING or not self._cooldown.admit(uid):
            return  # kube-scheduler retries the pod
        key = (str(meta.get("namespace")), str(meta.get("name")))
        task = asyncio.get_running_loop().create_task(
            self._defrag(uid, key, lambda: self._preemptor.consider(unplaced)), name=f"defrag:{uid}"
        )
        self._tasks[uid] = task

        def done(_: object) -> None:
            self._tasks.pop(uid, None)
            self._set_waiting(uid, False)

        task.add_done_callback(done)

    async def _defrag(self, uid: str, key: tuple[str, str], fallback: Callable[[], None]) -> None:
        store, owner = self._deps.store, self._deps.instance_id
        try:
            planned = await plan_for_pod(store, self._deps.api, self._deps.vendor_set, self._placement, key)
            plan = planned.result
            if not isinstance(plan, DefragPlan) or not plan.moves:
                self.attempts.labels("no_plan").inc()
                logger.info("defrag: no plan, preemption may act", extra={"pod": "/".join(key), "why": str(plan)})
                fallback()
                return
            if not await store.reservations.begin_preemption(uid, owner, RIGHT_TTL_S):
                self.attempts.labels("elsewhere").inc()
                return  # another replica acts for the pod (a plan, or a preemption)
            renewer = asyncio.create_task(self._keep_right(uid), name=f"defrag-right:{uid}")
            try:
                await self._carry_out(plan, uid, key)
            finally:
                await cancel_until_done([renewer])
                await store.reservations.end_preemption(uid, owner)
        except VgpuError as e:
            self.attempts.labels("error").inc()
            logger.warning("defrag failed", extra={"pod": "/".join(key), "error": str(e)})
        except Exception:
            self.attempts.labels("error").inc()
            logger.exception("defrag failed", extra={"pod": "/".join(key)})

    async def _keep_right(self, uid: str) -> None:
        """Renew the pod's right every third of :data:`RIGHT_TTL_S` while its run lasts (a replica that dies leaves
        it to expire)."""
        while True:
            await asyncio.sleep(RIGHT_TTL_S / 3)  # a keep-alive, not a wait for state
            try:
                await self._deps.store.reservations.renew_preemption(uid, self._deps.instance_id, RIGHT_TTL_S)
            except VgpuError as e:
                logger.warning("defrag: the pod's right was not renewed", extra={"pod_uid": uid, "error": str(e)})

    async def _carry_out(self, plan: DefragPlan, uid: str, key: tuple[str, str]) -> None:
        refused = self.budget.admit([m.source for m in plan.moves])
        if refused is not None:
            self.attempts.labels("rate_limited").inc()
            logger.info("defrag: plan deferred", extra={"pod": "/".join(key), "why": refused})
            return
        self.planned.inc(len(plan.moves))
        logger.info("defrag: carrying out a plan", extra={"pod": "/".join(key), "moves": [m.key for m in plan.moves]})

        def out(line: str) -> None:
            logger.info("defrag: %s", line, extra={"pod": "/".join(key)})

        result: ExecuteResult = await execute_plan(
            plan,
            api=self._deps.api,
            store=self._deps.store,
            placement=self._hold_placement,
            options=OPTIONS,
            out=out,
            stop=self.stopping,
            on_wait=lambda waiting: self._set_waiting(uid, waiting),
        )
        for m in result.evicted:
            self.moves.append(
                {
                    "pod": m.key,
                    "from": {"node": m.source, "devices": list(m.source_devices)},
                    "to": {"node": m.dest, "devices": list(m.dest_devices)},
                    "for": "/".join(key),
                    "replacement": result.replacements.get(m.uid),
                }
            )
        self.executed.inc(result.moved)
        self.failed.inc(result.failures)
        self.cards_freed.inc(result.cards_freed)
        self.attempts.labels("moved" if result.ok else "failed").inc()
