"""Running what tells the user: the user's `command` and the desktop's notifier, never in deck's way.

Each agent has one line of moments waiting (at most QUEUE_MAX; past that the oldest is dropped,
logged once per burst): its commands run one at a time, each cut off after TIMEOUT seconds, its process
group killed. What a command prints is read to its end but only OUTPUT_MAX bytes of it kept, for
the log line that reports a failure. Nothing of this is waited for by an agent or the event bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deck import start_process
from deck.tty import one_line

if TYPE_CHECKING:
    from deck import Deck

log = logging.getLogger(__name__)

#: How long one command may run, in seconds.
TIMEOUT = 10.0
#: What is kept of a command's output, for the log.
OUTPUT_MAX = 2048
#: Moments waiting per agent; past that the oldest is dropped.
QUEUE_MAX = 16
#: What of a title goes into the environment ($DECK_TITLE) and the desktop's notification.
TITLE_MAX = 200


@dataclass(frozen=True)
class Moment:
    """Something the user should know: `what` (input, error, budget, done) happened to `agent`."""

    agent: str
    what: str
    title: str
    since: str
    id: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "what": self.what, "title": self.title, "since": self.since, "id": self.id}


def desktop_notifier(title: str, body: str) -> list[str] | None:
    """The desktop's own notifier for this moment, when there is one (notify-send, osascript)."""
    if sys.platform == "darwin" and shutil.which("osascript"):
        script = f"display notification {json.dumps(body)} with title {json.dumps(title)}"
        return ["osascript", "-e", script]
    if shutil.which("notify-send") and (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return ["notify-send", "--app-name=deck", title, body]
    return None


class Senders:
    """Per agent, one command at a time, in the order the moments came."""

    def __init__(self, deck: Deck, commands: Callable[[Moment], list[list[str]]]) -> None:
        self.deck = deck
        self.commands = commands  # what to run for a moment, read when it runs (the config in force)
        self._waiting: dict[str, deque[Moment]] = {}
        self._running: set[str] = set()
        self._dropped: dict[str, int] = {}  # per agent, the moments dropped since its line was last empty

    def send(self, moment: Moment) -> None:
        if not self.commands(moment):
            return  # nothing to run for it: nothing waits
        waiting = self._waiting.setdefault(moment.agent, deque())
        if len(waiting) >= QUEUE_MAX:
            dropped = waiting.popleft()
            self._dropped[moment.agent] = self._dropped.get(moment.agent, 0) + 1
            if self._dropped[moment.agent] == 1:
                self._log(moment.agent, f"notify: too many notifications waiting: dropping the oldest, from {dropped.since}")
        waiting.append(moment)
        if moment.agent not in self._running:
            self._running.add(moment.agent)
            self.deck.spawn(self._drain(moment.agent), f"notify {moment.agent}")

    async def _drain(self, agent: str) -> None:
        try:
            waiting = self._waiting[agent]
            while waiting:
                moment = waiting.popleft()
                for command in self.commands(moment):
                    await self._run(command, moment)
        finally:
            self._running.discard(agent)
            dropped = self._dropped.pop(agent, 0)
            if dropped > 1:
                self._log(agent, f"notify: {dropped} notifications were dropped in all")

    async def _run(self, command: list[str], moment: Moment) -> None:
        env = {
            **os.environ,
            "DECK_AGENT": moment.agent, "DECK_WHAT": moment.what, "DECK_TITLE": one_line(moment.title, TITLE_MAX),
        }  # fmt: skip
        try:
            process = await start_process(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: killed whole when it hangs
            )
        except OSError as exc:
            self._log(moment.agent, f"notify: cannot run {command[0]!r}: {exc.strerror or exc}")
            return
        try:
            async with asyncio.timeout(TIMEOUT):
                output = await _talk(process, json.dumps(moment.as_json()).encode() + b"\n")
                code = await process.wait()
        except TimeoutError:
            _kill_group(process.pid)
            await process.wait()
            self._log(moment.agent, f"notify: {command[0]!r} did not finish within {TIMEOUT:g}s: stopped")
            return
        except BaseException:  # cancelled: the deck stops, and its commands with it
            _kill_group(process.pid)
            with contextlib.suppress(BaseException):
                await process.wait()
            raise
        if code != 0:
            said = one_line(output.decode("utf-8", "replace"), OUTPUT_MAX)
            self._log(moment.agent, f"notify: {command[0]!r} failed (exit {code})" + (f": {said}" if said else ""))

    def _log(self, agent: str, line: str) -> None:
        log.warning("%s: %s", agent, line)
        found = self.deck.agents.get(agent)
        if found is not None:
            found.log(f"deck: {line}")


async def _talk(process: asyncio.subprocess.Process, data: bytes) -> bytes:
    """Give the command `data` on its stdin, and read all it prints, keeping the first OUTPUT_MAX bytes."""
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(data)
        await process.stdin.drain()
        process.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # a command that does not read its stdin
    kept = bytearray()
    while chunk := await process.stdout.read(1 << 16):
        if len(kept) < OUTPUT_MAX:
            kept += chunk[: OUTPUT_MAX - len(kept)]
    return bytes(kept)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
