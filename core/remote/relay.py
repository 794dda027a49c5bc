"""`deck attach --frontend=jsonl`: stdin and stdout joined to a deck server's socket.

The server's wire is the jsonl bridge's, so the jsonl frontend attached is a relay: what comes
on stdin goes to the socket as it came, and what the server writes goes to stdout as it came —
its event lines and its answers, byte for byte, in its order. The server reads the requests
(a bad line gets its error line from there, as from `deck run --frontend=jsonl`). The relay
needs the standard library alone, and little of it, so it starts in about the time Python does.

It reads just enough of the lines to end as the jsonl frontend does:

- the end of stdin is a half close: the server answers what was asked, then closes, and the
  relay ends with 0 (a server that closes before answering everything went away: 1); a last
  line with no newline gets one, so it is read as the jsonl frontend reads it;
- a `DeckService.Shutdown` it passed on makes the server's close the end asked for: 0;
- SIGINT, SIGTERM and SIGHUP detach at once, with 128 + the signal's number (one ignored when
  the relay starts, as under `nohup`, stays ignored);
- a server gone says so on stderr ("went away"; or that it dropped this client for falling
  behind, when it still listens a moment later) and ends with 1;
- stdout closed by its reader (`| head -1`) ends quietly with 0; a stdout that is full waits,
  non-blocking or not (and the server, not waiting, may drop this client meanwhile).

A standard stream closed at the start (`<&-`) is held by /dev/null, opened so that it acts as
closed: the socket never takes its number, to read back its own lines or write to the server.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import time
from pathlib import Path
from typing import Any

from deck.remote.serverdir import ServerError, connect, fell_behind, listening, refused, went_away

#: Seconds between losing the connection and telling a server gone from a client dropped.
LOSS_SETTLES = 0.3
#: How each response line of the server begins (`deck.wire`): no event line does.
RESPONSE_PREFIX = b'{"jsonrpc":"2.0","id":'
#: The longest request line whose id is read; a longer one is the server's to refuse.
REQUEST_READ_BYTES = 1024 * 1024
#: The longest id (as JSON) waited for: a response's start, all that is read of it, holds it.
ID_BYTES = 4096
#: How deep the server reads a line (`deck.acp.MAX_DEPTH`): a deeper request gets no answer of its own.
MAX_DEPTH = 200
#: What is kept of a response line's start: its id is there.
_HEAD = len(RESPONSE_PREFIX) + ID_BYTES
_LINE_RESPONSE = b"\n" + RESPONSE_PREFIX
_READ = 256 * 1024
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_id_decoder = json.JSONDecoder()


class _Leave(Exception):
    """Leave now, with exit code `code` (a signal, stdout gone)."""

    def __init__(self, code: int) -> None:
        self.code = code


def _signalled(signum: int, _frame: object) -> None:
    raise _Leave(128 + signum)


def request_key(line: bytes) -> tuple[str | None, str | None]:
    """The id (as a JSON text) and method of the request `line`, as the server will read it:
    (None, None) for a line that gets no answer of its own (a notification, a bad line). An id
    too long to be read back from its answer's start is not waited for: (None, method)."""
    if len(line) > REQUEST_READ_BYTES:
        return None, None
    try:
        request = json.loads(line.decode(errors="replace").strip())
    except (ValueError, RecursionError):
        return None, None
    if not isinstance(request, dict) or request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
        return None, None
    if line.count(b"{") + line.count(b"[") > MAX_DEPTH and _deeper_than(request, MAX_DEPTH):
        return None, None  # the server refuses it whole, with an error line of no id
    request_id = request.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (int, str)):
        return None, request["method"]
    key = json.dumps(request_id)  # no shorter than the server's UTF-8 of it
    return (key if len(key) <= ID_BYTES else None), request["method"]


def _deeper_than(value: object, limit: int) -> bool:
    """Whether `value` nests arrays and objects more than `limit` deep (without recursion)."""
    level: list[object] = [value]
    for _depth in range(limit):
        level = [v for x in level if isinstance(x, (dict, list)) for v in (x.values() if isinstance(x, dict) else x)]
        if not level:
            return False
    return any(isinstance(x, (dict, list)) for x in level)


