"""Events sent by the core to frontends and plugins: small frozen dataclasses with a stable name.

Every event turns into a wire payload with camelCase keys; optional fields left at
None are omitted. The jsonl frontend writes `{"event": e.name, **e.payload()}`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


class Event:
    """Base of all events: a `name` and a `payload()`."""

    __slots__ = ()
    name: ClassVar[str]
    _keys: ClassVar[tuple[tuple[str, str], ...]]
    _optional: ClassVar[frozenset[str]] = frozenset()

    def payload(self) -> dict[str, Any]:
        keys = type(self).__dict__.get("_keys")
        if keys is None:
            keys = tuple((f.name, _camel(f.name)) for f in fields(self))  # type: ignore[arg-type]
            type(self)._keys = keys
        optional = self._optional
        out: dict[str, Any] = {}
        for attr, key in keys:
            value = getattr(self, attr)
            if value is None and attr in optional:
                continue
            out[key] = value
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.name, **self.payload()}


@dataclass(frozen=True, slots=True)
class ConfigChanged(Event):
    name: ClassVar[str] = "config:changed"
    path: str
    valid: bool
    problems: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class AgentStateChanged(Event):
    name: ClassVar[str] = "agent:state"
    _optional: ClassVar[frozenset[str]] = frozenset({"error"})
    agent: str
    state: str
    outdated: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class AgentLog(Event):
    name: ClassVar[str] = "agent:log"
    agent: str
    line: str


@dataclass(frozen=True, slots=True)
class MessageUpdated(Event):
    name: ClassVar[str] = "message:updated"
    agent: str
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MessageDelta(Event):
    name: ClassVar[str] = "message:delta"
    _optional: ClassVar[frozenset[str]] = frozenset({"text", "part"})
    agent: str
    message_id: str
    index: int
    kind: str
    text: str | None = None
    part: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class TurnChanged(Event):
    name: ClassVar[str] = "turn:changed"
    agent: str
    busy: bool
    queued: int


@dataclass(frozen=True, slots=True)
class PermissionRequested(Event):
    name: ClassVar[str] = "permission:requested"
    id: str
    agent: str
    message_id: str
    tool_call: dict[str, Any]
    options: list[dict[str, Any]]
    rejections: int


@dataclass(frozen=True, slots=True)
class PermissionResolved(Event):
    name: ClassVar[str] = "permission:resolved"
    _optional: ClassVar[frozenset[str]] = frozenset({"option_id"})
    id: str
    agent: str
    option_id: str | None = None


@dataclass(frozen=True, slots=True)
class UsageChanged(Event):
    name: ClassVar[str] = "usage:changed"
    agent: str
    usage: dict[str, Any]


@dataclass(frozen=True, slots=True)
class QuestionRequested(Event):
    name: ClassVar[str] = "question:requested"
    id: str
    agent: str
    message_id: str
    message: str
    schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class QuestionResolved(Event):
    name: ClassVar[str] = "question:resolved"
    id: str
    agent: str


@dataclass(frozen=True, slots=True)
class AgentAnnouncement(Event):
    name: ClassVar[str] = "agent:announcement"
    requester: str
    target: str
    ticket_id: str
    text: str
    at: str


@dataclass(frozen=True, slots=True)
class AskChanged(Event):
    """An inter-agent ask started (`active`) or ended (final, error or cancel)."""

    name: ClassVar[str] = "ask:changed"
    requester: str
    target: str
    ticket_id: str
    active: bool


@dataclass(frozen=True, slots=True)
class SessionUpdate(Event):
    """A `session/update` deck does not model (unknown or unstable variant), passed on raw."""

    name: ClassVar[str] = "session:update"
    agent: str
    update: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ConversationChanged(Event):
    """A conversation changed beyond one message: modes, config options, commands, title."""

    name: ClassVar[str] = "conversation:changed"
    agent: str
    field: str
    value: Any


@dataclass(frozen=True, slots=True)
class PluginError(Event):
    """A plugin raised in a hook; it is isolated and deck goes on."""

    name: ClassVar[str] = "plugin:error"
    plugin: str
    hook: str
    error: str


ALL_EVENTS: tuple[type[Event], ...] = (
    ConfigChanged,
    AgentStateChanged,
    AgentLog,
    MessageUpdated,
    MessageDelta,
    TurnChanged,
    PermissionRequested,
    PermissionResolved,
    UsageChanged,
    QuestionRequested,
    QuestionResolved,
    AgentAnnouncement,
    AskChanged,
    SessionUpdate,
    ConversationChanged,
    PluginError,
)
