"""Fixtures for end-to-end tests against real third-party ACP agents (see docs/peers.md).

Peers are installed by scripts/install-peers.sh into `.peers/` (or `$DECK_PEERS_DIR`).
A missing peer fails its tests loudly: these tests are the proof that deck works
with agents it did not write, so they are never skipped.

Every test gets a fresh HOME (and XDG dirs) so no real credentials are picked up,
traces every ACP message deck sends and checks it against the ACP schema, and
checks that no process it started outlives it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from deck import hookimpl
from deck.runtime.deck import Deck

from ..conftest import Recorder
from .schema import AcpSchema, OutgoingChecker

ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = Path(os.environ.get("DECK_PEERS_DIR", ROOT / ".peers"))
INSTALL_HINT = "run scripts/install-peers.sh (or set DECK_PEERS_DIR)"

#: Each peer's executable (or script) inside PEERS_DIR.
PEER_FILES = {
    "fast-agent": "fast-agent/bin/fast-agent",
    "chuk-python": "chuk-acp/bin/python",
    "chuk-echo": "chuk-acp/share/chuk-acp/examples/echo_agent.py",
    "claude-agent-acp": "claude-agent-acp/node_modules/.bin/claude-agent-acp",
    "codex-acp": "codex-acp/node_modules/.bin/codex-acp",
}
#: Variables that could hand a peer real credentials or a real endpoint.
SCRUBBED = (
    "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_HOME", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY",
)  # fmt: skip


def peer(name: str) -> str:
    """The absolute path of a peer's file; fails the test when the peer is not installed."""
    path = PEERS_DIR / PEER_FILES[name]
    if not path.exists():
        pytest.fail(f"peer {name!r} is not installed: {path} is missing; {INSTALL_HINT}", pytrace=False)
    return str(path)


def fast_agent_command(home: Path, model: str = "passthrough") -> list[str]:
    return [peer("fast-agent"), "--no-update-check", "acp", "--model", model, "--home", str(home / "fast-agent")]


def chuk_command() -> list[str]:
    return [peer("chuk-python"), peer("chuk-echo")]


def claude_command() -> list[str]:
    return [peer("claude-agent-acp")]


def codex_command() -> list[str]:
    return [peer("codex-acp")]


def agent_toml(name: str, command: list[str], cwd: Path, env: dict[str, str] | None = None, **keys: Any) -> str:
    lines = [f"[agents.{name}]", f"command = {json.dumps(command)}", f"cwd = {json.dumps(str(cwd))}"]
    if env:
        lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }")
    lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def on_testbox(sshd: Any) -> dict[str, Any]:
    """An agent table's keys that run it on the tests' sshd (tests/sshd.py), on a connection of its own."""
    return {"host": "testbox", "ssh": ["-F", str(sshd.config), "-o", "ControlPath=none"]}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HOME and XDG tree for deck and its agents; credential variables removed."""
    home = tmp_path / "home"
    for sub in ("", ".config", ".cache", ".local/state", ".local/share", "fast-agent"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local/state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local/share"))
    monkeypatch.setenv("NO_COLOR", "1")
    for name in SCRUBBED:
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The agents' cwd: the only directory deck serves fs/* in."""
    path = tmp_path / "work"
    path.mkdir()
    return path


