"""What the commands of the `deck` command line share: the help's plain argument names, the
config option, what they print (`echo`, `echo_json`, `fail`), logging, and the deck a command runs.

Every command prints through `echo`, `echo_json` and `fail`, never `typer.echo` itself: what it
prints may hold an agent's or a host's text (an agent's stderr, its error messages and option
names, a folder on a host's PATH), whose control characters `deck.tty` makes visible there, so a
command is safe by default."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import typer
from deck.errors import ExitCode
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from deck.chat.approval import Approval
    from deck.runtime.deck import Deck


class Command(TyperCommand):
    """Plain argument names in help: `deck send [OPTIONS] AGENT TEXT`, not `{AGENT}` and `AGENT <str>`.

    Public (`deck.Command`): plugins pass it as `cls=` to their commands so their help reads the same."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.param_type_name == "argument":
                name = (param.metavar or param.name or "").upper()
                shown = [] if getattr(param, "hidden", False) else [name if param.required else f"[{name}]"]
                param.get_usage_pieces = lambda ctx, shown=shown: shown  # type: ignore[method-assign, misc]
                param.display_type_rich = lambda ctx: None  # type: ignore[attr-defined]

    def get_params(self, ctx: Any) -> list[Any]:
        return _as_text(super().get_params(ctx))


class Group(TyperGroup):
    """The `deck` group (and `deck config`): its options (help, completion) read as `Command`'s do,
    and a command it lacks is answered with the one meant: `deck chek` is likely `deck check`,
    and `deck check`, which deck has not, is one of two that it has (`MEANT`)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _as_text(super().get_params(ctx))

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except Exception as exc:  # the UsageError of the click typer runs on (its own copy, or click)
            name = args[0] if args else ""
            if not hasattr(exc, "message") or not name or name.startswith("-") or self.get_command(ctx, name):
                raise
            exc.message = f"No such command {name!r}. {_meant(_path(ctx), name, self.list_commands(ctx))}".rstrip()
            raise


def _path(ctx: Any) -> str:
    """`deck config` for the context of `deck config`, whatever name deck runs under (`python -m deck`)."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(["deck", *reversed(names)])


#: Commands deck has under another name, by the group they are typed in: what each means.
MEANT = {
    ("deck", "check"): (
        "Did you mean `deck agents --check` (can each agent start?) or `deck config validate` (is the config valid?)?"
    ),
    ("deck config", "check"): "Did you mean `deck config validate`?",
}


#: The commands the built-in plugins that are off would add, by name: their plugin (`commands_off`).
OFF_COMMANDS: dict[str, str] = {}


def _meant(group: str, name: str, commands: list[str]) -> str:
    """What `group NAME` likely meant: a command of another name (`MEANT`), one of a plugin that is
    off (`OFF_COMMANDS`), else the closest one."""
    import difflib

    others = [n for g, n in MEANT if g == group] + (list(OFF_COMMANDS) if group == "deck" else [])
    close = difflib.get_close_matches(name, [*commands, *others], n=1)
    meant = name if name in others else close[0] if close else None
    if meant is not None and (group, meant) in MEANT:
        return MEANT[group, meant]
    if group == "deck" and meant in OFF_COMMANDS:
        plugin = OFF_COMMANDS[meant]
        said = "It is" if meant == name else f"`deck {meant}` is"
        return f"{said} a command of the {plugin} plugin, which is off ([plugins] disabled, or -p no:{plugin})."
    return f"Did you mean `{group} {meant}`?" if meant else ""


try:
    from typer._coercion import RuntimeParam, build_runtime_param
except ImportError:  # another typer: it coerces every parameter itself
    _Plain: Any = None
