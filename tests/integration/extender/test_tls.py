"""TLS for the extender: a real aiohttp server on a free port with a self-signed certificate made by ``openssl``
in the fixture; rotating the files changes the certificate new connections see, a broken rotation keeps the old one."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
from aiohttp import web

from vgpu_scheduler.services.extender.tls import CertificateReloader, build_ssl_context
from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.ops import running_server

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def make_pair(directory: Path, cn: str) -> tuple[Path, Path]:
    """A self-signed certificate and key for ``cn`` (and 127.0.0.1, localhost) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={cn}",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


def install(src: tuple[Path, Path], dst: tuple[Path, Path]) -> None:
    """Replace the served files atomically (new inodes), as a Secret volume update does."""
    for s, d in zip(src, dst, strict=True):
        tmp = d.with_suffix(".tmp")
        shutil.copyfile(s, tmp)
        os.replace(tmp, d)


async def served_cert(port: int, server_hostname: str | None) -> bytes:
    """The DER certificate a fresh TLS connection to 127.0.0.1:port is served (``server_hostname`` None: no SNI)."""
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname=server_hostname or "")
    try:
        obj = writer.get_extra_info("ssl_object")
        peer = obj.getpeercert(binary_form=True)
        assert peer is not None
        return bytes(peer)
    finally:
        writer.close()
        await writer.wait_closed()


@pytest.fixture
def pairs(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    return {name: make_pair(tmp_path / name, f"extender-{name}") for name in ("live", "first", "second")}


@pytest.mark.parametrize("sni", [None, "localhost"], ids=["no-sni", "sni"])
async def test_new_connections_get_the_rotated_certificate(
    pairs: dict[str, tuple[Path, Path]], sni: str | None
) -> None:
    live = pairs["live"]
    install(pairs["first"], live)
    reloader = CertificateReloader(str(live[0]), str(live[1]), check_interval_s=0.0)
    app = web.Application()
    async with running_server(app, "127.0.0.1:0", ssl_context=reloader.context) as srv:
        assert await served_cert(srv.port, sni) == der(pairs["first"][0])
        install(pairs["second"], live)
        assert await served_cert(srv.port, sni) == der(pairs["second"][0])
        assert await served_cert(srv.port, sni) == der(pairs["second"][0])
        assert reloader.reloads == 1


async def test_a_half_written_rotation_keeps_the_old_certificate(pairs: dict[str, tuple[Path, Path]]) -> None:
    live = pairs["live"]
    install(pairs["first"], live)
    reloader = CertificateReloader(str(live[0]), str(live[1]), check_interval_s=0.0)
    app = web.Application()
    async with running_server(app, "127.0.0.1:0", ssl_context=reloader.context) as srv:
        live[0].write_text("-----BEGIN CERTIFICATE-----\ntruncated")
        assert await served_cert(srv.port, None) == der(pairs["first"][0])
        assert reloader.reloads == 0
        install(pairs["second"], live)  # the rotation completes: picked up at the next handshake
        assert await served_cert(srv.port, None) == der(pairs["second"][0])


async def test_checks_are_throttled_by_the_interval(pairs: dict[str, tuple[Path, Path]]) -> None:
    live = pairs["live"]
    install(pairs["first"], live)
    now = [0.0]
    reloader = CertificateReloader(str(live[0]), str(live[1]), check_interval_s=30.0, clock=lambda: now[0])
    async with running_server(web.Application(), "127.0.0.1:0", ssl_context=reloader.context) as srv:
        install(pairs["second"], live)
        assert await served_cert(srv.port, None) == der(pairs["first"][0])  # not checked yet
        now[0] = 31.0
        assert await served_cert(srv.port, None) == der(pairs["second"][0])


def test_a_pair_that_does_not_load_at_start_is_a_config_error(tmp_path: Path) -> None:
    cert, key = make_pair(tmp_path / "a", "a")
    _, other_key = make_pair(tmp_path / "b", "b")
    with pytest.raises(ConfigError, match="--cert_file/--key_file"):
        build_ssl_context(str(cert), str(other_key))
    with pytest.raises(ConfigError):
        build_ssl_context(str(tmp_path / "missing.crt"), str(key))
