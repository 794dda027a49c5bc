"""The notify plugin's event, registered through `deck_register_events`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from deck.events import Event


@dataclass(frozen=True, slots=True)
class NotifySent(Event):
    """The user was told of a moment: `what` is input, error, budget or done, `title` says what it
    is about (the inbox's words). Attached terminal frontends ring the bell when `bell` is true and
    show a terminal notification (OSC 777 and OSC 9) when `desktop` is true."""

    name: ClassVar[str] = "notify:sent"
    agent: str
    what: str
    title: str
    bell: bool
    desktop: bool


EVENTS = (NotifySent,)
