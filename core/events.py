"""Events sent by the core to frontends and plugins: small frozen dataclasses with a stable name.

Every event turns into a wire payload with camelCase keys; optional fields left at
None are omitted. `Deck.emit` stamps each event with `seq`, increasing per deck, and
the wire form (`to_dict`, what the jsonl frontend writes) is
`{"event": e.name, "seq": e.seq, **e.payload()}`; `from_wire` turns that back into the
event's class, so a client that only has JSON lines handles the same objects as one
in the same process.

Whoever handles events dispatches on their class, never on a name it spells itself:
a `Handlers` class marks its methods `@handles(MessageDelta)`, and `dispatch(event)`
calls the one for the event's class. An unknown class is a NameError at import, and
a mark outside a `Handlers` class, or two methods for one event, fail at class creation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from datetime import datetime, timezone
from typing import Any, ClassVar, TypeVar


def now_iso() -> str:
    """The time now, UTC, to the millisecond: `2026-01-31T12:00:00.123Z` (every time deck writes)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


class Event:
    """Base of all events: a `name`, a `payload()`, and the `seq` the deck gave it when emitted."""

    #: Set once, by `Deck.emit` (or `from_wire`): the event's place in its deck's one order, from 1.
    #: An event never emitted has none (`to_dict` writes 0).
    __slots__ = ("seq",)
    seq: int
    name: ClassVar[str]
    _keys: ClassVar[tuple[tuple[str, str], ...]]
    _optional: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def wire_keys(cls) -> tuple[tuple[str, str], ...]:
        """(attribute, camelCase key) of each field, in order."""
        keys = cls.__dict__.get("_keys")
        if keys is None:
            keys = tuple((f.name, _camel(f.name)) for f in fields(cls))  # type: ignore[arg-type]
            cls._keys = keys
        return keys

    def payload(self) -> dict[str, Any]:
        keys = type(self).__dict__.get("_keys") or self.wire_keys()
        optional = self._optional
        out: dict[str, Any] = {}
        for attr, key in keys:
            value = getattr(self, attr)
            if value is None and attr in optional:
                continue
            out[key] = value
        return out

    def to_dict(self) -> dict[str, Any]:
        """The wire form: `{"event": name, "seq": seq, ...payload}`."""
        return {"event": self.name, "seq": getattr(self, "seq", 0), **self.payload()}


#: `set_seq(event, n)`: give `event` its `seq` (events are frozen: set once, as they go out). The
#: slot's own setter, a third of the cost of `object.__setattr__` on the path of every chunk.
set_seq: Callable[[Event, int], None] = Event.__dict__["seq"].__set__


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
    _optional: ClassVar[frozenset[str]] = frozenset({"text", "part", "session"})
    agent: str
    message_id: str
    index: int
    kind: str
    text: str | None = None
    part: dict[str, Any] | None = None
    #: The subagent session the message is of (None: the agent's own conversation).
    session: str | None = None


#: The setters of a MessageDelta's slots, for `text_delta`.
_delta_slots = MessageDelta.__dict__
_set_agent, _set_message_id, _set_index, _set_kind, _set_text, _set_part, _set_session = (
    _delta_slots[name].__set__ for name in ("agent", "message_id", "index", "kind", "text", "part", "session")
)


def text_delta(agent: str, message_id: str, index: int, kind: str, text: str, session: str | None = None) -> MessageDelta:
    """`MessageDelta(agent, message_id, index, kind, text=text)`, at half the cost: one is made for
    every streamed chunk. A frozen dataclass's `__init__` sets each field with `object.__setattr__`;
    the slots' own setters do the same (as `set_seq` does)."""
    event = object.__new__(MessageDelta)
    _set_agent(event, agent)
    _set_message_id(event, message_id)
    _set_index(event, index)
    _set_kind(event, kind)
    _set_text(event, text)
    _set_part(event, None)
    _set_session(event, session)
    return event


@dataclass(frozen=True, slots=True)
class TurnChanged(Event):
    name: ClassVar[str] = "turn:changed"
    agent: str
    busy: bool
    queued: int


@dataclass(frozen=True, slots=True)
class PermissionRequested(Event):
    name: ClassVar[str] = "permission:requested"
    _optional: ClassVar[frozenset[str]] = frozenset({"session"})
    id: str
    agent: str
    message_id: str
    tool_call: dict[str, Any]
    options: list[dict[str, Any]]
    rejections: int
    #: The subagent session that asks (None: the agent's own).
    session: str | None = None


@dataclass(frozen=True, slots=True)
class PermissionResolved(Event):
    name: ClassVar[str] = "permission:resolved"
    _optional: ClassVar[frozenset[str]] = frozenset({"option_id"})
    id: str
    agent: str
    option_id: str | None = None


@dataclass(frozen=True, slots=True)
class UsageChanged(Event):
    """What the agent's session reports it used (`usage` is `{used, size, cost?, tokens?}`) and, when
    its cost grew, by how much (`spent`, `{amount, currency}`: what the deck's spending counts);
    `tokens` when a prompt response reported the tokens its turn used (`usage.tokens` sums them
    over the conversation)."""

    name: ClassVar[str] = "usage:changed"
    _optional: ClassVar[frozenset[str]] = frozenset({"spent", "tokens"})
    agent: str
    usage: dict[str, Any]
    spent: dict[str, Any] | None = None
    tokens: int | None = None


