"""What the API server's pod validation refuses, with the API server's own message.

``simulate`` reads manifests directly instead of sending them through an API server, so it checks here what
kube-apiserver v1.36 would refuse on ``POST pods`` (``pkg/apis/core/validation``), on the object as the API server
validates it: after defaulting, which copies every ``limits`` entry missing from ``requests`` into ``requests``
(``SetDefaults_Pod``). The subset checked:

* ``metadata.name`` a DNS-1123 subdomain, ``metadata.namespace`` a DNS-1123 label;
* ``spec.containers`` not empty; every container (and init container) named, the name a DNS-1123 label, unique
  across containers and init containers;
* every container's ``resources`` (``validateResourceRequirements``): resource names (a standard container resource
  or a fully qualified extended one), quantities not negative, extended resources whole numbers, a request not
  above its limit, and for resources that cannot be overcommitted (extended resources, hugepages) a request equal
  to its limit, and no request without a limit.

Each problem is a :class:`FieldError` printed as the API server prints it (``<field>: Invalid value: "2": must be
equal to nvidia.com/gpu limit of 1``); :func:`invalid_message` joins them as the API server's ``Status.message``:
``Pod "x" is invalid: <one error>`` or ``Pod "x" is invalid: [<error>, <error>]``. The API server walks
``limits``/``requests`` in Go map order (random); here they are walked by resource name, so the order is stable.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.errors import DecodeError

REQUIRED: Final = "Required value"
INVALID: Final = "Invalid value"
DUPLICATE: Final = "Duplicate value"

IS_NEGATIVE: Final = "must be greater than or equal to 0"
NOT_INTEGER: Final = "must be an integer"
LIMIT_REQUIRED: Final = "Limit must be set for non overcommitable resources"
NOT_STANDARD: Final = "must be a standard resource type or fully qualified"
NOT_CONTAINER: Final = "must be a standard resource for containers"
NOT_EXTENDED: Final = "doesn't follow extended resource name standard"

_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end "
    "with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character"
)
_QUALIFIED_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_RE: Final = re.compile(f"^{_DNS1123_LABEL_FMT}$")
_SUBDOMAIN_RE: Final = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_QUALIFIED_RE: Final = re.compile(f"^{_QUALIFIED_FMT}$")

_STANDARD_CONTAINER: Final = frozenset({"cpu", "memory", "ephemeral-storage"})
_STANDARD: Final = _STANDARD_CONTAINER | frozenset(
    {
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "storage",
        "requests.storage",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_INTEGER: Final = frozenset(
    {
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One ``field.Error``: the field path, the error type, the bad value as Go prints it (None: not shown)."""

    field: str
    kind: str
    value: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        text = f"{self.field}: {self.kind}"
        if self.value is not None:
            text += f": {self.value}"
        if self.detail:
            text += f": {self.detail}"
        return text


def invalid_message(kind: str, name: str, errors: Sequence[FieldError]) -> str:
    """The API server's ``Status.message`` for a refused object: ``Pod "x" is invalid: ...`` (identical errors
    once; several in brackets, as ``utilerrors.Aggregate`` prints them)."""
    texts = list(dict.fromkeys(str(e) for e in errors))
    body = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return f'{kind} "{name}" is invalid: {body}'


