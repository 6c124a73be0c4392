"""The driver: plays kube-scheduler and HAMi's device plugin against real extenders and an API server.

For each workload pod, in order (:meth:`Driver.schedule`):

1. **admission** — the webhook's mutation, as the API server would apply it (difference 16): either the
   pure :func:`~shared.protocol.webhook.mutate_pod` + :func:`~shared.protocol.jsonpatch.apply_patch` (embedded runs)
   or an AdmissionReview POSTed to an extender's ``/webhook`` (a deployed extender). A denied pod is reported as
   unschedulable with the denial message;
2. the API server's **validation** of the mutated pod (:mod:`shared.k8s.podvalidation`): a pod it would refuse is
   reported unschedulable with its message (``Pod "x" is invalid: ...``) and never created; otherwise the pod is
   **created** in the API server (``POST pods``);
3. **kube-scheduler**: its own filters first (NodeUnschedulable, ``nodeSelector``, NodeResourcesFit:
   :mod:`shared.k8s.nodefit`; no node left: the pod stays Pending with kube-scheduler's reasons), then ``POST /filter``
   with ``ExtenderArgs {"Pod": pod, "Nodes": null, "NodeNames": [...]}`` naming the nodes they left, then ``POST /bind``
   with ``ExtenderBindingArgs`` for the single node returned (assumed on it meanwhile). With several extender
   URLs, filter and bind alternate between them (any replica binds what another filtered). A failed bind is
   retried from the filter, as kube-scheduler re-queues a pod;
4. **device plugin** (after kubelet's Allocate): the pod is found as HAMi's plugin finds it, through the node's
   ``hami.io/mutex.lock`` (``GetPendingPod``, :mod:`services.simulate.devplugin`), and its to-allocate list must
   serve every container's Allocate; then ``hami.io/bind-phase: success`` on the pod, the node's
   ``hami.io/mutex.lock`` removed (owner- and resourceVersion-checked, as ``ReleaseNodeLock`` does), and the pod's
   ``status.phase: Running``; for a pod given Cambricon MLUs, Cambricon's plugin also removes its own node lock
   ``cambricon.com/dsmlu.lock``. A bind the real plugin would serve wrongly (another pod, wrong device counts) is a
   :class:`DriverError`. A pod kube-scheduler placed alone on a node whose HAMi plugin serves a resource it asks
   for (a vendor not enabled) is rejected by the kubelet. This node side is :mod:`.nodeside`;
5. optional hooks let an embedded run wait for the informer to observe the settle before the next pod, and for the
   extender's snapshot to catch up before each filter, so placements do not depend on timing;
6. **priority and preemption** (docs/simulate.md): the API server's Priority admission (:mod:`.priority`) runs before
   the webhook. A pod no node fits waits in kube-scheduler's unschedulable pool and is tried again (after its
   backoff) when a pod is deleted. When one of positive priority is refused, the driver lets the extender finish
   its own preemption (``idle``) and plays the kubelet of every pod being deleted: its grace period, then
   ``Failed``, then the final delete; the preemptor is retried then and binds to the devices held for it;
7. **gangs**: the members of a v1.36 PodGroup with ``gang.minCount`` wait until ``minCount`` of them exist; then one
   group pass filters each in turn, and binds the members that passed only when at least ``minCount`` did;
   otherwise it forgets them all (the extender, told nothing, releases their reservations itself);
8. **kube-controller-manager** (:mod:`.kcm`): a deleted pod a controller owns is replaced by a new pod, queued as
   any other, ``controller_delay_s`` later; PodDisruptionBudgets' status is kept; :meth:`Driver.evict` (and the
   workload's ``Eviction`` documents, at their time) evicts through the API server's Eviction API.

Everything travels over HTTP with the exact JSON bodies the real components send (:mod:`.kubehttp`); admission is
:mod:`.admission`, the scheduler's timing and contention counters :mod:`.timing`.
Each pod's own steps (its creation, scheduling and binding cycles, settle and eviction) are :mod:`.cycles`;
this module orders pods through them.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from vgpu_scheduler.services.simulate.admission import Admit, Admitted, local_admission, webhook_admission
from vgpu_scheduler.services.simulate.controllers import Replace
from vgpu_scheduler.services.simulate.cycles import (
    EVICTED,
    Assume,
    Bound,
    CycleOutcome,
    Defaults,
    KubeObject,
    PodCycles,
    Queued,
    Unschedulable,
    as_evicted,
    effective_policies,
    scheduler_annotations,
)
from vgpu_scheduler.services.simulate.disruption import ScheduledEviction
from vgpu_scheduler.services.simulate.kcm import owned
from vgpu_scheduler.services.simulate.kubehttp import MERGE_PATCH, REQUEST_TIMEOUT_S, DriverError, Extenders, KubeHttp
from vgpu_scheduler.services.simulate.report import ADMISSION, PodResult
from vgpu_scheduler.services.simulate.timing import Contention, SchedulerTiming
from vgpu_scheduler.shared.k8s.nodefit import candidate_names, pod_key

__all__ = [
    "MERGE_PATCH",
    "REQUEST_TIMEOUT_S",
    "Admit",
    "Admitted",
    "Contention",
    "Defaults",
    "Driver",
    "DriverError",
    "Extenders",
    "KubeHttp",
    "SchedulerTiming",
    "candidate_names",
    "effective_policies",
    "local_admission",
    "schedule_all",
    "scheduler_annotations",
    "webhook_admission",
]
"""The driver and, for its callers, the pieces it is made of (HTTP clients, admission, timing, the result labels)
under one name."""

logger = logging.getLogger(__name__)

_WAITING_TASKS = ("simulate:backoff", "simulate:requeue", "simulate:flush")
"""Tasks of pods waiting to be retried: a stopped run leaves them out."""


class Driver(PodCycles):
    """Plays kube-scheduler v1.36 and HAMi's device plugin for a workload (see the module docstring).

    * **scheduling cycles are serial**: one pod at a time is filtered (``before_filter(pod)`` runs first; embedded
      runs wait there for the extender's snapshot to catch up with the store);
    * **binding cycles are asynchronous**: once the filter chose a node, the bind runs in a task of its own and the
      next pod is filtered at once, so many binds are in flight together and contend for node locks, as in the
      real scheduler;
    * **a failed bind** (an ``Error`` answer, a timeout) puts the pod into backoff, ``timing.backoff_s(attempts)``
      (1 s doubling to 10 s), then back into the queue ahead of pods that have not arrived yet;
    * every extender call times out after ``timing.http_timeout_s``;
    * **the device plugin** settles a bound pod ``timing.allocate_latency_s`` after its Binding;
    * pods **arrive** in workload order: each is admitted and created when the scheduler is ready for it.

    ``after_settle(pod)`` runs after the device plugin settled a pod.
    """

    async def schedule(self, pod: KubeObject) -> PodResult:
        """Admit, create, filter, bind and settle one pod on its own; the outcome as a :class:`PodResult`."""
        results = await self.run([pod])
        return results[0]

    async def run(
        self,
        pods: Sequence[KubeObject],
        *,
        stop: asyncio.Event | None = None,
        progress: Callable[[int, int, PodResult], None] | None = None,
    ) -> list[PodResult]:
        """Schedule ``pods``; the results of those finished, in workload order (all of them unless ``stop`` was
        set: then no new pod is taken, binds in flight finish and pods in backoff are left out)."""
        loop = asyncio.get_running_loop()
        start = self._started = loop.time()
        queue = [Queued(i, p) for i, p in enumerate(pods)]
        replacements: list[Queued] = []
        """Pods controllers created in place of deleted ones (:mod:`.kcm`)."""
        arrivals = collections.deque(queue)
        ready: collections.deque[Queued] = collections.deque()
        wake = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()
        failures: list[BaseException] = []
        finished = 0
        unschedulable: list[tuple[Queued, bool]] = []
        """Pods no node fitted, in kube-scheduler's unschedulable pool (and whether the extender refused them)."""
        by_key: dict[str, Queued] = {}
        terminating: set[str] = set()
        gang_waiting: dict[tuple[str, str], list[Queued]] = {}
        gang_bound: collections.Counter[tuple[str, str]] = collections.Counter()
        activity = 0
        """Binds settled and pods terminated so far: a flush that changed none of it ends the run."""
        flushed_at = -1
        quiet_at: float | None = None

        def finish(q: Queued, result: PodResult) -> None:
            nonlocal finished
            workload = q.index < len(pods)
            if q.result is None and workload:
                finished += 1
            q.result = result
            if progress is not None and workload:
                progress(finished, len(pods), result)
            wake.set()

        def spawn(coro: Awaitable[None], name: str) -> None:
            task = asyncio.ensure_future(coro)
            task.set_name(name)
            tasks.add(task)

            def done(t: asyncio.Task[None]) -> None:
                tasks.discard(t)
                if not t.cancelled() and t.exception() is not None:
                    failures.append(t.exception())  # type: ignore[arg-type]
                wake.set()

            task.add_done_callback(done)

        async def requeue_after(q: Queued, delay: float) -> None:
            await asyncio.sleep(delay)
            ready.append(q)

        def back_off(q: Queued, reasons: dict[str, str]) -> None:
            """A failed scheduling attempt: the pod waits its backoff, then goes back into the queue."""
            q.last_error = reasons
            if q.attempts >= self.timing.max_attempts:
                finish(q, self._result(q, None, {}, reasons))
                return
            self.contention.binds_retried += 1
            if not q.retried:
                q.retried = True
                self.contention.pods_retried += 1
            delay = self.timing.backoff_s(q.attempts)
            logger.info(
                "scheduling attempt failed: the pod backs off and is re-queued",
                extra={"pod": pod_key(q.created or q.original), "reasons": reasons, "backoff_s": delay},
            )
            spawn(requeue_after(q, delay), f"simulate:backoff:{pod_key(q.created or q.original)}")

        def park(q: Queued, result: PodResult, *, by_extender: bool = True) -> None:
            """Unschedulable: reported pending unless a cluster event brings it back."""
            finish(q, result)
            unschedulable.append((q, by_extender))

        def flush_unschedulable() -> None:
            """kube-scheduler's ``podMaxInUnschedulablePodsDuration``: a pod unschedulable that long is tried again
            whatever happened."""
            for q, _by_extender in unschedulable:
                if q.attempts < self.timing.max_attempts:
                    left = max(0.0, q.last_try + self.timing.unschedulable_flush_s - loop.time())
                    spawn(requeue_after(q, left), f"simulate:flush:{pod_key(q.created or q.original)}")
            unschedulable[:] = []

        def requeue_unschedulable(*, deleted: bool) -> None:
            """A pod was bound or deleted (kube-scheduler's AssignedPodAdd / AssignedPodDelete): the unschedulable
            pods that event concerns go back into the queue once their backoff is over. A pod the extender refused
            has no rejecting plugin, so kube-scheduler requeues it on any event; one NodeResourcesFit or
            NodeAffinity refused, on a deletion. A bind only takes room, so after a bind the driver retries only
            the pods that may preempt (the bound pod may be the victim they lacked): for the others the retry
            could only fail the same way."""
            keep: list[tuple[Queued, bool]] = []
            for q, by_extender in unschedulable:
                if not (deleted or (by_extender and self._may_preempt(q))):
                    keep.append((q, by_extender))
                    continue
                if q.attempts >= self.timing.max_attempts:
                    continue
                left = max(0.0, q.last_try + self.timing.backoff_s(q.attempts) - loop.time())
                spawn(requeue_after(q, left), f"simulate:requeue:{pod_key(q.created or q.original)}")
            unschedulable[:] = keep

        async def binding_cycle(q: Queued, node: str) -> None:
            assert q.created is not None
            error = await self._bind(q.created, node)
            if error is None:
                finish(q, await self._settled(q, node))
                await self.kcm.sync_budgets()
                nonlocal activity
                activity += 1
                requeue_unschedulable(deleted=False)
            else:
                ledger.forget(q.created)
                back_off(q, {node: f"bind failed: {error}"})

        async def settle_only(q: Queued, node: str) -> None:
            nonlocal activity
            finish(q, await self._settled(q, node))
            await self.kcm.sync_budgets()
            activity += 1
            requeue_unschedulable(deleted=False)

        creations: collections.deque[tuple[float, Queued]] = collections.deque()
        """Replacements decided, each created (queued) at its time, in the order decided (a reproducible run)."""

        def recreate(deleted: KubeObject) -> None:
            """kube-controller-manager: decide the replacement of an owned pod deleted; it is created after the
            controller's delay."""
            old = by_key.get(pod_key(deleted))
            due = loop.time() + self.kcm.delay_s
            made = self.kcm.replacement(deleted, old.original if old is not None else deleted, due - start)
            if made is None:
                return
            new = Queued(len(pods) + len(replacements), made, replaces=pod_key(deleted))
            replacements.append(new)
            if old is not None:
                old.replaced_by = pod_key(made)
            creations.append((due, new))
            if len(creations) == 1:
                spawn(create_replacements(), "simulate:controllers")

        async def create_replacements() -> None:
            while creations:
                due, new = creations[0]
                await asyncio.sleep(max(0.0, due - loop.time()))
                creations.popleft()
                ready.append(new)
                wake.set()

        async def evicted(before: KubeObject) -> None:
            """A pod the Eviction API deleted (``before``: its state before): one terminating is the kubelet's, one
            deleted at once (its grace period 0, or not yet bound) is gone; its controller replaces it."""
            q = by_key.get(pod_key(before))
            try:
                await self.kube.get_pod(before["metadata"]["namespace"], before["metadata"]["name"])
            except DriverError as e:
                if e.status != 404:
                    raise
                bound = bool((before.get("spec") or {}).get("nodeName"))
                if owned(before, Replace.ON_DELETION) or (not bound and owned(before, Replace.WHEN_GONE)):
                    recreate(before)
                if bound:
                    await ended(as_evicted(before))  # a StatefulSet's replacement follows from there
                elif q is not None:
                    q.deleted = True
                    result = self._result(q, None, {}, {ADMISSION: f"{EVICTED} before it was bound"})
                    finish(q, replace(result, evicted=True, via_eviction_api=True))
                return
            await kubelet_sync()

        async def terminate(pod: KubeObject) -> None:
            """The kubelet of a pod being deleted; then kube-scheduler hears of the deletion."""
            meta = pod["metadata"]
            await ended(await self.node_side.terminate(meta["namespace"], meta["name"]))

        async def ended(last: KubeObject | None) -> None:
            """A pod bound to a node is gone (its last state, None if unknown): kube-scheduler hears of it."""
            nonlocal activity
            activity += 1
            if last is not None:
                ledger.forget(last)
                if self.after_terminate is not None:
                    await self.after_terminate(last)
                await self._record_eviction(last, by_key.get(pod_key(last)), finish, loop.time() - start)
                if owned(last, Replace.WHEN_GONE):
                    recreate(last)
            await self.kcm.sync_budgets()
            requeue_unschedulable(deleted=True)

        async def kubelet_sync() -> None:
            """Let the extender finish what it does in the background, then start the kubelet's termination of
            every pod being deleted."""
            if self.idle is not None:
                await self.idle()
            for pod in await self.kube.list_pods():
                key = pod_key(pod)
                meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
                if meta.get("deletionTimestamp") and spec.get("nodeName") and key not in terminating:
                    terminating.add(key)
                    spawn(terminate(pod), f"simulate:terminate:{key}")
                    if owned(pod, Replace.ON_DELETION):
                        recreate(pod)

        def handle(q: Queued, outcome: CycleOutcome) -> None:
            if isinstance(outcome, PodResult):
                finish(q, outcome)
            elif isinstance(outcome, Unschedulable):
                park(q, outcome.result, by_extender=outcome.by_extender)
            elif isinstance(outcome, Assume):
                assert q.created is not None
                ledger.assume(q.created, outcome.node)  # kube-scheduler's assume, before the bind
                self._in_flight += 1
                self.contention.max_binds_in_flight = max(self.contention.max_binds_in_flight, self._in_flight)
                spawn(binding_cycle(q, outcome.node), f"simulate:bind:{pod_key(q.created or q.original)}")
            elif isinstance(outcome, Bound):
                assert q.created is not None
                ledger.assume(q.created, outcome.node)
                spawn(settle_only(q, outcome.node), f"simulate:settle:{pod_key(q.created or q.original)}")
            else:
                back_off(q, outcome.reasons)

        async def group_pass(group: tuple[str, str], members: list[Queued], need: int) -> None:
            """kube-scheduler v1.36's gang pass: each member filtered in turn and assumed; the members that passed
            are bound only when at least ``need`` did, otherwise all are forgotten."""
            passed: list[tuple[Queued, Assume]] = []
            failed: list[tuple[Queued, CycleOutcome]] = []
            for m in members:
                outcome = await self._scheduling_cycle(m)
                if isinstance(outcome, Assume):
                    assert m.created is not None
                    ledger.assume(m.created, outcome.node)
                    passed.append((m, outcome))
                else:
                    failed.append((m, outcome))
            if len(passed) >= need:
                gang_bound[group] += len(passed)
                for m, assumed in passed:
                    ledger.forget(m.created or {})
                    handle(m, assumed)
                for m, outcome in failed:
                    handle(m, outcome)
                return
            for m, _assumed in passed:
                ledger.forget(m.created or {})
            if self.idle is not None:
                await self.idle()  # the extender, told nothing, releases what the pass reserved (docs/gangs.md)
            why = (
                f"pod group {group[1]}: {len(passed)} of {len(members)} member(s) found a node, "
                f"{need} needed (minCount {self.gangs[group]}): none bound"
            )
            for m, _assumed in passed:
                park(m, self._result(m, None, {}, {ADMISSION: why}))
            for m, outcome in failed:
                if isinstance(outcome, Unschedulable):
                    park(m, outcome.result, by_extender=outcome.by_extender)
                else:
                    handle(m, outcome)

        ledger = await self.ledger()
        for g in self.pod_groups:
            await self.kube.create_namespaced(g, "podgroups")
        self.kcm.count([*await self.kube.list_pods(), *pods])
        await self.kcm.start()
        self._evicted = evicted

        async def evict_scheduled(evictions: Sequence[ScheduledEviction]) -> None:
            """The workload's evictions, one after the other in time and file order (a run stays reproducible)."""
            for e in evictions:
                await asyncio.sleep(max(0.0, start + e.at_s - loop.time()))
                await self.evict(e.namespace, e.name, by="workload")

        if self.scheduled_evictions:
            ordered = sorted(self.scheduled_evictions, key=lambda e: e.at_s)
            spawn(evict_scheduled(ordered), "simulate:evictions")
        try:
            while True:
                if failures:
                    raise failures[0]
                stopping = stop is not None and stop.is_set()
                q: Queued | None = None
                if not stopping and ready:
                    q = ready.popleft()
                elif not stopping and arrivals:
                    q = arrivals.popleft()
                if q is not None and q.deleted:
                    continue
                if q is not None:
                    if q.created is None:
                        refused = await self._admit_and_create(q)
                        if refused is not None:
                            finish(q, refused)
                            continue
                        by_key[pod_key(q.created or q.original)] = q
                    group = self._gang_of(q)
                    if group is not None and gang_bound[group] < self.gangs[group]:
                        waiting = gang_waiting.setdefault(group, [])
                        waiting.append(q)
                        need = self.gangs[group] - gang_bound[group]
                        if len(waiting) >= need:
                            gang_waiting[group] = []
                            await group_pass(group, waiting, need)
                        continue
                    outcome = await self._scheduling_cycle(q)
                    handle(q, outcome)
                    if isinstance(outcome, Unschedulable) and outcome.by_extender and self.on_unschedulable:
                        await self.on_unschedulable(q.created or q.original)  # e.g. a defrag planner's moves
                    if isinstance(outcome, Unschedulable) and (
                        self._may_preempt(q) or (outcome.by_extender and self.moves_in_background)
                    ):
                        await kubelet_sync()  # the extender preempts or moves pods for it off the request path
                    continue
                live = [t for t in tasks if not (stopping and t.get_name().startswith(_WAITING_TASKS))]
                if not live and not stopping:
                    await kubelet_sync()  # anything still being deleted is terminated before the run ends
                    live = list(tasks)
                    preemptors = [q for q, by_extender in unschedulable if by_extender and self._may_preempt(q)]
                    if not live and preemptors and activity != flushed_at and self.contention.clock == "simulated":
                        # quiet, but pods that may preempt wait: kube-scheduler's periodic flush tries the
                        # unschedulable pods again. For a pod that does not preempt nothing changed, so the retry
                        # would fail the same way: without a preemptor waiting the run ends here (and five
                        # simulated minutes of the services' timers are not worth computing). A flush after which
                        # nothing was bound or deleted would only repeat itself, so it ends the run too; on real
                        # time the flush's five minutes are not waited for.
                        flushed_at, quiet_at = activity, loop.time()
                        flush_unschedulable()
                        live = list(tasks)
                if not live:
                    break
                wake.clear()
                await wake.wait()
        finally:
            self._evicted = None
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # a last flush that changed nothing is not part of the run's duration
            end = quiet_at if quiet_at is not None and activity == flushed_at else loop.time()
            self.contention.duration_s = end - start
        if failures:
            raise failures[0]
        for group, waiting in gang_waiting.items():
            for m in waiting:
                if m.result is None:
                    have = len(waiting) + gang_bound[group]
                    why = f"pod group {group[1]}: waiting for minCount {self.gangs[group]} members, {have} exist"
                    finish(m, self._result(m, None, {}, {ADMISSION: why}))
        self.replacements = [replace(q.result, replaced_by=q.replaced_by) for q in replacements if q.result is not None]
        return [replace(q.result, replaced_by=q.replaced_by) for q in queue if q.result is not None]


async def schedule_all(
    driver: Driver,
    pods: Sequence[KubeObject],
    *,
    stop: asyncio.Event | None = None,
    progress: Callable[[int, int, PodResult], None] | None = None,
) -> list[PodResult]:
    """Schedule ``pods`` (:meth:`Driver.run`); stops early (returning what is done) once ``stop`` is set."""
    return await driver.run(pods, stop=stop, progress=progress)
