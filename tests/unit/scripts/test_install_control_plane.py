"""scripts/install-control-plane.sh without a real build: its argument errors, the one-line refusal when Go is
missing or older than the release needs (a fake ``go`` on a PATH that holds only the tools the script uses), and
its idempotency (a DIR that already holds the release is left alone, and Go is never called; one missing a command
builds only that command)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "install-control-plane.sh"
BASH = shutil.which("bash") or "/bin/bash"
# Everything the script runs besides bash builtins, go, etcd and apt-get.
TOOLS = ("cat", "mkdir", "sed", "grep", "sort", "head", "tail", "mktemp", "rm", "mv", "ln")
DEFAULT = "v1.37.2"

# A release's go.mod as far as the script reads it: the go directive, a godebug line, the ./staging replaces.
GO_MOD = """module k8s.io/kubernetes

{go}

godebug default=go1.26

require k8s.io/api v0.0.0

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
)
"""


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


class Sandbox:
    """A PATH with only the script's tools (so no real ``go`` or ``etcd``), plus fakes added on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        self.tmp = root / "tmp"
        self.tmp.mkdir()
        self.calls = root / "go-calls"  # every argument list the fake go was called with, one a line
        for tool in TOOLS:
            found = shutil.which(tool)
            assert found is not None, f"{tool} is not on the PATH"
            (self.bin / tool).symlink_to(found)

    def fake(self, name: str, body: str) -> Path:
        path = self.bin / name
        path.write_text(f"#!{BASH}\n{body}\n")
        path.chmod(0o755)
        return path

    def fake_go(self, goversion: str, release_go: str | None = "1.26.0", download_error: str | None = None) -> None:
        """A ``go`` that reports ``goversion``, serves a release go.mod needing ``release_go`` (no go directive if
        None), or fails to download with ``download_error``, and refuses everything else, as a build would fail."""
        gomod = self.root / "release.mod"
        gomod.write_text(GO_MOD.format(go=f"go {release_go}" if release_go else ""))
        if download_error is None:
            download = f'echo \'{{\n\t"Path": "k8s.io/kubernetes",\n\t"GoMod": "{gomod}",\n\t"Sum": "h1:x"\n}}\''
        else:
            download = f'echo \'{{\n\t"Path": "k8s.io/kubernetes",\n\t"Error": "{download_error}"\n}}\'; exit 1'
        self.fake(
            "go",
            f'echo "$*" >>{self.calls}\n'
            'case "$1 $2" in\n'
            f'  "env GOVERSION") echo {goversion} ;;\n'
            f'  "mod download") {download} ;;\n'
            '  *) echo "fake go refuses: $*" >&2; exit 1 ;;\n'
            "esac",
        )

    def go_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def run(self, *args: str, version: str | None = None, cwd: Path | None = None) -> Result:
        env = {"PATH": str(self.bin), "HOME": str(self.root), "TMPDIR": str(self.tmp), "LC_ALL": "C"}
        if version is not None:
            env["K8S_VERSION"] = version
        command = [BASH, str(SCRIPT), *args]
        cwd = cwd or self.root
        done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
        assert not os.listdir(self.tmp), f"the script left {os.listdir(self.tmp)} in TMPDIR"
        return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


def holding(directory: Path, version: str = DEFAULT, *, etcd: bool = True) -> Path:
    """``directory`` as a finished install of ``version`` left it (the binaries are stand-ins)."""
    directory.mkdir(parents=True, exist_ok=True)
    names = ["kube-apiserver", "kube-scheduler", "kube-controller-manager", *(["etcd"] if etcd else [])]
    for name in names:
        (directory / name).write_text(f"#!{BASH}\necho {name} {version}\n")
        (directory / name).chmod(0o755)
    (directory / ".k8s-version").write_text(version + "\n")
    return directory


def one_line_error(result: Result) -> str:
    assert result.returncode == 1, result
    assert result.stdout == "", result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected a one-line error, got:\n{result.stderr}"
    assert lines[0].startswith("install-control-plane.sh: "), lines[0]
    return lines[0]


# --- arguments --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [(), ("a", "b"), ("",)], ids=["none", "two", "empty"])
def test_anything_but_one_directory_is_a_usage_error(sandbox: Sandbox, args: tuple[str, ...]) -> None:
    assert "usage: install-control-plane.sh DIR" in one_line_error(sandbox.run(*args))


@pytest.mark.parametrize("version", ["1.36.3", "v1.36", "v2.0.0", "latest", "v1.36.3 v1.35.0"])
def test_a_malformed_release_is_refused_before_anything_happens(sandbox: Sandbox, version: str) -> None:
    sandbox.fake_go("go1.26.8")
    target = sandbox.root / "cp"
    error = one_line_error(sandbox.run(str(target), version=version))
    assert f"K8S_VERSION must be a Kubernetes release such as {DEFAULT}, not '{version}'" in error
    assert sandbox.go_calls() == [] and not target.exists()


def test_a_file_where_the_directory_should_be_is_refused(sandbox: Sandbox) -> None:
    target = sandbox.root / "cp"
    target.write_text("not a directory")
    assert "exists and is not a directory" in one_line_error(sandbox.run(str(target)))