# --------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """Go's ``validation.RegexError``."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)  # Go's: "'my-name',  or '123-abc', regex ..."
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def dns1123_label(value: str) -> list[str]:
    """``IsDNS1123Label``'s messages (empty: valid)."""
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_RE.match(value):
        if _SUBDOMAIN_RE.match(value):
            errs.append("must not contain dots")
        else:
            errs.append(_regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def dns1123_subdomain(value: str) -> list[str]:
    """``IsDNS1123Subdomain``'s messages (empty: valid)."""
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _SUBDOMAIN_RE.match(value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def qualified_name(value: str) -> list[str]:
    """``IsQualifiedName`` (a label key: ``[prefix/]name``)'s messages (empty: valid)."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += [f"prefix part {m}" for m in dns1123_subdomain(prefix)]
    else:
        example = _regex_error(_QUALIFIED_MSG, _QUALIFIED_FMT, "MyName", "my.name", "123-abc")
        return [
            f"a valid label key {example} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _QUALIFIED_RE.match(name):
        errs.append("name part " + _regex_error(_QUALIFIED_MSG, _QUALIFIED_FMT, "MyName", "my.name", "123-abc"))
    return errs


# --------------------------------------------------------------------------------------------
# Resource names (pkg/apis/core/helper)
# --------------------------------------------------------------------------------------------


def is_native(name: str) -> bool:
    """No domain, or the ``kubernetes.io/`` one."""
    return "/" not in name or "kubernetes.io/" in name


def is_hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def is_extended(name: str) -> bool:
    """``IsExtendedResourceName``: not native, not ``requests.``-prefixed, a qualified name as a quota name."""
    if is_native(name) or name.startswith("requests."):
        return False
    return not qualified_name("requests." + name)


def overcommit_allowed(name: str) -> bool:
    """Native resources other than hugepages may have requests below limits; the others need them equal."""
    return is_native(name) and not is_hugepages(name)


def _is_integer_resource(name: str) -> bool:
    return name in _INTEGER or is_extended(name)


def _resource_name_errors(name: str, field: str) -> list[FieldError]:
    """``validateContainerResourceName``."""
    shown = _go_string(name)
    errs = [FieldError(field, INVALID, shown, m) for m in qualified_name(name)]
    if errs:
        return errs
    if "/" not in name:
        if name not in _STANDARD and not name.startswith("requests.hugepages-"):
            errs.append(FieldError(field, INVALID, shown, NOT_STANDARD))
        if name not in _STANDARD_CONTAINER and not is_hugepages(name):
            errs.append(FieldError(field, INVALID, shown, NOT_CONTAINER))
    elif not is_native(name) and not is_extended(name):
        errs.append(FieldError(field, INVALID, shown, NOT_EXTENDED))
    return errs


# --------------------------------------------------------------------------------------------
# Quantities as Go prints them (resource.Quantity.String())
# --------------------------------------------------------------------------------------------

_SUFFIX_RE: Final = re.compile(r"^[+-]?[0-9]*\.?[0-9]*")
_DECIMAL_SUFFIX: Final = {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E", -3: "m", -6: "u", -9: "n"}
_BINARY_SUFFIX: Final = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}


def _remove_factors(value: int, base: int) -> tuple[int, int]:
    times = 0
    while value and value % base == 0:
        value //= base
        times += 1
    return value, times


def canonical_quantity(raw: str | int | float) -> str:
    """``resource.Quantity.String()`` of ``raw`` (``3000`` → ``3k``, ``2048Mi`` → ``2Gi``, ``0.5`` → ``500m``):
    the format follows the written suffix (binary, decimal exponent or decimal SI) and the value is written with
    the largest suffix that keeps it whole. DecodeError when ``raw`` is not a quantity."""
    text = str(raw).strip()
    q = parse_quantity(raw, "quantity")
    if q == 0:
        return "0"
    suffix = text[_SUFFIX_RE.match(text).end() :]  # type: ignore[union-attr]  # the pattern matches any string
    binary = suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
    exponent_format = suffix[:1] in ("e", "E")
    if binary and (-1024 < q < 1024 or q.denominator != 1):
        binary = False
    if binary:
        amount, times = _remove_factors(int(q), 1024)
        if times > 6:
            amount, times = amount * 1024 ** (times - 6), 6
        return f"{amount}{_BINARY_SUFFIX[times]}"
    # Decimal: mantissa x 10^exponent with trailing zeros taken into the exponent, the exponent a multiple of 3
    scaled = q * 10**9  # whole: parse_quantity rounds to nanos
    amount, times = _remove_factors(int(scaled), 10)
    exponent = times - 9
    step = exponent % 3
    amount, exponent = amount * 10**step, exponent - step
    if exponent_format:
        return str(amount) if exponent == 0 else f"{amount}e{exponent}"
    if exponent > 18:
        amount, exponent = amount * 10 ** (exponent - 18), 18
    return f"{amount}{_DECIMAL_SUFFIX[exponent]}"


def _go_string(value: str) -> str:
    """A string bad value as ``field.Error`` prints it (Go ``%q``)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --------------------------------------------------------------------------------------------
# Resource requirements
# --------------------------------------------------------------------------------------------


def _quantities(section: Any) -> dict[str, tuple[Fraction, str]]:
    """``{name: (value, Go's String())}`` of a limits/requests map (entries that are not quantities are left to the
    manifest checks, which refuse them first)."""
    out: dict[str, tuple[Fraction, str]] = {}
    if not isinstance(section, Mapping):
        return out
    for name, raw in section.items():
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            continue
        try:
            out[str(name)] = (parse_quantity(raw, str(name)), canonical_quantity(raw))
        except DecodeError:
            continue
    return out


def _quantity_errors(name: str, value: Fraction, shown: str, field: str) -> list[FieldError]:
    """``ValidateResourceQuantityValue``."""
    errs = []
    if value < 0:
        errs.append(FieldError(field, INVALID, _go_string(shown), IS_NEGATIVE))
    if _is_integer_resource(name) and (value * 1000) % 1000 != 0:
        errs.append(FieldError(field, INVALID, _go_string(shown), NOT_INTEGER))
    return errs


def defaulted_requests(resources: Any) -> dict[str, Any]:
    """A container's ``requests`` after the API server's defaulting: every ``limits`` entry it lacks copied in."""
    if not isinstance(resources, Mapping):
        return {}
    limits = resources.get("limits") if isinstance(resources.get("limits"), Mapping) else {}
    requests = resources.get("requests") if isinstance(resources.get("requests"), Mapping) else {}
    return {**dict(limits or {}), **dict(requests or {})}


def resource_requirements_errors(resources: Any, field: str) -> list[FieldError]:
    """``validateResourceRequirements`` of one container's (defaulted) ``resources`` at ``field``."""
    if not isinstance(resources, Mapping):
        return []
    limits = _quantities(resources.get("limits"))
    requests = _quantities(defaulted_requests(resources))
    lim_path, req_path = f"{field}.limits", f"{field}.requests"
    errs: list[FieldError] = []
    for name in sorted(limits):
        value, shown = limits[name]
        errs += _resource_name_errors(name, f"{lim_path}[{name}]")
        errs += _quantity_errors(name, value, shown, f"{lim_path}[{name}]")
    for name in sorted(requests):
        value, shown = requests[name]
        errs += _resource_name_errors(name, f"{req_path}[{name}]")
        errs += _quantity_errors(name, value, shown, f"{req_path}[{name}]")
        if name in limits:
            limit, limit_shown = limits[name]
            if value != limit and not overcommit_allowed(name):
                detail = f"must be equal to {name} limit of {limit_shown}"
                errs.append(FieldError(req_path, INVALID, _go_string(shown), detail))
            elif value > limit:
                detail = f"must be less than or equal to {name} limit of {limit_shown}"
                errs.append(FieldError(req_path, INVALID, _go_string(shown), detail))
        elif not overcommit_allowed(name):
            errs.append(FieldError(lim_path, REQUIRED, None, LIMIT_REQUIRED))
    return errs


# --------------------------------------------------------------------------------------------
# The pod
# --------------------------------------------------------------------------------------------


def _container_errors(containers: Sequence[Any], field: str, names: set[str]) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, c in enumerate(containers):
        path = f"{field}[{i}]"
        if not isinstance(c, Mapping):
            continue
        name = c.get("name")
        name = name if isinstance(name, str) else ""
        if not name:
            errs.append(FieldError(f"{path}.name", REQUIRED))
        else:
            errs += [FieldError(f"{path}.name", INVALID, _go_string(name), m) for m in dns1123_label(name)]
        errs += resource_requirements_errors(c.get("resources") or {}, f"{path}.resources")
        if name and name in names:
            errs.append(FieldError(f"{path}.name", DUPLICATE, _go_string(name)))
        elif name:
            names.add(name)
    return errs


def validate_pod(pod: Mapping[str, Any]) -> list[FieldError]:
    """What the API server's validation refuses on ``POST pods`` (the subset in the module docstring), in the order
    it reports them; empty when the pod is valid."""
    errs: list[FieldError] = []
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        errs.append(FieldError("metadata.name", REQUIRED, None, "name or generateName is required"))
    else:
        errs += [FieldError("metadata.name", INVALID, _go_string(name), m) for m in dns1123_subdomain(name)]
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    if isinstance(namespace, str) and namespace:
        errs += [FieldError("metadata.namespace", INVALID, _go_string(namespace), m) for m in dns1123_label(namespace)]
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if not isinstance(containers, list) or not containers:
        errs.append(FieldError("spec.containers", REQUIRED))
        containers = []
    names: set[str] = set()
    errs += _container_errors(containers, "spec.containers", names)
    init = spec.get("initContainers") if isinstance(spec, Mapping) else None
    errs += _container_errors(init if isinstance(init, list) else [], "spec.initContainers", names)
    return errs


def pod_invalid(pod: Mapping[str, Any]) -> str | None:
    """The API server's message refusing ``pod`` (``Pod "x" is invalid: ...``), or None when it is valid."""
    errors = validate_pod(pod)
    if not errors:
        return None
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    name = meta.get("name") if isinstance(meta, Mapping) else ""
    return invalid_message("Pod", str(name or ""), errors)
