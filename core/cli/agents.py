"""`deck agents` and `deck plugins`: what a config's agents and deck's plugins are."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from deck.cli.common import (
    PluginOption,
    Command,
    ConfigOption,
    check_agent,
    disabled_option,
    echo,
    echo_json,
    fail,
    make_deck,
    no_agent,
    run_async,
)
from deck.errors import ExitCode


class AgentsCommand(Command):
    """`deck agents [OPTIONS] [NAME | ACTION ARGS]`: its two arguments read as one choice in the usage line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        first = next(p for p in self.params if p.param_type_name == "argument")
        first.get_usage_pieces = lambda ctx: [  # type: ignore[method-assign]
            "[NAME | logout NAME | search [WORDS] | add ID | update [NAME] | remove NAME]"
        ]


def agents(
    action: Optional[str] = typer.Argument(
        None, metavar="NAME", help="Only this agent. `deck agents logout NAME`: log agent NAME out (ACP logout)."
    ),
    rest: Optional[list[str]] = typer.Argument(None, hidden=True),
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
    as_name: Optional[str] = typer.Option(
        None, "--as", metavar="NAME", help="add: the agent's name in the config (default: its id)."
    ),
    host: Optional[str] = typer.Option(
        None, "--host", metavar="HOST", help="add: run it on HOST through ssh (its binary installed there)."
    ),
    ssh: list[str] = typer.Option([], "--ssh", metavar="ARG", help="add: one more ssh argument for --host (repeatable)."),
    cwd: Optional[str] = typer.Option(
        None, "--cwd", metavar="DIR", help="add: its working folder (with --host: an absolute path there)."
    ),
    via: Optional[str] = typer.Option(
        None, "--via", metavar="HOW", help="add: npx, uvx or binary (default: the first the registry gives)."
    ),
    force: bool = typer.Option(
        False, "--force", help="remove: also an agent not added from the registry (a table of yours)."
    ),
    check: bool = typer.Option(False, "--check", help="Check that each agent's command exists (exit 1 if not)."),
    handshake: bool = typer.Option(False, "--handshake", help="With --check: also start each agent for an ACP handshake."),
    plugin: list[str] = PluginOption,
) -> None:
    """List the agents; add them from the registry.

    Each configured agent is listed with where it came from (the ACP registry, a preset, by hand).

    `deck agents` lists them all, `deck agents NAME` only NAME; --check tests that each
    command exists, --handshake also starts each agent. `deck agents logout NAME` logs
    agent NAME out (ACP logout). An agent the config does not have is an error (exit 2).
    From the ACP registry: `search [WORDS]` lists its agents, `add ID [--as NAME]` writes one
    into the config with a pinned command, `update [NAME]` moves it to the registry's version,
    `remove NAME` takes it out (and the binary deck downloaded for it; an agent that did not
    come from the registry only with --force). These words are actions, never agent names.
    """
    from deck.cli.registry import ACTIONS

    args = list(rest or [])
    if action != "add" and (as_name or host or cwd or via or ssh):
        fail("--as, --host, --ssh, --cwd and --via are options of `deck agents add ID`")
    if force and action != "remove":
        fail("--force is an option of `deck agents remove NAME`")
    if action in ACTIONS and action != "logout":
        from deck.cli.registry import run

        options = {"as_json": as_json, "as_name": as_name, "host": host, "ssh": ssh, "cwd": cwd, "via": via,
                   "force": force}  # fmt: skip
        raise typer.Exit(run(action, args, config, options))
    if action == "logout" or args:
        if action != "logout" or len(args) > 1:
            fail(f"unknown action {action!r}: `deck agents NAME` shows one agent, `deck agents logout NAME` "
                 "logs one out, `deck agents search|add|update|remove` use the ACP registry")  # fmt: skip
        name = args[0] if args else None
        raise typer.Exit(_logout(config, name))
    deck = make_deck(config, disabled_option(plugin))
    if action is not None:
        check_agent(action, deck.agents)
    if (empty := no_agent(deck)) is not None and not as_json:
        echo(empty)
    if check or handshake:
        from deck.cli.check import run_check

        raise typer.Exit(run_check(deck, handshake, as_json, only=action))
    from deck.cli.registry import entry_origins

    shown = [a for a in deck.agents.values() if action is None or a.name == action]
    origins = entry_origins(deck.config.registry.url, {a.name: (a.config.command, a.config.registry) for a in shown})
    rows: list[dict[str, Any]] = [
        {"name": a.name, "title": a.title, "icon": a.icon, "description": a.config.description,
         "command": a.config.command, "origin": origins[a.name]}
        for a in shown
    ]  # fmt: skip
    if as_json:
        echo_json(rows)
        return
    from deck.registry.origin import describe

    for row in rows:
        command = " ".join(row["command"])
        echo(f"{row['icon']} {row['name']:<16} {row['title']:<24} {command}  [{describe(row['origin'])}]")


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
    plugin: list[str] = PluginOption,
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
