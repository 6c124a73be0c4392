"""TLS for the extender's ``--http_bind`` server (``--cert_file``/``--key_file``), reloaded when the files change.

HAMi hot-reloads its serving certificate (controller-runtime's certwatcher), and cert-manager or the chart's certgen
job rotate it in place. :func:`build_ssl_context` returns a server context that checks the two files **on new TLS
handshakes** (its ``sni_callback`` runs for every ClientHello, with or without SNI), at most once per
``check_interval_s``: when their mtime, size or inode changed it loads the new pair into a fresh context and switches
the handshaking connection to it, and every later one. No background task is needed, so there is nothing to start
or stop. Connections already established keep the certificate they negotiated (kube-scheduler and the API server
reconnect often enough). A pair that does not load (a rotation caught half-written) is logged, the previous
certificate stays in use and the files are checked again at the next interval.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable

from shared.errors import ConfigError
from shared.ops import server_ssl_context

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
        check_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.check_interval_s = check_interval_s
        self._clock = clock
        self._stamp = file_stamp(cert_file, key_file)
        self.context = server_ssl_context(cert_file, key_file)  # ConfigError if the pair does not load
        self.current = self.context
        self.context.sni_callback = self._on_client_hello
        self._next_check = clock() + check_interval_s
        self.reloads = 0

    def check(self) -> bool:
        """Reload the pair if the files changed since the last load; True if a new certificate is in force."""
        stamp = file_stamp(self.cert_file, self.key_file)
        if stamp == self._stamp:
            return False
        try:
            fresh = server_ssl_context(self.cert_file, self.key_file)
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
    cert_file: str, key_file: str, *, check_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic
) -> ssl.SSLContext:
    """A server SSL context serving ``cert_file``/``key_file`` that picks up rotated files on new handshakes.

    Raises :class:`shared.errors.ConfigError` when the pair does not load at start-up.
    """
    return CertificateReloader(cert_file, key_file, check_interval_s=check_interval_s, clock=clock).context
