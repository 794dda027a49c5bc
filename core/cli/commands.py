"""The `deck` command line (typer). Heavy modules are imported inside the commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import typer
from deck._version import __version__
from deck.cli import inbox, usage
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
                shown = name if param.required else f"[{name}]"
                param.get_usage_pieces = lambda ctx, shown=shown: [shown]  # type: ignore[method-assign, misc]
                param.display_type_rich = lambda ctx: None  # type: ignore[attr-defined]

    def get_params(self, ctx: Any) -> list[Any]:
        return _as_text(super().get_params(ctx))


class Group(TyperGroup):
    """The `deck` group: its options (help, completion) read as `Command`'s do."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _as_text(super().get_params(ctx))


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


app = typer.Typer(
    name="deck",
    cls=Group,
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
    from deck.config.models import embedded_default, find_config, parse, read_text

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
    path, source = _config_file(config)
    try:
        deck = Deck(path, source, disabled=disabled)
    except UsageError as exc:
        *first, last = exc.lines()  # "invalid config: PATH:LINE:COL: MESSAGE", one per problem, compiler style
        for line in first:
            typer.echo(f"deck: {line}", err=True)
        fail(last)
    if warn:
        say_warnings(deck)
    return deck


def say_warnings(deck: Deck) -> None:
    """The config's warnings (unknown keys, with the key meant) on stderr, one line each."""
    where = str(deck.config_path or "<config>")
    for problem in deck.problems:
        if problem.warning:
            typer.echo(f"deck: {problem.format(where)}", err=True)


def _config_file(config: Optional[Path]) -> tuple[Path | None, str]:
    """The config file deck runs with, and how it was found; a usage error when it is missing."""
    from deck.config.models import find_config

    path, source = find_config(str(config) if config else None)
    if path is not None and not path.exists():  # not is_file(): `--config <(…)` is a pipe
        fail(f"config file not found: {path}")
    return path, source


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
    new: bool = typer.Option(False, "--new", help="Run apart even when a deck server (deck serve) runs this config."),
) -> None:
    """Start deck with a frontend.

    With no config file anywhere, deck runs the built-in demo agent. When a deck server runs the
    same config, `deck run` attaches to it instead (--new runs a deck of its own all the same).
    """
    approvals = _approvals(approve)
    disabled = _disabled(plugin)
    if not new:
        _attach_instead(config, frontend, stay=stay, changed=bool(plugin or trace or approve))
    deck = make_deck(config, disabled)
    deck.trace_path = trace
    deck.chat.approvals = approvals
    available = frontends(deck)
    name = frontend if frontend is not None else deck.config.frontend
    if name is None:  # the default, unless it is switched off
        name = "urwid" if sys.stdin.isatty() and sys.stdout.isatty() else "line"
        name = name if name in available else next((n for n in ("line", "jsonl") if n in available), name)
    if name not in available:
        given = "" if frontend else f" in {deck.config_path or 'the config'}"
        fail(f"unknown frontend {name!r}{given} (available: {', '.join(sorted(available)) or 'none'})")
    if name not in ("line", "urwid"):  # those two show the config's warnings where they show the rest
        say_warnings(deck)
    options: dict[str, Any] = {"stay": stay} if name == "jsonl" else {}
    code = run_async(deck.run(available[name], **options))
    raise typer.Exit(code or ExitCode.OK)


