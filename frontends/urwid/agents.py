"""The agents panel: one row per agent (icon, title, state, marks, usage) and ▶ ■ ↻ buttons."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import urwid
from deck.frontends.words import money

from .common import SPINNER, Clickable, ClippedLayout, Fitting, LineBox, Text, gauge, on_background
from .i18n import Strings
from .model import AgentModel

if TYPE_CHECKING:
    from urwid.widget import AbstractFlowWidget


#: Columns the lines under an agent's name are indented by.
INDENT = 3
#: Lines an agent's error may take in its row.
ERROR_LINES = 2
#: Lines its title, or one of the lines under it, may take: a narrow panel wraps them rather than cut them.
LINES = 2
#: Lines a sticky notice may take: all of a plugin's sentence at 80 columns, a runaway one cut.
NOTICE_LINES = 10
#: The mark beside the name of an agent that runs in a sandbox (F1 says what it means).
SANDBOX_MARK = "▢"
#: The colour of a sticky notice under its agent, by level.
NOTICE_ATTRS = {"info": "text", "warning": "warning", "error": "error"}


def row_lines(agent: AgentModel, number: int, strings: Strings, frame: int = 0) -> list[AbstractFlowWidget]:
    """The lines of one agent's row: its name, then under it its state and marks. What does not fit
    the panel's width is said shorter, or wrapped (LINES at most; an error ERROR_LINES), never back
    under the number."""
    state_text = strings(f"state_{agent.state}") if f"state_{agent.state}" in strings.table else agent.state
    spin = SPINNER[frame % len(SPINNER)]
    prefix = f"{number} " if number <= 9 else "  "
    state: list[Any] = [("state starting", f"{spin} {state_text}")] if agent.state == "starting" else \
        [(f"state {agent.state}", state_text)]  # fmt: skip
    if agent.busy:
        state += [("state busy", f" {spin}")]
    lines: list[AbstractFlowWidget] = [_name(prefix, agent.icon, agent.title, agent.sandboxed)]
    if agent.sandboxed and not agent.network:
        lines.append(_under(Fitting([("sandbox", strings("no_network"))], LINES)))
    lines.append(_under(Text(state, wrap="ellipsis")))
    if agent.needs_input or agent.asks:
        marks: list[Any] = [("needs input", f"! {strings('needs_input')}")] if agent.needs_input else []
        if agent.asks:
            marks += [" " if marks else "", ("talking", "↔")]
        lines.append(_under(Fitting([marks], LINES)))
    if agent.changed_files:
        files = ("label", strings("changed_files", n=agent.changed_files))
        if agent.overlaps:
            shared = ("warning", strings("overlap", n=agent.shared_files()))
            lines.append(_under(Fitting([[files, " ", shared], [files, "\n", shared]], LINES)))
        else:
            lines.append(_under(Fitting([files], LINES)))
    if agent.outdated:
        outdated = [("outdated", f"⟳ {strings(key)}") for key in ("outdated", "outdated_short")]
        lines.append(_under(Fitting(outdated, LINES)))
    if agent.state == "error" and agent.error:
        lines.append(_under(Text(("error", agent.error.splitlines()[0]), layout=ClippedLayout(ERROR_LINES))))
    for level, text in agent.notices.values():  # a plugin's words, as it says them: wrapped, never said shorter
        lines.append(_under(Text((NOTICE_ATTRS.get(level, "text"), text), layout=ClippedLayout(NOTICE_LINES))))
    used, size = int(agent.usage.get("used") or 0), int(agent.usage.get("size") or 0)
    if used or size:
        lines.append(_under(UsageLine(strings("usage"), used, size)))
        cost = money(agent.usage.get("cost"))
        if cost:  # `cost 0.50 USD`, else the amount alone
            lines.append(_under(Fitting([("label", strings("cost", amount=cost)), ("label", cost)], LINES)))
        else:  # said in full where it fits; the help (F1) says what it means
            unknown = [("dim", strings(key)) for key in ("cost_unknown", "cost_unknown_mid", "cost_unknown_short")]
            lines.append(_under(Fitting(unknown, LINES)))
    return lines


def _name(prefix: str, icon: str, title: str, sandboxed: bool = False) -> AbstractFlowWidget:
    """`1 A Title`, and `▢` after it when it runs in a sandbox: a long title wraps under itself
    (LINES at most), never under the number, and the mark stays beside it."""
    return NameLine(Text([prefix, ("strong", icon), " "]), title, ("sandbox", SANDBOX_MARK) if sandboxed else None)


def _under(widget: urwid.Widget) -> AbstractFlowWidget:
    return urwid.Padding(widget, left=INDENT)


class NameLine(urwid.Widget):
    """The number and icon, then the title, which wraps under itself; the mark (if any) after
    the title's last word, or, where that would take the title more lines than LINES, in a column
    of its own beside it."""

    _sizing = frozenset([urwid.Sizing.FLOW])
    ignore_focus = True

    def __init__(self, head: Text, title: str, mark: tuple[str, str] | None) -> None:
        super().__init__()
        self.head = head
        self.title = Text(title, layout=ClippedLayout(LINES))
        self.mark = mark
        if mark is not None:
            self.marked = Text([title, " ", mark])  # the whole of it, to count its lines
            self.inline = Text([title, " ", mark], layout=ClippedLayout(LINES))
            self.beside = Text([" ", mark])

    def columns(self, cols: int) -> urwid.Columns:
        head = self.head.pack()[0]
        if self.mark is None:
            return urwid.Columns([(head, self.head), self.title])
        if self.marked.rows((max(1, cols - head),)) <= LINES:
            return urwid.Columns([(head, self.head), self.inline])
        room = max(1, cols - head - self.beside.pack()[0])
        return urwid.Columns([(head, self.head), (min(room, self.title.pack((room,))[0]), self.title), self.beside])

    def rows(self, size: Any, focus: bool = False) -> int:
        return int(self.columns(size[0]).rows(size))

    def render(self, size: Any, focus: bool = False) -> urwid.Canvas:
        return self.columns(size[0]).render(size)


class UsageLine(urwid.Widget):
    """`ctx ███░░░░░░░ 31%`: the bar as wide as the line allows (none at all in a very narrow
    panel), so the number always shows."""

    _sizing = frozenset([urwid.Sizing.FLOW])
    ignore_focus = True

    def __init__(self, word: str, used: int, size: int) -> None:
        super().__init__()
        self.word, self.used, self.size = word, used, size

    def rows(self, size: Any, focus: bool = False) -> int:
        return 1

    def render(self, size: Any, focus: bool = False) -> urwid.Canvas:
        room = size[0] - len(self.word) - 2 - len(gauge(self.used, self.size, 0))
        shown = gauge(self.used, self.size, min(10, room) if room >= 3 else 0)
        return Text([("label", self.word + " "), ("gauge", shown)], wrap="ellipsis").render(size)


class AgentRow(urwid.WidgetWrap):
    """One agent; clicking it selects it. The selected one is drawn on the highlight, styled text included."""

    SELECTED = on_background("selected")

    def __init__(self, name: str, on_select: Callable[[str], None]) -> None:
        self.name = name
        self.on_select = on_select
        self.pile = urwid.Pile([])
        self.attr = urwid.AttrMap(self.pile, None)
        super().__init__(self.attr)

    def update(self, agent: AgentModel, number: int, strings: Strings, selected: bool, frame: int) -> None:
        self.pile.contents[:] = [(line, self.pile.options()) for line in row_lines(agent, number, strings, frame)]
        self.attr.set_attr_map(self.SELECTED if selected else {None: None})

    def selectable(self) -> bool:
        return True

    def keypress(self, size: Any, key: str) -> str | None:
        return key

    def mouse_event(self, size: Any, event: str, button: int, col: int, row: int, focus: bool) -> bool:
        if event == "mouse press" and button == 1:
            self.on_select(self.name)
            return True
        return False


class AgentsPanel(urwid.WidgetWrap):
    """Rows of agents in config order, then the buttons for the selected one. Attached to a server,
    its title names it: `Agents · server NAME`, or `server NAME` where that is too wide."""

    def __init__(self, strings: Strings, on_select: Callable[[str], None], on_action: Callable[[str], None],
                 server: str = "") -> None:  # fmt: skip
        self.strings = strings
        self.on_select = on_select
        self.titles = [strings("agents_on_server", name=server), strings("server", name=server)] if server else []
        self.agent_rows: dict[str, AgentRow] = {}
        self.walker: urwid.SimpleFocusListWalker[AbstractFlowWidget] = urwid.SimpleFocusListWalker([])
        self.listbox = urwid.ListBox(self.walker)
        buttons = urwid.Pile(
            [Clickable(("button", f" {strings(k)} "), partial(on_action, k)) for k in ("start", "stop", "restart")]
        )
        body = urwid.Pile([self.listbox, ("pack", urwid.Divider("─")), ("pack", buttons)])
        self.box = LineBox(body, title=strings("agents"), title_align="left")
        super().__init__(self.box)

    def render(self, size: Any, focus: bool = False) -> urwid.Canvas:
        if self.titles:  # the longest title that fits the width, borders and spaces included
            title = next((t for t in self.titles if len(t) + 4 <= size[0]), self.titles[-1])
            if self.box.title_widget.text.strip() != title:
                self.box.set_title(title)
        return super().render(size, focus)

    def set_roster(self, names: list[str]) -> None:
        self.agent_rows = {name: self.agent_rows.get(name) or AgentRow(name, self.on_select) for name in names}
        items: list[AbstractFlowWidget] = []
        for row in self.agent_rows.values():
            items += [row, urwid.Divider()]
        self.walker[:] = items

    def update(self, agent: AgentModel, number: int, selected: bool, frame: int) -> None:
        row = self.agent_rows.get(agent.name)
        if row is not None:
            row.update(agent, number, self.strings, selected, frame)
            if selected:
                self.walker.set_focus(self.walker.index(row))
