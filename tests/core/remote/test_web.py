"""`deck serve --web`: the page over HTTP and the wire over a WebSocket, with a real server and real clients.

Who may connect (the token, the Origin, the Host), what every answer says to a browser, the
wire carried unchanged (one line per message), a slow client dropped, `deck web`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from deck.remote.web import text_frames

from tests.conftest import agent_block
from tests.core.remote.test_server import Raw, runtime  # noqa: F401 (a fixture)
from tests.deck_process import DECK, write_config
from tests.web_server import WebServe, WebSocketClient

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def served(tmp_path: Path, runtime: Path) -> Iterator[WebServe]:  # noqa: F811
    server = WebServe(write_config(tmp_path / "deck.toml", agent_block("a")))
    yield server
    server.stop()


async def connect(
    server: WebServe, *, via: str = "protocol", token: str | None = None, batches: bool = False, **headers: str
) -> WebSocketClient:
    """A WebSocket client of `server`, the token given `via` a subprotocol, a bearer or the query; with
    `batches`, it takes the lines written together as one message ("deck.lines", as the page does)."""
    token = server.token if token is None else token
    session = aiohttp.ClientSession()
    url, protocols = server.ws_url, ["deck", *(["deck.lines"] if batches else [])]
    if via == "protocol":
        protocols.append("deck.token." + token)
    elif via == "bearer":
        headers["Authorization"] = f"Bearer {token}"
    elif via == "query":
        url += f"?token={token}"
    try:
        ws = await session.ws_connect(url, protocols=protocols, headers=headers)
    except BaseException:
        await session.close()
        raise
    client = WebSocketClient(ws)
    client.session = session  # type: ignore[attr-defined]
    return client


async def done(client: WebSocketClient) -> None:
    await client.close()
    await client.session.close()  # type: ignore[attr-defined]


async def refused(server: WebServe, **kwargs: str) -> int:
    """The HTTP status a WebSocket that should not open gets (it never upgrades)."""
    with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
        await connect(server, **kwargs)
    return caught.value.status


def http(server: WebServe, path: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    """A plain HTTP request on a socket of its own (any Host header, nothing added)."""
    request = f"{method} {path} HTTP/1.1\r\nHost: {headers.pop('Host', f'127.0.0.1:{server.port}')}\r\nConnection: close\r\n"
    request += "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(request.encode())
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    found = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), found, body


# -- the page ------------------------------------------------------------------------------------


def test_the_page_and_its_files_come_with_a_policy_that_forbids_inline_scripts(served: WebServe) -> None:
    status, headers, body = http(served, "/")
    assert status == 200 and b'<script src="app.js"' in body and b"<script>" not in body
    policy = headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "no-referrer"
    for path, kind in (("/app.js", "text/javascript"), ("/markdown.js", "text/javascript"), ("/style.css", "text/css")):
        status, headers, body = http(served, path)
        assert status == 200 and headers["content-type"].startswith(kind) and body
        assert "content-security-policy" in headers


def test_no_cors_and_no_file_beyond_the_page(served: WebServe) -> None:
    """No answer ever says another origin may read it: not a preflight, not a page, not a refusal."""
    for method, path in (("OPTIONS", "/ws"), ("GET", "/"), ("GET", "/ws"), ("OPTIONS", "/")):
        status, headers, _ = http(served, path, method, Origin="http://evil.example", Access_Control_Request_Method="GET")
        assert not any(k.startswith("access-control-") for k in headers), (method, path, headers)
    for path in ("/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/app.js/../../pyproject.toml", "/index.html~", "/deck.toml"):
        status, _, body = http(served, path)
        assert status == 404 and b"root:" not in body, path


def test_a_foreign_host_name_is_refused_on_loopback(served: WebServe) -> None:
    """A name of the attacker's that resolves to 127.0.0.1 (DNS rebinding) gets nothing, not even the page."""
    status, _, body = http(served, "/", Host=f"evil.example:{served.port}")
    assert status == 421 and b"loopback" in body
    deadline = time.monotonic() + 10
    while b"is not a loopback name" not in served.stderr and time.monotonic() < deadline:
        time.sleep(0.05)  # the server's log line, as its stderr is read
    assert f"Host 'evil.example:{served.port}' is not a loopback name".encode() in served.stderr
    for host in (f"localhost:{served.port}", f"127.0.0.1:{served.port}", "localhost:8080"):  # 8080: through ssh -L
        assert http(served, "/", Host=host)[0] == 200


