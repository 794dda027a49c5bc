"""The announcements plugin's events: registered through `deck_register_events`, so that `from_wire`
(a client reading them off the socket or the jsonl bridge) rebuilds them as these classes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from deck.events import Event


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


EVENTS = (AgentAnnouncement, AskChanged)
