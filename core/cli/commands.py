"""The `deck` command line (typer). Heavy modules are imported inside the commands."""

from __future__ import annotations

import sys

import typer
from deck._version import __version__
from deck.cli import acp, agents, config, fork, inbox, run, server, usage
from deck.cli.common import Command, Group, echo, report_plugin_failure

app = typer.Typer(
    name="deck",
    cls=Group,
    help="One terminal, many coding agents: run the ACP agents named in a config file.",
    no_args_is_help=False,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        echo(f"deck {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def main_callback(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """One terminal, many coding agents."""
    if ctx.invoked_subcommand is None:
        echo(ctx.get_help())


def main() -> None:
    args = sys.argv[1:]
    # Built-in commands and --version need no plugin: keep them fast.
    if (args[0] if args else "") not in BUILTIN_COMMANDS | {"--version"}:
        register_plugin_commands(app, args)
    app()


# One module per command, each registering its own, as plugins register theirs.
app.add_typer(config.config_app, name="config", cls=Group)  # deck config path|init|validate|schema|show
run.register(app)  # deck run, deck send
server.register(app)  # deck serve, attach, stop, ls
agents.register(app)  # deck agents, deck plugins
inbox.register(app, Command)  # deck inbox, deck answer
fork.register(app, Command)  # deck fork
usage.register(app, Command)
acp.register(app, Command)  # deck acp

BUILTIN_COMMANDS = frozenset(
    {"run", "send", "agents", "plugins", "config", "serve", "attach", "stop", "ls", "inbox", "answer", "usage", "acp"}
)


def register_plugin_commands(target: typer.Typer, args: list[str]) -> None:
    """Let each enabled plugin add its commands to `target`, through the hooks facade: one that
    fails is reported in one line, and the others still add theirs."""
    from deck.cli import common
    from deck.runtime.hooks import PluginHooks
    from deck.runtime.plugins import commands_off, make_manager

    disabled = disabled_by(args)
    try:
        pm = make_manager(disabled)
    except Exception as exc:  # a broken plugin must not take the CLI down
        echo(f"deck: cannot load the plugins: {exc!r}", err=True)
        return
    PluginHooks(pm, report_plugin_failure).register_commands(target)
    if disabled:  # `deck land` with the worktrees off: "No such command", and why
        common.OFF_COMMANDS.update(commands_off(disabled))


def disabled_by(args: list[str]) -> list[str]:
    """The plugins a command line disables, read before typer parses it (a plugin's command may
    not even take these options): `-p no:NAME`, and the `[plugins] disabled` of the config it
    names with --config/-c, else of the config in use. Only that list is read from the file; a
    config deck cannot read disables nothing (the command says why, if it reads the config)."""
    from deck.config.check import disabled_plugins
    from deck.config.files import find_config, read_text

    disabled = [v[3:] for v in _option_values(args, "--plugin", "-p") if v.startswith("no:") and len(v) > 3]
    configs = _option_values(args, "--config", "-c")
    try:
        path, _source = find_config(configs[-1] if configs else None)
        if path is not None:
            disabled += disabled_plugins(read_text(path))  # a regular file only: a pipe stays for the command
    except (OSError, UnicodeDecodeError):
        pass
    return disabled


def _option_values(args: list[str], long: str, short: str) -> list[str]:
    """The values `args` give option `long`/`short` (`--long V`, `--long=V`, `-s V`, `-sV`), up to a `--`."""
    values = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            break
        if arg in (long, short):
            values.append(next(rest, ""))
        elif arg.startswith(long + "="):
            values.append(arg[len(long) + 1 :])
        elif arg.startswith(short) and not arg.startswith("--"):
            values.append(arg[len(short) :])
    return values


if __name__ == "__main__":
    main()
