"""`deck serve --web` against clients that mean harm, with a real server and real sockets: the token in
no log and on no command line, the port's connections capped and timed out, a flood of requests in one
message that holds no other client up, a request that names no Host refused."""

from __future__ import annotations

import asyncio
import base64
import html
import json
import os
import re
import select
import shutil
import socket
import stat
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
import pytest

import tests.web_server
from tests.conftest import agent_block
from tests.core.remote.test_server import Raw, runtime  # noqa: F401 (a fixture)
from tests.core.remote.test_web import connect, done, http, served_socket
from tests.deck_process import DECK, write_config
from tests.web_server import WebServe

pytestmark = pytest.mark.timeout(120)

#: `deck` as DECK runs it, its web module's caps and deadlines set first from a JSON object (the first
#: argument), and its descriptors limited to `nofile` as a login's usually are.
LAUNCH = textwrap.dedent("""
    import json, resource, sys
    import deck.remote.web as web
    settings = json.loads(sys.argv.pop(1))
    nofile = settings.pop("nofile", None)
    if nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    for key, value in settings.items():
        assert hasattr(web, key), key
        setattr(web, key, value)
    from deck.__main__ import main
    main()
""")
#: Another uid (nobody), with the right to pass folders' modes to run this Python.
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             "--inh-caps=+dac_override", "--ambient-caps=+dac_override"]  # fmt: skip
needs_another_uid = pytest.mark.skipif(
    os.getuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to be another uid"
)


def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str, env: dict[str, str] | None = None, **settings: Any) -> WebServe:
    """`deck serve --web 0`, its web module's constants set as `settings` say (`nofile`: its descriptors)."""
    monkeypatch.setattr(tests.web_server, "DECK", [sys.executable, "-P", "-c", LAUNCH, json.dumps(settings)])
    return WebServe(write_config(tmp_path / "deck.toml", config), env=env)


@pytest.fixture
def served(tmp_path: Path, runtime: Path) -> Iterator[WebServe]:  # noqa: F811
    server = WebServe(write_config(tmp_path / "deck.toml", agent_block("a")))
    yield server
    server.stop()


def wait_stderr(server: WebServe, text: bytes, count: int = 1, timeout: float = 20.0) -> None:
    """Until the server's stderr holds `text` `count` times (its lines are read as they come)."""
    deadline = time.monotonic() + timeout
    while server.stderr.count(text) < count:
        assert time.monotonic() < deadline, f"{text!r} not said {count} times: {server.stderr.decode(errors='replace')}"
        time.sleep(0.02)


def raw_request(server: WebServe, request: bytes) -> bytes:
    """`request`'s bytes as they are, on a connection of their own; what came back until it closed."""
    with socket.create_connection((server.host, server.port), timeout=20) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def upgrade(server: WebServe, *headers: str) -> bytes:
    """A WebSocket upgrade request for /ws, with `headers` besides the usual ones."""
    lines = [
        "GET /ws HTTP/1.1", f"Host: 127.0.0.1:{server.port}", "Upgrade: websocket", "Connection: Upgrade",
        "Sec-WebSocket-Version: 13", f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}", *headers,
    ]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def closed_by_server(sock: socket.socket, timeout: float) -> float | None:
    """Seconds until the server closes `sock` (what it sends meanwhile is read and dropped), or None."""
    start = time.monotonic()
    deadline = start + timeout
    while (left := deadline - time.monotonic()) > 0:
        if select.select([sock], [], [], left)[0]:
            try:
                if not sock.recv(65536):
                    return time.monotonic() - start
            except ConnectionResetError:
                return time.monotonic() - start
    return None


# -- the token, in no log and on no command line -------------------------------------------------------