# --- Go missing or too old ---------------------------------------------------------------------------------------


def test_without_go_the_error_says_go_is_needed(sandbox: Sandbox) -> None:
    target = sandbox.root / "cp"
    error = one_line_error(sandbox.run(str(target)))
    commands = "kube-apiserver, kube-scheduler, kube-controller-manager"
    assert f"needs Go (1.26 or newer) on the PATH to build {commands} {DEFAULT}" in error
    assert not (target / ".k8s-version").exists()


@pytest.mark.parametrize(
    ("goversion", "release_go", "have", "need"),
    [
        ("go1.25.4", "1.26.0", "1.25.4", "1.26.0"),
        ("go1.26rc1", "1.26.0", "1.26", "1.26.0"),
        ("go1.26.8", "1.27.0", "1.26.8", "1.27.0"),
        ("go1.25.4", None, "1.25.4", "1.26"),  # a go.mod without a go directive: Go 1.26 at least
    ],
)
def test_a_go_older_than_the_release_needs_is_refused(
    sandbox: Sandbox, goversion: str, release_go: str | None, have: str, need: str
) -> None:
    sandbox.fake_go(goversion, release_go=release_go)
    error = one_line_error(sandbox.run(str(sandbox.root / "cp")))
    assert f"Go {have} is too old: Kubernetes {DEFAULT} needs Go {need} or newer" in error
    assert sandbox.go_calls() == ["env GOVERSION", f"mod download -json k8s.io/kubernetes@{DEFAULT}"]


@pytest.mark.parametrize(("goversion", "release_go"), [("go1.26.0", "1.26.0"), ("go1.27.1", "1.26.0")])
def test_a_new_enough_go_goes_on_to_build(sandbox: Sandbox, goversion: str, release_go: str) -> None:
    """The other side of the version check: the fake go is asked to set up the build module (and refuses)."""
    sandbox.fake_go(goversion, release_go=release_go)
    result = sandbox.run(str(sandbox.root / "cp"), version="v1.36.0")
    assert result.returncode == 1
    assert "too old" not in result.stderr
    assert "cannot resolve the modules of k8s.io/kubernetes@v1.36.0" in result.stderr.splitlines()[-1]
    assert "mod init local/control-plane" in sandbox.go_calls()


def test_a_release_the_module_proxy_does_not_serve_is_a_one_line_error(sandbox: Sandbox) -> None:
    sandbox.fake_go("go1.26.8", download_error="k8s.io/kubernetes@v1.99.0: 404 Not Found\\n\\tmore detail")
    error = one_line_error(sandbox.run(str(sandbox.root / "cp"), version="v1.99.0"))
    assert error.endswith("cannot download k8s.io/kubernetes@v1.99.0: k8s.io/kubernetes@v1.99.0: 404 Not Found")


# --- idempotency ------------------------------------------------------------------------------------------------


def test_a_directory_holding_the_release_is_left_alone_without_go(sandbox: Sandbox) -> None:
    sandbox.fake_go("go1.26.8")
    target = holding(sandbox.root / "cp")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    result = sandbox.run("cp", cwd=sandbox.root)  # a relative DIR is printed absolute
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{target}\n", "")
    assert sandbox.go_calls() == []
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before


@pytest.mark.parametrize("stale", ["other release", "no kube-scheduler", "no version file"])
def test_a_directory_not_holding_the_release_is_rebuilt(sandbox: Sandbox, stale: str) -> None:
    """Without Go the rebuild fails, which shows the script tried to build."""
    target = holding(sandbox.root / "cp", "v1.35.4" if stale == "other release" else DEFAULT)
    if stale == "no kube-scheduler":
        (target / "kube-scheduler").unlink()
    if stale == "no version file":
        (target / ".k8s-version").unlink()
    assert "needs Go" in one_line_error(sandbox.run(str(target)))
    assert (target / "kube-apiserver").read_text().endswith("v1.35.4\n" if stale == "other release" else f"{DEFAULT}\n")


def test_a_directory_made_before_kube_controller_manager_gets_only_that_built(sandbox: Sandbox) -> None:
    """Without Go the build fails, and the error names the one command it was to build."""
    target = holding(sandbox.root / "cp")
    (target / "kube-controller-manager").unlink()
    error = one_line_error(sandbox.run(str(target)))
    assert f"on the PATH to build kube-controller-manager {DEFAULT}" in error
    assert (target / "kube-apiserver").exists() and (target / ".k8s-version").exists()


def test_k8s_version_picks_the_release_the_directory_must_hold(sandbox: Sandbox) -> None:
    target = holding(sandbox.root / "cp", "v1.35.4")
    result = sandbox.run(str(target), version="v1.35.4")
    assert (result.returncode, result.stdout) == (0, f"{target}\n")
    assert "needs Go" in one_line_error(sandbox.run(str(target), version="v1.37.0"))


def test_etcd_from_the_path_is_linked_into_the_directory(sandbox: Sandbox) -> None:
    etcd = sandbox.fake("etcd", "echo etcd")
    target = holding(sandbox.root / "cp", etcd=False)
    result = sandbox.run(str(target))
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{target}\n", "")
    assert (target / "etcd").is_symlink() and (target / "etcd").resolve() == etcd.resolve()
