"""`deck attach --frontend=jsonl` (the relay) against what a hostile user or program gives it: real
`deck serve` processes, real `deck attach` processes, odd stdin, stdout and command lines."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from deck.__main__ import relayed
from deck.remote import serverdir

from tests.conftest import agent_block
from tests.core.remote.test_server import Lines, attach, cli, clients, runtime, serve  # noqa: F401 - fixtures
from tests.deck_process import DECK

pytestmark = pytest.mark.timeout(60)

ATTACH = [*DECK, "attach", "t", "--frontend=jsonl"]


def request(request_id: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}).encode() + b"\n"


def shell(command: str, stdin: bytes = b"", timeout: float = 20) -> subprocess.CompletedProcess[bytes]:
    """`command` run by bash, the relay's exit code printed last on stdout as `rc=N`."""
    script = f"timeout -s KILL 10 {command}; echo rc=$?"
    return subprocess.run(["bash", "-c", script], input=stdin, capture_output=True, timeout=timeout)


def exit_code(done: subprocess.CompletedProcess[bytes]) -> int:
    return int(done.stdout.splitlines()[-1].removeprefix(b"rc="))


# -- stdin's lines ------------------------------------------------------------------------------


def test_a_line_of_100_mb_is_skipped_by_the_server_the_next_answered_and_the_relay_stays_small(serve, attach) -> None:
    serve(agent_block("a"))
    attached = attach("t", "--frontend=jsonl")
    attached.event("clients:changed", clients=1)
    process = psutil.Process(attached.popen.pid)
    before = process.memory_info().rss
    peak = before
    stdin = attached.popen.stdin
    assert stdin is not None
    chunk = b"x" * (1 << 20)
    for n in range(100):
        stdin.write(chunk)
        if n % 10 == 0:
            peak = max(peak, process.memory_info().rss)
    stdin.write(b"\n" + request(1, "DeckService.Clients"))
    stdin.flush()
    skipped = attached.wait_line(lambda x: x.get("id") is None and "error" in x)
    assert "too long" in skipped["error"]["message"]
    assert len(attached.response(1)["result"]) == 1
    peak = max(peak, process.memory_info().rss)
    stdin.close()
    assert attached.wait() == 0, attached.err
    assert peak - before < 8 * 1024 * 1024, (before, peak)


def test_bad_bytes_and_nesting_bombs_get_their_error_lines_and_the_client_goes_on(serve, attach) -> None:
    """A line refused for its nesting is no refusal of the client: the relay ends with 0, saying nothing."""
    serve(agent_block("a"))
    attached = attach("t", "--frontend=jsonl")
    attached.event("clients:changed", clients=1)
    nested: dict[str, Any] = {"deep": 1}
    for _ in range(300):
        nested = {"n": nested}
    lines = [
        b"\xff\xfe\xc0\x80 not utf-8\n",
        b"[" * 100_000 + b"\n",
        b'{"a":' * 50_000 + b"\n",
        json.dumps({"jsonrpc": "2.0", "id": 5, "method": "DeckService.Clients", "params": nested}).encode() + b"\n",
        request(6, "DeckService.Clients"),
    ]
    assert attached.popen.stdin is not None
    attached.popen.stdin.write(b"".join(lines))
    attached.popen.stdin.flush()
    assert len(attached.response(6)["result"]) == 1
    errors = [x for x in attached.lines if "error" in x]
    assert [x["id"] for x in errors] == [None] * 4, errors
    assert sum("nested deeper" in x["error"]["message"] for x in errors) == 3
    attached.popen.stdin.close()
    assert attached.wait() == 0
    assert attached.err == b""


IDS: list[Any] = [
    7,
    7,  # twice: both answered
    0,
    -3,
    10**30,
    "",
    'q"\\/\b\f\n\r\t',
    "é ✓ \u2028 \U0001f600",
    "\ud800",  # a lone surrogate: the server writes it as its escape
    "x" * 5000,  # longer than the start of a response the relay reads
]


