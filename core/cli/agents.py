"""`deck agents` and `deck plugins`: what a config's agents and deck's plugins are."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from deck.cli.common import (
    Command,
    ConfigOption,
    check_agent,
    disabled_option,
    echo,
    echo_json,
    fail,
    make_deck,
    run_async,
)
from deck.errors import ExitCode


class AgentsCommand(Command):
    """`deck agents [OPTIONS] [NAME | logout NAME]`: its two arguments read as one choice in the usage line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        first = next(p for p in self.params if p.param_type_name == "argument")
        first.get_usage_pieces = lambda ctx: ["[NAME | logout NAME]"]  # type: ignore[method-assign]


def agents(
    action: Optional[str] = typer.Argument(
        None, metavar="NAME", help="Only this agent. `deck agents logout NAME`: log agent NAME out (ACP logout)."
    ),
    name: Optional[str] = typer.Argument(None, hidden=True),
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
    check: bool = typer.Option(False, "--check", help="Check that each agent's command exists (exit 1 if not)."),
    handshake: bool = typer.Option(False, "--handshake", help="With --check: also start each agent for an ACP handshake."),
) -> None:
    """List the configured agents, or log one out.

    `deck agents` lists them all, `deck agents NAME` only NAME; --check tests that each
    command exists, --handshake also starts each agent. `deck agents logout NAME` logs
    agent NAME out (ACP logout). An agent the config does not have is an error (exit 2).
    """
    if action == "logout" or name is not None:
        if action != "logout":
            fail(f"unknown action {action!r}: `deck agents NAME` shows one agent, "
                 "`deck agents logout NAME` logs one out")  # fmt: skip
        raise typer.Exit(_logout(config, name))
    deck = make_deck(config)
    if action is not None:
        check_agent(action, deck.agents)
    if check or handshake:
        from deck.cli.check import run_check

        raise typer.Exit(run_check(deck, handshake, as_json, only=action))
    rows = [
        {"name": a.name, "title": a.title, "icon": a.icon, "description": a.config.description, "command": a.config.command}
        for a in deck.agents.values()
        if action is None or a.name == action
    ]
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        echo(f"{row['icon']} {row['name']:<16} {row['title']:<24} {' '.join(row['command'])}")


def _logout(config: Optional[Path], name: Optional[str]) -> int:
    """Start agent `name` of the config, log it out (ACP `logout`), stop it."""
    from deck.errors import DeckError

    deck = make_deck(config)
    if name is None:
        fail(f"deck agents logout NAME: name the agent to log out; agents: {', '.join(deck.agents) or 'none'}")
    check_agent(name, deck.agents)

    async def logout() -> None:
        try:
            await deck.call("AgentService.Logout", {"name": name})
        finally:
            await deck.shutdown()

    try:
        run_async(logout())
    except DeckError as exc:  # a refusal, the agent not starting, or its own error answer
        fail(str(exc), ExitCode.ERROR)
    echo(f"{name} logged out: its next start authenticates again")
    return ExitCode.OK


def plugins(
    config: Optional[Path] = ConfigOption,
    plugin: list[str] = typer.Option([], "--plugin", "-p", metavar="no:NAME", help="Disable plugin NAME (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
) -> None:
    """List the loaded plugins and their hooks.

    Where each plugin comes from, and the hooks it implements.
    """
    from deck.runtime.plugins import describe

    deck = make_deck(config, disabled_option(plugin))
    rows = describe(deck.pm)
    disabled = sorted(set(deck.disabled))
    if as_json:
        echo_json({"plugins": rows, "disabled": disabled})
        return
    for row in rows:
        echo(f"{row['name']:<16} {row['source']:<24} {', '.join(row['hooks'])}")
    if disabled:
        echo(f"disabled: {', '.join(disabled)}")


def register(app: typer.Typer) -> None:
    app.command(cls=AgentsCommand)(agents)
    app.command(cls=Command)(plugins)
