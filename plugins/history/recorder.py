"""Recording: what each agent's conversation shows, kept in the history store as it happens.

Whole messages (`message:updated`: added, or finished) go to the store's `Writer` as they come.
A streamed chunk (`message:delta`) of a message still streaming is kept in a list per part
(joined in blocks of JOIN_EVERY as they come): at most FLUSH_INTERVAL later, or once
HAND_OFF_SIZE of text has gathered, each part's new text is joined and handed to the writer,
which appends it to the stored message in its thread. A fast stream thus costs a list append
per chunk on the event loop and, once a second or every 128 KiB, a join of the text that came
meanwhile; the writer writes that text only, never the whole message again, and never one
chunk at a time.
When the message finishes, the streamed text stays where it is: the writer is told how long
each streamed part was, and stores the rest of the finished version. The recorder holds no
copy of a message's text beyond the last second's chunks (about HAND_OFF_SIZE at most).

Each agent's messages go to its current stored conversation (`HistoryRecorder.current`), created with
the agent's first message of the run under the config file's path and the agent's name. A
message keeps the conversation it started in, even once another config file is opened.
Announcements and inter-agent asks never reach the agent's own conversation, so they are never
stored: nothing here looks at `agent:announcement`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deck import ServiceError
from deck.events import (
    AgentStateChanged,
    ConfigChanged,
    ConversationChanged,
    Event,
    MessageDelta,
    MessageUpdated,
    PluginError,
    SubagentChanged,
    UsageChanged,
)

from . import store as _store
from .store import TEXT_KINDS, Chunk, HistoryStore, HistoryUnavailable, Writer

if TYPE_CHECKING:
    from deck import Deck

__all__ = ["HistoryRecorder", "config_key", "report_when_shown", "title_of"]

log = logging.getLogger(__name__)

#: The longest title taken from the first user message (its first line, cut with "…").
TITLE_MAX = 80
#: How long a problem found at start waits for a frontend to be there to show it.
FRONTEND_WAIT = 2.0
#: Chunks of a streaming part kept apart before they are joined into one block: a second of a fast
#: stream is 100,000 chunks or more, which hold about their text so, not as many string objects.
JOIN_EVERY = 2048
#: The most streamed text (in characters) gathered before it goes to the writer, even within the
#: interval: SQLite takes a few times a row's size to write it, so a fast stream's second of text
#: is written in pieces of this size rather than in one row of megabytes.
HAND_OFF_SIZE = 128 << 10


def config_key(path: str | os.PathLike[str] | None) -> str:
    """What the history files conversations under: the config file's real path; "" for the built-in config.

    The same file reached as `./deck.toml`, through `$DECK_CONFIG` or a symlink is one key.
    """
    if not path:
        return ""
    return os.path.realpath(Path(path).expanduser())


def title_of(message: dict[str, Any]) -> str | None:
    """A conversation's title from a user message: the first non-empty line of its text, at most TITLE_MAX long."""
    parts = message.get("parts")
    texts = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == "text"] if isinstance(parts, list) else []
    return one_line_title("\n".join(t for t in texts if isinstance(t, str)))


def one_line_title(text: str) -> str | None:
    """The first non-empty line of `text`, its spaces collapsed, at most TITLE_MAX long: what a
    title is stored as, whoever gave it (an agent's may be a megabyte on many lines)."""
    line = next((stripped for raw in text.splitlines() if (stripped := " ".join(raw.split()))), "")
    if not line:
        return None
    return line if len(line) <= TITLE_MAX else line[: TITLE_MAX - 1].rstrip() + "…"


def _first_user_message(messages: Any) -> dict[str, Any] | None:
    if not isinstance(messages, list):
        return None
    return next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)


