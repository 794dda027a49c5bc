"""`deck fork`: a new conversation for an agent of a running deck server, a fork of its current one."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from deck.cli.common import echo
from deck.cli.inbox import AttachOption, ServerConfigOption, call, server


def fork(
    agent: str = typer.Argument(..., metavar="AGENT", help="The agent whose conversation to fork."),
    attach: Optional[str] = AttachOption,
    config: Optional[Path] = ServerConfigOption,
) -> None:
    """Fork AGENT's conversation into a new one.

    The new conversation starts as a copy of it.

    The agent's session is forked (ACP session/fork; an agent that does not offer it is refused),
    the new conversation becomes its current one, and the old one stays in the history."""
    result = call(server(attach, config), "ChatService.Fork", {"agent": agent})
    echo(f"{agent}: forked session {result.get('forkedFrom')} as {result.get('sessionId')}")


def register(app: typer.Typer, command_cls: Any) -> None:
    app.command(cls=command_cls)(fork)