def test_the_token_is_in_no_log_when_sent_as_the_only_subprotocol_or_with_a_nul(tmp_path: Path, runtime: Path) -> None:  # noqa: F811
    """A client that offers only the token's subprotocol is let in, and aiohttp never gets to log what it
    offered; a request aiohttp cannot read (a NUL beside the token in a Bearer header, a control in a query
    holding it) is refused in one line without its bytes."""
    state = tmp_path / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    server = WebServe(write_config(tmp_path / "deck.toml", agent_block("a")), env=env)
    token = server.token
    try:

        async def token_protocol_alone() -> None:
            async with aiohttp.ClientSession() as session:
                for protocols in (["deck.token." + token], ["deck.token." + token, "chat"]):
                    async with session.ws_connect(server.ws_url, protocols=protocols) as ws:
                        assert ws.protocol is None  # no token said back, and nothing the client did not offer
                        await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "DeckService.Snapshot"}))
                        assert json.loads((await ws.receive()).data)  # in: the wire's first line

        asyncio.run(token_protocol_alone())
        bad = [
            upgrade(server, f"Authorization: Bearer {token}\x00"),
            upgrade(server, f"Authorization: Bearer \x00{token}"),
            upgrade(server, f"Sec-WebSocket-Protocol: deck, deck.token.{token}\x00"),
            f"GET /ws?token={token}\x01 HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode(),
        ]
        for request in bad:
            assert raw_request(server, request).split(b"\r\n", 1)[0].split(b" ")[1] == b"400"
        wait_stderr(server, b"no valid HTTP (400 InvalidURLError)")  # the terminal says each kind once
    finally:
        server.stop()
    assert b"refused a web request at 127.0.0.1: no valid HTTP (400 BadHttpMessage)" in server.stderr
    assert b"attached (web 127.0.0.1)" in server.stderr
    assert token.encode() not in server.stderr and b"deck.token." not in server.stderr  # not even cut out
    logs = [p for p in state.rglob("*") if p.is_file()]
    assert not [p for p in logs if token.encode() in p.read_bytes()]
    assert (state / "deck" / "deck.log").read_bytes().count(b"refused a web request at 127.0.0.1: no valid HTTP (400 ") == len(bad)


def test_deck_web_open_hands_the_browser_a_private_file_never_the_token(served: WebServe, tmp_path: Path, runtime: Path) -> None:  # noqa: F811
    """Another user may read any process's command line: the browser gets the name of a 0600 file in the
    servers' folder, which leads it to the page with the token."""
    said = tmp_path / "argv"
    browser = tmp_path / "fake-browser"
    browser.write_text(f"#!/bin/sh\ntr '\\0' '\\n' < /proc/$$/cmdline > {said}\n")
    browser.chmod(0o755)
    opened = subprocess.run(
        [*DECK, "web", "--open", "w"], capture_output=True, text=True, timeout=30, env={**os.environ, "BROWSER": str(browser)}
    )
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == served.url  # printed for the user, as without --open
    argv = said.read_text().split("\n")
    assert served.token not in said.read_text()
    [uri] = [arg for arg in argv if arg.startswith("file://")]
    page = Path(unquote(urlsplit(uri).path))
    assert page.parent == runtime / "deck" and page.name == "w.open.html"
    info = page.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid()
    assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
    text = page.read_text()
    [refresh] = re.findall(r'<meta http-equiv="refresh" content="0; url=([^"]*)">', text)
    [replaced] = re.findall(r"location\.replace\((\"[^\"]*\")\)", text)
    assert html.unescape(refresh) == json.loads(replaced) == served.url  # the page, with the token
    status, _, body = http(served, urlsplit(served.url).path or "/")
    assert status == 200 and b'<script src="app.js"' in body
    again = subprocess.run([*DECK, "web", "--open", "w"], capture_output=True, timeout=30, env={**os.environ, "BROWSER": str(browser)})
    assert again.returncode == 0 and page.exists()  # replaced, not one more
    assert served.stop() == 128 + 15
    assert not page.exists()  # gone with its server


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium")
def test_deck_web_open_leads_a_real_browser_to_the_page_with_its_token(served: WebServe, tmp_path: Path) -> None:
    """Headless Chromium given what `--open` gives, no token: it follows the file to the page, whose script
    connects with the token it finds in the address."""
    said = tmp_path / "argv"
    browser = tmp_path / "browser"
    browser.write_text(
        f'#!/bin/sh\necho "$@" > {said}\nexec {CHROMIUM} --headless --no-sandbox --disable-gpu --user-data-dir={tmp_path / "profile"} '
        '--virtual-time-budget=5000 --dump-dom "$@" > /dev/null 2>&1\n'
    )
    browser.chmod(0o755)
    opened = subprocess.run(
        [*DECK, "web", "--open", "w"], capture_output=True, text=True, timeout=60, env={**os.environ, "BROWSER": str(browser)}
    )
    assert opened.returncode == 0, opened.stderr
    assert said.read_text().startswith("file://") and served.token not in said.read_text()
    wait_stderr(served, b"client 1 attached (web 127.0.0.1)")
    assert b"refused" not in served.stderr


# -- the port's connections -------------------------------------------------------------------------------

