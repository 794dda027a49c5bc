"""The ask itself: the target answers in a session of its own; earlier messages are announcements, the last is final."""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING, Any

from deck import CONVERSATION, AcpError, ConnectionClosed, ServiceError, now_iso
from deck.events import AgentAnnouncement, AskChanged

if TYPE_CHECKING:
    from deck import Agent, Deck

NO_REPLY = "target returned no reply"
#: Session updates that end the message being streamed: a new tool call (not a late
#: status update of an earlier one, which may arrive in the middle of the text).
BOUNDARIES = frozenset({"tool_call"})

_tickets = itertools.count(1)


class AskError(Exception):
    """An ask that cannot give an answer; the message is the tool's error."""


class Messages:
    """Splits the target's streamed text into messages; all but the last are announced at once."""

    def __init__(self, announce: Any) -> None:
        self._announce = announce
        self._chunks: list[str] = []  # the message being streamed
        self._message_id: Any = None
        self._last: str | None = None  # the last finished message: the final, unless another follows

    def text(self, text: str, message_id: Any = None) -> None:
        if message_id is not None and self._message_id is not None and message_id != self._message_id:
            self.boundary()
        if message_id is not None:
            self._message_id = message_id
        if not self._chunks and self._last is not None and text.strip():
            # A new message starts: the previous one is not the final after all.
            self._announce(self._last)
            self._last = None
        self._chunks.append(text)

    def boundary(self) -> None:
        """A tool call (or a new messageId) ends the message being streamed."""
        # Blank lines around a message go, but not the indentation of its first line (code).
        message = "".join(self._chunks).lstrip("\r\n").rstrip()
        self._chunks = []
        self._message_id = None
        if message:
            if self._last is not None:
                self._announce(self._last)
            self._last = message

    def final(self) -> str | None:
        self.boundary()
        return self._last


class AskSink:
    """The target's ask session: its text becomes messages; thoughts and tool calls are not the requester's."""

    def __init__(self, ask: Ask) -> None:
        self.messages = Messages(ask.announce)

    def on_update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            content = update.get("content")
            if isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str):
                self.messages.text(content["text"], update.get("messageId"))
        elif kind in BOUNDARIES:
            self.messages.boundary()


class Ask:
    """One question from `requester` to `target`, identified by its ticket.

    The target answers in a session of its own (`Agent.open_session`): what it asks the user
    meanwhile goes to the user under the target's own `permissions` policy, and is cancelled
    when the ask ends."""

    def __init__(self, asks: Asks, requester: str, target: Agent, question: str, origin: str = "") -> None:
        self.asks = asks
        self.deck = asks.deck
        self.requester = requester
        self.origin = origin  # the requester's session that asked: CONVERSATION, or the ticket it answers
        self.target = target
        self.question = question
        self.ticket_id = f"ticket-{next(_tickets)}"
        self.given_up = False
        self.task: asyncio.Task[str] | None = None

    def announce(self, text: str) -> None:
        if self.given_up:  # the requester stopped waiting: what the target still says is nobody's
            return
        self.deck.emit(AgentAnnouncement(self.requester, self.target.name, self.ticket_id, text, now_iso()))

    def give_up(self) -> None:
        """Nobody waits for the answer any more: the target's session is cancelled, and it goes quiet."""
        self.given_up = True
        if self.task is not None:
            self.task.cancel()

    async def run(self) -> str:
        target = self.target
        try:
            await target.start()
        except ServiceError as exc:
            raise AskError(str(exc)) from exc
        target.acquire()  # busy from the first moment: idle_stop leaves it alone
        try:
            return await self._prompt()
        except ConnectionClosed as exc:
            raise AskError(f"{target.name} stopped before it answered: {target.error or exc.args[0]}") from exc
        except AcpError as exc:
            raise AskError(f"{target.name} answered with an error: {exc.args[0] or exc.code}") from exc
        finally:
            target.release()

    async def _prompt(self) -> str:
        sink = AskSink(self)
        session = await self.target.open_session(sink, origin=self.ticket_id)
        try:
            result = await session.prompt(self.question)
        finally:
            session.close()
        final = sink.messages.final()
        if result.get("stopReason") == "cancelled":
            raise AskError(f"{self.target.name} cancelled its answer")
        if final is None:
            raise AskError(NO_REPLY)
        return final


class Asks:
    """Every ask in progress in one deck: the refusals, and cancelling what nobody waits for."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self.active: dict[str, Ask] = {}

    def list_agents(self, requester: str) -> list[dict[str, Any]]:
        return [
            {"name": a.name, "title": a.title, "description": a.config.description, "state": a.state.value,
             **({"you": True} if a.name == requester else {})}
            for a in self.deck.agents.values()
        ]  # fmt: skip

    async def ask(self, requester: str, target_name: str, question: str, origin: str = CONVERSATION) -> str:
        """Put `question` to `target_name` for `requester`; the final message, or AskError.

        `origin` is the requester's session that asks: its own conversation, or the ticket
        of an ask it is answering; the ask is cancelled when that turn or ask ends."""
        if requester not in self.deck.agents:
            raise AskError(f"unknown requester {requester!r}")
        if target_name == requester:
            raise AskError("an agent cannot ask itself")
        if not question.strip():
            raise AskError("empty question: there is nothing to ask")
        try:
            target = self.deck.agent(target_name)
        except ServiceError as exc:
            raise AskError(str(exc)) from exc
        chain = self._chain(target_name, requester)
        if chain:
            raise AskError(
                f"refused: {' → '.join(chain)} is waiting for an answer, so {requester} asking {target_name} "
                "would wait forever"
            )
        ask = Ask(self, requester, target, question, origin or CONVERSATION)
        task = ask.task = self.deck.spawn(ask.run(), f"ask {ask.ticket_id}", log_errors=False)  # AskError: the tool's
        self.active[ask.ticket_id] = ask
        self.deck.emit(AskChanged(requester, target.name, ask.ticket_id, True))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            ask.give_up()  # the requester no longer waits: the target's session is cancelled
            raise
        finally:
            self.active.pop(ask.ticket_id, None)
            self.deck.emit(AskChanged(requester, target.name, ask.ticket_id, False))
            self._end_asks_from(ask.ticket_id)  # what the target asked while answering is moot now

    def _chain(self, start: str, goal: str) -> list[str]:
        """A path of asks in progress from `start` to `goal` (start asks X asks … goal), or []."""
        seen = {start}
        paths = [[start]]
        while paths:
            path = paths.pop()
            for ask in self.active.values():
                if ask.requester != path[-1]:
                    continue
                nxt = ask.target.name
                if nxt == goal:
                    return [*path, nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    paths.append([*path, nxt])
        return []

    def turn_ended(self, agent: str) -> None:
        """`agent`'s own conversation turn ended (answered or cancelled): the asks it made from it end."""
        for ask in list(self.active.values()):
            if ask.requester == agent and ask.origin == CONVERSATION:
                ask.give_up()

    def _end_asks_from(self, ticket_id: str) -> None:
        for ask in list(self.active.values()):
            if ask.origin == ticket_id:
                ask.give_up()

    def cancel_all(self) -> None:
        for ask in list(self.active.values()):
            ask.give_up()
