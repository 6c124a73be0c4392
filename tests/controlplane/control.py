"""A real Kubernetes control plane on loopback: etcd + kube-apiserver (+ kube-scheduler, + kube-controller-manager
on demand) from the binaries in ``$KUBEBUILDER_ASSETS``, with openssl-generated certificates. Plain context
managers, so the pytest fixtures and ``benchmarks/bench_cluster.py`` share them.

No kubelet runs: Nodes are created with their ``status``, pods never run, a namespace is finalized by hand
(``Cleanup``). kube-controller-manager runs only where a test starts it (``tests/controlplane/controllers.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.certs import EC_P256
from tests.controlplane.gangapi import GANG_APIS, GangApi

ASSETS_ENV = "KUBEBUILDER_ASSETS"
SKIP_REASON = (
    "real control plane: set KUBEBUILDER_ASSETS=$(scripts/install-control-plane.sh .cache/k8s),"
    " or to setup-envtest's directory (see README)"
)
_READY_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 15.0
_COLLECTION_DELETE_TIMEOUT_S = 600.0


class ControlPlaneError(RuntimeError):
    """A control-plane process failed to start; the message carries the tail of its log."""


def assets_dir() -> Path | None:
    """``$KUBEBUILDER_ASSETS`` as a directory holding kube-apiserver, or None when unset."""
    value = os.environ.get(ASSETS_ENV, "").strip()
    if not value:
        return None
    path = Path(value)
    if not (path / "kube-apiserver").exists():
        raise ControlPlaneError(f"{ASSETS_ENV}={value} has no kube-apiserver: scripts/install-control-plane.sh {value}")
    return path


def release_minor(assets: Path) -> int | None:
    """The minor version ``kube-apiserver --version`` reports (``Kubernetes v1.36.3`` → 36); None if it says none."""
    out = subprocess.run(
        [_binary(assets, "kube-apiserver"), "--version"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    found = re.search(r"v1\.(\d+)\.", out)
    return int(found.group(1)) if found else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary(assets: Path, name: str) -> str:
    candidate = assets / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise ControlPlaneError(f"{name} is neither in {assets} nor on the PATH (install-control-plane.sh links it)")
    return found


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed: {done.stderr.strip()}")


def make_ca(directory: Path, name: str = "ca") -> tuple[Path, Path]:
    """A self-signed CA (``<name>.crt``, ``<name>.key``) in ``directory``."""
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.crt",
        cwd=directory,
    )
    return directory / f"{name}.crt", directory / f"{name}.key"


def make_serving_cert(
    directory: Path,
    name: str,
    ca: tuple[Path, Path],
    sans: str = "IP:127.0.0.1,DNS:localhost",
    *,
    ecdsa: bool = False,
) -> tuple[Path, Path]:
    """A serving certificate ``<name>.crt``/``<name>.key`` for ``sans``, signed by ``ca``: RSA 2048 (kubeadm's
    default for the API server) or, ``ecdsa``, P-256 (the chart's certificates for the extender)."""
    ext = directory / f"{name}.ext"
    ext.write_text(f"subjectAltName={sans}\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    _openssl(
        "req",
        *(EC_P256 if ecdsa else ("-newkey", "rsa:2048")),
        "-nodes",
        "-subj",
        f"/CN={name}",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        cwd=directory,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        str(ca[0]),
        "-CAkey",
        str(ca[1]),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        ext.name,
        "-out",
        f"{name}.crt",
        cwd=directory,
    )
    return directory / f"{name}.crt", directory / f"{name}.key"


@dataclass(frozen=True)
class ApiServer:
    """A running kube-apiserver: its URL, an admin kubeconfig (token + CA), and a directory for more certs."""

    url: str
    kubeconfig: Path
    ca_file: Path
    token: str
    cert_dir: Path
    gang: GangApi | None = None
    """This API server's gang scheduling (:data:`GANG_APIS`, turned on); None on a release without one known."""
    audit_log: Path | None = None
    """The API server's audit log (one JSON line per request, metadata only; ``control_plane(audit=True)``):
    who asked what, by user agent (:func:`tests.controlplane.apicalls.calls_by_client`)."""
    restart: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    """Stop kube-apiserver (SIGTERM) and start it again on the same port and etcd; returns once it is ready.
    Blocking: call it from a thread in asynchronous code."""

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json", timeout: float = 30.0
    ) -> Any:
        """One synchronous API call; the decoded JSON answer. Raises ``urllib.error.HTTPError`` on a 4xx/5xx and
        ``TimeoutError`` when no answer came within ``timeout`` seconds."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, context=self.ssl_context(), timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def list_items(self, path: str, label_selector: str = "") -> list[dict[str, Any]]:
        """Every item of a list path (``/api/v1/pods``), optionally label-selected."""
        query = f"?labelSelector={urllib.parse.quote(label_selector)}" if label_selector else ""
        items: list[dict[str, Any]] = self.request("GET", path + query)["items"]
        return items


def _log_tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_http_ok(url: str, ctx: ssl.SSLContext | None, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    """Poll ``url`` until it answers 200 (an external process offers no event to await)."""
    end = time.monotonic() + _READY_TIMEOUT_S
    last = ""
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise ControlPlaneError(f"{what} exited with code {proc.returncode}:\n{_log_tail(log)}")
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.1)
    raise ControlPlaneError(f"{what} not ready within {_READY_TIMEOUT_S}s ({last}):\n{_log_tail(log)}")


_PORT_ATTEMPTS = 3


def _port_taken(proc: subprocess.Popen[bytes], log: Path) -> bool:
    """The process exited because a port picked free was taken meanwhile (another suite on the same machine)."""
    return proc.poll() is not None and "address already in use" in _log_tail(log, 50)


def _start_listening(
    ports: int,
    launch: Callable[[list[int]], tuple[subprocess.Popen[bytes], str, ssl.SSLContext | None]],
    log: Path,
    what: str,
) -> tuple[subprocess.Popen[bytes], list[int]]:
    """Start a process on ``ports`` free loopback ports (``launch`` returns it with its health URL and TLS context)
    and wait until it answers. A free port is only free when it is picked: when another process took it before
    ours bound it, ours exits with "address already in use" and is started again on other ports."""
    for attempt in range(_PORT_ATTEMPTS):
        picked = [free_port() for _ in range(ports)]
        proc, url, ctx = launch(picked)
        try:
            _wait_http_ok(url, ctx, proc, log, what)
        except ControlPlaneError:
            if attempt + 1 < _PORT_ATTEMPTS and _port_taken(proc, log):
                _stop(proc)
                continue
            _stop(proc)
            raise
        return proc, picked
    raise AssertionError("unreachable")


def _loopback_env() -> dict[str, str]:
    """The environment for control-plane processes: no proxy for loopback (webhook calls, extender calls)."""
    env = dict(os.environ)
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(key, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def _scratch_root() -> str | None:
    """/dev/shm when writable (etcd on tmpfs is fast), else the default temp dir."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


_AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "None", "verbs": ["watch"]}, {"level": "Metadata"}],
}


def _audit_flags(root: Path, log: Path) -> list[str]:
    """kube-apiserver flags for a metadata-only audit log of every request but watches (one line each, written
    in batches so requests never wait for the file)."""
    policy = root / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(_AUDIT_POLICY))
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        "--audit-log-mode=batch",
        "--audit-log-maxsize=2048",  # MB before it is rotated (AuditTail follows a rotation all the same)
        "--audit-log-maxbackup=0",
    ]


@contextlib.contextmanager
def control_plane(assets: Path, workdir: Path | None = None, *, audit: bool = False) -> Iterator[ApiServer]:
    """Start etcd (data on tmpfs when possible) and kube-apiserver on free loopback ports; yield the ApiServer;
    stop the apiserver, then etcd, and remove the scratch data. ``audit``: the API server writes an audit log
    (metadata of every request but watches, batched) to ``ApiServer.audit_log``."""
    owned = workdir is None
    root = Path(tempfile.mkdtemp(prefix="vgpu-cp-", dir=_scratch_root())) if workdir is None else workdir
    certs = root / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ca = make_ca(certs)
        serving = make_serving_cert(certs, "apiserver", ca)
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=certs)
        token = secrets.token_hex(16)
        (certs / "tokens.csv").write_text(f"{token},admin,admin-uid,system:masters\n")

        etcd_log = root / "etcd.log"

        def launch_etcd(ports: list[int]) -> tuple[subprocess.Popen[bytes], str, ssl.SSLContext | None]:
            client, peer = ports
            shutil.rmtree(root / "etcd", ignore_errors=True)
            with etcd_log.open("wb") as out:
                proc = subprocess.Popen(
                    [
                        _binary(assets, "etcd"),
                        "--data-dir",
                        str(root / "etcd"),
                        "--listen-client-urls",
                        f"http://127.0.0.1:{client}",
                        "--advertise-client-urls",
                        f"http://127.0.0.1:{client}",
                        "--listen-peer-urls",
                        f"http://127.0.0.1:{peer}",
                        "--initial-advertise-peer-urls",
                        f"http://127.0.0.1:{peer}",
                        "--initial-cluster",
                        f"default=http://127.0.0.1:{peer}",
                        "--unsafe-no-fsync",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=_loopback_env(),
                )
            return proc, f"http://127.0.0.1:{client}/health", None

        etcd, (etcd_port, _) = _start_listening(2, launch_etcd, etcd_log, "etcd")
        procs.append(etcd)

        api_log = root / "kube-apiserver.log"
        audit_log = root / "audit.log" if audit else None
        audit_flags = _audit_flags(root, audit_log) if audit_log is not None else []
        minor = release_minor(assets)
        gang = GANG_APIS.get(minor) if minor is not None else None
        gang_flags = (
            [f"--feature-gates={gang.feature_gates}", f"--runtime-config={gang.runtime_config}"] if gang else []
        )
        ctx = ssl.create_default_context(cafile=str(ca[0]))

        def launch_apiserver(ports: list[int]) -> tuple[subprocess.Popen[bytes], str, ssl.SSLContext | None]:
            (port,) = ports
            with api_log.open("wb") as out:
                proc = subprocess.Popen(
                    [
                        _binary(assets, "kube-apiserver"),
                        "--bind-address=127.0.0.1",
                        f"--secure-port={port}",
                        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                        "--service-cluster-ip-range=10.0.0.0/24",
                        "--endpoint-reconciler-type=none",
                        f"--client-ca-file={ca[0]}",
                        f"--tls-cert-file={serving[0]}",
                        f"--tls-private-key-file={serving[1]}",
                        f"--token-auth-file={certs / 'tokens.csv'}",
                        "--service-account-issuer=https://kubernetes.default.svc",
                        f"--service-account-key-file={certs / 'sa.key'}",
                        f"--service-account-signing-key-file={certs / 'sa.key'}",
                        "--authorization-mode=RBAC",
                        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                        "--profiling=false",
                        "--max-requests-inflight=2000",
                        "--max-mutating-requests-inflight=1000",
                        *audit_flags,
                        # the release's gang scheduling API (PodGroup, a pod's spec.schedulingGroup) for the gang
                        # scenarios; kube-scheduler turns its gang plugin on only where a scenario asks
                        *gang_flags,
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=_loopback_env(),
                )
            return proc, f"https://127.0.0.1:{port}/readyz", ctx

        apiserver, (api_port,) = _start_listening(1, launch_apiserver, api_log, "kube-apiserver")
        procs.append(apiserver)
        url = f"https://127.0.0.1:{api_port}"

        def restart() -> None:
            _stop(procs[1])
            proc, health, tls = launch_apiserver([api_port])
            procs[1] = proc
            _wait_http_ok(health, tls, proc, api_log, "kube-apiserver (restarted)")

        kubeconfig = root / "admin.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "test", "cluster": {"server": url, "certificate-authority": str(ca[0])}}],
                    "users": [{"name": "admin", "user": {"token": token}}],
                    "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
                    "current-context": "test",
                }
            )
        )
        api = ApiServer(
            url=url,
            kubeconfig=kubeconfig,
            ca_file=ca[0],
            token=token,
            cert_dir=certs,
            gang=gang,
            audit_log=audit_log,
            restart=restart,
        )
        _wait_default_namespace(api)
        yield api
    finally:
        for proc in reversed(procs):
            _stop(proc)
        if owned:
            shutil.rmtree(root, ignore_errors=True)


