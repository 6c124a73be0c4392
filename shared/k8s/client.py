"""The Kubernetes client factory: configuration (in-cluster, kubeconfig or a direct URL), a QPS/burst token
bucket, per-call deadlines, and raw-JSON calls.

Every call asks kubernetes-asyncio for the raw response (``_preload_content=False``) and parses the body with
``json.loads``: objects stay the API server's JSON dicts (``shared.k8s.objects``). That is ~30x faster than
deserialising into model classes and converting back with ``sanitize_for_serialization`` (550 ms vs 18 ms for
1,000 pods), and it keeps every field byte-faithful (timestamps stay ``...Z``, unknown fields survive).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api
from kubernetes_asyncio.config import ConfigException, load_incluster_config
from kubernetes_asyncio.config.kube_config import ConfigNode, KubeConfigLoader
from yarl import URL

from vgpu_scheduler.shared.errors import ConfigError, TransientError
from vgpu_scheduler.shared.k8s.errors import error_for

logger = logging.getLogger(__name__)

JSON_CONTENT = "application/json"
_AUTH_SETTINGS = ["BearerToken"]
"""The auth settings every generated core/v1 method names (kubernetes-asyncio's ``auth_settings``)."""


@dataclass(frozen=True)
class KubeSettings:
    """How to reach the API server. ``server`` (a direct URL, e.g. the emulator's) wins over ``kubeconfig``;
    with neither, kubectl's order: ``KUBECONFIG``, ``~/.kube/config``, the in-cluster service account.
    ``qps``/``burst`` shape two token buckets of one client, one for Events and one for every other call
    (qps <= 0 disables them); ``timeout_s`` is the default deadline of one call."""

    kubeconfig: str | None = None
    server: str | None = None
    context: str | None = None
    qps: float = 50.0
    burst: int = 100
    timeout_s: float = 10.0
    user_agent: str = "vgpu-scheduler"

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ConfigError(f"kube timeout_s must be > 0, got {self.timeout_s}")
        if self.qps > 0 and self.burst < 1:
            raise ConfigError(f"kube burst must be >= 1 when qps > 0, got {self.burst}")


class TokenBucket:
    """A token bucket of ``burst`` tokens refilled at ``rate_per_s``. ``acquire()`` waits its turn; waiters are
    served in arrival order because each reserves its token (the balance may go negative) before sleeping."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate_per_s
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()

    def reserve(self) -> float:
        """Take one token now; return how many seconds the caller must wait before using it."""
        if self._rate <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._rate

    def cancel(self) -> None:
        """Give back a reserved token (the caller gave up waiting)."""
        if self._rate > 0:
            self._tokens = min(self._burst, self._tokens + 1.0)

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay > 0:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                self.cancel()
                raise


DEFAULT_KUBECONFIG = "~/.kube/config"
IN_CLUSTER = "in-cluster service account"


@dataclass(frozen=True)
class KubeSource:
    """Where the configuration comes from, as kubectl would choose it (see :func:`resolve_source`).

    ``server``: a direct URL; ``files``: kubeconfig files to merge (first wins); neither: in-cluster.
    ``label`` names the source in messages and the start-up log line.
    """

    label: str
    server: str | None = None
    files: tuple[str, ...] = ()


def resolve_source(
    settings: KubeSettings, environ: Mapping[str, str] | None = None, home: Path | None = None
) -> tuple[KubeSource | None, list[str]]:
    """Choose the configuration in kubectl's order: ``--kube-server``; ``--kubeconfig`` (one file);
    ``KUBECONFIG`` (a ``:``-separated list, files that do not exist skipped, as kubectl does);
    ``~/.kube/config``; else ``None`` (in-cluster). Also returns what was tried, for the error message.

    Raises ConfigError when a file named by ``--kubeconfig``, or every file ``KUBECONFIG`` lists, is not found:
    an operator who names a file means that file, never a silent fall-back to another cluster.
    """
    env = os.environ if environ is None else environ
    tried: list[str] = []
    if settings.server:
        return KubeSource(f"--kube-server {settings.server}", server=settings.server), tried
    if settings.kubeconfig:
        path = os.path.expanduser(settings.kubeconfig)
        if not os.path.isfile(path):
            raise ConfigError(f"--kubeconfig {settings.kubeconfig}: file not found")
        return KubeSource(f"--kubeconfig {settings.kubeconfig}", files=(path,)), tried
    tried.append("--kubeconfig (not given)")
    listed = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        found = tuple(dict.fromkeys(os.path.expanduser(p) for p in listed if os.path.isfile(os.path.expanduser(p))))
        if not found:
            raise ConfigError(
                f"KUBECONFIG={env['KUBECONFIG']}: file not found ({', '.join(listed)}); "
                "give --kubeconfig FILE or --kube-server URL, or unset KUBECONFIG"
            )
        return KubeSource(f"KUBECONFIG={env['KUBECONFIG']}", files=found), tried
    tried.append("KUBECONFIG (not set)")
    default = (home / ".kube" / "config") if home is not None else Path(os.path.expanduser(DEFAULT_KUBECONFIG))
    if default.is_file():
        return KubeSource(str(default), files=(str(default),)), tried
    tried.append(f"{default} (not found)")
    return None, tried


def _read_kubeconfig(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"kubeconfig {path}: cannot read: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"kubeconfig {path}: not valid YAML: {e}") from e
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(
            f"kubeconfig {path}: expected a mapping (apiVersion, clusters, users, contexts), got {type(doc).__name__}"
        )
    for key in ("clusters", "contexts", "users"):
        items = doc.get(key)
        if items is not None and (
            not isinstance(items, list) or not all(isinstance(i, dict) and "name" in i for i in items)
        ):
            raise ConfigError(f"kubeconfig {path}: {key} must be a list of named entries")
    return doc


def merge_kubeconfigs(paths: Sequence[str]) -> ConfigNode:
    """Merge kubeconfig files as kubectl does: the first file that defines a cluster, user or context (by name)
    or a non-empty ``current-context`` wins. Each entry keeps its own file's directory for relative paths
    (certificate files, token files). kubernetes-asyncio's own merger lets a *later* file's current-context
    win, unlike kubectl; this one does not."""
    docs = [(p, _read_kubeconfig(p)) for p in paths]
    merged: dict[str, Any] = {"clusters": [], "contexts": [], "users": [], "current-context": ""}
    seen: dict[str, set[str]] = {"clusters": set(), "contexts": set(), "users": set()}
    for path, doc in docs:
        if not merged["current-context"] and doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
        for key, names in seen.items():
            for item in doc.get(key) or []:
                if item["name"] not in names:
                    names.add(item["name"])
                    merged[key].append(ConfigNode(f"{path}/{item['name']}", item, path))
    return ConfigNode(paths[0] if paths else "kubeconfig", merged, paths[0] if paths else None)


async def load_configuration(
    settings: KubeSettings, *, environ: Mapping[str, str] | None = None, home: Path | None = None
) -> Configuration:
    """A fresh kubernetes-asyncio ``Configuration`` (never the library's global default), from the source
    kubectl would use (:func:`resolve_source`), else the in-cluster service account.

    With no cluster at all, one ConfigError says what was tried and names ``--kubeconfig``/``--kube-server``.
    """
    cfg = Configuration()
    source, tried = resolve_source(settings, environ, home)
    if source is not None and source.server:
        cfg.host = source.server.rstrip("/")
        return cfg
    if source is not None:
        merged = merge_kubeconfigs(source.files)
        if not merged.value["current-context"] and not settings.context:
            raise ConfigError(f"kubeconfig {source.label}: no current-context set (kubectl config use-context NAME)")
        try:
            loader = KubeConfigLoader(config_dict=merged, active_context=settings.context, config_base_path=None)
            await loader.load_and_set(cfg)
        except (ConfigException, OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"cannot load Kubernetes configuration from {source.label}: {e}") from e
        logger.debug("kubernetes configuration", extra={"source": source.label, "server": cfg.host})
        return cfg
    try:
        load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, ValueError) as e:
        tried.append(f"{IN_CLUSTER} ({e})")
        raise ConfigError(
            "no Kubernetes cluster configured: tried " + "; ".join(tried) + ". Give --kubeconfig FILE (or set "
            "KUBECONFIG) for a cluster outside, or --kube-server URL for an API server without credentials"
        ) from e
    return cfg


Call = Callable[..., Awaitable[Any]]


class Budget(enum.Enum):
    """Which token bucket a call draws from. Both have ``qps``/``burst`` of their own: Events can never delay a
    bind, a watch or a patch, however many of them are queued."""

    REQUESTS = "requests"
    EVENTS = "events"


def _transport_error(what: str, deadline_s: float, e: BaseException) -> TransientError:
    """A call that got no answer (its deadline passed, or the connection failed) as a retryable error."""
    if isinstance(e, TimeoutError):
        return TransientError(f"{what}: no answer within {deadline_s:g}s")
    return TransientError(f"{what}: {type(e).__name__}: {e}")


class KubeClient:
    """One API connection: the kubernetes-asyncio ``ApiClient`` and ``CoreV1Api`` (``core``), a token bucket and
    a default deadline. Build it with ``open_client``; ``Api`` and ``Informer`` use it."""

    def __init__(self, api_client: ApiClient, settings: KubeSettings) -> None:
        self.api_client = api_client
        self.core: Any = CoreV1Api(api_client)
        self.settings = settings
        self.limiter = TokenBucket(settings.qps, settings.burst)
        self.event_limiter = TokenBucket(settings.qps, settings.burst)

    async def _admit(self, timeout_s: float | None, budget: Budget) -> float:
        """Wait for a token of ``budget``; the call's deadline (``timeout_s``, else the client's default)."""
        await (self.event_limiter if budget is Budget.EVENTS else self.limiter).acquire()
        return timeout_s if timeout_s is not None else self.settings.timeout_s

    async def call_json(
        self,
        what: str,
        fn: Call,
        *args: Any,
        timeout_s: float | None = None,
        budget: Budget = Budget.REQUESTS,
        **kwargs: Any,
    ) -> Any:
        """Call one generated API method and return its parsed JSON body. The deadline covers the request and
        reading the body, not the wait for a token of ``budget`` before it: a call queued behind the rate limit
        is slow, not failed. Errors are translated (``shared.k8s.errors``)."""
        deadline_s = await self._admit(timeout_s, budget)
        try:
            async with asyncio.timeout(deadline_s):
                resp = await fn(*args, _preload_content=False, _request_timeout=deadline_s, **kwargs)
                try:
                    body = await resp.read()
                finally:
                    resp.release()
        except (TimeoutError, aiohttp.ClientError) as e:
            raise _transport_error(what, deadline_s, e) from e
        if resp.status >= 400:
            raise error_for(what, resp.status, body, resp.headers)
        try:
            return json.loads(body)
        except ValueError as e:
            raise TransientError(f"{what}: the API server answered {resp.status} with a body that is not JSON") from e

    async def call_raw(
        self,
        what: str,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        content_type: str = JSON_CONTENT,
        timeout_s: float | None = None,
        budget: Budget = Budget.REQUESTS,
    ) -> bytes:
        """One call to ``path`` (``/api/v1/...``) straight on the client's aiohttp session, with the same
        configuration (host, credentials: the token is refreshed as for generated calls; TLS and proxy live in the
        session) but without the generated method's argument processing (about 70 µs of CPU a call, a third of
        the call). Returns the body of a 2xx answer undecoded: a caller that does not need it skips the parse.
        Deadline, budget and errors as :meth:`call_json`."""
        deadline_s = await self._admit(timeout_s, budget)
        api_client = self.api_client
        headers: dict[str, str] = {**api_client.default_headers, "Accept": JSON_CONTENT}
        if body is not None:
            headers["Content-Type"] = content_type
        await api_client.update_params_for_auth(headers, [], _AUTH_SETTINGS)
        rest = api_client.rest_client
        kwargs: dict[str, Any] = {"headers": headers, "data": body, "timeout": aiohttp.ClientTimeout(total=deadline_s)}
        if rest.proxy:
            kwargs["proxy"] = rest.proxy
            if rest.proxy_headers:
                kwargs["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            kwargs["server_hostname"] = rest.server_hostname
        try:
            async with asyncio.timeout(deadline_s):
                async with rest.pool_manager.request(
                    method, f"{api_client.configuration.host}{path}", **kwargs
                ) as resp:
                    data = await resp.read()
        except (TimeoutError, aiohttp.ClientError) as e:
            raise _transport_error(what, deadline_s, e) from e
        if resp.status >= 400:
            raise error_for(what, resp.status, data, resp.headers)
        return data

    async def open_stream(
        self, what: str, fn: Call, *args: Any, read_timeout_s: float, **kwargs: Any
    ) -> aiohttp.ClientResponse:
        """Start a streaming call (a watch): the deadline covers the token and the response headers; reading
        is bounded by ``read_timeout_s`` between chunks. The caller closes the returned response."""
        deadline_s = self.settings.timeout_s
        timeout = aiohttp.ClientTimeout(total=None, connect=deadline_s, sock_read=read_timeout_s)
        try:
            async with asyncio.timeout(deadline_s):
                await self.limiter.acquire()
                resp: aiohttp.ClientResponse = await fn(
                    *args, _preload_content=False, _request_timeout=timeout, **kwargs
                )
                if resp.status >= 400:
                    try:
                        body = await resp.read()
                    finally:
                        resp.release()
                    raise error_for(what, resp.status, body, resp.headers)
        except (TimeoutError, aiohttp.ClientError) as e:
            raise _transport_error(what, deadline_s, e) from e
        return resp


def _resolve_environment_once(api_client: ApiClient, host: str | None) -> None:
    """Read the proxy environment once instead of on every request.

    kubernetes-asyncio opens its aiohttp session with ``trust_env=True``, which makes aiohttp look up the
    proxy variables and ``~/.netrc`` in a worker thread on every API call: about 0.8 ms of CPU and two thread
    hops per call, on the bind path and for every Event. The API server's proxy (``HTTPS_PROXY``/``NO_PROXY``)
    cannot change while the process runs, so it is resolved here, and the session is replaced by one on the
    same connector that does not consult the environment again. ``.netrc`` is not used: Kubernetes credentials
    come from the kubeconfig or the service account.
    """
    rest = api_client.rest_client
    if not rest.proxy and host:
        try:
            proxy, proxy_auth = get_env_proxy_for_url(URL(host))
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if proxy_auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}), "Proxy-Authorization": proxy_auth.encode()}
    old = rest.pool_manager
    connector = old.connector
    old.detach()
    rest.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=2**21)


@asynccontextmanager
async def open_client(settings: KubeSettings) -> AsyncIterator[KubeClient]:
    """Load the configuration, open a client, and always close it (its aiohttp session) on exit."""
    cfg = await load_configuration(settings)
    api_client = ApiClient(configuration=cfg)
    api_client.user_agent = settings.user_agent
    _resolve_environment_once(api_client, cfg.host)
    try:
        yield KubeClient(api_client, settings)
    finally:
        await api_client.close()
