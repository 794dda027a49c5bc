"""`deck acp AGENT`: deck as an ACP agent on stdin/stdout, with a deck of its own or through the config's
running server; a bare client of JSON lines drives it (the SDK and acpx are in test_acp_clients.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.acp_client import INITIALIZE, AcpProcess
from tests.conftest import agent_block
from tests.core.remote.test_server import cli, clients, runtime, serve  # noqa: F401  (fixtures)
from tests.peers.schema import AcpSchema

pytestmark = [pytest.mark.timeout(90)]

SCHEMA = AcpSchema()


def checked(name: str, value: object) -> None:
    """`value` is valid as the ACP schema's `name`."""
    assert SCHEMA.errors(SCHEMA.definition(name), value) == [], value


@pytest.fixture
def acp(tmp_path: Path):
    made: list[AcpProcess] = []

    def start(*args: str, **kwargs: object) -> AcpProcess:
        process = AcpProcess(*args, cwd=tmp_path, **kwargs)  # type: ignore[arg-type]
        made.append(process)
        return process

    yield start
    for process in made:
        process.kill()


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "deck.toml"
    path.write_text(text)
    return str(path)


def test_initialize_names_deck_and_the_agent_and_offers_what_the_history_serves(tmp_path, acp) -> None:
    client = acp("a", "--config", config(tmp_path, agent_block("a", title="Agent A")))
    result = client.call("initialize", INITIALIZE)
    checked("InitializeResponse", result)
    assert result["protocolVersion"] == 1 and result["authMethods"] == []
    assert result["agentInfo"]["name"] == "deck" and result["agentInfo"]["title"] == "Agent A (deck: a)"
    caps = result["agentCapabilities"]
    assert caps["loadSession"] is True
    assert caps["sessionCapabilities"] == {"close": {}, "list": {}, "resume": {}}
    assert client.close() == 0


def test_without_history_no_session_can_be_loaded_or_listed(tmp_path, acp) -> None:
    text = "[history]\nenabled = false\n" + agent_block("a")
    client = acp("a", "--config", config(tmp_path, text))
    caps = client.call("initialize", INITIALIZE)["agentCapabilities"]
    assert caps["loadSession"] is False and caps["sessionCapabilities"] == {"close": {}}
    session = client.call("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
    assert session.startswith("deck-")
    assert client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]}) == {"stopReason": "end_turn"}
    assert client.error("session/list")["code"] == -32002


def test_a_prompt_streams_every_kind_of_update_and_ends_with_its_stop_reason(tmp_path, acp) -> None:
    client = acp("a", "--config", config(tmp_path, agent_block("a", "--modes")))
    client.call("initialize", INITIALIZE)
    opened = client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    checked("NewSessionResponse", opened)
    session = opened["sessionId"]
    assert [o["id"] for o in opened["configOptions"]] == ["model"]  # the agent's session, started for it

    def prompt(text: str) -> dict:
        return client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]})

    assert prompt("stream 50") == {"stopReason": "end_turn"}
    assert client.text(session) == "".join(f"c{i} " for i in range(50))
    for text in ("thought", "tools", "plan", "usage", "session"):
        assert prompt(text)["stopReason"] == "end_turn"
    assert client.text(session, "agent_thought_chunk") == "thinking more thinking"
    tools = client.updates(session, "tool_call") + client.updates(session, "tool_call_update")
    assert tools[0]["sessionUpdate"] == "tool_call" and tools[0]["toolCallId"] == "ta" and tools[0]["kind"] == "read"
    assert tools[-1]["status"] == "completed" and {"type": "diff", "path": "/w/new.txt", "oldText": None, "newText": "new"} in tools[-1]["content"]
    assert client.updates(session, "plan")[-1]["entries"] == [{"content": "one", "priority": "high", "status": "completed"}]
    assert client.updates(session, "usage_update")[-1] == {"sessionUpdate": "usage_update", "used": 1000, "size": 200000}
    assert client.updates(session, "session_info_update")[-1]["title"] == "A title"
    assert client.updates(session, "config_option_update")[-1]["configOptions"][0]["currentValue"] == "m2"
    assert client.updates(session, "available_commands_update")[-1]["availableCommands"][0]["name"] == "web"
    for line in client.lines:  # stdout carries JSON-RPC only, each update valid ACP
        assert line["jsonrpc"] == "2.0", line
        if line.get("method") == "session/update":
            checked("SessionNotification", line["params"])
    assert prompt("stop max_tokens") == {"stopReason": "max_tokens"}
    assert client.close() == 0


