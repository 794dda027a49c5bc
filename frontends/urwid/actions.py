"""The console's side of what the plugins offer to do (`actions` in the snapshot, Ctrl-P): a menu of
them, a form of an action's parameters, and its result shown as the action says it reads. The
console knows none of the actions: they are data on the wire."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .dialogs import ActionForm, ActionsMenu
from .history import HistoryDialog

if TYPE_CHECKING:
    from .app import ConsoleApp

#: The width of an action's form.
ACTION_WIDTH = 72


class Actions:
    """The plugins' actions, as the console offers them."""

    def __init__(self, app: ConsoleApp) -> None:
        self.app = app
        self.actions: list[dict[str, Any]] = []

    def load(self, actions: Any) -> None:
        """The snapshot's `actions`: those with a name."""
        listed = actions if isinstance(actions, list) else []
        self.actions = [a for a in listed if isinstance(a, dict) and isinstance(a.get("name"), str)]

    def open(self) -> None:
        """Ctrl-P: the menu of the actions."""
        app = self.app
        app.show_dialog("actions", ActionsMenu(app.strings, self.actions, self.pick, app.close_dialog))

    def pick(self, action: dict[str, Any]) -> None:
        """An action picked: its parameters asked for (an agent's, at first the selected agent), or,
        when it has none, run at once."""
        if not action.get("params"):
            self.run(action, {})
            return
        app = self.app
        form = ActionForm(app.strings, action, app.selected, lambda values: self.run(action, values), self.open)
        app.show_dialog("action", form, ACTION_WIDTH)

    def run(self, action: dict[str, Any], values: dict[str, str]) -> None:
        """Call the action's method with `values`; its result is shown as the action says it reads."""
        app = self.app
        app.close_dialog()
        typed = " ".join([f"/{action['name']}", *values.values()])  # what was run, as line mode types it
        app.spawn(app.client.call(str(action["method"]), values), lambda result: self.show(action, typed, result))

    def show(self, action: dict[str, Any], typed: str, result: Any) -> None:
        """`result` as `shows` says it reads: a diff in the diff view, stored conversations or messages
        in the history's list (Enter reopens one), a conversation made current by showing its agent,
        text or a table in the result view; an empty one said in the status line."""
        app, shows = self.app, action.get("shows")
        if not result:
            app.say(f"{typed}: {action.get('empty') or app.strings('result_none')}")
        elif shows == "conversation":
            agent = app.model.agents.get(str(result.get("agent"))) if isinstance(result, dict) else None
            if agent is not None:
                app.select(agent.name)
                app.say(app.strings("history_reopened", agent=agent.title))
        elif shows in ("conversations", "messages") and isinstance(result, list):
            agent = app.model.agents.get(app.selected)
            dialog = HistoryDialog(app.strings, app.client, app.spawn, agent.name if agent else "", typed, app.reopen,
                                   app.close_dialog, listed=(str(shows), result))  # fmt: skip
            app.show_dialog("history", dialog)
        else:
            if shows == "diff" and isinstance(result, str):
                app.result_diff.titled(typed, result)
                app.result = app.result_diff
            elif shows == "table":
                app.result_view.table(typed, result)
                app.result = app.result_view
            else:
                app.result_view.text(typed, result)
                app.result = app.result_view
            app.show_view("result")
