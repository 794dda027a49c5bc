"""`deck serve` and its clients, as real processes: the socket, its wire, attach and detach, the end of a server."""

from __future__ import annotations

import json
import os
import select
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from deck.remote.serverdir import socket_path

from tests.conftest import agent_block
from tests.deck_process import DECK, DeckProcess, Lines, alive, wait_dead

pytestmark = pytest.mark.timeout(60)


# -- helpers -----------------------------------------------------------------------------------


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short $XDG_RUNTIME_DIR of the test's own (a socket path has 107 bytes at most)."""
    folder = Path(tempfile.mkdtemp(prefix="dk-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


class Raw(Lines):
    """A client with nothing of deck's: a Unix socket, bytes out, JSON lines in."""

    def __init__(self, path: Path, *, read: bool = True, rcvbuf: int | None = None) -> None:
        super().__init__()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect(str(path))
        self._next_id = 0
        if read:
            threading.Thread(target=self.feed, args=(self.sock.makefile("rb"),), daemon=True).start()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send_raw(json.dumps(message).encode() + b"\n")
        return self._next_id

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 15.0) -> Any:
        reply = self.response(self.request(method, params), timeout)
        assert "result" in reply, reply
        return reply["result"]

    def close(self) -> None:
        with_suppressed(self.sock.shutdown, socket.SHUT_RDWR)
        self.sock.close()


def with_suppressed(function: Callable[..., Any], *args: Any) -> None:
    try:
        function(*args)
    except OSError:
        pass


class Server:
    """`deck serve` in the foreground, started and ready (its socket accepts)."""

    def __init__(self, config: Path, name: str = "t", env: dict[str, str] | None = None) -> None:
        self.name = name
        ready_read, ready_write = os.pipe()
        self.popen = subprocess.Popen(
            [*DECK, "serve", "--config", str(config), "--name", name, "--ready-fd", str(ready_write)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(ready_write,), env=env,
        )  # fmt: skip
        os.close(ready_write)
        self.pid = self.popen.pid
        self.stderr = b""
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._err.start()
        try:
            readable, _, _ = select.select([ready_read], [], [], 20)
            self.ready = os.read(ready_read, 6) == b"ready\n" if readable else False
        finally:
            os.close(ready_read)

    @property
    def path(self) -> Path:
        return socket_path(self.name)

    def _read_stderr(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.stderr += line

    def descendants(self) -> list[int]:
        try:
            return [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def wait(self, timeout: float = 20.0) -> int:
        code = self.popen.wait(timeout)
        self._err.join(5)
        return code

    def kill_everything(self) -> None:
        procs = []
        for pid in [self.pid, *self.descendants()]:
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            with_suppressed(p.kill)
        psutil.wait_procs(procs, 5)
        self.popen.wait(5)


@pytest.fixture
def serve(tmp_path: Path, runtime: Path) -> Iterator[Callable[..., Server]]:
    """`serve(toml_text, name="t")` → a ready Server; everything is killed after the test."""
    started: list[Server] = []

    def start(text: str, name: str = "t", **kwargs: Any) -> Server:
        config = tmp_path / f"{name}.toml"
        config.write_text(text)
        server = Server(config, name, **kwargs)
        started.append(server)
        assert server.ready, server.wait() and server.stderr
        return server

    yield start
    for server in started:
        server.kill_everything()


@pytest.fixture
def clients() -> Iterator[Callable[..., Raw]]:
    made: list[Raw] = []

    def connect(path: Path, **kwargs: Any) -> Raw:
        client = Raw(path, **kwargs)
        made.append(client)
        return client

    yield connect
    for client in made:
        client.close()


class Attached(Lines):
    """`deck attach NAME …` as a real process: its stdin, its stdout read as JSON lines (jsonl) or kept."""

    def __init__(self, *args: str, json_lines: bool = True) -> None:
        super().__init__()
        self.popen = subprocess.Popen(
            [*DECK, "attach", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.out = b""
        self.err = b""
        assert self.popen.stdout is not None and self.popen.stderr is not None
        target = self.feed if json_lines else self._keep
        threading.Thread(target=target, args=(self.popen.stdout,), daemon=True).start()
        self._err_thread = threading.Thread(target=self._keep_err, daemon=True)
        self._err_thread.start()

    def _keep(self, stream: Any) -> None:
        for line in stream:
            with self._changed:  # `wait_for` wakes on the output kept too
                self.out += line
                self._changed.notify_all()
        with self._changed:
            self.done = True
            self._changed.notify_all()

    def _keep_err(self) -> None:
        assert self.popen.stderr is not None
        self.err = self.popen.stderr.read()

    def send(self, text: str) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(text.encode() + b"\n")
        self.popen.stdin.flush()

    def request(self, request_id: int, method: str, params: dict[str, Any] | None = None) -> None:
        self.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}))

    def wait(self, timeout: float = 20.0) -> int:
        """Its exit code, once it exited and all it wrote to stderr is in `err`."""
        code = self.popen.wait(timeout)
        self._err_thread.join(timeout)
        return code


@pytest.fixture
def attach() -> Iterator[Callable[..., Attached]]:
    made: list[Attached] = []

    def start(*args: str, **kwargs: Any) -> Attached:
        client = Attached(*args, **kwargs)
        made.append(client)
        return client

    yield start
    for client in made:
        if client.popen.poll() is None:
            client.popen.kill()
        client.popen.wait(5)


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def reply_text(conversation: dict[str, Any]) -> str:
    """The text of the last agent message of a `ChatService.Conversation`."""
    message = [m for m in conversation["messages"] if m["role"] == "agent"][-1]
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


class View:
    """What a client that (re)joins knows of one agent's messages: the snapshot, then only the events after its
    `seq`, the text of each delta appended (a finished message:updated is not applied: it would hide a gap)."""

    def __init__(self, snapshot: dict[str, Any], agent: str) -> None:
        self.seq = snapshot["seq"]
        conversation = snapshot["conversations"].get(agent) or {"messages": []}
        self.messages = {m["id"]: [p.get("text", "") for p in m["parts"]] for m in conversation["messages"]}
        self.agent = agent

    def apply(self, line: dict[str, Any]) -> None:
        if line.get("seq", 0) <= self.seq or line.get("agent") != self.agent:
            return
        if line["event"] == "message:updated" and line["message"]["id"] not in self.messages:
            self.messages[line["message"]["id"]] = [p.get("text", "") for p in line["message"]["parts"]]
        elif line["event"] == "message:delta" and line["kind"] == "text":
            parts = self.messages[line["messageId"]]
            while len(parts) <= line["index"]:
                parts.append("")
            parts[line["index"]] += line["text"]

    def text(self, message_id: str) -> str:
        return "".join(self.messages[message_id])


def events_after(client: Raw, request_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The snapshot answering `request_id`, and every event line the client got (before and after it)."""
    reply = client.response(request_id)
    return reply["result"], [x for x in client.lines if "event" in x]


def contiguous(lines: list[dict[str, Any]]) -> bool:
    seqs = [x["seq"] for x in lines if "event" in x]
    return seqs == list(range(seqs[0], seqs[0] + len(seqs)))


# -- the socket and its folder -----------------------------------------------------------------


def test_the_socket_is_0600_in_a_0700_folder_and_serves_the_jsonl_wire(serve, clients, runtime) -> None:
    server = serve(agent_block("a"))
    folder = runtime / "deck"
    assert server.path == folder / "t.sock"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(server.path.stat().st_mode) == 0o600 and stat.S_ISSOCK(server.path.stat().st_mode)
    client = clients(server.path)
    client.event("clients:changed", clients=1)
    client.request("ChatService.Send", {"agent": "a", "text": "echo hello"})
    done = client.event("message:updated", agent="a", timeout=20)
    assert done
    client.wait_for(lambda ls: any(x.get("event") == "message:updated" and x["message"]["done"] and x["message"]["role"] == "agent" for x in ls))
    assert contiguous(client.lines)
    [me] = client.call("DeckService.Clients")
    assert me["pid"] == os.getpid() and me["uid"] == os.getuid() and me["since"]


def test_the_lines_are_the_jsonl_bridge_bytes(serve, clients, run_deck_jsonl) -> None:
    """The same requests get the same bytes from the socket as from `deck run --frontend=jsonl` on stdout."""
    server = serve(agent_block("a"))
    client = clients(server.path)
    bridge = run_deck_jsonl(agent_block("a"))
    requests = [
        b"not json\n",
        b"[1, 2]\n",
        b'{"jsonrpc": "2.0", "id": 7, "method": "Nope.Nothing"}\n',
        b'{"jsonrpc": "2.0", "id": 8, "method": "ChatService.Send", "params": {"agent": "zz", "text": "x"}}\n',
        b'{"jsonrpc": "2.0", "id": "s", "method": "AgentService.Logs", "params": {"name": "a"}}\n',
    ]
    for request in requests:
        client.send_raw(request)
        bridge.send_raw(request.decode().rstrip("\n"))
    client.response("s")
    bridge.response("s")
    from_socket = [raw for raw, x in zip(client.raw, client.lines) if "jsonrpc" in x]
    from_stdout = [raw for raw, x in zip(bridge.raw, bridge.lines) if "jsonrpc" in x]
    assert len(from_socket) == len(requests)
    assert from_socket == from_stdout


@pytest.fixture
def run_deck_jsonl(tmp_path: Path) -> Iterator[Callable[[str], Any]]:
    """`deck run --frontend=jsonl` whose stdout lines are also kept as raw bytes."""
    started: list[Any] = []

    class Bridge(DeckProcess):
        def __init__(self, *args: str) -> None:
            self.raw: list[bytes] = []
            super().__init__(*args)

        def _read_stdout(self) -> None:
            assert self.popen.stdout is not None
            for raw in self.popen.stdout:
                with self._changed:
                    self.raw.append(raw)
                    self.lines.append(json.loads(raw))
                    self._changed.notify_all()
            with self._changed:
                self._out_done = True
                self._changed.notify_all()

    def start(text: str) -> Any:
        config = tmp_path / "bridge.toml"
        config.write_text(text)
        bridge = Bridge("--config", str(config))
        started.append(bridge)
        return bridge

    yield start
    for bridge in started:
        bridge.kill_everything()


@pytest.mark.parametrize("problem", ["open to others", "a symlink", "another owner"])
def test_a_folder_that_is_not_the_users_own_is_refused(tmp_path, runtime, problem) -> None:
    folder = runtime / "deck"
    if problem == "open to others":
        folder.mkdir(mode=0o755)
        folder.chmod(0o755)
    elif problem == "a symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        folder.mkdir(mode=0o700)
        os.chown(folder, 65534, 65534)
    (tmp_path / "deck.toml").write_text(agent_block("a"))
    done = cli("serve", "--config", str(tmp_path / "deck.toml"), "--name", "t")
    assert done.returncode == 1
    assert "refused" in done.stderr and str(folder) in done.stderr
    assert not (tmp_path / "elsewhere" / "t.sock").exists()
    assert stat.S_IMODE(os.lstat(folder).st_mode) != 0o700 or problem != "open to others"  # never repaired


@pytest.mark.skipif(os.getuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_a_peer_of_another_uid_is_refused_with_a_line_then_closed(serve) -> None:
    """nobody, with the right to pass the folder's mode (CAP_DAC_OVERRIDE), still meets SO_PEERCRED."""
    server = serve(agent_block("a"))
    client = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(sys.argv[1])\n"
        "sys.stdout.buffer.write(s.makefile('rb').read())\n"
    )
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 "--inh-caps=+dac_override", "--ambient-caps=+dac_override"]  # fmt: skip
    done = subprocess.run([*as_nobody, sys.executable, "-c", client, str(server.path)], capture_output=True, timeout=20)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()  # the refusal, and the end: no snapshot, no event
    refusal = json.loads(line)
    assert refusal["id"] is None and "refused" in refusal["error"]["message"] and "65534" in refusal["error"]["message"]
    plain = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", client,
                            str(server.path)], capture_output=True, timeout=20)  # fmt: skip
    assert plain.returncode != 0 and b"PermissionError" in plain.stderr  # the folder's mode stops it first
    os.kill(server.pid, signal.SIGTERM)
    server.wait()
    assert b"refused a client of uid 65534" in server.stderr


