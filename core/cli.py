"""The `deck` command line (typer). Heavy modules are imported inside the commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import typer
from typer.core import TyperCommand

from ._version import __version__
from .errors import ExitCode

if TYPE_CHECKING:
    from .app import Deck
    from .approve import Approval

class Command(TyperCommand):
    """Plain argument names in help: `deck send [OPTIONS] AGENT TEXT`, not `{AGENT}` and `AGENT <str>`.

    Public (`deck.Command`): plugins pass it as `cls=` to their commands so their help reads the same."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.param_type_name == "argument":
                name = (param.metavar or param.name or "").upper()
                shown = name if param.required else f"[{name}]"
                param.get_usage_pieces = lambda ctx, shown=shown: [shown]  # type: ignore[method-assign, misc]
                param.display_type_rich = lambda ctx: None  # type: ignore[attr-defined]


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


def _complete_agents(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion: the agents of the config the command line names (or the one in use)."""
    from .config import embedded_default, find_config, parse, read_text

    try:
        found, _source = find_config(str(ctx.params["config"]) if ctx.params.get("config") else None)
        text = read_text(found) if found is not None else embedded_default()  # a regular file only: never a FIFO
        loaded = parse(text)
    except Exception:  # completion never prints a traceback into the user's shell
        return []
    names = list(loaded.config.agents) if loaded.config is not None else []
    return [n for n in names if n.startswith(incomplete)]


def _complete_frontends(incomplete: str) -> list[str]:
    """Shell completion: the frontends deck ships (plugins may add more)."""
    return [n for n in ("urwid", "line", "jsonl") if n.startswith(incomplete)]


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


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> NoReturn:
    """Print one clear line and exit with `code` (by default the user's mistake)."""
    typer.echo(f"deck: {message}", err=True)
    raise typer.Exit(code)


def setup_logging() -> None:
    """Where deck's log records go, once per process: every record with its traceback to
    $XDG_STATE_HOME/deck/deck.log (rotated), and a problem as one line on stderr (tty.TerminalLog),
    which a full-screen frontend takes over while it owns the screen."""
    import logging

    from .files import state_dir
    from .tty import LogFile, TerminalLog

    root = logging.getLogger()
    if any(isinstance(h, TerminalLog) for h in root.handlers):
        return
    path = state_dir() / "deck.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        root.addHandler(LogFile(path))
        written: Optional[Path] = path
    except OSError:
        written = None  # no writable state dir: the terminal still gets its lines
    root.addHandler(TerminalLog(written))
    root.setLevel(logging.WARNING)  # other libraries: their problems only
    logging.getLogger("deck").setLevel(logging.INFO)
    logging.captureWarnings(True)  # Python warnings too, instead of raw on stderr


def make_deck(config: Optional[Path], disabled: tuple[str, ...] = ()) -> Deck:
    from .app import Deck
    from .config import find_config
    from .errors import UsageError

    setup_logging()
    path, source = find_config(str(config) if config else None)
    if path is not None and not path.exists():  # not is_file(): `--config <(…)` is a pipe
        fail(f"config file not found: {path}")
    try:
        return Deck(path, source, disabled=disabled)
    except UsageError as exc:
        *first, last = exc.lines()  # "invalid config: PATH:LINE:COL: MESSAGE", one per problem, compiler style
        for line in first:
            typer.echo(f"deck: {line}", err=True)
        fail(last)


def _disabled(values: list[str]) -> tuple[str, ...]:
    """`-p no:NAME` values → plugin names to disable."""
    bad = [v for v in values if not v.startswith("no:") or len(v) == 3]
    if bad:
        fail(f"bad --plugin value {bad[0]!r}: use -p no:NAME to disable a plugin")
    return tuple(v[3:] for v in values)


ApproveOption = typer.Option(
    [],
    "--approve",
    metavar="PATTERN",
    help=(
        "Approve the permission requests whose tool call PATTERN names (repeatable), with their "
        "allow-once option (else allow-always): KIND (read, edit, delete, move, search, execute, "
        "think, fetch, other), KIND:GLOB (that kind, its title matching the case-sensitive fnmatch "
        "GLOB) or *:GLOB (any kind). Other requests follow the agent's permissions policy."
    ),
)


def _approvals(values: list[str]) -> tuple[Approval, ...]:
    """`--approve` values → patterns; a bad one is a usage error (exit 2), never approves anything."""
    from .approve import Approval

    approvals = []
    for value in values:
        try:
            approvals.append(Approval.parse(value))
        except ValueError as exc:
            fail(f"bad --approve {value!r}: {exc}")
    return tuple(approvals)


def frontends(deck: Deck) -> dict[str, Any]:
    return deck.hooks.register_frontends()


def run_async(coro: Any) -> Any:
    import asyncio

    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED


@app.command(cls=Command)
def run(
    config: Optional[Path] = ConfigOption,
    frontend: Optional[str] = typer.Option(None, "--frontend", "-f", metavar="NAME", autocompletion=_complete_frontends, help="urwid, line or jsonl (else the config's)."),
    stay: bool = typer.Option(False, "--stay", help="jsonl: keep running after the end of stdin, until a signal."),
    plugin: list[str] = typer.Option([], "--plugin", "-p", metavar="no:NAME", help="Disable plugin NAME (repeatable)."),
    trace: Optional[Path] = typer.Option(None, "--trace", metavar="FILE", help="Write every ACP line exchanged to this JSONL file."),
    approve: list[str] = ApproveOption,
) -> None:
    """Start deck with a frontend.

    With no config file anywhere, deck runs the built-in demo agent.
    """
    approvals = _approvals(approve)
    deck = make_deck(config, _disabled(plugin))
    deck.trace_path = trace
    deck.chat.approvals = approvals
    available = frontends(deck)
    name = frontend or deck.config.frontend or ("urwid" if sys.stdin.isatty() and sys.stdout.isatty() else "line")
    if name not in available and frontend is None:
        name = next((n for n in ("line", "jsonl") if n in available), name)
    if name not in available:
        fail(f"unknown frontend {name!r} (available: {', '.join(sorted(available)) or 'none'})")
    options: dict[str, Any] = {"stay": stay} if name == "jsonl" else {}
    code = run_async(deck.run(available[name], **options))
    raise typer.Exit(code or ExitCode.OK)


@app.command(cls=Command)
def send(
    agent: str = typer.Argument(..., metavar="AGENT", autocompletion=_complete_agents, help="The agent to ask."),
    text: str = typer.Argument(..., metavar="TEXT", help="The prompt."),
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="Every event as a JSON line on stdout instead of the answer."),
    approve: list[str] = ApproveOption,
) -> None:
    """Send one prompt and stream the answer to stdout.

    A permission request is approved by --approve or the agent's `permissions`
    policy, else refused; a question is declined.

    Exit code: 0 end_turn, 3 max_tokens, 4 max_turn_requests, 5 refusal, 6 cancelled,
    1 when the agent failed, 2 for a usage error.
    """
    from .send import SendFrontend

    approvals = _approvals(approve)
    deck = make_deck(config)
    deck.chat.approvals = approvals
    code = run_async(deck.run(SendFrontend, agent=agent, text=text, as_json=as_json))
    raise typer.Exit(code or ExitCode.OK)


@app.command(cls=Command)
def agents(
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
    check: bool = typer.Option(False, "--check", help="Check that each agent's command exists (exit 1 if not)."),
    handshake: bool = typer.Option(False, "--handshake", help="With --check: also start each agent for an ACP handshake."),
) -> None:
    """List the configured agents.

    --check tests that each command exists; --handshake also starts each agent.
    """
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


@app.command(cls=Command)
def plugins(
    config: Optional[Path] = ConfigOption,
    plugin: list[str] = typer.Option([], "--plugin", "-p", metavar="no:NAME", help="Disable plugin NAME (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
) -> None:
    """List the loaded plugins and their hooks.

    Where each plugin comes from, and the hooks it implements.
    """
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


@config_app.command("path", cls=Command)
def config_path(config: Optional[Path] = ConfigOption) -> None:
    """Say which config file is in use and how it was found."""
    from .config import find_config

    path, source = find_config(str(config) if config else None)
    how = {"flag": "--config", "env": "$DECK_CONFIG", "cwd": "./deck.toml", "xdg": "$XDG_CONFIG_HOME/deck/deck.toml"}
    if path is None:
        typer.echo("built-in default (no config file found)")
    elif not path.is_file():
        typer.echo(f"{path} (from {how[source]}; file not found)")
        raise typer.Exit(ExitCode.USAGE)
    else:
        typer.echo(f"{path} (from {how[source]})")


@config_app.command("init", cls=Command)
def config_init(
    path: Path = typer.Argument(Path("deck.toml"), metavar="PATH", help="Where to write it.", show_default="./deck.toml"),
) -> None:
    """Write a commented first config.

    The demo agent, and presets for real agents to uncomment. Never overwrites a file.
    """
    from .starter import starter_config, write_new

    try:
        write_new(path, starter_config())
    except FileExistsError:
        fail(f"{path} already exists: not overwritten (move it away, or give another PATH)", ExitCode.ERROR)
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or exc}", ExitCode.ERROR)
    typer.echo(f"wrote {path}: the demo agent, and commented presets for real agents.")
    run = "deck run" if path.resolve() == Path("deck.toml").resolve() else f"deck run --config {path}"
    typer.echo(f"Next: edit it, check it with `deck config validate {path}`, then `{run}`.")


@config_app.command("validate", cls=Command)
def config_validate(
    path: Optional[Path] = typer.Argument(None, metavar="PATH", help="The file to check (else the config in use)."),
) -> None:
    """Check a config file.

    One `path:line:col: message` line per problem; exit 1 on an error.
    """
    where, loaded, _sections = _load_config(path)
    for problem in loaded.problems:
        typer.echo(problem.format(where))
    if loaded.errors:
        raise typer.Exit(ExitCode.ERROR)
    warnings = len(loaded.warnings)
    typer.echo(f"{where}: valid" + (f" ({warnings} warning{'s' if warnings > 1 else ''})" if warnings else ""))


@config_app.command("schema", cls=Command)
def config_schema(config: Optional[Path] = ConfigOption) -> None:
    """Print the config's JSON Schema.

    With the plugins' sections, for editor completion.
    """
    from .config import json_schema

    _where, _loaded, sections = _load_config(config)
    typer.echo(json.dumps(json_schema(sections), indent=2))


@config_app.command("show", cls=Command)
def config_show(
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="JSON instead of TOML."),
) -> None:
    """Print the effective config.

    The file with every default filled in.
    """
    from .config import effective, to_toml

    where, loaded, _sections = _load_config(config)
    if loaded.config is None:
        for problem in loaded.problems:
            typer.echo(problem.format(where), err=True)
        raise typer.Exit(ExitCode.ERROR)
    data = effective(loaded.config, loaded.sections)
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False) if as_json else to_toml(data), nl=as_json)


