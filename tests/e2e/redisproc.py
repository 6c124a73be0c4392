"""A private redis-server the test can kill (SIGKILL) and start again, empty, on the same port: what a Redis
restart without persistence looks like to the services; and a Sentinel-managed group (a primary, replicas and
Sentinels) whose primary the test can SIGKILL, for failovers."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
from pathlib import Path
from types import TracebackType


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisProcess:
    """``async with RedisProcess() as r:`` → ``r.url``; ``await r.restart()`` kills it and starts it empty."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self._binary = binary
        self.port = _free_port()
        self._dir = tempfile.mkdtemp(prefix="vgpu-redis-restart-")
        self._proc: asyncio.subprocess.Process | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        args = [self._binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", self._dir, "--daemonize", "no", "--loglevel", "warning"]
        self._proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        for _ in range(500):
            if self._proc.returncode is not None:
                raise RuntimeError(f"redis-server exited early with code {self._proc.returncode}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                await writer.wait_closed()
                return
            except OSError:
                await asyncio.sleep(0.02)  # an external process starting: nothing to await
        raise RuntimeError(f"redis-server did not listen on {self.port}")

    async def kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            await self._proc.wait()
            self._proc = None

    async def restart(self, down_s: float = 0.3) -> None:
        """Kill it, stay down ``down_s`` (requests fail meanwhile), start it again with nothing in it."""
        await self.kill()
        await asyncio.sleep(down_s)
        await self.start()
        self.restarts += 1

    async def __aenter__(self) -> RedisProcess:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)


class SentinelGroup:
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels (``redis-server --sentinel``), each its own
    process on a free loopback port: ``async with SentinelGroup() as g:`` → ``g.url`` (``redis+sentinel://``);
    ``await g.kill_primary()`` SIGKILLs whichever server is the primary now (Sentinel then promotes a replica).

    ``down_after_ms`` is Sentinel's ``down-after-milliseconds``: how long the primary must be silent before the
    Sentinels agree it is down and fail over."""

    SERVICE = "mymaster"

    def __init__(self, *, replicas: int = 2, sentinels: int = 3, down_after_ms: int = 400) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server redis-sentinel)")
        self._binary = binary
        self._dir = tempfile.mkdtemp(prefix="vgpu-redis-sentinel-")
        self.data_ports = [_free_port() for _ in range(1 + replicas)]
        self.sentinel_ports = [_free_port() for _ in range(sentinels)]
        self.down_after_ms = down_after_ms
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self.killed: list[int] = []
        """Ports of the servers killed and not yet revived."""
        self.kills = 0
        self.restarts = 0

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.SERVICE}/0"

    async def _spawn(self, port: int, args: list[str]) -> None:
        proc = await asyncio.create_subprocess_exec(
            self._binary, *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        self._procs[port] = proc
        for _ in range(500):
            if proc.returncode is not None:
                raise RuntimeError(f"redis-server {args[:1]} exited early with code {proc.returncode}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                await writer.wait_closed()
                return
            except OSError:
                await asyncio.sleep(0.02)  # an external process starting: nothing to await
        raise RuntimeError(f"redis-server did not listen on {port}")

    async def _command(self, port: int, *args: str) -> bytes:
        """One inline command on a fresh connection; the raw first reply line (enough for the checks here)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write((" ".join(args) + "\r\n").encode())
            await writer.drain()
            head = await reader.readline()
            if head.startswith(b"$") and int(head[1:]) >= 0:
                return await reader.readexactly(int(head[1:]) + 2)
            return head
        finally:
            writer.close()
            await writer.wait_closed()

    async def _start_server(self, port: int, primary: int | None) -> None:
        args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", self._dir, "--dbfilename", f"dump-{port}.rdb", "--daemonize", "no"]
        args += ["--loglevel", "warning", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"]
        if primary is not None and port != primary:
            args += ["--replicaof", "127.0.0.1", str(primary)]
        await self._spawn(port, args)

    async def _replicas_online(self, primary: int, count: int) -> None:
        """Until ``primary`` counts ``count`` replicas online (it counts one for WAIT only after its first
        acknowledgement, up to a second after the sync)."""
        info = b""
        for _ in range(1500):
            info = await self._command(primary, "INFO", "replication")
            if info.count(b"state=online") >= count:
                return
            await asyncio.sleep(0.02)  # external processes syncing: nothing to await
        raise RuntimeError(f"{count} replicas did not come online: {info.decode(errors='replace')}")

    async def start(self) -> None:
        primary = self.data_ports[0]
        for port in self.data_ports:
            await self._start_server(port, primary)
        await self._replicas_online(primary, len(self.data_ports) - 1)  # before the Sentinels look
        quorum = len(self.sentinel_ports) // 2 + 1
        for port in self.sentinel_ports:
            conf = Path(self._dir) / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {self._dir}\nloglevel warning\n"
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {primary} {quorum}\n"
                f"sentinel down-after-milliseconds {self.SERVICE} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.SERVICE} 5000\n"
                f"sentinel parallel-syncs {self.SERVICE} 2\n",
                encoding="utf-8",
            )  # a small file before the process starts: not worth a thread
            await self._spawn(port, [str(conf), "--sentinel"])

    async def primary_port(self) -> int:
        """The primary's port as the first Sentinel that answers names it."""
        for port in self.sentinel_ports:
            try:
                reply = await self._command_lines(port, "SENTINEL", "get-master-addr-by-name", self.SERVICE)
            except OSError:
                continue
            if len(reply) == 2:
                return int(reply[1])
        raise RuntimeError("no Sentinel names a primary")

    async def _command_lines(self, port: int, *args: str) -> list[str]:
        """A command whose reply is an array of bulk strings."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write((" ".join(args) + "\r\n").encode())
            await writer.drain()
            head = await reader.readline()
            if not head.startswith(b"*") or int(head[1:]) < 0:
                return []
            items = []
            for _ in range(int(head[1:])):
                size = int((await reader.readline())[1:])
                items.append((await reader.readexactly(size + 2))[:-2].decode())
            return items
        finally:
            writer.close()
            await writer.wait_closed()

    async def agreed_primary(self) -> int:
        """The primary's port once every Sentinel names the same live server and it says it is the primary
        (right after a failover they may disagree for a moment)."""
        for _ in range(1500):
            named: set[int] = set()
            for sentinel in self.sentinel_ports:
                reply = await self._command_lines(sentinel, "SENTINEL", "get-master-addr-by-name", self.SERVICE)
                if len(reply) == 2:
                    named.add(int(reply[1]))
            if len(named) == 1:
                port = named.pop()
                if port in self._procs and b"role:master" in await self._command(port, "INFO", "replication"):
                    return port
            await asyncio.sleep(0.02)  # Sentinels still converging: nothing to await
        raise RuntimeError("the Sentinels do not agree on a live primary")

    async def kill_primary(self) -> int:
        """SIGKILL the current primary (:meth:`agreed_primary`); its port."""
        port = await self.agreed_primary()
        proc = self._procs.pop(port)
        proc.kill()
        await proc.wait()
        self.killed.append(port)
        self.kills += 1
        return port

    async def revive(self) -> None:
        """Start every killed server again, empty, as a replica of the current primary (what a restarted Redis pod
        of the chart does), and wait until the primary counts it online."""
        primary = await self.agreed_primary()
        while self.killed:
            await self._start_server(self.killed.pop(), primary)
        info = b""
        for _ in range(1500):
            info = await self._command(primary, "INFO", "replication")
            if b"role:master" not in info:  # the Sentinels failed over again meanwhile (a loaded machine)
                primary = await self.agreed_primary()
                continue
            if info.count(b"state=online") >= len(self.data_ports) - 1:
                return
            await asyncio.sleep(0.02)  # external processes syncing: nothing to await
        raise RuntimeError(f"the revived replicas did not come online: {info.decode(errors='replace')}")

    async def restart_empty(self, down_s: float = 0.2) -> int:
        """SIGKILL every data server and start them again with nothing in them (a Redis StatefulSet restarted
        without persistence): the primary on its port first, the others as its replicas; the primary's port."""
        primary = await self.agreed_primary()
        for port in list(self._procs):
            if port in self.data_ports:
                proc = self._procs.pop(port)
                proc.kill()
                await proc.wait()
        await asyncio.sleep(down_s)  # down for a moment: requests fail meanwhile
        await self._start_server(primary, None)
        for port in self.data_ports:
            if port != primary:
                await self._start_server(port, primary)
        self.killed.clear()
        self.restarts += 1
        return primary

    async def __aenter__(self) -> SentinelGroup:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        for proc in self._procs.values():
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        self._procs.clear()
        shutil.rmtree(self._dir, ignore_errors=True)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