def test_set_config_option_and_mode_go_to_the_agent(tmp_path, acp) -> None:
    client = acp("a", "--config", config(tmp_path, agent_block("a", "--modes")))
    session = client.open_session()
    options = client.call("session/set_config_option", {"sessionId": session, "configId": "model", "value": "m1"})
    assert next(o for o in options["configOptions"] if o["id"] == "model")["currentValue"] == "m1"
    assert client.call("session/set_mode", {"sessionId": session, "modeId": "b"}) == {}
    bad = client.error("session/set_config_option", {"sessionId": session, "configId": "model", "value": 3})
    assert bad["code"] == -32602


def test_sessions_are_deck_conversations_listed_loaded_resumed_and_closed(tmp_path, acp) -> None:
    toml = config(tmp_path, agent_block("a"))
    first = acp("a", "--config", toml)
    one = first.open_session()
    first.call("session/prompt", {"sessionId": one, "prompt": [{"type": "text", "text": "hello one"}]})
    two = first.call("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
    first.call("session/prompt", {"sessionId": two, "prompt": [{"type": "text", "text": "hello two"}]})
    # A prompt to the first session makes its conversation the agent's current one again.
    first.call("session/prompt", {"sessionId": one, "prompt": [{"type": "text", "text": "hello again"}]})
    listed = first.call("session/list", {})
    checked("ListSessionsResponse", listed)
    assert [(s["sessionId"], s["title"]) for s in listed["sessions"]] == [(one, "hello one"), (two, "hello two")]
    assert first.call("session/close", {"sessionId": two}) == {}
    assert first.error("session/prompt", {"sessionId": two, "prompt": [{"type": "text", "text": "x"}]})["code"] == -32002
    assert first.close() == 0
    history = {row["id"]: row["messages"] for row in json.loads(cli("history", "a", "--json", "--config", toml).stdout)}
    assert history[two] == 2 and history[one] >= 4  # deck's own history (and its note: the agent restarted)

    second = acp("a", "--config", toml)
    second.call("initialize", INITIALIZE)
    loaded = second.call("session/load", {"sessionId": one, "cwd": "/tmp", "mcpServers": []})
    checked("LoadSessionResponse", loaded)
    told = [(u["sessionUpdate"], u["content"]["text"]) for u in second.updates(one)]
    assert told == [
        ("user_message_chunk", "hello one"), ("agent_message_chunk", "You said: hello one"),
        ("user_message_chunk", "hello again"), ("agent_message_chunk", "You said: hello again"),
    ]  # fmt: skip
    second.call("session/prompt", {"sessionId": one, "prompt": [{"type": "text", "text": "hello three"}]})
    assert second.call("session/resume", {"sessionId": two, "cwd": "/tmp"}) == {}
    assert second.updates(two) == []  # resumed: nothing told again
    assert second.error("session/load", {"sessionId": "no-such-session", "cwd": "/tmp"})["code"] == -32002
    assert second.close() == 0
    later = {row["id"]: row["messages"] for row in json.loads(cli("history", "a", "--json", "--config", toml).stdout)}
    assert later[one] >= history[one] + 2


def test_hostile_load_or_resume_of_another_agents_conversation_is_refused_and_changes_nothing(serve, clients, acp) -> None:
    """`deck acp a` asked for b's conversations by their ids: refused as sessions it does not have,
    nothing told under their ids, b's current conversation left as it is (for the other frontends too)."""
    server = serve(agent_block("a") + agent_block("b"), name="foreign")
    watcher = clients(server.path)
    watcher.call("DeckService.Snapshot")  # events from now on
    other = acp("b", "--attach", server.name)
    older = other.open_session()
    other.call("session/prompt", {"sessionId": older, "prompt": [{"type": "text", "text": "secret of b"}]})
    current = other.call("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
    other.call("session/prompt", {"sessionId": current, "prompt": [{"type": "text", "text": "b goes on"}]})
    seen = len(watcher.lines)
    client = acp("a", "--attach", server.name)
    mine = client.open_session()
    client.call("session/prompt", {"sessionId": mine, "prompt": [{"type": "text", "text": "a's own"}]})
    for method, session in (("session/load", older), ("session/resume", older), ("session/load", current), ("session/resume", current)):
        refused = client.error(method, {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
        assert refused["code"] == -32002 and "another agent's (b's)" in refused["message"], refused
        assert client.updates(session) == []  # nothing of a's told as b's session
    assert client.error("session/prompt", {"sessionId": older, "prompt": [{"type": "text", "text": "x"}]})["code"] == -32002
    assert client.call("session/prompt", {"sessionId": mine, "prompt": [{"type": "text", "text": "still mine"}]})["stopReason"] == "end_turn"
    texts = [p.get("text") for m in watcher.call("ChatService.Conversation", {"agent": "b"})["messages"] for p in m["parts"]]
    assert "b goes on" in texts and "secret of b" not in texts  # b's current conversation is still its own
    assert not any(x.get("event") == "conversation:reset" and x.get("agent") == "b" for x in watcher.lines[seen:])
    # The service itself: the id of b's conversation with agent a named is refused, nothing changed.
    reply = watcher.response(watcher.request("ChatService.OpenConversation", {"id": older, "agent": "a"}))
    assert reply["error"]["data"] == {"conversationId": older, "agent": "b"}, reply
    assert other.call("session/prompt", {"sessionId": current, "prompt": [{"type": "text", "text": "b still"}]})["stopReason"] == "end_turn"


def test_cancel_ends_the_prompt_as_cancelled(tmp_path, acp) -> None:
    client = acp("a", "--config", config(tmp_path, agent_block("a")))
    session = client.open_session()
    prompt = client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "slow"}]})
    client.wait_line(lambda x: x.get("method") == "session/update")
    client.notify("session/cancel", {"sessionId": session})
    assert client.response(prompt)["result"] == {"stopReason": "cancelled"}
    assert "tick" in client.text(session)
    again = client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "after"}]})
    assert again == {"stopReason": "end_turn"}
    # Closing a session cancels its prompt, as ACP asks.
    seen = len(client.lines)
    prompt = client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "slow"}]})
    client.wait_for(lambda lines: any(x.get("method") == "session/update" for x in lines[seen:]))
    assert client.call("session/close", {"sessionId": session}) == {}
    assert client.response(prompt)["result"] == {"stopReason": "cancelled"}