# -- who may open the wire -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_websocket_without_the_token_or_with_a_wrong_one_is_refused_before_any_event(served: WebServe) -> None:
    assert await refused(served, via="none") == 401
    for via in ("protocol", "bearer", "query"):
        assert await refused(served, via=via, token="x" * 43) == 401
        assert await refused(served, via=via, token=served.token[:-1]) == 401
    assert await refused(served, via="protocol", token="") == 401
    status, _, body = http(served, "/ws", Upgrade="websocket", Sec_WebSocket_Version="13", Sec_WebSocket_Key="dGhlIHNhbXBsZSBub25jZQ==")
    assert status == 401 and b'"event"' not in body  # nothing of the wire, not one event


@pytest.mark.anyio
async def test_a_websocket_from_another_origin_is_refused_even_with_the_token(served: WebServe) -> None:
    for origin in (
        "http://evil.example", f"http://evil.example:{served.port}", f"http://127.0.0.1:{served.port + 1}", "null",
        f"file://127.0.0.1:{served.port}", f"https://127.0.0.1:{served.port}",  # on loopback the page is http
    ):  # fmt: skip
        assert await refused(served, Origin=origin) == 403, origin
    client = await connect(served, Origin=f"http://127.0.0.1:{served.port}")  # the page's own
    assert (await client.call("DeckService.Snapshot"))["agents"][0]["name"] == "a"
    await done(client)


@pytest.mark.anyio
async def test_the_token_opens_the_wire_as_a_subprotocol_a_bearer_or_a_query(served: WebServe) -> None:
    for via in ("protocol", "bearer", "query"):
        client = await connect(served, via=via)
        assert client.ws.protocol == "deck"
        assert [a["name"] for a in (await client.call("DeckService.Snapshot"))["agents"]] == ["a"]
        await done(client)


def test_the_token_is_kept_0600_and_never_written_to_a_log(tmp_path: Path, runtime: Path) -> None:  # noqa: F811
    """Every way in, right and wrong, the query string included: the token is in no log line and no log file."""
    state = tmp_path / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    server = WebServe(write_config(tmp_path / "deck.toml", agent_block("a")), env=env)
    try:
        token_file = runtime / "deck" / "w.token"
        info = token_file.stat()
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid()
        assert len(server.token) >= 22 and server.token in token_file.read_text()  # 256 bits in base64url: 43 characters

        async def every_way() -> None:
            for via in ("protocol", "bearer", "query"):
                client = await connect(server, via=via)
                await client.call("ChatService.Send", {"agent": "a", "text": f"hello {via}"})
                await client.event("turn:changed", agent="a", busy=False)
                await done(client)
                await refused(server, via=via, token=server.token + "x")
                await refused(server, via=via, Origin="http://evil.example")

        asyncio.run(every_way())
    finally:
        assert server.stop() == 128 + 15  # SIGTERM: every agent stopped, the files removed
    assert not token_file.exists()  # gone with its server
    assert b"refused a web client" in server.stderr and b"attached (web 127.0.0.1)" in server.stderr
    assert server.token.encode() not in server.stderr
    logs = [p for p in state.rglob("*") if p.is_file()]
    assert logs and not [p for p in logs if server.token.encode() in p.read_bytes()]


