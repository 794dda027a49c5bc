"""The console's side of the agents' worktrees (the worktree plugin's, through its services): each
agent's changed files and folder, its worktree as a diff (F9), and merging or removing it from there.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from deck.errors import ServiceError

from .dialogs import DIALOG_WIDTH, ConfirmDialog
from .paths import agent_folders, configured_agents

if TYPE_CHECKING:
    from .app import ConsoleApp

#: The diff view's keys, and what each does to the shown agent's worktree.
WORKTREE_ACTIONS = {"m": "merge", "x": "remove", "X": "force"}


class Worktrees:
    """What the console shows and does of the agents' worktrees."""

    def __init__(self, app: ConsoleApp) -> None:
        self.app = app
        #: The agents of the config with a worktree (read again when the config changes).
        self.agents: set[str] = set()
        self._reads = 0  # the reads of the worktrees begun: only the last one's answer is taken

    def load(self) -> None:
        """Each agent's changed files as its worktree has them now (`worktree:*` events follow on),
        and the folder each agent works in (`paths.agent_folders`)."""
        app = self.app
        self._reads += 1
        read = self._reads

        async def fetch() -> None:
            try:
                text = await app.client.call("ConfigService.Content")
            except Exception:  # no folder is known then: paths stay as the agents write them
                text = ""
            try:
                rows = await app.client.call("WorktreeService.List")
            except Exception:  # the worktrees plugin is off, or a worktree cannot be read: nothing to show
                rows = None
            if read != self._reads:
                return  # a later read, begun since, says more
            self.agents = {name for name, table in configured_agents(text).items() if table.get("worktree")}
            if rows is not None:
                app.model.set_worktrees(rows)
            here = None if app.client.attached else os.getcwd()  # a server's own folder is not known
            app.model.set_folders(agent_folders(text, [r for r in rows or [] if isinstance(r, dict)], here))

        app.spawn(fetch())

    def show_diff(self) -> None:
        """The selected agent's worktree as a diff (`WorktreeService.Diff`), shown when it comes."""
        app = self.app
        agent = app.model.agents.get(app.selected)
        if agent is None:
            return
        name = agent.name
        app.diff_view.loading(name, agent.title)

        async def fetch() -> None:
            try:
                app.diff_view.show(name, await app.client.call("WorktreeService.Diff", {"agent": name}))
            except ServiceError as exc:  # `missing`: no worktree is known of it (none listed, or removed)
                app.diff_view.failed(name, agent.title, str(exc), missing=agent.changed_files is None)

        app.spawn(fetch())

    def key(self, key: str) -> None:
        """m: merge the shown agent's work, x: remove its worktree, X: remove it with the work it
        holds (offered once a remove was refused for that work); each once confirmed (Enter: no)."""
        app = self.app
        agent = app.model.agents.get(app.diff_view.agent)
        what = WORKTREE_ACTIONS.get(key)
        if agent is None or what is None:
            return
        s, name, title = app.strings, agent.name, agent.title

        def answered(yes: bool) -> None:
            app.close_dialog()
            if yes:
                app.spawn(self._call(what, name, title))

        question, text = s(f"{what}_title", agent=title), s(f"{what}_text", agent=title)
        dialog = ConfirmDialog(s, question, text, answered, f"{what}_yes")
        app.show_dialog("worktree", dialog, DIALOG_WIDTH)

    async def _call(self, what: str, name: str, title: str) -> None:
        """Merge agent `name`'s work, remove its worktree, or `force` its removal; a remove refused
        for the work the worktree holds (the refusal says to force it) offers the forced one."""
        app = self.app
        s = app.strings
        method = "WorktreeService.Merge" if what == "merge" else "WorktreeService.Remove"
        try:
            result = await app.client.call(method, {"agent": name, **({"force": True} if what == "force" else {})})
        except ServiceError as exc:
            if what == "remove" and "force" in str(exc):
                app.diff_view.offer_force(name)
            raise
        if what == "merge":
            app.say(s("merged", agent=title, base=result["base"], commit=result["commit"][:12]))
        else:
            app.say(s("removed", agent=title))
            agent = app.model.agents.get(name)
            if agent is not None:  # its files are gone with it
                agent.changed_files = None
                app.model.changes.agents.add(name)
        self.show_diff()