def test_a_second_server_of_a_name_is_refused_and_a_stale_socket_replaced(serve, clients, tmp_path) -> None:
    server = serve(agent_block("a"))
    (tmp_path / "again.toml").write_text(agent_block("a"))
    again = cli("serve", "--config", str(tmp_path / "again.toml"), "--name", "t")
    assert again.returncode == 1
    assert f"a deck server named t is already running (pid {server.pid})" in again.stderr
    os.kill(server.pid, signal.SIGKILL)
    server.wait()
    assert server.path.exists()  # left behind: nobody removed it
    with pytest.raises(ConnectionRefusedError):
        socket.socket(socket.AF_UNIX).connect(str(server.path))
    assert json.loads(cli("ls", "--json").stdout) == []  # stale: not listed, and cleaned
    assert sorted(p.name for p in server.path.parent.iterdir()) == []
    replaced = serve(agent_block("a"))
    assert clients(replaced.path).call("AgentService.List")[0]["name"] == "a"


# -- events and clients ---------------------------------------------------------------------------


def test_a_client_that_rejoins_mid_turn_misses_nothing_and_gets_nothing_twice(serve, clients) -> None:
    server = serve(agent_block("a"))
    first = clients(server.path)
    first.request("ChatService.Send", {"agent": "a", "text": "stream 30000"})
    opened = first.event("message:delta", timeout=20)
    reply_id = opened["messageId"]
    views = []
    for _ in range(3):  # join, leave mid-turn, join again...
        joiner = clients(server.path)
        snapshot, _ = events_after(joiner, joiner.request("DeckService.Snapshot"))
        joiner.wait_line(lambda x: x.get("event") == "message:delta", count=50)
        views.append((joiner, snapshot))
        if len(views) < 3:
            joiner.close()
    last, snapshot = views[-1]
    done = last.wait_line(lambda x: x.get("event") == "message:updated" and x["message"]["id"] == reply_id and x["message"]["done"], 30)
    expected = "".join(f"c{i} " for i in range(30000))
    assert "".join(p["text"] for p in done["message"]["parts"]) == expected
    for joiner, snapshot in views:
        assert contiguous(joiner.lines)
    view = View(snapshot, "a")
    assert reply_id in view.messages, "joined mid-turn: the snapshot holds the reply as it was"
    for line in last.lines:
        if line.get("event") and line is not done:
            view.apply(line)
    assert view.text(reply_id) == expected
    assert contiguous(first.lines)


