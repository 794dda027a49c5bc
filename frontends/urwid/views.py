"""Full-width views that replace the conversation for a while: an agent's logs, the config."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

import urwid

from .common import Clickable, LineBox, Text
from .i18n import Strings
from .model import LOG_LINES

if TYPE_CHECKING:
    from urwid.widget import AbstractFlowWidget


class LogsView(urwid.WidgetWrap):
    """The selected agent's stderr lines (Logs), then the live `agent:log` lines as they come;
    the last LOG_LINES of them, as many as Logs returns."""

    def __init__(self, strings: Strings) -> None:
        self.strings = strings
        self.walker: urwid.SimpleFocusListWalker[AbstractFlowWidget] = urwid.SimpleFocusListWalker([])
        self.listbox = urwid.ListBox(self.walker)
        self.box = LineBox(self.listbox, title="", title_align="left")
        self.agent = ""
        super().__init__(self.box)

    def show(self, agent: str, title: str, lines: Iterable[str]) -> None:
        self.agent = agent
        self.box.set_title(self.strings("logs_title", agent=title))
        self.walker[:] = [Text(line) for line in list(lines)[-LOG_LINES:]] or [Text(("dim", self.strings("no_logs")))]
        self._follow()

    def append(self, lines: Iterable[str]) -> None:
        if len(self.walker) == 1 and isinstance(self.walker[0], Text) and self.walker[0].text == self.strings("no_logs"):
            self.walker[:] = []
        self.walker.extend(Text(line) for line in lines)
        if len(self.walker) > LOG_LINES:
            del self.walker[: len(self.walker) - LOG_LINES]
        self._follow()

    def _follow(self) -> None:
        if self.walker:
            self.listbox.set_focus(len(self.walker) - 1)


class ConfigView(urwid.WidgetWrap):
    """The current config file, its problems and warnings, Choose, and Recent files to open."""

    def __init__(self, strings: Strings, on_choose: Callable[[], None], on_open: Callable[[str], None]) -> None:
        self.strings = strings
        self.on_choose = on_choose
        self.on_open = on_open
        self.walker: urwid.SimpleFocusListWalker[AbstractFlowWidget] = urwid.SimpleFocusListWalker([])
        super().__init__(LineBox(urwid.ListBox(self.walker), title=strings("config_title"), title_align="left"))

    def show(self, current: dict[str, Any], recent: list[str]) -> None:
        s = self.strings
        items: list[AbstractFlowWidget] = [
            Text(("strong", s("config_path", path=current.get("path") or s("config_builtin")))),
            Text(("dim", s("config_source", source=current.get("source", "")))),
            Text(("ok", s("config_valid")) if current.get("valid", True) else ("error", s("config_invalid"))),
            urwid.Divider(),
        ]
        for key, attr in (("problems", "error"), ("warnings", "warning")):
            items.append(Text(("strong", s(f"config_{key}"))))
            entries = current.get(key) or []
            for p in entries:
                items.append(Text([("dim", f"  {p.get('line', '?')}:{p.get('column', '?')} "), (attr, str(p.get("message", "")))]))
            if not entries:
                items.append(Text(("dim", "  " + s("config_none"))))
            items.append(urwid.Divider())
        choose = Clickable(("button", f" {s('choose')} "), self.on_choose, focusable=True)
        items += [choose, urwid.Divider(), Text(("strong", s("recent")))]
        for path in recent:
            items.append(Clickable("  " + path, partial(self.on_open, path), focusable=True))
        if not recent:
            items.append(Text(("dim", "  " + s("no_recent"))))
        self.walker[:] = items
        self.walker.set_focus(items.index(choose))

    def keypress(self, size: Any, key: str) -> str | None:
        if key == "c":
            self.on_choose()
            return None
        return super().keypress(size, key)
