"""The one interface a frontend talks to deck through: service calls by wire name, events in order, a snapshot.

    result = await client.call("ChatService.Send", {"agent": "a", "text": "hi"})
    client.subscribe(listener)        # listener(event) for every event, in order, each with its `seq`
    state = await client.snapshot()   # {seq, agents, conversations, pending, config}

Everything a frontend shows or does goes through these, in the wire's terms: parameters and
results are JSON values, a refused call raises `ServiceError` with the wire error's `code` and
message, and events are `deck.events` objects — the deck's own in this process, rebuilt by
`deck.events.from_wire` from their JSON lines at the other end of a socket. A frontend that
(re)joins subscribes first, then takes a snapshot, then applies only the events with a greater
`seq`. `deck.runtime.local.LocalClient` is the client of a deck in the same process;
`deck.remote.socket_client.SocketClient` that of a deck behind a socket, on the jsonl bridge's lines.

A call is made when `call` is called, not when its result is awaited: calls take effect in the
order they are made, and a call made while an event is being delivered takes effect before the
next event (in this process the service method runs at once up to its first wait; on a socket
the request line is written at once). That is how a frontend answers a permission request as it
is announced, before the end of input would cancel it for want of anyone to answer.
"""

from __future__ import annotations

import abc
import asyncio
import collections.abc
import contextvars
import logging
import sys
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

from deck.errors import ServiceError
from deck.events import Event

log = logging.getLogger(__name__)

T = TypeVar("T")
Listener = Callable[[Event], None]


def service_error(code: int, message: str, data: Any = None) -> ServiceError:
    """The `ServiceError` a call raises for the wire error `{code, message, data?}`."""
    error = ServiceError(message, data)
    error.code = code
    return error


class Client(abc.ABC):
    """How a frontend reaches a deck, wherever the deck runs."""

    #: False: the frontend owns the deck (`deck run`), its agents end with it. True: one client of a
    #: server among others; leaving only detaches, and `DeckService.Shutdown` stops the server.
    attached: bool = False

    @abc.abstractmethod
    def call(self, method: str, params: Any = None) -> asyncio.Future[Any]:
        """Call `method` ("Service.Method") with `params` by name (a JSON object; anything else is
        refused as invalid params): made at once, awaited for its result."""

    @abc.abstractmethod
    def subscribe(self, listener: Listener) -> None:
        """Call `listener(event)` for every event from now on, in the deck's order."""

    @abc.abstractmethod
    def unsubscribe(self, listener: Listener) -> None: ...

    async def snapshot(self) -> dict[str, Any]:
        """`DeckService.Snapshot()`: agents, conversations, pending requests and config, consistent at its `seq`."""
        return await self.call("DeckService.Snapshot")  # type: ignore[no-any-return]

    async def follow(self, listener: Listener, load: Callable[[dict[str, Any]], None]) -> None:
        """Join the deck where it is: `load(snapshot)`, then `listener(event)` for every event after it.

        Events that come while the snapshot is on its way are held, and those it already holds
        (`seq` not greater than its own) dropped: nothing is missed, nothing is applied twice. To
        start afresh (another config opened), unsubscribe `listener` and follow again — from a
        task, never from inside a listener: it changes who listens.
        """
        held: list[Event] = []
        hold = held.append
        self.subscribe(hold)
        try:
            snapshot = await self.snapshot()
        finally:
            self.unsubscribe(hold)
        load(snapshot)
        self.subscribe(listener)
        seq = snapshot["seq"]
        for event in held:
            if event.seq > seq:
                listener(event)

    # -- the end of a frontend's session ---------------------------------------------------
    # Not service methods: what they do depends on whether the frontend owns the deck
    # (`deck run`) or is one of its clients (attached to a server, which goes on).

    @abc.abstractmethod
    async def end_of_input(self, *, drain: bool = True) -> None:
        """The user is gone (end of stdin). A deck of its own: nobody is left to answer, so what is
        pending, and what agents ask from now on, is cancelled unless a listener answers it as it is
        announced; with `drain`, return once every turn and queued message is done."""

    @abc.abstractmethod
    async def close(self) -> None:
        """The frontend is done. A deck of its own stops every agent (they end with it)."""

    @abc.abstractmethod
    def request_exit(self, code: int) -> None:
        """End now with exit code `code` (the frontend's stdout is gone), whatever the frontend awaits."""


# -- calls made at once ------------------------------------------------------------------------


def start(coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """Run `coro` now, up to its first wait, in a task of its own: the future of its result.

    A call that never waits (most service methods) is done when this returns. Whatever runs in
    that first step belongs to the new task, not to the caller's (one delivering an event) nor to
    none (a socket's callback): an `asyncio.timeout` entered there cancels the call, never its
    caller, and `asyncio.current_task()` is the call's.
    """
    loop = asyncio.get_running_loop()
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=loop, eager_start=True)
    return _start_eagerly(loop, coro)


def _start_eagerly(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """`eager_start` as Python 3.12 has it, on 3.11: the task that runs the rest is made first, in a
    context of its own, and is the current task (in the caller's place) while the first step runs
    in that context."""
    rest = _Rest(coro)
    context = contextvars.copy_context()
    task = loop.create_task(rest, context=context)
    caller = asyncio.current_task(loop)
    if caller is not None:
        asyncio.tasks._leave_task(loop, caller)
    asyncio.tasks._enter_task(loop, task)
    try:
        rest.waiting = context.run(coro.send, None)
        return task
    except StopIteration as done:
        rest.ended = True
        return _done(loop, result=done.value)
    except (KeyboardInterrupt, SystemExit):
        rest.ended = True
        raise
    except BaseException as exc:
        rest.ended = True
        return _done(loop, error=exc)
    finally:
        asyncio.tasks._leave_task(loop, task)
        if caller is not None:
            asyncio.tasks._enter_task(loop, caller)


def _done(loop: asyncio.AbstractEventLoop, result: Any = None, error: BaseException | None = None) -> asyncio.Future[Any]:
    """A call that ended in its first step, as a done future (cancelled if it was)."""
    future: asyncio.Future[Any] = loop.create_future()
    if isinstance(error, asyncio.CancelledError):
        future.cancel()
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
    return future


_HANDED = object()


class _Rest(collections.abc.Coroutine):  # type: ignore[type-arg]
    """What the task of `_start_eagerly` runs: a coroutine whose first step ran already. The task's
    first step hands it what that step waits for (or ends at once, when that step ended the call);
    from then on every value, error and cancellation goes to the coroutine itself, a cancellation
    that came before the task's first step included."""

    __slots__ = ("coro", "waiting", "ended")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro
        self.waiting: Any = _HANDED  # what the first step waits for, until the task took it
        self.ended = False

    def send(self, value: Any) -> Any:
        if self.ended:
            raise StopIteration  # the call's outcome is its future's, not the task's
        waiting, self.waiting = self.waiting, _HANDED
        return self.coro.send(value) if waiting is _HANDED else waiting

    def throw(self, *exc: Any) -> Any:
        if self.ended:
            raise StopIteration
        self.waiting = _HANDED
        return self.coro.throw(*exc)

    def close(self) -> None:
        self.coro.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        raise TypeError("the rest of a call is run by its task, not awaited")
