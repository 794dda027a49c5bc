"""The services frontends and plugins call, by wire name: AgentService, ChatService, ConfigService.

A thin layer: each `@rpc` method is reachable over the wire (`"method": "ChatService.Send"`,
parameters by name, checked against its annotations: `rpc.py`) and hands the work to the
module that does it: agents (`agent.py`), conversations (`conversations.py`), the turn queue
(`turns.py`), pending requests (`pending.py`), session settings (`settings.py`) and the
config file (`watch.py`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from deck.agent.listing import check_session_id
from deck.chat.approval import Approval
from deck.chat.book import Conversations
from deck.chat.conversation import Conversation, new_id
from deck.chat.modes import SessionSettings
from deck.chat.pending import PendingRequests
from deck.chat.spending import Spending
from deck.chat.turns import Turns
from deck.errors import InvalidParams, ServiceError
from deck.events import ConversationReset
from deck.runtime.rpc import rpc
from deck.states import AgentState

if TYPE_CHECKING:
    from deck.agent.agent import Agent
    from deck.runtime.deck import Deck


class AgentService:
    """The agents: list, start, stop, restart, logs, authentication."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self._deleting: dict[str, asyncio.Lock] = {}  # per agent: DeleteSession's runs, one at a time

    def _info(self, agent: Agent) -> dict[str, Any]:
        """An agent as the service lists it: its own description, and the sticky notices on it."""
        return {**agent.info(), "notices": self.deck.notices_of(agent.name)}

    @rpc("AgentService.List")
    async def list_agents(self) -> list[dict[str, Any]]:
        return [self._info(agent) for agent in self.deck.agents.values()]

    @rpc("AgentService.Start")
    async def start(self, name: str) -> dict[str, Any]:
        agent = self.deck.agent(name)
        await agent.start()
        return self._info(agent)

    @rpc("AgentService.Stop")
    async def stop(self, name: str) -> dict[str, Any]:
        agent = self.deck.agent(name)
        await agent.stop()
        return self._info(agent)

    @rpc("AgentService.Restart")
    async def restart(self, name: str) -> dict[str, Any]:
        agent = self.deck.agent(name)
        await agent.stop()
        await agent.start()
        return self._info(agent)

    @rpc("AgentService.Logs")
    async def logs(self, name: str) -> list[str]:
        return list(self.deck.agent(name).logs)

    @rpc("AgentService.Authenticate")
    async def authenticate(self, name: str, methodId: str) -> dict[str, Any]:
        """Restart `name` once with ACP `authenticate {methodId}` between initialize and session/new."""
        agent = self.deck.agent(name)
        if not methodId.strip():
            raise ServiceError("empty methodId: name one of the agent's authentication methods")
        if agent.init_result:  # known from an earlier start: refuse a bad id without a restart
            agent.check_auth_method(methodId)
        await agent.stop()
        await agent.start(auth_method=methodId)
        return self._info(agent)


    @rpc("AgentService.DeleteSession")
    async def delete_session(self, name: str, sessionId: str) -> dict[str, Any]:
        """ACP `session/delete` of one of the agent's own sessions, where it lists
        `sessionCapabilities.delete` (what `deck history --forget` asks). An agent that is not
        running is started for it with no session of deck's, and stopped again after."""
        agent = self.deck.agent(name)
        check_session_id(sessionId)
        async with self._deleting.setdefault(name, asyncio.Lock()):  # one run for deleting at a time
            if agent.state is AgentState.STARTING:
                await agent.start()  # someone else's start: it goes on, and serves the delete too
            if sessionId == agent.session_id and agent.running:
                raise ServiceError(f"{sessionId} is {name}'s current session: start a new conversation first")
            started_here = not agent.running
            if started_here:
                await agent.start(session=False)
            try:
                await agent.delete_session(sessionId)
            finally:
                if started_here:
                    await agent.stop()
        return {"agent": name, "sessionId": sessionId}

    @rpc("AgentService.Logout")
    async def logout(self, name: str) -> dict[str, Any]:
        """ACP `logout`, where the agent lists `agentCapabilities.auth.logout` (started for it if it must
        be); the agent is then stopped, so that its next start authenticates again."""
        agent = self.deck.agent(name)
        await agent.start()
        caps = agent.init_result.get("agentCapabilities")
        auth = caps.get("auth") if isinstance(caps, dict) else None
        if not (isinstance(auth, dict) and isinstance(auth.get("logout"), dict)):
            raise ServiceError(f"{name} does not offer to log out (its initialize answer lists no agentCapabilities.auth.logout)")
        if agent.conn is None:
            raise ServiceError(f"{name} is not running")
        await agent.conn.request("logout", {})
        agent.log("deck: logged out (ACP logout); the next start authenticates again")
        await agent.close_session()
        await agent.stop()
        return self._info(agent)


