"""API calls by kind over a window of a benchmark run, from the API server's own ``apiserver_request_total``.

The counter covers every client (kube-scheduler, our services, the device-plugin emulator, the harness), so the
difference of two readings says what one run asked of the API server, per verb and resource (``PATCH nodes``,
``POST pods/binding``, ``WATCH`` excluded: a watch is one long call)."""

from __future__ import annotations

import re
from collections.abc import Mapping

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
