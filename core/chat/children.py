"""A conversation's children: the subagent sessions its agent announces (ACP `subagent_update`).

An agent that delegates work exposes each subagent as a child session with its own id. The child's
updates build a conversation of their own, kept in the parent's message list with `session` set on
each message (the frontends nest them under the parent); this module keeps what the agent said of
each child (title, description, state, where it works, what the client may do) and, while one of
its updates is applied, where its streamed text lands (`current`), its tool calls, its compactions
and its ACP message ids.

Everything here comes from the agent, so untrusted: ids and texts are cut, and a conversation has
at most MAX_CHILDREN children (more are logged and dropped, as the agent layer drops their routes).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from deck.acp.updates import as_string
from deck.events import SubagentChanged

if TYPE_CHECKING:
    from deck.chat.conversation import Message

log = logging.getLogger(__name__)

#: The children one conversation keeps (the agent layer routes no more either).
MAX_CHILDREN = 10_000
#: The characters kept of a child's session id, title and description.
ID_MAX, TITLE_MAX, DESCRIPTION_MAX = 200, 200, 2_000
#: The characters kept of a child's state and stop reason: ACP's words, or an agent's own (`_`-prefixed).
STATE_MAX = 100
#: The characters kept of a path a child works in, and how many additional directories are kept.
PATH_MAX, DIRECTORIES_MAX = 4_096, 64
#: The updates of a child's that build its conversation; others are passed on raw, marked with it.
CHILD_UPDATES = frozenset({
    "agent_message_chunk", "agent_thought_chunk", "user_message_chunk", "tool_call", "tool_call_update",
    "plan", "notice", "subagent_update", "session_message", "session_message_chunk",
    "compaction_update", "compaction_summary_chunk",
})  # fmt: skip


class Child:
    """One subagent session as the conversation knows it."""

    __slots__ = ("id", "parent", "title", "description", "state", "stop_reason", "cwd", "directories", "cancel",
                 "stopping", "current", "tools", "compactions", "acp_messages")  # fmt: skip

    def __init__(self, child_id: str, parent: str) -> None:
        self.id = child_id
        #: The session that announced it: the conversation's own, or another child's.
        self.parent = parent
        self.title: str | None = None
        self.description: str | None = None
        #: Its foreground work as the agent says it (`running`, `idle`, `requires_action`, `unknown`, or a
        #: word ACP may add or the agent's own, kept as sent: a client shows what it does not know as is),
        #: None when unsaid.
        self.state: str | None = None
        self.stop_reason: str | None = None
        #: Where it works (ACP `cwd`, `additionalDirectories`), None when unsaid.
        self.cwd: str | None = None
        self.directories: list[str] | None = None
        #: The child offers `session/cancel` of its work alone (its capabilities' `cancel`).
        self.cancel = False
        #: Cancelled alone (`ChatService.Cancel` with its session), and not working again since: what it
        #: asks meanwhile is answered cancelled, as a cancelled turn's requests are.
        self.stopping = False
        self.current: Message | None = None  # its message receiving updates
        self.tools: dict[str, tuple[Message, int]] = {}
        self.compactions: dict[str, tuple[Message, int]] = {}  # its own compactions' parts, by id
        self.acp_messages: dict[str, Message] = {}

    def patch(self, update: dict[str, Any]) -> None:
        """ACP's patch semantics: a field sent replaces the value (null clears it), one left out stays."""
        if "title" in update:
            self.title = _text(update["title"], TITLE_MAX)
        if "description" in update:
            self.description = _text(update["description"], DESCRIPTION_MAX)
        if "cwd" in update:
            self.cwd = _text(update["cwd"], PATH_MAX)
        if "additionalDirectories" in update:
            self.directories = _paths(update["additionalDirectories"])
        if "capabilities" in update:
            caps = update["capabilities"]
            self.cancel = isinstance(caps, dict) and isinstance(caps.get("cancel"), dict)
        if "state" in update:
            self.state, self.stop_reason = _state(update["state"])
            if self.state == "running":
                self.stopping = False  # new work reported: what it asks is the user's again

    @property
    def working(self) -> bool:
        return self.state in ("running", "requires_action")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"session": self.id, "parent": self.parent, "title": self.title,
                               "state": self.state, "cancel": self.cancel}  # fmt: skip
        if self.description is not None:
            out["description"] = self.description
        if self.stop_reason is not None:
            out["stopReason"] = self.stop_reason
        if self.cwd is not None:
            out["cwd"] = self.cwd
        if self.directories is not None:
            out["additionalDirectories"] = list(self.directories)
        return out

    def changed(self, agent: str) -> SubagentChanged:
        """The event that tells of it as it is now."""
        return SubagentChanged(agent, self.parent, self.id, self.title, self.state, self.cancel, self.description,
                               self.stop_reason, self.cwd, self.directories and list(self.directories))  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Child | None:
        """A child kept in the history; its work is over (a new run has no live child)."""
        child_id, parent = as_string(data.get("session"))[:ID_MAX], as_string(data.get("parent"))[:ID_MAX]
        if not child_id:
            return None
        child = cls(child_id, parent)
        child.title = _text(data.get("title"), TITLE_MAX)
        child.description = _text(data.get("description"), DESCRIPTION_MAX)
        state, _ = _state(data.get("state"))
        child.state = "idle" if state in ("running", "requires_action") else state
        stop = data.get("stopReason")
        if isinstance(stop, str) and stop and state == child.state:  # a working one's stop is not known
            child.stop_reason = stop[:STATE_MAX]
        child.cwd = _text(data.get("cwd"), PATH_MAX)
        child.directories = _paths(data.get("additionalDirectories"))
        return child


