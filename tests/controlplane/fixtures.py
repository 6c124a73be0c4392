"""pytest fixtures over ``tests.controlplane.control``: a session-scoped kube-apiserver (skipped with one line
when ``KUBEBUILDER_ASSETS`` is unset) and a per-test ``Cleanup`` for what a test creates on it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from tests.controlplane.control import SKIP_REASON, ApiServer, Cleanup, assets_dir, control_plane, start_scheduler

__all__ = ["ApiServer", "Cleanup", "kube_apiserver", "kube_cleanup", "own_control_plane", "start_scheduler"]


@contextlib.contextmanager
def own_control_plane() -> Iterator[ApiServer]:
    """etcd + kube-apiserver on free loopback ports for the caller alone (a test that restarts its API server);
    skips the test without KUBEBUILDER_ASSETS (fails instead when CI=true)."""
    assets = assets_dir()
    if assets is None:
        if os.environ.get("CI") == "true":  # CI must run this suite, never skip it
            pytest.fail(f"CI=true and KUBEBUILDER_ASSETS is unset: {SKIP_REASON}", pytrace=False)
        pytest.skip(SKIP_REASON)
    with control_plane(assets) as api:
        yield api


@pytest.fixture(scope="session")
def kube_apiserver() -> Iterator[ApiServer]:
    """A control plane (:func:`own_control_plane`) shared by the whole session."""
    with own_control_plane() as api:
        yield api


@pytest.fixture
def kube_cleanup(kube_apiserver: ApiServer) -> Iterator[Cleanup]:
    """Register namespaces, nodes and other objects a test creates; they are deleted after the test."""
    cleanup = Cleanup(kube_apiserver)
    try:
        yield cleanup
    finally:
        cleanup.run()
