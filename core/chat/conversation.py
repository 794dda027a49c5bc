"""One agent's conversation: messages and parts, and ACP `session/update` → parts and events."""

from __future__ import annotations

import itertools
import logging
import math
import re
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deck.acp.updates import as_string, block_text, choice, dicts, tool_id, tool_part
from deck.chat.children import CHILD_UPDATES, ID_MAX, Child, Children
from deck.chat.spending import DIGITS, TOKENS, Bill, Money, money, tokens_of
from deck.config.models import CONVERSATION_MAX, MESSAGE_MAX
from deck.events import (
    ConversationChanged,
    Event,
    MessageDelta,
    MessageUpdated,
    Notice,
    SessionUpdate,
    TerminalExited,
    TerminalOutput,
    UsageChanged,
    now_iso,
    text_delta,
)

log = logging.getLogger(__name__)

_ids = itertools.count(1)
#: Part of every id this process makes: messages stored in the history and continued in a later
#: run never share an id with the new ones (a counter alone starts again at 1 in each process).
_RUN = uuid.uuid4().hex[:8]

PLAN_PRIORITIES = frozenset({"high", "medium", "low"})
PLAN_STATUSES = frozenset({"pending", "in_progress", "completed"})
#: A command's live output kept for the tool part that embeds its terminal: the newest characters.
TERMINAL_TAIL = 16 * 1024
#: Terminals whose output a conversation keeps at once; the oldest go first.
TERMINALS_KEPT = 64
#: The largest exit code of a command: ACP's `TerminalExitStatus.exitCode` is a uint32.
EXIT_CODE_MAX = 2**32 - 1
#: The longest signal name kept from an adapter's `_meta.terminal_exit` ("SIGTERM" is 7).
SIGNAL_MAX = 64
#: Past `[limits] messageSize` (MESSAGE_MAX) a message keeps only its last TAIL_SHARE of that
#: much more, and says how much was cut between. Past `[limits] conversationSize`
#: (CONVERSATION_MAX) the oldest messages (but the first) are let go, down to three quarters of
#: it; the history keeps them all.
TAIL_SHARE = 8
#: An agent's notice (`notice` session update): its severities, and the characters kept of its title and of its description.
NOTICE_SEVERITIES = frozenset({"info", "warning", "error"})
NOTICE_TITLE_MAX = 500
NOTICE_TEXT_MAX = 4000
#: What an open enumeration's value deck does not know may be (ACP: kept, shown without a meaning
#: read into it): a word, `_`-prefixed for an implementation's own.
OPAQUE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,39}")


def opaque(value: Any, default: str) -> str:
    """`value` of an open enumeration (a notice's severity, a compaction's status) as the agent gave
    it, when it is a word (else `default`): one deck does not know is kept, never taken for another."""
    return value if isinstance(value, str) and OPAQUE.fullmatch(value) else default
#: Messages between sessions (`session_message`) still open to chunks; past it the oldest takes none.
MAX_BETWEEN = 1_000
#: What a tool call's list item (a diff, a location, a terminal) or a plan entry counts beyond its text.
ITEM_SIZE = 64


@dataclass(frozen=True, slots=True)
class Caps:
    """How much of an agent's output a conversation keeps: a message's and the whole's bytes."""

    message: int = MESSAGE_MAX
    conversation: int = CONVERSATION_MAX


def new_id(prefix: str) -> str:
    """`msg-1a2b3c4d-7`: unique within the process (the counter) and across runs (the run's prefix)."""
    return f"{prefix}-{_RUN}-{next(_ids)}"


#: Streamed chunks a text part keeps apart before it joins them into one block: a chunk costs a
#: list append, and 200,000 of them hold about their text, not 200,000 string objects.
JOIN_EVERY = 2048
#: Blocks a text part keeps apart before it joins them into one (1 MiB of 32-character chunks): a
#: long answer is then held in a few large strings, which the allocator maps apart from its heap,
#: rather than in a hundred blocks that pin the memory freed around them there (measured: the
#: RSS of a 200,000-chunk answer 5 MB lower).
MERGE_EVERY = 16


class TextPart:
    """A text or thought part; streamed chunks are kept in a list, joined in blocks as they come
    (JOIN_EVERY), the blocks joined in turn (MERGE_EVERY), and all wholly when read."""

    __slots__ = ("type", "_chunks", "_loose", "_blocks")

    def __init__(self, type: str, text: str = "") -> None:
        self.type = type
        self._chunks = [text] if text else []
        self._loose = 0  # chunks appended since the last block was joined
        self._blocks = 0  # blocks joined since they were last merged

    def append(self, text: str) -> None:
        self._chunks.append(text)
        self._loose += 1
        if self._loose >= JOIN_EVERY:
            self._join_loose()

    def _join_loose(self) -> None:
        chunks = self._chunks
        chunks[-JOIN_EVERY:] = ["".join(chunks[-JOIN_EVERY:])]
        self._loose = 0
        self._blocks += 1
        if self._blocks >= MERGE_EVERY:
            chunks[-MERGE_EVERY:] = ["".join(chunks[-MERGE_EVERY:])]
            self._blocks = 0

    @property
    def text(self) -> str:
        if len(self._chunks) > 1:
            self._chunks[:] = ["".join(self._chunks)]
            self._loose = self._blocks = 0
        return self._chunks[0] if self._chunks else ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "text": self.text}


class DictPart:
    """A tool or plan part, kept in its wire form."""

    __slots__ = ("type", "data")

    def __init__(self, data: dict[str, Any]) -> None:
        self.type = data["type"]
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        return self.data


Part = TextPart | DictPart


def text_size(text: str) -> int:
    """`text`'s size in UTF-8 bytes (an ASCII string's length: known without reading it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def shown_size(size: int) -> str:
    """1536 → "1.5 KiB", 8388608 → "8 MiB": a size for reading (`config.format_size` writes one exactly)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} bytes"