class Children:
    """The children of one conversation, in the order announced."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.by_id: dict[str, Child] = {}
        self._said_full = False

    def __len__(self) -> int:
        return len(self.by_id)

    def get(self, child_id: str) -> Child | None:
        return self.by_id.get(child_id)

    def stopped(self, child_id: str) -> bool:
        """Whether the child, or a child above it, was cancelled and has reported no new work since."""
        child = self.by_id.get(child_id)
        for _ in range(len(self.by_id)):  # the parents are a chain of announcers: bounded all the same
            if child is None:
                return False
            if child.stopping:
                return True
            child = self.by_id.get(child.parent)
        return False

    def announce(self, parent: str, update: dict[str, Any]) -> Child | None:
        """A `subagent_update` sent on session `parent`: the child made or patched; None when it is
        refused (no id, the parent itself, or past MAX_CHILDREN). A child announced again by another
        session keeps its parent (the association is the first announcer's)."""
        child_id = as_string(update.get("sessionId"))[:ID_MAX]
        if not child_id or child_id == parent:
            log.warning("%s: subagent_update without a session id of its own, skipped", self.agent)
            return None
        child = self.by_id.get(child_id)
        if child is None:
            if len(self.by_id) >= MAX_CHILDREN:
                if not self._said_full:
                    self._said_full = True
                    log.warning("%s: more than %d subagents: the others are dropped", self.agent, MAX_CHILDREN)
                return None
            child = self.by_id[child_id] = Child(child_id, parent)
        elif child.parent != parent:
            log.warning("%s: subagent %r announced again by another session (%r): its parent stays %r",
                        self.agent, child_id[:100], parent[:100], child.parent[:100])  # fmt: skip
        child.patch(update)
        return child

    def restore(self, stored: Any) -> None:
        self.by_id = {}  # a new registry: one handed out before (to the history) stays the old conversation's
        for data in stored if isinstance(stored, list) else []:
            child = Child.from_dict(data) if isinstance(data, dict) else None
            if child is not None and len(self.by_id) < MAX_CHILDREN:
                self.by_id[child.id] = child

    def wire(self) -> list[dict[str, Any]]:
        return [child.to_dict() for child in self.by_id.values()]


def _text(value: Any, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _paths(value: Any) -> list[str] | None:
    """`additionalDirectories`: its strings, cut, DIRECTORIES_MAX at most; None for null (or no list)."""
    if not isinstance(value, list):
        return None
    return [v[:PATH_MAX] for v in value if isinstance(v, str) and v][:DIRECTORIES_MAX]


def _state(value: Any) -> tuple[str | None, str | None]:
    """A child's `state` (an object tagged by `state`, or by `type`; a bare string is read too) → its
    name, as sent (cut), and its stop reason. A value ACP does not list yet, or an agent's own
    (`_`-prefixed), is kept: the protocol asks clients to preserve it; a state that is no word at all
    reads as ACP's `unknown`."""
    if value is None:
        return None, None
    raw = value if isinstance(value, str) else None
    stop: Any = None
    if isinstance(value, dict):
        raw = value.get("state", value.get("type"))
        stop = value.get("stopReason")
    state = raw[:STATE_MAX] if isinstance(raw, str) and raw else "unknown"
    return state, (stop[:STATE_MAX] if isinstance(stop, str) and stop else None)
