"""TLS for the extender's ``--http_bind`` server (``--cert_file``/``--key_file``, ``--client-ca-file``), reloaded when
the files change.

HAMi hot-reloads its serving certificate (controller-runtime's certwatcher), and cert-manager or the chart's certgen
job rotate it in place. :func:`build_ssl_context` returns a server context that checks the two files **on new TLS
handshakes** (its ``sni_callback`` runs for every ClientHello, with or without SNI), at most once per
``check_interval_s``: when their mtime, size or inode changed it loads the new pair into a fresh context and switches
the handshaking connection to it, and every later one. No background task is needed, so there is nothing to start
or stop. Connections already established keep the certificate they negotiated (kube-scheduler and the API server
reconnect often enough). A pair that does not load (a rotation caught half-written) is logged, the previous
certificate stays in use and the files are checked again at the next interval.

With a client CA bundle (``--client-ca-file``) the context asks clients for a certificate and verifies one that is
presented against the bundle; the bundle is watched and reloaded with the pair (replace it with one holding both
the old and the new CA while clients move over). Whether a path requires a certificate is the app's decision
(:func:`peer_certificate`).
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable

from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.ops import server_ssl_context

logger = logging.getLogger(__name__)

FileStamp = tuple[tuple[int, int, int], ...]


def file_stamp(*paths: str) -> FileStamp:
    """(mtime ns, size, inode) of each path, following symlinks (Kubernetes swaps a Secret volume's symlink);
    zeros for a file that cannot be read."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((0, 0, 0))
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


class CertificateReloader:
    """Holds the certificate in force and swaps it when the files change (see the module docstring)."""

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        *,
        client_ca_file: str | None = None,
        check_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self.check_interval_s = check_interval_s
        self._clock = clock
        self._stamp = self._files_stamp()
        self.context = self._load()  # ConfigError if the pair (or the CA bundle) does not load
        self.current = self.context
        self.context.sni_callback = self._on_client_hello
        self._next_check = clock() + check_interval_s
        self.reloads = 0

    def _files_stamp(self) -> FileStamp:
        extra = () if self.client_ca_file is None else (self.client_ca_file,)
        return file_stamp(self.cert_file, self.key_file, *extra)

    def _load(self) -> ssl.SSLContext:
        return server_ssl_context(self.cert_file, self.key_file, self.client_ca_file)

    def check(self) -> bool:
        """Reload the files if they changed since the last load; True if a new context is in force."""
        stamp = self._files_stamp()
        if stamp == self._stamp:
            return False
        try:
            fresh = self._load()
        except ConfigError as e:
            logger.warning(
                "tls certificate changed but does not load; keeping the previous one",
                extra={"cert_file": self.cert_file, "error": str(e)},
            )
            return False
        self.current, self._stamp = fresh, stamp
        self.reloads += 1
        logger.info("tls certificate reloaded", extra={"cert_file": self.cert_file})
        return True

    def _on_client_hello(
        self, conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext
    ) -> None:
        try:
            now = self._clock()
            if now >= self._next_check:
                self._next_check = now + self.check_interval_s
                self.check()
            if self.current is not ctx:
                conn.context = self.current
        except Exception as e:  # never fail a handshake over a reload problem: the old certificate serves
            logger.warning("tls certificate check failed", extra={"error": repr(e)})


def build_ssl_context(
    cert_file: str,
    key_file: str,
    *,
    client_ca_file: str | None = None,
    check_interval_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
) -> ssl.SSLContext:
    """A server SSL context serving ``cert_file``/``key_file`` (and asking for client certificates signed by
    ``client_ca_file``) that picks up rotated files on new handshakes.

    Raises :class:`shared.errors.ConfigError` when the files do not load at start-up.
    """
    return CertificateReloader(
        cert_file, key_file, client_ca_file=client_ca_file, check_interval_s=check_interval_s, clock=clock
    ).context


def peer_certificate(transport: object) -> dict[str, object] | None:
    """The verified client certificate of a connection (``getpeercert()``), or ``None`` when the client presented
    none, the connection is not TLS, or the transport is gone."""
    get_extra_info = getattr(transport, "get_extra_info", None)
    if get_extra_info is None:
        return None
    cert = get_extra_info("peercert")
    return cert if isinstance(cert, dict) and cert else None
