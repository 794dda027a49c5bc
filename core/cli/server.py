"""`deck serve`, `deck attach`, `deck stop` and `deck ls`: a deck server and its clients."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from deck.cli.common import (
    PluginOption,
    Command,
    ConfigOption,
    attached,
    complete_frontends,
    disabled_option,
    echo,
    echo_json,
    fail,
    make_deck,
    need_terminal,
    report_plugin_failure,
    run_async,
)
from deck.errors import ExitCode

NameArgument = typer.Argument("default", metavar="NAME", help="The server's name.")


def serve(
    config: Optional[Path] = ConfigOption,
    name: str = typer.Option("default", "--name", "-n", metavar="NAME", help="The server's name (its socket's)."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background; return once it listens."),
    plugin: list[str] = PluginOption,
    web: Optional[str] = typer.Option(
        None, "--web", metavar="[HOST:]PORT", help="Also serve the web page and its WebSocket (host 127.0.0.1 unless given)."
    ),
    web_allow_remote: bool = typer.Option(False, "--web-allow-remote", help="Allow --web on an address beyond loopback."),
    ready_fd: Optional[int] = typer.Option(None, "--ready-fd", hidden=True),
) -> None:
    """Run the agents with no frontend, for `deck attach` clients.

    Listens on the Unix socket $XDG_RUNTIME_DIR/deck/NAME.sock (else
    /tmp/deck-UID/NAME.sock) until `deck stop`, SIGTERM, SIGINT or SIGHUP.
    With --web, serves the web page too: `deck web NAME` prints its address.
    """
    from deck.remote.server import ServerError, ServerFrontend, check_name, listen

    try:
        check_name(name)
        page = _bind_web(web, web_allow_remote) if web is not None else None
    except ServerError as exc:
        fail(str(exc))
    if detach:
        if page is not None:
            page.sock.close()
        raise typer.Exit(_serve_detached(config, name, plugin, web, web_allow_remote))
    deck = make_deck(config, disabled_option(plugin), warn=True)
    _log_server()
    try:
        config_name = str(deck.config_path.absolute()) if deck.config_path else "<built-in>"
        listening = listen(name, config_name, web=page.url if page else "")
    except ServerError as exc:
        fail(str(exc), ExitCode.ERROR)
    try:
        served = None
        if page is not None:
            from deck.remote.web import make_token

            served = (page, make_token(listening.directory, name))
        code = run_async(deck.run(ServerFrontend, listening=listening, ready_fd=ready_fd, web=served))
    finally:
        listening.release()
    raise typer.Exit(code or ExitCode.OK)


def _bind_web(address: str, allow_remote: bool) -> Any:
    """The page's socket, listening (aiohttp is imported only here, for a server that serves it)."""
    from deck.remote.web import bind

    return bind(address, allow_remote=allow_remote)


