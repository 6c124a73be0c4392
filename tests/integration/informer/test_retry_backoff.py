"""A reconcile pass that keeps failing (Redis or the API server unreachable) is retried with capped, jittered
exponential backoff, at WARNING only on the 1st, 2nd, 4th, 8th, … failure; the first success says so at INFO."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from tests.integration.informer.conftest import TUNING, Harness
from vgpu_scheduler.services.informer.reconcile import Reconciler, ReconcileReport
from vgpu_scheduler.shared.errors import TransientError

FAILURES = 6


async def test_a_failing_reconcile_pass_backs_off_and_warns_sparsely(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = Reconciler.run_pass
    calls = 0

    async def flaky(self: Reconciler) -> ReconcileReport:
        nonlocal calls
        calls += 1
        if calls <= FAILURES:
            raise TransientError("redis unavailable: connection refused")
        return await original(self)

    monkeypatch.setattr(Reconciler, "run_pass", flaky)
    monkeypatch.setattr("tests.integration.informer.conftest.TUNING", dataclasses.replace(TUNING, retry_s=0.004))
    caplog.set_level(logging.DEBUG, logger="vgpu_scheduler.services.informer.service")
    async with harness.run() as svc:  # synced: the pass after the failures went through
        assert svc.synced.is_set()
    failed = [r for r in caplog.records if r.getMessage() == "reconcile pass failed, retrying with backoff"]
    fields: list[dict[str, Any]] = [r.__dict__ for r in failed]
    assert [f["failures"] for f in fields] == list(range(1, FAILURES + 1))
    assert [r.levelno == logging.WARNING for r in failed] == [True, True, False, True, False, False]
    for n, f in enumerate(fields):  # 4 ms doubling each time, jittered into the upper half (rounded to 1 ms)
        base = 0.004 * 2**n
        assert base / 2 - 0.0005 <= f["retry_in_s"] <= base + 0.0005
    [back] = [r for r in caplog.records if r.getMessage() == "reconcile pass succeeded again"]
    assert back.levelno == logging.INFO and back.__dict__["failures"] == FAILURES