class SchemaPlugin:
    """Sees every ACP message (deck.trace_acp) and checks what deck sends against the schema."""

    def __init__(self, schema: AcpSchema) -> None:
        self.schema = schema
        self.checkers: dict[str, OutgoingChecker] = {}
        self.messages: list[tuple[str, str, dict[str, Any]]] = []

    @hookimpl
    def deck_acp_message(self, deck: Any, agent: Any, direction: str, message: dict[str, Any]) -> None:
        self.messages.append((agent.name, direction, message))
        checker = self.checkers.setdefault(agent.name, OutgoingChecker(self.schema))
        checker.seen(direction, message)

    def sent(self, method: str | None = None) -> list[dict[str, Any]]:
        return [m for _, d, m in self.messages if d == "out" and (method is None or m.get("method") == method)]

    def received(self, method: str) -> list[dict[str, Any]]:
        return [m for _, d, m in self.messages if d == "in" and m.get("method") == method]

    def answer_to(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """deck's response to one of the agent's requests."""
        for _, direction, message in self.messages:
            if direction == "out" and "method" not in message and message.get("id") == request.get("id"):
                if message is not request:
                    return message
        return None

    def problems(self) -> list[str]:
        return [p for checker in self.checkers.values() for p in checker.problems]

    def assert_conformant(self) -> None:
        assert self.sent(), "no ACP message was traced: deck.trace_acp is not honoured"
        problems = self.problems()
        assert not problems, "deck sent messages that do not match the ACP schema:\n" + "\n".join(problems)


@pytest.fixture(scope="session")
def acp_schema() -> AcpSchema:
    return AcpSchema()


def processes_in(cwd: Path) -> list[str]:
    """Live processes whose working directory is `cwd` (agents run there, and so do their children)."""
    found = []
    for p in psutil.process_iter(["pid", "cwd", "cmdline", "status"]):
        try:
            if p.info["cwd"] and Path(p.info["cwd"]) == cwd and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(f"{p.pid} {' '.join(p.info['cmdline'] or [])[:120]}")
        except psutil.Error:
            pass
    return found


@dataclass
class ProcessWatch:
    """Every process an agent ran, seen while it ran, so that escaped ones are found after."""

    seen: dict[int, psutil.Process] = field(default_factory=dict)

    def snapshot(self, deck: Deck) -> None:
        for agent in deck.agents.values():
            if agent.process is None:
                continue
            try:
                root = psutil.Process(agent.process.pid)
                for p in [root, *root.children(recursive=True)]:
                    self.seen.setdefault(p.pid, p)
            except psutil.Error:
                pass

    def alive(self) -> list[str]:
        left = []
        for p in self.seen.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            except psutil.Error:
                pass
        return left


class PeerDeck:
    """A Deck on a real config file, recording events and ACP traffic."""

    def __init__(self, deck: Deck, recorder: Recorder, schema: SchemaPlugin) -> None:
        self.deck = deck
        self.rec = recorder
        self.schema = schema
        self.processes = ProcessWatch()
        self._watcher: asyncio.Task[None] | None = None
        #: What ran before this deck (a test's own servers, its sshd): not the deck's to end.
        self._before = {p.pid for p in psutil.Process().children(recursive=True)}

    def watch(self) -> None:
        async def loop() -> None:
            while True:
                self.processes.snapshot(self.deck)
                await asyncio.sleep(0.2)

        self._watcher = asyncio.get_running_loop().create_task(loop())
        self.deck.pm.register(self, name="process-watch")

    @hookimpl
    def deck_acp_message(self, agent: Any, direction: str, message: dict[str, Any]) -> None:
        # An answer comes while its agent runs: seen even when a start fails faster than the loop's tick.
        if direction == "in" and "method" not in message:
            self.processes.snapshot(self.deck)

    async def close(self) -> None:
        """Shut deck down, then prove that no agent process is left and deck spoke valid ACP."""
        self.processes.snapshot(self.deck)
        if self._watcher is not None:
            self._watcher.cancel()
        await self.deck.shutdown()
        left: list[str] = []
        for _ in range(30):  # orphans need a moment to be reaped by init
            left = self.processes.alive() + [
                f"{p.pid} {' '.join(p.cmdline())[:120]}"
                for p in psutil.Process().children(recursive=True)
                if p.status() != psutil.STATUS_ZOMBIE and p.pid not in self._before
            ]
            for agent in self.deck.agents.values():
                left += processes_in(Path(agent.config.resolved_cwd()))
            if not left:
                break
            await asyncio.sleep(0.1)
        assert self.processes.seen, "no agent process was ever seen"
        assert not left, "processes left behind after deck shut down:\n" + "\n".join(left)
        self.schema.assert_conformant()


@pytest.fixture
async def peer_deck(make_deck, acp_schema: AcpSchema, home: Path) -> Iterator[Any]:
    """`peer_deck(toml_text)` → PeerDeck with ACP tracing and schema checks on."""
    made: list[PeerDeck] = []

    def make(text: str, **kwargs: Any) -> PeerDeck:
        deck, rec = make_deck(text, **kwargs)
        plugin = SchemaPlugin(acp_schema)
        deck.pm.register(plugin, name="schema-check")
        deck.trace_acp = True  # before any agent starts
        pd = PeerDeck(deck, rec, plugin)
        pd.watch()
        made.append(pd)
        return pd

    yield make
    for pd in made:
        if pd._watcher is not None:
            pd._watcher.cancel()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of this folder runs a third-party agent: marked `peers` (`-m "not peers"`)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.peers)
