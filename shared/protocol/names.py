"""Kubernetes object names, checked before they go into an API path, a Redis key or an Event (pure).

The rules are the API server's: a namespace is a DNS label (RFC 1123: at most 63 lowercase alphanumerics or
``-``, starting and ending with an alphanumeric); pod and node names are DNS subdomains (at most 253 characters,
DNS labels joined by ``.``). Anything else — a 100,000-character name, ``../``, a slash, upper case — cannot be
an existing object, so a request naming one is refused before any I/O.
"""

from __future__ import annotations

import re
from typing import Final

from vgpu_scheduler.shared.errors import DecodeError

_LABEL: Final = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE: Final = re.compile(_LABEL + r"\Z")
_DNS_SUBDOMAIN_RE: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\Z")
DNS_LABEL_MAX: Final = 63
DNS_SUBDOMAIN_MAX: Final = 253
_SHOWN: Final = 40


def _shown(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "…")


def _check(value: str, what: str, field: str, *, pattern: re.Pattern[str], most: int, shape: str) -> str:
    """``value`` if ``pattern`` matches it whole and it has at most ``most`` characters; else a DecodeError saying
    ``field`` must be a ``shape``."""
    if len(value) > most or not pattern.match(value):
        raise DecodeError(what, f"{field} must be a {shape}, got {_shown(value)} ({len(value)} characters)")
    return value


def check_dns_label(value: str, what: str, field: str) -> str:
    """``value`` if it is a valid namespace name, else :class:`DecodeError` naming ``field``."""
    shape = f"DNS label (at most {DNS_LABEL_MAX} lowercase letters, digits or '-')"
    return _check(value, what, field, pattern=_DNS_LABEL_RE, most=DNS_LABEL_MAX, shape=shape)


def check_dns_subdomain(value: str, what: str, field: str) -> str:
    """``value`` if it is a valid pod or node name, else :class:`DecodeError` naming ``field``."""
    shape = f"DNS subdomain (at most {DNS_SUBDOMAIN_MAX} lowercase letters, digits, '-' or '.')"
    return _check(value, what, field, pattern=_DNS_SUBDOMAIN_RE, most=DNS_SUBDOMAIN_MAX, shape=shape)
