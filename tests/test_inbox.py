"""The needs-you inbox: `DeckService.Inbox()` lists what waits in every agent, oldest first, and
`deck inbox` / `deck answer` read and answer it from a shell, through a running `deck serve`."""

from __future__ import annotations

import json

import pytest

from .conftest import agent_block
from .test_server import cli, clients, runtime, serve  # noqa: F401  (fixtures: a server folder of its own, a server, clients)

pytestmark = [pytest.mark.timeout(90)]


def test_the_inbox_lists_every_agents_requests_oldest_first_and_deck_answer_resolves_them(serve, clients) -> None:
    server = serve(agent_block("a") + agent_block("b"))
    watcher = clients(server.path)
    watcher.request("ChatService.Send", {"agent": "a", "text": "perm"})
    asked = watcher.event("permission:requested", agent="a", timeout=20)
    watcher.request("ChatService.Send", {"agent": "b", "text": "question"})
    question = watcher.event("question:requested", agent="b", timeout=20)

    shown = cli("inbox", "--attach", server.name, "--json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert [(r["id"], r["agent"], r["kind"]) for r in rows] == [
        (asked["id"], "a", "permission"), (question["id"], "b", "question")]  # fmt: skip
    assert rows[0]["title"].startswith("permission: ") and rows[0]["since"] <= rows[1]["since"]
    assert rows[1]["title"] and rows[0]["since"].endswith("Z")
    plain = cli("inbox", "--attach", server.name)
    assert asked["id"] in plain.stdout and question["id"] in plain.stdout

    wrong = cli("answer", asked["id"], "--attach", server.name, "--json", "{}")
    assert wrong.returncode == 2 and "is a permission request: answer it with one of its options (yes" in wrong.stderr
    bad = cli("answer", question["id"], "--attach", server.name, "--json", "[1]")
    assert bad.returncode == 2 and "a JSON object" in bad.stderr
    unknown = cli("answer", "perm-999", "yes", "--attach", server.name)
    assert unknown.returncode == 1 and "nothing waits as 'perm-999'" in unknown.stderr

    done = cli("answer", asked["id"], "yes", "--attach", server.name)
    assert done.returncode == 0 and f"answered {asked['id']} (a)" in done.stdout, done.stderr
    watcher.event("permission:resolved", id=asked["id"])  # every client sees it resolved
    done = cli("answer", question["id"], "--attach", server.name, "--json", '{"name": "Ada"}')
    assert done.returncode == 0, done.stderr
    watcher.event("question:resolved", id=question["id"])
    assert json.loads(cli("inbox", "--attach", server.name, "--json").stdout) == []
    assert cli("inbox", "--attach", server.name).stdout.strip() == "nothing waits for you"


def test_the_inbox_with_no_server_is_a_clear_error(tmp_path, runtime, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deck.toml").write_text(agent_block("a"))
    out = cli("inbox", "--config", str(tmp_path / "deck.toml"))
    assert out.returncode == 1 and "no deck server runs" in out.stderr and "deck serve" in out.stderr
    gone = cli("inbox", "--attach", "nobody")
    assert gone.returncode == 1 and "nobody" in gone.stderr
