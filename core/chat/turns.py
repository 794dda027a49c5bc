"""The turn queue: what the user sends waits its turn, then one task per agent prompts it, one after another.

A message sent while the agent answers (or starts) is queued; `cancel` ends the turn in
progress and abandons the queue. A cancel always ends the turn: an agent that has not ended
it END_TURN_GRACE seconds later has it ended by deck, so neither what is sent next nor the end
of input waits on an agent that ignores `session/cancel`. A stopped or crashed agent is never
started again behind the user's back to send what waits: those messages stay unsent, with
the reason.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from deck.chat.conversation import Conversation, Message
from deck.errors import AcpError, ConnectionClosed, ServiceError
from deck.events import TurnChanged

if TYPE_CHECKING:
    from deck.agent.agent import Agent
    from deck.agent.session import Session
    from deck.chat.book import Conversations
    from deck.chat.pending import PendingRequests
    from deck.chat.host import ChatHost
    from deck.chat.modes import SessionSettings

#: After a cancelled turn the next prompt waits until the agent has sent no update for
#: QUIET_AFTER_CANCEL seconds (at most QUIET_MAX): its late updates land in the cancelled
#: message, never in the next turn (ACP has no turn id to tell them apart).
QUIET_AFTER_CANCEL = 0.25
QUIET_MAX = 2.0
#: After a Cancel, how long the agent has to end its turn (answer its session/prompt). Past that
#: deck ends the turn as cancelled, says so in the message and the agent's log, and ignores the
#: answer when it comes; the agent keeps running, with its session, and what is sent next goes to it.
END_TURN_GRACE = 3.0
#: The `error` of a message taken out of the queue before it was sent.
REMOVED = "removed from the queue: not sent"


class Turns:
    """Each agent's queue of messages to send and the task that sends them."""

    def __init__(
        self, deck: ChatHost, conversations: Conversations, pending: PendingRequests, settings: SessionSettings
    ) -> None:
        self._deck = deck
        #: The user's choices (model, mode…), set again on an agent's new session before its next turn.
        self.settings = settings
        self._conversations = conversations
        self._pending = pending
        self._tasks = deck.tasks.group("turns")
        self._runners: dict[str, asyncio.Task[None]] = {}
        #: Agent name → the future a Cancel resolves during its turn (the grace starts then).
        self._cancels: dict[str, asyncio.Future[None]] = {}

    def send(self, agent_name: str, text: str) -> Message:
        """Add the user's message to the conversation and queue it; the agent starts if it must."""
        agent = self._deck.agent(agent_name)
        if not text.strip():
            raise ServiceError("empty message: there is nothing to send")
        self._deck.before_prompt(agent, text)
        conv = self._conversations.of(agent.name)
        agent.touch()  # a use from now on: idle_stop must not stop it before its turn starts
        waiting = conv.busy or bool(conv.queue) or agent.name in self._runners
        message = conv.add_user(text, queued=waiting)
        conv.queue.append(message)
        if conv.busy:  # while the agent starts, the turn's own turn:changed will count it
            self._changed(conv)
        if agent.name not in self._runners:
            self._runners[agent.name] = self._tasks.spawn(self._run(agent, conv), f"turns {agent.name}")
        return message

    def cancel(self, agent_name: str) -> dict[str, Any]:
        """End the turn in progress and abandon the queue; what the agent asked the user is cancelled."""
        agent = self._deck.agent(agent_name)
        conv = self._conversations.of(agent.name)
        queued = conv.queued_count
        abandoned = _abandon_queue(conv, "cancelled")
        cancelled = conv.busy
        if conv.busy:
            self._pending.stopping.add(agent.name)
            if agent.session is not None:
                agent.session.cancel()
            given = self._cancels.get(agent.name)
            if given is not None and not given.done():
                given.set_result(None)
        self._pending.cancel_agent(agent.name)
        if conv.queued_count != queued:  # the turn's own end says when it stops: only the count changed
            self._changed(conv)
        return {"cancelled": cancelled, "abandoned": abandoned}

    def cancel_child(self, agent_name: str, session: str) -> dict[str, Any]:
        """End the work of subagent session `session` alone (`session/cancel` on it), where the child
        offers it (its capabilities' `cancel`); what it asked the user is cancelled, and what it asks
        until it reports new work (`PendingRequests.stop_child`). Refused otherwise."""
        agent = self._deck.agent(agent_name)
        child = self._conversations.of(agent.name).children.get(session)
        if child is None:
            raise ServiceError(f"{agent.name} has no subagent session {session[:100]!r}")
        name = child.title or session
        if not child.cancel:
            raise ServiceError(f"subagent {name!r} of {agent.name} cannot be cancelled alone: it does not offer cancel")
        live = agent.sessions.get(session)
        if live is None or live.parent is None:
            raise ServiceError(f"subagent {name!r} of {agent.name} is not running")
        self._pending.stop_child(agent.name, session)
        live.cancel()
        return {"cancelled": child.working, "session": session}

    def queued(self, agent_name: str) -> list[dict[str, Any]]:
        """The messages waiting to be sent to `agent_name`, in the order they will go."""
        conv = self._conversations.of(self._deck.agent(agent_name).name)
        return [{"id": m.id, "text": m.text_for_prompt, "createdAt": m.created_at} for m in conv.queue]

    def unqueue(self, agent_name: str, message_id: str) -> dict[str, Any]:
        """Take a message out of the queue before it is sent: it stays in the conversation, marked
        removed (its `error`), and is never sent."""
        conv, message = self._waiting(agent_name, message_id)
        conv.queue.remove(message)
        message.queued = False
        message.error = REMOVED
        conv.updated(message)
        self._changed(conv)
        return {"id": message.id, "queued": len(conv.queue)}

    def edit_queued(self, agent_name: str, message_id: str, text: str) -> dict[str, Any]:
        """Replace the text of a message that waits to be sent."""
        if not text.strip():
            raise ServiceError("empty message: remove it from the queue with ChatService.Unqueue instead")
        conv, message = self._waiting(agent_name, message_id)
        self._deck.before_prompt(self._deck.agent(agent_name), text)
        conv.replace_text(message, text)
        return {"id": message.id, "text": text}

    def _waiting(self, agent_name: str, message_id: str) -> tuple[Conversation, Message]:
        conv = self._conversations.of(self._deck.agent(agent_name).name)
        for message in conv.queue:
            if message.id == message_id:
                return conv, message
        raise ServiceError(f"{message_id} does not wait in {agent_name}'s queue: it was sent, removed, or never queued")

    async def drain(self) -> None:
        """Wait until every turn and queued message is done."""
        while self._runners:
            await asyncio.gather(*self._runners.values(), return_exceptions=True)

    def forget(self) -> None:
        """Stop sending (another config was opened: the conversations go)."""
        for task in self._runners.values():
            task.cancel()
        self._runners.clear()

    # -- the runner ---------------------------------------------------------------------------

    async def _run(self, agent: Agent, conv: Conversation) -> None:
        after_cancel = False
        try:
            while conv.queue:
                try:
                    await agent.start()
                except ServiceError as exc:
                    self._unavailable(conv, str(exc))
                    return
                await self.settings.settled(agent.name)  # the user's model, mode… set again first
                if after_cancel:
                    await _quiet(conv)
                if not conv.queue:  # Cancel abandoned it while the agent started
                    break
                message = conv.queue.popleft()
                after_cancel = await self._turn(agent, conv, message) == "cancelled"
                if not agent.running and conv.queue:
                    # Stopped or crashed during the turn: what waits is not sent, and the agent
                    # is not started again behind the user's back.
                    why = f"failed: {(agent.error or '').splitlines()[0]}" if agent.error else "stopped"
                    _abandon_queue(conv, f"not sent: {agent.name} {why}")
                    self._changed(conv)
        finally:
            if self._runners.get(agent.name) is asyncio.current_task():
                del self._runners[agent.name]

    async def _turn(self, agent: Agent, conv: Conversation, message: Message) -> str | None:
        """One prompt turn; returns the stop reason (None when it ended with an error).

        The turn begins with its `turn:changed` (busy), then the message sent stops being queued
        and the agent's answer opens; it ends with the answer finished, then `turn:changed`."""
        agent.acquire()
        conv.busy = True
        self._pending.rejections[agent.name] = 0
        # Before the turn's first event: a listener may Cancel as it hears it.
        cancel = self._cancels[agent.name] = asyncio.get_running_loop().create_future()
        self._changed(conv)
        if message.queued:
            message.queued = False
            conv.updated(message)
        reply = conv.begin_reply()
        try:
            if agent.session is None:
                raise ConnectionClosed(agent.error or "the agent is not running")
            result = await self._prompt(agent, agent.session, message.text_for_prompt, cancel)
        except ConnectionClosed as exc:
            conv.finish(reply, None, agent.error or exc.args[0])
        except AcpError as exc:
            error = exc.args[0] or f"the agent answered error {exc.code}"
            conv.finish(reply, None, f"{error}\n{agent.auth_help()}" if exc.auth_required else error)
        else:
            if result is None:  # cancelled, and the agent did not stop in time
                agent.log(f"deck: no answer to session/prompt {END_TURN_GRACE:g}s after session/cancel: "
                          "deck ended the turn; a late answer is ignored")  # fmt: skip
                why = f"the agent did not stop within {END_TURN_GRACE:g}s of the cancel: deck ended its turn"
                conv.finish(reply, "cancelled", why)
            else:
                if isinstance(result.get("usage"), dict):
                    conv.turn_usage(reply, result["usage"])
                stop = result.get("stopReason")
                if isinstance(stop, str):
                    conv.finish(reply, stop)
                else:
                    conv.finish(reply, None, f"the agent's answer has no stopReason: {str(result)[:200]}")
        finally:
            del self._cancels[agent.name]
            self._pending.stopping.discard(agent.name)
            self._pending.cancel_agent(agent.name)  # asked and left unanswered by a turn that is over
            conv.busy = False
            agent.release()
            self._changed(conv)
        return reply.stop_reason

    async def _prompt(
        self, agent: Agent, session: Session, text: str, cancel: asyncio.Future[None]
    ) -> dict[str, Any] | None:
        """The prompt's result; None when, once `cancel` is resolved, the agent did not end its turn
        within END_TURN_GRACE seconds. The prompt is then given up: the session lets its request go
        (`Session.prompt`), and the answer, when it comes, finds nobody waiting for it."""
        prompting = self._tasks.spawn(session.prompt(text), f"prompt {agent.name}", log_errors=False)
        try:
            either: set[asyncio.Future[Any]] = {prompting, cancel}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not prompting.done():
                await asyncio.wait({prompting}, timeout=END_TURN_GRACE)
            return prompting.result() if prompting.done() else None
        finally:
            prompting.cancel()  # given up on, or this turn itself is cancelled (`forget`); no-op once done

    def _unavailable(self, conv: Conversation, error: str) -> None:
        _abandon_queue(conv, None)
        conv.add_system("agent-unavailable", error=error)
        self._changed(conv)

    def _changed(self, conv: Conversation) -> None:
        self._deck.emit(TurnChanged(conv.agent, conv.busy, conv.queued_count))


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


async def _quiet(conv: Conversation) -> None:
    deadline = time.monotonic() + QUIET_MAX
    while (wait := conv.last_update + QUIET_AFTER_CANCEL - time.monotonic()) > 0 and time.monotonic() < deadline:
        await asyncio.sleep(min(wait, deadline - time.monotonic()))
