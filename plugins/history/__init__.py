"""history: conversations kept on disk, so that they outlive deck.

Every agent's conversation is recorded in one SQLite file, `$XDG_STATE_HOME/deck/history.db`,
under the config file's path and the agent's name (`recorder.py`); `deck history`, `deck search`
and `deck export` read it with no deck running (`cli.py`). `store.py` holds the database
(schema migrations, full-text search) and the batching writer that keeps streamed messages off
the hot path.

A database that cannot be used (corrupt, unwritable, locked, from a newer deck) is never
touched: deck runs without history and says why once, as a `plugin:error` event and a log line.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from deck import Duration, hookimpl
from deck.events import ConfigChanged, ConversationReset, MessageDelta
from pydantic import BaseModel, ConfigDict, Field

from .service import StoredConversations, follow

if TYPE_CHECKING:
    import typer
    from deck import Deck
    from deck.events import Event

    from .recorder import HistoryRecorder

log = logging.getLogger(__name__)

DAY = 86_400.0


class HistorySettings(BaseModel):
    """The `[history]` section of the config file."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    enabled: bool = Field(True, description="Keep every conversation in the history database (read at start).")
    keep: Duration = Field(
        90 * DAY, description='Delete, at start, the conversations of this config not updated for this long ("90d"; 0 = keep all).'
    )


#: The name this deck's `History` is registered under in its plugin manager.
PER_DECK = "history.deck"


class History:
    """One deck's recording: a plugin of its own, registered with that deck's plugin manager at
    start while history is on, and gone at shutdown. `keep` is the `[history] keep` read then."""

    def __init__(self, recorder: HistoryRecorder, keep: float) -> None:
        self.recorder = recorder
        self.keep = keep
        self.provider = StoredConversations(recorder)

    @hookimpl
    def deck_history_provider(self) -> StoredConversations:
        return self.provider  # ChatService.History, Search, OpenConversation

    @hookimpl
    def deck_event(self, event: Event) -> None:
        if type(event) is MessageDelta:  # a streamed chunk, the hot path: the recorder alone hears it
            self.recorder.on_event(event)
        elif isinstance(event, ConfigChanged):
            self._config_changed(event)
        else:
            if isinstance(event, ConversationReset):
                follow(self.recorder, event)
            self.recorder.on_event(event)

    def _config_changed(self, event: ConfigChanged) -> None:
        recorder = self.recorder
        config = recorder.config
        recorder.on_event(event)
        deck = recorder.deck
        if recorder.closed or (recorder.config == config and deck.conversation_count()):
            return  # the same file, changed: the conversations go on
        # A config file was opened (this one again, perhaps): the conversations shown were dropped,
        # and its agents come back to their latest stored ones, as at start.
        recorder.current.clear()
        deck.spawn(restore_latest(deck, recorder, self.keep, opened=True), "history: restore")

    @hookimpl
    async def deck_shutdown(self) -> None:
        deck = self.recorder.deck
        try:
            await self.recorder.close()
        finally:
            deck.pm.unregister(self)


def recorder_of(deck: Deck) -> HistoryRecorder | None:
    """The deck's recorder: None before start, after shutdown, or while history is off."""
    plugin = deck.pm.get_plugin(PER_DECK)
    return plugin.recorder if isinstance(plugin, History) else None


@hookimpl
def deck_config_sections() -> dict[str, type[BaseModel]]:
    return {"history": HistorySettings}


#: What the history offers the user to do, in every frontend (`deck_register_actions`).
ACTIONS = [
    {"name": "history", "help": "the stored conversations, newest first: id, title, last update, messages",
     "method": "ChatService.History", "shows": "conversations", "empty": "no stored conversations",
     "params": [{"name": "agent", "help": "only this agent's", "agent": True}]},
    {"name": "search", "help": "the stored messages holding every word (word* for a prefix)",
     "method": "ChatService.Search", "shows": "messages", "empty": "nothing found",
     "params": [{"name": "query", "help": "the words to find", "metavar": "WORDS", "required": True, "rest": True}]},
    {"name": "open", "help": "make stored conversation ID its agent's current one",
     "method": "ChatService.OpenConversation", "shows": "conversation",
     "params": [{"name": "id", "help": "the id of a conversation that /history lists", "metavar": "ID", "required": True}]},
]  # fmt: skip


