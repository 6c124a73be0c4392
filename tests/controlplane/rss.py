"""Resident memory of the run's processes over time, read from ``/proc`` (Linux; nothing elsewhere): our services
by name (a restarted one continues its line), the control plane and Redis by their :mod:`tests.controlplane.cpu`
label (several processes of one label summed: the Redis servers and Sentinels), and this process (``harness``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.controlplane.cpu import cpu_by_pid

_LABELS = ("kube-apiserver", "etcd", "kube-scheduler", "redis-server", "harness")


def rss_mib(pid: int) -> float | None:
    """``VmRSS`` of ``pid`` in MiB; None when it cannot be read (gone, or not Linux)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass
class RssLog:
    """Samples of every process' RSS (MiB): ``(seconds into the run, {name: MiB})``."""

    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def sample(self, at_s: float, services: Mapping[str, int]) -> None:
        """Read now: ``services`` name → pid, plus every process of a control-plane label this one started."""
        now: dict[str, float] = {}
        for name, pid in services.items():
            mib = rss_mib(pid)
            if mib is not None:
                now[name] = mib
        for pid, (label, _) in cpu_by_pid().items():
            if label in _LABELS and pid not in services.values():
                mib = rss_mib(pid)
                if mib is not None:
                    now[label] = now.get(label, 0.0) + mib
        self.samples.append((at_s, now))

    def table(self) -> list[str]:
        """One line per process: RSS at the first sample, at mid-run, the largest, at the last sample, and the
        change over the second half (what grows without bound keeps growing there)."""
        if not self.samples:
            return []
        names = sorted({n for _, s in self.samples for n in s})
        mid = self.samples[len(self.samples) // 2][1]
        lines = [f"{'PROCESS':<16} {'FIRST':>7} {'MID':>7} {'MAX':>7} {'LAST':>7} {'2ND HALF':>9}  (MiB)"]
        for name in names:
            seen = [s[name] for _, s in self.samples if name in s]
            first, last = seen[0], seen[-1]
            half = last - mid[name] if name in mid else float("nan")
            lines.append(
                f"{name:<16} {first:>7.0f} {mid.get(name, float('nan')):>7.0f} {max(seen):>7.0f} "
                f"{last:>7.0f} {half:>+9.1f}"
            )
        return lines

    def timeline(self, points: int = 7) -> list[str]:
        """One line per process: its RSS at ``points`` samples evenly spread over the run (the first and the last
        among them), to show how it moves over a long run."""
        if not self.samples:
            return []
        count = len(self.samples)
        picks = sorted({round(i * (count - 1) / max(1, points - 1)) for i in range(points)})
        header = "".join(f"{self.samples[i][0]:>7.0f}s" for i in picks)
        lines = [f"{'PROCESS':<16}{header}  (MiB at seconds into the run)"]
        for name in sorted({n for _, s in self.samples for n in s}):
            row = "".join(
                f"{self.samples[i][1][name]:>8.0f}" if name in self.samples[i][1] else f"{'-':>8}" for i in picks
            )
            lines.append(f"{name:<16}{row}")
        return lines

    def series(self, name: str) -> list[tuple[float, float]]:
        return [(t, s[name]) for t, s in self.samples if name in s]