@app.command(cls=Command)
def send(
    agent: str = typer.Argument(..., metavar="AGENT", autocompletion=_complete_agents, help="The agent to ask."),
    text: Optional[str] = typer.Argument(None, metavar="TEXT", help="The prompt; `-`, or none with stdin not a terminal: stdin."),
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="Every event as a JSON line on stdout instead of the answer."),
    approve: list[str] = ApproveOption,
    attach: Optional[str] = typer.Option(None, "--attach", metavar="NAME", help="Send through the running deck server NAME (deck serve)."),
    keep: bool = typer.Option(False, "--continue", help="Continue the agent's latest conversation (with --attach: the default)."),
    conversation: Optional[str] = typer.Option(None, "--conversation", metavar="ID", help="Continue the stored conversation ID (or a unique start of it)."),
) -> None:
    """Send one prompt and stream the answer to stdout.

    The prompt goes to a conversation of its own, unless --continue or --conversation
    (through a server, --attach, to the agent's current one). A permission request is
    approved by --approve or the agent's `permissions` policy, else refused; a question
    is declined. Ctrl-C cancels the turn.

    Exit code: 0 end_turn, 3 max_tokens, 4 max_turn_requests, 5 refusal, 6 cancelled,
    1 when the agent failed, 2 for a usage error, 130 interrupted.
    """
    from deck.frontends.send import SendFrontend

    if keep and conversation is not None:
        fail("--continue and --conversation: give one of them")
    if attach is not None and (approve or config is not None):
        fail("--attach sends through a server, which follows its own config: no --config or --approve with it")
    options: dict[str, Any] = {"agent": agent, "text": _prompt(text), "as_json": as_json, "conversation": conversation}
    if attach is not None:
        code = _attached(attach, SendFrontend, keep=True, **options)  # the conversation its console shows
        raise typer.Exit(code or ExitCode.OK)
    approvals = _approvals(approve)
    deck = make_deck(config, warn=True)
    deck.chat.approvals = approvals
    code = run_async(deck.run(SendFrontend, keep=keep, **options))
    raise typer.Exit(code or ExitCode.OK)


def _prompt(text: Optional[str]) -> str:
    """The prompt: TEXT, else what stdin holds (TEXT `-`, or no TEXT and stdin no terminal)."""
    if text is not None and text != "-":
        return text
    if sys.stdin is None or (text is None and sys.stdin.isatty()):
        fail("no TEXT: give the prompt as TEXT, or on stdin (`… | deck send AGENT`, or TEXT `-`)")
    return _read_prompt(sys.stdin.buffer)


def _read_prompt(stream: Any) -> str:
    """All of `stream` as UTF-8 text, of at most the size of a line deck reads; else a usage error."""
    from deck.acp.connection import MAX_LINE_BYTES

    try:
        data = stream.read(MAX_LINE_BYTES + 1)
    except KeyboardInterrupt:
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    except OSError as exc:
        fail(f"cannot read the prompt from stdin: {exc.strerror or exc}")
    if len(data) > MAX_LINE_BYTES:
        fail(f"the prompt on stdin is over {MAX_LINE_BYTES >> 20} MiB: deck reads {MAX_LINE_BYTES >> 20} MiB at most")
    try:
        return str(data.decode())
    except UnicodeDecodeError as exc:
        fail(f"the prompt on stdin is not UTF-8 text (byte {exc.start} is not)")


NameArgument = typer.Argument("default", metavar="NAME", help="The server's name.")


def _attach_instead(config: Optional[Path], frontend: Optional[str], stay: bool, changed: bool) -> None:
    """`deck run` of a config a deck server runs already: attach to it (saying so) rather than start
    second copies of its agents in the same folders; refused when an option asks for what only a
    deck of its own can do. Returns when no server runs the config."""
    from deck.remote.socket_client import server_of

    path, _source = _config_file(config)
    if path is None or not path.is_file():
        return
    name = server_of(path)
    if name is None:
        return
    if changed or stay:
        fail(f"the deck server {name} runs {path} already: `deck attach {name}` to use it, or"
             " `deck run --new` to run a deck of its own beside it (second copies of its agents)")  # fmt: skip
    typer.echo(f"deck: the deck server {name} runs {path}: attaching to it (deck run --new runs apart)", err=True)
    if frontend is None:
        from deck.config.models import load_file

        _text, loaded = load_file(path)
        frontend = loaded.config.frontend if loaded.config is not None else None
    attach(name=name, frontend=frontend, plugin=[])


