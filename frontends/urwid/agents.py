"""The agents panel: one row per agent (icon, title, state, marks, usage) and ▶ ■ ↻ buttons."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import urwid

from deck.states import OUTDATED_LABEL, AgentState, label

from .common import SPINNER, Clickable, gauge
from .i18n import Strings
from .model import AgentModel


def row_markup(agent: AgentModel, number: int, strings: Strings, frame: int = 0) -> list[Any]:
    """The lines of one agent's row, as urwid markup."""
    try:
        state_text = label(AgentState(agent.state), strings.language)
    except ValueError:
        state_text = agent.state
    spin = SPINNER[frame % len(SPINNER)]
    lines: list[Any] = [f"{number} " if number <= 9 else "  ", ("strong", agent.icon), " ", agent.title, "\n   "]
    if agent.state == "starting":
        lines += [("state starting", f"{spin} {state_text}")]
    else:
        lines += [(f"state {agent.state}", state_text)]
    if agent.busy:
        lines += [("state busy", f" {spin}")]
    if agent.needs_input:
        lines += ["\n   ", ("needs input", f"! {strings('needs_input')}")]
    if agent.asks:
        lines += [" ", ("talking", "↔")]
    if agent.outdated:
        lines += ["\n   ", ("outdated", f"⟳ {OUTDATED_LABEL.get(strings.language, OUTDATED_LABEL['en'])}")]
    if agent.state == "error" and agent.error:
        lines += ["\n   ", ("error", agent.error.splitlines()[0][:60])]
    used, size = int(agent.usage.get("used") or 0), int(agent.usage.get("size") or 0)
    if used or size:
        lines += ["\n   ", ("dim", strings("usage") + " "), ("gauge", gauge(used, size))]
    return lines


class AgentRow(urwid.WidgetWrap):
    """One agent; clicking it selects it."""

    def __init__(self, name: str, on_select: Callable[[str], None]) -> None:
        self.name = name
        self.on_select = on_select
        self.text = urwid.Text("")
        self.attr = urwid.AttrMap(self.text, None)
        super().__init__(self.attr)

    def update(self, agent: AgentModel, number: int, strings: Strings, selected: bool, frame: int) -> None:
        self.text.set_text(row_markup(agent, number, strings, frame))
        self.attr.set_attr_map({None: "selected" if selected else None})

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
    """Rows of agents in config order, then the buttons for the selected one."""

    def __init__(self, strings: Strings, on_select: Callable[[str], None], on_action: Callable[[str], None]) -> None:
        self.strings = strings
        self.on_select = on_select
        self.agent_rows: dict[str, AgentRow] = {}
        self.walker = urwid.SimpleFocusListWalker([])
        self.listbox = urwid.ListBox(self.walker)
        buttons = urwid.Pile(
            [Clickable(("button", f" {strings(k)} "), lambda k=k: on_action(k)) for k in ("start", "stop", "restart")]
        )
        body = urwid.Pile([self.listbox, ("pack", urwid.Divider("─")), ("pack", buttons)])
        super().__init__(urwid.LineBox(body, title=strings("agents"), title_align="left"))

    def set_roster(self, names: list[str]) -> None:
        self.agent_rows = {name: self.agent_rows.get(name) or AgentRow(name, self.on_select) for name in names}
        items: list[urwid.Widget] = []
        for row in self.agent_rows.values():
            items += [row, urwid.Divider()]
        self.walker[:] = items

    def update(self, agent: AgentModel, number: int, selected: bool, frame: int) -> None:
        row = self.agent_rows.get(agent.name)
        if row is not None:
            row.update(agent, number, self.strings, selected, frame)
            if selected:
                self.walker.set_focus(self.walker.index(row))
