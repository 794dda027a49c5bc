"""The urwid frontend: deck's full-screen console.

urwid is imported only when the console runs, so `deck --version` stays fast.
The pieces: model.py (events → what to show), markdown.py, agents.py (the agents
panel), conversation.py, dialogs.py, views.py (logs, config), app.py (layout, keys,
coalesced redraws), i18n.py (English and French strings).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from deck import hookimpl
from deck.frontend import Frontend


class UrwidFrontend(Frontend):
    name = "urwid"
    description = "full-screen console"

    def __init__(self, client: Any, **options: Any) -> None:
        super().__init__(client, **options)
        self.app: Any = None

    async def run(self) -> int:
        from .app import ConsoleApp

        self.app = ConsoleApp(self.client, await self.client.call("ConfigService.Current"))
        code = await self.app.run()
        if self.app.detached:  # the terminal is the shell's again: say what goes on, and how to come back
            with contextlib.suppress(OSError):
                sys.stderr.write(f"deck: {self.app.strings('detached', name=self.app.server_name)}\n")
                sys.stderr.flush()
        return code

    def choose_file(self) -> Any:
        return self.app.choose_file() if self.app is not None else None


@hookimpl
def deck_register_frontends() -> dict[str, type[Frontend]]:
    return {"urwid": UrwidFrontend}
