"""Updates that come for a session before deck knows it: an agent may send `session/update`s
for a new session before its `session/new` reply. They are kept for the session's owner,
within bounds, and handed over when it attaches; an agent that invents session ids loses the
oldest ones' updates, and deck's memory stays bounded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Updates kept for a session id deck does not know yet (they come before the session/new reply).
MAX_EARLY_UPDATES = 1000
#: Unknown session ids kept at once. A start or an ask opens one session at a time: an agent
#: that invents ids loses the oldest ones' updates, and deck's memory stays bounded.
MAX_EARLY_SESSIONS = 16
#: What all unknown sessions' updates may hold together, counted as the lines they came in.
MAX_EARLY_BYTES = 4 * 1024 * 1024


class _Early:
    """The updates kept for one session id nobody has attached yet, and their size as sent."""

    __slots__ = ("full", "size", "updates")

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.size = 0
        self.full = False  # its own share is used up: said once


class EarlyUpdates:
    """One agent connection's early updates, by session id, oldest session first; `log` gets
    a line for each overflow (once, not once per update)."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.sessions: dict[str, _Early] = {}  # oldest first
        self.bytes = 0
        self.flood = False  # the oldest sessions' updates are being dropped: said once
        self.dropped = 0  # updates dropped so, said when a real session turns up

    def keep(self, session_id: str, update: dict[str, Any], size: int) -> None:
        """Before the session/new reply: kept for the session's owner, within bounds.

        At most MAX_EARLY_UPDATES per session, MAX_EARLY_SESSIONS sessions and
        MAX_EARLY_BYTES in all (the line's length: cheap, and it grows as the value
        does). Past the last two, the oldest sessions' updates go.
        """
        early = self.sessions.get(session_id)
        if early is None:
            early = self.sessions[session_id] = _Early()
        if len(early.updates) >= MAX_EARLY_UPDATES or early.size + size > MAX_EARLY_BYTES:
            if not early.full:
                early.full = True
                self.log(f"deck: more than {MAX_EARLY_UPDATES} updates or {MAX_EARLY_BYTES} bytes for unknown "
                         f"session {session_id!r}; dropping the rest")  # fmt: skip
            return
        early.updates.append(update)
        early.size += size
        self.bytes += size
        while len(self.sessions) > MAX_EARLY_SESSIONS or self.bytes > MAX_EARLY_BYTES:
            oldest = next(k for k in self.sessions if k != session_id)  # its own size is within the bound
            if not self.flood:
                self.flood = True
                self.log(f"deck: updates for more than {MAX_EARLY_SESSIONS} unknown sessions or {MAX_EARLY_BYTES} "
                         f"bytes; dropping the oldest sessions' updates, from {oldest!r} on")  # fmt: skip
            self.dropped += len(self.take(oldest))

    def take(self, session_id: str) -> list[dict[str, Any]]:
        """The updates kept for `session_id`, in order (none: []); they are kept no more."""
        early = self.sessions.pop(session_id, None)
        if early is None:
            return []
        self.bytes -= early.size
        return early.updates

    def flood_over(self) -> None:
        """A real session turned up: a flood of unknown ones is over, and said so."""
        if self.flood:
            self.log(f"deck: {self.dropped} update(s) for unknown sessions were dropped")
            self.flood, self.dropped = False, 0

    def clear(self) -> int:
        """Drop everything kept (the agent stopped); how many updates that was."""
        kept = sum(len(early.updates) for early in self.sessions.values())
        self.sessions.clear()
        self.bytes = 0
        return kept