def test_a_client_killed_mid_turn_leaves_the_turn_going_and_can_attach_again(serve, attach, clients) -> None:
    server = serve(agent_block("a"))
    watcher = clients(server.path)
    attached = attach("t", "--frontend", "jsonl")
    attached.event("clients:changed", clients=2)
    attached.request(1, "ChatService.Send", {"agent": "a", "text": "slow"})
    attached.event("message:delta", agent="a", timeout=20)
    attached.popen.kill()
    attached.wait()
    watcher.wait_for(lambda ls: [x for x in ls if x.get("event") == "clients:changed"][-1]["clients"] == 1)
    ticks = len(watcher.events("message:delta", agent="a"))
    watcher.wait_line(lambda x: x.get("event") == "message:delta", count=ticks + 3)  # it goes on
    reply_id = watcher.events("message:delta", agent="a")[0]["messageId"]
    again = attach("t", "--frontend", "jsonl")
    again.request(1, "DeckService.Snapshot")
    snapshot = again.response(1)["result"]
    assert snapshot["conversations"]["a"]["busy"] is True
    again.wait_line(lambda x: x.get("event") == "message:delta", count=3)
    again.request(2, "ChatService.Cancel", {"agent": "a"})
    done = again.wait_line(lambda x: x.get("event") == "message:updated" and x["message"]["id"] == reply_id and x["message"]["done"], 20)
    view = View(snapshot, "a")
    for line in again.lines:
        if "event" in line and line is not done:
            view.apply(line)
    assert view.text(reply_id) == "".join(p["text"] for p in done["message"]["parts"] if p["type"] == "text")
    assert view.text(reply_id).count("tick ") > ticks + 3  # all of it: before the kill, while away, after
    assert again.popen.poll() is None


