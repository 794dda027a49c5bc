"""The client of a deck in this process (`deck run`): what a frontend gets when it owns the deck."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from deck.client import Client, Listener, service_error, start
from deck.errors import INTERNAL_ERROR, INVALID_PARAMS, ServiceError, UnknownMethod

if TYPE_CHECKING:
    from deck.runtime.deck import Deck

log = logging.getLogger(__name__)


class LocalClient(Client):
    """The client of a deck in this process: calls go to `Deck.call`, listeners to `Deck.subscribe`.

    Listeners get the deck's event objects themselves: nothing is copied or encoded on the way,
    so the stream of chunks costs what it cost before there were clients.
    """

    def __init__(self, deck: Deck) -> None:
        #: The deck itself, for what serves it (`deck serve`'s server), never for a frontend.
        self.deck = deck

    def call(self, method: str, params: Any = None) -> asyncio.Future[Any]:
        return start(self._call(method, params))

    async def _call(self, method: str, params: Any) -> Any:
        try:
            return await self.deck.call(method, params)
        except ServiceError:
            raise
        except UnknownMethod as exc:
            raise service_error(exc.code, str(exc)) from None
        except UnicodeEncodeError as exc:  # a lone surrogate (a JSON escape) in a string of the params
            at = exc.object[exc.start : exc.start + 1]
            raise service_error(
                INVALID_PARAMS, f"a string in the params is not text: it holds a lone surrogate (U+{ord(at):04X})"
            ) from None
        except Exception as exc:  # a bug: the caller gets what a client at the end of a socket would
            log.exception("%s failed", method)
            raise service_error(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}") from exc

    def subscribe(self, listener: Listener) -> None:
        self.deck.subscribe(listener)

    def unsubscribe(self, listener: Listener) -> None:
        self.deck.unsubscribe(listener)

    async def end_of_input(self, *, drain: bool = True) -> None:
        self.deck.chat.end_of_input()
        if drain:
            await self.deck.chat.drain()

    async def close(self) -> None:
        await self.deck.stop_all()

    def request_exit(self, code: int) -> None:
        self.deck.request_exit(code)
