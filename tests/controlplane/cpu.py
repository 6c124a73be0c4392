"""CPU seconds per component over a window of a benchmark run, read from ``/proc`` (Linux; empty elsewhere).

Every process on the machine is read, so that what the machine's other tenants used shows up too ("other"). A
process this one started (directly or not) is labelled by its command line: the control plane
(``kube-apiserver``, ``etcd``, ``kube-scheduler``), ``redis-server``, our services (``extender``, ``informer``,
``registrar``, by their ``services.cli`` subcommand); this process is the ``harness`` (pod creation, the bind watch
and the device-plugin emulator). Every other process is ``other``, whatever it runs: on a shared machine another
tenant's kube-scheduler, redis-server or informer is not ours to count."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

_PROC = Path("/proc")
_LABELS = ("kube-apiserver", "kube-scheduler", "etcd", "redis-server")
_SERVICES = ("extender", "informer", "registrar")


def _label(pid: int, cmdline: list[str], ours: bool) -> str:
    if pid == os.getpid():
        return "harness"
    if not ours:
        return "other"
    head = os.path.basename(cmdline[0]) if cmdline else ""
    for label in _LABELS:
        if head.startswith(label):
            return label
    if "vgpu_scheduler.services.cli" in cmdline:
        after = cmdline[cmdline.index("vgpu_scheduler.services.cli") + 1 :]
        if after and after[0] in _SERVICES:
            return after[0]
    return "other"


MACHINE = -1
"""The key of :func:`cpu_by_pid`'s reading of the whole machine (``/proc/stat``): what every process used, those
that started and ended between two readings included."""


def _machine_seconds(tick: int) -> float | None:
    try:
        fields = (_PROC / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] != "cpu":
        return None
    busy = [int(x) for i, x in enumerate(fields[1:9]) if i not in (3, 4)]  # all but idle and iowait
    return sum(busy) / tick


def cpu_by_pid() -> dict[int, tuple[str, float]]:
    """(label, CPU seconds used so far) of every process that can be read now, and the whole machine's under
    :data:`MACHINE`."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: dict[int, tuple[str, float]] = {}
    if not _PROC.is_dir():
        return out
    machine = _machine_seconds(tick)
    if machine is not None:
        out[MACHINE] = ("machine", machine)
    seen: dict[int, tuple[int, list[str], float]] = {}  # pid → (parent, command line, CPU seconds)
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        used = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        seen[int(entry.name)] = (int(fields[1]), [c for c in cmdline if c], used)
    me = os.getpid()
    for pid, (_, cmdline, used) in seen.items():
        out[pid] = (_label(pid, cmdline, _descends(pid, me, seen)), used)
    return out


def _descends(pid: int, ancestor: int, seen: Mapping[int, tuple[int, list[str], float]]) -> bool:
    """Whether ``pid`` was started by ``ancestor`` (directly or through its children)."""
    for _ in range(64):
        entry = seen.get(pid)
        if entry is None or pid <= 1:
            return False
        pid = entry[0]
        if pid == ancestor:
            return True
    return False


def cpu_used(before: Mapping[int, tuple[str, float]], after: Mapping[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per label between two :func:`cpu_by_pid` readings (a process started in between counts from
    zero). What the machine used beyond the processes read (those that started and ended in between) is added to
    ``other``."""
    used: dict[str, float] = {}
    for pid, (label, now) in after.items():
        if pid == MACHINE:
            continue
        then = before.get(pid)
        spent = now - then[1] if then is not None and then[0] == label else now
        used[label] = used.get(label, 0.0) + max(spent, 0.0)
    if MACHINE in before and MACHINE in after:
        # processes that started and ended inside the window (a tenant's short jobs) are only in the machine's sum
        unseen = after[MACHINE][1] - before[MACHINE][1] - sum(used.values())
        if unseen > 0:
            used["other"] = used.get("other", 0.0) + unseen
    return used
