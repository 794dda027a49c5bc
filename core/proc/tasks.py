"""Who owns each task: a `TaskGroup` per owner, children closed with their parent.

The deck has one root group (`Deck.tasks`, `Deck.spawn`); each agent connection has one
(its request handlers, its exit watch), closed when the connection ends; plugins and
services spawn into the deck's. Unlike `asyncio.TaskGroup`, a task that fails is logged
and the others go on: one agent's bug must not take the deck down. `close()` cancels
what is left (the children's first) and waits for it, shielded from its caller's own
cancellation, so nothing outlives its owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class TaskGroup:
    """The tasks of one owner: spawned by name, logged when they fail, ended together."""

    def __init__(self, name: str, parent: TaskGroup | None = None) -> None:
        self.name = name
        self.parent = parent
        self._tasks: set[asyncio.Task[Any]] = set()
        self._children: set[TaskGroup] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, T], name: str, *, log_errors: bool = True) -> asyncio.Task[T]:
        """Run `coro` as a task of this group; with `log_errors`, an exception it ends with is logged."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done if log_errors else self._tasks.discard)
        return task

    def group(self, name: str) -> TaskGroup:
        """A group of its own inside this one: closed with it, or on its own before."""
        child = TaskGroup(name, self)
        self._children.add(child)
        return child

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())

    async def wait(self) -> None:
        """Wait until every task has ended on its own (those they spawn meanwhile too)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def cancel(self) -> None:
        """Cancel every task left, the children's too, without waiting (`close` waits)."""
        current = asyncio.current_task()
        for child in list(self._children):
            child.cancel()
        for task in self._tasks:
            if task is not current:
                task.cancel()

    async def close(self) -> None:
        """Cancel every task left (children first) and wait until they have ended; safe to call twice.

        The task calling it is left alone (a task of the group may end its own group), and a task
        spawned while the others end (a plugin's answer to an event they emit) is ended too."""
        if self.parent is not None:
            self.parent._children.discard(self)
        await asyncio.shield(self._close(asyncio.current_task()))

    async def _close(self, caller: asyncio.Task[Any] | None) -> None:
        for child in list(self._children):
            await child.close()
        while tasks := [t for t in self._tasks if t is not caller]:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.difference_update(tasks)
