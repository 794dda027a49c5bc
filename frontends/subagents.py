"""What a frontend knows of the agents' subagents, to name them where their work shows.

A subagent's messages are in its parent's conversation, marked with its `session`; the children
themselves come in the snapshot (each conversation's `children`) and as `subagent:changed` events.
Every frontend names a child the same way: its title, else its session id, nested under its agent
(`agent › child`), and a message between sessions as `sender → recipient`.
"""

from __future__ import annotations

from typing import Any

from deck.events import SubagentChanged

#: What joins an agent's name and its subagent's (line mode's `[agent › child]`).
NESTED = " › "


class Subagents:
    """Each agent's children by session id: `{title, parent, state}`; the agents' own sessions too."""

    def __init__(self) -> None:
        self._children: dict[tuple[str, str], dict[str, Any]] = {}
        self._own: dict[str, str] = {}  # agent → its conversation's session id

    def load(self, conversations: dict[str, Any]) -> None:
        """The snapshot's `conversations`: every agent's children, as a frontend starts."""
        self._children.clear()
        self._own.clear()
        for agent, conversation in conversations.items():
            for child in conversation.get("children") or []:
                self._add(agent, dict(child))

    def changed(self, event: SubagentChanged) -> bool:
        """Take a `subagent:changed`; True when the child is new or its title or state changed."""
        known = self._children.get((event.agent, event.session))
        self._add(event.agent, {"session": event.session, "parent": event.parent, "title": event.title,
                                "state": event.state, "cancel": event.cancel})  # fmt: skip
        return known is None or (known.get("title"), known.get("state")) != (event.title, event.state)

    def _add(self, agent: str, child: dict[str, Any]) -> None:
        self._children[(agent, str(child.get("session")))] = child
        parent = str(child.get("parent") or "")
        if (agent, parent) not in self._children:  # announced by the agent's own session
            self._own[agent] = parent

    def name(self, agent: str, session: str | None) -> str:
        """A session of `agent`'s as the user reads it: a child's title (else its id), the agent's own as the agent."""
        if not session or session == self._own.get(agent):
            return agent
        child = self._children.get((agent, session))
        return str((child or {}).get("title") or session)

    def label(self, agent: str, session: str | None) -> str:
        """Where a session's lines show: `agent`, or `agent › child`."""
        return agent if session is None else f"{agent}{NESTED}{self.name(agent, session)}"

    def between(self, agent: str, message: dict[str, Any]) -> str | None:
        """A message between sessions as `agent · sender → recipient`; None for any other message."""
        if not (message.get("sender") or message.get("recipient")):
            return None
        sender, recipient = (self.name(agent, message.get(k) or None) for k in ("sender", "recipient"))
        return f"{agent} · {sender} → {recipient}"

    def child(self, agent: str, session: str) -> dict[str, Any] | None:
        return self._children.get((agent, session))

    def depth(self, agent: str, session: str | None) -> int:
        """How deep a session nests: 0 for the agent's own, 1 for its child, 2 for a child's child…"""
        depth, seen = 0, set()
        while session and session not in seen and session != self._own.get(agent):
            seen.add(session)
            depth += 1
            child = self._children.get((agent, session))
            session = child.get("parent") if child else None
        return depth