# -- the wire, unchanged ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_each_line_of_the_wire_is_one_message_and_a_browser_and_a_terminal_client_see_the_same(served: WebServe) -> None:
    """The socket's lines and the WebSocket's messages are the same, in the same order, big ones included;
    a permission answered on the WebSocket is resolved for the socket's client too."""
    terminal = Raw(served_socket(served))
    terminal.call("DeckService.Clients")
    browser = await connect(served)
    await browser.event("clients:changed", clients=2)
    await browser.call("ChatService.Send", {"agent": "a", "text": "big 70000"})  # one line past 65535 bytes
    await browser.event("turn:changed", agent="a", busy=False)
    await browser.call("ChatService.Send", {"agent": "a", "text": "perm"})
    asked = await browser.event("permission:requested", agent="a")
    terminal.wait_for(lambda lines: any(x.get("event") == "permission:requested" for x in lines))
    assert await browser.call("ChatService.AnswerPermission", {"id": asked["id"], "optionId": "yes"})
    [last] = await browser.wait(
        lambda lines: [x for x in lines if x.get("event") == "turn:changed" and not x["busy"] and x["seq"] > asked["seq"]]
    )  # the end of the permission's turn
    seen = list(terminal.wait_for(lambda lines: [x for x in lines if x.get("seq") == last["seq"]] and lines))
    assert [x for x in seen if "event" in x and x["seq"] > 0 and x["seq"] <= last["seq"] and x["seq"] >= browser.lines[0]["seq"]] == [
        x for x in browser.lines if "event" in x and x["seq"] <= last["seq"]
    ]
    assert any(x.get("event") == "permission:resolved" and x["optionId"] == "yes" for x in seen)
    assert all(m.count("\n") == 0 and json.loads(m) for m in browser.messages)  # one line per message
    assert max(len(m) for m in browser.messages) > 70000
    seqs = [x["seq"] for x in browser.lines if "event" in x]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    await done(browser)
    terminal.close()


@pytest.mark.anyio
async def test_a_client_that_offers_deck_lines_gets_the_same_lines_in_fewer_messages(served: WebServe) -> None:
    one = await connect(served)
    batched = await connect(served, batches=True)
    assert batched.ws.protocol == "deck"
    await one.call("ChatService.Send", {"agent": "a", "text": "burst 3000"})  # read in a few reads, however busy
    last = await one.event("turn:changed", agent="a", busy=False)
    await batched.wait(lambda lines: any(x.get("seq") == last["seq"] for x in lines))
    events = [x for x in one.lines if "event" in x and 0 < x["seq"] <= last["seq"]]
    assert [x for x in batched.lines if "event" in x and x["seq"] >= events[0]["seq"] and x["seq"] <= last["seq"]] == events
    assert all(m.endswith("\n") for m in batched.messages)  # whole lines, each ended as on the socket
    assert len(batched.messages) < len(one.messages) / 2  # the 3000 chunks came a batch at a time
    await done(one)
    await done(batched)


@pytest.mark.anyio
async def test_a_bad_request_on_the_websocket_gets_an_error_and_the_wire_goes_on(served: WebServe) -> None:
    client = await connect(served)
    await client.ws.send_str("not json\n{\"jsonrpc\": \"2.0\"}\n[1, 2]\n" + "[" * 5000)
    errors = await client.wait(lambda lines: len([x for x in lines if "error" in x]) >= 4 and [x for x in lines if "error" in x])
    assert [e["error"]["code"] for e in errors] == [-32700, -32600, -32600, -32700]
    assert "refused" in errors[3]["error"]["message"]
    await client.ws.send_bytes(b'{"jsonrpc":"2.0","id":"b","method":"AgentService.List"}')  # binary: a line too
    assert (await client.wait(lambda lines: [x for x in lines if x.get("id") == "b"]))[0]["result"][0]["name"] == "a"
    await done(client)


@pytest.mark.anyio
async def test_a_message_past_the_limit_closes_that_websocket_and_nothing_else(served: WebServe) -> None:
    client = await connect(served)
    other = await connect(served)
    with contextlib.suppress(ConnectionError, aiohttp.ClientError):  # the server may close it while it sends
        await client.ws.send_str('{"jsonrpc":"2.0","id":1,"method":"ChatService.Send","params":{"agent":"a","text":"' + "x" * (17 << 20) + '"}}')
    async with asyncio.timeout(20):
        while not client.ws.closed:
            await asyncio.sleep(0.02)  # the close frame, as it comes: aiohttp's reader has no event for it
    assert client.ws.close_code in (1009, 1006)  # message too big (or the connection reset before the client read it)
    assert (await other.call("AgentService.List"))[0]["name"] == "a"
    async with asyncio.timeout(20):
        while b"exceeds limit" not in served.stderr:
            await asyncio.sleep(0.02)  # the server's log line, as it comes
    assert len(await other.call("DeckService.Clients")) == 1
    await done(client)
    await done(other)


