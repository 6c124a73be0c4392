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


def check_dns_label(value: str, what: str, field: str) -> str:
    """``value`` if it is a valid namespace name, else :class:`DecodeError` naming ``field``."""
    if len(value) > DNS_LABEL_MAX or not _DNS_LABEL_RE.match(value):
        raise DecodeError(
            what,
            f"{field} must be a DNS label (at most {DNS_LABEL_MAX} lowercase letters, digits or '-'), "
            f"got {_shown(value)} ({len(value)} characters)",
        )
    return value


def check_dns_subdomain(value: str, what: str, field: str) -> str:
    """``value`` if it is a valid pod or node name, else :class:`DecodeError` naming ``field``."""
    if len(value) > DNS_SUBDOMAIN_MAX or not _DNS_SUBDOMAIN_RE.match(value):
        raise DecodeError(
            what,
            f"{field} must be a DNS subdomain (at most {DNS_SUBDOMAIN_MAX} lowercase letters, digits, '-' or '.'), "
            f"got {_shown(value)} ({len(value)} characters)",
        )
    return value