@dataclass(frozen=True, slots=True)
class QuestionRequested(Event):
    name: ClassVar[str] = "question:requested"
    _optional: ClassVar[frozenset[str]] = frozenset({"url", "session"})
    id: str
    agent: str
    message_id: str
    message: str
    schema: dict[str, Any]
    #: An ACP URL-mode elicitation: the page the agent sends the user to (the answer is then only go ahead or not).
    url: str | None = None
    #: The subagent session that asks (None: the agent's own).
    session: str | None = None


@dataclass(frozen=True, slots=True)
class QuestionResolved(Event):
    name: ClassVar[str] = "question:resolved"
    id: str
    agent: str


@dataclass(frozen=True, slots=True)
class SessionUpdate(Event):
    """A `session/update` deck does not model (unknown or unstable variant), passed on raw."""

    name: ClassVar[str] = "session:update"
    _optional: ClassVar[frozenset[str]] = frozenset({"session"})
    agent: str
    update: dict[str, Any]
    #: The subagent session it came from (None: the agent's own).
    session: str | None = None


@dataclass(frozen=True, slots=True)
class ConversationChanged(Event):
    """A conversation changed beyond one message: modes, config options, commands, title."""

    name: ClassVar[str] = "conversation:changed"
    agent: str
    field: str
    value: Any


@dataclass(frozen=True, slots=True)
class ConversationReset(Event):
    """An agent's conversation was replaced as a whole: emptied for a new one (`ChatService.NewConversation`),
    or a stored one made current (`conversationId`, `ChatService.OpenConversation`). A frontend reads it
    again with `ChatService.Conversation`: no `message:*` event says what went or came back. `apart`: the
    new one is a one-shot's (`deck send`), which a later start does not come back to."""

    name: ClassVar[str] = "conversation:reset"
    _optional: ClassVar[frozenset[str]] = frozenset({"conversation_id", "apart"})
    agent: str
    conversation_id: str | None = None
    apart: bool | None = None  # True, or left out


@dataclass(frozen=True, slots=True)
class TerminalOutput(Event):
    """Live output of a command an agent runs (through deck's terminal/*, or its own, streamed in `_meta`)."""

    name: ClassVar[str] = "terminal:output"
    agent: str
    terminal_id: str
    text: str


@dataclass(frozen=True, slots=True)
class TerminalExited(Event):
    """That command ended: `exitStatus` is `{exitCode, signal}`, either may be None."""

    name: ClassVar[str] = "terminal:exited"
    agent: str
    terminal_id: str
    exit_status: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PluginError(Event):
    """A plugin raised in a hook; it is isolated and deck goes on."""

    name: ClassVar[str] = "plugin:error"
    plugin: str
    hook: str
    error: str


@dataclass(frozen=True, slots=True)
class ClientsChanged(Event):
    """A client attached to the deck's server, or left it: `clients` are attached now."""

    name: ClassVar[str] = "clients:changed"
    clients: int


@dataclass(frozen=True, slots=True)
class Notice(Event):
    """What a plugin tells the user, worded by the plugin (`Deck.notice`): every frontend shows it
    one way whatever its source. A `sticky` one also stays on its agent (`AgentService.List()`'s
    `notices`, in the snapshot) until its source says `""` for that agent. An alert (`bell`,
    `desktop`) is rung and shown as the terminal's notification where a frontend can, not as a line."""

    name: ClassVar[str] = "deck:notice"
    _optional: ClassVar[frozenset[str]] = frozenset({"agent", "bell", "desktop"})
    source: str
    level: str
    text: str
    agent: str | None = None
    sticky: bool = False
    bell: bool | None = None
    desktop: bool | None = None


@dataclass(frozen=True, slots=True)
class SubagentChanged(Event):
    """A subagent session of `agent`'s announced or changed (ACP `subagent_update`): `parent` is the
    session that announced it (the conversation's, or another child's), `state` its work as the agent
    says it (`running`, `idle`, `requires_action`, `unknown`, or another word kept as sent: a value ACP
    may add, an agent's own `_`-prefixed one; None when unsaid) and `stop_reason` why an idle one
    stopped, `cwd` and `additional_directories` where it works, `cancel` whether
    `ChatService.Cancel(agent, session)` can stop its work alone."""

    name: ClassVar[str] = "subagent:changed"
    _optional: ClassVar[frozenset[str]] = frozenset({"description", "stop_reason", "cwd", "additional_directories"})
    agent: str
    parent: str
    session: str
    title: str | None
    state: str | None
    cancel: bool = False
    description: str | None = None
    stop_reason: str | None = None
    cwd: str | None = None
    additional_directories: list[str] | None = None


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
    SessionUpdate,
    ConversationChanged,
    ConversationReset,
    TerminalOutput,
    TerminalExited,
    PluginError,
    ClientsChanged,
    Notice,
    SubagentChanged,
)