def test_a_permission_goes_to_the_client_and_its_answer_to_the_agent(tmp_path, acp) -> None:
    client = acp("a", "--config", config(tmp_path, agent_block("a")))
    session = client.open_session()
    prompt = client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "perm"}]})
    asked = client.asked("session/request_permission")
    checked("RequestPermissionRequest", asked["params"])
    assert asked["params"]["sessionId"] == session and asked["params"]["toolCall"]["title"] == "Edit file"
    assert [o["optionId"] for o in asked["params"]["options"]] == ["yes", "no"]
    client.answer(asked["id"], {"outcome": {"outcome": "selected", "optionId": "yes"}})
    assert client.response(prompt)["result"] == {"stopReason": "end_turn"}
    assert client.text(session).endswith("permission: yes")


def test_a_question_goes_to_a_client_that_takes_forms(tmp_path, acp) -> None:
    client = acp("a", "--config", config(tmp_path, agent_block("a")))
    client.call("initialize", {**INITIALIZE, "clientCapabilities": {"elicitation": {"form": {}}}})
    session = client.call("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
    prompt = client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "question"}]})
    asked = client.asked("elicitation/create")
    assert asked["params"]["mode"] == "form" and asked["params"]["message"] == "Your name?"
    assert asked["params"]["requestedSchema"]["properties"] == {"name": {"type": "string"}}
    client.answer(asked["id"], {"action": "accept", "content": {"name": "Ada"}})
    assert client.response(prompt)["result"] == {"stopReason": "end_turn"}
    assert json.loads(client.text(session)) == {"action": "accept", "content": {"name": "Ada"}}