class _Streaming:
    """A message still streaming: its stored conversation, what streamed into it since the last
    hand-off, and how long each of its text parts is.

    `changes` maps a part's index to its kind and either the text chunks to append (text,
    thought) or the latest version of the part (tool, plan). `lengths` maps each text part to
    its kind, its length in the whole version the writer has, and the length appended since.
    `tail` is the list of the text part that streamed last (`tail_index`, `tail_kind`): the
    next chunk of the same part, the usual case, is one list append (`HistoryRecorder.on_event`);
    `loose` counts the chunks appended to it since its last ones were joined (`join_loose`), and
    `gathered` the characters those joins made since the last hand-off.
    """

    __slots__ = ("conversation", "changes", "lengths", "tail", "tail_index", "tail_kind", "loose", "gathered")

    def __init__(self, conversation: str, message: dict[str, Any]) -> None:
        self.conversation = conversation
        self.changes: dict[int, tuple[str, list[str] | dict[str, Any]]] = {}
        self.tail: list[str] = []
        self.tail_index = -1
        self.tail_kind = ""
        self.loose = 0
        self.gathered = 0
        parts = message.get("parts")
        self.lengths: dict[int, list[Any]] = {
            index: [part["type"], len(part["text"]), 0]
            for index, part in enumerate(parts if isinstance(parts, list) else ())
            if isinstance(part, dict) and part.get("type") in TEXT_KINDS and isinstance(part.get("text"), str)
        }

    def add(self, event: MessageDelta) -> None:
        """One `message:delta`, in O(1): its text appended to the part's list, or its part kept."""
        index, kind, text = event.index, event.kind, event.text
        if kind in TEXT_KINDS and text is not None:
            pending = self.changes.get(index)
            if pending is not None and pending[0] == kind and isinstance(pending[1], list):
                chunks = pending[1]
            else:
                chunks = []
                self.changes[index] = (kind, chunks)
            chunks.append(text)
            self.tail, self.tail_index, self.tail_kind, self.loose = chunks, index, kind, 0
        elif event.part is not None:
            self.changes[index] = (kind, event.part)
            if index == self.tail_index:
                self.tail_index = -1

    def join_loose(self) -> int:
        """The tail's last JOIN_EVERY chunks, all appended since its last join, made one string;
        how many characters the joins gathered since the last hand-off."""
        block = "".join(self.tail[-JOIN_EVERY:])
        self.tail[-JOIN_EVERY:] = [block]
        self.loose = 0
        self.gathered += len(block)
        return self.gathered

    def take(self) -> list[Chunk]:
        """The changes since the last call, each part's text joined, in part order; none are kept."""
        changes, self.changes = self.changes, {}
        self.tail, self.tail_index, self.loose, self.gathered = [], -1, 0, 0
        taken: list[Chunk] = []
        for index, (kind, value) in sorted(changes.items()):
            if isinstance(value, list):
                text = "".join(value)
                length = self.lengths.get(index)
                if length is None or length[0] != kind:  # a new part (the store starts one too)
                    length = self.lengths[index] = [kind, 0, 0]
                length[2] += len(text)
                taken.append((index, kind, text))
            else:
                self.lengths.pop(index, None)  # a part replaced: its text, if any, is no longer streamed
                taken.append((index, kind, value))
        return taken

    def streamed(self, finished: dict[str, Any]) -> dict[int, int] | None:
        """For the writer's `finish`: each streamed part → its length in the whole version written before.

        None when the finished version does not end each streamed part with the text appended
        (it would not come from these events): it must then be written whole.
        """
        parts = finished.get("parts")
        streamed: dict[int, int] = {}
        for index, (kind, before, appended) in self.lengths.items():
            if not appended:
                continue
            part = parts[index] if isinstance(parts, list) and index < len(parts) else None
            text = part.get("text") if isinstance(part, dict) and part.get("type") == kind else None
            if not isinstance(text, str) or len(text) != before + appended:
                return None
            streamed[index] = before
        return streamed


@dataclass
class _Stored:
    """What the recorder knows of one stored conversation it writes to."""

    session_id: str | None = None
    user_title: str | None = None  # from the first user message
    agent_title: str | None = None  # from the agent's session_info_update: it wins
    #: The message `user_title` is read from: a replayed one grows chunk by chunk after it was first
    #: stored, and its later versions title the conversation again.
    titled_by: str | None = None

    @property
    def title(self) -> str | None:
        return self.agent_title or self.user_title