ASKS: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "permission": ("perm", "ChatService.AnswerPermission", {"optionId": "yes"}, 'permission: yes'),
    "question": ("question", "ChatService.AnswerQuestion", {"values": {"name": "Ada"}}, '"Ada"'),
}


@pytest.mark.parametrize("kind", list(ASKS))
def test_two_clients_answer_one_ask_and_both_see_it_resolved(serve, clients, kind) -> None:
    prompt, method, answer, outcome = ASKS[kind]
    server = serve(agent_block("a"))
    one, two = clients(server.path), clients(server.path)
    one.request("ChatService.Send", {"agent": "a", "text": prompt})
    asked = one.event(f"{kind}:requested", agent="a", timeout=20)
    assert two.event(f"{kind}:requested", id=asked["id"])
    answers = [c.request(method, {"id": asked["id"], **answer}) for c in (one, two)]
    replies = [one.response(answers[0]), two.response(answers[1])]
    assert sum("result" in r for r in replies) == 1 and sum("error" in r for r in replies) == 1, replies
    for client in (one, two):
        client.event(f"{kind}:resolved", id=asked["id"])
        client.wait_line(lambda x: x.get("event") == "message:delta" and outcome in (x.get("text") or ""))
        assert len(client.events(f"{kind}:resolved", id=asked["id"])) == 1


def test_a_client_that_stops_reading_is_disconnected_and_the_others_get_everything(serve, clients) -> None:
    server = serve(agent_block("a"))
    stuck = clients(server.path, read=False, rcvbuf=4096)
    reader = clients(server.path, read=False)  # read here, as fast as bytes come: never the one that lags
    reader.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ChatService.Send","params":{"agent":"a","text":"stream 200000"}}\n')
    reader.sock.settimeout(40)
    received = bytearray()
    end = b'"agent":"a","busy":false'
    while end not in received[-4096:]:
        chunk = reader.sock.recv(1 << 20)
        assert chunk, "the reader was disconnected"
        received += chunk
    lines = [json.loads(raw) for raw in bytes(received).splitlines()]
    text = "".join(x["text"] for x in lines if x.get("event") == "message:delta" and x["kind"] == "text")
    assert text == "".join(f"c{i} " for i in range(200000))
    assert contiguous(lines)
    assert [x["clients"] for x in lines if x.get("event") == "clients:changed"][-1] == 1  # the stuck one went
    stuck.sock.setblocking(False)
    kept = b""
    try:
        while chunk := stuck.sock.recv(1 << 20):
            kept += chunk
    except BlockingIOError:
        pytest.fail("the stuck client is still connected")
    except ConnectionResetError:
        pass
    assert len(kept) < 1024 * 1024  # what its socket held: the rest was dropped with it
    os.kill(server.pid, signal.SIGTERM)
    server.wait()
    assert b"stopped reading: disconnected" in server.stderr


def test_an_attached_client_that_fell_behind_is_told_so_when_it_reads_again(serve, clients, attach) -> None:
    server = serve(agent_block("a"))
    reader = clients(server.path, read=False)
    lagging = attach("t", "--frontend", "jsonl")
    lagging.event("clients:changed", clients=2)
    os.kill(lagging.popen.pid, signal.SIGSTOP)  # a suspended terminal: it reads nothing more
    try:
        reader.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ChatService.Send","params":{"agent":"a","text":"stream 200000"}}\n')
        reader.sock.settimeout(40)
        received = bytearray()
        while b'"agent":"a","busy":false' not in received[-4096:]:
            chunk = reader.sock.recv(1 << 20)
            assert chunk, "the reader was disconnected"
            received += chunk
    finally:
        os.kill(lagging.popen.pid, signal.SIGCONT)
    assert lagging.wait(30) == 1
    assert b"the deck server t disconnected this client: it fell behind" in lagging.err, lagging.err
    assert b"deck attach t" in lagging.err and b"went away" not in lagging.err


def test_a_client_gone_mid_request_leaves_the_server_consistent(serve, clients) -> None:
    server = serve(agent_block("a") + agent_block("b"))
    other = clients(server.path)
    gone = clients(server.path)
    gone.call("ChatService.Send", {"agent": "a", "text": "sleep 0.3"})
    gone.request("AgentService.Start", {"name": "b"})  # answered once b is ready: gone by then
    other.event("agent:state", agent="b", state="starting", timeout=20)
    gone.send_raw(b'{"jsonrpc": "2.0", "id": 9, "method": "DeckService.Snap')  # half a line, then nothing
    gone.close()
    other.event("turn:changed", agent="a", busy=False, timeout=20)
    other.event("agent:state", agent="b", state="ready", timeout=20)
    snapshot = other.call("DeckService.Snapshot")
    assert snapshot["conversations"]["a"]["busy"] is False
    assert [m["role"] for m in snapshot["conversations"]["a"]["messages"]] == ["user", "agent"]
    assert [a["state"] for a in snapshot["agents"]] == ["ready", "ready"]
    assert [c["pid"] for c in other.call("DeckService.Clients")] == [os.getpid()]
    assert other.events("clients:changed")[-1]["clients"] == 1