class HistoryProvider(Protocol):
    """What keeps conversations beyond one run (the `history` plugin provides one, `deck_history_provider`).

    Every method answers for the config in use; a problem (no such conversation, the database
    unusable) is a `ServiceError` saying why."""

    async def conversations(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        """Stored conversations newest first: `id, agent, title, createdAt, updatedAt, messages` (a count)."""
        ...

    async def search(self, query: str, agent: str | None, limit: int) -> list[dict[str, Any]]:
        """Messages matching `query`, newest first: `conversationId, agent, messageId, role, snippet, at`."""
        ...

    async def get(self, conversation_id: str, tail: int | None = None) -> dict[str, Any]:
        """One stored conversation, its `messages` as wire dicts, with `agent`, `sessionId`, `title`.
        With `tail`, only its last messages holding at most that many bytes, and `cut {messages,
        bytes}` counting those left out."""
        ...

    def continue_conversation(self, agent: str, stored: dict[str, Any]) -> None:
        """`stored` (from `get`) is `agent`'s current conversation again: its new messages go there."""
        ...

    def start_conversation(self, agent: str, session_id: str | None) -> str:
        """A new stored conversation for the agent's own session `session_id` (None: the session its next
        start opens), made `agent`'s current one; its id."""
        ...

    async def spending(self) -> list[dict[str, Any]]:
        """What the agents spent, oldest day first: `[{day, agent, currency, amount}]` (local days)."""
        ...


class ChatService:
    """Talking with the agents: send, cancel, answer what they ask, read a conversation, change its settings."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self.pending = PendingRequests(deck)
        #: What the agents spent since the deck started, and per day (`DeckService.Usage`, budgets).
        self.spending = Spending()
        self.conversations = Conversations(deck, self.pending, self.spending)
        self.settings = SessionSettings(deck, self.conversations)
        self.conversations.again = self.settings.again
        self.turns = Turns(deck, self.conversations, self.pending, self.settings)

    @property
    def history(self) -> HistoryProvider | None:
        """Where conversations are kept beyond this run (a plugin's `deck_history_provider`); None while history is off."""
        provider: HistoryProvider | None = self.deck.pm.hook.deck_history_provider(deck=self.deck)
        return provider

    def conversation(self, agent: str) -> Conversation:
        """`agent`'s conversation (made on first use)."""
        return self.conversations.of(agent)

    @property
    def approvals(self) -> tuple[Approval, ...]:
        """`--approve` patterns: a permission request they name is approved without asking."""
        return self.pending.approvals

    @approvals.setter
    def approvals(self, approvals: tuple[Approval, ...]) -> None:
        self.pending.approvals = approvals

    # -- on the wire --------------------------------------------------------------------------

    @rpc("ChatService.Send")
    def send(self, agent: str, text: str) -> str:
        """Queue `text` for `agent` (started if it must); the id of the user's message."""
        return self.turns.send(agent, text).id

    @rpc("ChatService.Cancel")
    def cancel(self, agent: str, session: str | None = None) -> dict[str, Any]:
        """End `agent`'s turn and abandon its queue; with `session`, the work of that subagent alone."""
        if session is not None:
            return self.turns.cancel_child(agent, session)
        return self.turns.cancel(agent)

    @rpc("ChatService.Queue")
    def queue(self, agent: str) -> list[dict[str, Any]]:
        """The messages waiting to be sent to `agent`, in order: `[{id, text, createdAt}]`."""
        return self.turns.queued(agent)

    @rpc("ChatService.Unqueue")
    def unqueue(self, agent: str, id: str) -> dict[str, Any]:
        """Take message `id` out of `agent`'s queue: it is never sent (kept in the conversation, marked removed)."""
        return self.turns.unqueue(agent, id)

    @rpc("ChatService.EditQueued")
    def edit_queued(self, agent: str, id: str, text: str) -> dict[str, Any]:
        """Replace the text of message `id` while it waits in `agent`'s queue."""
        return self.turns.edit_queued(agent, id, text)

    @rpc("ChatService.Pending")
    def list_pending(self) -> list[dict[str, Any]]:
        """The permission requests and questions waiting for an answer, in the order asked: each the
        payload of its `permission:requested` or `question:requested` event, and its `kind`."""
        return self.pending.wire()

    @rpc("ChatService.AnswerPermission")
    def answer_permission(self, id: str, optionId: str) -> dict[str, Any]:
        return self.pending.answer_permission(id, optionId)

    @rpc("ChatService.AnswerQuestion")
    def answer_question(self, id: str, values: dict[str, Any] | None = None) -> dict[str, Any]:
        """Answer with `values`; `null` values decline the question."""
        return self.pending.answer_question(id, values)

    @rpc("ChatService.Conversation")
    async def conversation_snapshot(self, agent: str) -> dict[str, Any]:
        self.deck.agent(agent)
        return self.conversations.of(agent).snapshot()

    @rpc("ChatService.SetMode")
    async def set_mode(self, agent: str, modeId: str) -> dict[str, Any]:
        return await self.settings.set_mode(agent, modeId)

    @rpc("ChatService.SetConfigOption")
    async def set_config_option(self, agent: str, configId: str, value: str | bool) -> dict[str, Any]:
        return await self.settings.set_config_option(agent, configId, value)

    @rpc("ChatService.NewConversation")
    async def new_conversation(self, agent: str, apart: bool = False, stored: bool = False) -> dict[str, Any]:
        """A fresh conversation for `agent`; the old one stays in the history. A running agent is
        restarted, so that a new session (`session/new`) serves the new conversation. The next start
        of deck comes back to it, unless it is kept `apart` (a one-shot's, as `deck send` makes).
        `stored`: the history keeps it at once, empty, and its id is `conversationId` (`deck acp`
        names its sessions so; null while the history is off); else it is stored with its first message."""
        running = await self._leave_conversation(agent)
        self.conversations.reset(agent)
        history = self.history if stored and not apart else None
        conversation_id = history.start_conversation(agent, None) if history is not None else None
        # Without `stored`, the history starts a new stored one at the next message.
        self.deck.emit(ConversationReset(agent, conversation_id, apart=apart or None))
        if running:
            await self.deck.agent(agent).start()
        return {"agent": agent, "conversationId": conversation_id} if stored else {"agent": agent}

    @rpc("ChatService.Fork")
    async def fork(self, agent: str) -> dict[str, Any]:
        """A new conversation that starts as a copy of `agent`'s current one, served by a fork of its
        session (ACP `session/fork`, where the agent lists `sessionCapabilities.fork`; the agent is
        started if it must be). The one before stays in the history, its session the agent's."""
        target = self.deck.agent(agent)
        conv = self.conversations.of(agent)
        if conv.busy or conv.queue:
            raise ServiceError(f"{agent} is answering: cancel its answer first (ChatService.Cancel)")
        await target.start()
        if not target.can_fork_sessions:
            raise ServiceError(f"{agent} cannot fork its session: its initialize answer has no sessionCapabilities.fork")
        forked_from = target.session_id
        session = await target.fork_session()
        assert session.id is not None
        copies = [{**m.to_dict(), "id": new_id("msg")} for m in conv.messages]  # the old ids stay the old one's
        history = self.history
        conversation_id = history.start_conversation(agent, session.id) if history is not None else None
        self.conversations.restore(agent, {"messages": copies, "sessionId": session.id, "title": conv.title})
        await target.serve(session)
        for message in conv.messages:  # the history keeps the copies in the new conversation
            conv.updated(message)
        self.deck.emit(ConversationReset(agent, conversation_id))
        return {"agent": agent, "conversationId": conversation_id, "sessionId": session.id, "forkedFrom": forked_from}

    @rpc("ChatService.History")
    async def history_list(self, agent: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """The stored conversations of this config, newest first (`messages`: how many)."""
        return await self._history().conversations(agent, _positive(limit))

    @rpc("ChatService.Search")
    async def search(self, query: str, agent: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """Stored messages of this config holding every word of `query` (`word*`: a prefix), newest first."""
        if not query.strip():
            raise ServiceError("empty query: give the words to find")
        return await self._history().search(query, agent, _positive(limit))

    @rpc("ChatService.AgentSessions")
    async def agent_sessions(self, agent: str) -> list[dict[str, Any]]:
        """The agent's own sessions in its cwd (ACP `session/list`), other clients' too:
        `[{sessionId, cwd, title, updatedAt}]`. The agent is started if it must be, as for `Send`."""
        target = self.deck.agent(agent)
        await target.start()
        return await target.list_sessions()

    @rpc("ChatService.OpenConversation")
    async def open_conversation(
        self, id: str | None = None, agent: str | None = None, sessionId: str | None = None, apart: bool = False
    ) -> dict[str, Any]:
        """Make stored conversation `id` its agent's current one. The agent is stopped if it runs;
        its next start resumes or loads the conversation's session where it can (`Agent.start`).
        The next start of deck comes back to it, unless it is opened `apart` (by a one-shot `deck send`).
        With `agent` too, a conversation of another agent's is refused with nothing changed: a client
        that speaks for one agent (`deck acp`) never switches another's conversation.

        With `agent` and `sessionId` instead (from `AgentSessions`): the agent's own session
        becomes its current conversation, loaded at once (its replay forms the conversation)."""
        if id is None:
            if agent is None or not sessionId:
                raise ServiceError("give the id of a stored conversation, or an agent and one of its sessionIds")
            return await self._open_agent_session(agent, sessionId)
        history = self._history()
        stored = await history.get(id, self.conversations.caps().conversation * 3 // 4)
        if agent is not None and stored["agent"] != agent:
            raise ServiceError(
                f"conversation {id!r} is another agent's ({stored['agent']}'s), not {agent}'s",
                {"conversationId": id, "agent": stored["agent"]},
            )
        agent = stored["agent"]
        if not apart and self._is_current(agent, stored):  # nothing to change: the agent goes on as it is
            return {"agent": agent, "conversationId": id, "current": True}
        await self._leave_conversation(agent)
        history.continue_conversation(agent, stored)  # first: a message the restore finishes goes there
        self.conversations.restore(agent, stored)
        self.deck.emit(ConversationReset(agent, id, apart or None))
        return {"agent": agent, "conversationId": id}

    def _is_current(self, agent: str, stored: dict[str, Any]) -> bool:
        """Whether `stored` is the agent's conversation in this deck already: its last message is there
        (message ids are unique across runs; a fork's copies have new ones)."""
        messages = stored.get("messages") or []
        last = messages[-1].get("id") if messages and isinstance(messages[-1], dict) else None
        return isinstance(last, str) and last in self.conversations.of(agent).by_id

    async def _open_agent_session(self, agent: str, session_id: str) -> dict[str, Any]:
        """The agent's own session as a new conversation (stored, when history is on), then the agent
        started on it. Refused, with nothing changed, when the agent can neither load nor resume."""
        target = self.deck.agent(agent)
        if self.conversations.of(agent).session_id == session_id:
            raise ServiceError(f"session {session_id!r} is the current conversation of {agent} already")
        if not target.init_result:
            await target.start()  # what it can do is known from its initialize answer
        if not (target.can_load_sessions or target.can_resume_sessions):
            raise ServiceError(f"{agent} cannot load or resume sessions: its initialize answer offers neither")
        await self._leave_conversation(agent)
        history = self.history
        conversation_id = history.start_conversation(agent, session_id) if history is not None else None
        self.conversations.restore(agent, {"messages": [], "sessionId": session_id})
        self.deck.emit(ConversationReset(agent, conversation_id))
        await target.start()
        if target.session_id != session_id:
            why = target.session.restarted if target.session is not None else ""
            raise ServiceError(f"{agent} could not open session {session_id!r}: {why or 'it opened another one'}")
        return {"agent": agent, "conversationId": conversation_id, "sessionId": session_id}

    def _history(self) -> HistoryProvider:
        history = self.history
        if history is None:
            raise ServiceError(
                "history is off: it is disabled ([history] enabled = false), or its database cannot be used"
                " (deck said why at start)"
            )
        return history

    async def _leave_conversation(self, agent: str) -> bool:
        """Stop `agent` before its conversation is replaced (refused while it answers); whether it ran."""
        running = self.deck.agent(agent).running
        conv = self.conversations.of(agent)
        if conv.busy or conv.queue:
            raise ServiceError(f"{agent} is answering: cancel its answer first (ChatService.Cancel)")
        await self.deck.agent(agent).close_session()  # its session is left for good
        await self.deck.agent(agent).stop()
        return running

    # -- for the deck and its frontends -------------------------------------------------------

    def forget(self) -> None:
        """Drop every conversation and what waits to be sent (another config was opened)."""
        self.turns.forget()
        self.conversations.forget()

    async def drain(self) -> None:
        """Wait until every turn and queued message is done."""
        await self.turns.drain()

    def end_of_input(self) -> None:
        """The user is gone: what is pending, and what agents ask from now on, is cancelled (`PendingRequests`)."""
        self.pending.end_of_input()


class ConfigService:
    """The config file: read it, check it, save it, switch to another (logic in `watch.py`)."""

    def __init__(self, deck: Deck) -> None:
        from deck.config.watch import LiveConfig

        self.deck = deck
        self.live = LiveConfig(deck)

    def start_watching(self) -> None:
        """Follow the config file's changes, and list it among the recent ones (called by `Deck.run`)."""
        from deck.config.files import is_pipe
        from deck.config.watch import remember

        path = self.deck.config_path
        if path is not None and not is_pipe(path):  # `--config <(…)`: read once, not a file to open again
            remember(path)
        self.live.start()

    def section(self, name: str) -> Any:
        """A plugin's config section, validated by its own model (None when absent or invalid)."""
        return self.deck.section(name)

    @rpc("ConfigService.Current")
    async def current(self) -> dict[str, Any]:
        """The config in use; `baseHash` is the sha256 of the file as read (of `Content()` in UTF-8), for `Save`."""
        from deck.config.files import digest

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

    @rpc("ConfigService.Content")
    async def content(self) -> str:
        """The config file's text exactly as read: its sha256 in UTF-8 is `Current()["baseHash"]`."""
        return self.deck.text

    @rpc("ConfigService.Validate")
    async def validate(self, text: str) -> dict[str, Any]:
        # In a thread: checking a big text must not stall the event loop.
        return _checked(await asyncio.to_thread(self.deck.check_config, text))

    @rpc("ConfigService.Save")
    async def save(self, text: str, baseHash: str | None = None) -> dict[str, Any]:
        """Write `text` (atomically) and apply it if it is valid; otherwise write nothing.

        With `baseHash` (from `Current`), refused when the file changed since it was read, so an
        edit made meanwhile in an editor is never silently overwritten.
        """
        loaded = await self.live.save(text, baseHash)
        path = self.deck.config_path
        return {"saved": loaded.config is not None, "path": str(path) if path else "", **_checked(loaded)}

    @rpc("ConfigService.Schema")
    async def schema(self) -> dict[str, Any]:
        from deck.config.output import json_schema

        return json_schema(self.deck.config_sections())

    @rpc("ConfigService.Open")
    async def open(self, path: str) -> dict[str, Any]:
        from pathlib import Path

        if not path.strip():
            raise ServiceError("empty path: name the config file to open")
        await self.live.open(Path(path))
        return await self.current()

    @rpc("ConfigService.Choose")
    async def choose(self) -> str:
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
        await self.open(str(chosen))
        return str(self.deck.config_path)

    @rpc("ConfigService.Recent")
    async def recent(self) -> list[str]:
        """Config files opened, most recent first (8 at most)."""
        from deck.config.files import recent_files

        return recent_files()


def _positive(limit: int) -> int:
    if limit < 1:
        raise InvalidParams(f"limit must be a positive integer, not {limit}")
    return limit


def _checked(loaded: Any) -> dict[str, Any]:
    return {
        "valid": loaded.config is not None,
        "problems": [p.to_dict() for p in loaded.errors],
        "warnings": [p.to_dict() for p in loaded.warnings],
    }