class _Cut:
    """What a message past its cap still keeps: the newest text chunks, up to `limit` bytes, and
    how many bytes went (text, thoughts and tool calls that came past the cap)."""

    __slots__ = ("chunks", "size", "cap", "limit", "dropped")

    def __init__(self, cap: int) -> None:
        self.chunks: deque[tuple[str, int]] = deque()
        self.size = 0
        self.cap = cap  # the message's
        self.limit = max(cap // TAIL_SHARE, 1)
        self.dropped = 0

    def add(self, text: str, size: int) -> None:
        if size > self.limit:  # one chunk bigger than the whole tail: its end only
            kept = text[-self.limit :]
            self.dropped += size - text_size(kept)
            text, size = kept, text_size(kept)
        self.chunks.append((text, size))
        self.size += size
        while self.size > self.limit:
            _, gone = self.chunks.popleft()
            self.size -= gone
            self.dropped += gone

    def part(self) -> TextPart:
        """The text part that ends the message: a note of what was cut, then the tail kept."""
        note = (
            f"\n\n[… deck cut {shown_size(self.dropped)} of this message here: it keeps the first"
            f" {shown_size(self.cap)} and the last {shown_size(self.limit)} …]\n\n"
        )
        return TextPart("text", note + "".join(text for text, _ in self.chunks))


def part_from_dict(data: dict[str, Any]) -> Part:
    """A part from its `to_dict` form (as the history keeps it)."""
    if data.get("type") in ("text", "thought"):
        return TextPart(data["type"], as_string(data.get("text")))
    return DictPart(dict(data))


class Message:
    __slots__ = (
        "id", "agent", "created_at", "role", "parts", "done", "queued", "stop_reason",
        "error", "code", "level", "duration_ms", "usage", "started", "text_for_prompt", "size", "cut",
        "session", "sender", "recipient",
    )  # fmt: skip

    def __init__(self, agent: str, role: str, *, done: bool = True, queued: bool = False) -> None:
        self.id = new_id("msg")
        self.agent = agent
        self.created_at = now_iso()
        self.role = role
        self.parts: list[Part] = []
        self.done = done
        self.queued = queued
        self.stop_reason: str | None = None
        self.error: str | None = None
        self.code: str | None = None
        #: A notice's severity (info, warning, error): set on a system message of code "notice".
        self.level: str | None = None
        self.duration_ms: int | None = None
        self.usage: dict[str, Any] | None = None
        self.started = time.monotonic()
        self.text_for_prompt = ""
        #: The bytes its parts hold (kept by the conversation as they change).
        self.size = 0
        #: Set once the message passed its cap: what it keeps of its end.
        self.cut: _Cut | None = None
        #: The subagent session whose conversation it is of (None: the agent's own).
        self.session: str | None = None
        #: A message between sessions (ACP `session_message`): the sending and the receiving session.
        self.sender: str | None = None
        self.recipient: str | None = None

    def to_dict(self) -> dict[str, Any]:
        parts = [p.to_dict() for p in self.parts]
        if self.cut is not None:  # still growing past its cap: its end as it is now
            parts.append(self.cut.part().to_dict())
        out: dict[str, Any] = {
            "id": self.id,
            "agent": self.agent,
            "createdAt": self.created_at,
            "role": self.role,
            "parts": parts,
            "done": self.done,
            "queued": self.queued,
        }
        for key, value in (
            ("stopReason", self.stop_reason),
            ("error", self.error),
            ("code", self.code),
            ("level", self.level),
            ("durationMs", self.duration_ms),
            ("usage", self.usage),
            ("session", self.session),
            ("sender", self.sender),
            ("recipient", self.recipient),
        ):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """A message from its `to_dict` form: its id, time and parts as they were."""
        message = cls(as_string(data.get("agent")), as_string(data.get("role")), done=bool(data.get("done", True)))
        message.id = as_string(data.get("id")) or message.id
        message.created_at = as_string(data.get("createdAt")) or message.created_at
        message.parts = [part_from_dict(p) for p in dicts(data.get("parts")) if isinstance(p.get("type"), str)]
        message.queued = bool(data.get("queued", False))
        message.stop_reason = data.get("stopReason")
        message.error = data.get("error")
        message.code = data.get("code")
        message.level = choice(data.get("level"), NOTICE_SEVERITIES, "info") if "level" in data else None
        message.duration_ms = data.get("durationMs")
        message.usage = data.get("usage")
        for key in ("session", "sender", "recipient"):
            setattr(message, key, as_string(data.get(key))[:ID_MAX] or None)
        message.size = sum(part_size(p.to_dict()) for p in message.parts)
        return message

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart) and p.type == "text")


