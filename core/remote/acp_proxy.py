"""`deck acp`'s translator: one ACP client's connection, deck speaking as its agent, mapped onto a
deck's services and events (SPEC §23). The same for `deck acp AGENT` on stdio and `/acp` on the web
server: each hands it the bytes it reads (`feed`, or `handle_line` for a message of its own) and a way
to write, and gives it every event of the deck through `on_event`.

    initialize                      protocol 1, deck and AGENT named, what deck's history serves
    session/new, load, resume       ChatService.NewConversation (stored), OpenConversation; the agent started
    session/list, close             ChatService.History; the session forgotten (its turn cancelled)
    session/prompt                  ChatService.Send; answered when the turn it started ends
    session/cancel                  ChatService.Unqueue (a prompt still waiting) or ChatService.Cancel
    session/set_config_option, set_mode   ChatService.SetConfigOption, SetMode
    deck's events                   session/update (acp_shapes.py); permission requests and questions
                                    asked of the client too, the first answer from anywhere winning

An ACP session is one of the agent's conversations: its id is the stored conversation's (without
history, one made up for the connection). The agent has one current conversation (§6); a prompt to
another session of the client's makes that one current first (`OpenConversation`, with the agent
named: another agent's conversation is never opened), and the events of the agent's conversation go
to the session it is.

The client is untrusted: each line is decoded within bounds (`MAX_LINE_BYTES`, the depth of
`decode_line`), a line that is no request gets its JSON-RPC error, an unknown method -32601, bad
params -32602, and at most MAX_REQUESTS requests are served at once (one more is refused at once,
for a cost that does not grow with what waits). Writes never wait: each turn of the event loop's
output goes in one write, a streamed answer's chunks joined into one update per part; while the
client does not read, output is held and chunks go on being joined (`acp_output.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from deck import _version
from deck.acp.connection import PROTOCOL_VERSION, Connection, LineFramer, TooDeep, decode_line, encode_line
from deck.client import Client
from deck.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    RESOURCE_NOT_FOUND,
    SERVER_ERROR,
    AcpError,
    ServiceError,
)
from deck.events import (
    ConversationChanged,
    ConversationReset,
    Event,
    Handlers,
    MessageDelta,
    MessageUpdated,
    PermissionRequested,
    PermissionResolved,
    QuestionRequested,
    QuestionResolved,
    SubagentChanged,
    UsageChanged,
    from_wire,
    handles,
)
from deck.remote import acp_shapes as shapes
from deck.remote.acp_output import Output

log = logging.getLogger(__name__)

#: The longest line (one message) read from the client: far above any prompt a person types.
MAX_LINE_BYTES = 16 * 1024 * 1024
#: Requests of the client's served at once; one more is refused at once (a flood waits nowhere).
MAX_REQUESTS = 64
#: Messages between sessions whose chunks are known (the oldest forgotten first).
MAX_BETWEEN = 1_000
#: How long a cancel waits for the prompt it cancels to be sent, when it comes first.
SEND_SECONDS = 10.0
#: A page of `session/list`.
PAGE = 100
#: The prompts' outcomes, user ids and similar remembered for turns the client may still ask about.
REMEMBERED = 256


@dataclass
class Turn:
    """A prompt of the client's: its user message once Send answered, its reply once it began."""

    session: str
    done: asyncio.Future[dict[str, Any]]
    user_id: str | None = None
    reply_id: str | None = None
    sent: asyncio.Event = field(default_factory=asyncio.Event)  # Send answered (or failed)


@dataclass
class Replies:
    """Which agent message answers which user message: the user message sent last (not queued)
    is the one the next agent message that opens answers."""

    last_user: str | None = None
    of: dict[str, str] = field(default_factory=dict)  # reply id → user message id
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)  # user message id → how its turn ended


