"""The agents' conversations: one per agent, fed by the agent's conversation session.

A conversation outlives its agent's process, and deck too (the history restores it at start):
the agent's next start resumes or loads the conversation's session where the agent can, else
a new session serves the same conversation and a note says the agent does not remember what
came before, and why.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from deck.agent.session import CONVERSATION, REPLAYED, Session
from deck.chat.conversation import Caps, Conversation, Message
from deck.chat.spending import Bill, Money, Spending, money
from deck.events import UsageChanged

if TYPE_CHECKING:
    from deck.agent.agent import Agent
    from deck.chat.pending import PendingRequests
    from deck.chat.host import ChatHost


class ConversationSink:
    """The conversation session's sink: its updates land in the conversation."""

    __slots__ = ("conv", "on_update")

    def __init__(self, conv: Conversation) -> None:
        self.conv = conv
        self.on_update = conv.apply_update  # the hot path: one call less per streamed chunk

    def message_id(self) -> str:
        """The message receiving updates: a permission request or a question shows beside it."""
        current = self.conv.current
        return current.id if current is not None else ""

    def child(self, session: str) -> ChildSink:
        """The sink of a subagent session of this one's (`Session.adopt`)."""
        return ChildSink(self.conv, session)


class ChildSink:
    """A subagent session's sink: its updates land in the parent's conversation, marked with it."""

    __slots__ = ("conv", "session", "on_update")

    def __init__(self, conv: Conversation, session: str) -> None:
        self.conv = conv
        self.session = session
        self.on_update = partial(conv.apply_child_update, session)  # the hot path: no frame of its own

    def message_id(self) -> str:
        return self.conv.child_message_id(self.session)

    def child(self, session: str) -> ChildSink:
        return ChildSink(self.conv, session)


class ReplaySink:
    """The sink of a loaded session whose history deck does not hold: the agent's replay forms the
    (empty) conversation.

    A replay has no turns: a user message chunk after anything else starts a user message, and
    the agent's next chunk a new answer. The replayed messages are finished as they came, and
    `finish()` sends each one's whole version once the replay is over (the history stores them so)."""

    __slots__ = ("conv", "start")

    def __init__(self, conv: Conversation) -> None:
        self.conv = conv
        self.start = len(conv.messages)

    def on_update(self, update: dict[str, Any]) -> None:
        self.conv.apply_update(update)
        if update.get("sessionUpdate") == "user_message_chunk":
            self.conv.current = None  # the answer before it is over: the agent's next chunk answers this

    def finish(self) -> None:
        conv = self.conv
        conv.current = None
        for message in conv.messages[self.start :]:
            conv.updated(message)


class MatchedReplay:
    """The sink of a `session/load` whose history the conversation holds already.

    The replay forms a copy of its own, never shown. Once it is over (`finish`) the copy is matched
    against the conversation: the turns it does not hold — made on the agent's side since, by
    another client — are added once, at its end, and what it holds already is never added again.
    The rest of the replay (commands, modes, the title) is the session as it is now: it goes to the
    conversation as it comes."""

    __slots__ = ("conv", "copy", "_replay")

    def __init__(self, conv: Conversation) -> None:
        self.conv = conv
        self.copy = Conversation(conv.agent, _nowhere, caps=conv.caps)
        self._replay = ReplaySink(self.copy)

    def on_update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if isinstance(kind, str) and kind in REPLAYED:
            self._replay.on_update(update)
        else:
            self.conv.apply_update(update)

    def finish(self) -> list[Message]:
        """Add what the replay holds beyond the conversation; the messages added."""
        self._replay.finish()
        unsent = {id(m) for m in self.conv.queue}  # the message whose send started the agent: not the agent's yet
        added = unheld([m for m in self.conv.messages if id(m) not in unsent], self.copy.messages)
        for message in added:
            self.conv.add(message)
        return added


def unheld(held: list[Message], replayed: list[Message]) -> list[Message]:
    """The replayed messages that come after everything `held` has: those after the replay's last
    user message ending with the words of the last one held that the agent got (an agent may put
    words of its own before them; one never sent, or abandoned, it never saw), past that
    message's answer when it is held too. Nothing when the replay has no such message: without a
    place to start from, adding would risk a turn twice."""
    said = [m for m in held if m.role == "agent" or (m.role == "user" and not m.queued and not m.error)]
    last = next((m for m in reversed(said) if m.role == "user" and _words(m)), None)
    if last is None:
        return []
    words = _words(last)
    at = next((i for i in range(len(replayed) - 1, -1, -1)
               if replayed[i].role == "user" and _words(replayed[i])[-len(words) :] == words), None)  # fmt: skip
    if at is None:
        return []
    rest = [m for m in replayed[at + 1 :] if m.role in ("user", "agent")]
    if said[-1] is not last:  # its answer is held: the replay's is the same
        while rest and rest[0].role == "agent":
            rest.pop(0)
    return rest


