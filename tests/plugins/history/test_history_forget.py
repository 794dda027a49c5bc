"""`deck history --forget ID` deletes the conversation from the history, then the agent's own copy of
its session (ACP `session/delete`) where the agent lists `sessionCapabilities.delete`: started for it
with no session of deck's, stopped after. An agent without the capability, one that refuses, one no
longer in the config, a config gone: the history's copy is forgotten all the same and stderr says why
the agent's stays. Real `deck` processes and fake agents; what deck sent read back from --requests."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import agent_block
from tests.deck_process import DeckProcess, write_config
from tests.core.remote.test_server import runtime  # noqa: F401  (a fixture: the servers' folder of the test's own)
from tests.plugins.history.test_history import Recorded, deck_cli, private_env, run_and_exit

pytestmark = pytest.mark.timeout(60)


def sent(requests: Path, method: str) -> list[dict]:
    return [r["params"] for r in map(json.loads, requests.read_text().splitlines()) if r["method"] == method]


def methods(requests: Path) -> list[str]:
    return [json.loads(line)["method"] for line in requests.read_text().splitlines()]


def slow_starting_agent(requests: Path) -> str:
    """Agent `a`, listing delete, whose start takes 0.3 s: a request can come while it starts."""
    return agent_block("a", "--delete", "--handshake-delay", "0.3", "--requests", str(requests))


def recorded_with(tmp_path: Path, *flags: str) -> tuple[Recorded, Path]:
    """A deck run in which agent `a` (the fake agent with `flags`) answered one prompt, then deck exited."""
    requests = tmp_path / "requests.jsonl"
    env = private_env(tmp_path)
    config = write_config(tmp_path / "deck.toml", agent_block("a", *flags, "--requests", str(requests)))
    return Recorded(tmp_path, env, config, run_and_exit(config, env, "hello")), requests


def forget(recorded: Recorded) -> tuple[dict, str, object]:
    """The recorded conversation, its agent session, and `deck history --forget` of it (the real command)."""
    row = recorded.only_conversation()
    session = json.loads(recorded.cli("export", row["id"], "--format", "json").stdout)["sessionId"]
    assert session
    return row, session, deck_cli(recorded.env, "history", "--forget", row["id"])


def test_an_agent_that_lists_delete_has_the_session_deleted_with_no_session_of_its_own(tmp_path: Path) -> None:
    recorded, requests = recorded_with(tmp_path, "--delete")
    row, session, done = forget(recorded)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"forgot conversation {row['id']}\ndeleted its session {session} on a (session/delete)\n"
    assert sent(requests, "session/delete") == [{"sessionId": session}]
    assert len(sent(requests, "session/new")) == 1  # the run's: the start for the delete opened none
    assert len(sent(requests, "initialize")) == 2
    assert json.loads(recorded.cli("history", "--json", "--all").stdout) == []


def test_an_agent_that_does_not_list_delete_is_sent_none_and_the_history_forgets_all_the_same(tmp_path: Path) -> None:
    recorded, requests = recorded_with(tmp_path)
    row, session, done = forget(recorded)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"forgot conversation {row['id']}\n"
    assert done.stderr == (
        f"deck: its session {session} on a stays: a does not delete sessions"
        " (its initialize answer has no sessionCapabilities.delete)\n"
    )
    assert sent(requests, "session/delete") == [] and len(sent(requests, "session/new")) == 1
    assert json.loads(recorded.cli("history", "--json", "--all").stdout) == []


def test_a_refused_delete_is_said_and_the_history_forgets_all_the_same(tmp_path: Path) -> None:
    recorded, requests = recorded_with(tmp_path, "--delete", "--refuse-delete")
    row, session, done = forget(recorded)
    assert done.returncode == 0 and done.stdout == f"forgot conversation {row['id']}\n"
    assert re.fullmatch(rf"deck: its session {session} on a stays: a refused session/delete: .*Resource not found.*\n", done.stderr)
    assert sent(requests, "session/delete") == [{"sessionId": session}]
    assert json.loads(recorded.cli("history", "--json", "--all").stdout) == []


def test_an_agent_gone_from_the_config_or_a_config_gone_keeps_its_session_and_says_why(tmp_path: Path) -> None:
    recorded, requests = recorded_with(tmp_path, "--delete")
    write_config(recorded.config, agent_block("b", "--delete", "--requests", str(requests)))
    row, session, done = forget(recorded)
    assert done.returncode == 0 and done.stdout == f"forgot conversation {row['id']}\n"
    assert done.stderr == f"deck: its session {session} on a stays: unknown agent 'a' (agents: b)\n"
    assert sent(requests, "session/delete") == [] and len(sent(requests, "initialize")) == 1

    (tmp_path / "again").mkdir()
    again, _ = recorded_with(tmp_path / "again", "--delete")
    again.config.unlink()
    row, session, done = forget(again)
    assert done.returncode == 0 and done.stdout == f"forgot conversation {row['id']}\n"
    assert done.stderr == f"deck: its session {session} on a stays: its config {again.config.resolve()} is gone\n"



@pytest.mark.anyio
async def test_the_service_refuses_the_running_agents_current_session_and_deletes_another_without_a_restart(
    make_deck, tmp_path: Path
) -> None:
    requests = tmp_path / "requests.jsonl"
    deck, rec = make_deck(agent_block("a", "--delete", "--requests", str(requests)))
    await deck.call("AgentService.Start", {"name": "a"})
    current = deck.agent("a").session_id
    with pytest.raises(Exception, match="current session: start a new conversation first"):
        await deck.call("AgentService.DeleteSession", {"name": "a", "sessionId": current})
    with pytest.raises(Exception, match="empty sessionId"):
        await deck.call("AgentService.DeleteSession", {"name": "a", "sessionId": " "})
    with pytest.raises(Exception, match="sessionId too long: 4194304 characters, at most 200"):
        await deck.call("AgentService.DeleteSession", {"name": "a", "sessionId": "s" * (4 << 20)})
    done = await deck.call("AgentService.DeleteSession", {"name": "a", "sessionId": "s-older"})
    assert done == {"agent": "a", "sessionId": "s-older"}
    assert sent(requests, "session/delete") == [{"sessionId": "s-older"}]
    assert deck.agent("a").running and deck.agent("a").session_id == current  # not restarted
    assert any("session s-older deleted" in line for line in deck.agent("a").logs)


def test_with_a_server_of_the_config_running_the_delete_goes_through_it(tmp_path: Path, runtime: Path) -> None:
    from tests.core.remote.test_server import Raw, Server

    recorded, requests = recorded_with(tmp_path, "--delete", "--sessions", str(tmp_path / "sessions.json"))
    server = Server(recorded.config, env=recorded.env)
    client: Raw | None = None
    try:
        assert server.ready, server.stderr
        client = Raw(server.path)
        client.call("ChatService.NewConversation", {"agent": "a"})  # the recorded one stays as it was stored
        client.call("AgentService.Start", {"name": "a"}, timeout=20)  # running, in a session of its own
        row, session, done = forget(recorded)
        assert done.returncode == 0, done.stderr
        assert done.stdout.endswith(f"deleted its session {session} on a (session/delete)\n")
        assert any(f"session {session} deleted" in line for line in client.call("AgentService.Logs", {"name": "a"}))
        assert sent(requests, "session/delete") == [{"sessionId": session}]
    finally:
        if client is not None:
            client.close()
        server.kill_everything()


def test_a_session_another_deck_runs_in_is_not_deleted_and_its_lock_goes_with_that_deck(tmp_path: Path) -> None:
    """A plain `deck run` resumed the conversation's session: the forget leaves it to that deck."""
    sessions = str(tmp_path / "sessions.json")
    recorded, requests = recorded_with(tmp_path, "--delete", "--resume", "--sessions", sessions)
    running = DeckProcess("--config", str(recorded.config), env=recorded.env)
    try:
        running.call("AgentService.Start", {"name": "a"})
        row, session, done = forget(recorded)
        assert sent(requests, "session/resume")[-1]["sessionId"] == session  # the other deck runs in it
        assert done.returncode == 0 and done.stdout == f"forgot conversation {row['id']}\n"
        assert done.stderr == (
            f"deck: its session {session} on a stays: a is running in session {session}"
            f" (deck pid {running.pid}): stop it there first\n"
        )
        assert sent(requests, "session/delete") == []
        running.close_stdin()
        assert running.wait(15) == 0, running.stderr
    finally:
        running.kill_everything()
    assert list((tmp_path / "state" / "deck" / "sessions").iterdir()) == []  # its lock went with it


