"""Test PKI made with the ``openssl`` command: a CA, server certificates (SAN 127.0.0.1, localhost) and client
certificates (``extendedKeyUsage = clientAuth``) it signs. Shared by the extender's mTLS tests and the
control-plane tests (kube-scheduler's extender client certificate)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HAVE_OPENSSL = shutil.which("openssl") is not None
EC_P256 = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")
"""ECDSA P-256 keys, as the chart's certificates have (kube-webhook-certgen and the cert-manager Certificates)."""


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Ca:
    cert: Path
    key: Path

    def issue(self, directory: Path, cn: str, *, client: bool = False, server: bool = False) -> Issued:
        """A certificate for ``cn`` signed by this CA, for client and/or server authentication."""
        directory.mkdir(parents=True, exist_ok=True)
        key, csr, cert, ext = (directory / f"{cn}.{s}" for s in ("key", "csr", "crt", "ext"))
        usages = [u for u, on in (("clientAuth", client), ("serverAuth", server)) if on]
        lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment"]
        lines.append("extendedKeyUsage=" + ",".join(usages))
        if server:
            lines.append("subjectAltName=DNS:localhost,IP:127.0.0.1")
        ext.write_text("\n".join(lines) + "\n")
        _openssl("req", "-new", *EC_P256, "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={cn}")
        _openssl(
            "x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.key, "-CAcreateserial",
            "-days", "1", "-out", cert, "-extfile", ext,
        )  # fmt: skip
        return Issued(cert, key)


def make_ca(directory: Path, cn: str) -> Ca:
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "ca.crt", directory / "ca.key"
    _openssl(
        "req", "-x509", *EC_P256, "-nodes", "-days", "1", "-keyout", key, "-out", cert,
        "-subj", f"/CN={cn}", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return Ca(cert, key)


def install(src: Path, dst: Path) -> None:
    """Replace ``dst`` with ``src`` atomically (a new inode), as a Secret volume update does."""
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
