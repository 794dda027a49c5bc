"""Test helpers for deck and its plugins: a pytest plugin (`-p deck.testing`, loaded automatically once deck is installed).

Fixtures:
    make_deck   `make_deck(toml_text)` → `(deck, recorder)`: a Deck on a real config
                file in tmp_path, agents as real subprocesses, shut down after the test.
Helpers:
    Recorder            every event of a deck, and `await recorder.wait_event(name, **match)`
    demo_agent(name)    a `[agents.NAME]` table running deck's demo agent (prompt "echo X" answers X)
    agent_table(name, command, **keys)
    FAST_STOP           stop escalation in fractions of a second instead of 5 s + 3 s
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deck.events import Event
from deck.proc.supervisor import StopTimings
from deck.runtime.deck import Deck

FAST_STOP = StopTimings(after_stdin_close=0.3, after_sigterm=0.3, after_sigkill=1.0)


def agent_table(name: str, command: list[str], **keys: Any) -> str:
    """A `[agents.NAME]` TOML table; values are written as JSON, which TOML reads the same."""
    lines = [f"[agents.{name}]", f"command = {json.dumps(command)}"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def demo_agent(name: str = "demo", **keys: Any) -> str:
    """A table for deck's demo agent: a prompt "echo X" is answered "X" at once."""
    return agent_table(name, [sys.executable, "-P", "-m", "deck.demo"], **keys)


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
        """Wait until `predicate(recorder)` is true; return its value."""
        async with asyncio.timeout(timeout):
            while not (result := predicate(self)):
                self._changed.clear()
                await self._changed.wait()
            return result

    async def wait_event(self, name: str, timeout: float = 15.0, **match: Any) -> dict[str, Any]:
        """Wait for an event `name` whose payload has the `match` values; return its payload."""

        def find(rec: Recorder) -> dict[str, Any] | None:
            for payload in rec.named(name):
                if all(payload.get(k) == v for k, v in match.items()):
                    return payload
            return None

        return await self.wait(find, timeout)


@pytest.fixture
async def make_deck(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`make_deck(toml_text)` → (Deck, Recorder); every deck is shut down after the test.

    Log files and other state go to tmp_path/state ($XDG_STATE_HOME), not the user's home.
    """
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    made: list[Deck] = []

    def make(text: str, timings: StopTimings = FAST_STOP, **kwargs: Any) -> tuple[Deck, Recorder]:
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