else:

    class _Plain(RuntimeParam):  # type: ignore[no-redef]
        """A text or flag value as the command line gives it, which is what typer's pydantic
        coercion of `str`, `list[str]` and `bool` returns, without importing pydantic (some
        150 ms at each start); any other value goes to typer's own coercion."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if type(value) is self.annotation:
                return value
            if self.annotation == list[str] and isinstance(value, (tuple, list)) and all(type(v) is str for v in value):
                return list(value)
            return build_runtime_param(param.type_descriptor)._coerce_value(value, param, ctx)


def _as_text(params: list[Any]) -> list[Any]:
    """`params`, each plain `str`, `list[str]` or `bool` one (no parser, no choices) keeping its
    value as given: `deck attach`, `deck stop` and `deck send --attach` never import pydantic."""
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if _Plain is None or descriptor is None or getattr(param, "_runtime_param", False) is not None:
            continue
        if descriptor.annotation not in (str, bool, list[str]) or descriptor.parameter_info.parser is not None:
            continue
        if not descriptor.is_choice:
            param._runtime_param = _Plain(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation)
    return params


ConfigOption = typer.Option(
    None, "--config", "-c", metavar="PATH", help="Config file (else $DECK_CONFIG, ./deck.toml, XDG, built-in)."
)


def complete_agents(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion: the agents of the config the command line names (or the one in use)."""
    config = ctx.params.get("config")
    names = config_agents(Path(str(config)) if config else None) or []
    return [n for n in names if n.startswith(incomplete)]


def config_agents(config: Optional[Path] = None) -> list[str] | None:
    """The names of the agents of the config file `config` (else of the one in use), in config
    order, read from the file alone: no deck is made. None when the file cannot be read or is no
    valid config (the command that reads it says why)."""
    from deck.config.check import parse
    from deck.config.files import embedded_default, find_config, read_text

    try:
        found, _source = find_config(str(config) if config else None)
        text = read_text(found) if found is not None else embedded_default()  # a regular file only: never a FIFO
        loaded = parse(text)
    except Exception:  # never a traceback: shell completion calls it too
        return None
    return list(loaded.config.agents) if loaded.config is not None else None


def check_agent(name: str, agents: Iterable[str]) -> None:
    """What every command that takes an agent name does when `agents` (the config's) lack `name`:
    `deck: unknown agent 'NAME' (agents: a, b)` on stderr (`deck.errors.UnknownAgent`), and exit
    `ExitCode.USAGE`. Returns when `name` is one of them."""
    from deck.errors import UnknownAgent

    known = list(agents)
    if name not in known:
        fail(str(UnknownAgent(name, known)), ExitCode.USAGE)


def complete_frontends(incomplete: str) -> list[str]:
    """Shell completion: the frontends deck ships (plugins may add more)."""
    return [n for n in ("urwid", "line", "jsonl") if n.startswith(incomplete)]


def need_terminal(frontend: str) -> None:
    """The console draws on a terminal and reads its keys: with stdin or stdout a pipe, a file or
    /dev/null it would draw into the pipe and spin on an input that is closed, so it is a usage
    error, said before anything starts. Any other frontend: nothing to check."""
    import sys

    if frontend != "urwid":
        return
    missing = [name for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)) if not _is_terminal(stream)]
    if missing:
        what = " and ".join(missing) + (" are not terminals" if len(missing) > 1 else " is not a terminal")
        fail(f"the console (urwid) needs a terminal: {what}; use --frontend=line or jsonl")


def _is_terminal(stream: Any) -> bool:
    try:
        return stream is not None and bool(stream.isatty())
    except (OSError, ValueError):  # closed
        return False


def echo(text: str = "", err: bool = False, nl: bool = True) -> None:
    """Print `text` on stdout (`err`: stderr) with its control characters and bidi controls made
    visible (`deck.tty.printable`): none reaches the terminal as a control sequence."""
    from deck.tty import printable

    typer.echo(printable(text), err=err, nl=nl)


def echo_json(value: Any, ensure_ascii: bool = True) -> None:
    """Print `value` as indented JSON, the characters JSON leaves raw but a terminal may run (DEL, C1,
    the bidi controls) as `\\u` escapes (`deck.tty.json_printable`): the same JSON."""
    import json

    from deck.tty import json_printable

    typer.echo(json_printable(json.dumps(value, indent=2, ensure_ascii=ensure_ascii)))


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> NoReturn:
    """Print one clear line (`echo`ed) and exit with `code` (by default the user's mistake)."""
    echo(f"deck: {message}", err=True)
    raise typer.Exit(code)


def setup_logging() -> None:
    """Where deck's log records go, once per process: every record with its traceback to
    $XDG_STATE_HOME/deck/deck.log (rotated), and a problem as one line on stderr (tty.TerminalLog),
    which a full-screen frontend takes over while it owns the screen."""
    import logging

    from deck.proc.storage import state_dir
    from deck.tty import LogFile, TerminalLog

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


