"""The ask itself: the target answers in a session of its own; earlier messages are announcements, the last is final."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from deck import CONVERSATION, AcpError, ConnectionClosed, ServiceError, now_iso

from .events import AgentAnnouncement, AskChanged

if TYPE_CHECKING:
    from deck import Agent, Deck

log = logging.getLogger(__name__)

NO_REPLY = "target returned no reply"
#: Asks one agent may have in progress at once (until their targets' sessions ended, cancelled ones too).
MAX_ASKS_FROM = 4
#: Ask sessions one target may have open at once, whoever asks: more than one requester's share, so
#: that one requester alone cannot take them all.
MAX_ASKS_TO = 8
#: A refusal repeated faster than this, in seconds, is counted, not logged each time.
NOTE_EVERY = 1.0
#: Session updates that end the message being streamed: a new tool call (not a late
#: status update of an earlier one, which may arrive in the middle of the text).
BOUNDARIES = frozenset({"tool_call"})

_tickets = itertools.count(1)


class AskError(Exception):
    """An ask that cannot give an answer; the message is the tool's error."""


class Notes:
    """Log lines about refusals, at most one per NOTE_EVERY seconds: a flood of them is one line and a count."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._said = -NOTE_EVERY
        self._unsaid = 0

    def note(self, text: str) -> None:
        now = time.monotonic()
        if now - self._said < NOTE_EVERY:
            self._unsaid += 1
            return
        more = f" ({self._unsaid} more since the last such line)" if self._unsaid else ""
        self._said, self._unsaid = now, 0
        self._write(text + more)


#: The characters one message of a target's answer keeps (each goes to the asking agent whole).
ANSWER_MAX = 1 << 20


class Messages:
    """Splits the target's streamed text into messages; all but the last are announced at once."""

    def __init__(self, announce: Any) -> None:
        self._announce = announce
        self._chunks: list[str] = []  # the message being streamed
        self._size = 0  # its characters so far: past ANSWER_MAX the rest is cut
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
        if self._size > ANSWER_MAX:
            return  # cut: the note says so
        self._size += len(text)
        if self._size > ANSWER_MAX:
            text = text[: max(ANSWER_MAX - self._size + len(text), 0)] + f"\n[… the rest was cut: an answer keeps {ANSWER_MAX:,} characters]"
        self._chunks.append(text)

    def boundary(self) -> None:
        """A tool call (or a new messageId) ends the message being streamed."""
        # Blank lines around a message go, but not the indentation of its first line (code).
        message = "".join(self._chunks).lstrip("\r\n").rstrip()
        self._chunks = []
        self._size = 0
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
        self.deck.notice("announcements", f"{self.target.name} → {self.requester}: {text}", agent=self.requester)

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
        except ServiceError as exc:  # refused before it was sent: a budget reached
            raise AskError(f"{target.name} may not answer: {exc}") from exc
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
        self.active: dict[str, Ask] = {}  # whose requester waits for the answer
        self.running: dict[str, Ask] = {}  # whose target's session is still open: waited for or not
        self._notes: dict[str, Notes] = {}

    def note(self, agent: str, text: str) -> None:
        """A line for `agent`'s log (and deck's), throttled: refusals come as fast as an agent asks."""
        notes = self._notes.get(agent)
        if notes is None:
            notes = self._notes[agent] = Notes(lambda line: self._log(agent, line))
        notes.note(text)

    def _log(self, agent: str, line: str) -> None:
        log.info("announcements: %s: %s", agent, line)
        found = self.deck.agents.get(agent)
        if found is not None:
            found.log(f"deck: {line}")

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
        self._check_room(requester, target_name)
        ask = Ask(self, requester, target, question, origin or CONVERSATION)
        task = ask.task = self.deck.spawn(self._run(ask), f"ask {ask.ticket_id}", log_errors=False)  # AskError: the tool's
        self.active[ask.ticket_id] = ask
        self.running[ask.ticket_id] = ask
        task.add_done_callback(lambda _: self.running.pop(ask.ticket_id, None))  # cancelled before it ran
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

    async def _run(self, ask: Ask) -> str:
        """The ask, no longer counted once it ended: as its target turns ready, it has room for another."""
        try:
            return await ask.run()
        finally:
            self.running.pop(ask.ticket_id, None)

    def _check_room(self, requester: str, target: str) -> None:
        """AskError when `requester` has MAX_ASKS_FROM asks in progress, or `target` MAX_ASKS_TO ask sessions open."""
        asking = sum(1 for ask in self.running.values() if ask.requester == requester)
        answering = sum(1 for ask in self.running.values() if ask.target.name == target)
        if asking >= MAX_ASKS_FROM:
            why = (f"too many asks: {requester} has {asking} in progress, the most one agent may have; "
                   "ask again once one has ended")  # fmt: skip
        elif answering >= MAX_ASKS_TO:
            why = f"{target} is busy: it is answering {answering} asks, the most it takes at once; ask again later"
        else:
            return
        self.note(requester, f"ask_agent {target} refused: {why}")
        raise AskError(why)

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
