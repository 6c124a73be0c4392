"""Redis authentication: a redis-server started with ``requirepass`` and an ACL user refuses a client without the
password (and with a wrong one); ``--redis-password-file`` (the chart's convention) and a password in the URL are
accepted, the file is read again for every new connection (a rotated Secret applies without a restart), and a
real ``vgpu-scheduler extender`` process given the file places a pod while one without it stays not ready."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
import redis.exceptions as rexc

from tests.conftest import _free_port, _wait_for_port
from tests.integration.extender.filter_harness import seed, wire
from tests.process import listening_addresses, service_process
from tests.waiting import eventually
from vgpu_scheduler.shared.config import settings_for
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.errors import ConfigError, TransientError
from vgpu_scheduler.shared.store import Store, connect

PASSWORD = "s3cret-default"
ACL_USER, ACL_PASSWORD = "vgpu", "s3cret-acl"


@dataclass(frozen=True)
class AuthRedis:
    url: str  # redis://127.0.0.1:PORT/0, no credentials
    port: int


@pytest.fixture(scope="module")
def auth_redis() -> Iterator[AuthRedis]:
    """A private redis-server requiring a password for ``default`` and with an ACL user of its own."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed")
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="vgpu-redis-auth-")
    acl = Path(workdir) / "users.acl"
    acl.write_text(
        f"user default on >{PASSWORD} ~* &* +@all\nuser {ACL_USER} on >{ACL_PASSWORD} ~* &* +@all -@dangerous\n"
    )
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir, "--aclfile", str(acl), "--loglevel", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for_port(port, proc)
        yield AuthRedis(f"redis://127.0.0.1:{port}/0", port)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
async def admin(auth_redis: AuthRedis) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(auth_redis.url, password=PASSWORD)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


def secret_file(tmp_path: Path, text: str, name: str = "password") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


async def ping(client: aioredis.Redis) -> bool:
    try:
        return bool(await client.ping())
    finally:
        await client.aclose()


async def test_a_client_without_the_password_is_refused(auth_redis: AuthRedis, admin: aioredis.Redis) -> None:
    with pytest.raises(rexc.AuthenticationError):
        await ping(connect(auth_redis.url))
    store = Store.create(connect(auth_redis.url), prefix="t")
    try:  # through the store, the refusal is the transient "redis unavailable" every service retries and reports
        with pytest.raises(TransientError, match=r"[Aa]uthentication"):
            await store.inventory.list_nodes()
    finally:
        await store.aclose()
    assert await admin.dbsize() == 0  # nothing was written


async def test_a_wrong_password_is_refused(auth_redis: AuthRedis, tmp_path: Path) -> None:
    with pytest.raises(rexc.AuthenticationError):
        await ping(connect(auth_redis.url, password_file=str(secret_file(tmp_path, "wrong"))))
    with pytest.raises(rexc.AuthenticationError):
        await ping(connect(auth_redis.url.replace("redis://", "redis://:wrong@")))


async def test_the_password_file_and_the_url_password_are_accepted(auth_redis: AuthRedis, tmp_path: Path) -> None:
    # a trailing newline, as `echo` or `kubectl create secret --from-file` leave it, is not part of the password
    assert await ping(connect(auth_redis.url, password_file=str(secret_file(tmp_path, PASSWORD + "\n"))))
    assert await ping(connect(auth_redis.url.replace("redis://", f"redis://:{PASSWORD}@")))


async def test_an_acl_user_comes_from_the_url_and_its_password_from_the_file(
    auth_redis: AuthRedis, tmp_path: Path
) -> None:
    url = auth_redis.url.replace("redis://", f"redis://{ACL_USER}@")
    client = connect(url, password_file=str(secret_file(tmp_path, ACL_PASSWORD)))
    try:
        assert (await client.acl_whoami()) in (ACL_USER, ACL_USER.encode())
    finally:
        await client.aclose()
    with pytest.raises(rexc.AuthenticationError):  # the default user's password is not the ACL user's
        await ping(connect(url, password_file=str(secret_file(tmp_path, PASSWORD, "default"))))
    assert await ping(connect(url.replace(f"{ACL_USER}@", f"{ACL_USER}:{ACL_PASSWORD}@")))