def test_forget_takes_a_whole_id_and_says_so_for_the_start_of_one(tmp_path: Path) -> None:
    recorded, _ = recorded_with(tmp_path)
    row = recorded.only_conversation()
    start = recorded.cli("history", "--forget", row["id"][:8])
    assert start.returncode == 1 and start.stderr == (
        f"deck: no conversation {row['id'][:8]!r} in the history; --forget takes a whole id,"
        f" and {row['id'][:8]!r} starts {row['id']}\n"
    )
    empty = recorded.cli("history", "--forget", " ")
    assert empty.returncode == 2 and "--forget needs a conversation ID" in empty.stderr
    huge = recorded.cli("history", "--forget", "x" * 100_000)
    assert huge.returncode == 1 and len(huge.stderr) < 200, huge.stderr
    assert recorded.only_conversation() == row  # nothing forgotten


@pytest.mark.anyio
async def test_a_message_sent_while_the_agent_runs_for_a_delete_waits_for_that_run_then_has_its_session(
    make_deck, tmp_path: Path
) -> None:
    deck, rec = make_deck(slow_starting_agent(requests := tmp_path / "requests.jsonl"))
    delete = asyncio.ensure_future(deck.call("AgentService.DeleteSession", {"name": "a", "sessionId": "s-older"}))
    await rec.wait_event("agent:state", agent="a", state="starting")
    await deck.call("ChatService.Send", {"agent": "a", "text": "hello"})
    assert await delete == {"agent": "a", "sessionId": "s-older"}
    await rec.wait(lambda r: any(not t["busy"] for t in r.named("turn:changed", "a")), timeout=20)  # turn over
    reply = deck.conversation_of("a").messages[-1]
    assert reply.role == "agent" and reply.error is None and reply.done
    assert methods(requests) == ["initialize", "session/delete", "initialize", "session/new", "session/prompt"]


