"""Frontends attached to a deck server: leaving detaches (the server and its turns go on), stopping
the server is asked for, and the console counts the clients attached.

First against a deck in this process reached through a client that says it is attached (the
frontends' side alone), then end to end: `deck serve`, `deck attach` in tmux and through pipes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from deck.events import ClientsChanged
from deck.frontends import line as line_frontend
from deck.frontends.urwid.app import ConsoleApp
from deck.frontends.urwid.common import canvas_text
from deck.runtime.local import LocalClient

from tests.conftest import agent_block
from tests.deck_process import DECK
from tests.frontends.test_line import LineDeck
from tests.frontends.urwid.test_urwid_e2e import TMUX, Console, gone

SIZE = (120, 40)


class AttachedClient(LocalClient):
    """A deck in this process reached as a server's client would reach it: `attached`, leaving only
    detaches, and the server's own services (`DeckService.Clients`, `DeckService.Shutdown`) answered
    here. Anything that would end the deck's turns (end of input, stopping every agent) is an error."""

    attached = True

    def __init__(self, deck: Any, clients: int = 2) -> None:
        super().__init__(deck)
        self.clients = clients
        self.shutdowns = 0

    def call(self, method: str, params: Any = None) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if method == "DeckService.Clients":
            future.set_result([{"id": str(n), "pid": os.getpid(), "since": ""} for n in range(self.clients)])
        elif method == "DeckService.Shutdown":
            self.shutdowns += 1
            future.set_result(None)
        else:
            return super().call(method, params)
        return future

    async def end_of_input(self, *, drain: bool = True) -> None:
        raise AssertionError("an attached frontend ended the server's input")

    async def close(self) -> None:
        """Detached: the deck goes on."""


async def attached_console(deck, clients: int = 2, language: str = "en") -> tuple[ConsoleApp, AttachedClient]:
    client = AttachedClient(deck, clients)
    app = ConsoleApp(client, {**await client.call("ConfigService.Current"), "language": language})
    loop = asyncio.get_running_loop()
    app._done = loop.create_future()
    await app.attach(loop)
    return app, client


# -- the console -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_ctrl_q_on_an_attached_console_detaches_by_default_and_the_turn_goes_on(make_deck):
    deck, rec = make_deck(agent_block("a"))
    app, client = await attached_console(deck)
    try:
        deck.chat.send("a", "slow")
        await rec.wait_event("turn:changed", agent="a", busy=True)
        app.root.keypress(SIZE, "ctrl q")
        screen = canvas_text(app.root, *SIZE)
        assert "Leave deck?" in screen and "d  detach · the server goes on" in screen
        assert "s  stop the server and its agents" in screen and "1 agent at work: a" in screen
        app.root.keypress(SIZE, "esc")  # stay
        assert app.dialog_kind == "" and not app._done.done()
        app.root.keypress(SIZE, "ctrl q")
        app.root.keypress(SIZE, "enter")  # the default: detach
        assert await asyncio.wait_for(app._done, 5) == 0
        assert client.shutdowns == 0 and deck.agent("a").state.value == "busy"
        deltas = len(rec.named("message:delta", "a"))
        await rec.wait(lambda r: len(r.named("message:delta", "a")) > deltas)  # the answer goes on
    finally:
        app.detach()
        deck.chat.cancel("a")


@pytest.mark.anyio
async def test_stop_the_server_from_an_attached_console(make_deck):
    deck, _rec = make_deck(agent_block("a"))
    app, client = await attached_console(deck)
    try:
        app.root.keypress(SIZE, "ctrl q")  # asked even with no agent at work
        assert "Leave deck?" in canvas_text(app.root, *SIZE) and "at work" not in canvas_text(app.root, *SIZE)
        app.root.keypress(SIZE, "s")
        assert await asyncio.wait_for(app._done, 5) == 0
        assert client.shutdowns == 1
    finally:
        app.detach()


@pytest.mark.anyio
async def test_ctrl_q_on_a_deck_of_its_own_still_quits_at_once_when_idle(make_deck):
    deck, _rec = make_deck(agent_block("a"))
    client = LocalClient(deck)
    app = ConsoleApp(client, await client.call("ConfigService.Current"))
    app._done = asyncio.get_running_loop().create_future()
    await app.attach(asyncio.get_running_loop())
    try:
        app.root.keypress(SIZE, "ctrl q")
        assert app._done.done() and "Leave deck?" not in canvas_text(app.root, *SIZE)
    finally:
        app.detach()