def response_key(line: bytes) -> str | None:
    """The id (as a JSON text) a response line of the server answers, read from its start alone
    (a snapshot's answer may be megabytes); None for a line that is no response."""
    if not line.startswith(RESPONSE_PREFIX):
        return None
    start = len(RESPONSE_PREFIX)
    head = line[start:_HEAD].decode(errors="replace")
    try:
        request_id, _end = _id_decoder.raw_decode(head)
    except ValueError:
        return None
    return json.dumps(request_id)


class Relay:
    """One attachment: the socket `sock` of server `name`, stdin `stdin_fd`, stdout `stdout_fd`."""

    def __init__(self, name: str, path: Path, sock: socket.socket, stdin_fd: int, stdout_fd: int) -> None:
        self.name = name
        self.path = path
        self.sock = sock
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        #: The requests passed on and not answered yet: id (as JSON) → how many.
        self.unanswered: dict[str, int] = {}
        self.stopping = False  # a DeckService.Shutdown was passed on
        self.done_sending = False  # stdin ended: the socket is half closed
        self.gone = ""  # why the server ended this client, when it said so
        self.received = 0  # bytes of the server's before the data being read
        self._request = bytearray()  # stdin's line begun (its first REQUEST_READ_BYTES + 1 bytes)
        self._begun: bytearray | None = None  # the start of the server's line begun, when it may be a response
        self._begun_first = False  # whether that line is the server's first
        self._at_start = True  # whether the server's next bytes begin a line
        self._room = select.poll()  # stdout's room, waited for when it is non-blocking and full
        self._room.register(stdout_fd, select.POLLOUT)

    def run(self) -> int:
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        poller.register(self.stdin_fd, select.POLLIN)
        while True:
            for fd, _mask in poller.poll():
                if fd != self.stdin_fd:
                    try:
                        data = self.sock.recv(_READ)
                    except OSError:
                        data = b""
                    if not data:
                        return self._ended()
                    self._responses(data)
                    self.received += len(data)
                    self._write(data)
                    continue
                try:
                    data = os.read(self.stdin_fd, _READ)
                except BlockingIOError:
                    continue
                except OSError:  # a stdin closed or unreadable is an end of input
                    data = b""
                try:
                    if data:
                        self._requests(data)
                        self.sock.sendall(data)
                        continue
                    poller.unregister(self.stdin_fd)
                    if self._request.strip():  # a last line with no newline: as the jsonl frontend reads it
                        self._requests(b"\n")
                        self.sock.sendall(b"\n")
                    self.done_sending = True
                    self.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    return self._ended()

    def _requests(self, data: bytes) -> None:
        """Note the requests of stdin's lines ending in `data`."""
        *lines, rest = data.split(b"\n")
        if lines:
            lines[0] = bytes(self._request + lines[0]) if self._request else lines[0]
            self._request.clear()
        if len(self._request) <= REQUEST_READ_BYTES:
            self._request += rest[: REQUEST_READ_BYTES + 1 - len(self._request)]  # past the cap, the id is not read
        for line in lines:
            key, method = request_key(line)
            if method == "DeckService.Shutdown":
                self.stopping = True
            if key is not None:
                self.unanswered[key] = self.unanswered.get(key, 0) + 1

    def _responses(self, data: bytes) -> None:
        """Note the answers among the server's lines in `data`. Only a line's start is looked at, and
        only the starts of responses are searched for: event lines are skipped by `bytes.find`."""
        n, pos = len(data), 0
        if self._begun is not None:  # a response line cut at the end of the last data
            end = data.find(b"\n")
            room = _HEAD - len(self._begun)
            self._begun += data[: min(n if end < 0 else end, max(room, 0))]
            if end < 0:
                return
            self._answered(bytes(self._begun), self._begun_first)
            self._begun = None
            pos = end + 1
        elif not self._at_start:
            pos = data.find(b"\n") + 1
            if pos == 0:
                return
        while pos < n:
            if data.startswith(RESPONSE_PREFIX, pos):
                end = data.find(b"\n", pos)
                if end < 0:
                    self._begun, self._begun_first = bytearray(data[pos : pos + _HEAD]), self.received + pos == 0
                    return
                self._answered(data[pos:end], self.received + pos == 0)
                pos = end + 1
                continue
            if n - pos < len(RESPONSE_PREFIX) and RESPONSE_PREFIX.startswith(data[pos:]):
                # maybe a response, cut before its prefix is whole
                self._begun, self._begun_first = bytearray(data[pos:]), self.received + pos == 0
                return
            found = data.find(_LINE_RESPONSE, pos)
            if found < 0:
                last = data.rfind(b"\n", pos)
                self._at_start = last == n - 1
                if last >= 0 and n - last - 1 < len(RESPONSE_PREFIX) and RESPONSE_PREFIX.startswith(data[last + 1 :]):
                    self._begun, self._begun_first = bytearray(data[last + 1 :]), False
                return
            pos = found + 1
        self._at_start = True

    def _answered(self, line: bytes, first: bool) -> None:
        """Note the response `line` (`first`: the server's first line, where a refusal of this client is)."""
        key = response_key(line)
        if key is None:
            return
        if key == "null":  # about no request of ours: a bad line, or (the first line) this client refused
            if not first:
                return
            try:
                message = str(json.loads(line)["error"]["message"])
            except (ValueError, KeyError, TypeError):
                return
            if message.startswith("refused"):
                self.gone = refused(self.name, message)
            return
        left = self.unanswered.get(key, 0) - 1
        if left > 0:
            self.unanswered[key] = left
        else:
            self.unanswered.pop(key, None)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                try:
                    view = view[os.write(self.stdout_fd, view) :]
                except BlockingIOError:  # a non-blocking stdout, full: wait for room as a blocking one does
                    self._room.poll()
        except OSError as exc:  # its reader went away (`| head -1`): quietly; anything else says what
            if not isinstance(exc, (BrokenPipeError, ConnectionResetError)):
                _say(f"cannot write to stdout: {exc.strerror or exc}")
                raise _Leave(1) from None
            raise _Leave(0) from None

    def _ended(self) -> int:
        """The server closed the connection: why, and the exit code."""
        if self.gone:
            return 1
        if self.stopping or (self.done_sending and not self.unanswered):
            return 0
        time.sleep(LOSS_SETTLES)
        self.gone = fell_behind(self.name) if listening(self.path) else went_away(self.name, self.path)
        return 1