def test_hostile_input_gets_its_error_and_deck_goes_on(tmp_path, acp) -> None:
    client = acp("a", "--config", config(tmp_path, agent_block("a")))
    assert client.error("session/new", {"cwd": "/tmp", "mcpServers": []})["code"] == -32600  # initialize first
    session = client.open_session()
    assert client.error("initialize", INITIALIZE)["code"] == -32600  # once
    client.send_raw(b"{not json\n")
    assert client.wait_line(lambda x: x.get("error", {}).get("code") == -32700)["id"] is None
    client.send_raw(b"[1, 2]\n" + b'"a string"\n')
    assert client.wait_line(lambda x: "batches" in x.get("error", {}).get("message", ""))["id"] is None
    client.wait_line(lambda x: "JSON object" in x.get("error", {}).get("message", ""))
    client.send_raw(b"[" * 100_000 + b"]" * 100_000 + b"\n")  # nested past any real message
    client.wait_line(lambda x: x.get("error", {}).get("code") == -32700, count=2)
    client.send_raw(b'{"jsonrpc":"2.0","id":"big","method":"x","params":"' + b"y" * (17 << 20) + b'"}\n')  # past the line cap
    client.wait_line(lambda x: "bytes skipped" in x.get("error", {}).get("message", ""))
    assert client.error("no/such_method")["code"] == -32601
    assert client.error("initialize", {"protocolVersion": "one"})["code"] == -32602
    assert client.error("session/prompt", {"sessionId": 7, "prompt": []})["code"] == -32602
    assert client.error("session/prompt", {"sessionId": session, "prompt": [{"type": "image", "data": "", "mimeType": "image/png"}]})["code"] == -32602
    assert client.error("session/prompt", {"sessionId": "nobody", "prompt": [{"type": "text", "text": "x"}]})["code"] == -32002
    assert client.error("session/new", {"cwd": "relative"})["code"] == -32602
    # A flood: 3,000 requests in one write, each answered once (at most MAX_REQUESTS served at a time).
    flood = b"".join(json.dumps({"jsonrpc": "2.0", "id": f"f{i}", "method": "session/list", "params": {}}).encode() + b"\n" for i in range(3000))
    client.send_raw(flood)
    answers = client.wait_for(lambda lines: (found := [x for x in lines if str(x.get("id", "")).startswith("f")]) and len(found) >= 3000 and found, 60)
    assert sorted(x["id"] for x in answers) == sorted(f"f{i}" for i in range(3000))
    assert any("too many requests" in x.get("error", {}).get("message", "") for x in answers)
    prompt = client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "still here"}]})
    assert prompt == {"stopReason": "end_turn"}
    assert client.close() == 0


def test_through_a_server_the_client_is_one_more_client_and_a_permission_is_answered_from_deck_answer(serve, clients, acp) -> None:
    server = serve(agent_block("a"), name="acp")
    watcher = clients(server.path)
    watcher.call("DeckService.Snapshot")
    args = list(server.popen.args)
    client = acp("a", "--config", args[args.index("--config") + 1])  # the config the server runs: the client goes through it
    session = client.open_session()
    prompt = client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "perm"}]})
    # The attached client sees the ACP client's prompt live, as its own.
    watcher.wait_line(lambda e: e.get("event") == "message:updated" and e["message"]["role"] == "user"
                      and e["message"]["parts"][0]["text"] == "perm")  # fmt: skip
    asked = client.asked("session/request_permission")
    inbox = json.loads(cli("inbox", "--attach", server.name, "--json").stdout)
    assert [row["kind"] for row in inbox] == ["permission"]  # in deck's inbox at once
    done = cli("answer", inbox[0]["id"], "yes", "--attach", server.name)
    assert done.returncode == 0, done.stderr
    withdrawn = client.wait_line(lambda x: x.get("method") == "$/cancel_request")
    assert withdrawn["params"] == {"requestId": asked["id"]}  # the client is told another answered
    client.answer(asked["id"], {"outcome": {"outcome": "selected", "optionId": "no"}})  # too late: ignored
    assert client.response(prompt)["result"] == {"stopReason": "end_turn"}
    assert client.text(session).endswith("permission: yes")
    clients_now = watcher.call("DeckService.Clients")
    assert any("acp" in c["command"] for c in clients_now)
    # Another client's prompt in the same conversation reaches the ACP client as the user's message.
    watcher.call("ChatService.Send", {"agent": "a", "text": "from the console"})
    client.wait_line(lambda x: x.get("method") == "session/update" and x["params"]["update"]["sessionUpdate"] == "user_message_chunk"
                     and x["params"]["update"]["content"]["text"] == "from the console")  # fmt: skip
    assert client.close() == 0
    assert server.popen.poll() is None  # the server goes on