def test_a_client_done_sending_gets_its_answers_then_is_detached(serve, clients) -> None:
    """As `printf REQUEST | socat - UNIX-CONNECT:PATH` does: a line (its newline missing, as the jsonl
    bridge takes it), the end of its input (a half close), then it reads."""
    server = serve(agent_block("a", "--handshake-delay", "0.5"))
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(server.path))
    sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"AgentService.Start","params":{"name":"a"}}')  # no newline
    sock.shutdown(socket.SHUT_WR)
    sock.settimeout(20)
    received = b""
    while chunk := sock.recv(1 << 16):  # to the end: the server closes once it answered
        received += chunk
    sock.close()
    lines = [json.loads(raw) for raw in received.splitlines()]
    [answer] = [x for x in lines if x.get("id") == 1]
    assert answer["result"]["state"] == "ready"
    assert [c["pid"] for c in clients(server.path).call("DeckService.Clients")] == [os.getpid()]  # detached, then


# -- attach, send, ls, stop ----------------------------------------------------------------------


def test_attach_jsonl_sends_and_leaving_it_only_detaches(serve, attach, clients) -> None:
    server = serve(agent_block("a"))
    watcher = clients(server.path)
    attached = attach("t", "--frontend", "jsonl")
    attached.event("clients:changed", clients=2)
    attached.request(1, "ChatService.Send", {"agent": "a", "text": "stream 3"})
    assert attached.response(1)["result"]
    attached.request(2, "DeckService.Clients")
    assert len(attached.response(2)["result"]) == 2
    attached.request(3, "ChatService.Send", {"agent": "a", "text": "sleep 0.5"})
    attached.response(3)
    assert attached.popen.stdin is not None
    attached.popen.stdin.close()  # end of input mid-turn: detach, the turn goes on
    assert attached.wait() == 0
    watcher.event("clients:changed", clients=1)
    watcher.event("turn:changed", agent="a", busy=False, queued=0)  # both turns done
    assert reply_text(watcher.call("ChatService.Conversation", {"agent": "a"})) == "slept"
    assert server.popen.poll() is None


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_attach_jsonl_detaches_on_a_signal_with_its_number(serve, attach, clients, sig) -> None:
    server = serve(agent_block("a"))
    watcher = clients(server.path)
    attached = attach("t", "--frontend", "jsonl")
    attached.event("clients:changed", clients=2)
    attached.popen.send_signal(sig)
    assert attached.wait() == 128 + sig
    watcher.wait_for(lambda ls: [x for x in ls if x.get("event") == "clients:changed"][-1]["clients"] == 1)
    assert server.popen.poll() is None


def test_attach_jsonl_ends_quietly_when_its_reader_goes(serve) -> None:
    """`deck attach --frontend=jsonl | head -1`: the reader gone, the client ends with 0, saying nothing."""
    serve(agent_block("a"))
    shell = f"{shlex.join([*DECK, 'attach', 't', '--frontend=jsonl'])} | head -1; echo \"rc=${{PIPESTATUS[0]}}\""
    stdin = b'{"jsonrpc":"2.0","id":1,"method":"ChatService.Send","params":{"agent":"a","text":"stream 2000"}}\n'
    done = subprocess.run(["bash", "-c", shell], input=stdin, capture_output=True, timeout=30)
    assert done.stdout.splitlines()[-1] == b"rc=0" and done.stderr == b"", done


def test_attach_jsonl_writes_the_servers_event_lines_byte_for_byte(serve, attach, clients) -> None:
    """The event lines `deck attach --frontend=jsonl` writes are the bytes the server sends every client."""
    server = serve(agent_block("a"))
    watcher = clients(server.path)
    attached = attach("t", "--frontend", "jsonl")
    attached.event("clients:changed", clients=2)
    watcher.event("clients:changed", clients=2)
    attached.request(1, "ChatService.Send", {"agent": "a", "text": "echo é ✓ \u2028 \"q\" \\ \U0001f600 tab\t"})
    assert attached.response(1)["result"]

    def turn_ended(lines: list[dict[str, Any]]) -> bool:
        return any(x.get("event") == "turn:changed" and x.get("busy") is False for x in lines)

    attached.wait_for(turn_ended)
    watcher.wait_for(turn_ended)
    sent = {x["seq"]: raw for raw, x in zip(watcher.raw, watcher.lines) if "event" in x}
    written = {x["seq"]: raw for raw, x in zip(attached.raw, attached.lines) if "event" in x}
    shown = [seq for seq in written if seq > min(sent)]
    assert any(b"\\u2028" in written[seq] or "\u2028".encode() in written[seq] for seq in shown)
    assert [written[seq] for seq in shown] == [sent[seq] for seq in shown]


