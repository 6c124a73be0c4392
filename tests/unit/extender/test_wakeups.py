"""NodeWakeups: a change of a node wakes whoever armed it, and only them; nothing armed is lost."""

from __future__ import annotations

import asyncio

from vgpu_scheduler.services.extender.wakeups import NodeWakeups, wait_armed


async def test_a_change_wakes_what_was_armed_for_that_node_only() -> None:
    wakeups = NodeWakeups()
    a, b = wakeups.arm("a"), wakeups.arm("b")
    assert wakeups.arm("a") is a  # one event per node, shared by its waiters
    wakeups.notify("a")
    assert a.is_set() and not b.is_set()
    assert await wait_armed(a, 0.0)
    assert wakeups.arm("a") is not a  # the next wait arms a fresh event
    assert not await wait_armed(b, 0.0)  # not set: the wait ends at its timeout


async def test_a_change_between_arming_and_waiting_is_not_missed() -> None:
    wakeups = NodeWakeups()
    armed = wakeups.arm("n")
    wakeups.notify("n")  # lands after a failed try, before the wait starts
    assert await wait_armed(armed, 3600.0)


async def test_a_waiter_is_woken_while_it_waits_and_notify_all_wakes_everyone() -> None:
    wakeups = NodeWakeups()
    armed = wakeups.arm("n")
    waiting = asyncio.create_task(wait_armed(armed, 3600.0))
    other = asyncio.create_task(wait_armed(wakeups.arm("other"), 3600.0))
    await asyncio.sleep(0)  # both are waiting
    wakeups.notify("other")
    assert await other  # the other node's waiter was woken and has run to its end ...
    # ... while n's event was not set and stays armed: waking n would have set it or taken it off the table
    assert not armed.is_set() and wakeups.arm("n") is armed and not waiting.done()
    wakeups.notify("n")
    assert await waiting
    x, y = wakeups.arm("x"), wakeups.arm("y")
    wakeups.notify_all()
    assert x.is_set() and y.is_set() and len(wakeups) == 0


def test_notifying_a_node_nobody_waits_for_keeps_nothing() -> None:
    wakeups = NodeWakeups()
    wakeups.notify("n")
    assert len(wakeups) == 0
