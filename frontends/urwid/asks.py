"""The console's asks: the dialog of each permission request and question waiting, one at a time
over the conversation (F4 the oldest, Tab to the next), and the answers sent back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .dialogs import PermissionDialog, QuestionDialog

if TYPE_CHECKING:
    from .app import ConsoleApp


class Asks:
    """The asks' dialogs: the one shown, and those kept while their ask waits."""

    def __init__(self, app: ConsoleApp) -> None:
        self.app = app
        self.shown_id = ""  # the permission request or question the ask dialog shows
        #: The dialogs of pending asks, by id, kept while the ask waits: a question put off (Esc,
        #: Tab to another request) comes back with what was typed.
        self.dialogs: dict[str, PermissionDialog | QuestionDialog] = {}

    def open(self) -> None:
        """The dialog of the current ask, a permission request or a question (else the selected
        agent's first, or any); closed when none is left. What was typed in a question survives
        other asks coming and going, and Esc."""
        app = self.app
        asks = app.model.pending()
        ids = [str(p.get("id")) for _, p in asks]
        self.dialogs = {i: d for i, d in self.dialogs.items() if i in ids}
        if not asks:
            if app.dialog_kind == "ask":
                app.close_dialog()
            return
        if self.shown_id in ids:
            index = ids.index(self.shown_id)
        else:
            mine = [i for i, (_, p) in enumerate(asks) if p.get("agent") == app.selected]
            index = mine[0] if mine else 0
        self.shown_id = ids[index]
        dialog = self.dialogs.get(self.shown_id)
        if dialog is None:
            dialog = self.dialogs[self.shown_id] = self._dialog(asks, index)
        else:
            dialog.set_position(index, len(asks))
            if app.dialog_kind == "ask" and app.shown_dialog is dialog:
                app.schedule()
                return
        app.show_dialog("ask", dialog)

    def _dialog(self, asks: list[tuple[str, dict[str, Any]]], index: int) -> PermissionDialog | QuestionDialog:
        app = self.app
        titles = {name: agent.title for name, agent in app.model.agents.items()}
        names = app.model.subagents  # a subagent's request is said to come from it
        payloads = [{**p, "subagent": names.name(str(p["agent"]), p["session"])} if p.get("session") else p for _, p in asks]
        if asks[index][0] == "question":
            return QuestionDialog(app.strings, payloads, index, titles, self.answer_question, app.close_dialog, self.move)
        agent = app.model.agents.get(str(asks[index][1].get("agent")))
        return PermissionDialog(app.strings, payloads, index, titles, self.answer, app.close_dialog, self.move,
                                agent.folder if agent is not None else "")  # fmt: skip

    def open_oldest(self) -> None:
        """F4: the dialog of the ask waiting longest (request 1 of n); the status line says when none waits."""
        asks = self.app.model.pending()
        if not asks:
            self.app.say(self.app.strings("nothing_pending"))
            return
        self.shown_id = str(asks[0][1].get("id"))
        self.open()

    def asked(self, ask_id: str) -> None:
        """Ask `ask_id` came for the agent shown, and no dialog is open: it is shown at once."""
        self.shown_id = ask_id
        self.open()

    def folders_changed(self, agents: set[str]) -> bool:
        """The folders of `agents` are known anew: their requests' dialogs, whose paths are shown
        relative to them, are to be made again. Whether there was one."""
        stale = [i for i, d in self.dialogs.items() if isinstance(d, PermissionDialog) and d.request.get("agent") in agents]
        for ask_id in stale:
            del self.dialogs[ask_id]
        return bool(stale)

    def move(self, step: int) -> None:
        ids = [str(p.get("id")) for _, p in self.app.model.pending()]
        if self.shown_id in ids:
            self.shown_id = ids[(ids.index(self.shown_id) + step) % len(ids)]
        self.open()

    def answer(self, request_id: str, option_id: str) -> None:
        self.app.spawn(self.app.client.call("ChatService.AnswerPermission", {"id": request_id, "optionId": option_id}))

    def answer_question(self, question_id: str, values: dict[str, Any] | None) -> None:
        """Answer with `values`, or decline with None."""
        self.app.spawn(self.app.client.call("ChatService.AnswerQuestion", {"id": question_id, "values": values}))
