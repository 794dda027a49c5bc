"""Requests from agents that wait for the user: permission requests and questions, in one registry.

An agent's `session/request_permission` or `elicitation/create` becomes one `Pending`,
announced by `permission:requested` / `question:requested` and listed by
`ChatService.Pending()` in the order asked. Only the services answer it
(`ChatService.AnswerPermission` / `AnswerQuestion`); `ChatService.Cancel`, the end of the
session that asked, or the end of input (nobody is left to answer) cancel it. What a cancelled
turn, or a subagent cancelled alone, asks before it ends or works again is cancelled at once. A permission
the `--approve` patterns or the agent's `permissions` policy grant is answered at once and
never becomes pending; one that offers no option to choose is refused at once (nobody could
answer it). An answer to a question is checked against the form the agent asked for
(`answer_problem`): what goes back to the agent is always a valid ACP answer.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, Protocol

from deck.acp.updates import tool_part
from deck.agent.session import CONVERSATION
from deck.chat.approval import Approval, allow_option, approval
from deck.errors import INVALID_PARAMS, AcpError, InvalidParams, ServiceError
from deck.events import (
    Event,
    PermissionRequested,
    PermissionResolved,
    QuestionRequested,
    Notice,
    QuestionResolved,
    now_iso,
)
from deck.tty import one_line

if TYPE_CHECKING:
    from deck.agent.agent import Agent
    from deck.chat.host import ChatHost

Kind = Literal["permission", "question"]
PERMISSION: Kind = "permission"
QUESTION: Kind = "question"
READ_KINDS = frozenset({"read", "search"})
#: What the agent is told when nobody answers: the request was cancelled.
CANCELLED_PERMISSION: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}
#: The longest URL a URL-mode elicitation may show.
MAX_URL = 4096
CANCELLED_QUESTION: dict[str, Any] = {"action": "cancel"}
#: A question declined (answered with `null` values).
DECLINED = False
#: The values an integer field may take: ACP's int64.
INT64 = (-(2**63), 2**63 - 1)

_ids = itertools.count(1)


class Asker(Protocol):
    """The session a request comes from: its agent, what it knows of its tool calls, where it shows."""

    @property
    def agent(self) -> Agent: ...
    @property
    def origin(self) -> str: ...
    def tool(self, tool_call_id: str) -> dict[str, Any] | None: ...
    def message_id(self) -> str: ...
    @property
    def child_id(self) -> str | None: ...


class Pending:
    """One request waiting for the user's answer: the payload of its `…:requested` event and a future."""

    __slots__ = ("id", "kind", "agent", "origin", "asker", "options", "payload", "future", "since")

    def __init__(self, kind: Kind, asker: Asker, event: PermissionRequested | QuestionRequested) -> None:
        self.id = event.id
        self.kind = kind
        self.agent = event.agent
        self.origin = asker.origin
        self.asker = asker
        self.options: list[dict[str, Any]] = event.options if isinstance(event, PermissionRequested) else []
        self.payload = event.payload()
        self.since = now_iso()
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    @property
    def open(self) -> bool:
        return not self.future.done()

    def title(self) -> str:
        """One line that says what is asked: the tool call's title, or the question."""
        if self.kind == PERMISSION:
            call = self.payload.get("toolCall") or {}
            text = call.get("title") or call.get("kind") or "a tool call"
            return f"permission: {text}"[:200]
        lines = str(self.payload.get("message") or "").splitlines()
        return (lines[0] if lines else "a question")[:200]

    def wire(self) -> dict[str, Any]:
        """As `ChatService.Pending()` lists it: the event's payload and its kind."""
        return {**self.payload, "kind": self.kind}


def _inbox_options(pending: Pending) -> list[dict[str, Any]]:
    """A permission request's options as the inbox lists them: `{optionId, name, kind}` each."""
    return [{"optionId": o["optionId"], "name": o.get("name"), "kind": o.get("kind")} for o in pending.options]


