"""Helpers for conversation tests: send a prompt and wait for the agent's reply to it."""

from __future__ import annotations

from typing import Any

from deck.chat.conversation import Message
from deck.runtime.deck import Deck

from .conftest import Recorder


def reply_to(deck: Deck, user: Message, rec: Recorder) -> Message | None:
    """The agent message that answers `user`: replies are opened in the order prompts are sent."""
    conv = deck.chat.conversation(user.agent)
    prompted = [m for m in conv.messages if m.role == "user" and m.text_for_prompt and m.error != "cancelled"]
    opened = [
        u["message"]["id"]
        for u in rec.named("message:updated", user.agent)
        if u["message"]["role"] == "agent" and not u["message"]["done"]
        and not u["message"].get("session") and not u["message"].get("sender")  # a subagent's is no reply
    ]
    n = prompted.index(user)
    return conv.by_id[opened[n]] if len(opened) > n else None


async def wait_reply(deck: Deck, rec: Recorder, user: Message, timeout: float = 15.0) -> Message:
    def finished(_: Recorder) -> Message | None:
        reply = reply_to(deck, user, rec)
        return reply if reply is not None and reply.done else None

    return await rec.wait(finished, timeout)


async def ask(deck: Deck, rec: Recorder, text: str, agent: str = "a") -> Message:
    """Send `text` and return the finished reply."""
    return await wait_reply(deck, rec, deck.chat.turns.send(agent, text))


def deltas(rec: Recorder, message_id: str) -> list[dict[str, Any]]:
    return [d for d in rec.named("message:delta") if d["messageId"] == message_id]


def position(rec: Recorder, name: str, **match: Any) -> int:
    """Index in the event log of the first event `name` whose payload matches."""
    for index, event in enumerate(rec.events):
        if event.name == name and all(event.payload().get(k) == v for k, v in match.items()):
            return index
    raise AssertionError(f"no {name} event matching {match}")