@hookimpl
def deck_register_actions() -> list[dict[str, Any]]:
    return ACTIONS


@hookimpl
async def deck_startup(deck: Deck) -> None:
    import asyncio

    from .recorder import HistoryRecorder, report_when_shown
    from .store import HistoryStore, HistoryUnavailable

    settings = deck.config_service.section("history")
    if settings is None:  # never record against a section the user wrote, nor prune with a wrong `keep`
        reason = "history is off: the [history] section of the config is invalid (`deck config validate` says why)"
        deck.spawn(report_when_shown(deck, "deck_startup", reason), "history: invalid section")
        return
    if not settings.enabled:
        return
    current = await deck.call("ConfigService.Current", {})
    try:
        store = await asyncio.to_thread(HistoryStore)  # in a thread: a locked file makes it wait a little
    except HistoryUnavailable as e:
        deck.spawn(report_when_shown(deck, "deck_startup", f"history is off: {e.reason}"), "history: unavailable")
        return
    recorder = HistoryRecorder(deck, store, current["path"])
    deck.pm.register(History(recorder, settings.keep), name=PER_DECK)
    await restore_latest(deck, recorder, settings.keep)
    await seed_spending(deck, recorder)
    recorder.prune(settings.keep)


async def seed_spending(deck: Deck, recorder: HistoryRecorder) -> None:
    """What the agents of this config spent earlier today counts for today's spending (budgets)."""
    import asyncio

    from .store import HistoryUnavailable

    spending = deck.spending
    day = spending.clock()
    try:
        rows = await asyncio.to_thread(recorder.store.spending, recorder.config, day)
    except HistoryUnavailable as e:
        log.warning("history: today's spending is not read: %s", e.reason)
        return
    for row in rows:
        spending.seed(day, row["agent"], row["currency"], row["amount"])


async def restore_latest(deck: Deck, recorder: HistoryRecorder, keep: float, opened: bool = False) -> None:
    """Each agent's current conversation is the one it was in (made current last under this config,
    none when a fresh one was: never a one-shot `deck send`'s), else its latest stored one, before
    any agent runs.

    Its new messages go on in the stored conversation; one that the pruning about to run
    deletes (not updated for `keep` seconds) is not restored. `opened`: another config file was
    just opened and its agents may be in use already; an agent that was spoken to (or started)
    while its conversation was read keeps the new one, and the frontends hear of each restored one."""
    import asyncio
    import time
    from datetime import datetime

    from .store import HistoryUnavailable

    agents, config = list(deck.agents), recorder.config
    tail = deck.conversation_caps().conversation * 3 // 4  # what a start shows: never a whole oversized one

    def read() -> list[dict[str, Any] | None]:  # the conversation each was in, else its latest
        return [recorder.store.current(config, name, tail)[1] for name in agents]

    try:
        found = await asyncio.to_thread(read)
    except HistoryUnavailable as e:
        log.warning("history: the last conversations are not restored: %s", e.reason)
        return
    cutoff = time.time() - keep if keep > 0 else None
    for name, stored in zip(agents, found, strict=True):
        if stored is None:
            continue
        if cutoff is not None and datetime.fromisoformat(stored["updatedAt"]).timestamp() < cutoff:
            continue
        if opened and not _untouched(deck, recorder, config, name):
            continue
        recorder.continue_conversation(name, stored)  # first: a message the restore finishes goes there
        deck.restore_conversation(name, stored)
        if opened:
            deck.emit(ConversationReset(name, stored["id"]))


def _untouched(deck: Deck, recorder: HistoryRecorder, config: str, name: str) -> bool:
    """The agent is still of config `config`, not running, and nothing is in its conversation."""
    agent = deck.agents.get(name)
    if agent is None or agent.running or recorder.closed or recorder.config != config:
        return False
    return name not in recorder.current and not deck.conversation_of(name).messages


@hookimpl
def deck_register_commands(app: typer.Typer) -> None:
    from .cli import register

    register(app)