class Conversation:
    """Messages of one agent plus what its session reports: usage, commands, modes, options."""

    def __init__(
        self,
        agent: str,
        emit: Callable[[Event], None],
        permissions: Callable[[], list[dict[str, Any]]] = list,
        caps: Caps = Caps(),
        spend: Callable[[Money], None] | None = None,
    ) -> None:
        self.agent = agent
        self.emit = emit
        #: Told what each usage report adds to the session's cost (the deck's `Spending`).
        self.spend: Callable[[Money], None] = spend or _nothing
        self.bill = Bill()
        #: What the conversation's earlier sessions cost, in the currency they reported (its cost is
        #: that and its current session's: `usage.cost`, the session's alone in `usage.sessionCost`).
        self.earlier: Money | None = None
        self.caps = caps
        self._message_max, self._size_max = caps.message, caps.conversation  # read once per chunk
        #: The bytes its messages hold; `cut` counts the messages let go to keep it under its cap.
        self.size = 0
        self.cut = {"messages": 0, "bytes": 0}
        #: The permission requests of its session waiting for an answer (kept by the deck's pending requests).
        self.permissions = permissions
        self.messages: list[Message] = []
        self.by_id: dict[str, Message] = {}
        self.queue: deque[Message] = deque()
        self.busy = False
        self.usage: dict[str, Any] = _no_usage()
        self.commands: list[dict[str, Any]] = []
        self.modes: dict[str, Any] | None = None
        self.config_options: list[dict[str, Any]] = []
        #: What the user chose for this conversation (`{"options": {configId: value}, "mode": modeId}`),
        #: kept in the history and set again on the agent's next session (`Conversations.session_opened`).
        self.choices: dict[str, Any] = {}
        self.title: str | None = None
        self.current: Message | None = None  # the agent message receiving updates
        self._tools: dict[str, tuple[Message, int]] = {}
        self._acp_messages: dict[str, Message] = {}  # ACP messageId → the message its chunks land in
        #: terminal id → (its output's tail, its exit status): kept before any tool part embeds it too.
        self._terminals: dict[str, list[Any]] = {}
        self._terminal_parts: dict[str, tuple[Message, int]] = {}  # terminal id → the tool part showing it
        self._compactions: dict[str, tuple[Message, int]] = {}  # compaction id → its part
        #: The subagent sessions its agent announced; `_session` is the one whose update is applied now.
        self.children = Children(agent)
        self._session: str | None = None
        self._between: dict[str, Message] = {}  # ACP messageId of a message between sessions → it
        self.session_id: str | None = None
        self.last_update = 0.0  # time.monotonic() of the last session/update

    # -- messages -------------------------------------------------------------------------

    @property
    def queued_count(self) -> int:
        """User messages waiting for the current answer (not the one about to be sent)."""
        return sum(1 for m in self.queue if m.queued)

    def add(self, message: Message) -> Message:
        self.messages.append(message)
        self.by_id[message.id] = message
        self.size += message.size
        self.updated(message)
        if self.size > self.caps.conversation:
            self._trim()
        return message

    def updated(self, message: Message) -> None:
        self.emit(MessageUpdated(self.agent, message.to_dict()))

    def _new(self, role: str) -> Message:
        """A message of the session whose update is applied (the agent's own, or a child's)."""
        message = Message(self.agent, role)
        message.session = self._session
        return message

    def _delta(self, message: Message, index: int, kind: str, **change: Any) -> None:
        self.emit(MessageDelta(self.agent, message.id, index, kind, session=message.session, **change))

    def add_user(self, text: str, queued: bool) -> Message:
        message = Message(self.agent, "user", queued=queued)
        message.parts.append(TextPart("text", text))
        message.size = text_size(text)
        message.text_for_prompt = text
        return self.add(message)

    def replace_text(self, message: Message, text: str) -> None:
        """A queued user message's text, edited before it is sent."""
        self.size += text_size(text) - message.size
        message.parts[:] = [TextPart("text", text)]
        message.size = text_size(text)
        message.text_for_prompt = text
        self.updated(message)

    def add_system(self, code: str, error: str | None = None, text: str = "") -> Message:
        message = Message(self.agent, "system")
        message.code = code
        message.error = error
        if text:
            message.parts.append(TextPart("text", text))
            message.size = text_size(text)
        return self.add(message)

    def begin_reply(self) -> Message:
        self.current = self.add(Message(self.agent, "agent", done=False))
        return self.current

    def finish(self, message: Message, stop_reason: str | None, error: str | None = None) -> None:
        if (self.children or self._between) and message.session is None and message.sender is message.recipient is None:
            self._finish_children()  # the agent's own answer: what its subagents streamed ends with it
        if message.cut is not None:
            self._seal(message)
        message.done = True
        message.stop_reason = stop_reason
        message.error = error
        message.duration_ms = int((time.monotonic() - message.started) * 1000)
        self.updated(message)

    def snapshot(self) -> dict[str, Any]:
        return {
            "messages": [m.to_dict() for m in self.messages],
            "busy": self.busy,
            "queued": self.queued_count,
            "usage": self.usage,
            "commands": self.commands,
            "permissions": self.permissions(),
            "modes": self.modes,
            "configOptions": self.config_options,
            "title": self.title,
            "cut": self.cut,
            "children": self.children.wire(),
        }

    def restore(
        self,
        messages: list[dict[str, Any]],
        session_id: str | None,
        title: str | None,
        cut: dict[str, int] | None = None,
        usage: dict[str, Any] | None = None,
        choices: dict[str, Any] | None = None,
        children: list[dict[str, Any]] | None = None,
    ) -> list[Message]:
        """Take a conversation kept from an earlier run (messages in their `to_dict` form), before
        the agent runs: `session_id` is the session its next start resumes, or loads; `cut` counts
        the messages before these that were not read (`{messages, bytes}`); `usage` is what the
        session last reported, so that its cost, reported again as it resumes, is not counted twice.

        Nothing is emitted for the messages (a frontend reads them with the snapshot), except one
        `message:updated` for each message the earlier run left unfinished: it is finished now,
        as no answer can come to it any more. Those are returned."""
        self.messages = [Message.from_dict(m) for m in messages]
        self.by_id = {m.id: m for m in self.messages}
        self.size = sum(m.size for m in self.messages)
        self.cut = dict(cut) if cut else {"messages": 0, "bytes": 0}
        self.session_id, self.title = session_id, title
        self.choices = _choices(choices)
        self.children.restore(children)  # `children`: the subagents its messages name, as `Children.wire` gave them
        self._between.clear()
        self.usage = {"used": _count(usage.get("used")), "size": _count(usage.get("size"))} if usage else _no_usage()
        cost = money(usage.get("cost")) if usage else None
        session_cost = (money(usage.get("sessionCost")) if usage else None) or cost
        self.earlier = _less(cost, session_cost)
        if cost is not None:
            self.usage["cost"] = cost
        if self.earlier is not None and session_cost is not None:
            self.usage["sessionCost"] = session_cost
        if usage and (tokens := _count(usage.get("tokens"))) > 0:
            self.usage["tokens"] = tokens
        self.bill = Bill(session_cost)
        self.queue.clear()
        self.current = None
        unfinished = [m for m in self.messages if not m.done or m.queued]
        for message in unfinished:
            message.done, message.queued = True, False
            if message.role == "agent" and message.stop_reason is None:
                message.error = message.error or "deck stopped before this answer ended"
            self.updated(message)
        return unfinished

    def session_started(self, session_id: str, result: dict[str, Any], fresh: bool = False) -> None:
        """A new ACP session serves this conversation (first start, restart, after a crash); `fresh`:
        a new one (`session/new`), whatever its id, rather than the earlier one resumed or loaded."""
        if fresh or session_id != self.session_id:  # not the one resumed: its costs count from nothing
            self.bill = Bill()
            self.earlier = money(self.usage.get("cost"))  # what the conversation cost so far stays its
            self.usage = {k: v for k, v in self.usage.items() if k != "sessionCost"}
        self.session_id = session_id
        self._tools.clear()
        self._acp_messages.clear()
        self._compactions.clear()
        self.current = None  # the old session's last message receives nothing more
        modes = result.get("modes")
        if modes is not None or self.modes is not None:
            self._set("modes", _modes(modes))
        options = result.get("configOptions")
        if options is not None or self.config_options:
            self._set("config_options", _options(self.agent, options))

    def chose(self, *, option: str | None = None, mode: str | None = None, value: Any = None) -> None:
        """The user set config option `option` to `value`, or the session mode `mode`: kept (and said,
        as `conversation:changed` of `choices`) to be set again on the agent's next session."""
        options: dict[str, Any] = dict(self.choices.get("options") or {})
        if option is not None:
            options[option] = value
        self._set("choices", {"options": options, "mode": mode if mode is not None else self.choices.get("mode")})

    def _set(self, attr: str, value: Any) -> None:
        setattr(self, attr, value)
        key = {"config_options": "configOptions"}.get(attr, attr)
        self.emit(ConversationChanged(self.agent, key, value))

    # -- caps: what an agent's output may take -----------------------------------------------------

    def _past_cap(self, message: Message, kind: str, text: str, size: int) -> None:
        """Text that would take `message` past its cap: the newest answer text is kept, the rest counted."""
        cut = message.cut
        if cut is None:
            cut = message.cut = _Cut(self.caps.message)
            self._resized(message, 0, cut.limit)  # what its end may take from here
            log.warning("%s: message %s passed %s: only its end is kept from here", self.agent, message.id,
                        shown_size(self.caps.message))  # fmt: skip
        if kind == "text":
            cut.add(text, size)
        else:
            cut.dropped += size

    def _seal(self, message: Message) -> None:
        """The message past its cap ends: what it kept of its end becomes its last part."""
        cut = message.cut
        assert cut is not None
        message.cut = None
        part = cut.part()
        message.parts.append(part)
        self._resized(message, cut.limit, text_size(part.text))
        self._delta(message, len(message.parts) - 1, "text", text=part.text)

    def _resized(self, message: Message, old: int, new: int) -> None:
        message.size += new - old
        self.size += new - old
        if self.size > self.caps.conversation:
            self._trim()

    def _fits(self, message: Message, part: dict[str, Any], old: int = 0) -> dict[str, Any] | None:
        """`part` cut to what `message` has room for (`old`: the size of the part it replaces); None
        when `part` is a new one and the message has no room left: it is counted as cut."""
        room = self.caps.message - message.size + old
        if not old and (message.cut is not None or room < ITEM_SIZE * 4):
            self._past_cap(message, part["type"], "", part_size(part))
            return None
        return fit_part(part, max(room, ITEM_SIZE * 4))

    def _trim(self) -> None:
        """Let go of the oldest messages but the first, down to three quarters of the cap: never
        the one receiving updates, nor one waiting in the queue, nor the last."""
        target = self.caps.conversation * 3 // 4
        end, gone, last = 1, 0, len(self.messages) - 1
        while end < last and self.size - gone > target:
            message = self.messages[end]
            if message is self.current or message.queued:
                break
            gone += message.size
            end += 1
        if end > 1:
            log.warning("%s: the conversation passed %s: earlier messages let go; the history keeps them",
                        self.agent, shown_size(self.caps.conversation))  # fmt: skip
            self._let_go(end)

    def _let_go(self, end: int) -> None:
        """The messages before `end` but the first leave memory (the history keeps them): counted in
        `cut`, and said as `conversation:changed` of `cut` with their ids."""
        removed = self.messages[1:end]
        if not removed:
            return
        del self.messages[1:end]
        for message in removed:
            del self.by_id[message.id]
        gone = sum(m.size for m in removed)
        self.size -= gone
        gone_ids = {m.id for m in removed}  # nothing more lands in them, the children's parts included
        helds: list[dict[str, Any]] = [self._tools, self._acp_messages, self._terminal_parts, self._compactions, self._between]
        for child in self.children.by_id.values():
            helds += [child.tools, child.compactions, child.acp_messages]
            if child.current is not None and child.current.id in gone_ids:
                child.current = None
        for held in helds:
            for key in [k for k, v in held.items() if (v[0] if isinstance(v, tuple) else v).id in gone_ids]:
                del held[key]
        self.cut = {"messages": self.cut["messages"] + len(removed), "bytes": self.cut["bytes"] + gone}
        log.info("%s: %d earlier message(s) let go (%s)", self.agent, len(removed), shown_size(gone))
        value = {**self.cut, "messageIds": [m.id for m in removed]}
        self.emit(ConversationChanged(self.agent, "cut", value))

    # -- subagents: child sessions whose conversations nest in this one ----------------------------

    def apply_child_update(self, session: str, update: dict[str, Any]) -> None:
        """One `session/update` of subagent session `session`, folded in as the agent's own are, into
        messages marked with the child's session; kinds a child's conversation has no place for
        (usage, commands…) are passed on raw, marked with it too."""
        child = self.children.by_id.get(session)
        if child is None:
            log.info("%s: an update of subagent %r, never announced, skipped", self.agent, session[:100])
            return
        kind = update.get("sessionUpdate")
        self.last_update = time.monotonic()
        if kind == "agent_message_chunk" and child.current is not None and "messageId" not in update:
            self._chunk(update, "text", child.current)  # the hot path of a child's: nothing to swap
            return
        if not isinstance(kind, str) or kind not in CHILD_UPDATES:  # a list or an object is no kind, and no key
            self.emit(SessionUpdate(self.agent, update, session))
            return
        saved = self.current, self._tools, self._compactions, self._acp_messages, self._session
        self.current, self._tools, self._compactions, self._acp_messages, self._session = (
            child.current, child.tools, child.compactions, child.acp_messages, session
        )  # fmt: skip
        try:  # a child's compaction is a part of its conversation, by an id of its session's
            self._handlers[kind](self, update)
        finally:
            child.current = self.current
            self.current, self._tools, self._compactions, self._acp_messages, self._session = saved

    def child_message_id(self, session: str) -> str:
        """The child's message receiving its updates (what a request of the child's shows beside)."""
        child = self.children.get(session)
        return child.current.id if child is not None and child.current is not None else ""

    def _subagent(self, update: dict[str, Any]) -> None:
        """`subagent_update` on this conversation's session or a child's: the child made or patched;
        an idle one's message is finished."""
        if update.get("sessionId") == self.session_id:
            log.warning("%s: subagent_update names the conversation's own session, skipped", self.agent)
            return
        child = self.children.announce(self._session or self.session_id or "", update)
        if child is None:
            return
        if child.state == "idle":
            self._finish_child(child)  # its work is over: its next words start a message of their own
        self.emit(child.changed(self.agent))

    def _finish_child(self, child: Child) -> None:
        message, child.current = child.current, None
        if message is not None and not message.done:
            self.finish(message, child.stop_reason)

    def _finish_children(self) -> None:
        """The agent's turn ended: what its children and the messages between sessions were streaming
        is finished (their next words start messages of their own)."""
        for child in self.children.by_id.values():
            self._finish_child(child)
        for message in self._between.values():
            if not message.done:
                self.finish(message, None)

    def _between_message(self, update: dict[str, Any]) -> Message | None:
        """The message between sessions an update names by `messageId` (made when new), its sender
        and recipient set where the update gives them."""
        message_id = as_string(update.get("messageId"))[:ID_MAX]
        if not message_id:
            log.info("%s: a message between sessions without a messageId, skipped", self.agent)
            return None
        key = f"{self._session or ''}\0{message_id}"
        message = self._between.get(key)
        new = message is None
        if message is None:
            if len(self._between) >= MAX_BETWEEN:
                self._between.pop(next(iter(self._between)))  # the oldest takes no more chunks
            message = self._between[key] = self._new("agent")
            message.done = False  # streamed: finished with the agent's turn
        for attr, field in (("sender", "senderSessionId"), ("recipient", "recipientSessionId")):
            value = as_string(update.get(field))[:ID_MAX]
            if value:
                setattr(message, attr, value)
        return self.add(message) if new else message

    def _session_message(self, update: dict[str, Any]) -> None:
        """`session_message`: a message between sessions made or patched; content sent replaces its text."""
        message = self._between_message(update)
        if message is None:
            return
        if "content" in update:
            content = update["content"]
            text = _head("".join(map(block_text, dicts(content))), self.caps.message)
            old = message.size
            message.parts[:] = [TextPart("text", text)] if text else []
            message.size = text_size(text)
            self._resized(message, old, message.size)
        self.updated(message)

    def _session_message_chunk(self, update: dict[str, Any]) -> None:
        """`session_message_chunk`: one more block of a message between sessions."""
        message = self._between_message(update)
        text = block_text(update.get("content"))
        if message is None or not text:
            return
        size = text_size(text)
        if message.cut is not None or message.size + size > self._message_max:
            self._past_cap(message, "text", text, size)
            return
        self._append(message, "text", text, size)

    # -- session/update -------------------------------------------------------------------

    def apply_update(self, update: dict[str, Any]) -> None:
        """Fold one ACP `session/update` into the conversation; unknown kinds pass through raw.

        The update is the agent's, so untrusted: each handler reads its fields through the
        helpers at the end of this module, which drop or default what has the wrong type.
        """
        kind = update.get("sessionUpdate")
        self.last_update = time.monotonic()
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            shown = kind[:80] if isinstance(kind, str) else type(kind).__name__  # junk is neither long nor deep in a log
            log.info("%s: session/update %r passed on raw", self.agent, shown)
            self.emit(SessionUpdate(self.agent, update))
            return
        handler(self, update)

    def _target(self) -> Message:
        if self.current is None:  # updates outside any turn still land somewhere visible
            message = self._new("agent")
            message.done = self._session is None  # a subagent's streams until its work or the turn ends
            self.current = self.add(message)
        return self.current

    def _chunk(self, update: dict[str, Any], kind: str = "text", message: Message | None = None) -> None:
        """agent_message_chunk (and, with `kind`, agent_thought_chunk): text appended to the last part
        (of `message` when given: a subagent's that receives its updates)."""
        text = block_text(update.get("content"))
        if not text:
            return
        if message is None:
            message = self._for_acp_message(update.get("messageId"))
        size = len(text) if text.isascii() else text_size(text)
        if message.cut is not None or message.size + size > self._message_max:
            if message.cut is None:  # the chunk that passes the cap: what fits is the head's end
                head = _fitting(text, self._message_max - message.size)
                if head:
                    self._append(message, kind, head, text_size(head))
                    text, size = text[len(head) :], size - text_size(head)
            self._past_cap(message, kind, text, size)
            return
        self._append(message, kind, text, size)

    def _append(self, message: Message, kind: str, text: str, size: int) -> None:
        """`text` streamed into `message`'s last part of `kind` (or a new one), and sent out."""
        message.size += size
        self.size += size
        if self.size > self._size_max:
            self._trim()
        parts = message.parts
        if parts and parts[-1].type == kind:
            parts[-1].append(text)  # type: ignore[union-attr]
        else:
            parts.append(TextPart(kind, text))
        self.emit(text_delta(self.agent, message.id, len(parts) - 1, kind, text, message.session))

    def _for_acp_message(self, acp_id: Any) -> Message:
        """The message a chunk belongs to: the one its ACP messageId started in, else the current one.

        A late chunk of a cancelled turn that carries its messageId thus never lands in the next turn.
        """
        if not isinstance(acp_id, str) or not acp_id:
            return self.current if self.current is not None else self._target()
        message = self._acp_messages.get(acp_id)
        if message is None:
            message = self._acp_messages[acp_id] = self._target()
        return message

    def _thought_chunk(self, update: dict[str, Any]) -> None:
        self._chunk(update, "thought")

    def _user_chunk(self, update: dict[str, Any]) -> None:
        # Replayed or echoed user text: shown as a user message of its own. A block that is no text
        # (an image, a resource) is a line of its own there, never run into the text around it.
        content = update.get("content")
        text = block_text(content)
        if not text:
            return
        last = self.messages[-1] if self.messages else None
        if last is not None and last.session != self._session:
            last = None  # another session's: never run into
        if not (isinstance(content, dict) and isinstance(content.get("text"), str)):
            text += "\n"
            if last is not None and last.role == "user" and last.parts:
                before = last.parts[-1].to_dict().get("text")
                text = ("\n" if isinstance(before, str) and before and not before.endswith("\n") else "") + text
        size = text_size(text)
        if last is not None and last.role == "user" and last.text_for_prompt == "" and last.parts:
            if last.cut is not None or last.size + size > self.caps.message:
                self._past_cap(last, "text", text, size)
                return
            last.parts[-1].append(text)  # type: ignore[union-attr]
            self._resized(last, 0, size)
            self._delta(last, len(last.parts) - 1, "text", text=text)
            return
        message = self._new("user")
        if size > self.caps.message:
            message.cut = _Cut(self.caps.message)
            message.size = message.cut.limit
            message.cut.add(text, size)
        else:
            message.parts.append(TextPart("text", text))
            message.size = size
        self.add(message)

    def _tool_call(self, update: dict[str, Any]) -> None:
        call_id = tool_id(update)
        known = self._tools.get(call_id)
        if known is not None and known[0] is self.current:
            self._tool_update(update)
            return
        message = self._target()  # an id reused in a later turn starts a new part there
        part = self._fits(message, tool_part(update))
        if part is None:
            return
        message.parts.append(DictPart(part))
        index = len(message.parts) - 1
        self._tools[call_id] = (message, index)
        self._show_terminals(message, index)
        self._resized(message, 0, part_size(message.parts[index].to_dict()))
        self._delta(message, index, "tool", part=message.parts[index].to_dict())
        self._meta_terminal(update)

    def decided(self, tool_call_id: str, decision: str) -> None:
        """The user's answer to a permission request about tool call `tool_call_id` (the option's name,
        or "cancelled"): kept on its tool part as `permission`, for the transcript."""
        found = self._tools.get(tool_call_id)
        if found is None:
            return
        message, index = found
        part = {**message.parts[index].to_dict(), "permission": decision[:200]}
        message.parts[index] = DictPart(part)
        self._delta(message, index, "tool", part=part)

    def _tool_update(self, update: dict[str, Any]) -> None:
        found = self._tools.get(tool_id(update))
        if found is None:
            self._tool_call(update)
            return
        message, index = found
        old = message.parts[index].to_dict()
        old_size = part_size(old)
        part = self._fits(message, tool_part(update, old), old_size)
        assert part is not None  # it replaces a part
        message.parts[index] = DictPart(part)
        self._show_terminals(message, index)
        self._resized(message, old_size, part_size(part))
        self._delta(message, index, "tool", part=part)
        self._meta_terminal(update)

    # -- terminals: the live output of the commands an agent runs ---------------------------------

    def terminal_output(self, terminal_id: str, text: str) -> None:
        """More output of a command: kept (its tail) on the tool part that embeds it, and sent live."""
        kept = self._terminal(terminal_id)
        kept[0] = (kept[0] + text)[-TERMINAL_TAIL:]
        self._update_terminal_part(terminal_id)
        self.emit(TerminalOutput(self.agent, terminal_id, text))

    def terminal_started(self, terminal_id: str) -> None:
        """The agent created a terminal in this conversation's session. An agent that shows a command's
        output itself (fast-agent) embeds it in no tool call: it is shown on the tool call that is
        running then, the last one of the current message, until a tool call embeds it."""
        message = self.current
        if terminal_id in self._terminal_parts or message is None:
            return
        for index in range(len(message.parts) - 1, -1, -1):
            data = message.parts[index].to_dict()
            if data["type"] == "tool" and data.get("status") in ("pending", "in_progress") and not data.get("terminals"):
                entry = {"terminalId": terminal_id, "output": "", "exitStatus": None}
                message.parts[index] = DictPart({**data, "terminals": [entry]})
                self._terminal_parts[terminal_id] = (message, index)
                self._terminal(terminal_id)
                self._delta(message, index, "tool", part=message.parts[index].to_dict())
                return

    def terminal_exited(self, terminal_id: str, status: dict[str, Any]) -> None:
        """The command ended: `status` is ACP's `{exitCode, signal}`."""
        self._terminal(terminal_id)[1] = status
        self._update_terminal_part(terminal_id)
        self.emit(TerminalExited(self.agent, terminal_id, status))

    def _terminal(self, terminal_id: str) -> list[Any]:
        kept = self._terminals.pop(terminal_id, None) or ["", None]
        self._terminals[terminal_id] = kept  # the newest last
        while len(self._terminals) > TERMINALS_KEPT:
            oldest = next(iter(self._terminals))
            del self._terminals[oldest]
            self._terminal_parts.pop(oldest, None)
        return kept

    def _show_terminals(self, message: Message, index: int) -> None:
        """A tool part (new, not sent yet) that embeds terminals shows what they printed so far."""
        part = message.parts[index].to_dict()
        if not part.get("terminals"):
            return
        entries = []
        for entry in part["terminals"]:
            self._terminal_parts[entry["terminalId"]] = (message, index)
            kept = self._terminals.get(entry["terminalId"])
            entries.append({**entry, "output": kept[0], "exitStatus": kept[1]} if kept is not None else entry)
        part["terminals"] = entries  # new entries: the old ones may be in events sent before

    def _update_terminal_part(self, terminal_id: str) -> None:
        """Keep the tool part's copy of the output current: the snapshot shows it, no event needed
        (`terminal:output` says what came). A new dict: the old one went out in events, frontends hold it."""
        found = self._terminal_parts.get(terminal_id)
        if found is None:
            return
        message, index = found
        kept = self._terminals[terminal_id]
        old = message.parts[index].to_dict()
        if not any(e["terminalId"] == terminal_id for e in old.get("terminals") or []):
            return
        entries = [
            {**e, "output": kept[0], "exitStatus": kept[1]} if e["terminalId"] == terminal_id else e
            for e in old.get("terminals") or []
        ]
        message.parts[index] = DictPart({**old, "terminals": entries})

    def _meta_terminal(self, update: dict[str, Any]) -> None:
        """What the Claude Code and Codex adapters stream of the commands they run themselves, in `_meta`:
        `terminal_output {terminal_id, data}` and `terminal_exit {terminal_id, exit_code, signal}`."""
        meta = update.get("_meta")
        if not isinstance(meta, dict):
            return
        output, ended = meta.get("terminal_output"), meta.get("terminal_exit")
        if isinstance(output, dict) and as_string(output.get("terminal_id")) and as_string(output.get("data")):
            self.terminal_output(output["terminal_id"], output["data"])
        if isinstance(ended, dict) and as_string(ended.get("terminal_id")):
            self.terminal_exited(ended["terminal_id"], _exit_status(ended.get("exit_code"), ended.get("signal")))

    def _plan(self, update: dict[str, Any]) -> None:
        message = self._target()
        entries = [
            {
                "content": as_string(e.get("content")),
                "priority": choice(e.get("priority"), PLAN_PRIORITIES, "medium"),
                "status": choice(e.get("status"), PLAN_STATUSES, "pending"),
            }
            for e in dicts(update.get("entries"))
        ]
        old_size = next((part_size(p.to_dict()) for p in message.parts if p.type == "plan"), 0)
        fitted = self._fits(message, {"type": "plan", "entries": entries}, old_size)
        if fitted is None:
            return
        part = DictPart(fitted)
        for index, old in enumerate(message.parts):
            if old.type == "plan":
                message.parts[index] = part
                break
        else:
            message.parts.append(part)
            index = len(message.parts) - 1
        self._resized(message, old_size, part_size(fitted))
        self._delta(message, index, "plan", part=part.data)

    def _commands(self, update: dict[str, Any]) -> None:
        commands = dicts(update.get("availableCommands"))
        named = [c for c in commands if isinstance(c.get("name"), str) and c["name"] and not any(ch.isspace() for ch in c["name"])]
        if len(named) < len(commands):
            log.info("%s: %d command(s) without a name of one word, skipped", self.agent, len(commands) - len(named))
        self._set("commands", named)

    # An agent may offer its modes twice: as `modes` and as a config option of category "mode"
    # (the newer form). It may report a change in one form only; the other follows, so that
    # deck never shows two current modes.

    def _mode(self, update: dict[str, Any]) -> None:
        mode_id = update.get("currentModeId")
        if not isinstance(mode_id, str):
            log.info("%s: current_mode_update without a mode id, skipped", self.agent)
            return
        modes = dict(self.modes or {"availableModes": []})
        modes["currentModeId"] = mode_id
        self._set("modes", modes)
        option = _mode_option(self.config_options)
        if option is not None and option.get("currentValue") != mode_id and mode_id in option_values(option):
            followed = {**option, "currentValue": mode_id}
            self._set("config_options", [followed if o is option else o for o in self.config_options])

    def _config_options(self, update: dict[str, Any]) -> None:
        self._set("config_options", _options(self.agent, update.get("configOptions")))
        option = _mode_option(self.config_options)
        value = option.get("currentValue") if option is not None else None
        if self.modes is None or not isinstance(value, str) or value == self.modes.get("currentModeId"):
            return
        if value in [m.get("id") for m in dicts(self.modes.get("availableModes"))]:  # ids may be junk
            self._set("modes", {**self.modes, "currentModeId": value})

    def _notice(self, update: dict[str, Any]) -> None:
        """A notice of the agent's (`{severity, title, description?}`): a system note of code "notice"
        and its severity (an unknown one reads as info), its text the title and the description, cut;
        and a `deck:notice` of source "agent", for whoever shows notices rather than the conversation."""
        title = as_string(update.get("title")).strip()[:NOTICE_TITLE_MAX]
        description = as_string(update.get("description")).strip()[:NOTICE_TEXT_MAX]
        text = "\n".join(t for t in (title, description) if t)
        if not text:
            log.info("%s: a notice with no title, skipped", self.agent)
            return
        level = opaque(update.get("severity"), "info")  # an unknown one kept as it is, shown plainly
        message = self._new("system")
        message.code, message.level = "notice", level
        message.parts.append(TextPart("text", text))
        message.size = text_size(text)
        self.add(message)
        self.emit(Notice("agent", choice(level, NOTICE_SEVERITIES, "info"), text, self.agent))

    # -- context compaction: its status and the summary it keeps ------------------------------------

    def _compaction(self, update: dict[str, Any]) -> None:
        """`compaction_update`: a compaction part made (where the answer stands) or patched: its status,
        and `summary` and `error` where sent (null, or an empty summary, clears them)."""
        found, part = self._compaction_part(update)
        if part is None:
            return
        part["status"] = opaque(update.get("status"), part["status"])  # one deck does not know: kept as said
        if "summary" in update:
            summary = update["summary"]
            part["summary"] = "".join(map(block_text, summary)) if isinstance(summary, list) else ""
        if "error" in update:
            error = update["error"]
            if isinstance(error, str) and error:
                part["error"] = error[:NOTICE_TEXT_MAX]
            else:
                part.pop("error", None)
        self._put_compaction(found, part)
        if part["status"] == "completed" and self._session is None:
            self._drop_before_compaction(part["id"])

    def _drop_before_compaction(self, compaction_id: str) -> None:
        """A compaction is done: the agent works from its summary, so the messages before the one
        holding it (but the first) leave memory, as past the conversation's cap; the history keeps them."""
        found = self._compactions.get(compaction_id)
        if found is not None and found[0] in self.messages:
            self._let_go(self.messages.index(found[0]))

    def _compaction_chunk(self, update: dict[str, Any]) -> None:
        """`compaction_summary_chunk`: one more block of a compaction's summary."""
        found, part = self._compaction_part(update)
        text = block_text(update.get("content"))
        if part is None or not text:
            return
        part["summary"] += text
        self._put_compaction(found, part)

    def _compaction_part(self, update: dict[str, Any]) -> tuple[tuple[Message, int] | None, dict[str, Any] | None]:
        """Where the compaction `update` names is, and a copy of its part (a new one, in progress, when
        it is none yet); (None, None) for an update with no id."""
        compaction_id = as_string(update.get("compactionId"))[:200]
        if not compaction_id:
            log.info("%s: a compaction update without an id, skipped", self.agent)
            return None, None
        found = self._compactions.get(compaction_id)
        if found is None:
            return None, {"type": "compaction", "id": compaction_id, "status": "in_progress", "summary": ""}
        message, index = found
        return found, dict(message.parts[index].to_dict())

    def _put_compaction(self, found: tuple[Message, int] | None, part: dict[str, Any]) -> None:
        if found is None:
            message = self._target()
            fitted = self._fits(message, part)
            if fitted is None:
                return
            message.parts.append(DictPart(fitted))
            index, old_size = len(message.parts) - 1, 0
            self._compactions[part["id"]] = (message, index)
        else:
            message, index = found
            old_size = part_size(message.parts[index].to_dict())
            fitted = self._fits(message, part, old_size)
            assert fitted is not None  # it replaces a part
            message.parts[index] = DictPart(fitted)
        self._resized(message, old_size, part_size(fitted))
        self._delta(message, index, "compaction", part=fitted)

    def _session_info(self, update: dict[str, Any]) -> None:
        title = update.get("title", False)
        if title is None or isinstance(title, str):
            self._set("title", title)

    def _usage(self, update: dict[str, Any]) -> None:
        usage: dict[str, Any] = {"used": _count(update.get("used")), "size": _count(update.get("size"))}
        cost = money(update.get("cost"))
        if cost is None and "cost" not in update:
            cost = self.bill.last  # a report without a cost: the session's cost so far is unchanged
        spent = None
        if cost is not None:
            usage["cost"] = _plus(self.earlier, cost)
            if self.earlier is not None and usage["cost"] is not cost:
                usage["sessionCost"] = cost
            spent = self.bill.spent(cost)
            if spent is not None:
                self.spend(spent)
        elif self.earlier is not None:
            usage["cost"] = self.earlier
        if "tokens" in self.usage:
            usage["tokens"] = self.usage["tokens"]
        self.usage = usage
        self.emit(UsageChanged(self.agent, usage, spent))

    def turn_usage(self, reply: Message, usage: dict[str, Any]) -> None:
        """A prompt response's `usage`: kept on its answer as sent, and the tokens it reports added
        to the conversation's (`usage.tokens`) and to the deck's count."""
        reply.usage = usage
        tokens = tokens_of(usage)
        if tokens > 0:
            self.usage = {**self.usage, "tokens": self.usage.get("tokens", 0) + tokens}
            self.spend({"amount": tokens, "currency": TOKENS})
            self.emit(UsageChanged(self.agent, self.usage, None, tokens))

    _handlers: dict[str, Callable[[Conversation, dict[str, Any]], None]] = {
        "agent_message_chunk": _chunk,
        "agent_thought_chunk": _thought_chunk,
        "user_message_chunk": _user_chunk,
        "tool_call": _tool_call,
        "tool_call_update": _tool_update,
        "notice": _notice,
        "compaction_update": _compaction,
        "compaction_summary_chunk": _compaction_chunk,
        "plan": _plan,
        "available_commands_update": _commands,
        "current_mode_update": _mode,
        "config_option_update": _config_options,
        "session_info_update": _session_info,
        "subagent_update": _subagent,
        "session_message": _session_message,
        "session_message_chunk": _session_message_chunk,
        "usage_update": _usage,
    }