def test_requests_with_ids_of_every_kind_are_answered_before_the_relay_ends_with_0(serve) -> None:
    serve(agent_block("a"))
    stdin = b"".join(request(i, "AgentService.List") for i in IDS)
    stdin += b"".join(
        [
            b'{"jsonrpc":"2.0","id":1.5,"method":"AgentService.List"}\n',
            b'{"jsonrpc":"2.0","id":true,"method":"AgentService.List"}\n',
            b'{"jsonrpc":"2.0","id":null,"method":"AgentService.List"}\n',
            b'{"jsonrpc":"2.0","id":[1],"method":"AgentService.List"}\n',
            b'[{"jsonrpc":"2.0","id":8,"method":"AgentService.List"}]\n',
            b'{"jsonrpc":"2.0","id":9,"id":10,"method":"AgentService.List"}\n',
            b'{"jsonrpc":"2.0","id":"\\u00e9\\ud83d\\ude00","method":"AgentService.List"}\n',
        ]
    )
    done = subprocess.run(ATTACH, input=stdin, capture_output=True, timeout=20)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    answers = [x for x in map(json.loads, done.stdout.splitlines()) if "jsonrpc" in x]
    answered = [x["id"] for x in answers if "result" in x]
    assert sorted(map(json.dumps, answered)) == sorted(map(json.dumps, [*IDS, 10, "é😀", None]))  # null: answered null
    assert [x["id"] for x in answers if "error" in x] == [None] * 4  # the float, the bool, the list, the batch


def test_the_end_of_stdin_during_a_long_request_waits_for_its_answer(serve) -> None:
    serve(agent_block("a", "--handshake-delay", "0.5"))
    done = subprocess.run(ATTACH, input=request(1, "AgentService.Start", {"name": "a"}), capture_output=True, timeout=20)
    assert done.returncode == 0, done.stderr
    [answer] = [x for x in map(json.loads, done.stdout.splitlines()) if x.get("id") == 1]
    assert answer["result"]["state"] == "ready"


def test_a_last_line_without_its_newline_is_answered(serve) -> None:
    """`printf '{…}' | deck attach --frontend=jsonl`: the jsonl frontend reads a last line with no newline."""
    serve(agent_block("a"))
    done = subprocess.run(ATTACH, input=request(1, "AgentService.List").rstrip(), capture_output=True, timeout=20)
    assert done.returncode == 0, done.stderr
    assert [x["id"] for x in map(json.loads, done.stdout.splitlines()) if "result" in x] == [1]


# -- stdin, stdout and stderr closed or odd -------------------------------------------------------


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to be another uid")
def test_a_client_of_another_uid_is_told_it_was_refused(serve) -> None:
    """The refusal is the server's first line to a client that does not check the server (not
    deck's); deck's own refuses the server first, the other way round, in one line."""
    server = serve(agent_block("a"))
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 "--inh-caps=+dac_override", "--ambient-caps=+dac_override"]  # fmt: skip
    raw = "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(s.makefile().readline(), end='')"
    done = subprocess.run([*as_nobody, sys.executable, "-c", raw, str(server.path)], capture_output=True, timeout=20)
    assert json.loads(done.stdout)["error"]["message"] == "refused: this deck server is uid 0's, and you are uid 65534"
    code = "import sys; from pathlib import Path; from deck.remote.relay import relay; sys.exit(relay('t', Path(sys.argv[1])))"
    command = [*as_nobody, sys.executable, "-c", code, str(server.path)]
    done = subprocess.run(command, input=request(1, "AgentService.List"), capture_output=True, timeout=20)
    assert done.returncode == 1, done
    assert done.stderr == f"deck: refused the deck server t at {server.path}: it runs as uid 0, not as you (65534)\n".encode()


