"""What the console shows, folded from event payloads (no urwid here): agents, messages, asks
(permission requests and questions).

Every `apply(event)` updates the model and records what changed, so the screen rebuilds
only those pieces at its next frame, however many events arrived in between.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from deck.agent import LOG_LINES  # the core keeps as many stderr lines per agent (Logs)
from deck.conversation import TextPart

ANNOUNCEMENTS = 20


class Part(TextPart):
    """One part of a message as the wire shows it (`data`); streamed text joins like the core's parts."""

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]) -> None:
        text = data.get("text")
        super().__init__(str(data.get("type", "text")), text if isinstance(text, str) else "")
        self.data = data


class MessageModel:
    """A message as its last `message:updated` said, plus the deltas since."""

    __slots__ = ("id", "role", "parts", "done", "queued", "stop_reason", "error", "code")

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
    busy: bool = False
    queued: int = 0
    usage: dict[str, Any] = field(default_factory=lambda: {"used": 0, "size": 0})
    messages: list[MessageModel] = field(default_factory=list)
    by_id: dict[str, MessageModel] = field(default_factory=dict)
    permissions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Pending `question:requested` payloads, by question id.
    questions: dict[str, dict[str, Any]] = field(default_factory=dict)
    logs: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    #: Announcements this agent received as the requester of an ask (newest last).
    announcements: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=ANNOUNCEMENTS))
    #: Requesters currently talking to this agent, by ticket id.
    asks: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> AgentModel:
        agent = cls(str(info["name"]))
        agent.set_info(info)
        return agent

    def set_info(self, info: dict[str, Any]) -> None:
        self.title = str(info.get("title") or self.name)
        self.icon = str(info.get("icon") or self.name[:1].upper())
        self.description = str(info.get("description") or "")
        self.state = str(info.get("state", self.state))
        self.error = info.get("error")
        self.outdated = bool(info.get("outdated", False))

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
    def needs_input(self) -> bool:
        return bool(self.permissions or self.questions)


@dataclass
class Changes:
    """What changed since the last frame."""

    agents: set[str] = field(default_factory=set)  # rows of the agents panel
    messages: dict[str, set[str]] = field(default_factory=dict)  # agent → message ids
    asks: bool = False  # permission requests or questions came or went
    roster: bool = False  # agents added, removed or reordered
    announcements: set[str] = field(default_factory=set)

    def message(self, agent: str, message_id: str) -> None:
        self.messages.setdefault(agent, set()).add(message_id)


class Model:
    """Every agent the console knows, in config order, and the changes not yet drawn."""

    def __init__(self) -> None:
        self.agents: dict[str, AgentModel] = {}
        self.changes = Changes()

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

    def load_conversation(self, name: str, snapshot: dict[str, Any]) -> None:
        agent = self.agents[name]
        agent.messages.clear()
        agent.by_id.clear()
        for data in snapshot.get("messages") or []:
            agent.add_message(data)
        agent.busy = bool(snapshot.get("busy"))
        agent.queued = int(snapshot.get("queued") or 0)
        agent.usage = dict(snapshot.get("usage") or agent.usage)
        agent.permissions = {p["id"]: p for p in snapshot.get("permissions") or [] if "id" in p}
        self.changes.roster = True

    def pending(self) -> list[tuple[str, dict[str, Any]]]:
        """Every pending ask as ("permission" | "question", payload): agents in config order,
        each agent's permission requests then its questions, oldest first."""
        out: list[tuple[str, dict[str, Any]]] = []
        for agent in self.agents.values():
            out += [("permission", p) for p in agent.permissions.values()]
            out += [("question", q) for q in agent.questions.values()]
        return out

    # -- events ---------------------------------------------------------------------------

    def apply(self, name: str, payload: dict[str, Any]) -> None:
        handler = getattr(self, "_on_" + name.replace(":", "_"), None)
        if handler is not None:
            handler(payload)

    def _agent(self, payload: dict[str, Any], key: str = "agent") -> AgentModel | None:
        return self.agents.get(str(payload.get(key)))

    def _on_agent_state(self, p: dict[str, Any]) -> None:
        agent = self._agent(p)
        if agent is None:
            return
        agent.state = p.get("state", agent.state)
        agent.error = p.get("error")
        agent.outdated = bool(p.get("outdated"))
        self.changes.agents.add(agent.name)

    def _on_agent_log(self, p: dict[str, Any]) -> None:
        agent = self._agent(p)
        if agent is not None:
            agent.logs.append(str(p.get("line", "")))

    def _on_message_updated(self, p: dict[str, Any]) -> None:
        agent = self._agent(p)
        message = p.get("message")
        if agent is not None and isinstance(message, dict) and "id" in message:
            agent.add_message(message)
            self.changes.message(agent.name, str(message["id"]))

    def _on_message_delta(self, p: dict[str, Any]) -> None:
        agent = self._agent(p)
        if agent is None:
            return
        message = agent.by_id.get(str(p.get("messageId")))
        if message is None:
            message = agent.add_message({"id": p.get("messageId"), "role": "agent", "done": False})
        message.delta(int(p.get("index", 0)), str(p.get("kind", "text")), p.get("text"), p.get("part"))
        self.changes.message(agent.name, message.id)

    def _on_turn_changed(self, p: dict[str, Any]) -> None:
        agent = self._agent(p)
        if agent is not None:
            agent.busy = bool(p.get("busy"))
            agent.queued = int(p.get("queued") or 0)
            self.changes.agents.add(agent.name)

    def _on_usage_changed(self, p: dict[str, Any]) -> None:
        agent = self._agent(p)
        if agent is not None and isinstance(p.get("usage"), dict):
            agent.usage = p["usage"]
            self.changes.agents.add(agent.name)

    def _on_permission_requested(self, p: dict[str, Any]) -> None:
        agent = self._agent(p)
        if agent is not None:
            agent.permissions[str(p["id"])] = p
            self.changes.agents.add(agent.name)
            self.changes.asks = True

    def _on_permission_resolved(self, p: dict[str, Any]) -> None:
        agent = self._agent(p)
        if agent is not None and agent.permissions.pop(str(p.get("id")), None) is not None:
            self.changes.agents.add(agent.name)
            self.changes.asks = True

    def _on_question_requested(self, p: dict[str, Any]) -> None:
        agent = self._agent(p)
        if agent is not None and "id" in p:
            agent.questions[str(p["id"])] = p
            self.changes.agents.add(agent.name)
            self.changes.asks = True

    def _on_question_resolved(self, p: dict[str, Any]) -> None:
        agent = self._agent(p)
        if agent is not None and agent.questions.pop(str(p.get("id")), None) is not None:
            self.changes.agents.add(agent.name)
            self.changes.asks = True

    def _on_agent_announcement(self, p: dict[str, Any]) -> None:
        requester = self._agent(p, "requester")
        if requester is not None:
            requester.announcements.append(p)
            self.changes.announcements.add(requester.name)

    def _on_ask_changed(self, p: dict[str, Any]) -> None:
        """The overlay on the target lasts from the ask's start to its final."""
        target = self._agent(p, "target")
        if target is None:
            return
        if p.get("active"):
            target.asks[str(p.get("ticketId"))] = str(p.get("requester"))
        else:
            target.asks.pop(str(p.get("ticketId")), None)
        self.changes.agents.add(target.name)
        self.changes.announcements.add(target.name)