#: Every event class by its wire name: the core's, then those plugins register (`register_events`).
EVENTS: dict[str, type[Event]] = {cls.name: cls for cls in ALL_EVENTS}


def register_events(*classes: type[Event]) -> None:
    """Make `classes` (a plugin's events) known to `from_wire`, by their names. A name is one class's:
    another class under a name already known is a ValueError; the same class again changes nothing."""
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, Event)) or not isinstance(cls.__dict__.get("name"), str):
            raise ValueError(f"{cls!r} is not an event class with a name of its own")
        known = EVENTS.get(cls.name)
        if known is not None and known is not cls:
            raise ValueError(f"event {cls.name} is already {known.__module__}.{known.__qualname__}")
        EVENTS[cls.name] = cls


class UnknownEvent(Event):
    """An event whose name this deck does not know (a newer deck's, a plugin's), kept as its payload."""

    __slots__ = ("name", "data")

    def __init__(self, name: str, data: dict[str, Any]) -> None:
        self.name = name  # type: ignore[misc]
        self.data = data

    def payload(self) -> dict[str, Any]:
        return dict(self.data)

    def __repr__(self) -> str:
        return f"UnknownEvent({self.name!r}, {self.data!r})"


def from_wire(data: dict[str, Any]) -> Event:
    """The event that the wire form `data` (`to_dict`'s) stands for, rebuilt as its class, with its `seq`.

    Keys the class does not have are ignored, missing optional ones take their default; a
    missing required one is a ValueError.
    """
    name = data.get("event")
    if not isinstance(name, str):
        raise ValueError("an event needs a string \"event\" name")
    cls = EVENTS.get(name)
    event: Event
    if cls is None:
        event = UnknownEvent(name, {k: v for k, v in data.items() if k not in ("event", "seq")})
    else:
        values = {attr: data[key] for attr, key in cls.wire_keys() if key in data}
        missing = [key for attr, key in _required_keys(cls) if attr not in values]
        if missing:
            raise ValueError(f"event {name} lacks {', '.join(missing)}")
        event = cls(**values)
    seq = data.get("seq", 0)
    set_seq(event, seq if isinstance(seq, int) and not isinstance(seq, bool) else 0)
    return event


#: The (attribute, key) of each field an event class cannot do without, by class: worked out once.
_REQUIRED: dict[type[Event], tuple[tuple[str, str], ...]] = {}


def _required_keys(cls: type[Event]) -> tuple[tuple[str, str], ...]:
    keys = _REQUIRED.get(cls)
    if keys is None:
        keys = _REQUIRED[cls] = tuple((attr, key) for attr, key in cls.wire_keys() if _required(cls, attr))
    return keys


def _required(cls: type[Event], attr: str) -> bool:
    field = cls.__dataclass_fields__[attr]  # type: ignore[attr-defined]
    return field.default is MISSING and field.default_factory is MISSING


# -- dispatch --------------------------------------------------------------------------------

F = TypeVar("F", bound=Callable[..., Any])


class _Mark:
    """What `@handles` leaves in a class body until the class exists: it checks the class, then
    puts the plain method back."""

    def __init__(self, method: Callable[..., Any], classes: tuple[type[Event], ...]) -> None:
        self.method = method
        self.classes = classes

    def __set_name__(self, owner: type, name: str) -> None:
        if not issubclass(owner, Handlers):
            raise TypeError(f"@handles on {owner.__qualname__}.{name}: the class must derive from deck.events.Handlers")
        self.method.__deck_handles__ = self.classes  # type: ignore[attr-defined]
        setattr(owner, name, self.method)


def handles(*classes: type[Event]) -> Callable[[F], F]:
    """Mark a method of a `Handlers` class as the one `dispatch` calls for events of `classes`."""
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, Event)) or not isinstance(getattr(cls, "name", None), str):
            raise TypeError(f"@handles takes event classes (deck.events), not {cls!r}")
    if not classes:
        raise TypeError("@handles needs at least one event class")

    def mark(method: F) -> F:
        return _Mark(method, classes)  # type: ignore[return-value]

    return mark


class Handlers:
    """Something that handles events by class: `dispatch(event)` calls its `@handles` method for it.

    The table is built once per class, subclasses' methods winning; events of a class without
    a handler are ignored.
    """

    __slots__ = ()
    _handlers: ClassVar[dict[type[Event], str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[type[Event], str] = {}
        for klass in reversed(cls.__mro__):
            own: dict[type[Event], str] = {}
            for attr, value in vars(klass).items():
                for event_cls in getattr(value, "__deck_handles__", ()):
                    if event_cls in own:
                        raise TypeError(
                            f"{klass.__qualname__}: {own[event_cls]} and {attr} both handle {event_cls.name}"
                        )
                    own[event_cls] = attr
            table.update(own)
        cls._handlers = table

    def dispatch(self, event: Event) -> None:
        attr = self._handlers.get(type(event))
        if attr is not None:
            getattr(self, attr)(event)