def test_attach_jsonl_imports_the_relay_alone(serve, tmp_path) -> None:
    """`deck attach --frontend=jsonl`, run as the `deck` script runs it, imports `deck.relay` and what
    it needs of deck's and nothing else: no parser of the command line, no asyncio, no plugin."""
    serve(agent_block("a"))
    requests = b"".join(
        json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}).encode() + b"\n"
        for n, (method, params) in enumerate(
            [("DeckService.Snapshot", {}), ("ChatService.Send", {"agent": "a", "text": "stream 3"})], 1
        )
    )
    code = (
        "import atexit, sys; out = sys.argv.pop(1); "
        "atexit.register(lambda: open(out, 'w').write('\\n'.join(sys.modules))); "
        "from deck.__main__ import main; main()"
    )
    for spelling in (["--frontend=jsonl"], ["-f", "jsonl"]):
        listed = tmp_path / "modules.txt"
        done = subprocess.run(
            [sys.executable, "-c", code, str(listed), "attach", "t", *spelling],
            input=requests, capture_output=True, timeout=30,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        answered = [json.loads(line) for line in done.stdout.splitlines()]
        assert {x.get("id") for x in answered if "result" in x} == {1, 2}
        imported = set(listed.read_text().split())
        ours = sorted(m for m in imported if m.split(".")[0] == "deck")
        assert ours == [
            "deck", "deck.__main__", "deck._version", "deck.errors", "deck.proc", "deck.proc.folders", "deck.remote",
            "deck.remote.relay", "deck.remote.serverdir",
        ]  # fmt: skip
        assert not imported & {"asyncio", "typer", "click", "pydantic", "rich", "urwid", "pluggy"}


THIRD_PARTY_FRONTEND = """
from deck import Frontend, hookimpl

class Count(Frontend):
    async def run(self):
        clients = await self.client.call("DeckService.Clients")
        print(f"{type(self.client).__name__} {len(clients)}", flush=True)
        await self.client.close()
        return 7

@hookimpl
def deck_register_frontends():
    return {"count": Count}
"""


def test_attach_runs_a_third_party_frontend_that_a_plugin_registers(serve, tmp_path) -> None:
    """A frontend deck does not ship is found among the plugins (the "deck" entry points) and attached."""
    serve(agent_block("a"))
    site = tmp_path / "site"
    (site / "deck_count-1.0.dist-info").mkdir(parents=True)
    (site / "deck_count-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: deck-count\nVersion: 1.0\n")
    (site / "deck_count-1.0.dist-info" / "entry_points.txt").write_text("[deck]\ncount = deck_count\n")
    (site / "deck_count.py").write_text(THIRD_PARTY_FRONTEND)
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("DECK_DISABLE_PLUGIN_AUTOLOAD", None)

    def attach_with(frontend: str) -> subprocess.CompletedProcess[bytes]:
        command = [*DECK, "attach", "t", f"--frontend={frontend}"]
        return subprocess.run(command, capture_output=True, env=env, timeout=30, stdin=subprocess.DEVNULL)

    done = attach_with("count")
    assert (done.returncode, done.stdout) == (7, b"SocketClient 1\n"), done.stderr
    unknown = attach_with("nope")
    assert unknown.returncode == 2 and b"count" in unknown.stderr and b"jsonl" in unknown.stderr


def test_attach_line_detaches_at_the_end_of_input_and_on_sighup(serve, attach, clients) -> None:
    server = serve(agent_block("a"))
    watcher = clients(server.path)
    line = attach("t", "--frontend", "line", json_lines=False)
    watcher.event("clients:changed", clients=2)
    line.send("@a echo over the socket")
    watcher.event("message:delta", agent="a", text="You said: echo over the socket", timeout=20)
    line.popen.send_signal(signal.SIGHUP)
    assert line.wait() == 128 + signal.SIGHUP
    watcher.wait_for(lambda ls: [x for x in ls if x.get("event") == "clients:changed"][-1]["clients"] == 1)
    assert b"over the socket" in line.out
    second = attach("t", "--frontend", "line", json_lines=False)
    second.send("@a echo again")
    assert second.popen.stdin is not None
    second.popen.stdin.close()
    assert second.wait() == 0
    assert reply_text(watcher.call("ChatService.Conversation", {"agent": "a"})) == "You said: echo again"
    assert server.popen.poll() is None and watcher.call("AgentService.List")[0]["state"] == "ready"


def test_an_attached_client_is_told_when_the_server_goes_away(serve, attach) -> None:
    server = serve(agent_block("a"))
    attached = attach("t", "--frontend", "jsonl")
    attached.event("clients:changed", clients=1)
    os.kill(server.pid, signal.SIGKILL)
    assert attached.wait() == 1
    assert b"the deck server t went away" in attached.err


def test_a_client_that_comes_and_goes_at_once_is_not_announced(serve, clients) -> None:
    """`deck ls` attaches for a moment: the consoles' client count does not blink."""
    server = serve(agent_block("a"))
    watcher = clients(server.path)
    watcher.event("clients:changed", clients=1)
    for _ in range(3):
        blip = socket.socket(socket.AF_UNIX)
        blip.connect(str(server.path))
        blip.close()
    listed = cli("ls", "--json")
    assert json.loads(listed.stdout)[0]["clients"] == 1
    staying = clients(server.path)
    staying.event("clients:changed", clients=2)
    watcher.event("clients:changed", clients=2)
    assert [e["clients"] for e in watcher.events("clients:changed")] == [1, 2]


def test_send_attach_ls_and_stop(serve, clients) -> None:
    server = serve(agent_block("a") + agent_block("b"))
    watcher = clients(server.path)
    sent = cli("send", "--attach", "t", "a", "echo through the server")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == "You said: echo through the server"
    watcher.call("ChatService.Send", {"agent": "b", "text": "slow"})
    watcher.event("message:delta", agent="b", timeout=20)
    listed = cli("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["name"] == "t" and row["pid"] == server.pid and row["config"].endswith("t.toml")
    assert (row["agents"], row["running"], row["busy"], row["clients"]) == (2, 2, 1, 1)
    assert row["since"]
    table = cli("ls")
    assert table.stdout.splitlines()[1].split()[:3] == ["t", str(server.pid), "2"]
    pids = server.descendants()
    stopped = cli("stop", "t")
    assert stopped.returncode == 0, stopped.stderr
    assert server.wait() == 0
    assert wait_dead(pids) == []
    assert not server.path.exists()
    watcher.wait_end()
    assert watcher.events("agent:state", agent="b", state="stopped")  # the clients saw the agents stop
    assert json.loads(cli("ls", "--json").stdout) == []


def test_no_server_is_a_clear_error_naming_the_socket(runtime) -> None:
    jsonl = ["attach", "nope", "--frontend", "jsonl"]
    for args in (["attach", "nope", "--frontend", "line"], jsonl, [*jsonl, "-p", "no:logs"], ["stop", "nope"], ["send", "--attach", "nope", "a", "hi"]):
        done = cli(*args)  # jsonl relayed at once, and through the command line's parser (with -p)
        assert done.returncode == 1, args
        assert "no deck server named nope is running" in done.stderr
        assert str(runtime / "deck" / "nope.sock") in done.stderr and "deck serve --name nope" in done.stderr


def test_serve_detach_works_from_a_folder_that_holds_a_deck_package_of_its_own(tmp_path, runtime, clients, shadowing_folder) -> None:
    (tmp_path / "deck.toml").write_text(agent_block("a"))
    done = subprocess.run([*DECK, "serve", "--config", str(tmp_path / "deck.toml"), "--name", "sh", "--detach"],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, cwd=shadowing_folder)  # fmt: skip
    try:
        assert done.returncode == 0, done.stderr
        assert clients(socket_path("sh")).call("AgentService.List")[0]["name"] == "a"
    finally:
        cli("stop", "sh")


def test_serve_detach_returns_once_it_listens(tmp_path, runtime, clients) -> None:
    (tmp_path / "deck.toml").write_text(agent_block("a"))
    done = cli("serve", "--config", str(tmp_path / "deck.toml"), "--name", "bg", "--detach")
    try:
        assert done.returncode == 0, done.stderr
        pid = json.loads((runtime / "deck" / "bg.json").read_text())["pid"]
        assert f"pid {pid}" in done.stdout
        assert os.getsid(pid) == pid  # a session of its own: the terminal's SIGHUP does not reach it
        assert clients(socket_path("bg")).call("AgentService.List")[0]["name"] == "a"
        log = Path(os.environ["XDG_STATE_HOME"]) / "deck" / "serve-bg.log"
        assert "listening on" in log.read_text()
        failed = cli("serve", "--config", str(tmp_path / "deck.toml"), "--name", "bg", "--detach")
        assert failed.returncode == 1 and "already running" in failed.stderr
    finally:
        assert cli("stop", "bg").returncode == 0
    assert wait_dead([pid]) == []
    (tmp_path / "bad.toml").write_text("[agents.a]\ncommand = 3\n")
    bad = cli("serve", "--config", str(tmp_path / "bad.toml"), "--name", "bg", "--detach")
    assert bad.returncode != 0
    assert "bad.toml:2" in bad.stderr  # what the server said, before it ended


# -- the end of a server -------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_stops_every_agent_and_removes_the_socket(serve, clients, sig) -> None:
    server = serve(agent_block("a") + agent_block("b"))
    client = clients(server.path)
    client.call("ChatService.Send", {"agent": "a", "text": "slow"})
    client.call("AgentService.Start", {"name": "b"})
    client.event("message:delta", agent="a", timeout=20)
    pids = server.descendants()
    assert pids
    os.kill(server.pid, sig)
    assert server.wait() == 128 + sig
    assert wait_dead(pids) == []
    assert not server.path.exists() and not (server.path.parent / "t.json").exists()
    client.wait_end()
    assert client.events("agent:state", agent="a", state="stopped")


def test_a_server_killed_leaves_no_agent(serve, clients) -> None:
    server = serve(agent_block("a"))
    client = clients(server.path)
    client.call("ChatService.Send", {"agent": "a", "text": "slow"})
    client.event("message:delta", agent="a", timeout=20)
    pids = server.descendants()
    os.kill(server.pid, signal.SIGKILL)
    server.wait()
    assert wait_dead(pids) == []
    assert [p for p in pids if alive(p)] == []


def test_a_restarted_server_has_its_conversations_back(serve, clients) -> None:
    server = serve(agent_block("a"))
    client = clients(server.path)
    client.call("ChatService.Send", {"agent": "a", "text": "echo remembered"})
    client.wait_for(lambda ls: any(x.get("event") == "turn:changed" and x.get("agent") == "a" and not x["busy"] for x in ls), 20)
    assert cli("stop", "t").returncode == 0
    server.wait()
    again = serve(agent_block("a"))
    conversation = clients(again.path).call("ChatService.Conversation", {"agent": "a"})
    assert [m["role"] for m in conversation["messages"]][:2] == ["user", "agent"]
    assert reply_text(conversation) == "You said: echo remembered"


# -- the socket client -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_socket_client_follows_calls_and_learns_that_the_server_went_away(serve) -> None:
    import asyncio

    from deck.errors import METHOD_NOT_FOUND, ServiceError
    from deck.events import MessageDelta, TurnChanged
    from deck.remote.socket_client import SocketClient

    server = serve(agent_block("a") + agent_block("b", "--handshake-delay", "30"))
    client = SocketClient("t")
    await client.connect()
    assert client.attached
    seen: list[Any] = []
    idle = asyncio.Event()
    snapshot: dict[str, Any] = {}

    def listener(event: Any) -> None:
        seen.append(event)
        if isinstance(event, TurnChanged) and not event.busy:
            idle.set()

    await client.follow(listener, snapshot.update)
    reply = client.call("ChatService.Send", {"agent": "a", "text": "stream 50"})
    assert (await reply).startswith("msg-")
    await asyncio.wait_for(idle.wait(), 20)
    assert all(event.seq > snapshot["seq"] for event in seen)
    assert "".join(e.text for e in seen if isinstance(e, MessageDelta)) == "".join(f"c{i} " for i in range(50))
    with pytest.raises(ServiceError) as refused:
        await client.call("Nope.Nothing")
    assert refused.value.code == METHOD_NOT_FOUND and refused.value.data is None
    bad = Path(tempfile.mkdtemp(prefix="dk-")) / "bad.toml"
    bad.write_text("[agents.x]\ncommand = 5\n")
    with pytest.raises(ServiceError, match="not a valid config") as invalid:
        await client.call("ConfigService.Open", {"path": str(bad)})
    assert invalid.value.data["problems"][0]["line"] == 2  # what the refusal names comes across too
    starting = client.call("AgentService.Start", {"name": "b"})  # its handshake takes 30 s: pending
    os.kill(server.pid, signal.SIGKILL)
    with pytest.raises(ServiceError, match="the deck server t went away"):
        await asyncio.wait_for(starting, 10)
    assert client.ended is not None and await client.ended == 1
    with pytest.raises(ServiceError, match="went away"):
        await client.call("AgentService.List")
    await client.close()


@pytest.mark.anyio
async def test_a_big_response_does_not_count_as_a_client_that_stopped_reading(make_deck, runtime, monkeypatch) -> None:
    """A snapshot larger than the queue's limit is what the client asked for: it is kept, then the limit applies."""
    import asyncio

    from deck.remote import peer
    from deck.remote.server import ServerFrontend, listen

    monkeypatch.setattr(peer, "QUEUE_LIMIT", 64 * 1024)
    loop = asyncio.get_running_loop()
    deck, recorder = make_deck(agent_block("a"))
    ready_read, ready_write = os.pipe()
    ready = loop.create_future()
    loop.add_reader(ready_read, lambda: None if ready.done() else ready.set_result(None))
    running = loop.create_task(deck.run(ServerFrontend, listening=listen("u", "test"), ready_fd=ready_write))
    made: list[socket.socket] = []

    rest: dict[socket.socket, bytes] = {}

    async def read_until(sock: socket.socket, marker: bytes) -> bytes:
        """The whole lines `sock` receives, up to the end of the line that holds `marker`."""
        received = bytearray(rest.pop(sock, b""))
        at = received.find(marker)
        async with asyncio.timeout(20):
            while at < 0 or received.find(b"\n", at) < 0:
                chunk = await loop.sock_recv(sock, 1 << 20)
                assert chunk, "disconnected"
                received += chunk
                if at < 0 and (found := received.find(marker, max(0, len(received) - len(chunk) - len(marker)))) >= 0:
                    at = found
        end = received.rfind(b"\n") + 1
        rest[sock] = bytes(received[end:])
        return bytes(received[:end])

    def connect() -> socket.socket:
        """A client that reads nothing until told to (a StreamReader would read ahead)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(str(socket_path("u")))
        sock.setblocking(False)
        made.append(sock)
        return sock

    try:
        await asyncio.wait({ready, running}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        assert ready.done(), running
        await deck.call("ChatService.Send", {"agent": "a", "text": "big 1000000"})
        await recorder.wait_event("turn:changed", agent="a", busy=False, timeout=20)
        asker = connect()
        await recorder.wait_event("clients:changed", clients=1)
        asker.send(b'{"jsonrpc":"2.0","id":2,"method":"DeckService.Snapshot"}\n')  # 1 MB, not read yet
        served = deck.frontend
        assert isinstance(served, ServerFrontend)
        async with asyncio.timeout(20):
            while not any(c.transport and c.transport.get_write_buffer_size() > 64 * 1024 for c in served.connections.values()):
                await asyncio.sleep(0.01)  # the snapshot is on its way into the queue: no event says when
        stuck = connect()  # its coming is an event for the asker, whose queue is past the limit: it stays
        await recorder.wait_event("clients:changed", clients=2)
        received = await read_until(asker, b'"clients":2}')  # after the snapshot
        replies = {x["id"]: x for x in map(json.loads, received.splitlines()) if "id" in x}
        assert reply_text(replies[2]["result"]["conversations"]["a"]) == "x" * 1000000
        asker.send(b'{"jsonrpc":"2.0","id":3,"method":"ChatService.Send","params":{"agent":"a","text":"stream 20000"}}\n')
        streamed = await read_until(asker, b'"agent":"a","busy":false')  # read as it comes; the stuck one does not
        assert streamed.count(b'"event":"message:delta"') > 0
        counts = await recorder.wait(lambda r: len(r.named("clients:changed")) == 3 and r.named("clients:changed"), 20)
        assert [c["clients"] for c in counts] == [1, 2, 1]  # the stuck one went, the asker stayed
        asker.send(b'{"jsonrpc":"2.0","id":4,"method":"DeckService.Clients"}\n')
        clients_now = await read_until(asker, b'"id":4')
        [line] = [x for x in map(json.loads, clients_now.splitlines()) if x.get("id") == 4]
        assert len(line["result"]) == 1
    finally:
        loop.remove_reader(ready_read)
        for sock in made:
            sock.close()
        deck.request_exit(0)
        await running
        os.close(ready_read)