def form_schema(raw: Any) -> dict[str, Any] | None:
    """A question's form as the frontends may count on it: an object whose `properties` are objects
    and whose `required` names some of them; a field that is not an object is dropped. None when
    `raw` is no form at all (missing is an empty one)."""
    if raw is None:
        return {}
    properties = raw.get("properties", {}) if isinstance(raw, dict) else None
    if not isinstance(properties, dict):
        return None
    fields = {str(name): field for name, field in properties.items() if isinstance(field, dict)}
    required = raw.get("required")
    named = [name for name in required if isinstance(name, str) and name in fields] if isinstance(required, list) else []
    return {**raw, "properties": fields, **({"required": named} if "required" in raw else {})}


class PendingRequests:
    """Every request waiting for an answer in one deck, oldest first."""

    def __init__(self, deck: ChatHost) -> None:
        self.deck = deck
        self._requests: dict[str, Pending] = {}
        #: Permission requests the user rejected in the agent's current turn (shown with the next one).
        self.rejections: dict[str, int] = {}
        #: Nobody is left to answer (end of input): requests are cancelled as soon as they are announced.
        self.unattended = False
        #: `--approve` patterns: a permission request they name is approved without asking.
        self.approvals: tuple[Approval, ...] = ()
        #: Agents whose turn was cancelled and has not ended yet: what they ask meanwhile is cancelled
        #: at once (ACP: the client answers every request of a cancelled turn `cancelled`).
        self.stopping: set[str] = set()

    # -- reading ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Pending]:
        """The requests still open, in the order asked."""
        return iter([p for p in self._requests.values() if p.open])

    def get(self, pending_id: str, kind: Kind) -> Pending:
        pending = self._requests.get(pending_id)
        if pending is None or pending.kind != kind or not pending.open:
            what = "permission request" if kind == PERMISSION else "question"
            raise ServiceError(f"no pending {what} {pending_id!r}")
        return pending

    def wire(self) -> list[dict[str, Any]]:
        return [p.wire() for p in self]

    def inbox(self) -> list[dict[str, Any]]:
        """What waits for the user, oldest first: `{id, agent, kind, title, since, options}` each
        (`DeckService.Inbox`); `options` are a permission request's, `{optionId, name, kind}` each
        (what `AnswerPermission` takes), and none for a question."""
        return [
            {"id": p.id, "agent": p.agent, "kind": p.kind, "title": p.title(), "since": p.since,
             "options": _inbox_options(p), **self._child_of(p)}
            for p in self
        ]  # fmt: skip

    def _child_of(self, pending: Pending) -> dict[str, Any]:
        """A subagent's request: `{session, subagent}`, its session id and its title (else its id)."""
        session = pending.asker.child_id
        if session is None:
            return {}
        child = self.deck.conversation_of(pending.agent).children.get(session)
        return {"session": session, "subagent": (child.title if child is not None else None) or session}

    def permissions_of(self, agent: str, origin: str) -> list[dict[str, Any]]:
        """The open permission requests `agent` made from session `origin` (its conversation's snapshot lists them)."""
        return [p.payload for p in self if p.kind == PERMISSION and p.agent == agent and p.origin == origin]

    # -- asking -------------------------------------------------------------------------------

    async def ask_permission(self, asker: Asker, params: dict[str, Any]) -> dict[str, Any]:
        """An ACP `session/request_permission` → its answer: granted by a rule, or by the user."""
        agent = asker.agent
        if self._stopped(asker):
            agent.log("deck: permission request after session/cancel answered cancelled")
            return CANCELLED_PERMISSION
        raw_options = params.get("options")
        options = (
            [o for o in raw_options if isinstance(o, dict) and isinstance(o.get("optionId"), str)]
            if isinstance(raw_options, list) else []
        )  # fmt: skip  (ACP's optionId is a string: no other could be chosen)
        if not options:  # nobody could answer it: it would wait for ever
            agent.log(f"deck: permission request with no options to choose from refused: {str(params)[:200]}")
            raise AcpError(INVALID_PARAMS, "no options to choose from")
        raw_call = params.get("toolCall")
        raw_call = raw_call if isinstance(raw_call, dict) else {}
        tool_call = asker.tool(str(raw_call.get("toolCallId", ""))) or {}
        if raw_call:
            tool_call = tool_part(raw_call, tool_call or None)
        auto, granter = approval(self.approvals, tool_call, options), "--approve"
        if auto is None:
            auto, granter = _by_policy(agent, tool_call, options), "the config"
        if auto is not None:
            title = tool_call.get("title") or "a tool"
            agent.log(f"deck: permission for {title} granted by {granter} ({auto})")
            chosen = next((str(o.get("name") or auto) for o in options if o["optionId"] == auto), auto)
            self.deck.emit(Notice("approvals", "info", f"{one_line(str(title), 200)}: {chosen}, by {granter}", agent.name))
            return {"outcome": {"outcome": "selected", "optionId": auto}}
        event = PermissionRequested(
            f"perm-{next(_ids)}", agent.name, asker.message_id(), tool_call, options,
            self.rejections.get(agent.name, 0), asker.child_id,
        )  # fmt: skip
        option_id = await self._wait(Pending(PERMISSION, asker, event), event)
        if option_id is None:
            return CANCELLED_PERMISSION
        kind = next((o.get("kind") for o in options if o["optionId"] == option_id), "")
        if str(kind).startswith("reject"):
            self.rejections[agent.name] = self.rejections.get(agent.name, 0) + 1
        return {"outcome": {"outcome": "selected", "optionId": option_id}}

    async def ask_question(self, asker: Asker, params: dict[str, Any]) -> dict[str, Any]:
        """An ACP `elicitation/create` → the user's answer, a decline or a cancel. A form asks for its
        fields; a URL (mode `url`, an http or https address) is shown, and the user goes ahead (any
        answer, `{}`) or declines. Any other mode, or a URL of another scheme, is declined."""
        agent = asker.agent
        if self._stopped(asker):
            agent.log("deck: elicitation/create after session/cancel answered cancelled")
            return CANCELLED_QUESTION
        mode = params.get("mode", "form")
        url = params.get("url")
        if mode == "url":
            if not isinstance(url, str) or not url.lower().startswith(("https://", "http://")) or len(url) > MAX_URL:
                agent.log(f"deck: elicitation/create declined: a URL must be http(s), at most {MAX_URL} characters")
                return {"action": "decline"}
            message = str(params.get("message", "")) or "Open this page to go on"
            event = QuestionRequested(
                f"question-{next(_ids)}", agent.name, asker.message_id(), f"{message}\n{url}", {}, url, asker.child_id
            )
        elif mode == "form":
            schema = form_schema(params.get("requestedSchema"))
            if schema is None:  # no form anyone could fill in
                agent.log(f"deck: elicitation/create refused: its requestedSchema is no form: {str(params)[:200]}")
                raise AcpError(INVALID_PARAMS, "requestedSchema must be an object whose properties are an object")
            event = QuestionRequested(
                f"question-{next(_ids)}", agent.name, asker.message_id(), str(params.get("message", "")), schema,
                session=asker.child_id,
            )
        else:
            return {"action": "decline"}
        answer = await self._wait(Pending(QUESTION, asker, event), event)
        if answer is None:
            return CANCELLED_QUESTION
        if answer is DECLINED:
            return {"action": "decline"}
        return {"action": "accept"} if mode == "url" else {"action": "accept", "content": answer}

    def _stopped(self, asker: Asker) -> bool:
        """Whether the asker's work was cancelled and has not ended (its agent's turn) or started again
        (a subagent cancelled alone, or one below it): what it asks is answered cancelled at once."""
        name = asker.agent.name
        child = asker.child_id
        return name in self.stopping or (child is not None and self.deck.conversation_of(name).children.stopped(child))

    async def _wait(self, pending: Pending, event: Event) -> Any:
        """Announce `pending` and wait for its answer (None: cancelled); it leaves the registry either way."""
        self._requests[pending.id] = pending
        answer = None
        try:
            self.deck.emit(event)
            if self.unattended and pending.open:  # a listener may answer it as it is announced
                pending.future.set_result(None)
            answer = await pending.future
        finally:
            del self._requests[pending.id]
            resolved: Event
            if pending.kind == PERMISSION:
                resolved = PermissionResolved(pending.id, pending.agent, answer)
            else:
                resolved = QuestionResolved(pending.id, pending.agent)
            self._keep(pending, answer)
            self.deck.emit(resolved)
        return answer

    def _keep(self, pending: Pending, answer: Any) -> None:
        """What the user answered, kept in the conversation that asked: a permission's decision on its
        tool call, a question and its answer as a note of its own (`question`)."""
        if pending.origin != CONVERSATION:
            return
        conversation = self.deck.conversation_of(pending.agent)
        if pending.kind == PERMISSION:
            call = pending.payload.get("toolCall") or {}
            name = next((str(o.get("name") or o["optionId"]) for o in pending.options if o["optionId"] == answer), None)
            conversation.decided(str(call.get("id") or ""), name or "cancelled")
            return
        if answer is None:
            said = "cancelled"
        elif answer is DECLINED:
            said = "declined"
        else:
            said = "; ".join(f"{key}: {value}" for key, value in answer.items()) if answer else "went ahead"
        conversation.add_system("question", text=f"{pending.title()}\n→ {said}")

    # -- answering ----------------------------------------------------------------------------

    def answer_permission(self, pending_id: str, option_id: str) -> dict[str, Any]:
        """Answer at once: a listener of `permission:requested` may answer there, before the request
        would be cancelled for want of anyone to answer it (`unattended`)."""
        pending = self.get(pending_id, PERMISSION)
        if option_id not in {o["optionId"] for o in pending.options}:
            valid = ", ".join(str(o["optionId"]) for o in pending.options)
            raise ServiceError(f"unknown option {option_id!r} for {pending_id}: choose one of {valid}")
        pending.future.set_result(option_id)
        return {"id": pending_id, "optionId": option_id}

    def answer_question(self, pending_id: str, values: dict[str, Any] | None) -> dict[str, Any]:
        """Answer with `values`; None declines the question. Values that do not fit the question's
        form are refused (InvalidParams), and the question waits for another answer. A URL question
        takes any values as the go-ahead."""
        pending = self.get(pending_id, QUESTION)
        if values is not None and pending.payload.get("url"):
            values = {}
        if values is not None:
            problem = answer_problem(pending.payload.get("schema"), values)
            if problem is not None:
                raise InvalidParams(f"answer to {pending_id} refused: {problem}; the question still waits for an answer")
        pending.future.set_result(_as_typed(pending.payload.get("schema"), values) if values is not None else DECLINED)
        return {"id": pending_id}

    # -- cancelling ---------------------------------------------------------------------------

    def cancel_agent(self, agent: str) -> None:
        """`ChatService.Cancel`: what the agent asked is cancelled (ACP's `cancelled` outcome, `cancel`
        action): the user declined nothing, the turn was stopped."""
        for pending in self:
            if pending.agent == agent:
                pending.future.set_result(None)

    def stop_child(self, agent: str, session: str) -> None:
        """`ChatService.Cancel` of subagent `session` alone: what it and the subagents below it asked is
        cancelled, and so is what they ask until it reports new work (its state `running` again)."""
        children = self.deck.conversation_of(agent).children
        child = children.get(session)
        if child is None:
            return
        child.stopping = True
        for pending in self:
            asking = pending.asker.child_id
            if pending.agent == agent and asking is not None and children.stopped(asking):
                pending.future.set_result(None)

    def cancel_from(self, asker: Asker) -> None:
        """The session that asked is closed: what it asked is cancelled."""
        for pending in self:
            if pending.asker is asker:
                pending.future.set_result(None)

    def cancel_all(self) -> None:
        """Nobody is left to answer: every request is cancelled."""
        for pending in self:
            pending.future.set_result(None)

    def end_of_input(self) -> None:
        """The user is gone (end of stdin): what is pending, and what agents ask from now on, is cancelled,
        unless a listener answers it when it is announced (an answer the user typed in advance)."""
        self.unattended = True
        self.cancel_all()