def make_deck(config: Optional[Path], disabled: tuple[str, ...] = (), warn: bool = False) -> Deck:
    """The deck of the config deck finds (`--config`, else discovery); `warn`: its warnings (unknown
    keys, with the key meant) are said on stderr, one line each, before it runs."""
    from deck.errors import UsageError
    from deck.runtime.deck import Deck

    setup_logging()
    path, source = config_file(config)
    try:
        deck = Deck(path, source, disabled=disabled)
    except UsageError as exc:
        *first, last = exc.lines()  # "invalid config: PATH:LINE:COL: MESSAGE", one per problem, compiler style
        for line in first:
            echo(f"deck: {line}", err=True)
        fail(last)
    names = deck.plugins_known.names or frozenset()
    for name in disabled:  # a misspelt `-p no:NAME` leaves its plugin on: said whether or not `warn`
        if name not in names:
            echo(f"deck: -p no:{name}: no plugin is named {name!r}{_closest(name, names)}, so it switches nothing off", err=True)
    if warn:
        say_warnings(deck)
    return deck


def _closest(name: str, names: Collection[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else f" (plugins: {', '.join(sorted(names))})"


def no_agent(deck: Deck) -> str | None:
    """What a command says of a config with no agent (an empty file): else it would print nothing
    and exit 0, as if it had done something. None when the config has agents."""
    if deck.agents:
        return None
    return f"no agent in the config ({deck.config_path or 'built-in'}): `deck config init` writes one"


def say_warnings(deck: Deck) -> None:
    """The config's warnings (unknown keys, with the key meant) on stderr, one line each."""
    where = str(deck.config_path or "<config>")
    for problem in deck.problems:
        if problem.warning:
            echo(f"deck: {problem.format(where)}", err=True)


def config_file(config: Optional[Path]) -> tuple[Path | None, str]:
    """The config file deck runs with, and how it was found; a usage error when it is missing."""
    from deck.config.files import find_config

    path, source = find_config(str(config) if config else None)
    if path is not None and not path.exists():  # not is_file(): `--config <(…)` is a pipe
        fail(f"config file not found: {path}")
    return path, source


def disabled_option(values: list[str]) -> tuple[str, ...]:
    """`-p no:NAME` values → plugin names to disable."""
    bad = [v for v in values if not v.startswith("no:") or len(v) == 3]
    if bad:
        fail(f"bad --plugin value {bad[0]!r}: use -p no:NAME to disable a plugin")
    return tuple(v[3:] for v in values)


#: `-p no:NAME`, repeatable: a plugin switched off for this command (`disabled_option`).
PluginOption = typer.Option([], "--plugin", "-p", metavar="no:NAME", help="Disable plugin NAME (repeatable).")

ApproveOption = typer.Option(
    [],
    "--approve",
    metavar="PATTERN",
    help=(
        "Approve the permission requests whose tool call PATTERN names (repeatable), with their "
        "allow-once option (else allow-always): KIND (read, edit, delete, move, search, execute, "
        "think, fetch, switch_mode, other), KIND:GLOB (that kind, its title matching the case-sensitive fnmatch "
        "GLOB) or *:GLOB (any kind). Other requests follow the agent's permissions policy."
    ),
)


def approvals_of(values: list[str]) -> tuple[Approval, ...]:
    """`--approve` values → patterns; a bad one is a usage error (exit 2), never approves anything."""
    from deck.chat.approval import Approval

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
        return asyncio.run(_then_settled(coro))
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED


async def _then_settled(coro: Any) -> Any:
    """`coro`, then the wait for processes still being started: `asyncio.run` cancels what is left."""
    from deck.proc.processes import settled

    try:
        return await coro
    finally:
        await settled()


def attached(name: str, frontend_cls: Any, **options: Any) -> int:
    """Run `frontend_cls` as a client of the deck server `name`: its exit code (1 when it went away)."""
    from deck.remote.serverdir import ServerError
    from deck.remote.socket_client import SocketClient, run_attached

    setup_logging()
    try:
        return int(run_async(run_attached(SocketClient(name), frontend_cls, **options)))
    except ServerError as exc:
        fail(str(exc), ExitCode.ERROR)


def report_plugin_failure(plugin: str, hook: str, exc: BaseException) -> None:
    """A plugin failed while the command line called it: one line on stderr, and the command goes on."""
    echo(f"deck: plugin {plugin} failed in {hook}: {exc!r}", err=True)
