"""Task groups: every task has an owner that ends it; one failing task is logged and the others go on."""

from __future__ import annotations

import asyncio
import logging

import pytest
from deck.proc.tasks import TaskGroup

pytestmark = pytest.mark.anyio


async def test_a_failing_task_is_logged_and_the_others_go_on(caplog):
    group = TaskGroup("test")
    release = asyncio.Event()

    async def fail() -> None:
        raise ValueError("boom")

    async def wait() -> str:
        await release.wait()
        return "done"

    with caplog.at_level(logging.ERROR):
        failing, waiting = group.spawn(fail(), "failing"), group.spawn(wait(), "waiting")
        await asyncio.gather(failing, return_exceptions=True)
        await asyncio.sleep(0)
    assert any("task failing failed" in r.getMessage() for r in caplog.records)
    assert not waiting.done()
    release.set()
    await group.wait()
    assert waiting.result() == "done" and len(group) == 0


async def test_close_ends_the_children_first_and_waits_for_every_task():
    root = TaskGroup("root")
    child = root.group("child")
    ended: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # cleanup that takes a step: close waits for it
            ended.append(name)

    root.spawn(forever("root task"), "root task")
    child.spawn(forever("child task"), "child task")
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(root.close())
    await asyncio.sleep(0)
    closing.cancel()  # the caller gives up: the close goes on, shielded
    with pytest.raises(asyncio.CancelledError):
        await closing
    async with asyncio.timeout(5):  # ended without another close: the first one went on
        await child.wait()
        await root.wait()
    assert ended == ["child task", "root task"]
    assert len(root) == len(child) == 0


async def test_a_task_may_close_its_own_group():
    group = TaskGroup("connection")
    other_cancelled = asyncio.Event()

    async def other() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            other_cancelled.set()
            raise

    async def closer() -> str:
        await group.close()  # as an agent's exit watch ends its connection
        return "still here"

    group.spawn(other(), "other")
    task = group.spawn(closer(), "closer")
    assert await task == "still here"
    assert other_cancelled.is_set()
