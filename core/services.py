"""The services frontends and plugins call: AgentService, ChatService, ConfigService.

Methods marked `@rpc` are reachable by name over the jsonl bridge
(`"method": "ChatService.Send"`) with their parameters by name.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .approve import Approval, approval
from .conversation import Conversation, Message, tool_part
from .errors import AcpError, ConnectionClosed, InvalidParams, ServiceError
from .events import PermissionRequested, PermissionResolved, QuestionRequested, QuestionResolved, TurnChanged

if TYPE_CHECKING:
    from .agent import Agent
    from .app import Deck

log = logging.getLogger(__name__)

_ids = itertools.count(1)
#: After a cancelled turn the next prompt waits until the agent has sent no update for
#: QUIET_AFTER_CANCEL seconds (at most QUIET_MAX): its late updates land in the cancelled
#: message, never in the next turn (ACP has no turn id to tell them apart).
QUIET_AFTER_CANCEL = 0.25
QUIET_MAX = 2.0
ALLOW_KINDS = ("allow_once", "allow_always")
READ_KINDS = frozenset({"read", "search"})


def rpc(**types: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a service method as callable by name, with the JSON types of its parameters."""

    def mark(method: Callable[..., Any]) -> Callable[..., Any]:
        method.rpc_params = types  # type: ignore[attr-defined]
        return method

    return mark


