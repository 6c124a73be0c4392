"""Where the API server configuration comes from: kubectl's order (flag, KUBECONFIG list, ~/.kube/config,
in-cluster), each step's failure worded for an operator."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.k8s.client import KubeSettings, KubeSource, merge_kubeconfigs, resolve_source


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / ".kube").mkdir(parents=True)
    return h


def _file(path: Path, text: str = "apiVersion: v1\n") -> str:
    path.write_text(text)
    return str(path)


def test_kube_server_wins_over_everything(tmp_path: Path, home: Path) -> None:
    env = {"KUBECONFIG": _file(tmp_path / "a")}
    source, _ = resolve_source(KubeSettings(server="http://emu:1"), env, home)
    assert source == KubeSource("--kube-server http://emu:1", server="http://emu:1")


def test_the_flag_wins_over_kubeconfig_env_and_home(tmp_path: Path, home: Path) -> None:
    flag = _file(tmp_path / "flag")
    _file(home / ".kube" / "config")
    source, _ = resolve_source(KubeSettings(kubeconfig=flag), {"KUBECONFIG": _file(tmp_path / "env")}, home)
    assert source is not None and source.files == (flag,) and source.label == f"--kubeconfig {flag}"


def test_kubeconfig_env_is_a_colon_list_with_missing_files_skipped_and_duplicates_once(
    tmp_path: Path, home: Path
) -> None:
    a, b = _file(tmp_path / "a"), _file(tmp_path / "b")
    env = {"KUBECONFIG": f"{a}::{tmp_path / 'missing'}:{b}:{a}"}
    _file(home / ".kube" / "config")
    source, tried = resolve_source(KubeSettings(), env, home)
    assert source is not None and source.files == (a, b)
    assert tried == ["--kubeconfig (not given)"]


def test_home_config_when_nothing_else(home: Path) -> None:
    path = _file(home / ".kube" / "config")
    source, tried = resolve_source(KubeSettings(), {}, home)
    assert source == KubeSource(path, files=(path,))
    assert tried == ["--kubeconfig (not given)", "KUBECONFIG (not set)"]


def test_nothing_found_leaves_in_cluster_and_lists_what_was_tried(home: Path) -> None:
    source, tried = resolve_source(KubeSettings(), {"KUBECONFIG": ""}, home)
    assert source is None
    assert tried == ["--kubeconfig (not given)", "KUBECONFIG (not set)", f"{home / '.kube' / 'config'} (not found)"]


def test_a_missing_flag_file_is_not_found_never_a_fall_back(tmp_path: Path, home: Path) -> None:
    _file(home / ".kube" / "config")
    with pytest.raises(ConfigError, match=r"^--kubeconfig .*/nope: file not found$"):
        resolve_source(KubeSettings(kubeconfig=str(tmp_path / "nope")), {}, home)


def test_kubeconfig_env_of_only_missing_files_is_not_found(tmp_path: Path, home: Path) -> None:
    _file(home / ".kube" / "config")
    with pytest.raises(ConfigError, match="file not found"):
        resolve_source(KubeSettings(), {"KUBECONFIG": f"{tmp_path / 'x'}"}, home)


def test_merge_is_first_wins_like_kubectl(tmp_path: Path) -> None:
    a = _file(
        tmp_path / "a",
        "clusters:\n- name: c\n  cluster: {server: 'https://first'}\ncurrent-context: ''\n",
    )
    b = _file(
        tmp_path / "b",
        "clusters:\n- name: c\n  cluster: {server: 'https://second'}\n- name: d\n  cluster: {server: 'https://d'}\n"
        "current-context: from-b\n",
    )
    c = _file(tmp_path / "c", "current-context: from-c\n")
    merged = merge_kubeconfigs([a, b, c])
    assert merged.value["current-context"] == "from-b"  # the first non-empty one
    servers = {n.value["name"]: (n.value["cluster"]["server"], n.path) for n in merged.value["clusters"]}
    assert servers == {"c": ("https://first", a), "d": ("https://d", b)}  # entries keep their own file
