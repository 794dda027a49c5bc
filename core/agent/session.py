"""One ACP session of a running agent, and the sink its owner reads it through.

Every agent has its conversation's session (opened in its handshake, origin
CONVERSATION); a plugin opens more with `Agent.open_session(sink, origin)` (an
inter-agent ask answers in a session of its own). Either way the owner prompts it,
cancels it and closes it here, and its updates go to the owner's sink. What the agent
asks the user during the session (permissions, questions) goes to the deck's pending
requests (`pending.py`), described with the tool calls this session has seen.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from deck.acp.updates import tool_id, tool_part
from deck.errors import ConnectionClosed, ServiceError

if TYPE_CHECKING:
    from deck.acp.connection import Connection
    from deck.agent.agent import Agent

#: The origin of an agent's own conversation session; other sessions are named by their opener.
CONVERSATION = "conversation"
#: After the owner gives up on a prompt, how long the agent has to end its turn before it is let go.
CANCEL_GRACE = 2.0
TOOL_UPDATES = frozenset({"tool_call", "tool_call_update"})
#: What a replayed history is made of (`session/load`): the rest of a replay (commands, modes, the
#: title…) describes the session as it is now, and is kept for the owner.
REPLAYED = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk", "plan", *TOOL_UPDATES})
#: The updates of that rest kept before the owner attaches; an agent that sends more loses the oldest.
MAX_HELD = 256
#: The subagent sessions one session's family may hold (children, their children…); more are dropped.
MAX_CHILDREN = 10_000
#: The characters a session id the agent gives may have (a new session's, a fork's, a subagent's).
SESSION_ID_MAX = 200


class SessionSink(Protocol):
    """What a session's owner hears: every `session/update` of the session, in order.

    A sink may also have `message_id() -> str`: the owner's message a permission request
    or question belongs to (its `messageId`); "" when it has none."""

    def on_update(self, update: dict[str, Any]) -> None: ...


class Session:
    """One ACP session: `open`, then `attach` a sink; `prompt`, `cancel`, `request`; `close` when done."""

    def __init__(self, agent: Agent, origin: str = CONVERSATION) -> None:
        self.agent = agent
        #: What the session serves: CONVERSATION, or the name its opener gave it (a plugin's ticket).
        self.origin = origin
        self.id: str | None = None
        #: The `session/new` result (modes, config options).
        self.result: dict[str, Any] = {}
        self.closed = False
        #: Why this conversation session is a new one, when the earlier one could not go on ("" else).
        self.restarted = ""
        self._conn: Connection | None = agent.conn  # the connection it lives on: a restart opens new sessions
        #: The sink's `on_update`, once attached.
        self.on_update: Callable[[dict[str, Any]], None] = _ignore
        self._message_id: Callable[[], str] = _no_message
        self._tools: dict[str, tuple[int, dict[str, Any]]] = {}  # tool call id → (prompt number, part)
        self._prompts = 0
        self._held: deque[dict[str, Any]] = deque(maxlen=MAX_HELD)  # a replay's other updates, for the sink
        self._sink: SessionSink | None = None
        #: A subagent session (ACP `subagent_update`): the session that announced it, else None.
        self.parent: Session | None = None
        #: The session at the top of its family (itself unless it is a subagent's), and below it
        #: every subagent session of that family, in the order announced.
        self.root: Session = self
        self.descendants: list[Session] = []
        self._said_full = False

    # -- opening ------------------------------------------------------------------------------

    async def open(self) -> None:
        """`session/new` in the agent's cwd, with the MCP servers the plugins give this session."""
        conn = self._connection()
        servers = self.agent.deck.hooks.session_mcp_servers(self.agent, self)
        params = {"cwd": self.agent.cwd, "mcpServers": servers, **self.agent.session_directories()}
        result = await conn.request("session/new", params)
        self.id, self.result = self._fresh_id("session/new", result), result

    async def fork(self, session_id: str) -> None:
        """`session/fork` of `session_id`: a new session of the agent's that starts with that one's
        context, in the agent's cwd, with the MCP servers the plugins give this session."""
        conn = self._connection()
        result = await conn.request("session/fork", self._continued(session_id))
        self.id, self.result = self._fresh_id("session/fork", result), result

    def _fresh_id(self, method: str, result: Any) -> str:
        """The id of the session a `session/new` or `session/fork` answer made: refused when it is
        missing, longer than SESSION_ID_MAX, or the id of a session the agent has open already (its
        conversation's, an ask's, a subagent's), whose updates and requests it would take over."""
        session_id = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(session_id, str) or not session_id:
            raise ServiceError(f"{method} returned no sessionId")
        if len(session_id) > SESSION_ID_MAX:
            why = f"{method} returned a sessionId of {len(session_id)} characters: deck takes {SESSION_ID_MAX} at most"
            raise ServiceError(why)
        if session_id in self.agent.sessions:
            raise ServiceError(f"{method} returned the id of a session open already, {session_id!r}: refused")
        return session_id

    async def resume(self, session_id: str) -> None:
        """`session/resume`: the agent serves `session_id` again, remembering it, and replays nothing.

        Some agents replay the history all the same (fast-agent's resume is its load): the owner
        holds it already, so it is dropped, as for `load`."""
        await self.load(session_id, method="session/resume")

    async def load(self, session_id: str, replay: SessionSink | None = None, method: str = "session/load") -> None:
        """`session/load`: the agent serves `session_id` again and replays its history as updates.

        When the owner already holds that history the replay goes nowhere: until the answer the
        session is routed to the agent with no sink (the replayed messages are dropped; tool calls
        are still tracked, as a permission request may name one; the other updates, such as the
        commands, are held for the sink). When it does not (a session the agent kept, opened in
        deck for the first time), the replay goes to `replay`. On an error answer the session is
        detached, so that the rest of a replay is dropped too."""
        conn = self._connection()
        self.id = session_id
        self.on_update = replay.on_update if replay is not None else self._hold
        self.agent.attach(self)  # before the request: the replay comes before its answer
        try:
            result = await conn.request(method, self._continued(session_id))
        except BaseException:
            self.agent.detach(self)
            self.id, self.on_update = None, _ignore
            raise
        self.result = {**(result if isinstance(result, dict) else {}), "sessionId": session_id}

    def _continued(self, session_id: str) -> dict[str, Any]:
        servers = self.agent.deck.hooks.session_mcp_servers(self.agent, self)
        return {"sessionId": session_id, "cwd": self.agent.cwd, "mcpServers": servers, **self.agent.session_directories()}

    def attach(self, sink: SessionSink) -> None:
        """Send the session's updates to `sink` from now on, those that came before the reply first."""
        assert self.id is not None, "open the session first"
        self.on_update = sink.on_update
        self._message_id = getattr(sink, "message_id", _no_message)
        self._sink = sink
        held, self._held = self._held, deque(maxlen=MAX_HELD)
        for update in held:
            sink.on_update(update)
        self.agent.attach(self)

    def receive(self, update: dict[str, Any]) -> None:
        """One `session/update` of this session (the agent routes it here; on the hot path it
        does the same itself, `track` then `on_update`, a call less per streamed chunk). One whose
        `sessionUpdate` is no string is no update of any kind: logged and skipped."""
        kind = update.get("sessionUpdate")
        if not isinstance(kind, str):
            self.agent.log(f"deck: session/update whose sessionUpdate is no string ({type(kind).__name__}), skipped")
            return
        if kind in TOOL_UPDATES:
            self.track(update)
        elif kind == "subagent_update":
            self.adopt(update)
        self.on_update(update)

    def adopt(self, update: dict[str, Any]) -> None:
        """A `subagent_update` on this session: the child session it announces, new, becomes one of
        the agent's (routed to the child sink the family's sink gives it), so that its updates,
        permission requests and questions find their way. One announced before stays as it is (the
        owner patches what it knows of it); an id that is some other session's is refused."""
        child_id = update.get("sessionId")
        agent = self.agent
        if not isinstance(child_id, str) or not child_id or len(child_id) > SESSION_ID_MAX:
            agent.log(f"deck: subagent_update with no usable sessionId, skipped: {str(child_id)[:100]}")
            return
        known = agent.sessions.get(child_id)
        if known is not None:
            if known.root is not self.root:
                agent.log(f"deck: subagent_update names session {child_id[:100]!r}, another family's: skipped")
            return
        root = self.root
        if len(root.descendants) >= MAX_CHILDREN:
            if not root._said_full:
                root._said_full = True
                agent.log(f"deck: more than {MAX_CHILDREN} subagent sessions: the others are dropped")
            return
        child = Session(agent, self.origin)
        child.id, child.parent, child.root, child._conn = child_id, self, root, self._conn
        make = getattr(self._sink, "child", None)
        if make is not None:
            child.attach(make(child_id))
        else:  # a session whose owner keeps no children (an ask): routed, so nothing waits for it
            child.on_update = _ignore
            agent.attach(child)
        root.descendants.append(child)

    # -- using --------------------------------------------------------------------------------

    async def prompt(self, text: str) -> dict[str, Any]:
        """One prompt turn; the result object (`stopReason`, `usage`), {} when the agent sent none.

        Raises ConnectionClosed when the agent stops, AcpError when it answers an error, ServiceError
        when a plugin refuses a prompt outside the conversation (a budget reached). When the
        caller is cancelled, what the session asked the user is cancelled, the agent gets
        `session/cancel` and CANCEL_GRACE seconds to end the turn (it stays busy until then)."""
        conn = self._connection()
        if self.origin != CONVERSATION:  # the conversation's messages were checked as they were sent
            self.agent.deck.before_session_prompt(self, text)
        self._prompts += 1
        request = conn.start_request("session/prompt", {"sessionId": self.id, "prompt": [{"type": "text", "text": text}]})
        try:
            result = await asyncio.shield(request)
        except asyncio.CancelledError:
            if not request.done():
                self._cancel_requests()
                self.cancel()
                with contextlib.suppress(Exception, TimeoutError):
                    await asyncio.wait_for(request, CANCEL_GRACE)
            elif not request.cancelled():
                request.exception()  # its end is nobody's now: retrieved, so it is not logged as lost
            raise
        return result if isinstance(result, dict) else {}

    def cancel(self) -> None:
        """`session/cancel`: the agent ends the turn in progress (nothing happens once it stopped)."""
        if self._conn is not None and self.id is not None:
            with contextlib.suppress(ConnectionClosed):
                self._conn.notify("session/cancel", {"sessionId": self.id})

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Any other request about this session (`session/set_mode`…); `sessionId` is added."""
        return await self._connection().request(method, {"sessionId": self.id, **params})

    def close(self) -> None:
        """The owner is done: what the session (and its subagents') asked the user is cancelled, its
        late updates are dropped."""
        if self.closed:
            return
        self.closed = True
        self._cancel_requests()
        if self.id is not None:
            self.agent.detach(self)
        family, self.descendants = self.descendants, []
        for child in family:
            child.close()

    # -- what the agent asks ------------------------------------------------------------------

    def tool(self, tool_call_id: str) -> dict[str, Any] | None:
        """The tool call as the session's updates described it, to show with a permission request."""
        found = self._tools.get(tool_call_id)
        return found[1] if found else None

    def message_id(self) -> str:
        return self._message_id()

    @property
    def child_id(self) -> str | None:
        """A subagent session's id; None for a session of the agent's own."""
        return self.id if self.parent is not None else None

    def track(self, update: dict[str, Any]) -> None:
        """A `tool_call` or `tool_call_update`: what a permission request about it will show.
        As a conversation keeps its tool parts, an id reused in a later prompt starts afresh."""
        call_id = tool_id(update)
        known = self._tools.get(call_id)
        if known is not None and (update.get("sessionUpdate") != "tool_call" or known[0] == self._prompts):
            self._tools[call_id] = (known[0], tool_part(update, known[1]))
        else:
            self._tools[call_id] = (self._prompts, tool_part(update))

    def _cancel_requests(self) -> None:
        self.agent.deck.asks.cancel_from(self)

    def _connection(self) -> Connection:
        if self._conn is None or self.closed:
            raise ConnectionClosed(self.agent.error or "the agent is not running")
        return self._conn

    def _hold(self, update: dict[str, Any]) -> None:
        """An update of a replay nobody wants: dropped if it is of the history, else held for the sink."""
        kind = update.get("sessionUpdate")
        if isinstance(kind, str) and kind not in REPLAYED:
            self._held.append(update)


def _ignore(_update: dict[str, Any]) -> None:
    """Updates before a sink is attached are kept by the agent, not given here."""


def _no_message() -> str:
    return ""