def test_a_client_gone_with_a_permission_waiting_ends_deck_acp(tmp_path, acp) -> None:
    client = acp("a", "--config", config(tmp_path, agent_block("a")))
    session = client.open_session()
    prompt = client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "perm"}]})
    client.asked("session/request_permission")
    assert client.close() == 0  # end of stdin: nobody is left to answer, the turn ends, deck acp with it
    assert client.response(prompt)["result"] == {"stopReason": "cancelled"}


def test_a_client_that_does_not_read_never_holds_the_server_up(serve, clients, tmp_path) -> None:
    import subprocess
    import threading

    from tests.deck_process import DECK, Lines

    server = serve(agent_block("a"), name="slowreader")
    watcher = clients(server.path)
    watcher.call("DeckService.Snapshot")
    args = list(server.popen.args)
    proc = subprocess.Popen([*DECK, "acp", "a", "--config", args[args.index("--config") + 1]],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        assert proc.stdin is not None and proc.stdout is not None
        requests = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE},
            {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}},
        ]
        proc.stdin.write(b"".join(json.dumps(r).encode() + b"\n" for r in requests))
        proc.stdin.flush()
        lines = [json.loads(proc.stdout.readline()) for _ in range(2)]
        session = lines[1]["result"]["sessionId"]
        prompt = {"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                  "params": {"sessionId": session, "prompt": [{"type": "text", "text": "stream 200000"}]}}  # fmt: skip
        proc.stdin.write(json.dumps(prompt).encode() + b"\n")  # 1.3 MB of answer for a client that reads none of it
        proc.stdin.flush()
        watcher.wait_line(lambda e: e.get("event") == "turn:changed" and e.get("busy") is False, timeout=90)
        assert watcher.call("AgentService.List")[0]["state"] in ("ready", "busy")  # the server answers at once
        assert proc.poll() is None  # deck acp holds the output, and waits for its client
        reader = Lines()
        threading.Thread(target=reader.feed, args=(proc.stdout,), daemon=True).start()
        assert reader.response(3, timeout=60)["result"] == {"stopReason": "end_turn"}
        updates = [x["params"]["update"] for x in reader.lines if x.get("method") == "session/update"]
        told = "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk")
        assert told == "".join(f"c{i} " for i in range(200_000))  # the whole answer, held until the client read
        assert len(updates) < 20_000  # its chunks joined while they waited: far fewer updates than chunks
    finally:
        proc.kill()
        proc.wait(10)


def test_an_unknown_agent_is_a_usage_error_on_stderr_and_nothing_on_stdout(tmp_path, acp) -> None:
    client = acp("nobody", "--config", config(tmp_path, agent_block("a")))
    assert client.popen.wait(30) == 2
    client.wait_end()
    assert client.raw == [] and b"unknown agent 'nobody' (agents: a)" in client.stderr


def test_attach_names_the_server_and_takes_no_config(serve, acp, tmp_path) -> None:
    server = serve(agent_block("a"), name="named")
    client = acp("a", "--attach", server.name)
    session = client.open_session()
    assert client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "hi there"}]}) == {"stopReason": "end_turn"}
    assert client.text(session) == "You said: hi there"
    both = acp("a", "--attach", server.name, "--config", config(tmp_path, agent_block("a")))
    assert both.popen.wait(30) == 2 and both.raw == []
    gone = acp("a", "--attach", "nobody")
    assert gone.popen.wait(30) == 1
    gone.wait_end()
    assert gone.raw == [] and b"nobody" in gone.stderr