def _load_config(path: Optional[Path]) -> tuple[str, Any, dict[str, Any]]:
    """(where, Loaded, plugin sections) for `path`, else the config in use, else the built-in one."""
    from .config import disabled_plugins, embedded_default, find_config, parse, read_text

    found, _source = find_config(str(path) if path else None)
    if found is None:
        where, text = "<built-in>", embedded_default()
    else:
        where = str(found)
        try:
            text = read_text(found, pipe=True)  # a regular file or `<(…)`, of 1 MiB at most
        except FileNotFoundError:
            fail(f"config file not found: {found}")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read {found}: {exc}")
    sections = _plugin_sections(disabled_plugins(text))
    return where, parse(text, sections), sections


def _plugin_sections(disabled: list[str]) -> dict[str, Any]:
    """Config sections the enabled plugins contribute; a plugin that fails is reported and skipped."""
    from .hooks import PluginHooks
    from .pluginmanager import make_manager

    return PluginHooks(make_manager(disabled), report_plugin_failure).config_sections()


def report_plugin_failure(plugin: str, hook: str, exc: BaseException) -> None:
    """A plugin failed while the command line called it: one line on stderr, and the command goes on."""
    typer.echo(f"deck: plugin {plugin} failed in {hook}: {exc!r}", err=True)


