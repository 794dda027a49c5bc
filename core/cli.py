"""The `deck` command line (typer). Heavy modules are imported inside the commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import typer

from ._version import __version__
from .errors import ExitCode

if TYPE_CHECKING:
    from .app import Deck

app = typer.Typer(
    name="deck",
    help="One terminal, many coding agents: run the ACP agents named in a config file.",
    no_args_is_help=False,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Check, locate and print the config file.", rich_markup_mode=None)
app.add_typer(config_app, name="config")

ConfigOption = typer.Option(
    None, "--config", "-c", metavar="PATH", help="Config file (else $DECK_CONFIG, ./deck.toml, XDG, built-in)."
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"deck {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def main_callback(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """One terminal, many coding agents."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one clear line and exit with `code` (2: the user's mistake)."""
    typer.echo(f"deck: {message}", err=True)
    raise typer.Exit(code)


def make_deck(config: Optional[Path], disabled: tuple[str, ...] = ()) -> Deck:
    from .app import Deck
    from .config import find_config
    from .errors import UsageError

    path, source = find_config(str(config) if config else None)
    if path is not None and not path.is_file():
        fail(f"config file not found: {path}")
    try:
        return Deck(path, source, disabled=disabled)
    except UsageError as exc:
        # "invalid config:\nPATH:LINE:COL: MESSAGE…" → one line per problem, compiler style.
        head, _, problems = str(exc).partition(":\n")
        for problem in problems.splitlines()[:-1]:
            typer.echo(f"deck: {head}: {problem}", err=True)
        fail(f"{head}: {problems.splitlines()[-1]}" if problems else str(exc))
        raise


def _disabled(values: list[str]) -> tuple[str, ...]:
    """`-p no:NAME` values → plugin names to disable."""
    bad = [v for v in values if not v.startswith("no:") or len(v) == 3]
    if bad:
        fail(f"bad --plugin value {bad[0]!r}: use -p no:NAME to disable a plugin")
    return tuple(v[3:] for v in values)


def frontends(deck: Deck) -> dict[str, Any]:
    return deck.hooks.register_frontends()


def run_async(coro: Any) -> Any:
    import asyncio

    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED


@app.command()
def run(
    config: Optional[Path] = ConfigOption,
    frontend: Optional[str] = typer.Option(None, "--frontend", "-f", metavar="NAME", help="urwid, line or jsonl (else the config's)."),
    stay: bool = typer.Option(False, "--stay", help="jsonl: keep running after the end of stdin, until a signal."),
    plugin: list[str] = typer.Option([], "--plugin", "-p", metavar="no:NAME", help="Disable plugin NAME (repeatable)."),
    trace: Optional[Path] = typer.Option(None, "--trace", metavar="FILE", help="Write every ACP line exchanged to this JSONL file."),
) -> None:
    """Start deck with a frontend (with no config: the built-in demo agent)."""
    deck = make_deck(config, _disabled(plugin))
    deck.trace_path = trace
    available = frontends(deck)
    name = frontend or deck.config.frontend or ("urwid" if sys.stdin.isatty() and sys.stdout.isatty() else "line")
    if name not in available and frontend is None:
        name = next((n for n in ("line", "jsonl") if n in available), name)
    if name not in available:
        fail(f"unknown frontend {name!r} (available: {', '.join(sorted(available)) or 'none'})")
    options: dict[str, Any] = {"stay": stay} if name == "jsonl" else {}
    code = run_async(deck.run(available[name], **options))
    raise typer.Exit(code or 0)


@app.command()
def send(
    agent: str = typer.Argument(..., metavar="AGENT", help="The agent to ask."),
    text: str = typer.Argument(..., metavar="TEXT", help="The prompt."),
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="Every event as a JSON line on stdout instead of the answer."),
) -> None:
    """Send one prompt; stream the answer to stdout; exit 0 on end_turn, 3-6 on other stop reasons, 1 on errors."""
    from .send import send as send_one

    code = run_async(send_one(make_deck(config), agent, text, as_json))
    raise typer.Exit(code or 0)