def _wait_default_namespace(api: ApiServer) -> None:
    """Create the ``default`` namespace if the apiserver has not yet (its bootstrap controller does it)."""
    end = time.monotonic() + _READY_TIMEOUT_S
    while time.monotonic() < end:
        try:
            api.request("GET", "/api/v1/namespaces/default")
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        try:
            api.request("POST", "/api/v1/namespaces", {"metadata": {"name": "default"}})
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise
        time.sleep(0.1)
    raise ControlPlaneError("namespace default never appeared")


def scheduler_config(api: ApiServer, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` (a KubeSchedulerConfiguration dict) with ``clientConnection.kubeconfig`` pointing at ``api`` and
    leader election off; the rest (qps, burst, profiles, extenders) as given."""
    out: dict[str, Any] = json.loads(json.dumps(dict(config)))
    out.setdefault("apiVersion", "kubescheduler.config.k8s.io/v1")
    out.setdefault("kind", "KubeSchedulerConfiguration")
    client = dict(out.get("clientConnection") or {})
    client["kubeconfig"] = str(api.kubeconfig)
    out["clientConnection"] = client
    out["leaderElection"] = {"leaderElect": False}
    return out


@dataclass
class Scheduler:
    """A running kube-scheduler: its process, log and secure port."""

    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    config_file: Path = field(repr=False)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


Popen = subprocess.Popen[bytes]


@contextlib.contextmanager
def start_component(
    api: ApiServer, assets: Path, name: str, args: Sequence[str], log: Path
) -> Iterator[tuple[Popen, int]]:
    """Run control-plane component ``name`` (kube-scheduler, kube-controller-manager) with ``args``, serving on a
    free loopback port and authenticating its callers through ``api``; wait for its ``/healthz``; yield the process
    and its port; SIGTERM it on exit."""
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # its serving cert is self-signed on the fly

    def launch(ports: list[int]) -> tuple[Popen, str, ssl.SSLContext | None]:
        (port,) = ports
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    _binary(assets, name),
                    *args,
                    "--bind-address=127.0.0.1",
                    f"--secure-port={port}",
                    f"--authentication-kubeconfig={api.kubeconfig}",
                    f"--authorization-kubeconfig={api.kubeconfig}",
                    "--v=2",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_loopback_env(),
            )
        return proc, f"https://127.0.0.1:{port}/healthz", insecure

    proc, (port,) = _start_listening(1, launch, log, name)
    try:
        yield proc, port
    finally:
        _stop(proc)


@contextlib.contextmanager
def start_scheduler(
    api: ApiServer, config: Mapping[str, Any], tmp: Path, *, feature_gates: str = ""
) -> Iterator[Scheduler]:
    """Run kube-scheduler with the KubeSchedulerConfiguration ``config`` (clientConnection filled in) and
    ``feature_gates`` (``--feature-gates``; e.g. a :class:`GangApi`'s); wait for its ``/healthz``; SIGTERM it
    on exit."""
    assets = assets_dir()
    if assets is None:
        raise ControlPlaneError(SKIP_REASON)
    tmp.mkdir(parents=True, exist_ok=True)
    config_file = tmp / "kube-scheduler-config.yaml"
    config_file.write_text(yaml.safe_dump(scheduler_config(api, config)))
    log = tmp / "kube-scheduler.log"
    args = [f"--config={config_file}", *([f"--feature-gates={feature_gates}"] if feature_gates else [])]
    with start_component(api, assets, "kube-scheduler", args, log) as (proc, port):
        yield Scheduler(proc=proc, log=log, port=port, config_file=config_file)


class Cleanup:
    """Deletes what a test created on the shared API server: namespaces (their pods first, with grace 0, then
    the namespace, finalized by hand since no namespace controller runs), nodes, cluster-scoped objects."""

    def __init__(self, api: ApiServer) -> None:
        self.api = api
        self.namespaces: list[str] = []
        self.nodes: list[str] = []
        self.paths: list[str] = []  # any other object's full path, deleted first

    def namespace(self, name: str, labels: Mapping[str, str] | None = None) -> str:
        """Create namespace ``name`` and register it for deletion."""
        self.api.request("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": dict(labels or {})}})
        self.namespaces.append(name)
        return name

    def node(self, name: str) -> None:
        self.nodes.append(name)

    def path(self, path: str) -> None:
        self.paths.append(path)

    def run(self) -> None:
        for path in reversed(self.paths):
            self._delete(path)
        for ns in self.namespaces:
            delete_namespace(self.api, ns)
        for name in self.nodes:
            self._delete(f"/api/v1/nodes/{name}")
        self.paths.clear()
        self.namespaces.clear()
        self.nodes.clear()

    def _delete(self, path: str) -> None:
        with contextlib.suppress(urllib.error.HTTPError):
            self.api.request("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})


def delete_namespace(api: ApiServer, ns: str) -> None:
    """Delete every pod of ``ns`` at once (grace 0), then the namespace, finalizing it by hand."""
    pods = api.list_items(f"/api/v1/namespaces/{ns}/pods")
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    for pod in pods:
        with contextlib.suppress(urllib.error.HTTPError):
            api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", options)
    for kind in ("resourcequotas", "events", "configmaps"):  # a long run's events take minutes to delete
        with contextlib.suppress(urllib.error.HTTPError):
            api.request("DELETE", f"/api/v1/namespaces/{ns}/{kind}", timeout=_COLLECTION_DELETE_TIMEOUT_S)
    try:
        api.request("DELETE", f"/api/v1/namespaces/{ns}")
        body = api.request("GET", f"/api/v1/namespaces/{ns}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return
        raise
    body["spec"] = {"finalizers": []}
    with contextlib.suppress(urllib.error.HTTPError):
        api.request("PUT", f"/api/v1/namespaces/{ns}/finalize", body)
