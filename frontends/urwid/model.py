"""What the console shows (no urwid here): agents, messages, asks (permission requests and
questions), loaded from a deck's snapshot, then folded from the events after it.

Every `apply(event)` updates the model and records what changed, so the screen rebuilds
only those pieces at its next frame, however many events arrived in between.

No plugin is imported here: what a plugin tells the user comes as its notices (`deck:notice`),
shown one way whatever their source. The panel's marks of the worktrees and of an agent asked by
another are read from those plugins' events by their wire names (`PLUGIN_MARKS`), as data: a
console attached to a server that lacks the plugin gets them as `deck.events.UnknownEvent`, one
in the deck's process as the plugin's own class; either has a `name` and a `payload()`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deck.events import (
    AgentLog,
    AgentStateChanged,
    ConversationChanged,
    Event,
    Handlers,
    MessageDelta,
    MessageUpdated,
    Notice,
    PermissionRequested,
    PermissionResolved,
    QuestionRequested,
    QuestionResolved,
    SubagentChanged,
    TerminalExited,
    TerminalOutput,
    TurnChanged,
    UsageChanged,
    handles,
)
from deck.frontends.subagents import Subagents
from deck.states import AgentState

#: The notices on an agent kept beside its conversation, the newest last.
SAID = 20
#: Stderr lines kept per agent: as many as `AgentService.Logs` returns.
LOG_LINES = 200
#: Messages looked through, newest first, for the tool part that shows a terminal's output.
TERMINAL_SEARCH = 20
#: A command's output kept on its tool part: the newest characters, as many as the core keeps.
TERMINAL_TAIL = 16 * 1024
#: The states in which an agent is at work: the panel's spinner turns, quitting asks first.
WORKING = frozenset({AgentState.STARTING.value, AgentState.BUSY.value})


#: The source of the notice an agent's own notice makes (its conversation shows it, as a note of code "notice").
AGENT_NOTICE = "agent"


class Part:
    """One part of a message as the wire shows it (`data`); streamed text is kept in chunks, joined when read."""

    __slots__ = ("type", "data", "_chunks")

    def __init__(self, data: dict[str, Any]) -> None:
        text = data.get("text")
        self.type = str(data.get("type", "text"))
        self.data = data
        self._chunks = [text] if isinstance(text, str) and text else []

    def append(self, text: str) -> None:
        self._chunks.append(text)

    @property
    def text(self) -> str:
        if len(self._chunks) > 1:
            self._chunks[:] = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""


class MessageModel:
    """A message as its last `message:updated` said, plus the deltas since."""

    __slots__ = ("id", "role", "parts", "done", "queued", "stop_reason", "error", "code", "level",
                 "session", "sender", "recipient")  # fmt: skip

    def __init__(self, data: dict[str, Any]) -> None:
        self.id = str(data["id"])
        self.update(data)

    def update(self, data: dict[str, Any]) -> None:
        self.role = data.get("role", "agent")
        self.parts = [Part(p) for p in data.get("parts") or [] if isinstance(p, dict)]
        self.done = bool(data.get("done", True))
        self.queued = bool(data.get("queued", False))
        self.stop_reason = data.get("stopReason")
        self.error = data.get("error")
        self.code = data.get("code")
        #: A notice's severity (info, warning, error), on a system message of code "notice".
        self.level = data.get("level")
        #: A subagent's message: its session; a message between sessions: its sender and recipient.
        self.session = data.get("session") or None
        self.sender = data.get("sender") or None
        self.recipient = data.get("recipient") or None

    def delta(self, index: int, kind: str, text: str | None, part: dict[str, Any] | None) -> None:
        while len(self.parts) <= index:
            self.parts.append(Part({"type": kind}))
        if part is not None:
            self.parts[index] = Part(part)
        elif text:
            if self.parts[index].type != kind:
                self.parts[index] = Part({"type": kind})
            self.parts[index].append(text)


@dataclass
class AgentModel:
    name: str
    title: str = ""
    icon: str = ""
    description: str = ""
    state: str = "stopped"
    error: str | None = None
    outdated: bool = False
    queued: int = 0
    usage: dict[str, Any] = field(default_factory=lambda: {"used": 0, "size": 0})
    messages: list[MessageModel] = field(default_factory=list)
    by_id: dict[str, MessageModel] = field(default_factory=dict)
    #: The permission requests and questions waiting for an answer, in the order asked:
    #: id → ("permission" | "question", payload of its `…:requested` event).
    pending: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    logs: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    #: The notices plugins said on it in passing (neither sticky nor alerts), newest last:
    #: `{source, level, text, at}` (`at`, the local time it came, HH:MM:SS). Another agent's
    #: announcements to it as its requester are among them.
    said: deque[dict[str, str]] = field(default_factory=lambda: deque(maxlen=SAID))
    #: Requesters currently talking to this agent, by ticket id.
    asks: dict[str, str] = field(default_factory=dict)
    #: Files its worktree changes against its base (None: no worktree seen), and, by each other
    #: agent whose worktree changes some of them too, how many and the first of them.
    changed_files: int | None = None
    #: Its own slash commands (ACP available_commands_update): name → description.
    commands: dict[str, str] = field(default_factory=dict)
    overlaps: dict[str, tuple[int, frozenset[str]]] = field(default_factory=dict)
    #: The folder it works in (its cwd, or its worktree), "" while not known (`paths.agent_folders`).
    folder: str = ""
    #: The sticky notices on it, by source, in the order given: (level, text), as the plugin words them.
    notices: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: It runs in a sandbox (or will, at its next start), and whether that sandbox has the network.
    sandboxed: bool = False
    network: bool = True

    def shared_files(self) -> int:
        """How many of its changed files another agent's worktree changes too: exact while each
        overlap names all its files, else at least the largest overlap."""
        names: set[str] = set().union(*(files for _, files in self.overlaps.values()))
        return max([len(names), *(count for count, _ in self.overlaps.values())])

    def set_info(self, info: dict[str, Any]) -> None:
        self.title = str(info.get("title") or self.name)
        self.icon = str(info.get("icon") or self.name[:1].upper())
        self.description = str(info.get("description") or "")
        self.state = str(info.get("state", self.state))
        self.error = info.get("error")
        self.outdated = bool(info.get("outdated", False))
        self.notices = {
            str(n.get("source")): (str(n.get("level") or "info"), str(n.get("text")))
            for n in info.get("notices") or []
            if isinstance(n, dict) and n.get("text")
        }
        self.set_sandbox(info.get("sandbox"))

    def set_sandbox(self, sandbox: Any) -> None:
        """The sandbox an `AgentService.List()` row says it runs in: `{enabled, network, write}`."""
        boxed = sandbox if isinstance(sandbox, dict) else {}
        self.sandboxed = boxed.get("enabled") is True
        self.network = boxed.get("network") is not False

    def add_message(self, data: dict[str, Any]) -> MessageModel:
        message = self.by_id.get(str(data["id"]))
        if message is None:
            message = MessageModel(data)
            self.messages.append(message)
            self.by_id[message.id] = message
        else:
            message.update(data)
        return message

    @property
    def busy(self) -> bool:
        """In use (a turn, or another agent's ask): what its state says, the one source of it."""
        return self.state == AgentState.BUSY.value

    @property
    def working(self) -> bool:
        """Busy or starting: the spinner turns, and quitting asks first."""
        return self.state in WORKING

    @property
    def needs_input(self) -> bool:
        return bool(self.pending)

    def waiting(self, kind: str) -> int:
        """How many requests of `kind` ("permission" or "question") wait for an answer."""
        return sum(1 for k, _ in self.pending.values() if k == kind)


@dataclass
class Changes:
    """What changed since the last frame."""

    agents: set[str] = field(default_factory=set)  # rows of the agents panel
    messages: dict[str, set[str]] = field(default_factory=dict)  # agent → message ids
    asks: bool = False  # permission requests or questions came or went
    roster: bool = False  # agents added, removed or reordered
    side: set[str] = field(default_factory=set)  # agents whose notices, or the agents talking to them, changed
    folders: set[str] = field(default_factory=set)  # agents whose folder changed

    def message(self, agent: str, message_id: str) -> None:
        self.messages.setdefault(agent, set()).add(message_id)


class Model(Handlers):
    """Every agent the console knows, in config order, and the changes not yet drawn."""

    def __init__(self) -> None:
        self.agents: dict[str, AgentModel] = {}
        self.changes = Changes()
        #: The agents' subagents, nested under their agent in its conversation.
        self.subagents = Subagents()
        #: Each pending ask's place in the order asked, of every agent's: the oldest is answered first.
        self.asked: dict[str, int] = {}
        self._asks = 0

    def take_changes(self) -> Changes:
        changes, self.changes = self.changes, Changes()
        return changes

    def set_roster(self, infos: list[dict[str, Any]]) -> None:
        """The agents of the (re)loaded config, in order; known ones keep their conversation."""
        old = self.agents
        self.agents = {}
        for info in infos:
            agent = old.get(info["name"]) or AgentModel(str(info["name"]))
            agent.set_info(info)
            self.agents[agent.name] = agent
        self.changes.roster = True

    def load(self, snapshot: dict[str, Any]) -> None:
        """Everything as a `DeckService.Snapshot()` has it: the roster, each conversation, what waits
        for an answer. Agents already known keep what no snapshot holds (their log lines, the notices said on them)."""
        self.set_roster(snapshot["agents"])
        conversations = snapshot.get("conversations") or {}
        self.subagents.load(conversations)
        for name in self.agents:
            self.load_conversation(name, conversations.get(name) or {})
        for known in self.agents.values():
            known.pending.clear()
        self.asked = {}
        for ask in snapshot.get("pending") or []:  # in the order asked
            agent = self.agents.get(str(ask.get("agent")))
            if agent is not None and "id" in ask:
                agent.pending[str(ask["id"])] = (str(ask.get("kind")), {k: v for k, v in ask.items() if k != "kind"})
                self._ask_order(str(ask["id"]))
        self.changes.asks = True

    def load_conversation(self, name: str, snapshot: dict[str, Any]) -> None:
        agent = self.agents[name]
        agent.messages.clear()
        agent.by_id.clear()
        for data in snapshot.get("messages") or []:
            agent.add_message(data)
        agent.queued = int(snapshot.get("queued") or 0)
        agent.usage = dict(snapshot.get("usage") or {"used": 0, "size": 0})
        agent.commands = _commands(snapshot.get("commands"))
        self.changes.roster = True

    def set_worktrees(self, rows: list[dict[str, Any]]) -> None:
        """The changed files of each agent's worktree, as `WorktreeService.List` has them."""
        for row in rows:
            agent = self.agents.get(str(row.get("agent")))
            if agent is not None and isinstance(row.get("changedFiles"), int):
                agent.changed_files = row["changedFiles"]
                self.changes.agents.add(agent.name)

    def set_folders(self, folders: dict[str, str]) -> None:
        """The folder each agent works in (`paths.agent_folders`): its tool calls are shown again
        where it changed, their paths beneath it relative to it."""
        for agent in self.agents.values():
            folder = folders.get(agent.name, "")
            if folder != agent.folder:
                agent.folder = folder
                self.changes.folders.add(agent.name)
                for message in agent.messages:
                    self.changes.message(agent.name, message.id)

    def set_sandboxes(self, rows: list[dict[str, Any]]) -> None:
        """The sandbox of each agent, as `AgentService.List` rows have them."""
        for row in rows:
            agent = self.agents.get(str(row.get("name"))) if isinstance(row, dict) else None
            if agent is not None:
                agent.set_sandbox(row.get("sandbox"))
                self.changes.agents.add(agent.name)

    def pending(self) -> list[tuple[str, dict[str, Any]]]:
        """Every pending ask as ("permission" | "question", payload), of every agent, the oldest first."""
        asks = [ask for agent in self.agents.values() for ask in agent.pending.values()]
        return sorted(asks, key=lambda ask: self.asked.get(str(ask[1].get("id")), 0))

    def _ask_order(self, ask_id: str) -> None:
        """Ask `ask_id` came now: it goes after every ask pending."""
        self._asks += 1
        self.asked[ask_id] = self._asks

    # -- events ---------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        self.dispatch(event)
        marks = PLUGIN_MARKS.get(event.name)
        if marks is not None:
            payload = event.payload()
            if isinstance(payload, dict):
                marks(self, payload)

    def _agent(self, name: str) -> AgentModel | None:
        return self.agents.get(name)

    @handles(AgentStateChanged)
    def _agent_state(self, e: AgentStateChanged) -> None:
        agent = self._agent(e.agent)
        if agent is None:
            return
        agent.state = e.state
        agent.error = e.error
        agent.outdated = bool(e.outdated)
        self.changes.agents.add(agent.name)

    @handles(Notice)
    def _notice(self, e: Notice) -> None:
        """A sticky notice stays on its agent until its source says "" for it; one said in passing on
        an agent is kept beside its conversation (an alert is rung, not kept)."""
        agent = self._agent(e.agent) if e.agent is not None else None
        if agent is None:
            return
        if not e.sticky:
            if e.source == AGENT_NOTICE:  # the agent's own notice: its conversation's note shows it
                return
            if e.text and not (e.bell or e.desktop):
                agent.said.append({"source": e.source, "level": e.level, "text": e.text, "at": time.strftime("%H:%M:%S")})
                self.changes.side.add(agent.name)
            return
        if e.text:
            if agent.notices.get(e.source) == (e.level, e.text):
                return  # said again (the budget plugin does, at each message refused)
            agent.notices[e.source] = (e.level, e.text)
        elif agent.notices.pop(e.source, None) is None:
            return
        self.changes.agents.add(agent.name)

    @handles(ConversationChanged)
    def _conversation_changed(self, e: ConversationChanged) -> None:
        agent = self._agent(e.agent)
        if agent is not None and e.field == "commands":
            agent.commands = _commands(e.value)

    @handles(AgentLog)
    def _agent_log(self, e: AgentLog) -> None:
        agent = self._agent(e.agent)
        if agent is not None:
            agent.logs.append(str(e.line))

    @handles(MessageUpdated)
    def _message_updated(self, e: MessageUpdated) -> None:
        agent = self._agent(e.agent)
        message = e.message
        if agent is not None and isinstance(message, dict) and "id" in message:
            agent.add_message(message)
            self.changes.message(agent.name, str(message["id"]))

    @handles(SubagentChanged)
    def _subagent_changed(self, e: SubagentChanged) -> None:
        """A child announced or changed; renamed, its messages' heads are drawn again."""
        agent = self._agent(e.agent)
        known = self.subagents.child(e.agent, e.session)
        renamed = known is not None and known.get("title") != e.title
        self.subagents.changed(e)
        if agent is not None and renamed:  # a new child has no message yet; a state change redraws none
            for message in agent.messages:
                if message.session == e.session or e.session in (message.sender, message.recipient):
                    self.changes.message(agent.name, message.id)

    @handles(MessageDelta)
    def _message_delta(self, e: MessageDelta) -> None:
        agent = self._agent(e.agent)
        if agent is None:
            return
        message = agent.by_id.get(str(e.message_id))
        if message is None:
            message = agent.add_message({"id": e.message_id, "role": "agent", "done": False, "session": e.session})
        message.delta(int(e.index), str(e.kind), e.text, e.part)
        self.changes.message(agent.name, message.id)

    @handles(TerminalOutput, TerminalExited)
    def _terminal(self, e: TerminalOutput | TerminalExited) -> None:
        """A command's output or end, on the tool part that embeds its terminal (if one does yet: else
        the part brings what came so far when it arrives)."""
        agent = self._agent(e.agent)
        if agent is None:
            return
        for message in reversed(agent.messages[-TERMINAL_SEARCH:]):
            for part in message.parts:
                entries = part.data.get("terminals") if part.type == "tool" else None
                if not isinstance(entries, list) or not any(
                    isinstance(t, dict) and t.get("terminalId") == e.terminal_id for t in entries
                ):
                    continue
                # A new dict: in the same process the old one may be the core's own.
                part.data = {**part.data, "terminals": [_with(t, e) for t in entries]}
                self.changes.message(agent.name, message.id)
                return

    @handles(TurnChanged)
    def _turn_changed(self, e: TurnChanged) -> None:
        agent = self._agent(e.agent)
        if agent is not None:
            agent.queued = int(e.queued or 0)
            self.changes.agents.add(agent.name)

    @handles(UsageChanged)
    def _usage_changed(self, e: UsageChanged) -> None:
        agent = self._agent(e.agent)
        if agent is not None and isinstance(e.usage, dict):
            agent.usage = e.usage
            self.changes.agents.add(agent.name)

    @handles(PermissionRequested, QuestionRequested)
    def _requested(self, e: PermissionRequested | QuestionRequested) -> None:
        agent = self._agent(e.agent)
        if agent is not None:
            agent.pending[str(e.id)] = ("permission" if isinstance(e, PermissionRequested) else "question", e.payload())
            self._ask_order(str(e.id))
            self.changes.agents.add(agent.name)
            self.changes.asks = True

    @handles(PermissionResolved, QuestionResolved)
    def _resolved(self, e: PermissionResolved | QuestionResolved) -> None:
        agent = self._agent(e.agent)
        self.asked.pop(str(e.id), None)
        if agent is not None and agent.pending.pop(str(e.id), None) is not None:
            self.changes.agents.add(agent.name)
            self.changes.asks = True

    # -- plugins' marks, by their events' wire names (PLUGIN_MARKS) ----------------------------

    def _worktree_changed(self, payload: dict[str, Any]) -> None:
        """`worktree:changed {agent, changedFiles, …}`: the files its worktree changes against its base."""
        agent = self._agent(str(payload.get("agent")))
        count = payload.get("changedFiles")
        if agent is not None and isinstance(count, int) and not isinstance(count, bool):
            agent.changed_files = count
            self.changes.agents.add(agent.name)

    def _worktree_overlap(self, payload: dict[str, Any]) -> None:
        """`worktree:overlap {agents, files, count}`: each of the two agents' overlap with the other,
        kept, or dropped once cleared (`count` 0)."""
        agents, files, count = payload.get("agents"), payload.get("files"), payload.get("count")
        if not isinstance(agents, list) or len(agents) != 2 or not isinstance(count, int):
            return
        first, second = (str(name) for name in agents)
        shared = frozenset(str(file) for file in files) if isinstance(files, list) else frozenset()
        for name, other in ((first, second), (second, first)):
            agent = self._agent(name)
            if agent is None:
                continue
            if count:
                agent.overlaps[other] = (count, shared)
            elif agent.overlaps.pop(other, None) is None:
                continue
            self.changes.agents.add(agent.name)

    def _ask_changed(self, payload: dict[str, Any]) -> None:
        """`ask:changed {requester, target, ticketId, active}`: the mark on the target lasts from the
        ask's start to its final."""
        target = self._agent(str(payload.get("target")))
        if target is None:
            return
        ticket = str(payload.get("ticketId"))
        if payload.get("active") is True:
            target.asks[ticket] = str(payload.get("requester"))
        elif target.asks.pop(ticket, None) is None:
            return
        self.changes.agents.add(target.name)
        self.changes.side.add(target.name)


#: The plugins' events the panel keeps marks of, by wire name: what each does with its payload.
#: An event of a plugin that is off never comes; one whose payload lacks what is read changes nothing.
PLUGIN_MARKS: dict[str, Callable[[Model, dict[str, Any]], None]] = {
    "worktree:changed": Model._worktree_changed,
    "worktree:overlap": Model._worktree_overlap,
    "ask:changed": Model._ask_changed,
}


def _with(entry: Any, e: TerminalOutput | TerminalExited) -> Any:
    """A terminal entry of a tool part with the event's output or exit status in it."""
    if not isinstance(entry, dict) or entry.get("terminalId") != e.terminal_id:
        return entry
    if isinstance(e, TerminalOutput):
        return {**entry, "output": (str(entry.get("output") or "") + str(e.text))[-TERMINAL_TAIL:]}
    return {**entry, "exitStatus": e.exit_status}


def _commands(value: Any) -> dict[str, str]:
    """An agent's slash commands as the wire says them, by name (junk left out)."""
    return {
        str(c["name"]): str(c.get("description") or "")
        for c in value or []
        if isinstance(c, dict) and isinstance(c.get("name"), str) and c["name"] and " " not in c["name"]
    }
