"""An agent's own sessions (ACP `session/list`), read from what it answers, which is untrusted:
at most MAX_SESSION_PAGES pages (a cursor seen before ends the list too), MAX_SESSIONS sessions
kept, malformed entries skipped, long strings cut."""

from __future__ import annotations

import asyncio
from typing import Any

from deck.acp.connection import Connection
from deck.errors import AcpError, ServiceError

#: `session/list` pages read at most, and the sessions kept of them: an agent that pages on forever is cut short.
MAX_SESSION_PAGES = 20
MAX_SESSIONS = 1000
#: The longest session id, title or time kept from a `session/list` answer (longer titles are cut).
MAX_SESSION_STRING = 200


def check_session_id(session_id: str) -> None:
    """Refuse a session id no agent gives: empty, or longer than a listing keeps (MAX_SESSION_STRING)."""
    if not session_id.strip():
        raise ServiceError("empty sessionId: name one of the agent's sessions")
    if len(session_id) > MAX_SESSION_STRING:
        raise ServiceError(f"sessionId too long: {len(session_id)} characters, at most {MAX_SESSION_STRING}")


async def list_sessions(conn: Connection, cwd: str, name: str, timeout: float) -> list[dict[str, Any]]:
    """The sessions agent `name` keeps in `cwd`, `[{sessionId, cwd, title, updatedAt}]` as it
    orders them; each page must come within `timeout` seconds."""
    sessions: dict[str, dict[str, Any]] = {}
    cursors: set[str] = set()
    cursor: str | None = None
    for _ in range(MAX_SESSION_PAGES):
        try:
            async with asyncio.timeout(timeout):
                page = await conn.request("session/list", {"cwd": cwd, **({"cursor": cursor} if cursor else {})})
        except TimeoutError:
            raise ServiceError(f"{name} did not answer session/list in time") from None
        except AcpError as exc:
            raise ServiceError(f"session/list failed: {exc}") from exc
        page = page if isinstance(page, dict) else {}
        found = page.get("sessions")
        for info in found if isinstance(found, list) else ():
            listed = session_info(info)
            if listed is not None and len(sessions) < MAX_SESSIONS:
                sessions.setdefault(listed["sessionId"], listed)
        cursor = page.get("nextCursor")
        if not isinstance(cursor, str) or not cursor or cursor in cursors or len(sessions) >= MAX_SESSIONS:
            break
        cursors.add(cursor)
    return list(sessions.values())


def session_info(info: Any) -> dict[str, Any] | None:
    """One `session/list` entry as deck gives it, or None when it has no usable id and cwd.

    A title is cut to MAX_SESSION_STRING characters; an id or a time longer than that is dropped
    (an id cut short would name another session)."""
    if not isinstance(info, dict):
        return None
    session_id, cwd, title, updated = (info.get(k) for k in ("sessionId", "cwd", "title", "updatedAt"))
    if not isinstance(session_id, str) or not session_id or len(session_id) > MAX_SESSION_STRING:
        return None
    if not isinstance(cwd, str):
        return None
    return {
        "sessionId": session_id,
        "cwd": cwd[:4096],
        "title": title[:MAX_SESSION_STRING] if isinstance(title, str) else None,
        "updatedAt": updated if isinstance(updated, str) and len(updated) <= MAX_SESSION_STRING else None,
    }