def test_files_as_stdin_and_stdout_are_read_and_written_too(tmp_path) -> None:
    import subprocess

    from tests.deck_process import DECK

    requests = tmp_path / "in.jsonl"
    requests.write_text("".join(json.dumps(r) + "\n" for r in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE},
        {"jsonrpc": "2.0", "id": 2, "method": "session/list", "params": {}},  # waits for initialize's answer
    )))  # fmt: skip
    out = tmp_path / "out.jsonl"
    with requests.open("rb") as stdin, out.open("wb") as stdout:
        done = subprocess.run([*DECK, "acp", "a", "--config", config(tmp_path, agent_block("a"))], stdin=stdin,
                              stdout=stdout, stderr=subprocess.PIPE, timeout=60, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    answers = {m["id"]: m for m in map(json.loads, out.read_text().splitlines())}
    assert answers[1]["result"]["protocolVersion"] == 1 and answers[2]["result"] == {"sessions": []}


def test_a_prompt_queued_behind_another_clients_turn_is_unqueued_by_cancel(serve, clients, acp) -> None:
    server = serve(agent_block("a"), name="queued")
    watcher = clients(server.path)
    client = acp("a", "--attach", server.name)
    session = client.open_session()
    watcher.call("ChatService.Send", {"agent": "a", "text": "slow"})  # another client's turn, in the same conversation
    watcher.wait_line(lambda e: e.get("event") == "message:delta" and e.get("agent") == "a")
    prompt = client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "mine"}]})
    watcher.wait_line(lambda e: e.get("event") == "turn:changed" and e.get("queued") == 1)  # it waits its turn
    client.notify("session/cancel", {"sessionId": session})
    assert client.response(prompt)["result"] == {"stopReason": "cancelled"}
    assert watcher.call("ChatService.Queue", {"agent": "a"}) == []
    assert watcher.call("ChatService.Conversation", {"agent": "a"})["busy"] is True  # the other turn goes on
    assert "tick" in client.text(session)  # seen by the ACP client as it streams
    watcher.call("ChatService.Cancel", {"agent": "a"})


def test_a_flood_from_a_client_that_does_not_read_is_read_no_faster_than_it_reads(tmp_path) -> None:
    """300,000 requests written while none of their answers is read: deck acp stops reading its stdin
    once its answers wait (its memory stays flat), then answers every one once the client reads."""
    import subprocess
    import threading
    import time

    import psutil

    from tests.deck_process import DECK, Lines

    proc = subprocess.Popen([*DECK, "acp", "a", "--config", config(tmp_path, agent_block("a"))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tmp_path)  # fmt: skip
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE}).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 0
        before = psutil.Process(proc.pid).memory_info().rss
        flood = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"no/such"}\n' % i for i in range(1, 300_001))
        writer = threading.Thread(target=proc.stdin.write, args=(flood,), daemon=True)
        writer.start()
        peak = before
        for _ in range(30):  # 3 s of flood, nothing read
            peak = max(peak, psutil.Process(proc.pid).memory_info().rss)
            time.sleep(0.1)
        assert writer.is_alive()  # deck acp stopped reading: the client's own write waits
        assert peak - before < 12 * 1024 * 1024, f"grew {(peak - before) >> 20} MB"  # (35 MB, read regardless)
        reader = Lines()
        threading.Thread(target=reader.feed, args=(proc.stdout,), daemon=True).start()
        writer.join(60)
        proc.stdin.close()
        reader.wait_for(lambda lines: len(lines) >= 300_000, timeout=90)
        assert {x["id"] for x in reader.lines} == set(range(1, 300_001))
        assert all(x["error"]["code"] == -32601 for x in reader.lines)
    finally:
        proc.kill()
        proc.wait(10)


def test_a_question_answered_from_deck_answer_is_withdrawn_from_the_client(serve, acp) -> None:
    server = serve(agent_block("a"), name="asked")
    client = acp("a", "--attach", server.name)
    client.call("initialize", {**INITIALIZE, "clientCapabilities": {"elicitation": {"form": {}}}})
    session = client.call("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
    prompt = client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "question"}]})
    asked = client.asked("elicitation/create")
    inbox = json.loads(cli("inbox", "--attach", server.name, "--json").stdout)
    assert [row["kind"] for row in inbox] == ["question"]
    done = cli("answer", inbox[0]["id"], "--attach", server.name, "--json", '{"name": "Grace"}')
    assert done.returncode == 0, done.stderr
    withdrawn = client.wait_line(lambda x: x.get("method") == "$/cancel_request")
    assert withdrawn["params"] == {"requestId": asked["id"]}
    assert client.response(prompt)["result"] == {"stopReason": "end_turn"}
    assert json.loads(client.text(session)) == {"action": "accept", "content": {"name": "Grace"}}