async def test_a_rotated_password_file_applies_to_new_connections(
    auth_redis: AuthRedis, admin: aioredis.Redis, tmp_path: Path
) -> None:
    password_file = secret_file(tmp_path, ACL_PASSWORD)
    client = connect(auth_redis.url.replace("redis://", f"redis://{ACL_USER}@"), password_file=str(password_file))
    try:
        assert await client.ping()
        # rotation: the new password is added to the user, the Secret (file) changes, the old one is removed
        await admin.acl_setuser(ACL_USER, enabled=True, passwords=["+rotated"])
        password_file.write_text("rotated")
        await admin.acl_setuser(ACL_USER, enabled=True, passwords=[f"-{ACL_PASSWORD}"])
        await client.connection_pool.disconnect()  # as after a Redis restart or an idle drop
        assert await client.ping()
    finally:
        await client.aclose()
        await admin.acl_setuser(ACL_USER, enabled=True, passwords=["-rotated", f"+{ACL_PASSWORD}"])


def test_a_password_in_the_url_and_a_password_file_exclude_each_other(tmp_path: Path) -> None:
    password_file = secret_file(tmp_path, PASSWORD)
    for service in ("registrar", "informer", "extender", "all-in-one", "simulate"):
        settings = settings_for(service, ["--redis-url=redis://h:1", f"--redis-password-file={password_file}"], {})
        assert settings.common.redis_password_file == str(password_file), service
    env = {"VGPU_REDIS_PASSWORD_FILE": str(password_file)}
    assert settings_for("informer", ["--redis-url=redis://vgpu@h:1"], env).common.redis_password_file == str(
        password_file
    )
    with pytest.raises(ConfigError, match="carries a password and --redis-password-file"):
        settings_for("registrar", ["--redis-url=redis://:p@h:1", f"--redis-password-file={password_file}"], {})
    with pytest.raises(ConfigError, match="--redis-password-file: no such file"):
        settings_for("registrar", ["--redis-url=redis://h:1", f"--redis-password-file={tmp_path / 'none'}"], {})


async def extender_url(log: Path) -> str:
    """The URL of the process' --http_bind server (the one of its two listeners that serves /filter)."""
    async with aiohttp.ClientSession() as http:
        for address in listening_addresses(log):
            async with http.post(f"http://{address}/filter", data=b"{}") as r:
                if r.status == 200:
                    return f"http://{address}"
    raise AssertionError(f"no /filter listener in {listening_addresses(log)}")


async def readyz(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/readyz") as r:
        return r.status, await r.text()


async def test_the_extender_process_uses_the_password_file(
    auth_redis: AuthRedis, admin: aioredis.Redis, emulator: Emulator, tmp_path: Path
) -> None:
    # the ACL user docs/deploy.md suggests for an external Redis: +@all -@dangerous
    acl_url = auth_redis.url.replace("redis://", f"redis://{ACL_USER}@")
    password = secret_file(tmp_path, ACL_PASSWORD)
    seeded = Store.create(connect(acl_url, password_file=str(password)), prefix="x")
    try:
        await seed(seeded)
    finally:
        await seeded.aclose()
    common = [f"--redis-url={acl_url}", "--key-prefix=x", f"--kube-server={emulator.url}",
              "--http_bind=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0"]  # fmt: skip

    without = tmp_path / "without.log"
    async with service_process(without, "extender", *common) as proc:
        await eventually(lambda: len(listening_addresses(without)) == 2 or proc.returncode is not None, 30)
        assert proc.returncode is None, without.read_text()
        status, text = await readyz(await extender_url(without))
        assert status == 503 and "redis unavailable" in text, text
        assert "invalid username-password pair" in text or "uthentication" in text, text

    with_file = tmp_path / "with.log"
    flags = [*common, f"--redis-password-file={password}"]
    async with service_process(with_file, "extender", *flags) as proc:
        await eventually(lambda: len(listening_addresses(with_file)) == 2 or proc.returncode is not None, 30)
        assert proc.returncode is None, with_file.read_text()
        url = await extender_url(with_file)

        async def ready() -> bool:
            return (await readyz(url))[0] == 200

        await eventually(ready, 30, "readyz 200 with the password file")
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{url}/filter", data=wire("001-filter.json")) as r,
        ):
            answer = await r.json()
        assert answer["NodeNames"] == ["gpu-node-1"]