@pytest.mark.anyio
async def test_a_delete_that_comes_while_the_agent_starts_for_a_message_leaves_it_running(
    make_deck, tmp_path: Path
) -> None:
    deck, rec = make_deck(slow_starting_agent(requests := tmp_path / "requests.jsonl"))
    await deck.call("ChatService.Send", {"agent": "a", "text": "hello"})
    await rec.wait_event("agent:state", agent="a", state="starting")
    assert await deck.call("AgentService.DeleteSession", {"name": "a", "sessionId": "s-older"})
    await rec.wait(lambda r: any(not t["busy"] for t in r.named("turn:changed", "a")), timeout=20)  # turn over
    assert deck.agent("a").running and deck.conversation_of("a").messages[-1].error is None
    sent_in_order = methods(requests)  # one start, serving both: the delete and the prompt in either order
    assert sent_in_order[:2] == ["initialize", "session/new"]
    assert sorted(sent_in_order[2:]) == ["session/delete", "session/prompt"]


@pytest.mark.anyio
async def test_a_session_lock_let_go_of_by_another_deck_this_instant_is_taken_all_the_same(tmp_path: Path) -> None:
    """A deck letting go of a session's lock holds it alone for an instant (to remove the file if it
    was the last holder): a deck taking it then waits for that instant rather than run unprotected."""
    import fcntl

    from deck.agent import inuse

    path = inuse.lock_path("a", "s1")
    path.parent.mkdir(parents=True)
    other = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(other, fcntl.LOCK_EX)
    asyncio.get_running_loop().call_later(0.05, os.close, other)
    held = await inuse.hold("a", "s1")
    assert held is not None
    with pytest.raises(Exception, match="a is running in session s1"):
        with inuse.unused("a", "s1"):
            pass
    held.release()
    assert not path.exists()
