"""Label and field selectors as the API server parses them (``labels.Parse``, ``fields.ParseSelector``).

Label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``, ``k>1``, ``k<1``,
comma-separated (a comma inside parentheses belongs to the set). Field selectors: ``f=v``, ``f==v``, ``f!=v``
on the fields the resource supports. A malformed selector raises a 400 ``ApiError`` with the server's wording.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.emulator.status import ApiError, bad_request

_KEY = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9.]*[A-Za-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_EQ_RE = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*({_VALUE})$")
_SET_RE = re.compile(rf"^({_KEY})\s+(in|notin)\s*\((.*)\)$")
_CMP_RE = re.compile(rf"^({_KEY})\s*([<>])\s*(-?[0-9]+)$")
_EXISTS_RE = re.compile(rf"^(!?)\s*({_KEY})$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")

Matcher = Callable[[Mapping[str, str]], bool]


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector; ``matches(labels)`` tests an object's labels."""

    text: str
    requirements: tuple[Matcher, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        got: Mapping[str, str] = labels or {}
        return all(req(got) for req in self.requirements)


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _requirement(raw: str) -> Matcher:
    req = raw.strip()
    if m := _SET_RE.match(req):
        key, op, inner = m.group(1), m.group(2), m.group(3)
        values = frozenset(v.strip() for v in inner.split(",")) if inner.strip() else frozenset()
        if not values or any(not _VALUE_RE.match(v) for v in values):
            raise bad_request(f"unable to parse requirement: invalid values in {req!r}")
        if op == "in":
            return lambda labels: key in labels and labels[key] in values
        return lambda labels: key not in labels or labels[key] not in values
    if m := _EQ_RE.match(req):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: key in labels and labels[key] == value
    if m := _CMP_RE.match(req):
        key, op, bound = m.group(1), m.group(2), int(m.group(3))

        def compare(labels: Mapping[str, str]) -> bool:
            got = labels.get(key)
            if got is None or not re.fullmatch(r"-?[0-9]+", got):
                return False
            return int(got) > bound if op == ">" else int(got) < bound

        return compare
    if m := _EXISTS_RE.match(req):
        negate, key = m.group(1) == "!", m.group(2)
        if negate:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise bad_request(f"unable to parse requirement: {req!r}")


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a ``labelSelector`` query value; empty or absent selects everything."""
    if text is None or not text.strip():
        return LabelSelector("", ())
    try:
        return LabelSelector(text, tuple(_requirement(p) for p in _split_top_level(text)))
    except ApiError:
        raise
    except ValueError as e:  # pragma: no cover - the regexes leave nothing for int() to reject
        raise bad_request(f"unable to parse requirement: {e}") from e


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    value: str
    negate: bool


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector; ``matches(obj)`` tests a whole object."""

    text: str
    requirements: tuple[FieldRequirement, ...]

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for req in self.requirements:
            got = field_value(obj, req.field)
            if (got == req.value) == req.negate:
                return False
        return True


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted field (absent → ``""``, booleans → ``true``/``false``), as field labels are."""
    if path == "source":  # events: the field label ``source`` is ``source.component``
        path = "source.component"
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str | None, supported: frozenset[str]) -> FieldSelector:
    """Parse a ``fieldSelector`` query value against the field labels the resource supports."""
    if text is None or not text.strip():
        return FieldSelector("", ())
    reqs: list[FieldRequirement] = []
    for raw in text.split(","):
        part = raw.strip()
        for op in ("!=", "==", "="):
            field, sep, value = part.partition(op)
            if sep:
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field = field.strip()
        if field not in supported:
            raise bad_request(f"field label not supported: {field}")
        reqs.append(FieldRequirement(field, value.strip(), op == "!="))
    return FieldSelector(text, tuple(reqs))


def structured_selector(selector: Mapping[str, Any] | None) -> LabelSelector:
    """A ``metav1.LabelSelector`` (``matchLabels``, ``matchExpressions`` with ``In``, ``NotIn``, ``Exists``,
    ``DoesNotExist``) as ``LabelSelectorAsSelector`` reads it; None or empty gives an empty selector (callers
    decide what an empty one selects). A malformed one raises a 400 ``ApiError``."""
    if not selector:
        return LabelSelector("", ())
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op in ("In", "NotIn"):
            parts.append(f"{key} {op.lower()} ({','.join(str(v) for v in values)})")
        elif op in ("Exists", "DoesNotExist"):
            parts.append(f"{'!' if op == 'DoesNotExist' else ''}{key}")
        else:
            raise bad_request(f"{op!r} is not a valid label selector operator")
    return parse_label_selector(",".join(parts))