def _nothing(_spent: Money) -> None:
    pass


def _plus(earlier: Money | None, cost: Money) -> Money:
    """The conversation's cost: its earlier sessions' and `cost`, the current one's (only the current
    one's when they were reported in another currency)."""
    if earlier is None or earlier["currency"] != cost["currency"]:
        return cost
    return {"amount": round(earlier["amount"] + cost["amount"], DIGITS), "currency": cost["currency"]}


def _less(total: Money | None, session: Money | None) -> Money | None:
    """What the earlier sessions cost, from a stored conversation's cost and its current session's."""
    if total is None or session is None or total["currency"] != session["currency"]:
        return None
    amount = round(total["amount"] - session["amount"], DIGITS)
    return {"amount": amount, "currency": total["currency"]} if amount > 0 else None


def _no_usage() -> dict[str, Any]:
    return {"used": 0, "size": 0}


def part_size(part: dict[str, Any]) -> int:
    """About the bytes a part holds: its texts, and ITEM_SIZE for each item of its lists."""
    if part.get("type") in ("text", "thought"):
        return text_size(as_string(part.get("text")))
    size = sum(text_size(as_string(part.get(key))) for key in ("title", "input", "output", "summary", "error"))
    for diff in part.get("diffs") or ():
        size += ITEM_SIZE + sum(text_size(as_string(diff.get(k))) for k in ("path", "oldText", "newText"))
    for entry in part.get("entries") or ():
        size += ITEM_SIZE + text_size(as_string(entry.get("content")))
    for entry in part.get("terminals") or ():
        size += ITEM_SIZE + text_size(as_string(entry.get("output")))
    return size + ITEM_SIZE * len(part.get("locations") or ())


