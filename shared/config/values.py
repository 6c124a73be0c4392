"""Go-flavoured value parsers for settings: text in, typed value out, ``ValueError("expected ...")`` on bad input.

They follow Go's own rules where HAMi's flags do (``strconv.ParseBool``, ``time.ParseDuration``, ``net.Listen``
addresses) so a HAMi deployment's arguments keep their meaning.
"""

from __future__ import annotations

import enum
import ipaddress
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from vgpu_scheduler.shared.config.redisurl import is_sentinel_url, parse_sentinel_url
from vgpu_scheduler.shared.domain.model import GpuPolicy, GpuPolicyToken, NodePolicy


class LogFormat(enum.Enum):
    AUTO = "auto"
    JSON = "json"
    TEXT = "text"


class LogLevel(enum.Enum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


# --------------------------------------------------------------------------------------------
# Value parsers: text in, typed value out, ValueError("expected ...") on bad input.
# --------------------------------------------------------------------------------------------

_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_DURATION_PART_RE = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]+)")
_DURATION_UNITS_NS: Mapping[str, int] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # MICRO SIGN
    "\u03bcs": 1_000,  # GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}


def parse_go_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``: 1/t/T/TRUE/true/True and 0/f/F/FALSE/false/False."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise ValueError("expected a boolean (true or false)")


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` (``300ms``, ``1.5h``, ``1h2m3s``, ``0``), in seconds."""
    s = text
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError("expected a Go duration such as 30s, 5m or 1h2m")
    total_ns = Decimal(0)
    pos = 0
    while pos < len(s):
        m = _DURATION_PART_RE.match(s, pos)
        if m is None or m.group(1) in ("", "."):
            raise ValueError("expected a Go duration such as 30s, 5m or 1h2m")
        unit = _DURATION_UNITS_NS.get(m.group(2))
        if unit is None:
            raise ValueError(f"expected a Go duration such as 30s, 5m or 1h2m (unknown unit {m.group(2)!r})")
        total_ns += Decimal(m.group(1)) * unit
        pos = m.end()
    return float(sign * total_ns / Decimal(1_000_000_000))


def parse_seconds(text: str) -> float:
    """Plain seconds (``1.5``) or a Go duration (``1500ms``), in seconds."""
    try:
        return float(text)
    except ValueError:
        return parse_go_duration(text)


def format_go_duration(seconds: float) -> str:
    """The shortest Go-style spelling of a duration, for help texts and docs (``300s`` -> ``5m``)."""
    if seconds == 0:
        return "0s"
    ns = round(seconds * 1_000_000_000)
    if ns % 1_000_000_000:
        return f"{ns // 1_000_000}ms" if ns % 1_000_000 == 0 else f"{ns}ns"
    secs = ns // 1_000_000_000
    h, rest = divmod(secs, 3600)
    m, s = divmod(rest, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s else "")
    return out


def parse_int(text: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """A decimal integer, optionally bounded."""
    if not _INT_RE.fullmatch(text):
        raise ValueError(_int_expectation(minimum, maximum))
    value = int(text)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(_int_expectation(minimum, maximum))
    return value


def _int_expectation(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"expected an integer from {minimum} to {maximum}"
    if minimum == 0:
        return "expected a non-negative integer"
    if minimum == 1:
        return "expected a positive integer"
    if minimum is not None:
        return f"expected an integer >= {minimum}"
    return "expected an integer"


@dataclass(frozen=True, slots=True)
class BindAddress:
    """A Go-style listen address: ``:9395`` (every interface), ``0.0.0.0:443``, ``[::1]:80``."""

    host: str
    port: int

    @property
    def listen_host(self) -> str | None:
        """The host to give a listener: ``None`` means every interface (Go's empty host)."""
        return self.host or None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_bind_address(text: str) -> BindAddress:
    """Parse ``host:port`` the way Go's ``net.Listen`` does; IPv6 hosts go in brackets; port 0 = any free port."""
    expected = "expected host:port such as :9395, 0.0.0.0:443 or [::1]:80"
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":") or not host:
            raise ValueError(expected)
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or ":" in host:
            raise ValueError(expected)
    if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(expected)
    return BindAddress(host=host, port=int(port_text))


def parse_label_selector(text: str) -> tuple[tuple[str, str], ...]:
    """HAMi's ``--node-label-selector``: ``k=v,k2=v2`` (empty = every node)."""
    pairs: list[tuple[str, str]] = []
    for part in text.split(","):
        item = part.strip()
        if not item:
            if text.strip():
                raise ValueError("expected key=value pairs separated by commas (k=v,k2=v2)")
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError("expected key=value pairs separated by commas (k=v,k2=v2)")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def parse_node_policy(text: str) -> NodePolicy:
    try:
        return NodePolicy(text)
    except ValueError:
        raise ValueError("expected binpack or spread") from None


def parse_gpu_policy(text: str) -> GpuPolicy:
    """One token or a comma chain of binpack, spread, topology-aware, mutex, numa (tokens trimmed)."""
    valid = ", ".join(t.value for t in GpuPolicyToken)
    tokens: list[GpuPolicyToken] = []
    for raw in text.split(","):
        try:
            tokens.append(GpuPolicyToken(raw.strip()))
        except ValueError:
            raise ValueError(f"expected {valid}, or a comma chain of them such as binpack,numa") from None
    return GpuPolicy(tuple(tokens))


def parse_float(text: str, *, minimum: float = 0.0) -> float:
    if not _FLOAT_RE.fullmatch(text) or float(text) < minimum:
        raise ValueError(f"expected a number >= {minimum:g}")
    return float(text)


def parse_redis_url(text: str) -> str:
    if is_sentinel_url(text):
        parse_sentinel_url(text)  # a ValueError names what is wrong
        return text
    if not re.match(r"(redis|rediss|unix)://", text):
        raise ValueError("expected a redis://, rediss://, unix://, redis+sentinel:// or rediss+sentinel:// URL")
    return text


def redis_url_password(url: str) -> str | None:
    """The password a ``redis://user:pass@host`` URL carries, if any (``None`` for none, or a unix:// path)."""
    if is_sentinel_url(url):
        return parse_sentinel_url(url).password
    return urllib.parse.urlsplit(url).password


def is_loopback_host(host: str) -> bool:
    """True for a listen host reachable only from this network namespace (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def choice_parser(enum_type: type[enum.Enum]) -> Callable[[str], object]:
    def parse(text: str) -> object:
        try:
            return enum_type(text.lower())
        except ValueError:
            raise ValueError("expected one of " + ", ".join(str(m.value) for m in enum_type)) from None

    return parse


def parse_nonneg_duration(text: str) -> float:
    value = parse_go_duration(text)
    if value < 0:
        raise ValueError("expected a non-negative Go duration such as 30s, 5m or 1h2m")
    return value


def parse_positive_duration(text: str) -> float:
    value = parse_go_duration(text)
    if value <= 0:
        raise ValueError("expected a positive Go duration such as 30s, 5m or 1h2m")
    return value


def parse_nonempty(text: str) -> str:
    if not text.strip():
        raise ValueError("expected a non-empty string")
    return text