def main() -> None:
    args = sys.argv[1:]
    # Built-in commands and --version need no plugin: keep them fast.
    if (args[0] if args else "") not in BUILTIN_COMMANDS | {"--version"}:
        register_plugin_commands(app, args)
    app()


BUILTIN_COMMANDS = frozenset({"run", "send", "agents", "plugins", "config"})


def register_plugin_commands(target: typer.Typer, args: list[str]) -> None:
    """Let each enabled plugin add its commands to `target`, through the hooks facade: one that
    fails is reported in one line, and the others still add theirs."""
    from .hooks import PluginHooks
    from .pluginmanager import make_manager

    try:
        pm = make_manager(disabled_by(args))
    except Exception as exc:  # a broken plugin must not take the CLI down
        typer.echo(f"deck: cannot load the plugins: {exc!r}", err=True)
        return
    PluginHooks(pm, report_plugin_failure).register_commands(target)


def disabled_by(args: list[str]) -> list[str]:
    """The plugins a command line disables, read before typer parses it (a plugin's command may
    not even take these options): `-p no:NAME`, and the `[plugins] disabled` of the config it
    names with --config/-c, else of the config in use. Only that list is read from the file; a
    config deck cannot read disables nothing (the command says why, if it reads the config)."""
    from .config import disabled_plugins, find_config, read_text

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