def fit_part(part: dict[str, Any], limit: int) -> dict[str, Any]:
    """A tool or plan part of at most about `limit` bytes: its lists and texts cut, each text
    keeping its start and a note of what went."""
    if part_size(part) <= limit:
        return part
    items = max(limit // (ITEM_SIZE * 4), 1)  # lists shortened first: what is left goes to the texts
    part = {**part, **{k: part[k][:items] for k in ("diffs", "entries", "locations", "terminals") if part.get(k)}}
    texts = 3 + 3 * len(part.get("diffs") or ()) + len(part.get("entries") or ()) + len(part.get("terminals") or ())
    each = max((limit - ITEM_SIZE * items) // texts, ITEM_SIZE)
    for key in ("title", "input", "output", "summary"):
        if key in part:
            part[key] = _head(as_string(part[key]), each)
    if part.get("diffs"):
        part["diffs"] = [{**d, **{k: _head(as_string(d.get(k)), each) for k in ("path", "oldText", "newText")}}
                         for d in part["diffs"]]  # fmt: skip
    if part.get("entries"):
        part["entries"] = [{**e, "content": _head(as_string(e.get("content")), each)} for e in part["entries"]]
    return part


def _fitting(text: str, limit: int) -> str:
    """The start of `text` that holds at most `limit` bytes, cut at a character boundary."""
    if limit <= 0:
        return ""
    if text.isascii():
        return text[:limit]
    return text.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")


def _head(text: str, limit: int) -> str:
    """`text`'s first `limit` bytes or so, with a note of what was cut."""
    if text_size(text) <= limit:
        return text
    kept = _fitting(text, limit)
    return f"{kept}\n[… deck cut {shown_size(text_size(text) - text_size(kept))} here …]"


def _count(value: Any) -> int:
    """A token count as sent; anything that is not a finite number of at least 0 counts as 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return max(int(value), 0) if math.isfinite(value) else 0


#: The kinds of config option deck shows and sets (ACP's SessionConfigOption).
OPTION_TYPES = ("select", "boolean")


def _options(agent: str, options: Any) -> list[dict[str, Any]]:
    """The config options deck can show and set, each of the shape ACP gives it (`_option`); the
    rest are skipped, so that no frontend meets a value of a type it does not expect."""
    found = dicts(options)
    known = [kept for kept in map(_option, found) if kept is not None]
    if len(known) < len(found):
        log.info("%s: %d config option(s) without an id, of a type deck does not know, or malformed, skipped",
                 agent, len(found) - len(known))  # fmt: skip
    return known


def _option(option: dict[str, Any]) -> dict[str, Any] | None:
    """A SessionConfigOption as deck keeps it: a non-empty string id, a type of OPTION_TYPES and a
    current value of that type (a boolean, or a select's value id); a select keeps only its
    well-formed values (`_select_values`), and one left with none to choose is no option either:
    None for those. Its name is a string (else its id); a description or category that is no
    string is left out."""
    config_id, kind, current = option.get("id"), option.get("type"), option.get("currentValue")
    if not isinstance(config_id, str) or not config_id or kind not in OPTION_TYPES:
        return None
    kept = _labelled(option, config_id, "description", "category")
    if kind == "boolean":
        return kept if isinstance(current, bool) else None
    values = _select_values(option.get("options"))
    if not isinstance(current, str) or not values:
        return None
    kept["options"] = values
    return kept


def _select_values(items: Any) -> list[dict[str, Any]]:
    """A select's values, flat or in groups (`items` is a list, or there are none): a value needs
    a string id (`value`); a group a string id (`group`) and a list of such values, groups within
    it skipped; a group left with no value is skipped, as is every item that is no object."""
    values: list[dict[str, Any]] = []
    for item in dicts(items):
        if "group" in item:
            group = item.get("group")
            inner = [kept for kept in map(_select_value, dicts(item.get("options"))) if kept is not None]
            if isinstance(group, str) and inner:
                values.append({**_labelled(item, group), "options": inner})
        elif (kept := _select_value(item)) is not None:
            values.append(kept)
    return values


def _select_value(item: dict[str, Any]) -> dict[str, Any] | None:
    value = item.get("value")
    if "group" in item or not isinstance(value, str):
        return None
    return _labelled(item, value, "description")


def _labelled(item: dict[str, Any], fallback: str, *texts: str) -> dict[str, Any]:
    """`item` with a name that is a non-empty string (its own, else `fallback`), and without those
    of its `texts` keys that are no string."""
    name = item.get("name")
    kept = {k: v for k, v in item.items() if k not in texts or isinstance(v, str)}
    kept["name"] = name if isinstance(name, str) and name else fallback
    return kept


# -- reading what an agent sent: the right type, or a default ---------------------------------


def _exit_status(code: Any, signal: Any) -> dict[str, Any]:
    """ACP's `TerminalExitStatus` of what an adapter says in `_meta.terminal_exit`: an exit code
    that is no uint32 (a bool, a float, a negative or a huge number) is unknown, and so is a signal
    that is no string; a signal name is cut at SIGNAL_MAX characters."""
    exit_code = code if type(code) is int and 0 <= code <= EXIT_CODE_MAX else None
    return {"exitCode": exit_code, "signal": signal[:SIGNAL_MAX] if isinstance(signal, str) else None}


def _modes(value: Any) -> dict[str, Any] | None:
    """A SessionModeState as deck keeps it: `availableModes` a list of objects, `currentModeId` a string or None."""
    if not isinstance(value, dict):
        return None
    current = value.get("currentModeId")
    return {
        **value,
        "currentModeId": current if isinstance(current, str) else None,
        "availableModes": dicts(value.get("availableModes")),
    }


def _choices(stored: Any) -> dict[str, Any]:
    """The user's choices as the history kept them, junk left out."""
    if not isinstance(stored, dict):
        return {}
    options = stored.get("options")
    kept = {k: v for k, v in options.items() if isinstance(k, str) and isinstance(v, (str, bool))} if isinstance(options, dict) else {}
    mode = stored.get("mode")
    return {"options": kept, "mode": mode if isinstance(mode, str) else None} if kept or isinstance(mode, str) else {}


def _mode_option(options: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The config option that selects the session mode (category "mode"), if the agent offers one."""
    return next((o for o in options if o.get("category") == "mode"), None)


def option_values(option: dict[str, Any]) -> list[Any]:
    """The values a select option offers, whether listed flat or in groups."""
    values: list[Any] = []
    for item in dicts(option.get("options")):
        if "group" in item:
            values.extend(v.get("value") for v in dicts(item.get("options")))
        else:
            values.append(item.get("value"))
    return values
