"""`deck run` and `deck send`: a deck in this process with a frontend, or one prompt."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from deck.cli.common import (
    PluginOption,
    ApproveOption,
    Command,
    ConfigOption,
    approvals_of,
    attached,
    complete_agents,
    complete_frontends,
    config_file,
    disabled_option,
    echo,
    fail,
    frontends,
    make_deck,
    need_terminal,
    no_agent,
    report_plugin_failure,
    run_async,
    say_warnings,
)
from deck.errors import ExitCode


def run(
    config: Optional[Path] = ConfigOption,
    frontend: Optional[str] = typer.Option(None, "--frontend", "-f", metavar="NAME", autocompletion=complete_frontends, help="urwid, line or jsonl (else the config's)."),
    stay: bool = typer.Option(False, "--stay", help="jsonl: keep running after the end of stdin, until a signal."),
    plugin: list[str] = PluginOption,
    trace: Optional[Path] = typer.Option(None, "--trace", metavar="FILE", help="Write every ACP line exchanged to this JSONL file."),
    approve: list[str] = ApproveOption,
    new: bool = typer.Option(False, "--new", help="Run apart even when a deck server (deck serve) runs this config."),
) -> None:
    """Start deck with a frontend.

    With no config file anywhere, deck runs the built-in demo agent. When a deck server runs the
    same config, `deck run` attaches to it instead (--new runs a deck of its own all the same).
    """
    disabled = disabled_option(plugin)
    if frontend is not None:
        _check_frontend(frontend, disabled, config)
        need_terminal(frontend)
    approvals = approvals_of(approve)
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
        fail(unknown_frontend(name, available, given))
    need_terminal(name)
    if name not in ("line", "urwid"):  # those two show the config's warnings where they show the rest
        say_warnings(deck)
    if (empty := no_agent(deck)) is not None:  # deck runs all the same: it takes agents added to the file
        echo(f"deck: {empty}", err=True)
    options: dict[str, Any] = {"stay": stay} if name == "jsonl" else {}
    code = run_async(deck.run(available[name], **options))
    raise typer.Exit(code or ExitCode.OK)


def _check_frontend(name: str, disabled: tuple[str, ...], config: Optional[Path]) -> None:
    """The frontend `--frontend` names must be one deck has, with the plugins the command line and
    the config leave on: else a usage error naming what it is likely a typo of, before anything
    runs (a deck, or an attach to the config's server)."""
    from deck.cli.server import BUILTIN_FRONTENDS
    from deck.config.check import disabled_plugins
    from deck.config.files import find_config, read_text

    off = set(disabled)
    try:
        path, _source = find_config(str(config) if config else None)
        if path is not None and path.is_file():  # a regular file only: a pipe is read once, by the deck
            off.update(disabled_plugins(read_text(path)))
    except (OSError, UnicodeDecodeError):
        pass  # the deck says what is wrong with the file
    if name in BUILTIN_FRONTENDS and name not in off:
        return
    from deck.runtime.hooks import PluginHooks
    from deck.runtime.plugins import make_manager

    available = PluginHooks(make_manager(sorted(off)), report_plugin_failure).register_frontends()
    if name not in available:
        fail(unknown_frontend(name, available))


def unknown_frontend(name: str, available: Any, where: str = "") -> str:
    """`unknown frontend 'urwd': did you mean urwid? (available: jsonl, line, urwid)`."""
    from deck.config.check import closest

    close = closest(name, list(available))
    hint = f": did you mean {close}?" if close else ""
    return f"unknown frontend {name!r}{where}{hint} (available: {', '.join(sorted(available)) or 'none'})"


def send(
    agent: str = typer.Argument(..., metavar="AGENT", autocompletion=complete_agents, help="The agent to ask."),
    text: Optional[str] = typer.Argument(None, metavar="TEXT", help="The prompt; `-`, or none with stdin not a terminal: stdin."),
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="Every event as a JSON line on stdout instead of the answer."),
    approve: list[str] = ApproveOption,
    attach: Optional[str] = typer.Option(None, "--attach", metavar="NAME", help="Send through the running deck server NAME (deck serve)."),
    keep: bool = typer.Option(False, "--continue", help="Continue the agent's latest conversation (with --attach: the default)."),
    conversation: Optional[str] = typer.Option(None, "--conversation", metavar="ID", help="Continue the stored conversation ID (or a unique start of it)."),
    new: bool = typer.Option(False, "--new", help="Run a deck of its own even when a deck server (deck serve) runs this config."),
    plugin: list[str] = PluginOption,
) -> None:
    """Send one prompt and stream the answer to stdout.

    The prompt goes to a conversation of its own, unless --continue or --conversation
    (through a server, --attach, to the agent's current one). When a deck server runs the
    same config, the prompt goes through it (as --attach), never to a second copy of its
    agent; --new runs a deck of its own all the same. A permission request is
    approved by --approve or the agent's `permissions` policy, else refused; a question
    is declined. Ctrl-C cancels the turn.

    Exit code: 0 end_turn, 3 max_tokens, 4 max_turn_requests, 5 refusal (the agent's, or
    deck's: a budget reached), 6 cancelled, 1 when the agent failed, 2 for a usage error,
    130 interrupted.
    """
    from deck.frontends.send import SendFrontend

    if keep and conversation is not None:
        fail("--continue and --conversation: give one of them")
    disabled = disabled_option(plugin)
    if attach is not None and (approve or config is not None or disabled):
        fail("--attach sends through a server, which follows its own config: no --config, --approve or -p with it")
    if attach is None and not new:
        attach = _server_instead(config, approve, disabled)
    options: dict[str, Any] = {"agent": agent, "text": _prompt(text), "as_json": as_json, "conversation": conversation}
    if attach is not None:
        code = attached(attach, SendFrontend, keep=True, attached=True, **options)  # the conversation its console shows
        raise typer.Exit(code or ExitCode.OK)
    approvals = approvals_of(approve)
    deck = make_deck(config, disabled, warn=True)
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