def _log_server() -> None:
    """The server's own news (clients coming and going) as lines on stderr, besides its problems."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s deck: %(message)s", "%Y-%m-%d %H:%M:%S"))
    handler.addFilter(lambda record: record.levelno < logging.WARNING)  # problems: the terminal log's lines
    logging.getLogger("deck.remote.server").addHandler(handler)


def _serve_detached(config: Optional[Path], name: str, plugin: list[str], web: Optional[str], web_allow_remote: bool) -> int:
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
    if web is not None:
        args += ["--web", web] + (["--web-allow-remote"] if web_allow_remote else [])
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
        echo(f"deck: interrupted: the deck server {name} was stopped before it started", err=True)
        return ExitCode.INTERRUPTED
    if said == b"ready\n":
        echo(f"deck server {name} running (pid {server.pid}) on {socket_path(name)}; log: {log_path}")
        return ExitCode.OK
    code = server.wait()
    try:
        with open(log_path, "rb") as f:
            f.seek(start)
            text = f.read(64 * 1024).decode(errors="replace")
    except OSError:
        text = ""
    for line in text.strip().splitlines()[-20:]:
        echo(line, err=True)
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


def attach(
    name: str = NameArgument,
    frontend: Optional[str] = typer.Option(None, "--frontend", "-f", metavar="NAME", autocompletion=complete_frontends, help="urwid, line or jsonl (else urwid on a terminal, line otherwise)."),
    plugin: list[str] = PluginOption,
) -> None:
    """Attach a frontend to a running deck server.

    Leaving detaches: the server, its agents and their turns go on.
    """
    chosen = frontend or ("urwid" if sys.stdin.isatty() and sys.stdout.isatty() else "line")
    disabled = disabled_option(plugin)
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
    need_terminal(chosen)
    raise typer.Exit(attached(name, frontend_cls) or ExitCode.OK)


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
    echo(f"deck server {name} stopped" + (f" (pid {known.pid})" if known else ""))


#: How long `deck stop` waits for the server's process to end once its agents are stopped.
STOP_WAIT_SECONDS = 10.0


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
        echo_json(rows)
        return
    if not rows:
        echo("no deck server is running (start one with `deck serve`)")
        return
    echo(f"{'NAME':<16} {'PID':>7} {'AGENTS':>6} {'RUNNING':>7} {'BUSY':>4} {'CLIENTS':>7}  {'SINCE':<24}  CONFIG")
    for row in rows:
        agents, running, busy, clients = ("?" if row[k] is None else str(row[k]) for k in ("agents", "running", "busy", "clients"))
        web = f"  (web page: {row['web']})" if row.get("web") else ""  # its token: `deck web NAME`
        echo(
            f"{row['name']:<16} {row['pid']:>7} {agents:>6} {running:>7} {busy:>4} {clients:>7}  {row['since']:<24}  {row['config']}{web}"
        )


def web_page(
    name: str = NameArgument,
    open_it: bool = typer.Option(False, "--open", help="Open it in the browser too."),
) -> None:
    """Print the address of a server's web page, its token included.

    The token is in the address's fragment (after #), which the browser never
    sends to any server; whoever has the address can drive the agents. --open
    hands the browser a file of the servers' folder (0600) that leads to it:
    the token is on no command line, where other users could read it.
    """
    from deck.remote.server import ServerError, check_name, registration
    from deck.remote.serverdir import open_dir, read_token, socket_dir

    try:
        check_name(name)
        known = registration(name)
        if known is None:
            raise ServerError(f"no deck server named {name} is running (start one with `deck serve --web PORT`)")
        if not known.web:
            raise ServerError(f"the deck server {name} serves no web page: start it with `deck serve --name {name} --web PORT`")
        directory = open_dir(create=False)
        try:
            token = read_token(directory, name)
            if token is None:
                raise ServerError(f"the deck server {name} has no token file: is it still starting?")
            url = f"{known.web}#token={token}"
            opener = _opener(directory, name, url) if open_it else ""
        finally:
            os.close(directory)
    except ServerError as exc:
        fail(str(exc), ExitCode.ERROR)
    echo(url)
    if open_it:
        import webbrowser

        if not webbrowser.open((socket_dir() / opener).as_uri()):
            fail("no browser to open here: open the address above in one", ExitCode.ERROR)


def _opener(directory: int, name: str, url: str) -> str:
    """The page that leads the browser to `url`, written in the servers' folder (open as `directory`)."""
    from deck.remote.serverdir import ServerError
    from deck.remote.web import write_opener  # aiohttp: only to open the page

    try:
        return write_opener(directory, name, url)
    except OSError as exc:
        raise ServerError(f"cannot write the page that opens the address: {exc.strerror or exc}") from None


def register(app: typer.Typer) -> None:
    app.command(cls=Command)(serve)
    app.command("web", cls=Command)(web_page)
    app.command(cls=Command)(attach)
    app.command(cls=Command)(stop)
    app.command("ls", cls=Command)(list_servers)