class HistoryRecorder:
    """One deck's recording into `store`. Made on the event loop; `close()` at shutdown.

    `current` maps each agent to the stored conversation its next new message goes to: the
    one place that says which stored conversation an agent is in (a fresh one starts when an
    agent with none sends or receives a message).
    """

    def __init__(self, deck: Deck, store: HistoryStore, config_path: str, interval: float | None = None) -> None:
        self.deck = deck
        self.store = store
        self.interval = _store.FLUSH_INTERVAL if interval is None else interval
        self.config = config_key(config_path)
        #: agent name → id of its current stored conversation.
        self.current: dict[str, str] = {}
        #: Agents whose conversation is kept apart (a one-shot `deck send`'s): a start never comes back to it.
        self.apart: set[str] = set()
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self.writer = Writer(store, self.interval, on_error=self._failed_in_thread)
        self._stored: dict[str, _Stored] = {}  # conversation id → what was written of it
        self._conversation_of: dict[str, str] = {}  # message id → the stored conversation it is in
        self._early_titles: dict[str, str | None] = {}  # agent → a title it gave before it had a conversation
        self._early_choices: dict[str, dict[str, Any]] = {}  # agent → what the user chose before its first message
        self._streaming: dict[str, _Streaming] = {}  # message id → a message not done when last updated
        self._dirty: dict[str, _Streaming] = {}  # message id → one of those, streamed into since the last hand-off
        # agent → ids of messages streamed into that the recorder has no streaming copy of (a finished
        # message that a late chunk or a replayed user chunk extends): read back whole, rarely.
        self._unknown: dict[str, set[str]] = {}
        self._updates = 0  # `message:updated` events seen
        self._updated: dict[str, int] = {}  # message id → the number of its last `message:updated`
        self._timer: asyncio.TimerHandle | None = None
        self._snapshot: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- events ----------------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """Called for every event, on the event loop (a chunk costs a dict look-up and a list append)."""
        if type(event) is MessageDelta:  # the hot path: one more chunk of the part that streamed last
            streaming = self._streaming.get(event.message_id)
            text = event.text
            if (
                streaming is not None
                and event.index == streaming.tail_index
                and event.kind == streaming.tail_kind
                and text is not None
            ):
                streaming.tail.append(text)  # its message is dirty already, and the timer set
                streaming.loose += 1
                if streaming.loose == JOIN_EVERY and streaming.join_loose() >= HAND_OFF_SIZE:
                    self._hand_off()  # before the interval is over: the writer gets it in pieces
                    self.writer.write_soon()
                return
        if self.closed:
            return
        if isinstance(event, MessageDelta):
            mid = event.message_id
            streaming = self._streaming.get(mid)
            if streaming is not None:
                streaming.add(event)
                self._dirty[mid] = streaming
            else:
                self._unknown.setdefault(event.agent, set()).add(mid)
            if self._timer is None:
                self._timer = self._loop.call_later(self.interval, self._flush_due)
        elif isinstance(event, MessageUpdated):
            mid = event.message["id"]  # the core's message: always an id
            self._updates += 1
            self._updated[mid] = self._updates
            unknown = self._unknown.get(event.agent)
            if unknown is not None:
                unknown.discard(mid)
            self._put(event.agent, event.message)
        elif isinstance(event, UsageChanged):
            self._usage(event)
        elif isinstance(event, ConversationChanged):
            if event.field == "title":
                self._agent_title(event.agent, event.value)
            elif event.field == "choices" and isinstance(event.value, dict):
                cid = self.current.get(event.agent)
                if cid is None:
                    self._early_choices[event.agent] = event.value  # kept with its first message
                else:
                    self.writer.set_choices(cid, event.value)
        elif isinstance(event, SubagentChanged):
            children = self.deck.conversation_of(event.agent).children.by_id
            self.writer.set_children(self._conversation(event.agent), children)
        elif isinstance(event, AgentStateChanged):
            if event.state == "ready":  # a new session serves the conversation
                self._sync_session(event.agent)
        elif isinstance(event, ConfigChanged):
            key = config_key(event.path)
            if key != self.config:  # another config file: its agents' conversations are new ones
                self.config = key
                self.current.clear()
                self.apart.clear()
                self._early_titles.clear()
                self._early_choices.clear()

    # -- conversations ---------------------------------------------------------------------------

    def _conversation(self, agent: str) -> str:
        """The agent's current stored conversation, made now if it has none."""
        cid = self.current.get(agent)
        if cid is None:
            stored = _Stored(self._session_of(agent), agent_title=self._early_titles.pop(agent, None))
            cid = self.writer.new_conversation(self.config, agent, stored.session_id, stored.title)
            self.current[agent] = cid
            self._stored[cid] = stored
            if agent not in self.apart:
                self.writer.set_current(self.config, agent, cid)
            else:  # a later start must not take it for the agent's latest conversation either
                self.writer.fresh_unless_current(self.config, agent)
            choices = self._early_choices.pop(agent, None)
            if choices is not None:
                self.writer.set_choices(cid, choices)
        return cid

    def _put(self, agent: str, message: dict[str, Any]) -> None:
        mid = message.get("id")
        if not isinstance(mid, str) or not mid:
            return
        cid = self._conversation_of.get(mid)
        if cid is None:
            cid = self._conversation_of[mid] = self._conversation(agent)
        streaming = self._streaming.pop(mid, None)
        streamed = None
        if streaming is not None and message.get("done", True):
            self.writer.append(cid, mid, streaming.take())  # the last chunks: the finished version ends with them
            streamed = streaming.streamed(message)
        self._dirty.pop(mid, None)  # what streamed before this whole version is in it
        if streamed:
            self.writer.finish(cid, message, streamed)
        else:
            self.writer.update(cid, message)
        if not message.get("done", True):
            self._streaming[mid] = _Streaming(cid, message)  # its chunks are followed from here
        stored = self._stored.get(cid)
        titles = stored is not None and (stored.user_title is None or stored.titled_by == mid)
        if stored is not None and titles and message.get("role") == "user":
            old = stored.title
            stored.user_title = title_of(message)
            stored.titled_by = mid if stored.user_title is not None else None
            if stored.title != old:
                self.writer.set_title(cid, stored.title)

    def made_current(self, agent: str, conversation_id: str | None, apart: bool = False) -> None:
        """The user made `conversation_id` `agent`'s current conversation (None: a fresh one, stored at
        its first message), the one a later start comes back to, unless it is kept `apart`."""
        if conversation_id is None:
            self.current.pop(agent, None)
        else:
            self.current[agent] = conversation_id
        if apart:
            self.apart.add(agent)
            return
        self.apart.discard(agent)
        self.writer.set_current(self.config, agent, conversation_id)

    def continue_conversation(self, agent: str, stored: dict[str, Any]) -> None:
        """The agent's conversation is `stored` again (restored at start): its new messages go on in it.

        Its title stays as stored until the agent names the session, or drops the name it gave
        (the first user text titles it again); message ids are unique across runs, so the new
        messages are added to it and none replaces a stored one."""
        cid = stored["id"]
        self.current[agent] = cid
        session_id, title = stored.get("sessionId"), stored.get("title") or None
        session_id = session_id if isinstance(session_id, str) else None
        first = _first_user_message(stored.get("messages"))
        user_title = title_of(first) if first is not None else None
        if first is None or user_title is None:  # no user text to fall back on: the stored title it is
            self._stored[cid] = _Stored(session_id, user_title=title)
        else:  # a stored title that is not the first user text is the agent's
            agent_title = title if title != user_title else None
            self._stored[cid] = _Stored(session_id, user_title, agent_title, titled_by=first.get("id"))

    def start_conversation(self, agent: str, session_id: str | None) -> str:
        """A new stored conversation for the agent's own session `session_id` (one it kept, opened
        in deck), made the agent's current one: its replayed messages go there."""
        stored = _Stored(session_id)
        cid = self.writer.new_conversation(self.config, agent, session_id)
        self.made_current(agent, cid)
        self._stored[cid] = stored
        self._early_titles.pop(agent, None)
        return cid

    def _agent_title(self, agent: str, title: Any) -> None:
        title = one_line_title(title) if isinstance(title, str) else None
        cid = self.current.get(agent)
        if cid is None:
            self._early_titles[agent] = title
            return
        stored = self._stored.setdefault(cid, _Stored())
        old = stored.title
        stored.agent_title = title  # None: the agent dropped its title, the first user text is back
        if stored.title != old:
            self.writer.set_title(cid, stored.title)

    def _usage(self, event: UsageChanged) -> None:
        """The conversation keeps what its session reported last (so a resumed session's cost is not
        counted again), and the day's spending what it added."""
        cid = self.current.get(event.agent)
        if cid is not None:
            self.writer.set_usage(cid, event.usage)
        spent = event.spent
        if spent is not None:
            self.writer.spend(self.deck.spending.clock(), self.config, event.agent, spent["currency"], spent["amount"])
        if event.tokens:
            self.writer.spend(self.deck.spending.clock(), self.config, event.agent, self.deck.spending.TOKENS, event.tokens)

    def _sync_session(self, agent: str) -> None:
        cid = self.current.get(agent)
        if cid is None:
            return  # the conversation, when it starts, reads the session then
        session_id = self._session_of(agent)
        stored = self._stored.setdefault(cid, _Stored())
        if session_id is not None and session_id != stored.session_id:
            stored.session_id = session_id
            self.writer.set_session(cid, session_id)

    def _session_of(self, agent: str) -> str | None:
        """The ACP session serving the agent's conversation, if it runs."""
        session_id = getattr(self.deck.agents.get(agent), "session_id", None)
        return session_id if isinstance(session_id, str) else None

    # -- streamed messages -----------------------------------------------------------------------

    def _flush_due(self) -> None:
        """An interval after a chunk: hand what streamed since to the writer, and have it written now."""
        self._timer = None
        if self.closed:
            return
        self._hand_off()
        if self._unknown and (self._snapshot is None or self._snapshot.done()):
            self._snapshot = self._spawn(self._read_unknown(), "history: streamed messages")
        elif self._unknown:  # the last read still runs: its turn comes again
            self._timer = self._loop.call_later(self.interval, self._flush_due)
        self.writer.write_soon()

    def _hand_off(self) -> None:
        """Each dirty message's new chunks to the writer (joined per part); the recorder keeps none of them."""
        dirty, self._dirty = self._dirty, {}
        for mid, streaming in dirty.items():
            self.writer.append(streaming.conversation, mid, streaming.take())

    async def _read_unknown(self) -> None:
        """Read the messages it follows no chunks of back whole, through the public service, and store them."""
        unknown, self._unknown = self._unknown, {}
        for agent, ids in unknown.items():
            if not ids:
                continue
            seen = self._updates
            try:
                conversation = await self.deck.call("ChatService.Conversation", {"agent": agent})
            except ServiceError:
                continue  # the agent is gone from the config
            for message in conversation.get("messages", ()):
                mid = message.get("id")
                # A whole version that came while the call ran is newer than this one: it stays.
                if mid in ids and self._updated.get(mid, 0) <= seen:
                    self._put(agent, message)
        self.writer.write_soon()

    # -- problems --------------------------------------------------------------------------------

    def _failed_in_thread(self, error: HistoryUnavailable) -> None:
        """The writer's thread: the store went from working to failing."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: deck is gone
            self._loop.call_soon_threadsafe(self._failed, error)

    def _failed(self, error: HistoryUnavailable) -> None:
        reason = f"cannot write the history, will try again: {error.reason}"
        log.warning("%s", reason)
        self.deck.emit(PluginError("history", "deck_event", reason))

    # -- the end ---------------------------------------------------------------------------------

    def prune(self, keep: float) -> None:
        """Delete, in a worker thread, this config's conversations not updated for `keep` seconds (0: keep them all)."""
        if keep > 0:
            self._spawn(self._prune(keep), "history: prune")

    async def _prune(self, keep: float) -> None:
        try:
            pruned = await asyncio.to_thread(self.store.prune, self.config, keep)
        except HistoryUnavailable as e:
            log.warning("history: old conversations not pruned: %s", e.reason)
        else:
            if pruned:
                log.info("history: pruned %d conversation%s not updated for %gs", pruned, "" if pruned == 1 else "s", keep)

    async def close(self) -> None:
        """Write what is left (the streamed messages' last state too), then close the writer and the store."""
        if self.closed:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._read_unknown()
        self._hand_off()
        self.closed = True
        self._streaming.clear()  # nothing more is followed
        try:
            await asyncio.to_thread(self.writer.close)
        except HistoryUnavailable as e:
            log.warning("history: the last changes are not written: %s", e.reason)
        await asyncio.to_thread(self.store.close)

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = self.deck.spawn(coro, name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


async def report_when_shown(deck: Deck, hook: str, reason: str) -> None:
    """Say `reason` once, as a `plugin:error` event and a log warning, when frontends can show it.

    At start the frontend subscribes to events only once the startup hooks are done: this waits
    for it (FRONTEND_WAIT at most, for a deck that runs none) and lets its first step run.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FRONTEND_WAIT
    while getattr(deck, "frontend", None) is None and loop.time() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)
    log.warning("%s", reason)
    deck.emit(PluginError("history", hook, reason))
