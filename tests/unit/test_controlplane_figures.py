"""The benchmark's figures read from the API server's metrics, kube-scheduler's log and /proc."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.controlplane.apicalls import AuditTail, calls_between, calls_by_client, client_of, request_counts
from tests.controlplane.cpu import MACHINE, cpu_by_pid, cpu_used
from tests.controlplane.rediscalls import commands_between
from tests.controlplane.scenario import scheduler_error_kinds

_FIXED = 'component="apiserver",dry_run="",group="",scope="resource",version="v1"'
METRICS = "\n".join(
    [
        "# TYPE apiserver_request_total counter",
        f'apiserver_request_total{{code="201",{_FIXED},resource="pods",subresource="binding",verb="POST"}} 7',
        f'apiserver_request_total{{code="200",{_FIXED},resource="nodes",subresource="",verb="PATCH"}} 3',
        f'apiserver_request_total{{code="409",{_FIXED},resource="nodes",subresource="",verb="PATCH"}} 2',
        f'apiserver_request_total{{code="0",{_FIXED},resource="pods",subresource="",verb="WATCH"}} 5',
        'apiserver_request_total_other{verb="GET"} 9',
    ]
)


def test_request_counts_sum_codes_and_leave_watches_out() -> None:
    assert request_counts(METRICS) == {"POST pods/binding": 7.0, "PATCH nodes": 5.0}
    later = request_counts(METRICS.replace("} 7", "} 10"))
    assert calls_between(request_counts(METRICS), later) == {"POST pods/binding": 3}


def test_scheduler_error_kinds_group_lines_by_their_text_without_names_and_numbers() -> None:
    log = "\n".join(
        [
            'E1125 03:40:01.1 1 schedule_one.go:1] "Error scheduling pod; retrying" err="node run-n0001 is locked by '
            'ns/p00012 (redis); gave up after waiting 3.01s"',
            'E1125 03:40:02.2 1 schedule_one.go:1] "Error scheduling pod; retrying" err="node run-n0417 is locked by '
            'ns/p01999 (redis); gave up after waiting 2.99s"',
            'I1125 03:40:03.3 1 schedule_one.go:1] "Successfully bound pod to node" pod="ns/p00001"',
            'E1125 03:40:04.4 1 schedule_one.go:1] "Failed to bind pod" pod="ns/p00003"',
        ]
    )
    kinds = scheduler_error_kinds(log)
    assert sorted(kinds.values()) == [1, 2]
    assert any("is locked by ns/# (redis)" in k for k in kinds)


def test_cpu_used_counts_this_process_as_the_harness() -> None:
    before = cpu_by_pid()
    if not before:
        pytest.skip("no /proc on this system")
    sum(i * i for i in range(3_000_000))  # well over one clock tick of CPU
    after = cpu_by_pid()
    used = cpu_used(before, after)
    assert before[os.getpid()][0] == "harness"
    assert used["harness"] > 0
    machine = after[MACHINE][1] - before[MACHINE][1]
    assert machine >= used["harness"] - 0.02  # the whole machine's sum covers this process (ticks round)
    assert sum(used.values()) >= machine - 1e-9  # what no process read accounts for is in "other"


def _audit(
    verb: str, agent: str, at: str, resource: str | None = "pods", sub: str = "", stage: str = "ResponseComplete"
) -> str:
    ref = {"resource": resource, "namespace": "ns", "name": "p1", "apiVersion": "v1"} if resource else None
    if ref is not None and sub:
        ref["subresource"] = sub
    event: dict[str, object] = {
        "kind": "Event",
        "stage": stage,
        "verb": verb,
        "userAgent": agent,
        "requestReceivedTimestamp": at,
    }
    if ref is not None:
        event["objectRef"] = ref
    return json.dumps(event)


def test_clients_are_told_apart_by_their_user_agent() -> None:
    assert client_of("kube-scheduler/v1.36.3 (linux/amd64) kubernetes/abcdef/scheduler") == "kube-scheduler"
    assert client_of("vgpu-scheduler-extender") == "extender"
    assert client_of("vgpu-scheduler-informer") == "informer"
    assert client_of("vgpu-scheduler-registrar") == "registrar"
    assert client_of("devplugin") == "device-plugin"
    assert client_of("kube-apiserver/v1.36.3 (linux/amd64) kubernetes/abcdef") == "kube-apiserver"
    assert client_of("Python/3.11 aiohttp/3.10.5") == "harness"


def test_calls_by_client_count_the_window_by_sender_verb_and_resource() -> None:
    lines = [
        _audit("create", "kube-scheduler/v1.36.3", "2026-11-27T09:00:01.500000Z", sub="binding"),
        _audit("patch", "vgpu-scheduler-extender", "2026-11-27T09:00:02Z"),
        _audit("patch", "vgpu-scheduler-extender", "2026-11-27T09:00:02.1Z", resource="nodes"),
        _audit("get", "vgpu-scheduler-informer", "2026-11-27T09:00:03Z"),
        _audit("list", "Python/3.11 aiohttp/3.10.5", "2026-11-27T09:00:03Z"),
        _audit("get", "Python/3.11 aiohttp/3.10.5", "2026-11-27T09:00:03Z", resource=None),
        _audit("patch", "vgpu-scheduler-extender", "2026-11-27T09:00:09Z"),  # after the window
        _audit("patch", "vgpu-scheduler-extender", "2026-11-27T09:00:02Z", stage="ResponseStarted"),
        "not json",
    ]
    start = 1795770000.0  # 2026-11-27T09:00:00Z
    assert calls_by_client(lines, start, start + 5) == {
        "kube-scheduler": {"POST pods/binding": 1},
        "extender": {"PATCH pods": 1, "PATCH nodes": 1},
        "informer": {"GET pods": 1},
        "harness": {"LIST pods": 1, "GET -": 1},
    }


def test_the_audit_tail_reads_each_complete_line_once(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    tail = AuditTail(log)
    assert tail.read() == []  # no log yet
    log.write_text('{"a": 1}\n{"b": 2}\n{"c"')
    assert tail.read() == ['{"a": 1}', '{"b": 2}']
    with log.open("a") as f:
        f.write(": 3}\n")
    assert tail.read() == ['{"c": 3}']
    assert tail.read() == []


def test_the_audit_tail_follows_a_rotation(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    tail = AuditTail(log)
    log.write_text("1\n2\n")
    assert tail.read() == ["1", "2"]
    with log.open("a") as f:
        f.write("3\n")
    log.rename(tmp_path / "audit-2026-11-27T10-01-25.541.log")  # as the API server rotates it
    log.write_text("4\n")
    assert tail.read() == ["3", "4"]
    with log.open("a") as f:
        f.write("5\n")
    assert tail.read() == ["5"]


def test_only_what_this_process_started_gets_a_label_of_its_own(tmp_path: Path) -> None:
    if not cpu_by_pid():
        pytest.skip("no /proc on this system")
    sleep = shutil.which("sleep")
    if sleep is None:
        pytest.skip("no sleep binary")
    fake = tmp_path / "redis-server"
    fake.symlink_to(sleep)
    child = subprocess.Popen([str(fake), "30"])
    # the same program, orphaned at once (its shell exits): another tenant's redis-server, as far as we know
    orphan = int(subprocess.run(["sh", "-c", f"{fake} 30 >/dev/null 2>&1 & echo $!"], capture_output=True,
                                text=True, check=True).stdout)  # fmt: skip
    try:
        readings = cpu_by_pid()
        assert readings[child.pid][0] == "redis-server"
        assert readings[orphan][0] == "other"
        assert readings[os.getpid()][0] == "harness"
    finally:
        child.kill()
        child.wait()
        os.kill(orphan, signal.SIGKILL)


def test_redis_commands_between_two_readings() -> None:
    before = {"evalsha": (10, 500), "get": (3, 6)}
    after = {"evalsha": (14, 700), "get": (3, 6), "hget": (8, 9)}
    assert commands_between(before, after) == {"evalsha": (4, 200), "hget": (8, 9)}