def _server_instead(config: Optional[Path], approve: list[str], disabled: tuple[str, ...] = ()) -> Optional[str]:
    """`deck send` of a config a deck server runs: the server's name, said on stderr (its agents are
    running there, in their folders: a second copy would work on the same files); refused with
    --approve or -p, which only a deck of its own honours. None when no server runs the config."""
    from deck.remote.socket_client import server_of

    path, _source = config_file(config)
    name = server_of(path) if path is not None and path.is_file() else None
    if name is None:
        return None
    if approve or disabled:
        option = "--approve" if approve else "-p"
        fail(f"the deck server {name} runs {path} already, with its own approvals and plugins: send without {option}"
             f" (`deck send --attach {name}`), or `deck send --new` to run a deck of its own beside it")  # fmt: skip
    echo(f"deck: the deck server {name} runs {path}: sending through it (deck send --new runs apart)", err=True)
    return name


def _attach_instead(config: Optional[Path], frontend: Optional[str], stay: bool, changed: bool) -> None:
    """`deck run` of a config a deck server runs already: attach to it (saying so) rather than start
    second copies of its agents in the same folders; refused when an option asks for what only a
    deck of its own can do. Returns when no server runs the config."""
    from deck.remote.socket_client import server_of

    path, _source = config_file(config)
    if path is None or not path.is_file():
        return
    name = server_of(path)
    if name is None:
        return
    if changed or stay:
        fail(f"the deck server {name} runs {path} already: `deck attach {name}` to use it, or"
             " `deck run --new` to run a deck of its own beside it (second copies of its agents)")  # fmt: skip
    echo(f"deck: the deck server {name} runs {path}: attaching to it (deck run --new runs apart)", err=True)
    if frontend is None:
        from deck.config.check import load_file

        _text, loaded = load_file(path)
        frontend = loaded.config.frontend if loaded.config is not None else None
    from deck.cli.server import attach

    attach(name=name, frontend=frontend, plugin=[])


def register(app: typer.Typer) -> None:
    app.command(cls=Command)(run)
    app.command(cls=Command)(send)