SUBAGENTS = [__import__("sys").executable, str(Path(__file__).resolve().parents[2] / "agents" / "subagent_agent.py")]


def test_a_subagents_work_reaches_a_client_that_takes_subagents_as_a_child_session(tmp_path, acp) -> None:
    from tests.conftest import agent_table

    client = acp("a", "--config", config(tmp_path, agent_table("a", SUBAGENTS)))
    client.call("initialize", {**INITIALIZE, "clientCapabilities": {**INITIALIZE["clientCapabilities"], "subagents": {}}})
    session = client.call("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
    assert client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "delegate"}]}) == {
        "stopReason": "end_turn"
    }
    announced = [u for u in client.updates(session, "subagent_update")]
    assert announced[0]["sessionId"] == "c1" and announced[0]["title"] == "Explore"
    assert announced[0]["capabilities"] == {"cancel": {}} and announced[0]["description"] == "Find the config loader"
    assert announced[-1]["state"] == {"state": "idle", "stopReason": "end_turn"}
    assert client.text("c1") == "The loader is in config.py" and client.text("c1", "agent_thought_chunk") == "reading files"
    assert "loader" not in client.text(session)  # never flattened into the parent's answer
    assert client.text(session) == "delegated"
    between = client.updates(session, "session_message_chunk")
    assert "".join(u["content"]["text"] for u in between) == "Found: config.py"
    assert all(set(u) == {"sessionUpdate", "messageId", "content"} for u in between)  # a chunk is content alone
    told, found = client.updates(session, "session_message")
    assert told["content"] == [{"type": "text", "text": "Look for the loader"}]
    assert (told["senderSessionId"], told["recipientSessionId"]) == (session, "c1")
    # Who sent the streamed one to whom: an upsert before its first chunk, of the same messageId.
    assert "content" not in found and (found["senderSessionId"], found["recipientSessionId"]) == ("c1", session)
    assert found["messageId"] == between[0]["messageId"]


SUBAGENT_CAPS = {**INITIALIZE["clientCapabilities"], "subagents": {}, "session": {"compaction": {}, "notices": {}}}


def test_a_child_told_as_sent_its_messages_on_their_own_session_its_compaction_and_notices(tmp_path, acp) -> None:
    from tests.conftest import agent_table

    client = acp("a", "--config", config(tmp_path, agent_table("a", SUBAGENTS)))
    client.call("initialize", {**INITIALIZE, "clientCapabilities": SUBAGENT_CAPS})
    session = client.call("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
    assert client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "official"}]}) == {
        "stopReason": "end_turn"
    }
    first, *_, last = client.updates(session, "subagent_update")
    assert (first["cwd"], first["additionalDirectories"]) == ("/work/app", ["/work/lib", "/work/docs"])
    assert first["state"] == {"state": "running"}
    # The agent's own state word and stop reason, forwarded as received; a cleared field cleared.
    assert last["state"] == {"state": "_paused", "stopReason": "_waiting"}
    assert (last["cwd"], last["additionalDirectories"]) == ("/work/app", None)
    # The parent's message to the child, on the child's session as the agent sent it: upsert and chunk alike.
    assert [u for u in client.updates(session) if u["sessionUpdate"].startswith("session_message")] == []
    (upsert,) = client.updates("c1", "session_message")
    assert upsert["content"] == [{"type": "text", "text": "Review the diff"}]
    assert (upsert["senderSessionId"], upsert["recipientSessionId"]) == (session, "c1")
    (chunk,) = client.updates("c1", "session_message_chunk")
    assert chunk == {"sessionUpdate": "session_message_chunk", "messageId": upsert["messageId"],
                     "content": {"type": "text", "text": ", please"}}  # fmt: skip
    # The child's compaction, on its session, to a client that takes compactions.
    compaction = [u for u in client.updates("c1") if u["sessionUpdate"].startswith("compaction")]
    assert [(u["sessionUpdate"], u.get("status")) for u in compaction] == [
        ("compaction_update", "in_progress"), ("compaction_summary_chunk", None), ("compaction_update", "completed")]
    assert compaction[1]["content"] == {"type": "text", "text": "kept: the diff"}
    assert {u["compactionId"] for u in compaction} == {"k1"}
    # Notices, each on the session it was said in.
    assert client.updates("c1", "notice") == [{"sessionUpdate": "notice", "severity": "warning", "title": "Slow disk"}]
    assert client.updates(session, "notice") == [
        {"sessionUpdate": "notice", "severity": "info", "title": "Review started", "description": "one child"}]
    assert client.text(session) == "reviewed"


