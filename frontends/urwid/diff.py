"""The worktree diff view: the selected agent's work as a unified diff, one file after another,
each line coloured by what it does (added, removed, a hunk, a file's header); m merges it, x removes
the worktree, each after a confirmation (the app asks), and once a remove was refused for the work
it holds, X removes it all the same. Only the keys that apply are offered: none without a worktree.
The same view shows a diff an action gave (`titled`), with none of those keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import urwid

from .common import LineBox, Text
from .i18n import Strings

if TYPE_CHECKING:
    from urwid.widget import AbstractFlowWidget

#: The most lines shown: a diff longer than that is cut (the rest is one line that says so).
MAX_LINES = 20_000
#: The attribute of a diff line by how it starts (the first that matches).
STYLES = (("+++", "strong"), ("---", "strong"), ("diff --git", "strong"), ("@@", "diff hunk"), ("+", "diff add"),
          ("-", "diff del"))  # fmt: skip


def line_attr(line: str) -> str | None:
    return next((attr for start, attr in STYLES if line.startswith(start)), None)


#: The keys of the view by what is offered: none (no worktree, or not read yet), its work, and the
#: forced removal after a refused one.
KEYS = {"": "", "work": "mx", "force": "mxX"}


class DiffView(urwid.WidgetWrap):
    """One agent's diff; `m`, `x` and `X` ask the app to merge it, remove the worktree, or remove
    it with the work it holds. The last line says which keys apply."""

    def __init__(self, strings: Strings, on_key: Callable[[str], None]) -> None:
        self.strings = strings
        self.on_key = on_key
        self.agent = ""
        self.offered = ""  # a key of KEYS
        self.walker: urwid.SimpleFocusListWalker[AbstractFlowWidget] = urwid.SimpleFocusListWalker([])
        self.listbox = urwid.ListBox(self.walker)
        self.keys_line = Text("", wrap="ellipsis")
        body = urwid.Pile([self.listbox, ("pack", urwid.Divider("─")), ("pack", self.keys_line)])
        self.box = LineBox(body, title="", title_align="left")
        super().__init__(self.box)

    def loading(self, agent: str, title: str) -> None:
        self.agent = agent
        self.box.set_title(self.strings("diff_title", agent=title))
        self.offer("")
        self.walker[:] = [Text(("dim", self.strings("diff_loading")))]

    def offer(self, offered: str) -> None:
        """Offer the keys of `offered` (KEYS), and say so on the last line."""
        self.offered = offered
        self.keys_line.set_text(("dim", self.strings(f"diff_keys_{offered or 'none'}")))

    def offer_force(self, agent: str) -> None:
        """A remove of `agent`'s worktree was refused for the work it holds: X removes it all the same."""
        if agent == self.agent and self.offered:
            self.offer("force")

    def titled(self, title: str, text: str) -> None:
        """A diff an action gave (`shows` diff), under what was run: no worktree's keys; Esc goes back."""
        self.agent = ""
        self.box.set_title(title)
        self.show("", text, "")
        self.keys_line.set_text(("dim", self.strings("result_keys")))

    def show(self, agent: str, text: str, offered: str = "work") -> None:
        if agent != self.agent:
            return  # another agent was selected meanwhile
        lines = text.splitlines()
        items: list[AbstractFlowWidget] = []
        for line in lines[:MAX_LINES]:
            if line.startswith("diff --git") and items:
                items.append(urwid.Divider())
            attr = line_attr(line)
            items.append(Text((attr, line) if attr else line))
        if len(lines) > MAX_LINES:
            items.append(Text(("dim", self.strings("diff_cut", n=len(lines) - MAX_LINES))))
        self.walker[:] = items or [Text(("dim", self.strings("diff_none")))]
        self.listbox.set_focus(0)
        self.offer(offered)

    def failed(self, agent: str, title: str, message: str, missing: bool = False) -> None:
        """The diff of `agent` could not be read: `missing`, it has no worktree (said in the title)."""
        if agent == self.agent:
            if missing:
                self.box.set_title(self.strings("diff_title_missing", agent=title))
            self.offer("")
            self.walker[:] = [Text(("error", message))]

    def keypress(self, size: Any, key: str) -> str | None:
        if key in ("m", "x", "X"):
            if key in KEYS[self.offered]:
                self.on_key(key)
            return None
        return super().keypress(size, key)
