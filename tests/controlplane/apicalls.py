"""API calls by kind over a window of a benchmark run, from the API server's own ``apiserver_request_total``.

The counter covers every client (kube-scheduler, our services, the device-plugin emulator, the harness), so the
difference of two readings says what one run asked of the API server, per verb and resource (``PATCH nodes``,
``POST pods/binding``, ``WATCH`` excluded: a watch is one long call). The counter cannot tell clients apart;
:func:`calls_by_client` does, from the API server's audit log."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path

_LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def request_counts(metrics_text: str) -> dict[str, float]:
    """``"<VERB> <resource>[/<subresource>]"`` → requests so far, summed over codes, scopes and components."""
    out: dict[str, float] = {}
    for line in metrics_text.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        verb = labels.get("verb", "")
        if verb in ("WATCH", "CONNECT"):
            continue
        resource = labels.get("resource", "") or "-"
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        key = f"{verb} {resource}"
        out[key] = out.get(key, 0.0) + float(m.group("value"))
    return out


def calls_between(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, int]:
    """Requests per kind between two readings of :func:`request_counts` (kinds with none left out)."""
    diff = {k: round(v - before.get(k, 0.0)) for k, v in after.items()}
    return {k: n for k, n in diff.items() if n > 0}


_VERBS = {
    "get": "GET",
    "list": "LIST",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}


def client_of(user_agent: str) -> str:
    """Who sent a request, from its user agent: ``kube-scheduler``, ``kube-apiserver`` (its own loopback
    client), ``device-plugin`` (the harness' emulator, ``devplugin``), our services (``vgpu-scheduler-<service>``
    → ``<service>``; an untagged ``vgpu-scheduler`` stays as it is), and ``harness`` for everything else (pod
    creation, the bind watch, ``/metrics`` readings)."""
    head = user_agent.split("/", 1)[0].split(" ", 1)[0]
    if head in ("kube-scheduler", "kube-apiserver"):
        return head
    if head == "devplugin":
        return "device-plugin"
    if head.startswith("vgpu-scheduler-"):
        return head.removeprefix("vgpu-scheduler-")
    return "harness"


def _epoch_s(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def calls_by_client(lines: Iterable[str], start_s: float, end_s: float) -> dict[str, dict[str, int]]:
    """Requests received between ``start_s`` and ``end_s`` (epoch seconds), from the API server's audit log
    (``control_plane(audit=True)``): client (:func:`client_of`) → ``"<VERB> <resource>[/<subresource>]"`` →
    count, in the vocabulary of :func:`request_counts`. Watches are not in the log; unreadable lines are skipped."""
    out: dict[str, dict[str, int]] = {}
    for line in lines:
        try:
            event = json.loads(line)
            received = _epoch_s(event["requestReceivedTimestamp"])
        except (ValueError, KeyError, TypeError):
            continue
        if not start_s <= received <= end_s or event.get("stage") != "ResponseComplete":
            continue
        verb = _VERBS.get(str(event.get("verb", "")), str(event.get("verb", "")).upper())
        ref = event.get("objectRef") or {}
        resource = str(ref.get("resource") or "-")
        if ref.get("subresource"):
            resource += "/" + str(ref["subresource"])
        kinds = out.setdefault(client_of(str(event.get("userAgent", ""))), {})
        key = f"{verb} {resource}"
        kinds[key] = kinds.get(key, 0) + 1
    return out


class AuditTail:
    """Reads an audit log from where the previous :meth:`read` stopped (each benchmark row parses only its own
    requests). When the API server has rotated the log meanwhile (``audit-<time>.log`` beside it), the rest of the
    rotated file is read first, then the new log from its start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._inode: int | None = None

    def read(self) -> list[str]:
        try:
            inode = self.path.stat().st_ino
        except FileNotFoundError:
            return []
        lines: list[str] = []
        if self._inode is not None and inode != self._inode:
            rotated = self._rotated(self._inode)
            if rotated is not None:
                lines += self._read_from(rotated)
            self._offset = 0
        self._inode = inode
        return lines + self._read_from(self.path)

    def _rotated(self, inode: int) -> Path | None:
        for candidate in self.path.parent.glob(f"{self.path.stem}-*{self.path.suffix}"):
            try:
                if candidate.stat().st_ino == inode:
                    return candidate
            except FileNotFoundError:
                continue
        return None

    def _read_from(self, path: Path) -> list[str]:
        try:
            with path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        self._offset += end
        return data[:end].decode(errors="replace").splitlines()