def _attached(name: str, frontend_cls: Any, **options: Any) -> int:
    """Run `frontend_cls` as a client of the deck server `name`: its exit code (1 when it went away)."""
    from deck.remote.serverdir import ServerError
    from deck.remote.socket_client import SocketClient, run_attached

    setup_logging()
    try:
        return int(run_async(run_attached(SocketClient(name), frontend_cls, **options)))
    except ServerError as exc:
        fail(str(exc), ExitCode.ERROR)


@app.command(cls=Command)
def serve(
    config: Optional[Path] = ConfigOption,
    name: str = typer.Option("default", "--name", "-n", metavar="NAME", help="The server's name (its socket's)."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background; return once it listens."),
    plugin: list[str] = typer.Option([], "--plugin", "-p", metavar="no:NAME", help="Disable plugin NAME (repeatable)."),
    ready_fd: Optional[int] = typer.Option(None, "--ready-fd", hidden=True),
) -> None:
    """Run the agents with no frontend, for `deck attach` clients.

    Listens on the Unix socket $XDG_RUNTIME_DIR/deck/NAME.sock (else
    /tmp/deck-UID/NAME.sock) until `deck stop`, SIGTERM, SIGINT or SIGHUP.
    """
    from deck.remote.server import ServerError, ServerFrontend, check_name, listen

    try:
        check_name(name)
    except ServerError as exc:
        fail(str(exc))
    if detach:
        raise typer.Exit(_serve_detached(config, name, plugin))
    deck = make_deck(config, _disabled(plugin), warn=True)
    _log_server()
    try:
        listening = listen(name, str(deck.config_path.absolute()) if deck.config_path else "<built-in>")
    except ServerError as exc:
        fail(str(exc), ExitCode.ERROR)
    try:
        code = run_async(deck.run(ServerFrontend, listening=listening, ready_fd=ready_fd))
    finally:
        listening.release()
    raise typer.Exit(code or ExitCode.OK)


def _log_server() -> None:
    """The server's own news (clients coming and going) as lines on stderr, besides its problems."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s deck: %(message)s", "%Y-%m-%d %H:%M:%S"))
    handler.addFilter(lambda record: record.levelno < logging.WARNING)  # problems: the terminal log's lines
    logging.getLogger("deck.remote.server").addHandler(handler)


def _serve_detached(config: Optional[Path], name: str, plugin: list[str]) -> int:
    """`deck serve` again in the background, in a session of its own: return once its socket accepts,
    or print what it said and fail."""
    import os
    import subprocess

    from deck.proc.storage import state_dir
    from deck.remote.serverdir import socket_path

    log_path = state_dir() / f"serve-{name}.log"
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "ab")
    except OSError as exc:
        fail(f"cannot write {log_path}: {exc.strerror or exc}", ExitCode.ERROR)
    read_end, write_end = os.pipe()
    # -P: the current folder stays off the import path, so a `deck` folder there is not taken for deck.
    args = [sys.executable, "-P", "-m", "deck", "serve", "--name", name, "--ready-fd", str(write_end)]
    if config is not None:
        args += ["--config", str(config)]
    for value in plugin:
        args += ["--plugin", value]
    with log_file:
        start = log_file.tell()
        server = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=True, pass_fds=(write_end,)
        )
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as ready:
            said = ready.read(6)  # "ready\n" once it listens; nothing if it ended first
    except KeyboardInterrupt:  # interrupted: nothing is left behind
        _end_server(server)
        typer.echo(f"deck: interrupted: the deck server {name} was stopped before it started", err=True)
        return ExitCode.INTERRUPTED
    if said == b"ready\n":
        typer.echo(f"deck server {name} running (pid {server.pid}) on {socket_path(name)}; log: {log_path}")
        return ExitCode.OK
    code = server.wait()
    try:
        with open(log_path, "rb") as f:
            f.seek(start)
            text = f.read(64 * 1024).decode(errors="replace")
    except OSError:
        text = ""
    for line in text.strip().splitlines()[-20:]:
        typer.echo(line, err=True)
    return code or ExitCode.ERROR


def _end_server(server: Any) -> None:
    """Stop a server process started in the background, and what it started, and wait for it."""
    import os
    import signal
    import subprocess

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not leave it half stopped
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(server.pid, sig)  # its session's group: the server and its agents' parents
        except ProcessLookupError:
            pass
        try:
            server.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@app.command(cls=Command)
def attach(
    name: str = NameArgument,
    frontend: Optional[str] = typer.Option(None, "--frontend", "-f", metavar="NAME", autocompletion=_complete_frontends, help="urwid, line or jsonl (else urwid on a terminal, line otherwise)."),
    plugin: list[str] = typer.Option([], "--plugin", "-p", metavar="no:NAME", help="Disable plugin NAME (repeatable)."),
) -> None:
    """Attach a frontend to a running deck server.

    Leaving detaches: the server, its agents and their turns go on.
    """
    chosen = frontend or ("urwid" if sys.stdin.isatty() and sys.stdout.isatty() else "line")
    disabled = _disabled(plugin)
    if chosen == "jsonl" and chosen not in disabled:
        from deck.remote.relay import relay

        raise typer.Exit(relay(name))  # the server's wire is the jsonl bridge's: its bytes, relayed
    frontend_cls = _builtin_frontend(chosen, disabled)
    if frontend_cls is None:
        from deck.runtime.hooks import PluginHooks
        from deck.runtime.plugins import make_manager

        available = PluginHooks(make_manager(list(disabled)), report_plugin_failure).register_frontends()
        if chosen not in available:
            fail(f"unknown frontend {chosen!r} (available: {', '.join(sorted(available)) or 'none'})")
        frontend_cls = available[chosen]
    raise typer.Exit(_attached(name, frontend_cls) or ExitCode.OK)


#: The frontends deck ships, each registered by a module of its own.
BUILTIN_FRONTENDS = {"jsonl": "deck.frontends.jsonl", "line": "deck.frontends.line", "urwid": "deck.frontends.urwid"}


def _builtin_frontend(name: str, disabled: tuple[str, ...]) -> Any:
    """The class of the built-in frontend `name`, from its module's own registration, with no
    other plugin imported: a client has no use for them, and `deck attach` starts in the time of
    its frontend's imports alone. None for any other name (or a disabled one): the plugins say."""
    import importlib

    module_name = BUILTIN_FRONTENDS.get(name)
    if module_name is None or name in disabled:
        return None
    return importlib.import_module(module_name).deck_register_frontends().get(name)


@app.command(cls=Command)
def stop(name: str = NameArgument) -> None:
    """Stop a running deck server and its agents.

    Its clients are detached; returns once every agent has stopped.
    """
    from deck.remote.server import ServerError, registration, wait_free
    from deck.remote.socket_client import SocketClient

    async def shutdown() -> None:
        client = SocketClient(name)
        await client.connect()
        try:
            await client.call("DeckService.Shutdown")
            assert client.ended is not None
            await client.ended  # the server closes its clients once its agents are stopped
        finally:
            await client.close()

    known = registration(name)
    try:
        run_async(shutdown())
    except ServerError as exc:
        fail(str(exc), ExitCode.ERROR)
    wait_free(name, STOP_WAIT_SECONDS)  # its name free again: a `deck serve` of it may follow at once
    typer.echo(f"deck server {name} stopped" + (f" (pid {known.pid})" if known else ""))


#: How long `deck stop` waits for the server's process to end once its agents are stopped.
STOP_WAIT_SECONDS = 10.0


@app.command("ls", cls=Command)
def list_servers(as_json: bool = typer.Option(False, "--json", help="JSON output.")) -> None:
    """List the running deck servers.

    Name, pid, config, agents running and busy, clients attached, since when.
    """
    from deck.remote.serverdir import ServerError
    from deck.remote.socket_client import describe_servers

    try:
        rows = run_async(describe_servers())
    except ServerError as exc:
        fail(str(exc), ExitCode.ERROR)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no deck server is running (start one with `deck serve`)")
        return
    typer.echo(f"{'NAME':<16} {'PID':>7} {'AGENTS':>6} {'RUNNING':>7} {'BUSY':>4} {'CLIENTS':>7}  {'SINCE':<20}  CONFIG")
    for row in rows:
        agents, running, busy, clients = ("?" if row[k] is None else str(row[k]) for k in ("agents", "running", "busy", "clients"))
        typer.echo(
            f"{row['name']:<16} {row['pid']:>7} {agents:>6} {running:>7} {busy:>4} {clients:>7}  {row['since']:<20}  {row['config']}"
        )


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
        from deck.cli.check import run_check

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
    from deck.runtime.plugins import describe

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
    from deck.config.models import find_config

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
    from deck.config.template import starter_config, write_new

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
    where, loaded, _sections = _load_config(path, frontends=True)
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
    from deck.config.models import json_schema

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
    from deck.config.models import effective, to_toml

    where, loaded, _sections = _load_config(config)
    if loaded.config is None:
        for problem in loaded.problems:
            typer.echo(problem.format(where), err=True)
        raise typer.Exit(ExitCode.ERROR)
    data = _as_shown(effective(loaded.config, loaded.sections))
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False) if as_json else to_toml(data), nl=as_json)