@pytest.mark.anyio
async def test_an_attached_console_picks_a_config_itself_and_the_server_opens_it(make_deck, tmp_path):
    """A server has no screen for a file picker (ConfigService.Choose refuses there): the attached
    console shows its own, and the server opens the file chosen."""
    deck, rec = make_deck(agent_block("a"))
    other = tmp_path / "other" / "deck.toml"
    other.parent.mkdir()
    other.write_text(agent_block("b"))
    app, _client = await attached_console(deck)
    try:
        app.choose_config()
        await rec.wait(lambda r: app.dialog_kind == "picker")
        app.shown_dialog.chdir(other.parent)
        app.shown_dialog.on_done(str(other))
        await rec.wait_event("config:changed")
        assert str(deck.config_path) == str(other) and [a.name for a in deck.agents.values()] == ["b"]
        assert app.dialog_kind == ""
    finally:
        app.detach()


@pytest.mark.anyio
async def test_the_status_bar_counts_the_clients_attached(make_deck):
    deck, _rec = make_deck(agent_block("a"))
    app, _client = await attached_console(deck, clients=2)
    try:
        app.refresh()
        assert canvas_text(app.root, *SIZE).splitlines()[-2].strip() == "2 clients"  # asked for as it attached
        deck.emit(ClientsChanged(3))  # another client came
        app.refresh()
        assert canvas_text(app.root, *SIZE).splitlines()[-2].strip() == "3 clients"
        deck.emit(ClientsChanged(1))
        app.refresh()
        assert canvas_text(app.root, *SIZE).splitlines()[-2].strip() == "1 client"
    finally:
        app.detach()
    app, _client = await attached_console(deck, clients=2, language="fr")
    try:
        app.refresh()
        assert "2 clients" in canvas_text(app.root, *SIZE)
        app.root.keypress(SIZE, "ctrl q")
        screen = canvas_text(app.root, *SIZE)
        assert "Quitter deck ?" in screen and "d  se détacher · le serveur continue" in screen
    finally:
        app.detach()
    client = LocalClient(deck)  # a deck of its own: no count
    app = ConsoleApp(client, await client.call("ConfigService.Current"))
    await app.attach(asyncio.get_running_loop())
    try:
        deck.emit(ClientsChanged(2))
        app.refresh()
        assert "client" not in canvas_text(app.root, *SIZE)
    finally:
        app.detach()


# -- end to end: `deck serve`, `deck attach` -----------------------------------------------------

