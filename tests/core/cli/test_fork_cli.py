"""`deck fork AGENT`: a real `deck serve` with a real fake agent, the real `deck` command line."""

from __future__ import annotations

import pytest

from tests.conftest import agent_block
from tests.core.remote.test_server import cli, clients, runtime, serve  # noqa: F401  (the deck server fixtures)

pytestmark = pytest.mark.timeout(90)


def test_deck_fork_forks_the_agents_conversation_or_says_why_not(serve, clients) -> None:  # noqa: F811
    server = serve(agent_block("a", "--fork") + agent_block("b"))
    watcher = clients(server.path)
    watcher.request("ChatService.Send", {"agent": "a", "text": "hello"})
    watcher.event("turn:changed", agent="a", busy=False, timeout=20)
    done = cli("fork", "a", "--attach", server.name)
    assert done.returncode == 0, done.stderr
    old, _, new = done.stdout.strip().removeprefix("a: forked session ").partition(" as ")
    assert new == f"{new.split('-of-')[0]}-of-{old}"
    assert new.startswith("fork") and old.startswith("s")
    refused = cli("fork", "b", "--attach", server.name)
    assert refused.returncode != 0 and "no sessionCapabilities.fork" in refused.stderr