def _as_shown(data: dict[str, Any]) -> dict[str, Any]:
    """The effective config with each agent's title and icon as deck shows them (`Agent.title`,
    `Agent.icon`): one left unset is the agent's name, and its first letter, not ""."""
    for name, agent in (data.get("agents") or {}).items():
        agent["title"] = agent.get("title") or name
        agent["icon"] = agent.get("icon") or name[:1].upper()
    return data


def _load_config(path: Optional[Path], frontends: bool = False) -> tuple[str, Any, dict[str, Any]]:
    """(where, Loaded, plugin sections) for `path`, else the config in use, else the built-in one;
    with `frontends`, a `frontend` that none of the enabled plugins registers is warned of."""
    from deck.config.models import disabled_plugins, embedded_default, find_config, parse, read_text

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
    from deck.runtime.hooks import PluginHooks
    from deck.runtime.plugins import make_manager

    hooks = PluginHooks(make_manager(disabled_plugins(text)), report_plugin_failure)
    sections = hooks.config_sections()
    return where, parse(text, sections, set(hooks.register_frontends()) if frontends else None), sections


def report_plugin_failure(plugin: str, hook: str, exc: BaseException) -> None:
    """A plugin failed while the command line called it: one line on stderr, and the command goes on."""
    typer.echo(f"deck: plugin {plugin} failed in {hook}: {exc!r}", err=True)


def main() -> None:
    args = sys.argv[1:]
    # Built-in commands and --version need no plugin: keep them fast.
    if (args[0] if args else "") not in BUILTIN_COMMANDS | {"--version"}:
        register_plugin_commands(app, args)
    app()


inbox.register(app, Command)  # deck inbox, deck answer
usage.register(app, Command)

BUILTIN_COMMANDS = frozenset(
    {"run", "send", "agents", "plugins", "config", "serve", "attach", "stop", "ls", "inbox", "answer", "usage"}
)


def register_plugin_commands(target: typer.Typer, args: list[str]) -> None:
    """Let each enabled plugin add its commands to `target`, through the hooks facade: one that
    fails is reported in one line, and the others still add theirs."""
    from deck.runtime.hooks import PluginHooks
    from deck.runtime.plugins import make_manager

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
    from deck.config.models import disabled_plugins, find_config, read_text

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
