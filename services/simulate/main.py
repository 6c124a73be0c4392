"""``vgpu-scheduler simulate`` and ``vgpu-scheduler emulator``: the composition roots.

``simulate`` runs the real registrar, informer and extender in this process against the API emulator and an
embedded store, and plays kube-scheduler and the device plugin for a workload (``--cluster``, ``--workload``);
``--compare`` repeats that per policy combination. With ``--kube-server URL --extender-url URL...`` it drives a
deployed system instead (the docker-compose ``driver``). With no arguments it compares the default policy
combinations on the bundled example cluster and workload.

``emulator`` serves the API emulator seeded with a cluster file until SIGTERM (the docker-compose ``emulator``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from vgpu_scheduler.services.simulate.admission import local_admission, webhook_admission
from vgpu_scheduler.services.simulate.clock import VirtualClockLoop
from vgpu_scheduler.services.simulate.compare import (
    DEFAULT_COMBINATIONS,
    Combination,
    Outcome,
    comparison_json,
    outcome_of,
    parse_policies,
    render_comparison,
    render_vendor_comparison,
    run_comparison,
    run_scenario,
    settings_with,
)
from vgpu_scheduler.services.simulate.driver import Defaults, Driver, schedule_all
from vgpu_scheduler.services.simulate.harness import HarnessError, HarnessTiming
from vgpu_scheduler.services.simulate.kubehttp import DriverError, Extenders, KubeHttp
from vgpu_scheduler.services.simulate.manifests import Cluster, Workload, load_cluster, load_workload
from vgpu_scheduler.services.simulate.plot import check_directory, load_pyplot, write_plots
from vgpu_scheduler.services.simulate.priority import PriorityAdmission
from vgpu_scheduler.services.simulate.render import render_pods, render_summary
from vgpu_scheduler.services.simulate.report import PodResult, policy_label
from vgpu_scheduler.services.simulate.timing import SchedulerTiming
from vgpu_scheduler.shared.codec.selectors import decode_gpu_policy, decode_node_policy
from vgpu_scheduler.shared.config import (
    OPTIONS_BY_NAME,
    LogFormat,
    LogLevel,
    Service,
    SimulateSettings,
    parse_bind_address,
    settings_from_args,
)
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.logs import configure_logging
from vgpu_scheduler.shared.runtime import run_service
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

logger = logging.getLogger(__name__)

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"
"""The bundled example cluster and workload (package data; the repository's ``examples/`` holds the same files)."""
EXAMPLE_CLUSTER = EXAMPLES_DIR / "cluster.yaml"
EXAMPLE_WORKLOAD = EXAMPLES_DIR / "workload.yaml"
EXAMPLE_DEVICE_CONFIG = EXAMPLES_DIR / "device-config.yaml"
"""The device config of the bundled example (every vendor enabled), used with the bundled cluster unless a device
config is given (``--device-config-file``, its environment variable or a ``--config`` file)."""

EXIT_INTERRUPTED = 130
EXTERNAL_READY_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------------------------
# simulate
# --------------------------------------------------------------------------------------------


def _explicit(args: argparse.Namespace, option: str) -> bool:
    return getattr(args, OPTIONS_BY_NAME[option].dest, None) is not None


def _configure_logs(args: argparse.Namespace, settings: SimulateSettings) -> None:
    """Logs go to stderr; the services' INFO lines are hidden unless a log level was asked for."""
    common = settings.common
    asked = (
        _explicit(args, "log-level")
        or bool(os.environ.get(OPTIONS_BY_NAME["log-level"].env_var))
        or common.debug
        or common.verbosity >= 4
    )
    configure_logging(fmt=common.log_format, level=common.effective_log_level if asked else LogLevel.WARNING)


class ProgressLine:
    """``[label] i/n ns/name -> node`` on stderr: rewritten in place on a terminal, one line each otherwise."""

    def __init__(self, stream: TextIO, *, tty: bool) -> None:
        self.stream = stream
        self.tty = tty
        self._open = False

    def callback(self, label: str) -> Callable[[int, int, PodResult], None]:
        def show(i: int, n: int, res: PodResult) -> None:
            text = f"[{label}] {i}/{n} {res.namespace}/{res.name} -> {res.node or 'pending'}"
            if self.tty:
                self.stream.write("\r\x1b[K" + text)
                self._open = i < n
                if i == n:
                    self.stream.write("\n")
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

        return show

    def close(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


def _with_example_device_config(args: argparse.Namespace) -> None:
    """The bundled cluster runs with the bundled device config and ``--enable-ascend`` (its Ascend pools) unless a
    device config was given some way."""
    given = (
        _explicit(args, "device-config-file")
        or _explicit(args, "config")
        or bool(os.environ.get(OPTIONS_BY_NAME["device-config-file"].env_var))
        or bool(os.environ.get(OPTIONS_BY_NAME["config"].env_var))
    )
    if args.cluster is None and args.sim_kube_server is None and not given:
        setattr(args, OPTIONS_BY_NAME["device-config-file"].dest, str(EXAMPLE_DEVICE_CONFIG))
        # the bundled cluster has Ascend pools: schedule them, as HAMi does with --enable-ascend
        if not _explicit(args, "enable-ascend") and not os.environ.get(OPTIONS_BY_NAME["enable-ascend"].env_var):
            setattr(args, OPTIONS_BY_NAME["enable-ascend"].dest, "true")


def _inputs(args: argparse.Namespace, settings: SimulateSettings) -> tuple[Cluster, Workload]:
    common = settings.common
    cluster = load_cluster(
        args.cluster or EXAMPLE_CLUSTER,
        count_resource=common.nvidia.resource_count_name,
        vendors=enabled_vendors(common.nvidia, common.device_sections, common.enable_flags),
    )
    workload = load_workload(args.workload or EXAMPLE_WORKLOAD)
    for line in cluster.warnings:
        print(f"vgpu-scheduler: warning: {line}", file=sys.stderr)
    return cluster, workload


def _mode_checks(args: argparse.Namespace) -> bool:
    """Validate flag combinations; return whether to compare."""
    external = args.sim_kube_server is not None
    if external:
        if not args.extender_urls:
            raise ConfigError("--kube-server needs at least one --extender-url (the extenders to drive)")
        for flag, given in (
            ("--cluster", args.cluster),
            ("--compare", args.compare),
            ("--policies", args.policies),
            ("--redis-url", _explicit(args, "redis-url")),
        ):
            if given:
                raise ConfigError(
                    f"{flag} does not apply with --kube-server (the cluster and services are already running)"
                )
        return False
    if args.extender_urls:
        raise ConfigError("--extender-url needs --kube-server (without it, simulate runs its own extender)")
    policy_given = _explicit(args, "node-scheduler-policy") or _explicit(args, "gpu-scheduler-policy")
    return bool(args.compare or args.policies or not (args.cluster or args.workload or policy_given))


def run(args: argparse.Namespace) -> int:
    """``vgpu-scheduler simulate``: 0 done, 1 a failure, 2 bad flags or input, 130 interrupted."""
    _with_example_device_config(args)
    settings = settings_from_args(Service.SIMULATE, args, os.environ)
    compare = _mode_checks(args)
    combos: Sequence[Combination] = parse_policies(args.policies) if args.policies else DEFAULT_COMBINATIONS
    if args.plot:
        load_pyplot()  # a clear error before any work when matplotlib is missing
        check_directory(args.plot)
    _configure_logs(args, settings)
    external = args.sim_kube_server is not None
    if external:
        cluster, workload = None, load_workload(args.workload or EXAMPLE_WORKLOAD)
    else:
        cluster, workload = _inputs(args, settings)
    progress = ProgressLine(sys.stderr, tty=sys.stderr.isatty()) if (args.progress or sys.stderr.isatty()) else None
    scheduler = SchedulerTiming(
        allocate_latency_s=args.allocate_latency,
        http_timeout_s=args.extender_http_timeout,
        controller_delay_s=args.controller_delay,
    )
    timing = HarnessTiming(scheduler=scheduler)
    # Every party of an embedded run on the embedded store lives in this process: it runs on the simulated clock
    simulated = not external and settings.common.redis_url is None
    code = 0

    async def main(stop: asyncio.Event) -> None:
        nonlocal code
        try:
            if external:
                outcome = await drive_deployed(
                    settings,
                    kube_server=args.sim_kube_server,
                    extender_urls=args.extender_urls,
                    workload=workload,
                    stop=stop,
                    progress=progress.callback("driver") if progress is not None else None,
                    timing=scheduler,
                )
                code = _emit_single(args, outcome, _source_line(None, workload, kube_server=args.sim_kube_server))
            elif compare:
                assert cluster is not None
                rows = await run_comparison(
                    settings,
                    cluster,
                    workload,
                    combos,
                    stop=stop,
                    progress=(lambda i, c: progress.callback(c.label)) if progress is not None else None,
                    timing=timing,
                )
                code = _emit_comparison(args, cluster, workload, rows, complete=len(rows) == len(combos))
            else:
                assert cluster is not None
                label = _label(settings)
                outcome = await run_scenario(
                    settings,
                    cluster,
                    workload,
                    stop=stop,
                    progress=progress.callback(label) if progress is not None else None,
                    timing=timing,
                )
                code = _emit_single(args, outcome, _source_line(cluster, workload))
        except (HarnessError, DriverError) as e:
            print(f"vgpu-scheduler: error: {e}", file=sys.stderr)
            code = 1
        finally:
            if progress is not None:
                progress.close()

    exit_code = run_service(main, loop_factory=VirtualClockLoop if simulated else None)
    return exit_code if exit_code != 0 else code


def _label(settings: SimulateSettings) -> str:
    ext = settings.extender
    return policy_label(ext.node_policy.value, str(ext.gpu_policy))


def _source_line(cluster: Cluster | None, workload: Workload, *, kube_server: str | None = None) -> str:
    """What was simulated: ``cluster FILE: N nodes, M running pods; workload FILE: K pods``."""
    where = (
        f"cluster {cluster.source}: {len(cluster.nodes)} nodes, {len(cluster.pods)} running pods"
        if cluster is not None
        else f"cluster at {kube_server or 'a deployed API server'}"
    )
    return f"{where}; workload {workload.source}: {len(workload.pods)} pods"


def _emit_single(args: argparse.Namespace, outcome: Outcome, source: str) -> int:
    summary = outcome.summary
    label = policy_label(summary["policies"]["node"], summary["policies"]["gpu"])
    if args.output == "json":
        print(json.dumps(outcome.to_json(), indent=2))
    else:
        print(source)
        print()
        print(render_pods(outcome.results, outcome.replacements))
        print()
        print(render_summary(summary))
    if args.plot:
        for path in write_plots([label], [summary], args.plot, caption=source):
            print(f"wrote {path}", file=sys.stderr)
    if not outcome.complete:
        print("vgpu-scheduler: simulation interrupted: the results above are partial", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


def _emit_comparison(
    args: argparse.Namespace,
    cluster: Cluster,
    workload: Workload,
    rows: Sequence[tuple[Combination, Outcome]],
    *,
    complete: bool,
) -> int:
    complete = complete and all(outcome.complete for _, outcome in rows)
    source = _source_line(cluster, workload)
    if args.output == "json":
        print(json.dumps(comparison_json(rows), indent=2))
    else:
        print(source)
        print()
        print(render_comparison(rows))
        print()
        by_vendor = render_vendor_comparison(rows)
        if by_vendor:
            print("Per vendor: memory/cores allocated, devices in use/usable")
            print(by_vendor)
            print()
        print(
            "GPU MEM/CORES: allocated over usable devices (every vendor's), running pods included. FRAGMENTATION: "
            "free device memory on cards that already hold a pod, as a share of all free device memory. BIND "
            "RETRIES: binds that failed (node lock busy) and were retried after kube-scheduler's backoff. LOCK "
            "WAITS: binds that waited for a node lock. See docs/simulate.md."
        )
    if args.plot and rows:
        paths = write_plots([c.label for c, _ in rows], [o.summary for _, o in rows], args.plot, caption=source)
        for path in paths:
            print(f"wrote {path}", file=sys.stderr)
    if not complete:
        print("vgpu-scheduler: simulation interrupted: the results above are partial", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


POLICY_INFO_METRIC = "vgpu_extender_policy_info"


async def extender_policies(session: aiohttp.ClientSession, url: str) -> tuple[str, str] | None:
    """The default node and GPU policies a running extender serves with (its ``vgpu_extender_policy_info``
    metric on ``/metrics``), or None when it does not say (an older extender, no ``/metrics``)."""
    try:
        async with session.get(f"{url.rstrip('/')}/metrics", timeout=aiohttp.ClientTimeout(total=5.0)) as resp:
            if resp.status != 200:
                return None
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == POLICY_INFO_METRIC and sample.value == 1:
                    return sample.labels["node_scheduler_policy"], sample.labels["gpu_scheduler_policy"]
    except (ValueError, KeyError):
        return None
    return None


async def _wait_extenders_ready(session: aiohttp.ClientSession, urls: Sequence[str], stop: asyncio.Event) -> None:
    """Wait until every extender answers ``/readyz`` 200 (a deployed system may still be starting)."""
    timeout = aiohttp.ClientTimeout(total=2.0)
    async with asyncio.timeout(EXTERNAL_READY_TIMEOUT_S):
        for url in urls:
            delay = 0.1
            while not stop.is_set():
                try:
                    async with session.get(f"{url.rstrip('/')}/readyz", timeout=timeout) as resp:
                        if resp.status == 200:
                            break
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(delay)  # an external process starting up: nothing to await
                delay = min(delay * 2, 2.0)


async def drive_deployed(
    settings: SimulateSettings,
    *,
    kube_server: str,
    extender_urls: Sequence[str],
    workload: Workload,
    stop: asyncio.Event | None = None,
    progress: Callable[[int, int, PodResult], None] | None = None,
    timing: SchedulerTiming | None = None,
) -> Outcome:
    """Schedule the workload on a deployed system: its API server (``--kube-server``, e.g. the emulator) and its
    extenders (``--extender-url``, used in turn). Admission goes through the first extender's ``/webhook`` (locally,
    without the quota pre-check, if it serves none). The default policies reported are the first extender's own
    (its ``vgpu_extender_policy_info`` metric; this command's flags only when it does not publish them). The report
    is computed from the API server's objects."""
    timing = timing or SchedulerTiming()
    stop = stop or asyncio.Event()
    async with aiohttp.ClientSession() as session:
        kube = KubeHttp(session, kube_server)
        extenders = Extenders(session, extender_urls, timeout_s=timing.http_timeout_s)
        try:
            await _wait_extenders_ready(session, extenders.urls, stop)
        except TimeoutError:
            raise DriverError(f"the extenders were not ready within {EXTERNAL_READY_TIMEOUT_S:g}s") from None
        served = await extender_policies(session, extenders.urls[0])
        if served is None:
            logger.warning(
                "the extender does not publish its policies (vgpu_extender_policy_info on /metrics): "
                "reporting this command's --node-scheduler-policy/--gpu-scheduler-policy instead",
                extra={"extender": extenders.urls[0]},
            )
        else:
            try:
                settings = settings_with(
                    settings, Combination(decode_node_policy(served[0]), decode_gpu_policy(served[1]))
                )
            except DecodeError as e:
                raise DriverError(f"{extenders.urls[0]}/metrics: {POLICY_INFO_METRIC}: {e}") from None
        ext = settings.extender
        vendors = enabled_vendors(settings.common.nvidia, settings.common.device_sections, settings.common.enable_flags)
        webhook = webhook_admission(extenders)
        fallback = local_admission(
            cfg=settings.common.nvidia,
            scheduler_name=ext.scheduler_name,
            force_overwrite_default_scheduler=ext.force_overwrite_default_scheduler,
            quota=_no_quota,
            vendors=vendors,
        )
        use_webhook = True

        async def admit(pod: dict[str, Any]) -> Any:
            nonlocal use_webhook
            if use_webhook:
                try:
                    return await webhook(pod)
                except DriverError as e:
                    if e.status not in (404, 501):
                        raise
                    logger.warning("the extender serves no /webhook: admitting pods locally", extra={"error": str(e)})
                    use_webhook = False
            return await fallback(pod)

        driver = Driver(
            kube,
            extenders,
            admit,
            cfg=settings.common.nvidia,
            defaults=Defaults(ext.node_policy, ext.gpu_policy),
            timing=timing,
            vendors=vendors,
            priority=PriorityAdmission(workload.priority_classes),
            pod_groups=workload.pod_groups,
            controllers=workload.controllers,
            budgets=workload.budgets,
            evictions=workload.evictions,
            controller_delay_s=timing.controller_delay_s,
        )
        results = await schedule_all(driver, list(workload.pods), stop=stop, progress=progress)
        nodes, pods = await kube.list_nodes(), await kube.list_pods()
    return outcome_of(settings, workload, results, nodes, pods, driver=driver)


async def _no_quota(namespace: str) -> None:
    return None


# --------------------------------------------------------------------------------------------
# emulator
# --------------------------------------------------------------------------------------------


def run_emulator(args: argparse.Namespace) -> int:
    """``vgpu-scheduler emulator --cluster FILE --bind HOST:PORT``: serve until SIGTERM (exit 0)."""
    try:
        fmt, level = LogFormat(args.log_format), LogLevel(args.log_level)
    except ValueError as e:
        raise ConfigError(f"--log-format/--log-level: {e}") from None
    try:
        address = parse_bind_address(args.bind)
    except ValueError as e:
        raise ConfigError(f"--bind: {e}, got {args.bind!r}") from None
    cluster = load_cluster(args.cluster or EXAMPLE_CLUSTER)
    configure_logging(fmt=fmt, level=level)

    async def main(stop: asyncio.Event) -> None:
        emulator = Emulator()
        for obj in cluster.objects():
            emulator.put(obj)
        url = await emulator.start(address.host or "0.0.0.0", address.port)
        logger.info("emulator serving", extra={"url": url, "cluster": cluster.source, "nodes": len(cluster.nodes)})
        try:
            await stop.wait()
        finally:
            await emulator.stop()
            logger.info("emulator stopped")

    return run_service(main)