@app.command()
def agents(
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
    check: bool = typer.Option(False, "--check", help="Check that each agent's command exists (exit 1 if not)."),
    handshake: bool = typer.Option(False, "--handshake", help="With --check: also start each agent for an ACP handshake."),
) -> None:
    """List the configured agents; --check tests their commands (and --handshake, a real start)."""
    deck = make_deck(config)
    if check or handshake:
        from .checks import run_check

        raise typer.Exit(run_check(deck, handshake, as_json))
    rows = [
        {"name": a.name, "title": a.title, "icon": a.icon, "description": a.config.description, "command": a.config.command}
        for a in deck.agents.values()
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        typer.echo(f"{row['icon']} {row['name']:<16} {row['title']:<24} {' '.join(row['command'])}")


@app.command()
def plugins(
    config: Optional[Path] = ConfigOption,
    plugin: list[str] = typer.Option([], "--plugin", "-p", metavar="no:NAME", help="Disable plugin NAME (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
) -> None:
    """List the loaded plugins, where each comes from and the hooks it implements."""
    from .pluginmanager import describe

    deck = make_deck(config, _disabled(plugin))
    rows = describe(deck.pm)
    disabled = sorted(set(deck.disabled))
    if as_json:
        typer.echo(json.dumps({"plugins": rows, "disabled": disabled}, indent=2))
        return
    for row in rows:
        typer.echo(f"{row['name']:<16} {row['source']:<24} {', '.join(row['hooks'])}")
    if disabled:
        typer.echo(f"disabled: {', '.join(disabled)}")


@config_app.command("path")
def config_path(config: Optional[Path] = ConfigOption) -> None:
    """Say which config file is in use and how it was found."""
    from .config import find_config

    path, source = find_config(str(config) if config else None)
    how = {"flag": "--config", "env": "$DECK_CONFIG", "cwd": "./deck.toml", "xdg": "$XDG_CONFIG_HOME/deck/deck.toml"}
    if path is None:
        typer.echo("built-in default (no config file found)")
    elif not path.is_file():
        typer.echo(f"{path} (from {how[source]}; file not found)")
        raise typer.Exit(2)
    else:
        typer.echo(f"{path} (from {how[source]})")


@config_app.command("validate")
def config_validate(
    path: Optional[Path] = typer.Argument(None, metavar="PATH", help="The file to check (else the config in use)."),
) -> None:
    """Check a config file: one `path:line:col: message` line per problem; exit 1 on an error."""
    where, loaded, _sections = _load_config(path)
    for problem in loaded.problems:
        typer.echo(problem.format(where))
    if loaded.errors:
        raise typer.Exit(1)
    warnings = len(loaded.warnings)
    typer.echo(f"{where}: valid" + (f" ({warnings} warning{'s' if warnings > 1 else ''})" if warnings else ""))


@config_app.command("schema")
def config_schema(config: Optional[Path] = ConfigOption) -> None:
    """Print the config's JSON Schema, with plugin sections (for editor completion)."""
    from .config import json_schema

    _where, _loaded, sections = _load_config(config)
    typer.echo(json.dumps(json_schema(sections), indent=2))


@config_app.command("show")
def config_show(
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="JSON instead of TOML."),
) -> None:
    """Print the effective config: the file with every default filled in."""
    from .config import effective, to_toml

    where, loaded, _sections = _load_config(config)
    if loaded.config is None:
        for problem in loaded.problems:
            typer.echo(problem.format(where), err=True)
        raise typer.Exit(1)
    data = effective(loaded.config, loaded.sections)
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False) if as_json else to_toml(data), nl=as_json)


def _load_config(path: Optional[Path]) -> tuple[str, Any, dict[str, Any]]:
    """(where, Loaded, plugin sections) for `path`, else the config in use, else the built-in one."""
    import tomllib

    from .config import embedded_default, find_config, parse

    found, _source = find_config(str(path) if path else None)
    if found is None:
        where, text = "<built-in>", embedded_default()
    else:
        where = str(found)
        try:
            text = found.read_text(encoding="utf-8")
        except FileNotFoundError:
            fail(f"config file not found: {found}")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read {found}: {exc}")
    try:
        disabled = tomllib.loads(text).get("plugins", {}).get("disabled", [])
    except (tomllib.TOMLDecodeError, AttributeError):
        disabled = []
    sections = _plugin_sections([d for d in disabled if isinstance(d, str)] if isinstance(disabled, list) else [])
    return where, parse(text, sections), sections


def _plugin_sections(disabled: list[str]) -> dict[str, Any]:
    """Config sections the enabled plugins contribute; a plugin that fails is reported and skipped."""
    from .pluginmanager import make_manager

    sections: dict[str, Any] = {}
    for impl in make_manager(disabled).hook.deck_config_sections.get_hookimpls():
        try:
            sections.update(impl.function() or {})
        except Exception as exc:
            typer.echo(f"deck: plugin {impl.plugin_name} failed in deck_config_sections: {exc!r}", err=True)
    return sections


def main() -> None:
    first = sys.argv[1] if len(sys.argv) > 1 else ""
    # Built-in commands and --version need no plugin: keep them fast.
    if first not in BUILTIN_COMMANDS and first != "--version":
        _register_plugin_commands()
    app()


BUILTIN_COMMANDS = frozenset({"run", "send", "agents", "plugins", "config"})


def _register_plugin_commands() -> None:
    from .pluginmanager import make_manager

    try:
        make_manager().hook.deck_register_commands(app=app)
    except Exception as exc:  # a broken plugin must not take the CLI down
        typer.echo(f"deck: a plugin failed to add its commands: {exc}", err=True)


if __name__ == "__main__":
    main()
