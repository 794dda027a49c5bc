"""`deck` run as a real subprocess: JSON-RPC lines in, event and response lines out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

DECK = [sys.executable, "-P", "-m", "deck"]  # as the `deck` script runs (-P: the current folder is not on the import path)


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


class Lines:
    """JSON lines read from a stream on a thread, with ways to wait for one."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.done = False
        self._changed = threading.Condition()

    def feed(self, stream: Any) -> None:
        """Read `stream` to its end, a chunk at a time: its lines are added, and waiters woken, once per chunk."""
        rest = b""
        try:
            while chunk := stream.read1(1 << 16):
                *raws, rest = (rest + chunk).split(b"\n")
                lines = [json.loads(raw) for raw in raws]
                with self._changed:
                    self.raw += [raw + b"\n" for raw in raws]
                    self.lines += lines
                    self._changed.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self._changed:
                self.done = True
                self._changed.notify_all()

    def describe(self) -> str:
        """What a failed wait shows besides the last lines."""
        return ""

    def wait_for(self, predicate: Callable[[list[dict[str, Any]]], Any], timeout: float = 15.0) -> Any:
        """Wait until `predicate(lines)` is true; return its value."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (result := predicate(self.lines)):
                left = deadline - time.monotonic()
                if left <= 0 or self.done:
                    raise AssertionError(
                        f"not seen within {timeout}s (ended: {self.done}); last lines: {self.lines[-5:]}{self.describe()}"
                    )
                self._changed.wait(left)
            return result

    def wait_end(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self.done:
                left = deadline - time.monotonic()
                assert left > 0, "the stream did not end"
                self._changed.wait(left)

    def wait_line(self, test: Callable[[dict[str, Any]], Any], timeout: float = 15.0, count: int = 1) -> dict[str, Any]:
        """The `count`th line that passes `test`, looking at each line once (a stream of 200k lines stays linear)."""
        seen = 0
        found: list[dict[str, Any]] = []

        def scan(lines: list[dict[str, Any]]) -> dict[str, Any] | None:
            nonlocal seen
            for line in lines[seen:]:
                seen += 1
                if test(line):
                    found.append(line)
                    if len(found) == count:
                        return line
            return None

        return self.wait_for(scan, timeout)  # type: ignore[no-any-return]

    def response(self, request_id: Any, timeout: float = 15.0) -> dict[str, Any]:
        return self.wait_line(lambda x: "jsonrpc" in x and x.get("id") == request_id, timeout)

    def event(self, name: str, timeout: float = 15.0, **match: Any) -> dict[str, Any]:
        return self.wait_line(lambda x: x.get("event") == name and all(x.get(k) == v for k, v in match.items()), timeout)

    def events(self, name: str, **match: Any) -> list[dict[str, Any]]:
        with self._changed:
            return [x for x in self.lines if x.get("event") == name and all(x.get(k) == v for k, v in match.items())]


class DeckProcess(Lines):
    """`deck run --frontend=jsonl` with its stdout read line by line on a thread."""

    def __init__(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
        super().__init__()
        self.popen = subprocess.Popen(
            [*DECK, "run", "--frontend=jsonl", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
        )
        self.pid = self.popen.pid
        self.stderr = b""
        self._next_id = 0
        self._out = threading.Thread(target=self.feed, args=(self.popen.stdout,), daemon=True)
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._out.start()
        self._err.start()

    # -- reading ----------------------------------------------------------------------------

    def _read_stderr(self) -> None:
        assert self.popen.stderr is not None
        self.stderr = self.popen.stderr.read()

    def describe(self) -> str:
        return f"\nstderr: {self.stderr!r}"

    def states(self, agent: str) -> list[str]:
        return [x["state"] for x in self.events("agent:state", agent=agent)]

    # -- writing ----------------------------------------------------------------------------

    def send_raw(self, text: str) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(text.encode() + b"\n")
        self.popen.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        """Send a JSON-RPC request; return its id."""
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send_raw(json.dumps(message))
        return self._next_id

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 15.0) -> Any:
        """Send a request and return its result (failing on an error reply)."""
        reply = self.response(self.request(method, params), timeout)
        assert "result" in reply, reply
        return reply["result"]

    def close_stdin(self) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.close()

    # -- processes --------------------------------------------------------------------------

    def descendants(self) -> list[int]:
        """Pids of every live process under deck (its agents and what they launched)."""
        try:
            return [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def wait(self, timeout: float) -> int:
        code = self.popen.wait(timeout)
        self._out.join(5)
        self._err.join(5)
        return code

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.pid, sig)

    def kill_everything(self) -> None:
        """Test teardown only: leave nothing running whatever a test did."""
        procs = []
        for pid in [self.pid, *self.descendants()]:
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, 5)
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                try:
                    stream.close()
                except (OSError, ValueError):
                    pass
        self.popen.wait(5)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_dead(pids: list[int], timeout: float = 5.0) -> list[int]:
    """The pids still alive after up to `timeout` seconds (orphans are reaped by init, not at once)."""
    deadline = time.monotonic() + timeout
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def run_deck(tmp_path: Path):
    """`run_deck(toml_text, *args)` → a running DeckProcess; all are killed after the test."""
    started: list[DeckProcess] = []

    def start(text: str | None, *args: str, **kwargs: Any) -> DeckProcess:
        if text is not None:
            args = ("--config", str(write_config(tmp_path / "deck.toml", text)), *args)
        deck = DeckProcess(*args, **kwargs)
        started.append(deck)
        return deck

    yield start
    for deck in started:
        deck.kill_everything()
