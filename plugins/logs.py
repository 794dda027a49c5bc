"""logs: one log file per agent under $XDG_STATE_HOME/deck/logs/, and `deck run --trace FILE`.

The 200-line ring behind `AgentService.Logs` and the `agent:log` events are the
core's; this plugin keeps them on disk (size-bounded, rotated) and writes the
optional trace of every ACP line exchanged, as JSONL.
"""

from __future__ import annotations

import contextlib
import json
import logging
import logging.handlers
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from deck import hookimpl, listens, state_dir
from deck.events import AgentLog

if TYPE_CHECKING:
    from deck import Agent, Deck
    from deck.events import Event

MAX_BYTES = 1024 * 1024
BACKUPS = 3


class _FileHandler(logging.handlers.RotatingFileHandler):
    """A rotating file that goes quiet after a write error (disk full) instead of printing tracebacks."""

    broken = False

    def handleError(self, record: logging.LogRecord) -> None:
        self.broken = True


class AgentLogs:
    """Rotating log files, one per agent."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.handlers: dict[str, _FileHandler] = {}
        self.failed = False

    def write(self, agent: str, line: str) -> None:
        handler = self.handlers.get(agent)
        if handler is None:
            if self.failed:
                return
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                safe = re.sub(r"[^A-Za-z0-9_.-]", "_", agent)
                handler = _FileHandler(
                    self.directory / f"{safe}.log", maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8"
                )
            except OSError:
                self.failed = True  # no writable state dir: the ring and events still work
                return
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            self.handlers[agent] = handler
        if not handler.broken:  # the ring and the events still have every line
            handler.emit(logging.makeLogRecord({"msg": line, "levelno": logging.INFO, "levelname": "INFO"}))

    def close(self) -> None:
        for handler in self.handlers.values():
            with contextlib.suppress(OSError):  # its last flush may fail as its writes did
                handler.close()
        self.handlers.clear()


class Trace:
    """Every ACP line exchanged, both directions, as JSONL: `{at, agent, direction, message}`."""

    def __init__(self, path: Path) -> None:
        # backslashreplace: a lone surrogate an agent sent is written as its JSON escape, the line stays valid UTF-8.
        self.file: TextIO = open(path, "a", encoding="utf-8", errors="backslashreplace")  # noqa: SIM115 - closed at shutdown

    def write(self, agent: str, direction: str, message: dict[str, Any]) -> None:
        at = datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
        record = {"at": at, "agent": agent, "direction": direction, "message": message}
        self.file.write(json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n")

    def close(self) -> None:
        self.file.close()


class Logs:
    """One deck's log files and trace: a plugin of its own, registered with that deck's plugin manager at start."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self.files = AgentLogs(state_dir() / "logs")
        self.trace = Trace(Path(deck.trace_path)) if deck.trace_path is not None else None

    @hookimpl
    @listens(AgentLog)
    def deck_event(self, event: Event) -> None:
        if type(event) is AgentLog:
            self.files.write(event.agent, event.line)

    @hookimpl
    def deck_acp_message(self, agent: Agent, direction: str, message: dict[str, Any]) -> None:
        if self.trace is not None:
            self.trace.write(agent.name, direction, message)

    @hookimpl
    def deck_shutdown(self) -> None:
        self.deck.pm.unregister(self)
        self.files.close()
        if self.trace is not None:
            self.trace.close()


@hookimpl
def deck_startup(deck: Deck) -> None:
    logs = Logs(deck)
    deck.pm.register(logs, name="logs.deck")
    if logs.trace is not None:
        deck.trace_acp = True