def relay(name: str, path: Path | None = None, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    """Attach stdin and stdout to server `name` until one of them ends or a signal comes: the exit code."""
    _hold_standard_streams()
    try:
        path, sock = connect(name, path)
    except ServerError as exc:
        _say(str(exc))
        return 1
    # A signal ignored by who started the relay (`nohup`, a background job) stays ignored.
    previous = {sig: signal.signal(sig, _signalled) for sig in _SIGNALS if signal.getsignal(sig) != signal.SIG_IGN}
    attached = Relay(name, path, sock, stdin_fd, stdout_fd)
    late: int | None = None
    try:
        try:
            code = attached.run()
        finally:
            late = _put_back(previous, sock)
    except _Leave as leave:
        code = leave.code
    if attached.gone:
        _say(attached.gone)
    return late if late is not None else code


def _put_back(previous: dict[signal.Signals, Any], sock: socket.socket) -> int | None:
    """The handlers the relay found, back; the socket closed. The code of a signal that came
    meanwhile (its handler raises wherever the relay is), else None."""
    late = None
    while True:
        try:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            sock.close()
            return late
        except _Leave as leave:
            late = leave.code


def _hold_standard_streams() -> None:
    """Put /dev/null where stdin, stdout or stderr is closed, opened so that it acts as closed: read,
    it ends; written as stdout, it fails (EBADF). Else the socket, taking the lowest free descriptor,
    would become that stream: read back as requests, written with the server's own lines."""
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            held = os.open(os.devnull, flags)  # the lowest free descriptor: `fd`, those below are open
            if held != fd:
                os.dup2(held, fd)
                os.close(held)


def _say(message: str) -> None:
    try:
        os.write(2, f"deck: {message}\n".encode(errors="replace"))
    except OSError:
        pass
