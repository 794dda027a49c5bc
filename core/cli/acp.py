"""`deck acp AGENT`: deck as an ACP agent on stdin/stdout, for any ACP client (an editor, acpx, an SDK)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from deck.cli.common import ConfigOption, attached, check_agent, complete_agents, config_file, echo, fail, make_deck, run_async
from deck.errors import ExitCode


def acp(
    agent: str = typer.Argument(..., metavar="AGENT", autocompletion=complete_agents, help="The agent the client drives."),
    config: Optional[Path] = ConfigOption,
    attach: Optional[str] = typer.Option(None, "--attach", metavar="NAME", help="Go through the running deck server NAME (deck serve)."),
) -> None:
    """Speak ACP on stdin/stdout as AGENT, as deck runs it.

    An editor (Zed, JetBrains), Toad, acpx or an ACP SDK starts `deck acp AGENT` as its agent
    command: the agent runs in its worktree, sandbox and budget, its conversations are kept in
    deck's history, and every deck frontend attached sees the client's conversation live. When a
    deck server (deck serve) runs the config, the client goes through it (as --attach); otherwise
    deck runs the agent itself for as long as the client stays. stdout carries ACP only: deck's
    notes and logs go to stderr.
    """
    from deck.remote.acp_stdio import AcpStdio, take_stdio

    if attach is not None and config is not None:
        fail("--attach goes through a server, which follows its own config: no --config with it")
    if attach is None:
        attach = _server_of(config)
    if attach is not None:
        channel = take_stdio()
        code = attached(attach, AcpStdio, agent=agent, channel=channel)
        raise typer.Exit(code or ExitCode.OK)
    deck = make_deck(config)
    check_agent(agent, deck.agents)
    channel = take_stdio()
    code = run_async(deck.run(AcpStdio, agent=agent, channel=channel))
    raise typer.Exit(code or ExitCode.OK)


def _server_of(config: Optional[Path]) -> Optional[str]:
    """The running deck server of the config, if any (said on stderr: the client goes through it)."""
    from deck.remote.socket_client import server_of

    path, _source = config_file(config)
    name = server_of(path) if path is not None and path.is_file() else None
    if name is not None:
        echo(f"deck: the deck server {name} runs {path}: the ACP client goes through it", err=True)
    return name


def register(app: typer.Typer, command_cls: Any) -> None:
    app.command(cls=command_cls)(acp)