def _words(message: Message) -> list[str]:
    return message.text.split()


def _exchanged(conv: Conversation) -> bool:
    """Whether the conversation holds something the agent was told or said before this start: what
    a new session loses, and the note of an agent that forgot is for. deck's own notes and the
    messages waiting to be sent (the one that starts the agent) are no such thing: an agent
    started, stopped, then spoken to, forgets nothing."""
    waiting = {message.id for message in conv.queue}
    return any(m.role in ("user", "agent") and m.id not in waiting for m in conv.messages)


def _nowhere(_event: Any) -> None:
    """Where a replay's copy reports its changes: nobody sees it."""


class Conversations(Mapping[str, Conversation]):
    """Agent name → its conversation, made on first use."""

    def __init__(self, deck: ChatHost, pending: PendingRequests, spending: Spending | None = None) -> None:
        self._deck = deck
        self._pending = pending
        #: Set the user's choices again on an agent's new session (the session settings' `again`).
        self.again: Callable[[str], None] = _nowhere
        self.spending = spending if spending is not None else Spending()
        self._conversations: dict[str, Conversation] = {}
        #: The running cost of each session other than a conversation's, as it last reported it.
        self._bills: weakref.WeakKeyDictionary[Session, Bill] = weakref.WeakKeyDictionary()

    def __getitem__(self, agent: str) -> Conversation:
        return self._conversations[agent]

    def __iter__(self) -> Iterator[str]:
        return iter(self._conversations)

    def __len__(self) -> int:
        return len(self._conversations)

    def of(self, agent: str) -> Conversation:
        """`agent`'s conversation, empty the first time."""
        conv = self._conversations.get(agent)
        if conv is None:
            pending = self._pending

            def permissions() -> list[dict[str, Any]]:
                return pending.permissions_of(agent, CONVERSATION)

            def spend(spent: Money) -> None:
                self.spending.add(agent, spent)

            conv = Conversation(agent, self._deck.emit, permissions, self.caps(), spend)
            self._conversations[agent] = conv
        return conv

    def session_cost(self, session: Session, update: dict[str, Any]) -> None:
        """A `usage_update` of `session`, not the conversation's: its cost's growth is spent by its
        agent, told as `usage:changed` with the conversation's usage as it is."""
        cost = money(update.get("cost"))
        if cost is None:
            return
        bill = self._bills.get(session)
        if bill is None:
            bill = self._bills[session] = Bill()
        spent = bill.spent(cost)
        if spent is not None:
            agent = session.agent.name
            self.spending.add(agent, spent)
            self._deck.emit(UsageChanged(agent, self.of(agent).usage, spent))

    def caps(self) -> Caps:
        """What a conversation keeps, from the config's `[limits]` (read when the conversation is made)."""
        limits = self._deck.config.limits
        return Caps(limits.message_size, limits.conversation_size)

    def forget(self) -> None:
        """Drop every conversation (another config was opened)."""
        self._conversations.clear()

    def restore(self, agent: str, stored: dict[str, Any]) -> None:
        """Make a conversation kept from an earlier run `agent`'s conversation, before the agent
        runs: `stored` as the history gives it (`messages` as wire dicts, `sessionId`, `title`, `usage`,
        `children`: its subagents);
        the agent's next start continues its session (`Agent._continue_session`)."""
        messages, cut, usage, choices = stored.get("messages"), stored.get("cut"), stored.get("usage"), stored.get("choices")
        session_id, title = stored.get("sessionId"), stored.get("title")
        self.of(agent).restore(
            [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else [],
            session_id if isinstance(session_id, str) and session_id else None,
            title if isinstance(title, str) else None,
            cut if isinstance(cut, dict) else None,
            usage if isinstance(usage, dict) else None,
            choices if isinstance(choices, dict) else None,
            stored.get("children") if isinstance(stored.get("children"), list) else None,
        )

    def reset(self, agent: str) -> None:
        """Empty `agent`'s conversation for a new one, its session forgotten: the agent's next start
        opens a plain `session/new`. The caller stopped the agent and tells the frontends."""
        self.of(agent).restore([], None, None)

    def replay_into(self, agent: str, *, matched: bool) -> ReplaySink | MatchedReplay:
        """The sink of a `session/load` of the agent's conversation (deck.agent.host.Conversations)."""
        conv = self.of(agent)
        return MatchedReplay(conv) if matched else ReplaySink(conv)

    def session_opened(self, agent: Agent) -> None:
        """The agent's new conversation session now serves its conversation."""
        session = agent.session
        assert session is not None and session.id is not None
        conv = self.of(agent.name)
        if session.restarted and _exchanged(conv):
            conv.add_system("agent-restarted", text=session.restarted)
        conv.session_started(session.id, session.result, fresh=bool(session.restarted))
        session.attach(ConversationSink(conv))
        if conv.choices:  # what the user chose for it, set again on this session once it is ready
            self.again(agent.name)
