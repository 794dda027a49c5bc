"""Shared fixtures: decks built from real TOML files, with real fake-agent subprocesses."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from deck.testing import FAST_STOP, Recorder, agent_table, make_deck  # noqa: F401 - fixtures and helpers shared with plugin authors

#: The tests' folder, the repository, and the agents tests run (tests/agents/).
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
AGENTS = TESTS / "agents"
FAKE_AGENT = AGENTS / "fake_agent.py"
#: Short stop escalation so tests run in milliseconds rather than 5 s + 3 s.
SHORT = FAST_STOP


def agent_block(name: str, *flags: str, command: list[str] | None = None, **keys: Any) -> str:
    """A `[agents.NAME]` TOML table running the fake agent with `flags`."""
    return agent_table(name, command or [sys.executable, str(FAKE_AGENT), *flags], **keys)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def private_xdg_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Log files, recent configs and config discovery stay inside the test's own temp dirs."""
    root = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(root / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(root / "config"))
    monkeypatch.delenv("DECK_CONFIG", raising=False)


@pytest.fixture
def shadowing_folder(tmp_path: Path) -> Path:
    """A folder holding a `deck` package of its own, as a user's project may: Python run there with
    `-m` would import it instead of deck's."""
    folder = tmp_path / "project"
    (folder / "deck").mkdir(parents=True)
    (folder / "deck" / "__init__.py").write_text('raise ImportError("the project\'s own deck package")\n')
    return folder


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def descendants_of_self() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