#: Run as another uid: `count` connections to the port, every other one with half a request's head sent,
#: held until stdin ends; then how many the server closed, on stdout.
HOLDER = textwrap.dedent("""
    import resource, socket, sys
    host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_NOFILE, (count + 64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    held = []
    for i in range(count):
        sock = socket.create_connection((host, port))
        if i % 2:
            try:
                sock.sendall(b"GET / HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n")  # the rest never comes
            except OSError:  # closed already
                pass
        held.append(sock)
    print("held", len(held), flush=True)
    sys.stdin.read()
    closed = 0
    for sock in held:
        sock.setblocking(False)
        try:
            closed += sock.recv(1) == b""
        except ConnectionResetError:
            closed += 1
        except BlockingIOError:
            pass
    print("closed", closed, flush=True)
""")


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@needs_another_uid
def test_idle_connections_of_another_uid_are_capped_and_the_deck_goes_on(tmp_path: Path, runtime: Path, monkeypatch) -> None:  # noqa: F811
    """1,100 connections of another user's, idle or with half a head sent, against a server allowed 1,024
    descriptors: it keeps at most its cap of them, starts an agent, and its clients still attach, on the
    socket and on the page's port (a new connection closes the oldest one that is no open WebSocket)."""
    server = serve(tmp_path, monkeypatch, agent_block("a") + agent_block("b"), nofile=1024)
    try:
        before = descriptors(server.popen.pid)
        holder = subprocess.Popen(
            [*AS_NOBODY, sys.executable, "-c", HOLDER, server.host, str(server.port), "1100"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert holder.stdout is not None and holder.stdin is not None
        try:
            assert holder.stdout.readline() == "held 1100\n"
            from deck.remote.web import MAX_CONNECTIONS, MAX_CONNECTIONS_PER_PEER

            deadline = time.monotonic() + 15
            while (count := descriptors(server.popen.pid)) > before + MAX_CONNECTIONS_PER_PEER + 16:
                assert time.monotonic() < deadline, f"{count} descriptors open, {before} before"
                time.sleep(0.05)  # the last connections being accepted and closed
            wait_stderr(server, b"web connections at their cap (%d in all, %d from one address)" % (MAX_CONNECTIONS, MAX_CONNECTIONS_PER_PEER))
            client = Raw(served_socket(server))
            client.call("AgentService.Start", {"name": "b"}, timeout=30)
            client.event("agent:state", agent="b", state="ready", timeout=30)
            client.close()

            async def page_client() -> None:
                web_client = await connect(server)
                assert [a["name"] for a in (await web_client.call("DeckService.Snapshot"))["agents"]] == ["a", "b"]
                await done(web_client)

            asyncio.run(page_client())
            holder.stdin.close()
            said = holder.stdout.readline()
            assert said.startswith("closed ") and int(said.split()[1]) >= 1100 - MAX_CONNECTIONS_PER_PEER, said
        finally:
            holder.kill()
            holder.wait(10)
        assert b"Too many open files" not in server.stderr
    finally:
        server.stop()


def test_past_the_caps_the_oldest_waiting_connection_goes_and_open_websockets_stay(tmp_path: Path, runtime: Path, monkeypatch) -> None:  # noqa: F811
    """The caps, made small: a new connection closes the oldest one that waits for a request; when every
    one is an open WebSocket, the new one is closed at once, and the WebSockets go on."""
    server = serve(tmp_path, monkeypatch, agent_block("a"), MAX_CONNECTIONS_PER_PEER=3)
    try:
        idle = [socket.create_connection((server.host, server.port), timeout=10) for _ in range(3)]
        status, _, _ = http(server, "/")  # a fourth connection: in, the first idle one out
        assert status == 200
        assert closed_by_server(idle[0], 10) is not None
        assert closed_by_server(idle[1], 0.2) is None and closed_by_server(idle[2], 0.2) is None

        async def websockets() -> None:
            clients = [await connect(server) for _ in range(3)]  # the other idle ones go
            for sock in idle[1:]:
                assert closed_by_server(sock, 10) is not None
            late = socket.create_connection((server.host, server.port), timeout=10)
            assert closed_by_server(late, 5) is not None  # no room: closed at once, its idle deadline is 30 s
            late.close()
            for client in clients:
                assert (await client.call("DeckService.Snapshot"))["agents"]
                await done(client)

        asyncio.run(websockets())
        for sock in idle:
            sock.close()
    finally:
        server.stop()


def test_a_slow_head_and_an_idle_connection_are_closed_and_an_open_websocket_is_not(tmp_path: Path, runtime: Path, monkeypatch) -> None:  # noqa: F811
    """A head trickled a byte at a time is closed HEADER_TIMEOUT after its first byte, however it trickles;
    a connection that sends nothing, or nothing after an answer, IDLE_TIMEOUT after; a WebSocket open
    longer than both still answers."""
    server = serve(tmp_path, monkeypatch, agent_block("a"), HEADER_TIMEOUT=1.0, IDLE_TIMEOUT=3.0)
    try:

        async def check() -> None:
            client = await connect(server)
            opened = time.monotonic()
            loop = asyncio.get_running_loop()
            idle = socket.create_connection((server.host, server.port), timeout=10)
            answered = socket.create_connection((server.host, server.port), timeout=10)
            answered.sendall(f"GET /style.css HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode())
            slow = socket.create_connection((server.host, server.port), timeout=10)

            def trickle() -> float:
                start = time.monotonic()
                for byte in b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"x" * 100:
                    slow.send(bytes((byte,)))
                    if closed_by_server(slow, 0.2) is not None:  # a byte every 0.2 s: never idle, never done
                        return time.monotonic() - start
                raise AssertionError("a head trickled for 20 s was not closed")

            slow_gone = loop.run_in_executor(None, trickle)
            idle_gone = loop.run_in_executor(None, closed_by_server, idle, 30.0)
            answered_gone = loop.run_in_executor(None, closed_by_server, answered, 30.0)
            assert 0.9 < await slow_gone < 2.5  # its header deadline, well before its idle one
            for gone in (await idle_gone, await answered_gone):
                assert gone is not None and gone > 2.5  # the idle deadline, not the header one
            assert time.monotonic() - opened > 3.0
            assert (await client.call("DeckService.Snapshot"))["agents"]  # open all along, past both deadlines
            await done(client)
            for sock in (idle, answered, slow):
                sock.close()

        asyncio.run(check())
    finally:
        server.stop()


# -- a flood of requests in one message ---------------------------------------------------------------


def test_a_message_of_250000_requests_unread_holds_no_other_client_up(served: WebServe) -> None:
    """One message holds 250,000 requests and its sender reads none of the answers: it is read as the
    socket reads the same lines, a slice at a time, so another client is answered at once meanwhile, and
    the flooder is dropped once 16 MiB wait for it."""
    lines = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"DeckService.Snapshot"}\n' % i for i in range(250_000))
    assert len(lines) < 16 * 1024 * 1024
    flooder = socket.create_connection((served.host, served.port), timeout=60)
    flooder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    flooder.sendall(upgrade(served, "Sec-WebSocket-Protocol: deck, deck.token." + served.token))
    head = b""
    while b"\r\n\r\n" not in head:
        head += flooder.recv(1)
    assert head.startswith(b"HTTP/1.1 101 ")
    frame = b"\x81\xff" + struct.pack("!Q", len(lines)) + bytes(4) + lines  # masked by zeros: the bytes as they are

    async def meanwhile() -> float:
        other = await connect(served)
        await other.call("DeckService.Snapshot")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, flooder.sendall, frame)  # the server has read all but its buffers
        worst = 0.0
        while True:  # until the flooder is dropped, each answer timed
            start = loop.time()
            clients = await other.call("DeckService.Clients", timeout=60)
            worst = max(worst, loop.time() - start)
            if len(clients) == 1:
                break
        await done(other)
        return worst

    worst = asyncio.run(meanwhile())
    flooder.close()
    assert b"stopped reading: disconnected" in served.stderr
    assert worst < 5.0, f"another client waited {worst:.1f} s for an answer"


# -- the Host ---------------------------------------------------------------------------------------------


def test_a_request_that_names_no_host_is_refused(served: WebServe) -> None:
    """HTTP/1.0 needs no Host, and aiohttp then takes the socket's address for one: refused, as a foreign
    name is (HTTP/1.1 without one aiohttp refuses itself); with one, the same request is answered."""
    for request in (b"GET / HTTP/1.0\r\n\r\n", b"GET /app.js HTTP/1.0\r\nConnection: close\r\n\r\n"):
        answer = raw_request(served, request)
        assert answer.split(b"\r\n", 1)[0].split(b" ")[1] == b"421" and b"<script" not in answer, answer[:200]
        assert b"content-security-policy" in answer.lower()
    ws = upgrade(served, "Sec-WebSocket-Protocol: deck, deck.token." + served.token).replace(b"HTTP/1.1", b"HTTP/1.0")
    for request in (ws.replace(b"Host: 127.0.0.1:%d\r\n" % served.port, b""), b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"):
        answer = raw_request(served, request)
        assert answer.split(b"\r\n", 1)[0].split(b" ")[1] in (b"400", b"421") and b'"event"' not in answer and b"<script" not in answer
    wait_stderr(served, b"refused a web request at 127.0.0.1: it names no Host")
    answer = raw_request(served, b"GET / HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n\r\n" % served.port)
    assert b" 200 " in answer.split(b"\r\n", 1)[0] and b'<script src="app.js"' in answer