def test_a_server_of_our_own_uid_passes_the_check_and_one_of_another_is_refused() -> None:
    """The check a client makes on connecting, on a real pair of sockets (both ends ours)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        assert serverdir.peer_uid(ours) == os.getuid()
        serverdir.check_peer(ours, "t", Path("t.sock"))
        with pytest.raises(serverdir.ServerError) as refused:
            serverdir.check_peer(ours, "t", Path("t.sock"), uid=os.getuid() + 1)
    assert str(refused.value) == f"refused the deck server t at t.sock: it runs as uid {os.getuid()}, not as you ({os.getuid() + 1})"


def test_connecting_to_a_server_of_another_uid_is_refused_and_the_socket_closed(tmp_path, monkeypatch) -> None:
    """A real listening socket; this process made to be of another uid than the one that listens."""
    path, mine = tmp_path / "t.sock", os.getuid()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen()
        _path, connected = serverdir.connect("t", path)  # ours: connected
        connected.close()
        monkeypatch.setattr(serverdir.os, "getuid", lambda: mine + 4242)
        with pytest.raises(serverdir.ServerError) as refused:
            serverdir.connect("t", path)
        monkeypatch.undo()
        listener.accept()[0].close()
        accepted, _ = listener.accept()
        with accepted:
            assert accepted.recv(100) == b""  # the refused client closed its end, having sent nothing
    assert str(refused.value) == f"refused the deck server t at {path}: it runs as uid {mine}, not as you ({mine + 4242})"


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to be another uid")
def test_attach_refuses_a_server_socket_another_user_listens_on(tmp_path) -> None:
    """Another user's process listens where the client looks (a socket given by its path): `deck
    attach` says so in one line and exits 1, having sent nothing."""
    folder = tempfile.mkdtemp(prefix="dk-", dir="/tmp")
    os.chmod(folder, 0o777)
    path = Path(folder) / "t.sock"
    listen = ("import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); "
              "print('ready', flush=True); c, _ = s.accept(); print(repr(c.recv(100)), flush=True); time.sleep(5)")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    server = subprocess.Popen([*as_nobody, sys.executable, "-c", listen, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline() == "ready\n"
        code = "import sys; from pathlib import Path; from deck.remote.relay import relay; sys.exit(relay('t', Path(sys.argv[1])))"
        done = subprocess.run([sys.executable, "-c", code, str(path)], input=request(1, "AgentService.List"),
                              capture_output=True, timeout=20)  # fmt: skip
        assert done.returncode == 1, done
        assert done.stderr == f"deck: refused the deck server t at {path}: it runs as uid 65534, not as you (0)\n".encode()
        assert server.stdout.readline() == "b''\n"  # connected, then closed: not a byte sent
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("redirect", ["<&-", "</dev/null"])
def test_a_closed_or_empty_stdin_is_the_end_of_input(serve, redirect) -> None:
    """With stdin closed, the relay's socket must not become descriptor 0 and read back its own lines."""
    serve(agent_block("a"))
    done = shell(f"{shlex.join(ATTACH)} {redirect}")
    assert exit_code(done) == 0, done
    assert done.stderr == b""
    assert not [x for x in map(json.loads, done.stdout.splitlines()[:-1]) if "jsonrpc" in x]  # nothing was sent


def test_a_closed_stdout_is_an_error_saying_so(serve) -> None:
    serve(agent_block("a"))
    done = shell(f"{shlex.join(ATTACH)} >&-", stdin=request(1, "AgentService.List"))
    assert exit_code(done) == 1, done
    assert b"cannot write to stdout" in done.stderr


@contextlib.contextmanager
def streamed_into_a_full_pipe(serve, clients, *, blocking: bool) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A relay whose stdout is a pipe nobody reads yet, once a 20,000-chunk answer has filled it:
    the relay and the pipe's read end."""
    server = serve(agent_block("a"))
    watcher = clients(server.path)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, blocking)
    popen = subprocess.Popen(ATTACH, stdin=subprocess.PIPE, stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    try:
        watcher.event("clients:changed", clients=2)
        assert popen.stdin is not None
        popen.stdin.write(request(1, "ChatService.Send", {"agent": "a", "text": "stream 20000"}))
        popen.stdin.flush()
        watcher.event("turn:changed", agent="a", busy=False, timeout=30)  # the relay's pipe is full by now
        yield popen, read_end
    finally:
        os.close(read_end)
        if popen.poll() is None:
            popen.kill()
        popen.wait(5)


def test_a_non_blocking_stdout_that_fills_up_is_waited_for(serve, clients) -> None:
    """A pipe some parent made non-blocking: a full one is waited for, not an error."""
    with streamed_into_a_full_pipe(serve, clients, blocking=False) as (popen, read_end):
        assert popen.stdin is not None
        popen.stdin.close()
        received = bytearray()
        while chunk := os.read(read_end, 1 << 20):
            received += chunk
        assert popen.wait(20) == 0, popen.stderr.read() if popen.stderr else b""
    lines = [json.loads(raw) for raw in received.splitlines()]
    assert sum(x.get("event") == "message:delta" for x in lines) >= 20000
    assert any(x.get("event") == "turn:changed" and x.get("busy") is False for x in lines)


def test_a_signal_while_blocked_writing_to_stdout_detaches_at_once(serve, clients) -> None:
    with streamed_into_a_full_pipe(serve, clients, blocking=True) as (popen, _read_end):
        popen.send_signal(signal.SIGINT)  # nobody read: the relay waits on stdout
        assert popen.wait(5) == 128 + signal.SIGINT
        assert popen.stderr is not None and popen.stderr.read() == b""


def test_a_full_stdout_nobody_reads_is_dropped_by_the_server_and_says_so_once_read(serve, clients) -> None:
    server = serve(agent_block("a"))
    watcher = clients(server.path, read=False)
    read_end, write_end = os.pipe()
    popen = subprocess.Popen(ATTACH, stdin=subprocess.PIPE, stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    try:
        watcher.send_raw(request(1, "DeckService.Clients"))
        watcher.sock.settimeout(40)
        received = bytearray()
        while b'"clients":2' not in received:
            received += watcher.sock.recv(1 << 20)
        watcher.send_raw(request(2, "ChatService.Send", {"agent": "a", "text": "stream 200000"}))
        received = bytearray()
        while True:  # read here as fast as it comes, until the relay is gone
            chunk = watcher.sock.recv(1 << 20)
            assert chunk, "the watcher was disconnected"
            if b'"clients":1' in received[-16:] + chunk:
                break
            received = received[-16:] + chunk
        while os.read(read_end, 1 << 20):  # reading again: what was taken, then the end
            pass
        assert popen.wait(10) == 1
        assert popen.stderr is not None
        assert b"the deck server t disconnected this client: it fell behind" in popen.stderr.read()
    finally:
        os.close(read_end)
        if popen.poll() is None:
            popen.kill()
        popen.wait(5)


def test_a_signal_ignored_at_the_start_stays_ignored(serve) -> None:
    """`nohup deck attach --frontend=jsonl &`: a hangup ignored by who started it does not detach."""
    serve(agent_block("a"))
    command = f"trap '' HUP; exec {shlex.join(ATTACH)}"
    popen = subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = Lines()
        threading.Thread(target=out.feed, args=(popen.stdout,), daemon=True).start()
        out.event("clients:changed", clients=1)
        popen.send_signal(signal.SIGHUP)
        assert popen.stdin is not None
        popen.stdin.write(request(1, "AgentService.List"))
        popen.stdin.close()
        assert out.response(1)["result"]
        assert popen.wait(10) == 0
    finally:
        if popen.poll() is None:
            popen.kill()
        popen.wait(5)


def test_a_server_killed_mid_stream_is_said_gone(serve, attach) -> None:
    server = serve(agent_block("a"))
    attached = attach("t", "--frontend=jsonl")
    attached.event("clients:changed", clients=1)
    attached.request(1, "ChatService.Send", {"agent": "a", "text": "stream 200000"})
    attached.event("message:delta")
    os.kill(server.pid, signal.SIGKILL)
    assert attached.wait() == 1
    assert attached.err == b"deck: the deck server t went away\n"


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["attach", "-fjsonl", "x"], ["x"]),
        (["attach", "x", "-f", "jsonl"], ["x"]),
        (["attach", "--frontend", "jsonl"], []),
        (["attach", "x", "--frontend", "jsonl", "extra"], None),
        (["attach", "--frontend=jsonl", "--help"], None),
        (["attach", "--frontend=jsonl", "-p", "no:x"], None),
        (["attach", "--frontend=jsonl", "--frontend=jsonl"], None),
        (["attach", "--", "--frontend=jsonl"], None),
        (["attach", "--frontend=jsonl", ""], None),  # no name: the parser says so
        (["attach", "--frontend=line"], None),
        (["serve", "--frontend=jsonl"], None),
    ],
)
def test_only_attach_name_and_the_jsonl_frontend_is_relayed(args, names) -> None:
    assert relayed(args) == names


def test_the_command_lines_the_relay_does_not_take_get_the_parsers_answers(runtime) -> None:
    extra = subprocess.run([*DECK, "attach", "t", "--frontend", "jsonl", "extra"], capture_output=True, timeout=30)
    assert extra.returncode == 2 and b"unexpected extra argument" in extra.stderr, extra
    helped = subprocess.run([*DECK, "attach", "--frontend=jsonl", "--help"], capture_output=True, timeout=30)
    assert helped.returncode == 0 and b"Attach a frontend" in helped.stdout, helped
    empty = subprocess.run([*DECK, "attach", "-fjsonl", ""], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert empty.returncode == 1 and b"bad server name ''" in empty.stderr, empty


def test_the_relay_reads_a_requests_depth_as_the_server_does() -> None:
    from deck.acp import connection as acp
    from deck.remote import relay

    assert relay.MAX_DEPTH == acp.MAX_DEPTH
    deep: Any = 1
    for _ in range(acp.MAX_DEPTH - 1):
        deep = [deep]
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "A.B", "params": deep}).encode()
    assert relay.request_key(line) == ("1", "A.B")  # the request and its params: as deep as the server reads
    assert relay.request_key(line.replace(b"[1]", b"[[1]]")) == (None, None)


def test_a_server_stopped_on_purpose_is_said_stopped_not_gone(serve, attach) -> None:
    serve(agent_block("a"))
    attached = attach("t", "--frontend=jsonl")
    attached.event("clients:changed", clients=1)
    assert cli("stop", "t").returncode == 0
    assert attached.wait() == 1
    assert attached.err == b"deck: the deck server t was stopped\n"