def check_params(method: Callable[..., Any], params: Any) -> dict[str, Any]:
    """Parameters by name, checked against the method's declared types."""
    types: dict[str, Any] = method.rpc_params  # type: ignore[attr-defined]
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidParams("params must be an object with the parameters by name")
    unknown = sorted(set(params) - set(types))
    if unknown:
        raise InvalidParams(f"unknown parameter(s): {', '.join(unknown)}")
    for name, kind in types.items():
        optional = isinstance(kind, tuple) and type(None) in kind
        if name not in params:
            if not optional:
                raise InvalidParams(f"missing parameter: {name}")
            continue
        value = params[name]
        if kind is object:
            continue
        if isinstance(value, bool) and kind in (int, (int, type(None))):
            raise InvalidParams(f"parameter {name} must be an integer")
        if not isinstance(value, kind):
            expected = " or ".join(_json_type(k.__name__) for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise InvalidParams(f"parameter {name} must be of type {expected}")
    return params


def _json_type(name: str) -> str:
    return {"str": "string", "int": "integer", "bool": "boolean", "dict": "object", "list": "array", "NoneType": "null"}.get(
        name, name
    )


class AgentService:
    def __init__(self, deck: Deck) -> None:
        self.deck = deck

    @rpc()
    async def List(self) -> list[dict[str, Any]]:
        return [agent.info() for agent in self.deck.agents.values()]

    @rpc(name=str)
    async def Start(self, name: str) -> dict[str, Any]:
        agent = self.deck.agent(name)
        await agent.start()
        return agent.info()

    @rpc(name=str)
    async def Stop(self, name: str) -> dict[str, Any]:
        agent = self.deck.agent(name)
        await agent.stop()
        return agent.info()

    @rpc(name=str)
    async def Restart(self, name: str) -> dict[str, Any]:
        agent = self.deck.agent(name)
        await agent.stop()
        await agent.start()
        return agent.info()

    @rpc(name=str)
    async def Logs(self, name: str) -> list[str]:
        return list(self.deck.agent(name).logs)

    @rpc(name=str, methodId=str)
    async def Authenticate(self, name: str, methodId: str) -> dict[str, Any]:
        """Restart `name` once with ACP `authenticate {methodId}` between initialize and session/new."""
        agent = self.deck.agent(name)
        if not methodId.strip():
            raise ServiceError("empty methodId: name one of the agent's authentication methods")
        if agent.init_result:  # known from an earlier start: refuse a bad id without a restart
            agent.check_auth_method(methodId)
        await agent.stop()
        await agent.start(auth_method=methodId)
        return agent.info()


class PendingAsk:
    """A permission request or a question waiting for a user's answer."""

    __slots__ = ("id", "agent", "future", "options", "payload")

    def __init__(self, id: str, agent: str, options: list[dict[str, Any]], payload: dict[str, Any]) -> None:
        self.id = id
        self.agent = agent
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.options = options
        self.payload = payload


class ConversationSink:
    """The agent's own session: updates and requests land in its conversation."""

    def __init__(self, chat: ChatService, agent: Agent, conv: Conversation) -> None:
        self.chat = chat
        self.agent = agent
        self.conv = conv
        self.on_update = conv.apply_update  # the hot path: one call less per streamed chunk

    def on_permission(self, params: dict[str, Any]) -> Any:
        return self.chat.ask_permission(self.agent, self.conv, params)

    def on_question(self, params: dict[str, Any]) -> Any:
        return self.chat.ask_question(self.agent, self.conv, params)


class ChatService:
    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self.conversations: dict[str, Conversation] = {}
        self.permissions: dict[str, PendingAsk] = {}
        self.questions: dict[str, PendingAsk] = {}
        self.rejections: dict[str, int] = {}
        self._turns: dict[str, asyncio.Task[None]] = {}
        #: Nobody is left to answer (end of input): permission requests and questions are cancelled at once.
        self.unattended = False
        #: `--approve` patterns: a permission request they name is approved without asking.
        self.approvals: tuple[Approval, ...] = ()

    def conversation(self, agent: str) -> Conversation:
        conv = self.conversations.get(agent)
        if conv is None:
            conv = self.conversations[agent] = Conversation(agent, self.deck.emit)
        return conv

    def forget(self) -> None:
        """Drop every conversation (another config was opened)."""
        for task in self._turns.values():
            task.cancel()
        self._turns.clear()
        self.conversations.clear()

    def session_opened(self, agent: Agent) -> None:
        """The agent's new ACP session now serves its conversation."""
        conv = self.conversation(agent.name)
        assert agent.session_id is not None
        if conv.sessions_used and conv.messages:
            conv.add_system(
                "agent-restarted", text="The agent restarted in a new session: it does not remember what came before."
            )
        conv.session_started(agent.session_id, agent.session_result)
        agent.attach(agent.session_id, ConversationSink(self, agent, conv))

    # -- sending --------------------------------------------------------------------------

    @rpc(agent=str, text=str)
    async def Send(self, agent: str, text: str) -> str:
        return self.send(agent, text).id

    def send(self, agent_name: str, text: str) -> Message:
        agent = self.deck.agent(agent_name)
        if not text.strip():
            raise ServiceError("empty message: there is nothing to send")
        conv = self.conversation(agent.name)
        agent.touch()  # a use from now on: idle_stop must not stop it before its turn starts
        waiting = conv.busy or bool(conv.queue) or agent.name in self._turns
        message = conv.add_user(text, queued=waiting)
        conv.queue.append(message)
        if conv.busy:  # while the agent starts, the turn's own turn:changed will count it
            self._turn_changed(conv)
        if agent.name not in self._turns:
            self._turns[agent.name] = self.deck.spawn(self._run_turns(agent, conv), f"turns {agent.name}")
        return message

    async def _run_turns(self, agent: Agent, conv: Conversation) -> None:
        after_cancel = False
        try:
            while conv.queue:
                try:
                    await agent.start()
                except ServiceError as exc:
                    self._unavailable(conv, str(exc))
                    return
                if after_cancel:
                    await self._quiet(conv)
                if not conv.queue:  # Cancel abandoned it while the agent started
                    break
                message = conv.queue.popleft()
                if message.queued:
                    message.queued = False
                    conv.updated(message)
                after_cancel = await self._turn(agent, conv, message) == "cancelled"
                if not agent.running and conv.queue:
                    # Stopped or crashed during the turn: what waits is not sent, and the agent
                    # is not started again behind the user's back (SPEC §3).
                    why = f"failed: {(agent.error or '').splitlines()[0]}" if agent.error else "stopped"
                    self._abandon_queue(conv, f"not sent: {agent.name} {why}")
                    self._turn_changed(conv)
        finally:
            if self._turns.get(agent.name) is asyncio.current_task():
                del self._turns[agent.name]

    def _unavailable(self, conv: Conversation, error: str) -> None:
        self._abandon_queue(conv, None)
        conv.add_system("agent-unavailable", error=error)
        self._turn_changed(conv)

    @staticmethod
    def _abandon_queue(conv: Conversation, error: str | None) -> int:
        """Drop the messages waiting to be sent; each keeps `error` as the reason."""
        abandoned = list(conv.queue)
        conv.queue.clear()
        for message in abandoned:
            if message.queued or error is not None:
                message.queued = False
                message.error = error
                conv.updated(message)
        return len(abandoned)

    @staticmethod
    async def _quiet(conv: Conversation) -> None:
        deadline = time.monotonic() + QUIET_MAX
        while (wait := conv.last_update + QUIET_AFTER_CANCEL - time.monotonic()) > 0 and time.monotonic() < deadline:
            await asyncio.sleep(min(wait, deadline - time.monotonic()))

    async def _turn(self, agent: Agent, conv: Conversation, message: Message) -> str | None:
        """One prompt turn; returns the stop reason (None when it ended with an error)."""
        agent.acquire()
        conv.busy = True
        self.rejections[agent.name] = 0
        reply = conv.begin_reply()
        self._turn_changed(conv)
        try:
            if agent.conn is None or agent.session_id is None:
                raise ConnectionClosed(agent.error or "the agent is not running")
            result = await agent.conn.request(
                "session/prompt",
                {"sessionId": agent.session_id, "prompt": [{"type": "text", "text": message.text_for_prompt}]},
            )
        except ConnectionClosed as exc:
            conv.finish(reply, None, agent.error or exc.args[0])
        except AcpError as exc:
            error = exc.args[0] or f"the agent answered error {exc.code}"
            conv.finish(reply, None, f"{error}\n{agent.auth_help()}" if exc.auth_required else error)
        else:
            result = result if isinstance(result, dict) else {}
            if isinstance(result.get("usage"), dict):
                reply.usage = result["usage"]
            stop = result.get("stopReason")
            if isinstance(stop, str):
                conv.finish(reply, stop)
            else:
                conv.finish(reply, None, f"the agent's answer has no stopReason: {str(result)[:200]}")
        finally:
            conv.busy = False
            agent.release()
            self._turn_changed(conv)
        return reply.stop_reason

    def _turn_changed(self, conv: Conversation) -> None:
        self.deck.emit(TurnChanged(conv.agent, conv.busy, conv.queued_count))

    @rpc(agent=str)
    async def Cancel(self, agent: str) -> dict[str, Any]:
        return self.cancel(agent)

    def cancel(self, agent_name: str) -> dict[str, Any]:
        agent = self.deck.agent(agent_name)
        conv = self.conversation(agent.name)
        abandoned = self._abandon_queue(conv, "cancelled")
        cancelled = conv.busy
        if conv.busy and agent.conn is not None and agent.session_id is not None:
            try:
                agent.conn.notify("session/cancel", {"sessionId": agent.session_id})
            except ConnectionClosed:
                pass
        for pending in list(self.permissions.values()):
            if pending.agent == agent.name and not pending.future.done():
                pending.future.set_result(None)
        for pending in list(self.questions.values()):
            if pending.agent == agent.name and not pending.future.done():
                pending.future.set_result(False)  # Cancel declines the question
        self._turn_changed(conv)
        return {"cancelled": cancelled, "abandoned": abandoned}

    # -- permissions ----------------------------------------------------------------------

    async def ask_permission(self, agent: Agent, conv: Conversation, params: dict[str, Any]) -> dict[str, Any]:
        options = [o for o in params.get("options") or [] if isinstance(o, dict) and "optionId" in o]
        raw_call = params.get("toolCall") or {}
        tool_call = conv.tool(str(raw_call.get("toolCallId", ""))) or {}
        if raw_call:
            tool_call = tool_part(raw_call, tool_call or None)
        auto, granter = approval(self.approvals, tool_call, options), "--approve"
        if auto is None:
            auto, granter = self._auto_answer(agent, tool_call, options), "the config"
        if auto is not None:
            agent.log(f"deck: permission for {tool_call.get('title') or 'a tool'} granted by {granter} ({auto})")
            return {"outcome": {"outcome": "selected", "optionId": auto}}
        pending_id = f"perm-{next(_ids)}"
        message_id = conv.current.id if conv.current else ""
        event = PermissionRequested(
            pending_id, agent.name, message_id, tool_call, options, self.rejections.get(agent.name, 0)
        )
        pending = PendingAsk(pending_id, agent.name, options, event.payload())
        self.permissions[pending_id] = pending
        conv.permissions[pending_id] = pending.payload
        self.deck.emit(event)
        if self.unattended and not pending.future.done():  # a listener may answer it as it is announced
            pending.future.set_result(None)
        option_id = None
        try:
            option_id = await pending.future
        finally:
            self.permissions.pop(pending_id, None)
            conv.permissions.pop(pending_id, None)
            self.deck.emit(PermissionResolved(pending_id, agent.name, option_id))
        if option_id is None:
            return {"outcome": {"outcome": "cancelled"}}
        kind = next((o.get("kind") for o in options if o["optionId"] == option_id), "")
        if str(kind).startswith("reject"):
            self.rejections[agent.name] = self.rejections.get(agent.name, 0) + 1
        return {"outcome": {"outcome": "selected", "optionId": option_id}}

    @staticmethod
    def _auto_answer(agent: Agent, tool_call: dict[str, Any], options: list[dict[str, Any]]) -> str | None:
        policy = agent.config.permissions
        if policy == "ask" or (policy == "allow-reads" and tool_call.get("kind") not in READ_KINDS):
            return None
        for kind in ALLOW_KINDS:
            for option in options:
                if option.get("kind") == kind:
                    return str(option["optionId"])
        return None

    @rpc(id=str, optionId=str)
    async def AnswerPermission(self, id: str, optionId: str) -> dict[str, Any]:
        return self.answer_permission(id, optionId)

    def answer_permission(self, pending_id: str, option_id: str) -> dict[str, Any]:
        """Answer at once: a listener of `permission:requested` may answer there, before the request
        would be cancelled for want of anyone to answer it (`unattended`)."""
        pending = self.permissions.get(pending_id)
        if pending is None or pending.future.done():
            raise ServiceError(f"no pending permission request {pending_id!r}")
        if option_id not in {o["optionId"] for o in pending.options}:
            valid = ", ".join(str(o["optionId"]) for o in pending.options)
            raise ServiceError(f"unknown option {option_id!r} for {pending_id}: choose one of {valid}")
        pending.future.set_result(option_id)
        return {"id": pending_id, "optionId": option_id}

    # -- questions (elicitation) ---------------------------------------------------------------

    async def ask_question(self, agent: Agent, conv: Conversation, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("mode", "form") != "form":
            return {"action": "decline"}
        question_id = f"question-{next(_ids)}"
        message_id = conv.current.id if conv.current else ""
        event = QuestionRequested(
            question_id, agent.name, message_id, str(params.get("message", "")), params.get("requestedSchema") or {}
        )
        pending = PendingAsk(question_id, agent.name, [], event.payload())
        self.questions[question_id] = pending
        self.deck.emit(event)
        if self.unattended:
            pending.future.set_result(None)
        try:
            answer = await pending.future
        finally:
            self.questions.pop(question_id, None)
            self.deck.emit(QuestionResolved(question_id, agent.name))
        if answer is None:
            return {"action": "cancel"}
        if answer is False:
            return {"action": "decline"}
        return {"action": "accept", "content": answer}

    @rpc(id=str, values=(dict, type(None)))
    async def AnswerQuestion(self, id: str, values: dict[str, Any] | None = None) -> dict[str, Any]:
        """Answer with `values`; `null` values decline the question."""
        pending = self.questions.get(id)
        if pending is None or pending.future.done():
            raise ServiceError(f"no pending question {id!r}")
        pending.future.set_result(values if values is not None else False)
        return {"id": id}

    # -- reading and settings ------------------------------------------------------------------

    @rpc(agent=str)
    async def Conversation(self, agent: str) -> dict[str, Any]:
        self.deck.agent(agent)
        return self.conversation(agent).snapshot()

    @rpc(agent=str, modeId=str)
    async def SetMode(self, agent: str, modeId: str) -> dict[str, Any]:
        target = await self._session_agent(agent)
        conv = self.conversation(agent)
        await target.conn.request("session/set_mode", {"sessionId": target.session_id, "modeId": modeId})  # type: ignore[union-attr]
        conv.apply_update({"sessionUpdate": "current_mode_update", "currentModeId": modeId})
        return {"modes": conv.modes}

    @rpc(agent=str, configId=str, value=(str, bool))
    async def SetConfigOption(self, agent: str, configId: str, value: str | bool) -> dict[str, Any]:
        target = await self._session_agent(agent)
        conv = self.conversation(agent)
        params: dict[str, Any] = {"sessionId": target.session_id, "configId": configId, "value": value}
        if isinstance(value, bool):
            params["type"] = "boolean"
        result = await target.conn.request("session/set_config_option", params)  # type: ignore[union-attr]
        if isinstance(result, dict) and isinstance(result.get("configOptions"), list):
            conv.apply_update({"sessionUpdate": "config_option_update", "configOptions": result["configOptions"]})
        return {"configOptions": conv.config_options}

    async def _session_agent(self, name: str) -> Agent:
        agent = self.deck.agent(name)
        await agent.start()
        if agent.conn is None or agent.session_id is None:
            raise ServiceError(f"{name} has no session")
        return agent

    # -- end of input ----------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait until every turn and queued message is done."""
        while self._turns:
            await asyncio.gather(*self._turns.values(), return_exceptions=True)

    def cancel_pending_asks(self) -> None:
        """Nobody is left to answer: pending permissions and questions are cancelled."""
        for pending in [*self.permissions.values(), *self.questions.values()]:
            if not pending.future.done():
                pending.future.set_result(None)

    def end_of_input(self) -> None:
        """The user is gone (end of stdin): what is pending, and what agents ask from now on, is cancelled,
        unless a listener answers it when it is announced (an answer the user typed in advance)."""
        self.unattended = True
        self.cancel_pending_asks()


class ConfigService:
    """The config file: read it, check it, save it, switch to another (logic in `watch.py`)."""

    def __init__(self, deck: Deck) -> None:
        from .watch import LiveConfig

        self.deck = deck
        self.live = LiveConfig(deck)

    def start_watching(self) -> None:
        """Follow the config file's changes, and list it among the recent ones (called by `Deck.run`)."""
        from .config import is_pipe
        from .watch import remember

        path = self.deck.config_path
        if path is not None and not is_pipe(path):  # `--config <(…)`: read once, not a file to open again
            remember(path)
        self.live.start()

    def section(self, name: str) -> Any:
        """A plugin's config section, validated by its own model (None when absent or invalid)."""
        return self.live.section(name)

    @rpc()
    async def Current(self) -> dict[str, Any]:
        """The config in use; `baseHash` is the sha256 of the file as read (of `Content()` in UTF-8), for `Save`."""
        from .config import digest

        deck = self.deck
        return {
            "path": str(deck.config_path) if deck.config_path else "",
            "source": deck.config_source,
            "created": deck.config_created,
            "valid": not any(not p.warning for p in deck.problems),
            "problems": [p.to_dict() for p in deck.problems if not p.warning],
            "warnings": [p.to_dict() for p in deck.problems if p.warning],
            "theme": deck.config.theme,
            "language": deck.config.language,
            "baseHash": digest(deck.text),
        }

    @rpc()
    async def Content(self) -> str:
        """The config file's text exactly as read: its sha256 in UTF-8 is `Current()["baseHash"]`."""
        return self.deck.text

    @rpc(text=str)
    async def Validate(self, text: str) -> dict[str, Any]:
        from .config import parse

        # In a thread: checking a big text must not stall the event loop.
        return _checked(await asyncio.to_thread(parse, text, self.deck.config_sections()))

    @rpc(text=str, baseHash=(str, type(None)))
    async def Save(self, text: str, baseHash: str | None = None) -> dict[str, Any]:
        """Write `text` (atomically) and apply it if it is valid; otherwise write nothing.

        With `baseHash` (from `Current`), refused when the file changed since it was read, so an
        edit made meanwhile in an editor is never silently overwritten.
        """
        loaded = await self.live.save(text, baseHash)
        path = self.deck.config_path
        return {"saved": loaded.config is not None, "path": str(path) if path else "", **_checked(loaded)}

    @rpc()
    async def Schema(self) -> dict[str, Any]:
        from .config import json_schema

        return json_schema(self.deck.config_sections())

    @rpc(path=str)
    async def Open(self, path: str) -> dict[str, Any]:
        from pathlib import Path

        if not path.strip():
            raise ServiceError("empty path: name the config file to open")
        await self.live.open(Path(path))
        return await self.Current()

    @rpc()
    async def Choose(self) -> str:
        """Ask the frontend's file picker for a config and open it; "" if the user cancelled."""
        import inspect

        frontend = self.deck.frontend
        picking = frontend.choose_file() if frontend is not None else None
        if picking is None:
            name = getattr(frontend, "name", "") or "this"
            raise ServiceError(f"the {name} frontend has no file picker: call ConfigService.Open with a path")
        chosen = await picking if inspect.isawaitable(picking) else picking
        if not chosen:
            return ""
        await self.Open(str(chosen))
        return str(self.deck.config_path)

    @rpc()
    async def Recent(self) -> list[str]:
        """Config files opened, most recent first (8 at most)."""
        from .config import recent_files

        return recent_files()


def _checked(loaded: Any) -> dict[str, Any]:
    return {
        "valid": loaded.config is not None,
        "problems": [p.to_dict() for p in loaded.errors],
        "warnings": [p.to_dict() for p in loaded.warnings],
    }