class AcpProxy(Handlers):
    """One ACP client of a deck, for one agent (see the module)."""

    def __init__(
        self,
        client: Client,
        agent: str,
        write: Callable[[bytes], None],
        *,
        backlog: Callable[[], int] = lambda: 0,
        on_close: Callable[[str], None] = lambda why: None,
        on_backlog: Callable[[bool], None] = lambda full: None,
        cwd: str = "/",
    ) -> None:
        self.client = client
        self.agent = agent
        self._on_close = on_close
        self.cwd = cwd
        self.closed = ""
        self.out = Output(
            write, backlog=backlog, on_backlog=on_backlog,
            on_overflow=lambda: self.close("the ACP client stopped reading: closed with its output held"),
        )  # fmt: skip
        self.conn = Connection(self.out.line, on_bad_line=self._bad_line, spawn=self._spawn)
        self.framer = LineFramer(self.handle_line, self._too_long, MAX_LINE_BYTES)
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        self._register()
        # Sessions: the client's, and the one whose conversation is the agent's current one.
        self.client_caps: dict[str, Any] = {}
        #: The subagent sessions told to the client (it declared `subagents`): their updates are its too.
        self._children: set[str] = set()
        #: Messages between sessions (their ids → sender and recipient), and the agent's own session in
        #: deck (the parent of its first children), said as the client's session when a message names it.
        self._between: dict[str, tuple[str, str]] = {}
        self._between_told: dict[str, int] = {}  # how much the client was told of each (upserts and chunks)
        self._compactions: dict[str, shapes.Told] = {}  # what the client was told of each compaction, by session and id
        self._notices: dict[str, None] = {}  # the agent's notices told (ids of their messages)
        self._agent_session = ""
        self.history = False
        self.sessions: set[str] = set()
        self.current: str | None = None
        self._turns: list[Turn] = []
        self._replies = Replies()
        self._sending: list[str] = []  # texts of the client's prompts sent, their message ids not known yet
        self._mine: dict[str, None] = {}  # user message ids of the client's prompts (dicts: oldest first)
        self._told: dict[str, None] = {}  # user message ids of other clients' prompts told to the client
        self._asked: dict[str, asyncio.Future[Any]] = {}  # deck's request id → the client's answer
        self._user_ids: dict[str, None] = {}
        self._tools: set[str] = set()  # tool ids announced in the current session
        #: `initialize`'s outcome, once the client sent it.
        self._initialized: asyncio.Future[None] | None = None

    # -- the client's lines in ---------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Bytes the client wrote (a stream of lines)."""
        self.framer.feed(data)

    def handle_line(self, raw: bytes) -> None:
        """One message of the client's (a line, or a WebSocket frame): answered, or refused with its error."""
        if self.closed:
            return
        try:
            message = decode_line(raw.decode(errors="replace"))
        except TooDeep as exc:
            self._error(None, PARSE_ERROR, f"refused: {exc}")
            return
        except ValueError as exc:
            if raw.strip():
                self._error(None, PARSE_ERROR, f"not JSON: {exc}")
            return
        if not isinstance(message, dict):
            why = "JSON-RPC batches are not served" if isinstance(message, list) else "a message must be a JSON object"
            self._error(None, INVALID_REQUEST, why)
            return
        if "method" in message and "id" in message and len(self._tasks) >= MAX_REQUESTS:
            request_id = message["id"] if isinstance(message["id"], (int, str)) else None
            self._error(request_id, SERVER_ERROR, f"too many requests at once: deck serves {MAX_REQUESTS} at a time")
            return
        try:
            self.conn.dispatch(message)
        except Exception:  # a bug must not end the connection
            log.exception("deck acp: error while handling %s", str(message)[:200])

    def _too_long(self, size: int) -> None:
        self._error(None, INVALID_REQUEST, f"a line of {size} bytes skipped: deck reads {MAX_LINE_BYTES} at most")

    def _bad_line(self, why: str) -> None:
        if why.startswith("response to no pending request"):
            log.debug("deck acp: %s", why)  # an answer to a request deck withdrew ($/cancel_request)
            return
        log.warning("deck acp: %s", why)
        self._error(None, INVALID_REQUEST, why)

    def _error(self, request_id: Any, code: int, message: str) -> None:
        self.out.line(encode_line({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}))

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = self._loop.create_task(coro, name=f"deck acp {name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _register(self) -> None:
        requests: dict[str, Callable[[dict[str, Any]], Any]] = {
            "initialize": self._initialize,
            "authenticate": self._authenticate,
            "session/new": self._new,
            "session/load": functools.partial(self._open, replay=True),
            "session/resume": functools.partial(self._open, replay=False),
            "session/list": self._list,
            "session/close": self._close_session,
            "session/prompt": self._prompt,
            "session/set_config_option": self._set_config_option,
            "session/set_mode": self._set_mode,
        }
        for method, handler in requests.items():
            self.conn.on_request(method, handler if method == "initialize" else functools.partial(self._after_initialize, handler))
        self.conn.on_notification("session/cancel", self._cancel)

    async def _after_initialize(self, handler: Callable[[dict[str, Any]], Any], params: dict[str, Any]) -> Any:
        """A request served once `initialize` is answered (one sent before its answer waits for it)."""
        if self._initialized is None:
            raise AcpError(INVALID_REQUEST, "initialize first: deck answers nothing else before it")
        await asyncio.shield(self._initialized)
        return await handler(params)

    # -- output ------------------------------------------------------------------------------------

    def notify(self, update: dict[str, Any]) -> None:
        """A `session/update` of the current session."""
        if self.current is not None and not self.closed:
            self.conn.notify("session/update", {"sessionId": self.current, "update": update})

    # -- deck's events -----------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """Every event of the deck, in its order. A streamed chunk of the part that streamed last costs
        a comparison and a list append."""
        if type(event) is MessageDelta:
            text = event.text
            if text is not None and self.out.key == (event.message_id, event.index, event.kind):
                self.out.more(text)
                return
            if event.agent == self.agent and self.current is not None:
                if event.message_id in self._between:
                    self._between_delta(event)
                elif event.session is None:
                    self._delta(event)
                elif event.session in self._children:  # a subagent's, to a client that takes them
                    self._child_delta(event)
            return
        if getattr(event, "agent", None) != self.agent:
            return
        if type(event) is SubagentChanged:
            self._subagent(event)
        elif getattr(event, "session", None) is None or type(event) in (PermissionRequested, QuestionRequested):
            self.dispatch(event)  # a subagent's request is the user's to answer as the agent's are

    # -- subagents: child sessions, to a client that declares `subagents` ---------------------------

    def _subagent(self, event: SubagentChanged) -> None:
        """A child announced or changed: told as a `subagent_update` on the session that announced it
        (the client's session, or another child's), where the client takes subagents."""
        if self.current is None or not self._takes("subagents"):
            return
        on = event.parent if event.parent in self._children else self.current
        if on == self.current:
            self._agent_session = event.parent
        self._children.add(event.session)
        self.out.end_stream()
        self.conn.notify("session/update", {"sessionId": on, "update": shapes.subagent_update(event.payload())})

    def _takes(self, capability: str) -> bool:
        """Whether the client declared `capability` (`subagents`), or the session's (`session.compaction`)."""
        caps: Any = self.client_caps
        if capability.startswith("session."):
            caps, capability = caps.get("session"), capability.removeprefix("session.")
        return isinstance(caps, dict) and isinstance(caps.get(capability), dict)

    def _session_of(self, session: str | None) -> str | None:
        """The client's session deck's `session` is: a child told to it, else the client's own."""
        return session if session is not None and session in self._children else self.current

    def _between_message(self, message: dict[str, Any]) -> None:
        """A message between sessions made or replaced whole: a `session_message` upsert to a client
        that takes subagents (its chunks follow as `session_message_chunk`s), on the session whose
        transcript holds it, as the agent sent it: its `messageId` is that session's."""
        text = "".join(p.get("text", "") for p in message.get("parts") or [] if isinstance(p, dict) and p.get("type") == "text")
        mid = str(message["id"])
        if not text or len(text) == self._between_told.get(mid) or self.current is None or not self._takes("subagents"):
            return  # nothing new: its chunks told it already, or it is unchanged
        self._between_upsert(mid, self._session_of(message.get("session")), text)

    def _between_upsert(self, mid: str, on: str | None, text: str | None) -> None:
        """A `session_message`: its sender and recipient, and its whole text where given."""
        self._between_told[mid] = len(text) if text is not None else self._between_told.get(mid, 0)
        update: dict[str, Any] = {"sessionUpdate": "session_message", "messageId": mid, **self._parties(mid)}
        if text is not None:
            update["content"] = [{"type": "text", "text": text}]
        self.out.end_stream()
        self.conn.notify("session/update", {"sessionId": on, "update": update})

    def _parties(self, message_id: str) -> dict[str, str]:
        """`senderSessionId` and `recipientSessionId` of a message between sessions, as the client knows
        them: the agent's own session in deck is the client's session."""
        sender, recipient = self._between[message_id]
        named = (("senderSessionId", sender), ("recipientSessionId", recipient))
        return {key: str(self.current) if value == self._agent_session else value for key, value in named if value}

    def _between_delta(self, event: MessageDelta) -> None:
        """A chunk of a message between sessions: a `session_message_chunk` to a client that takes
        subagents, on the session it is of (its upsert's); nothing to the others (it is not the agent's
        answer). A chunk carries its content alone: an upsert before the first says who sends it to whom."""
        if event.text is None or not self._takes("subagents"):
            return
        on = self._session_of(event.session)
        if event.message_id not in self._between_told:
            self._between_upsert(event.message_id, on, None)
        self._between_told[event.message_id] += len(event.text)
        update = {"sessionUpdate": "session_message_chunk", "messageId": event.message_id, "content": {"type": "text", "text": event.text}}
        self.out.end_stream()
        self.conn.notify("session/update", {"sessionId": on, "update": update})

    def _child_delta(self, event: MessageDelta) -> None:
        """A chunk or a part of a subagent's message, as an update of its own session."""
        assert event.session is not None
        self.out.end_stream()
        if event.text is not None:
            kind = shapes.AGENT_CHUNKS.get(event.kind)
            if kind is not None:
                self.out.stream((event.message_id, event.index, event.kind), event.session, kind, event.text)
        elif event.part is not None:
            self._part(event.part, event.session)

    def _part(self, part: dict[str, Any], session: str) -> None:
        """A part replaced whole (a tool call, a plan, a compaction), as the updates of `session`."""
        if part.get("type") == "compaction":
            self._compaction(part, session)
            return
        update = shapes.part_update(part, "agent", self._tools)
        if update is not None:
            self.conn.notify("session/update", {"sessionId": session, "update": update})

    def _compaction(self, part: dict[str, Any], session: str) -> None:
        """A compaction of the agent's (or a child's), to a client that takes them
        (`clientCapabilities.session.compaction`): what changed since it was last told."""
        if not self._takes("session.compaction"):
            return
        key = f"{session}\0{part.get('id')}"
        for update in shapes.compaction(part, self._compactions.get(key)):
            self.conn.notify("session/update", {"sessionId": session, "update": update})
        told = tuple(v if isinstance(v, str) else "" for v in (part.get("status"), part.get("summary"), part.get("error")))
        _remember(self._compactions, key, told)

    def _notice(self, message: dict[str, Any]) -> None:
        """An agent's notice (or a child's, to a client that takes subagents), once, as ACP's `notice`
        to a client that takes them (`clientCapabilities.session.notices`): a live event, never replayed."""
        session, mid = message.get("session"), str(message.get("id"))
        if self.current is None or not self._takes("session.notices") or mid in self._notices:
            return
        if session is not None and session not in self._children:
            return  # a subagent's, to a client that is not told of subagents
        update = shapes.notice(message)
        if update is not None:
            _remember(self._notices, mid)
            self.out.end_stream()
            self.conn.notify("session/update", {"sessionId": self._session_of(session), "update": update})

    def _delta(self, event: MessageDelta) -> None:
        """A chunk that starts another part's text, or a part replaced (a tool call, a plan)."""
        self.out.end_stream()
        if event.text is not None and self.current is not None:
            role = "user" if event.message_id in self._user_ids else "agent"
            kind = "user_message_chunk" if role == "user" and event.kind == "text" else shapes.AGENT_CHUNKS.get(event.kind)
            if kind is None or (role == "user" and event.kind != "text"):
                return
            self.out.stream((event.message_id, event.index, event.kind), self.current, kind, event.text)
        elif event.part is not None and self.current is not None:
            self._part(event.part, self.current)

    @handles(MessageUpdated)
    def _message(self, event: MessageUpdated) -> None:
        message = event.message
        if message.get("role") == "system" and message.get("code") == "notice":
            self._notice(message)
            return
        if message.get("sender") or message.get("recipient"):  # between sessions: never the agent's own words
            mid = str(message["id"])
            if mid not in self._between and len(self._between) >= MAX_BETWEEN:
                self._between_told.pop(next(iter(self._between)), None)
                self._between.pop(next(iter(self._between)))
            self._between[mid] = (str(message.get("sender") or ""), str(message.get("recipient") or ""))
            self._between_message(message)
            return
        if message.get("session"):  # a subagent's: its chunks are told as they stream, to a client that takes them
            return
        role = message.get("role")
        if role == "user":
            self._user_message(message)
        elif role == "agent":
            self._agent_message(message)
        elif role == "system" and message.get("code") == "agent-unavailable":
            error = str(message.get("error") or f"{self.agent} is unavailable")
            for turn in self._turns:
                if turn.reply_id is None:
                    self._end(turn, {"error": error})

    def _user_message(self, message: dict[str, Any]) -> None:
        mid = str(message["id"])
        _remember(self._user_ids, mid)
        error = message.get("error")
        if error is not None:  # never sent: taken out of the queue, abandoned by a cancel, or the agent failed
            cancelled = error == "cancelled" or str(error).startswith("removed from the queue")
            self._outcome(mid, {"stopReason": "cancelled"} if cancelled else {"error": f"not sent: {error}"})
            return
        if message.get("queued"):
            return
        self._replies.last_user = mid
        text = "".join(p.get("text", "") for p in message.get("parts") or [] if isinstance(p, dict) and p.get("type") == "text")
        if mid in self._mine or mid in self._told:
            return
        if text in self._sending:  # the client's own, its id not known yet
            return
        _remember(self._told, mid)
        self.notify(shapes.chunk("user_message_chunk", text))  # another client's prompt, in the same conversation

    def _agent_message(self, message: dict[str, Any]) -> None:
        mid = str(message["id"])
        if not message.get("done"):
            user = self._replies.last_user
            if user is not None and mid not in self._replies.of:
                self._replies.of[mid] = user
                self._replies.last_user = None
                for turn in self._turns:
                    if turn.user_id == user:
                        turn.reply_id = mid
            return
        user = self._replies.of.pop(mid, None)
        if user is not None:
            stop = message.get("stopReason")
            self._outcome(user, {"stopReason": stop} if isinstance(stop, str) else {"error": str(message.get("error") or "the turn ended without a stop reason")})

    def _outcome(self, user_id: str, outcome: dict[str, Any]) -> None:
        """How the turn of user message `user_id` ended: the client's prompt that sent it is answered."""
        for turn in self._turns:
            if turn.user_id == user_id:
                self._end(turn, outcome)
                return
        if user_id in self._mine or self._sending:
            _remember(self._replies.outcomes, user_id, outcome)

    def _end(self, turn: Turn, outcome: dict[str, Any]) -> None:
        if not turn.done.done():
            turn.done.set_result(outcome)

    @handles(UsageChanged)
    def _usage(self, event: UsageChanged) -> None:
        self.notify(shapes.usage(event.usage))

    @handles(ConversationChanged)
    def _conversation(self, event: ConversationChanged) -> None:
        update = shapes.conversation_update(event.field, event.value)
        if update is not None:
            self.notify(update)

    @handles(ConversationReset)
    def _reset(self, event: ConversationReset) -> None:
        """The agent's conversation was replaced: by this client (its session is current), or by another
        (the client's session is no longer the agent's current one: its updates stop until it prompts)."""
        self.out.end_stream()
        self.current = event.conversation_id if event.conversation_id in self.sessions else None
        self._tools.clear()

    @handles(PermissionRequested)
    def _permission(self, event: PermissionRequested) -> None:
        if self.current is None or event.id in self._asked:
            return
        asker = event.session if event.session in self._children else self.current  # a subagent's own, if told
        params = {"sessionId": asker, "toolCall": shapes.tool_of_permission(event.tool_call), "options": event.options}
        self._ask(event.id, "session/request_permission", params, self._permission_answered)

    @handles(QuestionRequested)
    def _question(self, event: QuestionRequested) -> None:
        modes = self.client_caps.get("elicitation")
        mode = "url" if event.url else "form"
        if self.current is None or event.id in self._asked or not (isinstance(modes, dict) and isinstance(modes.get(mode), dict)):
            return  # a client that does not take this kind of question: it waits in deck's inbox
        asker = event.session if event.session in self._children else self.current  # a subagent's own, if told
        self._ask(event.id, "elicitation/create", shapes.question(event.payload(), asker), self._question_answered)

    def _ask(self, pending_id: str, method: str, params: dict[str, Any], answered: Callable[[str, Any], None]) -> None:
        """Ask the client what deck's request `pending_id` asks; its answer goes to deck, unless another
        answered first (deck's `…:resolved` then withdraws the client's request: `$/cancel_request`)."""
        try:
            future = self.conn.start_request(method, params)
        except Exception:  # the connection is closing
            return
        self._asked[pending_id] = future

        def done(f: asyncio.Future[Any]) -> None:
            self._asked.pop(pending_id, None)
            if f.cancelled():
                return
            if f.exception() is not None:
                log.info("deck acp: the client answered %s with an error: %s", method, f.exception())
                return
            answered(pending_id, f.result())

        future.add_done_callback(done)

    def _permission_answered(self, pending_id: str, result: Any) -> None:
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if isinstance(outcome, dict) and outcome.get("outcome") == "selected" and isinstance(outcome.get("optionId"), str):
            self._answer("ChatService.AnswerPermission", {"id": pending_id, "optionId": outcome["optionId"]})
        # cancelled: the client's turn was cancelled (and deck's with it), or it closed: deck's inbox still asks

    def _question_answered(self, pending_id: str, result: Any) -> None:
        action = result.get("action") if isinstance(result, dict) else None
        if action == "accept":
            content = result.get("content")
            self._answer("ChatService.AnswerQuestion", {"id": pending_id, "values": content if isinstance(content, dict) else {}})
        elif action == "decline":
            self._answer("ChatService.AnswerQuestion", {"id": pending_id, "values": None})

    def _answer(self, method: str, params: dict[str, Any]) -> None:
        call = self.client.call(method, params)

        def done(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is not None:  # answered first elsewhere, or refused
                log.info("deck acp: %s %s: %s", method, params.get("id"), f.exception())

        call.add_done_callback(done)

    @handles(PermissionResolved, QuestionResolved)
    def _resolved(self, event: PermissionResolved | QuestionResolved) -> None:
        asked = self._asked.pop(event.id, None)
        if asked is not None and not asked.done():
            asked.cancel()  # the Connection withdraws it: `$/cancel_request`

    # -- requests ----------------------------------------------------------------------------------

    async def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(params.get("protocolVersion"), int):
            raise AcpError(INVALID_PARAMS, "initialize needs an integer protocolVersion")
        earlier = self._initialized
        if earlier is not None and not (earlier.done() and earlier.exception() is not None):
            raise AcpError(INVALID_REQUEST, "initialize was sent already")
        self._initialized = self._loop.create_future()
        try:
            result = await self._handshake(params)
        except BaseException as exc:
            self._initialized.set_exception(AcpError(INTERNAL_ERROR, f"initialize failed: {exc}"))
            self._initialized.exception()  # retrieved: a request that waited on it says so itself
            raise
        self._initialized.set_result(None)
        return result

    async def _handshake(self, params: dict[str, Any]) -> dict[str, Any]:
        caps = params.get("clientCapabilities")
        self.client_caps = caps if isinstance(caps, dict) else {}
        agents = await _call(self.client, "AgentService.List")
        found = next((a for a in agents if a.get("name") == self.agent), None)
        if found is None:
            names = ", ".join(str(a.get("name")) for a in agents)
            raise AcpError(INVALID_PARAMS, f"deck has no agent {self.agent!r} (agents: {names or 'none'})")
        self.history = await self._history_on()
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": self._capabilities(),
            "agentInfo": {"name": "deck", "title": _title(found, self.agent), "version": _version.__version__},
            "authMethods": [],
        }

    def _capabilities(self) -> dict[str, Any]:
        sessions: dict[str, Any] = {"close": {}}
        if self.history:
            sessions.update(list={}, resume={})
        return {
            "loadSession": self.history,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": False, "sse": False},
            "sessionCapabilities": sessions,
        }

    async def _history_on(self) -> bool:
        try:
            await self.client.call("ChatService.History", {"agent": self.agent, "limit": 1})
        except ServiceError:
            return False
        return True

    async def _authenticate(self, params: dict[str, Any]) -> dict[str, Any]:
        raise AcpError(INVALID_PARAMS, "deck offers no authentication methods: it authenticates the agent itself")

    async def _new(self, params: dict[str, Any]) -> dict[str, Any]:
        _cwd(params)
        made = await _call(self.client, "ChatService.NewConversation", {"agent": self.agent, "stored": True})
        session = made.get("conversationId") or f"deck-{uuid.uuid4()}"
        self.sessions.add(session)
        settings = await self._start_agent()
        self.current = session  # from now on: what the agent said while it started is in the answer
        self._tools.clear()
        self._opened(session)
        return {"sessionId": session, **settings}

    async def _open(self, params: dict[str, Any], *, replay: bool) -> dict[str, Any]:
        """session/load (the conversation told again first) or session/resume: a stored conversation
        made the agent's current one (unless it is already), the agent started on its session."""
        _cwd(params)
        session = _session_id(params)
        if not self.history:
            raise AcpError(RESOURCE_NOT_FOUND, "deck's history is off: no stored session to open")
        if session != self.current:
            await self._make_current(session, opening=True)
        settings = await self._start_agent()
        if replay:
            conversation = await _call(self.client, "ChatService.Conversation", {"agent": self.agent})
            for update in shapes.replay(conversation.get("messages") or [], self._takes("session.compaction")):
                self.notify(update)
        self._opened(session)
        return settings

    async def _start_agent(self) -> dict[str, Any]:
        """The agent started on its current conversation: what a session's answer says of its settings."""
        await _call(self.client, "AgentService.Start", {"name": self.agent})
        conversation = await _call(self.client, "ChatService.Conversation", {"agent": self.agent})
        return shapes.settings(conversation)

    def _opened(self, session: str) -> None:
        """Once the answer opening `session` is out (the session exists for the client then): the agent's
        commands, and what the agent waits on, told."""
        self._loop.call_soon(lambda: self._spawn(self._announced(session), "announce"))

    async def _announced(self, session: str) -> None:
        if session != self.current:
            return
        with contextlib.suppress(ServiceError):
            conversation = await self.client.call("ChatService.Conversation", {"agent": self.agent})
            if conversation.get("commands"):
                self.notify(shapes.conversation_update("commands", conversation["commands"]) or {})
            for pending in await self.client.call("ChatService.Pending"):
                if pending.get("agent") == self.agent:
                    name = "permission:requested" if pending.get("kind") == "permission" else "question:requested"
                    self.dispatch(from_wire({**pending, "event": name}))

    async def _list(self, params: dict[str, Any]) -> dict[str, Any]:
        if not self.history:
            raise AcpError(RESOURCE_NOT_FOUND, "deck's history is off: it lists no sessions")
        cursor = params.get("cursor")
        start = int(cursor) if isinstance(cursor, str) and cursor.isdigit() and len(cursor) < 9 else 0
        cwd = params.get("cwd") if isinstance(params.get("cwd"), str) else self.cwd
        rows = await _call(self.client, "ChatService.History", {"agent": self.agent, "limit": start + PAGE + 1})
        page = [shapes.session_info(row, str(cwd)) for row in rows[start : start + PAGE]]
        result: dict[str, Any] = {"sessions": page}
        if len(rows) > start + PAGE:
            result["nextCursor"] = str(start + PAGE)
        return result

    async def _close_session(self, params: dict[str, Any]) -> dict[str, Any]:
        session = _session_id(params)
        if session not in self.sessions:
            raise AcpError(RESOURCE_NOT_FOUND, f"no session {session!r} open here")
        await self._cancel_turns(session)
        self.sessions.discard(session)
        if self.current == session:
            self.current = None
        return {}

    async def _prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._open_session(params)
        text = shapes.prompt_text(params.get("prompt"))
        if any(t.session == session for t in self._turns):
            raise AcpError(INVALID_REQUEST, "a prompt is running in this session already: wait for its answer or cancel it")
        if session != self.current:
            await self._make_current(session)
        turn = Turn(session, self._loop.create_future())
        self._turns.append(turn)
        try:
            try:
                turn.user_id = await self._send(text)
            finally:
                turn.sent.set()
            earlier = self._replies.outcomes.pop(turn.user_id, None)
            if earlier is not None:
                return earlier if "error" not in earlier else _failed(earlier)
            turn.reply_id = next((r for r, u in self._replies.of.items() if u == turn.user_id), None)
            outcome = await asyncio.shield(turn.done)
            return outcome if "error" not in outcome else _failed(outcome)
        except asyncio.CancelledError:  # withdrawn ($/cancel_request), or the connection ended
            if not self.closed:
                await asyncio.shield(self._cancel_turn(turn))
            raise
        finally:
            self._turns.remove(turn)

    async def _send(self, text: str) -> str:
        self._sending.append(text)
        try:
            message_id = str(await _call(self.client, "ChatService.Send", {"agent": self.agent, "text": text}))
        finally:
            self._sending.remove(text)
        _remember(self._mine, message_id)
        return message_id

    async def _make_current(self, session: str, opening: bool = False) -> None:
        """Make the session's stored conversation the agent's current one (refused while it answers, and
        -32002 when it is no conversation of the agent's: another agent's is left as it is)."""
        if not self.history:
            raise AcpError(RESOURCE_NOT_FOUND, f"session {session!r} is no longer {self.agent}'s conversation, and deck's history is off")
        if not opening and session not in self.sessions:
            raise AcpError(RESOURCE_NOT_FOUND, f"no session {session!r} open here: session/new, load or resume first")
        self.sessions.add(session)
        try:  # with the agent named: another agent's conversation is refused, and stays as it is
            await self.client.call("ChatService.OpenConversation", {"id": session, "agent": self.agent})
        except ServiceError as exc:
            if opening:
                self.sessions.discard(session)
            raise AcpError(RESOURCE_NOT_FOUND if _not_found(exc) else INTERNAL_ERROR, str(exc)) from None
        self.current = session
        self._tools.clear()

    def _cancel(self, params: dict[str, Any]) -> None:
        session = params.get("sessionId")
        if isinstance(session, str) and session in self._children:  # a subagent's work alone, where it offers it
            self._spawn(self._cancel_child(session), "cancel")
        elif isinstance(session, str):
            self._spawn(self._cancel_turns(session), "cancel")

    async def _cancel_child(self, session: str) -> None:
        with contextlib.suppress(ServiceError):  # a child that offers no cancel: refused, and logged by deck
            await self.client.call("ChatService.Cancel", {"agent": self.agent, "session": session})

    async def _cancel_turns(self, session: str) -> None:
        for turn in [t for t in self._turns if t.session == session]:
            await self._cancel_turn(turn)

    async def _cancel_turn(self, turn: Turn) -> None:
        """The client cancels its prompt: still queued behind another's turn, it is taken out of the
        queue; running, the agent's turn is cancelled (ChatService.Cancel)."""
        if not turn.sent.is_set():  # the prompt is on its way: what to cancel is known once it is there
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SEND_SECONDS):
                    await turn.sent.wait()
        if turn.done.done():
            return
        if turn.reply_id is None and turn.user_id is not None:
            with contextlib.suppress(ServiceError):
                await self.client.call("ChatService.Unqueue", {"agent": self.agent, "id": turn.user_id})
                return
        with contextlib.suppress(ServiceError):
            await self.client.call("ChatService.Cancel", {"agent": self.agent})

    async def _set_config_option(self, params: dict[str, Any]) -> dict[str, Any]:
        self._current_session(params)
        config_id, value = params.get("configId"), params.get("value")
        if not isinstance(config_id, str) or not isinstance(value, (str, bool)):
            raise AcpError(INVALID_PARAMS, "session/set_config_option needs a string configId and a string or boolean value")
        result = await _call(self.client, "ChatService.SetConfigOption", {"agent": self.agent, "configId": config_id, "value": value})
        return {"configOptions": result.get("configOptions") or []}

    async def _set_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        self._current_session(params)
        mode = params.get("modeId")
        if not isinstance(mode, str):
            raise AcpError(INVALID_PARAMS, "session/set_mode needs a string modeId")
        await _call(self.client, "ChatService.SetMode", {"agent": self.agent, "modeId": mode})
        return {}

    def _open_session(self, params: dict[str, Any]) -> str:
        session = _session_id(params)
        if session not in self.sessions:
            raise AcpError(RESOURCE_NOT_FOUND, f"no session {session!r} open here: session/new, load or resume first")
        return session

    def _current_session(self, params: dict[str, Any]) -> str:
        session = self._open_session(params)
        if session != self.current:
            raise AcpError(INVALID_REQUEST, f"session {session!r} is not {self.agent}'s current conversation: prompt it first")
        return session

    # -- the end -------------------------------------------------------------------------------------

    def close(self, why: str = "") -> None:
        """The connection ends: requests in progress are cancelled (the turns go on in deck), nothing
        more is written."""
        if self.closed:
            return
        self.closed = why or "closed"
        self.out.closed = True
        if why:
            log.warning("deck acp: %s", why)
        self.conn.close(self.closed)
        for future in list(self._asked.values()):
            future.cancel()
        self._on_close(self.closed)

    def flush_now(self) -> None:
        """Write what waits, whatever the client's transport holds (the end of the connection)."""
        self.out.flush_now()

    async def drain(self) -> None:
        """Wait until every request in progress is answered."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _title(agent: dict[str, Any], name: str) -> str:
    """What a client shows for deck's agent: its title and its name, and deck's (`Claude Code (deck: claude)`)."""
    title = str(agent.get("title") or name)
    return f"{title} (deck)" if title == name else f"{title} (deck: {name})"


def _remember(store: dict[str, Any], key: str, value: Any = None) -> None:
    """Add `key` to `store`, kept to REMEMBERED entries: the oldest goes."""
    if len(store) >= REMEMBERED:
        del store[next(iter(store))]
    store[key] = value


async def _call(client: Client, method: str, params: Any = None) -> Any:
    """A service call; its refusal as the JSON-RPC error the client gets."""
    try:
        return await client.call(method, params)
    except ServiceError as exc:
        code = exc.code if exc.code in (INVALID_PARAMS, RESOURCE_NOT_FOUND) else INTERNAL_ERROR
        raise AcpError(code, str(exc)) from None


def _not_found(error: ServiceError) -> bool:
    """Whether OpenConversation refused a session that is none of the agent's: no such conversation,
    or another agent's (its `data` names whose)."""
    return "no conversation" in str(error) or (isinstance(error.data, dict) and "agent" in error.data)


def _failed(outcome: dict[str, Any]) -> dict[str, Any]:
    raise AcpError(INTERNAL_ERROR, str(outcome["error"]))


def _session_id(params: dict[str, Any]) -> str:
    session = params.get("sessionId")
    if not isinstance(session, str) or not session or len(session) > 200:
        raise AcpError(INVALID_PARAMS, "sessionId must be a non-empty string")
    return session


def _cwd(params: dict[str, Any]) -> None:
    """A session's `cwd` must be given, absolute; deck's agent works where its config says all the same."""
    cwd = params.get("cwd")
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        raise AcpError(INVALID_PARAMS, "cwd must be an absolute path")
