"""Agent lifecycle against real subprocess agents: states, handshake, failures, crash, stop."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest
from deck.errors import ConnectionClosed, ServiceError
from deck.proc.supervisor import StopTimings

from tests.conftest import AGENTS, FAKE_AGENT, agent_block, alive, descendants_of_self

pytestmark = pytest.mark.anyio


async def test_lifecycle_state_sequence(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await deck.agent_service.start("a")
    deck.chat.send("a", "hello")
    await rec.wait_event("turn:changed", agent="a", busy=False)
    await deck.agent_service.stop("a")
    assert rec.states("a") == ["starting", "ready", "busy", "ready", "stopped"]
    assert [a["state"] for a in await deck.agent_service.list_agents()] == ["stopped"]


async def test_handshake_timeout_is_an_error(make_deck):
    deck, rec = make_deck("[limits]\nhandshakeTimeout = \"0.5s\"\n" + agent_block("a", "--hang-handshake"))
    with pytest.raises(ServiceError, match="handshake timed out after 0.5s"):
        await deck.agent_service.start("a")
    assert rec.states("a") == ["starting", "error"]
    assert deck.agents["a"].process is None


async def test_a_handshake_timeout_is_an_error_at_once_and_the_agent_is_stopped_after(make_deck):
    timings = StopTimings(after_stdin_close=1.5, after_sigterm=0.5, after_sigkill=1.0)
    toml = '[limits]\nhandshakeTimeout = "0.3s"\n' + agent_block("a", "--hang-handshake", "--ignore-eof")
    deck, rec = make_deck(toml, timings=timings)
    started = time.monotonic()
    with pytest.raises(ServiceError, match="handshake timed out after 0.3s"):
        await deck.agent_service.start("a")
    assert time.monotonic() - started < 1.2  # not once its stdin close, 1.5 s, and SIGTERM are through
    assert rec.states("a") == ["starting", "error"]
    assert descendants_of_self()  # it is being stopped, in the background
    await deck.stop_all()  # which a stop waits for
    assert not descendants_of_self()
    assert any("SIGTERM" in line for line in deck.agents["a"].logs)
    assert rec.states("a") == ["starting", "error"]


async def test_other_protocol_version_is_refused(make_deck):
    deck, rec = make_deck(agent_block("a", "--protocol", "2"))
    with pytest.raises(ServiceError, match="protocol version 2"):
        await deck.agent_service.start("a")
    assert deck.agents["a"].state.value == "error"


async def test_updates_for_a_closed_session_or_one_never_opened_are_dropped_with_a_log_line(make_deck):
    asking = [sys.executable, str(AGENTS / "asking_agent.py")]
    deck, rec = make_deck(agent_block("a", command=asking))
    await deck.agent_service.start("a")
    agent = deck.agents["a"]
    seen: list[dict] = []

    class Sink:
        def on_update(self, update: dict) -> None:
            seen.append(update)

    closed = await agent.open_session(Sink(), "test")
    closed.close()
    deck.chat.send("a", f"stray {closed.id} {closed.id} never never")
    await rec.wait(lambda r: any(not p["busy"] for p in r.named("turn:changed", "a")))
    assert seen == []
    assert [line for line in agent.logs if "closed session" in line] == [
        f"deck: updates for closed session {closed.id!r} dropped"
    ]  # once, however many come
    await deck.agent_service.stop("a")
    assert "deck: 2 update(s) for sessions never opened dropped: the agent stopped" in agent.logs


async def test_an_initialize_answer_without_a_protocol_version_is_refused_saying_so(make_deck):
    deck, rec = make_deck(agent_block("a", "--no-protocol"))
    with pytest.raises(ServiceError, match="the agent's initialize answer has no protocolVersion; deck speaks version 1"):
        await deck.agent_service.start("a")
    assert deck.agents["a"].state.value == "error"


async def test_start_failure_carries_reason_and_stderr_tail(make_deck):
    deck, rec = make_deck(agent_block("a", "--fail-start"))
    with pytest.raises(ServiceError):
        await deck.agent_service.start("a")
    error = rec.named("agent:state", "a")[-1]["error"]
    assert "exited during the handshake with code 3" in error
    assert error.splitlines()[-2:] == ["fatal: missing API key", "see the docs"]


async def test_missing_command_is_a_clear_error(make_deck):
    deck, rec = make_deck(agent_block("a", command=["/no/such/agent-binary"]))
    with pytest.raises(ServiceError, match="command not found: /no/such/agent-binary"):
        await deck.agent_service.start("a")
    assert rec.states("a") == ["starting", "error"]


async def test_crash_mid_turn_is_error_never_restarted(make_deck):
    deck, rec = make_deck(agent_block("a"))
    deck.chat.send("a", "crash")
    await rec.wait_event("agent:state", agent="a", state="error")
    reply = (await rec.wait_event("turn:changed", agent="a", busy=False)) and deck.chat.conversation("a").messages[-1]
    assert reply.role == "agent" and reply.done and reply.stop_reason is None
    assert "code 7" in reply.error
    assert reply.text == "about to crash"  # what it wrote before dying is kept
    await asyncio.sleep(0.3)
    assert deck.agents["a"].state.value == "error"  # not restarted automatically
    # The next use starts it again.
    deck.chat.send("a", "hi again")
    await rec.wait(lambda r: r.states("a")[-2:] == ["busy", "ready"])
    assert deck.chat.conversation("a").messages[-1].text == "You said: hi again"


async def test_twenty_mib_line_arrives_intact(make_deck):
    limits = '[limits]\nmessageSize = "32 MiB"\nconversationSize = "64 MiB"\n'  # the caps are not what is tested
    deck, rec = make_deck(limits + agent_block("a"))
    size = 20 * 1024 * 1024
    deck.chat.send("a", f"big {size}")
    await rec.wait_event("turn:changed", agent="a", busy=False, timeout=60)
    reply = deck.chat.conversation("a").messages[-1]
    assert reply.stop_reason == "end_turn"
    assert len(reply.text) == size and set(reply.text) == {"x"}


async def test_garbage_lines_are_logged_and_skipped(make_deck):
    deck, rec = make_deck(agent_block("a", "--garbage"))
    await deck.agent_service.start("a")
    logs = await deck.agent_service.logs("a")
    assert any("not JSON, skipped: this is not json" in line for line in logs)
    assert deck.agents["a"].state.value == "ready"


async def test_megabytes_of_stderr_never_stall(make_deck):
    deck, rec = make_deck(agent_block("a", "--stderr-mb", "8"))
    await deck.agent_service.start("a")
    logs = await deck.agent_service.logs("a")
    assert len(logs) == 200
    assert len(rec.named("agent:log", "a")) >= 8 * 1024


async def stop_timed(deck, name: str) -> float:
    """Start `name`, stop it, check its process is gone; the seconds the stop took."""
    await deck.agent_service.start(name)
    pid = deck.agents[name].process.pid
    started = time.monotonic()
    await deck.agent_service.stop(name)
    elapsed = time.monotonic() - started
    assert not alive(pid)
    return elapsed


async def test_stop_escalates_to_sigkill_for_a_stubborn_agent(make_deck):
    deck, rec = make_deck(agent_block("a", "--ignore-eof", "--ignore-sigterm"))
    elapsed = await stop_timed(deck, "a")
    logs = await deck.agent_service.logs("a")
    assert any("SIGTERM" in line for line in logs) and any("SIGKILL" in line for line in logs)
    assert 0.5 <= elapsed < 3


@pytest.mark.timeout(30)
async def test_stop_escalation_at_the_real_timings(make_deck):
    deck, rec = make_deck(agent_block("a", "--ignore-eof", "--ignore-sigterm"), timings=StopTimings())
    elapsed = await stop_timed(deck, "a")
    assert 7.9 <= elapsed < 14  # 5 s + 3 s, with room for a loaded machine


async def test_setsid_grandchild_is_ended_too(make_deck, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    deck, rec = make_deck(agent_block("a", "--grandchild", str(pidfile), "--ignore-eof"))
    await deck.agent_service.start("a")
    grandchild = int(pidfile.read_text())
    assert alive(grandchild)
    assert os.getsid(grandchild) != os.getsid(deck.agents["a"].process.pid)
    await deck.agent_service.stop("a")
    await asyncio.sleep(0.2)
    assert not alive(grandchild)


async def test_many_stops_run_in_parallel(make_deck):
    text = "".join(agent_block(f"a{i}", "--ignore-eof", "--ignore-sigterm") for i in range(4))
    timings = StopTimings(after_stdin_close=1.5, after_sigterm=0.5, after_sigkill=1.0)
    deck, rec = make_deck("[limits]\nmaxRunningAgents = 8\n" + text, timings=timings)
    await asyncio.gather(*(deck.agent_service.start(f"a{i}") for i in range(4)))
    started = time.monotonic()
    await deck.stop_all()
    assert time.monotonic() - started < 5  # one escalation (2 s) for all, not four in a row (8 s)
    assert not descendants_of_self()


async def test_stop_while_starting_stops_once_started(make_deck):
    deck, rec = make_deck(agent_block("a"))
    start = asyncio.ensure_future(deck.agent_service.start("a"))
    await rec.wait_event("agent:state", agent="a", state="starting")
    await deck.agent_service.stop("a")
    with pytest.raises(ServiceError, match="stopped while starting"):
        await start
    assert rec.states("a") == ["starting", "stopped"]


async def test_restart_keeps_the_conversation_with_a_system_note(make_deck):
    deck, rec = make_deck(agent_block("a"))
    deck.chat.send("a", "one")
    await rec.wait_event("turn:changed", agent="a", busy=False)
    await deck.agent_service.restart("a")
    codes = [m.code for m in deck.chat.conversation("a").messages if m.role == "system"]
    assert codes == ["agent-restarted"]


async def test_unknown_agent_is_an_error(make_deck):
    deck, rec = make_deck(agent_block("a"))
    with pytest.raises(ServiceError, match="unknown agent 'nope'"):
        await deck.agent_service.start("nope")


async def test_an_early_update_with_bad_values_does_not_break_the_start(make_deck):
    deck, rec = make_deck(agent_block("a", "--bad-early-update"))
    await deck.agent_service.start("a")
    assert rec.states("a") == ["starting", "ready"]
    assert rec.named("usage:changed", "a") == [{"agent": "a", "usage": {"used": 0, "size": 0}}]


async def test_stop_during_a_hung_handshake_stops_at_once(make_deck):
    deck, rec = make_deck(agent_block("a", "--hang-handshake"))  # the default 30 s handshake timeout
    start = asyncio.ensure_future(deck.agent_service.start("a"))
    await rec.wait_event("agent:state", agent="a", state="starting")
    await asyncio.sleep(0.2)
    started = time.monotonic()
    await deck.agent_service.stop("a")
    assert time.monotonic() - started < 5
    assert rec.states("a") == ["starting", "stopped"]
    with pytest.raises(ServiceError, match="stopped while starting"):
        await start


async def test_what_a_crashed_agent_left_in_its_group_gets_sigterm_and_time(make_deck, tmp_path):
    ended = tmp_path / "ended"
    timings = StopTimings(after_stdin_close=0.3, after_sigterm=3.0, after_sigkill=1.0)
    deck, rec = make_deck(agent_block("a", "--trap-child", str(ended)), timings=timings)
    deck.chat.send("a", "crash")
    await rec.wait_event("agent:state", agent="a", state="error")
    assert ended.read_text() == "ended\n"  # SIGTERM first, and the 0.3 s it needed, not SIGKILL at once
    assert not descendants_of_self()


async def test_a_failed_start_shows_this_runs_stderr_only(make_deck):
    deck, rec = make_deck(agent_block("a", "--stderr-mb", "1"))
    await deck.agent_service.start("a")
    await deck.agent_service.stop("a")
    agent = deck.agents["a"]
    agent.config = agent.config.model_copy(update={"cwd": "/nonexistent/dir"})
    with pytest.raises(ServiceError):
        await deck.agent_service.start("a")
    assert agent.error == "working directory does not exist: /nonexistent/dir"


async def test_queued_messages_are_not_sent_after_a_stop(make_deck):
    deck, rec = make_deck(agent_block("a"))
    deck.chat.send("a", "slow")
    await rec.wait_event("message:delta", agent="a")
    waiting = deck.chat.turns.send("a", "hello")
    await deck.agent_service.stop("a")
    await rec.wait(lambda r: waiting.error is not None)
    await asyncio.sleep(0.3)
    assert rec.states("a")[-1] == "stopped" and rec.states("a").count("starting") == 1  # not restarted
    assert waiting.error == "not sent: a stopped" and not waiting.queued


async def test_queued_messages_are_not_sent_after_a_crash(make_deck):
    deck, rec = make_deck(agent_block("a"))
    deck.chat.send("a", "sleep 0.3")
    deck.chat.send("a", "crash")
    waiting = deck.chat.turns.send("a", "after the crash")
    await rec.wait(lambda r: waiting.error is not None)
    await asyncio.sleep(0.3)
    assert rec.states("a")[-1] == "error" and rec.states("a").count("starting") == 1
    assert waiting.error == "not sent: a failed: the agent exited on its own with code 7"


async def test_chunks_whose_text_is_not_a_string_are_skipped(make_deck):
    deck, rec = make_deck(agent_block("a"))
    deck.chat.send("a", "badtext")
    await rec.wait_event("turn:changed", agent="a", busy=False)
    reply = deck.chat.conversation("a").messages[-1]
    assert reply.stop_reason == "end_turn" and reply.text == "ok"
    assert (await deck.chat.conversation_snapshot("a"))["messages"][-1]["parts"] == [{"type": "text", "text": "ok"}]


async def test_an_endless_stderr_line_is_cut_and_the_next_lines_still_come(make_deck, tmp_path):
    script = tmp_path / "noisy.py"
    script.write_text(
        "import sys\n"
        "sys.stderr.write('x' * 300000 + '\\nafter the long line\\n'); sys.stderr.flush()\n"
        f"exec(open({str(FAKE_AGENT)!r}).read())\n"
    )
    deck, rec = make_deck(agent_block("a", command=[sys.executable, str(script)]))
    await deck.agent_service.start("a")
    await rec.wait(lambda r: any(p["line"] == "after the long line" for p in r.named("agent:log", "a")))
    lines = [p["line"] for p in rec.named("agent:log", "a")]
    cut = [line for line in lines if line.startswith("xxx")]
    assert len(cut) == 1 and cut[0].endswith(" [cut]") and len(cut[0]) < 20000


# -- sessions of its own: what plugins use ------------------------------------------------------------


class Sink:
    """A plugin's session sink: the text of the agent's message chunks."""

    def __init__(self) -> None:
        self.updates: list[dict] = []

    def on_update(self, update: dict) -> None:
        self.updates.append(update)

    @property
    def text(self) -> str:
        return "".join(u["content"]["text"] for u in self.updates if u.get("sessionUpdate") == "agent_message_chunk")


async def test_a_session_of_its_own_is_prompted_and_leaves_the_conversation_alone(make_deck):
    deck, rec = make_deck(agent_block("a"))
    agent = deck.agents["a"]
    await agent.start()
    sink = Sink()
    session = await agent.open_session(sink, origin="test")
    assert session.id is not None and session.id != agent.session_id and session.origin == "test"
    result = await session.prompt("hello")
    assert result["stopReason"] == "end_turn" and sink.text == "You said: hello"
    assert deck.chat.conversation("a").messages == []  # the conversation saw none of it
    # What it asks the user waits like any request, with no message of a conversation, and ends with the session.
    asking = asyncio.ensure_future(session.prompt("perm"))
    request = await rec.wait_event("permission:requested", agent="a")
    assert request["messageId"] == "" and request["toolCall"]["title"] == "Edit file" and request["toolCall"]["kind"] == "edit"
    assert [p["id"] for p in deck.chat.list_pending()] == [request["id"]]
    session.close()
    assert await rec.wait_event("permission:resolved", id=request["id"]) == {"id": request["id"], "agent": "a"}
    assert (await asking)["stopReason"] == "cancelled"
    assert "permission: cancelled" not in sink.text  # closed: its late updates go nowhere
    with pytest.raises(ConnectionClosed):
        await session.prompt("again")


async def test_an_agent_connection_owns_its_request_handlers(make_deck):
    deck, rec = make_deck(agent_block("a"))
    deck.chat.send("a", "perm")
    request = await rec.wait_event("permission:requested", agent="a")
    agent = deck.agents["a"]
    handlers = [t for t in asyncio.all_tasks() if t.get_name() == "a: session/request_permission"]
    assert len(handlers) == 1 and len(agent.tasks) == 2  # the handler and the exit watch
    await deck.agent_service.stop("a")
    await rec.wait_event("permission:resolved", id=request["id"])
    async with asyncio.timeout(5):
        await agent.tasks.wait()  # cancelled with the connection: nothing of it is left running
    assert handlers[0].cancelled() and len(agent.tasks) == 0
