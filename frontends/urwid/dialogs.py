"""Dialogs over the console: permission requests, the quit question, the config file picker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import urwid

from .common import Clickable
from .conversation import tool_widgets
from .i18n import Strings


def _box(body: urwid.Widget, title: str) -> urwid.Widget:
    return urwid.AttrMap(urwid.LineBox(body, title=title, title_align="left", title_attr="dialog title"), "dialog")


class PermissionDialog(urwid.WidgetWrap):
    """One pending request of `requests` (every agent's), with its tool call, diff and options.

    1-9 answers with that option, Enter the focused one; Tab goes to the next request; Esc closes."""

    def __init__(
        self,
        strings: Strings,
        requests: list[dict[str, Any]],
        index: int,
        titles: dict[str, str],
        on_answer: Callable[[str, str], None],
        on_close: Callable[[], None],
        on_move: Callable[[int], None],
    ) -> None:
        self.strings = strings
        self.request = requests[index]
        self.count = len(requests)
        self.index = index
        self.on_answer = on_answer
        self.on_close = on_close
        self.on_move = on_move
        request = self.request
        agent = titles.get(request.get("agent", ""), request.get("agent", ""))
        items: list[urwid.Widget] = [
            urwid.Text(("dim", strings("permission_count", i=index + 1, n=len(requests)))),
            urwid.Divider(),
            *tool_widgets(request.get("toolCall") or {}, strings, True, None),
        ]
        if request.get("rejections"):
            items.append(urwid.Text(("warning", strings("rejections", n=request["rejections"]))))
        items.append(urwid.Divider())
        self.options = [o for o in request.get("options") or [] if "optionId" in o]
        self.buttons = []
        for number, option in enumerate(self.options, 1):
            attr = "error" if str(option.get("kind", "")).startswith("reject") else "ok"
            label = [("strong", f"{number} "), (attr, str(option.get("name") or option["optionId"]))]
            button = Clickable(label, lambda o=option: self.answer(o), focusable=True)
            self.buttons.append(button)
            items.append(button)
        items += [urwid.Divider(), urwid.Text(("dim", strings("permission_keys")))]
        self.walker = urwid.SimpleFocusListWalker(items)
        self.listbox = urwid.ListBox(self.walker)
        if self.buttons:
            self.walker.set_focus(items.index(self.buttons[0]))
        super().__init__(_box(self.listbox, strings("permission_title", agent=agent)))

    def answer(self, option: dict[str, Any]) -> None:
        self.on_answer(str(self.request["id"]), str(option["optionId"]))

    def keypress(self, size: Any, key: str) -> str | None:
        if key.isdigit() and key != "0" and int(key) <= len(self.options):
            self.answer(self.options[int(key) - 1])
            return None
        if key in ("tab", "right") and self.count > 1:
            self.on_move(1)
            return None
        if key in ("shift tab", "left") and self.count > 1:
            self.on_move(-1)
            return None
        if key == "esc":
            self.on_close()
            return None
        super().keypress(size, key)
        return None  # a modal dialog: nothing leaks to the screen behind


class ConfirmDialog(urwid.WidgetWrap):
    """A yes/no question: y (or o in French) says yes; n or Esc says no."""

    def __init__(self, strings: Strings, title: str, text: str, on_answer: Callable[[bool], None]) -> None:
        self.on_answer = on_answer
        yes = Clickable(strings("yes"), lambda: on_answer(True), focusable=True)
        no = Clickable(strings("no"), lambda: on_answer(False), focusable=True)
        pile = urwid.Pile([urwid.Text(text), urwid.Divider(), yes, no])
        pile.focus_position = 3
        super().__init__(_box(urwid.Filler(pile, valign="top"), title))

    def keypress(self, size: Any, key: str) -> str | None:
        if key in ("y", "Y", "o", "O"):
            self.on_answer(True)
        elif key in ("n", "N", "esc"):
            self.on_answer(False)
        else:
            super().keypress(size, key)
        return None


class FilePicker(urwid.WidgetWrap):
    """Browse directories and pick a file; `on_done(path)` with "" when cancelled."""

    def __init__(self, strings: Strings, start: Path, on_done: Callable[[str], None]) -> None:
        self.strings = strings
        self.on_done = on_done
        self.edit = urwid.Edit(("dim", strings("picker_path")))
        self.walker = urwid.SimpleFocusListWalker([])
        self.listbox = urwid.ListBox(self.walker)
        self.pile = urwid.Pile([("pack", self.edit), ("pack", urwid.Divider("─")), self.listbox])
        self.directory = start
        self.chdir(start)
        super().__init__(_box(self.pile, strings("picker_title")))

    def chdir(self, directory: Path) -> None:
        self.directory = directory.resolve()
        self.edit.set_edit_text(str(self.directory) + "/")
        self.edit.set_edit_pos(len(self.edit.edit_text))
        try:
            entries = sorted(self.directory.iterdir(), key=lambda p: (not p.is_dir(), p.suffix != ".toml", p.name.lower()))
        except OSError:
            entries = []
        items: list[urwid.Widget] = [Clickable("../", lambda: self.chdir(self.directory.parent), focusable=True)]
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                items.append(Clickable(("strong", entry.name + "/"), lambda e=entry: self.chdir(e), focusable=True))
            else:
                attr = "text" if entry.suffix == ".toml" else "dim"
                items.append(Clickable((attr, entry.name), lambda e=entry: self.on_done(str(e)), focusable=True))
        self.walker[:] = items
        self.pile.focus_position = 2

    def keypress(self, size: Any, key: str) -> str | None:
        if key == "esc":
            self.on_done("")
            return None
        if key == "backspace" and self.pile.focus_position == 2:
            self.chdir(self.directory.parent)
            return None
        if key == "enter" and self.pile.focus_position == 0:
            path = Path(self.edit.edit_text).expanduser()
            if path.is_dir():
                self.chdir(path)
            elif path.name:
                self.on_done(str(path))
            return None
        if key == "tab":
            self.pile.focus_position = 0 if self.pile.focus_position == 2 else 2
            return None
        super().keypress(size, key)
        return None


def centered(dialog: urwid.Widget, under: urwid.Widget, width: int = 80, height: int = 80) -> urwid.Overlay:
    """`dialog` over `under`, centred, `width`/`height` in percent."""
    return urwid.Overlay(dialog, under, "center", ("relative", width), "middle", ("relative", height), min_width=30, min_height=8)
