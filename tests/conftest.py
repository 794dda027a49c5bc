"""Shared fixtures: decks built from real TOML files, with real fake-agent subprocesses."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from deck.app import Deck
from deck.events import Event
from deck.supervisor import StopTimings

FAKE_AGENT = Path(__file__).parent / "agents" / "fake_agent.py"
#: Short stop escalation so tests run in milliseconds rather than 5 s + 3 s.
SHORT = StopTimings(after_stdin_close=0.3, after_sigterm=0.3, after_sigkill=1.0)


def agent_block(name: str, *flags: str, command: list[str] | None = None, **keys: Any) -> str:
    """A `[agents.NAME]` TOML table running the fake agent with `flags`."""
    cmd = command or [sys.executable, str(FAKE_AGENT), *flags]
    lines = [f"[agents.{name}]", f"command = {json.dumps(cmd)}"]
    for key, value in keys.items():
        lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


class Recorder:
    """Every event a deck emits, with a way to wait for one."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._changed = asyncio.Event()

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self._changed.set()

    def named(self, name: str, agent: str | None = None) -> list[dict[str, Any]]:
        return [
            e.payload() for e in self.events if e.name == name and (agent is None or e.payload().get("agent") == agent)
        ]

    def states(self, agent: str) -> list[str]:
        return [p["state"] for p in self.named("agent:state", agent)]

    async def wait(self, predicate: Callable[[Recorder], Any], timeout: float = 15.0) -> Any:
        async with asyncio.timeout(timeout):
            while not (result := predicate(self)):
                self._changed.clear()
                await self._changed.wait()
            return result

    async def wait_event(self, name: str, timeout: float = 15.0, **match: Any) -> dict[str, Any]:
        def find(rec: Recorder) -> dict[str, Any] | None:
            for payload in rec.named(name):
                if all(payload.get(k) == v for k, v in match.items()):
                    return payload
            return None

        return await self.wait(find, timeout)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def make_deck(tmp_path: Path):
    """`make_deck(toml_text)` → (Deck, Recorder); every deck is shut down after the test."""
    made: list[Deck] = []

    def make(text: str, timings: StopTimings = SHORT, **kwargs: Any) -> tuple[Deck, Recorder]:
        path = tmp_path / "deck.toml"
        path.write_text(text)
        deck = Deck(path, "flag", timings=timings, **kwargs)
        recorder = Recorder()
        deck.subscribe(recorder)
        made.append(deck)
        return deck, recorder

    yield make
    for deck in made:
        await deck.shutdown()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def descendants_of_self() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