def _by_policy(agent: Agent, tool_call: dict[str, Any], options: list[dict[str, Any]]) -> str | None:
    """The option the agent's `permissions` policy picks without asking (None: ask the user)."""
    policy = agent.config.permissions
    if policy == "ask" or (policy == "allow-reads" and tool_call.get("kind") not in READ_KINDS):
        return None
    return allow_option(options)


# -- answers to questions -------------------------------------------------------------------------


def answer_problem(schema: Any, values: Any) -> str | None:
    """What makes `values` no answer to a form asking `schema` (ACP's ElicitationSchema); None: it fits.

    An answer is a flat object: every required field given, no field the form does not ask,
    each value of its field's type (a string, a number, an integer, a boolean, or a list of
    strings), within its `enum` or `oneOf` choices and its min/max bounds. A field of a type
    deck does not know (a newer ACP's) takes any of those values. A string's `pattern` and
    `format` are not checked: the agent's regular expression could take exponential time.
    """
    if not isinstance(values, dict):
        return "values must be an object of field values, or null to decline"
    schema = schema if isinstance(schema, dict) else {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    raw_required = schema.get("required")
    required = [r for r in raw_required if isinstance(r, str)] if isinstance(raw_required, list) else []
    for name in required:
        if values.get(name) is None:
            return f"field {_name(name)} is required"
    for name, value in values.items():
        if name not in properties and name not in required:
            asked = ", ".join(_name(n) for n in list(properties)[:20]) or "none"
            return f"field {_name(name)} is not one the question asks (its fields: {asked})"
        prop = properties.get(name)
        problem = _value_problem(prop if isinstance(prop, dict) else {}, value)
        if problem is not None:
            return f"field {_name(name)} {problem}"
    return None


def _as_typed(schema: Any, values: dict[str, Any]) -> dict[str, Any]:
    """`values` (they fit the form) with an integer field's whole float (3.0) as the integer it is."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return values
    def integer(name: str) -> bool:
        prop = properties.get(name)
        return isinstance(prop, dict) and prop.get("type") == "integer"

    return {name: int(value) if isinstance(value, float) and integer(name) else value for name, value in values.items()}


def _value_problem(prop: dict[str, Any], value: Any) -> str | None:
    """What is wrong with `value` for the field `prop` describes; None: nothing."""
    kind = prop.get("type")
    if value is None:
        return "is null: leave an optional field out instead"
    if kind == "string":
        if not isinstance(value, str):
            return "must be a string"
        choices = _choices(prop.get("enum"), prop.get("oneOf"))
        if choices is not None and value not in choices:
            return f"must be one of {_listed(choices)}"
        return _bounds(len(value), prop, "minLength", "maxLength", "characters")
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be an integer" if kind == "integer" else "must be a number"
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        if kind == "integer" and isinstance(value, float) and not value.is_integer():  # 3.0 is one: JSON Schema's rule
            return "must be an integer"
        if kind == "integer" and not INT64[0] <= value <= INT64[1]:
            return "must be a 64-bit integer"
        return _bounds(value, prop, "minimum", "maximum")
    if kind == "boolean":
        return None if isinstance(value, bool) else "must be true or false"
    if kind == "array":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "must be a list of strings"
        items = prop.get("items")
        items = items if isinstance(items, dict) else {}
        choices = _choices(items.get("enum"), items.get("anyOf"))
        if choices is not None and (wrong := next((v for v in value if v not in choices), None)) is not None:
            return f"holds {_name(wrong)}: each item must be one of {_listed(choices)}"
        return _bounds(len(value), prop, "minItems", "maxItems", "items")
    if isinstance(value, (str, bool, int, float)) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return None
    return "must be a string, a number, a boolean or a list of strings"


def _choices(enum: Any, titled: Any) -> dict[str, None] | None:
    """The strings a field may be, in the form's order, from `enum` or from the `const`s of
    `oneOf`/`anyOf` (a dict: looked up at once); None: any string."""
    if isinstance(enum, list):
        return dict.fromkeys(c for c in enum if isinstance(c, str))
    if isinstance(titled, list):
        return dict.fromkeys(o["const"] for o in titled if isinstance(o, dict) and isinstance(o.get("const"), str))
    return None


def _bounds(measure: float, prop: dict[str, Any], low: str, high: str, unit: str = "") -> str | None:
    """Whether `measure` (a value, a length, a count of items) is within the field's `low`/`high` bounds."""
    for key, word in ((low, "at least"), (high, "at most")):
        bound = prop.get(key)
        if isinstance(bound, (int, float)) and not isinstance(bound, bool):
            if measure < bound if key == low else measure > bound:
                return f"must have {word} {bound} {unit}" if unit else f"must be {word} {bound}"
    return None


def _name(name: Any) -> str:
    """A field name (or a value) as shown in an error: quoted, and cut if long."""
    text = repr(name)
    return text if len(text) <= 60 else text[:57] + "..."


def _listed(choices: dict[str, None]) -> str:
    shown = list(choices)
    return ", ".join(_name(c) for c in shown[:20]) + (", ..." if len(shown) > 20 else "") if shown else "(no choice given)"