class Server:
    """`deck serve --name NAME` of `config`, once it listens; its sockets in a folder of the test's own."""

    def __init__(self, tmp_path: Path, config: Path, name: str = "t") -> None:
        self.name = name
        self.runtime = tempfile.mkdtemp(prefix="dk-")  # short: a socket path has at most 107 bytes
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "DECK_CONFIG")},
            "XDG_RUNTIME_DIR": self.runtime,
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
            "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        }
        ready, ready_w = os.pipe()
        self.log = open(tmp_path / f"serve-{name}.log", "wb")
        self.proc = subprocess.Popen(
            [*DECK, "serve", "--config", str(config), "--name", name, "--ready-fd", str(ready_w)],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=self.env, pass_fds=(ready_w,),
        )  # fmt: skip
        os.close(ready_w)
        with os.fdopen(ready, "rb") as f:
            assert f.read(6) == b"ready\n", (tmp_path / f"serve-{name}.log").read_text()

    def deck(self, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        """`deck ARGS` beside the server, to its end."""
        return subprocess.run([*DECK, *args], input=stdin, capture_output=True, env=self.env, timeout=20)

    def ls(self) -> dict[str, Any]:
        """What `deck ls --json` says of this server."""
        listed = json.loads(self.deck("ls", "--json").stdout)
        return next(s for s in listed if s["name"] == self.name)

    def wait_ls(self, **expected: int) -> dict[str, Any]:
        deadline = time.monotonic() + 15
        while (listed := self.ls()) and any(listed[k] != v for k, v in expected.items()):
            assert time.monotonic() < deadline, (listed, expected)
            time.sleep(0.1)
        return listed

    def agent_pids(self) -> set[int]:
        try:
            return {p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            return set()

    def close(self) -> None:
        pids = self.agent_pids()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in pids:  # never leave a stray agent behind a failed test
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        self.log.close()
        shutil.rmtree(self.runtime, ignore_errors=True)


class AttachedLines(LineDeck):
    """`deck attach NAME --frontend=line` with stdin and stdout as pipes; output read line by line."""

    def __init__(self, server: Server) -> None:
        self.spawn([*DECK, "attach", server.name, "--frontend=line"], server.env)


class AttachedConsole(Console):
    """`deck attach NAME --frontend=urwid` in a detached tmux session."""

    def __init__(self, server: Server, cols: int = 120, rows: int = 40) -> None:
        self.socket = f"deck-test-{uuid.uuid4().hex[:8]}"
        keys = ("XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "PYTHONPATH")
        env = {**{k: server.env.get(k, "") for k in keys}, "TERM": "xterm-256color"}
        exported = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        deck = shlex.join([*DECK, "attach", server.name, "--frontend=urwid"])
        command = f"env {exported} {deck}; echo DECK-EXITED-$?; sleep 60"
        self.tmux("new-session", "-d", "-x", str(cols), "-y", str(rows), command)
        self.shell = psutil.Process(int(self.tmux("list-panes", "-F", "#{pane_pid}").strip()))
        self.deck = self._find_deck()


class Servers:
    """`servers(toml)` → a running Server of that config; `servers.console(server)` → a console
    attached to it. Whatever is still running after the test is ended, agents included."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.made: list[Server] = []
        self.consoles: list[AttachedConsole] = []

    def __call__(self, config_text: str) -> Server:
        path = self.tmp_path / "deck.toml"
        path.write_text(config_text)
        self.made.append(Server(self.tmp_path, path))
        return self.made[-1]

    def console(self, server: Server) -> AttachedConsole:
        self.consoles.append(AttachedConsole(server))
        return self.consoles[-1]

    def close(self) -> None:
        for console in self.consoles:
            console.close()
        for server in self.made:
            server.close()


@pytest.fixture
def server(tmp_path: Path):
    servers = Servers(tmp_path)
    yield servers
    servers.close()


@pytest.mark.skipif(not Path(TMUX).exists(), reason="tmux is not installed")
def test_an_attached_console_detaches_the_server_goes_on_then_it_stops_the_server(server):
    s = server(agent_block("a", title="Alpha"))
    c = server.console(s)
    c.wait(lambda screen: "Message to Alpha" in screen and "1 client" in screen)  # the count comes once it held
    c.type("sleep 1.5")
    c.keys("Enter")
    c.wait(lambda screen: "busy" in screen.split("\n")[2])
    agents = s.agent_pids()
    assert agents
    c.keys("C-q")
    screen = c.wait("Leave deck?")
    assert "1 agent at work: Alpha" in screen and "d  detach" in screen and "s  stop the server" in screen
    c.keys("Enter")  # detach, the default
    c.wait("DECK-EXITED-0")
    listed = s.ls()
    assert s.proc.poll() is None and listed["clients"] == 0 and listed["running"] == 1
    assert all(psutil.pid_exists(pid) for pid in agents)  # the turn goes on without anyone attached
    s.wait_ls(busy=0)  # and ends
    # Attached again: what happened meanwhile is there; a line client coming and going is counted.
    c = server.console(s)
    c.wait("slept")
    line = AttachedLines(s)
    line.expect(r"\[deck\] attached to t: 2 clients; /quit detaches, /shutdown stops the server")
    c.wait("2 clients")
    assert line.close(15) == 0
    c.wait(lambda screen: "1 client" in [row.strip() for row in screen.splitlines()])
    c.keys("C-q")
    c.wait("Leave deck?")
    c.keys("s")  # stop the server
    c.wait("DECK-EXITED-0")
    assert s.proc.wait(15) == 0
    assert gone(agents), "an agent outlived the server"
    assert not list(Path(s.runtime, "deck").glob("*.sock"))


def jsonl(server: Server, *requests: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """`deck attach --frontend=jsonl` sending `requests` then ending its stdin: every line it wrote."""
    lines = b"".join(
        json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}).encode() + b"\n"
        for n, (method, params) in enumerate(requests, 1)
    )
    done = server.deck("attach", server.name, "--frontend=jsonl", stdin=lines)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_line_client_detaches_at_end_of_stdin_and_leaves_its_request_to_the_others(server):
    s = server(agent_block("a"))
    line = AttachedLines(s)
    line.expect(r"\[deck\] attached to t: 1 client; .*")
    line.send("@a perm")
    line.expect(r"\[a\] permission\? Edit file.*")
    assert line.close(15) == 0  # end of stdin: detached at once, the request still waits
    assert s.proc.poll() is None and s.ls()["busy"] == 1
    (pending,) = next(m["result"] for m in jsonl(s, ("ChatService.Pending", {})) if m.get("id") == 1)
    # Another client answers it (a jsonl one, whose end of stdin detaches too): the turn ends.
    answered = jsonl(s, ("ChatService.AnswerPermission", {"id": pending["id"], "optionId": "yes"}))
    assert any(m.get("id") == 1 and "result" in m for m in answered)
    s.wait_ls(busy=0)


def test_a_line_client_detaches_on_sighup_and_shutdown_stops_the_server(server):
    s = server(agent_block("a"))
    line = AttachedLines(s)
    line.expect(r"\[deck\] attached to t: 1 client; .*")
    line.send("/help")
    line.expect(r"\[deck\] +attached to a server \(deck attach\), /quit only detaches: .*")
    line.expect(r"\[deck\] /shutdown +stop the server attached to and its agents, then leave \(else as /quit\)")
    line.send("@a slow")
    line.expect(r"\[a\] busy")
    agents = s.agent_pids()
    line.proc.send_signal(signal.SIGHUP)  # a closed terminal: detached, the turn goes on
    assert line.wait(15) == 128 + signal.SIGHUP
    assert s.proc.poll() is None and s.ls()["busy"] == 1 and s.ls()["clients"] == 0
    line = AttachedLines(s)
    line.expect(r"\[deck\] attached to t: 1 client; .*")
    line.send("/shutdown")
    assert line.wait(15) == 0
    assert s.proc.wait(15) == 0
    assert gone(agents), "an agent outlived the server"


@pytest.mark.skipif(not Path(TMUX).exists(), reason="tmux is not installed")
def test_an_attached_console_says_the_server_went_away_and_restores_the_terminal(server):
    s = server(agent_block("a", title="Alpha"))
    c = server.console(s)
    c.wait("Message to Alpha")
    s.proc.kill()  # no farewell: the connection is simply lost
    screen = c.wait("DECK-EXITED-1")
    assert "deck: the deck server t went away" in screen
    assert "Message to Alpha" not in screen  # the console's screen is gone, the shell's is back
    assert c.tmux("display-message", "-p", "#{alternate_on}").strip() == "0"


@pytest.mark.anyio
async def test_a_shutdown_answered_just_before_the_server_closes_ends_the_client_with_0(capsys):
    """A server with no agent to stop answers `DeckService.Shutdown` and closes at once: the client
    that asked must end as asked (0, quietly), not as one whose server went away."""
    from deck.remote.socket_client import SocketClient, run_attached

    folder = tempfile.mkdtemp(prefix="dk-")
    path = Path(folder, "s.sock")
    config = {"path": "", "theme": "dark", "language": "en", "valid": True, "problems": []}
    answers = {"DeckService.Snapshot": {"seq": 0, "agents": [], "conversations": {}, "pending": [], "config": config},
               "DeckService.Clients": [{"id": 1, "pid": os.getpid()}], "DeckService.Shutdown": None}  # fmt: skip

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            request = json.loads(line)
            writer.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": answers[request["method"]]}).encode() + b"\n")
            if request["method"] == "DeckService.Shutdown":
                writer.close()
                return

    server = await asyncio.start_unix_server(serve, str(path))
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    os.write(stdin_write, b"/shutdown\n")
    try:
        code = await asyncio.wait_for(
            run_attached(SocketClient("s", path), line_frontend.LineFrontend, stdin_fd=stdin_read, stdout_fd=stdout_write), 10
        )
        assert (code, capsys.readouterr().err) == (0, "")
    finally:
        server.close()
        for fd in (stdin_read, stdin_write, stdout_read, stdout_write):
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)


def _relayed(serve: Callable[[socket.socket], None], stdin: bytes) -> tuple[int, bytes]:
    """`deck.relay.relay` between `stdin` and a server that `serve` plays on a thread, for one connection:
    the relay's exit code and every byte it wrote to stdout."""
    from deck.remote.relay import relay

    folder = tempfile.mkdtemp(prefix="dk-")
    path = Path(folder, "s.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(1)

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            serve(conn)
            listener.close()  # a server that closes the connection goes: it listens no more

    server = threading.Thread(target=accept, daemon=True)
    server.start()
    stdin_read, stdin_write = os.pipe()
    out = tempfile.TemporaryFile()
    try:
        os.write(stdin_write, stdin)
        os.close(stdin_write)
        code = relay("s", path, stdin_read, out.fileno())
        server.join(10)
        out.seek(0)
        return code, out.read()
    finally:
        os.close(stdin_read)
        out.close()
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)


def _read_line(conn: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n") and (chunk := conn.recv(1)):
        line += chunk
    return line


EVENTS = [
    b'{"event":"message:delta","seq":4,"agent":"a","messageId":"m","index":0,"kind":"text","text":"\\u2028 \xc3\xa9"}',
    b'{"event": "agent:state", "seq": 5, "agent": "a", "state": "ready", "outdated": false}',
]


def test_attach_jsonl_relays_the_servers_bytes_as_they_came_and_ends_once_answered():
    """The relay writes the server's lines unchanged (never decoded, so even a spacing of the server's
    own stays), in its order; at the end of stdin it half closes, and ends with 0 once its request is
    answered and the server closed."""

    def serve(conn: socket.socket) -> None:
        request = json.loads(_read_line(conn))
        assert conn.recv(1) == b""  # the end of stdin: a half close, then it waits for the answer
        answer = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": request["method"]}, separators=(",", ":"))
        for piece in (EVENTS[0][:7], EVENTS[0][7:] + b"\n" + EVENTS[1][:30], EVENTS[1][30:] + b"\n" + answer.encode()[:9]):
            conn.sendall(piece)  # lines cut anywhere, a response's start too
            time.sleep(0.05)
        conn.sendall(answer.encode()[9:] + b"\n")

    code, written = _relayed(serve, b'{"jsonrpc": "2.0", "id": "mine", "method": "AgentService.List"}\n')
    assert code == 0
    assert written.splitlines() == [*EVENTS, b'{"jsonrpc":"2.0","id":"mine","result":"AgentService.List"}']


def test_attach_jsonl_says_the_server_went_away_when_it_closes_before_answering(capfd):
    def serve(conn: socket.socket) -> None:
        _read_line(conn)
        conn.recv(1)
        conn.sendall(EVENTS[1] + b"\n")  # an event, no answer: then gone

    code, written = _relayed(serve, b'{"jsonrpc":"2.0","id":7,"method":"ChatService.Send","params":{}}\n')
    assert (code, written) == (1, EVENTS[1] + b"\n")
    assert "deck: the deck server s went away" in capfd.readouterr().err


def test_attach_jsonl_ends_with_0_when_the_server_closes_after_a_shutdown_it_passed_on(capfd):
    def serve(conn: socket.socket) -> None:
        _read_line(conn)  # closed at once, unanswered: the server stopped as asked

    code, _ = _relayed(serve, b'{"jsonrpc":"2.0","id":1,"method":"DeckService.Shutdown"}\n')
    assert code == 0 and capfd.readouterr().err == ""


def test_attach_jsonl_reads_no_id_out_of_an_event_text_and_reads_a_huge_answer_by_its_start(capfd):
    """A response's start inside an event's text answers nothing; an answer megabytes long is read by its start."""
    fake = b'{"jsonrpc":"2.0","id":1,"result":0}'

    def event_only(conn: socket.socket) -> None:
        _read_line(conn)
        conn.recv(1)
        event = b'{"event":"message:delta","seq":1,"text":"\\n' + fake.replace(b'"', b'\\"') + b'"}\n'
        for at in range(len(event)):  # cut at every byte: the text's newline escape is no line's end
            conn.sendall(event[at : at + 1])

    code, _ = _relayed(event_only, b'{"jsonrpc":"2.0","id":1,"method":"A.B"}\n')
    assert code == 1 and "went away" in capfd.readouterr().err

    def huge_answer(conn: socket.socket) -> None:
        _read_line(conn)
        conn.recv(1)
        answer = b'{"jsonrpc":"2.0","id":"two","result":"' + b"x" * 5_000_000 + b'"}\n'
        for at in range(0, len(answer), 100_000):
            conn.sendall(answer[at : at + 100_000])

    code, written = _relayed(huge_answer, b'{"jsonrpc":"2.0","id":"two","method":"A.C"}\n')
    assert code == 0 and len(written) > 5_000_000 and capfd.readouterr().err == ""