def served_socket(server: WebServe) -> Path:
    from deck.remote.serverdir import socket_path

    return socket_path(server.name)


@pytest.mark.anyio
async def test_a_web_client_that_stops_reading_is_dropped_and_the_others_go_on(make_deck, runtime, monkeypatch) -> None:  # noqa: F811
    """A background tab that reads nothing: its queue grows past the limit, it is disconnected, and the
    terminal client gets every chunk at full speed."""
    from deck.remote import peer
    from deck.remote.server import ServerFrontend, listen
    from deck.remote.web import bind, make_token

    monkeypatch.setattr(peer, "QUEUE_LIMIT", 64 * 1024)
    loop = asyncio.get_running_loop()
    deck, recorder = make_deck(agent_block("a"))
    page = bind("127.0.0.1:0")
    listening = listen("u", "test", web=page.url)
    token = make_token(listening.directory, "u")
    ready_read, ready_write = os.pipe()
    ready = loop.create_future()
    loop.add_reader(ready_read, lambda: None if ready.done() else ready.set_result(None))
    running = loop.create_task(deck.run(ServerFrontend, listening=listening, ready_fd=ready_write, web=(page, token)))
    stuck = socket.socket()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
    try:
        await asyncio.wait({ready, running}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        assert ready.done(), running
        stuck.connect(("127.0.0.1", page.port))
        stuck.sendall(
            f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Sec-WebSocket-Protocol: deck, deck.token.{token}\r\n\r\n".encode()
        )  # and then reads nothing
        await recorder.wait_event("clients:changed", clients=1)
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(f"ws://127.0.0.1:{page.port}/ws?token={token}")
            client = WebSocketClient(ws)
            await recorder.wait_event("clients:changed", clients=2)
            await client.call("ChatService.Send", {"agent": "a", "text": "stream 60000"})
            await client.event("turn:changed", agent="a", busy=False, timeout=60)
            counts = await recorder.wait(lambda r: len(r.named("clients:changed")) == 3 and r.named("clients:changed"), 20)
            assert [c["clients"] for c in counts] == [1, 2, 1]  # the tab that stopped reading went
            assert len([x for x in client.lines if x.get("event") == "message:delta"]) == 60000
            [left] = await client.call("DeckService.Clients")
            assert left["web"] is True and left["command"].startswith("web 127.0.0.1")
            await client.close()
    finally:
        loop.remove_reader(ready_read)
        os.close(ready_read)
        stuck.close()
        deck.request_exit(0)
        await asyncio.wait_for(running, 20)


def test_text_frames_carry_each_line_with_its_length_in_the_shortest_form() -> None:
    lines = [b"a", b"x" * 125, b"y" * 126, b"z" * 65535, b"w" * 65536, "é".encode()]
    framed = text_frames(b"\n".join(lines) + b"\n")
    found, at = [], 0
    while at < len(framed):
        assert framed[at] == 0x81  # FIN, text, from the server: never masked
        size, at = framed[at + 1], at + 2
        if size == 126:
            size, at = int.from_bytes(framed[at : at + 2]), at + 2
        elif size == 127:
            size, at = int.from_bytes(framed[at : at + 8]), at + 8
        found.append(framed[at : at + size])
        at += size
    assert found == lines


# -- the command line ------------------------------------------------------------------------------


def test_an_address_beyond_loopback_needs_web_allow_remote_and_a_bad_one_is_named(tmp_path: Path, runtime: Path) -> None:  # noqa: F811
    config = write_config(tmp_path / "deck.toml", agent_block("a"))
    for address, said in (
        ("0.0.0.0:0", "--web-allow-remote"),
        ("192.0.2.1:8765", "--web-allow-remote"),
        ("abc", "bad --web address 'abc'"),
        ("127.0.0.1:99999", "bad --web address"),
        (":8765", "bad --web address"),
    ):
        result = subprocess.run([*DECK, "serve", "--config", str(config), "--web", address], capture_output=True, text=True, timeout=30)
        assert result.returncode == 2 and said in result.stderr, (address, result.stderr)
        assert not (runtime / "deck" / "default.sock").exists()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([*DECK, "serve", "--config", str(config), "--web", str(port)], capture_output=True, text=True, timeout=30)
        assert result.returncode == 2 and f"cannot serve the page on {port}" in result.stderr and "in use" in result.stderr


def test_the_page_is_served_beyond_loopback_only_when_allowed(tmp_path: Path, runtime: Path) -> None:  # noqa: F811
    server = WebServe(write_config(tmp_path / "deck.toml", agent_block("a")), "r", "--web-allow-remote")
    server.stop()
    ready_read, ready_write = os.pipe()
    popen = subprocess.Popen(
        [*DECK, "serve", "--config", str(tmp_path / "deck.toml"), "--name", "r", "--web", "0.0.0.0:0", "--web-allow-remote", "--ready-fd", str(ready_write)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(ready_write,),
    )  # fmt: skip
    os.close(ready_write)
    try:
        assert os.read(ready_read, 6) == b"ready\n"
        shown = subprocess.run([*DECK, "web", "r"], capture_output=True, text=True, timeout=30)
        assert shown.returncode == 0 and "#token=" in shown.stdout
        port = int(shown.stdout.split("#")[0].rstrip("/").rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: deck.example.com\r\nConnection: close\r\n\r\n")
            assert sock.recv(64).startswith(b"HTTP/1.1 200")  # a name of its own, behind a proxy
    finally:
        os.close(ready_read)
        popen.terminate()
        assert popen.wait(30) == 128 + 15


def test_deck_web_says_when_no_server_or_no_page_is_there(tmp_path: Path, runtime: Path) -> None:  # noqa: F811
    from tests.core.remote.test_server import Server

    result = subprocess.run([*DECK, "web", "nobody"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "no deck server named nobody is running" in result.stderr
    server = Server(write_config(tmp_path / "deck.toml", agent_block("a")), "plain")
    try:
        assert server.ready
        result = subprocess.run([*DECK, "web", "plain"], capture_output=True, text=True, timeout=30)
        assert result.returncode == 1 and "serves no web page" in result.stderr and "--web PORT" in result.stderr
        listed = json.loads(subprocess.run([*DECK, "ls", "--json"], capture_output=True, text=True, timeout=30).stdout)
        assert [s["web"] for s in listed] == [""]
    finally:
        server.popen.terminate()
        server.popen.wait(30)


def test_deck_ls_shows_the_page_without_its_token(served: WebServe) -> None:
    listed = json.loads(subprocess.run([*DECK, "ls", "--json"], capture_output=True, text=True, timeout=30).stdout)
    assert [s["web"] for s in listed] == [served.base] and served.token not in json.dumps(listed)
    table = subprocess.run([*DECK, "ls"], capture_output=True, text=True, timeout=30).stdout
    assert table.splitlines()[1].endswith(f"(web page: {served.base})") and served.token not in table


def test_deck_web_open_hands_the_address_to_the_users_browser(served: WebServe, tmp_path: Path) -> None:
    """`--open` starts the browser $BROWSER names (as Python's webbrowser does) with a private file that
    leads to the address: the token is on no command line."""
    got = tmp_path / "opened"
    opener = tmp_path / "opener.py"
    opener.write_text(f"import sys, pathlib\npathlib.Path({str(got)!r}).write_text(sys.argv[1])\n")
    env = {**os.environ, "BROWSER": f"{sys.executable} {opener} %s"}
    result = subprocess.run([*DECK, "web", served.name, "--open"], capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode == 0 and result.stdout.strip() == served.url
    opened = got.read_text()
    assert opened.startswith("file://") and served.token not in opened
    assert served.token in Path(opened.removeprefix("file://")).read_text()
