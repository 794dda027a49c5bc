"""Full-width views that replace the conversation for a while: an agent's logs, the config, what an
action gave (text, or a table)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

import urwid
from deck.tty import one_line

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


#: The widest a table's column is given, in characters (its cells wrap within it).
COLUMN_MOST = 40


def cell_text(value: Any) -> str:
    """A value of an action's result as one cell: text as it is, nothing for None, the rest as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class ResultView(urwid.WidgetWrap):
    """What an action gave (`shows` text or table), under what was run (`/turns a`): text line by
    line, or a table's rows under their headings, columns as wide as their cells (COLUMN_MOST at
    most). Esc goes back to the conversation."""

    def __init__(self, strings: Strings) -> None:
        self.strings = strings
        self.walker: urwid.SimpleFocusListWalker[AbstractFlowWidget] = urwid.SimpleFocusListWalker([])
        body = urwid.Pile([urwid.ListBox(self.walker), ("pack", urwid.Divider("─")),
                           ("pack", Text(("dim", strings("result_keys")), wrap="ellipsis"))])  # fmt: skip
        self.box = LineBox(body, title="", title_align="left")
        super().__init__(self.box)

    def text(self, title: str, result: Any) -> None:
        """A string (or an object's `summary`) line by line; anything else as its JSON."""
        if isinstance(result, dict) and isinstance(result.get("summary"), str):
            result = result["summary"]
        shown = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, indent=1)
        self._show(title, [Text(line) for line in shown.split("\n")])

    def table(self, title: str, rows: Any) -> None:
        """A list of objects as a table: a column per key, in the order the keys come; a row that is
        no object is one line of its own."""
        rows = rows if isinstance(rows, list) else [rows]
        keys: list[str] = []
        for row in rows:
            for key in row if isinstance(row, dict) else ():
                if key not in keys:
                    keys.append(str(key))
        widths = {key: max([len(key), *(len(one_line(cell_text(r.get(key)), COLUMN_MOST)) for r in rows if isinstance(r, dict))])
                  for key in keys}  # fmt: skip

        def line(cells: list[Any]) -> AbstractFlowWidget:
            return urwid.Columns([(min(COLUMN_MOST, widths[key]), Text(cell)) if i < len(keys) - 1 else Text(cell)
                                  for i, (key, cell) in enumerate(zip(keys, cells))], dividechars=2)  # fmt: skip

        items: list[AbstractFlowWidget] = [line([("strong", key) for key in keys])] if keys else []
        for row in rows:
            items.append(line([cell_text(row.get(key)) for key in keys]) if isinstance(row, dict) else Text(cell_text(row)))
        self._show(title, items)

    def _show(self, title: str, items: list[AbstractFlowWidget]) -> None:
        self.box.set_title(title)
        self.walker[:] = items or [Text(("dim", self.strings("result_none")))]
        self.walker.set_focus(0)
