"""The history view: the selected agent's past conversations (`ChatService.History`), and a search
over every agent's (`ChatService.Search`) as the user types; Enter reopens one
(`ChatService.OpenConversation`), Esc closes. A dialog, so that it has every key while it is open.
It also lists what an action gave (`shows` conversations or messages: `listed`), as it came."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import urwid
from deck.errors import ServiceError
from deck.tty import printable

from .common import Clickable, LineBox, Text
from .dialogs import DIALOG
from .i18n import Strings

if TYPE_CHECKING:
    from deck.client import Client
    from urwid.widget import AbstractFlowWidget

#: How many conversations, and search hits, the view lists.
LISTED, FOUND = 100, 50
#: How a search snippet marks the words found (the history's FTS5 snippets).
_MARKED = re.compile(r"\*\*(.+?)\*\*")


def when(iso: Any) -> str:
    """A stored time as the user reads it: local, to the minute ("" when it is not a time)."""
    try:
        return datetime.fromisoformat(str(iso)).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return ""


def snippet_markup(snippet: str) -> list[Any]:
    """A search snippet on one line, its found words marked (`**word**`) in bold; made printable by Text."""
    line = " ".join(str(snippet).split())
    markup: list[Any] = []
    at = 0
    for match in _MARKED.finditer(line):
        markup += [line[at : match.start()], ("strong", match.group(1))]
        at = match.end()
    return [*markup, line[at:]]


def search_words(typed: str) -> str:
    """What is searched for while the user types: the last word, still being typed, as a prefix."""
    words = typed.strip()
    return words + "*" if words and not typed.endswith(" ") and words[-1].isalnum() else words


class HistoryDialog(urwid.WidgetWrap):
    """The search field, then the agent's conversations, or what the words typed find in every agent's.

    The service calls run through `spawn`; an answer that comes once a newer question was asked
    (the user typed on) is dropped. A refusal (history off, a bad query) is shown in the list."""

    def __init__(
        self,
        strings: Strings,
        client: Client,
        spawn: Callable[[Awaitable[Any]], None],
        agent: str,
        title: str,
        on_open: Callable[[str], None],
        on_close: Callable[[], None],
        listed: tuple[str, list[Any]] | None = None,
    ) -> None:
        """`listed`: what an action gave, `("conversations" | "messages", rows)`, listed as it is, under
        `title` (what was run), each row with its agent; there is no search field then."""
        self.strings = strings
        self.client = client
        self.spawn = spawn
        self.agent = agent
        self.agent_title = title
        self.on_open = on_open
        self.on_close = on_close
        self.listed = listed
        self.edit = urwid.Edit(("dim", strings("history_search")))
        urwid.connect_signal(self.edit, "postchange", lambda *_: self.refresh())
        self.walker: urwid.SimpleFocusListWalker[AbstractFlowWidget] = urwid.SimpleFocusListWalker([])
        self.listbox = urwid.ListBox(self.walker)
        self.pile = urwid.Pile([("pack", self.edit), ("pack", urwid.Divider("─")), self.listbox])
        self._asked = 0  # questions asked so far
        self._answered = -1  # the question whose answer is listed
        heading = strings("listed_title", what=title) if listed is not None else strings("history_title", agent=title)
        box = LineBox(self.listbox if listed is not None else self.pile, title=printable(heading), title_align="left",
                      title_attr="dialog title")  # fmt: skip
        super().__init__(urwid.AttrMap(box, DIALOG))
        if listed is None:
            self.refresh()
            return
        shows, rows = listed
        found = [r for r in rows if isinstance(r, dict)]
        if shows == "messages":
            self._show([self._hit(r) for r in found], True)
        else:
            self._show([self._conversation(r, with_agent=True) for r in found])

    # -- what it lists --------------------------------------------------------------------------

    def refresh(self) -> None:
        """Ask again for what the search field says: the agent's conversations, or the hits of the words."""
        self._asked += 1
        asked, words = self._asked, search_words(self.edit.edit_text)
        if words:
            call = self.client.call("ChatService.Search", {"query": words, "limit": FOUND})
        else:
            call = self.client.call("ChatService.History", {"agent": self.agent, "limit": LISTED})

        async def fetch() -> None:
            try:
                rows = await call
            except ServiceError as exc:
                if asked == self._asked:
                    self._answered = asked
                    self._show([Text(("error", str(exc)))])
                return
            if asked == self._asked:
                self._answered = asked
                self._show([self._hit(r) for r in rows] if words else [self._conversation(r) for r in rows], bool(words))

        self.spawn(fetch())

    def _conversation(self, row: dict[str, Any], with_agent: bool = False) -> AbstractFlowWidget:
        s = self.strings
        title = str(row.get("title") or "") or s("history_untitled")
        messages = row.get("messages")
        count = messages if isinstance(messages, int) and not isinstance(messages, bool) else 0
        details = f"  {when(row.get('updatedAt'))} · {s('history_messages', n=count)}"
        agent = [("dim", f"{row.get('agent', '')} · ")] if with_agent else []
        return Clickable([*agent, ("strong", " ".join(title.split())), ("dim", details)], self._opener(row.get("id")),
                         focusable=True)  # fmt: skip

    def _hit(self, row: dict[str, Any]) -> AbstractFlowWidget:
        head = f"{row.get('agent', '')} · {when(row.get('at'))} · "
        return Clickable([("dim", head), *snippet_markup(str(row.get("snippet") or ""))],
                         self._opener(row.get("conversationId")), focusable=True)  # fmt: skip

    def _opener(self, conversation_id: Any) -> Callable[[], None]:
        return lambda: self.on_open(str(conversation_id))

    def _show(self, items: list[AbstractFlowWidget], searching: bool = False) -> None:
        if not items:
            empty = "history_no_hits" if searching else "history_none"
            items = [Text(("dim", self.strings(empty, agent=self.agent_title)))]
        self.walker[:] = items

    # -- keys -----------------------------------------------------------------------------------

    def keypress(self, size: Any, key: str) -> str | None:
        if key == "esc":
            self.on_close()
            return None
        if self.listed is not None:
            super().keypress(size, key)
            return None
        in_list = self.pile.focus_position == 2
        if key == "enter" and not in_list:
            if self._answered != self._asked:
                return None  # what is listed is not what the field now says: its answer is on its way
            first = next((w for w in self.walker if w.selectable()), None)
            if isinstance(first, Clickable) and first.on_click is not None:
                first.on_click()  # Enter in the field opens the first one listed
            return None
        if key in ("tab", "down") and not in_list:
            if any(w.selectable() for w in self.walker):
                self.pile.focus_position = 2
            return None
        typing = len(key) == 1 and key.isprintable() and key != " " or key == "backspace"
        if key == "tab" or (in_list and typing):
            self.pile.focus_position = 0  # typing in the list goes on in the search field
            if key == "tab":
                return None
        handled = super().keypress(size, key)
        if handled == "up" and in_list:
            self.pile.focus_position = 0  # up from the first row: back to the field
        return None