def test_notices_compactions_and_tool_names_reach_a_client_as_it_takes_them(tmp_path, acp) -> None:
    toml = config(tmp_path, agent_block("a"))
    taker = acp("a", "--config", toml)
    taker.call("initialize", {**INITIALIZE, "clientCapabilities": {**INITIALIZE["clientCapabilities"], "session": {"compaction": {}, "notices": {}}}})
    session = taker.call("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
    for text in ("notice warning Rate limit close", "compact", "named-tool"):
        assert taker.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]})["stopReason"] == "end_turn"
    assert taker.updates(session, "notice") == [
        {"sessionUpdate": "notice", "severity": "warning", "title": "Rate limit close", "description": "see the log"}]
    compaction = [u for u in taker.updates(session) if u["sessionUpdate"].startswith("compaction")]
    assert compaction[0] == {"sessionUpdate": "compaction_update", "compactionId": "c1", "status": "in_progress"}
    assert compaction[-1]["status"] == "completed"
    summary = "".join(u["content"]["text"] for u in compaction if u["sessionUpdate"] == "compaction_summary_chunk")
    assert summary and all(u["compactionId"] == "c1" for u in compaction)
    tools = [u for u in taker.updates(session) if u["sessionUpdate"] in ("tool_call", "tool_call_update") and u["toolCallId"] == "tn"]
    assert [u["name"] for u in tools][:1] == ["read_file"] and tools[-1]["name"] == "fs.read"
    for update in tools:
        checked("SessionUpdate", update)  # the name rides along, the update still valid ACP
    # A session loaded again tells the compaction again, whole, in its place.
    assert taker.close() == 0
    again = acp("a", "--config", toml)
    again.call("initialize", {**INITIALIZE, "clientCapabilities": {**INITIALIZE["clientCapabilities"], "session": {"compaction": {}}}})
    again.call("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
    (told,) = again.updates(session, "compaction_update")
    assert told["status"] == "completed" and told["summary"] == [{"type": "text", "text": summary}]
    assert again.updates(session, "notice") == []  # a notice is a live event, no history
    # A client that did not say it takes them gets neither notices nor compactions; tool names all the same.
    plain = acp("a", "--config", toml)
    other = plain.open_session()
    for text in ("notice warning Rate limit close", "compact"):
        plain.call("session/prompt", {"sessionId": other, "prompt": [{"type": "text", "text": text}]})
    assert [u for u in plain.updates(other) if u["sessionUpdate"] in ("notice", "compaction_update", "compaction_summary_chunk")] == []


def test_a_client_that_takes_no_subagents_gets_the_parents_answer_alone_and_a_childs_request(tmp_path, acp) -> None:
    from tests.conftest import agent_table

    client = acp("a", "--config", config(tmp_path, agent_table("a", SUBAGENTS)))
    session = client.open_session()
    prompt = client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "perm"}]})
    asked = client.asked("session/request_permission")  # a child's request is still the user's to answer
    assert asked["params"]["sessionId"] == session and asked["params"]["toolCall"]["title"] == "edit main.py"
    client.answer(asked["id"], {"outcome": {"outcome": "selected", "optionId": "ok"}})
    assert client.response(prompt)["result"] == {"stopReason": "end_turn"}
    assert client.updates(session, "subagent_update") == [] and "optionId" in client.text(session)
