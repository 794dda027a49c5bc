"""The jsonl bridge end to end: `deck run --frontend=jsonl` as a subprocess driving a fake agent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import agent_block
from tests.deck_process import DECK, alive, run_deck, wait_dead, write_config  # noqa: F401  (run_deck: fixture)

pytestmark = pytest.mark.timeout(60)

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, SERVICE_ERROR = -32700, -32600, -32601, -32602, -32000


def test_a_prompt_turn_streams_events(run_deck):
    deck = run_deck(agent_block("a"))
    message_id = deck.call("ChatService.Send", {"agent": "a", "text": "stream 3"})
    done = deck.event("turn:changed", agent="a", busy=False, queued=0)
    assert deck.states("a") == ["starting", "ready", "busy", "ready"]
    deltas = deck.events("message:delta", agent="a")
    assert [(d["kind"], d["index"], d["text"]) for d in deltas] == [("text", 0, "c0 "), ("text", 0, "c1 "), ("text", 0, "c2 ")]
    reply_id = deltas[0]["messageId"]
    assert reply_id != message_id
    final = [e["message"] for e in deck.events("message:updated", agent="a") if e["message"]["id"] == reply_id][-1]
    assert final["done"] is True and final["stopReason"] == "end_turn" and final["role"] == "agent"
    assert final["parts"] == [{"type": "text", "text": "c0 c1 c2 "}]
    assert deck.events("turn:changed", agent="a", busy=True)
    # The turn's end comes before the idle turn:changed, and every stdout line is an event or a response.
    assert deck.lines.index(done) > deck.lines.index(deck.events("message:updated", agent="a")[-1])
    assert all(("event" in line) != ("jsonrpc" in line) for line in deck.lines)
    deck.close_stdin()
    assert deck.wait(15) == 0


def test_every_event_line_carries_its_seq_right_after_its_name(run_deck):
    deck = run_deck(agent_block("a"))
    deck.call("ChatService.Send", {"agent": "a", "text": "stream 5"})
    deck.event("turn:changed", agent="a", busy=False, queued=0)
    snapshot = deck.call("DeckService.Snapshot")
    answered = next(i for i, line in enumerate(deck.lines) if line.get("result") is snapshot)
    events = [line for line in deck.lines[:answered] if "event" in line]
    assert all(list(line)[:2] == ["event", "seq"] for line in events)
    seqs = [line["seq"] for line in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # one order, none left out
    assert snapshot["seq"] == seqs[-1] and snapshot["conversations"]["a"]["busy"] is False
    deck.close_stdin()
    assert deck.wait(15) == 0


def test_a_snapshot_holds_a_conversation_for_every_agent_even_one_never_used(run_deck):
    deck = run_deck(agent_block("a") + agent_block("b"))
    snapshot = deck.call("DeckService.Snapshot")
    assert [agent["name"] for agent in snapshot["agents"]] == ["a", "b"]
    assert sorted(snapshot["conversations"]) == ["a", "b"]
    for name in ("a", "b"):
        conversation = snapshot["conversations"][name]
        assert conversation == deck.call("ChatService.Conversation", {"agent": name})
        assert conversation["messages"] == [] and conversation["busy"] is False
    deck.close_stdin()
    assert deck.wait(15) == 0


def test_a_refusal_that_names_what_it_refuses_carries_it_as_the_errors_data(run_deck, tmp_path):
    deck = run_deck(agent_block("a"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[agents.x]\ncommand = 5\n")
    reply = deck.response(deck.request("ConfigService.Open", {"path": str(bad)}))
    error = reply["error"]
    assert error["code"] == SERVICE_ERROR and error["message"].startswith("not a valid config: ")
    problems = error["data"]["problems"]
    assert problems and problems[0]["line"] == 2 and "command" in problems[0]["message"]
    # A refusal with nothing to name has no data; an unknown agent names it and the agents.
    assert "data" not in deck.response(deck.request("ChatService.Send", {"agent": "a", "text": " "}))["error"]
    unknown = deck.response(deck.request("ChatService.Cancel", {"agent": "nobody"}))["error"]
    assert unknown["data"] == {"agent": "nobody", "agents": ["a"]}
    deck.close_stdin()
    assert deck.wait(15) == 0


def _error(deck, raw: str, request_id=None) -> dict:
    """Send `raw`; return the error of the reply with `request_id` that arrives next."""
    seen = len(deck.lines)
    deck.send_raw(raw)
    reply = deck.wait_for(
        lambda lines: next((x for x in lines[seen:] if "jsonrpc" in x and x.get("id") == request_id), None)
    )
    assert "result" not in reply, reply
    return reply["error"]


BAD_LINES = [
    ("not json at all", None, PARSE_ERROR),
    ('{"jsonrpc": "2.0", "id": 1, "method": ', None, PARSE_ERROR),
    ("[1, 2, 3]", None, INVALID_REQUEST),
    ('"ChatService.Send"', None, INVALID_REQUEST),
    ('{"id": 7, "method": "AgentService.List"}', 7, INVALID_REQUEST),
    ('{"jsonrpc": "1.0", "id": 8, "method": "AgentService.List"}', 8, INVALID_REQUEST),
    ('{"jsonrpc": "2.0", "id": 9}', 9, INVALID_REQUEST),
    ('{"jsonrpc": "2.0", "id": 10, "method": 42}', 10, INVALID_REQUEST),
    ('{"jsonrpc": "2.0", "id": 11, "method": "NoService.List"}', 11, METHOD_NOT_FOUND),
    ('{"jsonrpc": "2.0", "id": 12, "method": "AgentService.Fly"}', 12, METHOD_NOT_FOUND),
    ('{"jsonrpc": "2.0", "id": 13, "method": "AgentService._private"}', 13, METHOD_NOT_FOUND),
    ('{"jsonrpc": "2.0", "id": 14, "method": "ChatService.Send", "params": {"agent": "a"}}', 14, INVALID_PARAMS),
    ('{"jsonrpc": "2.0", "id": 15, "method": "ChatService.Send", "params": {"agent": "a", "text": "x", "loud": true}}', 15, INVALID_PARAMS),
    ('{"jsonrpc": "2.0", "id": 16, "method": "ChatService.Send", "params": {"agent": "a", "text": 5}}', 16, INVALID_PARAMS),
    ('{"jsonrpc": "2.0", "id": 17, "method": "ChatService.Send", "params": ["a", "hi"]}', 17, INVALID_PARAMS),
    ('{"jsonrpc": "2.0", "id": 18, "method": "AgentService.Start", "params": {"name": null}}', 18, INVALID_PARAMS),
    ('{"jsonrpc": "2.0", "id": 19, "method": "ChatService.Send", "params": {"agent": "zz", "text": "hi"}}', 19, SERVICE_ERROR),
    ('{"jsonrpc": "2.0", "id": 20, "method": "ChatService.Send", "params": {"agent": "a", "text": "   "}}', 20, SERVICE_ERROR),
    ('{"jsonrpc": "2.0", "id": "s", "method": "AgentService.Stop", "params": {"name": "zz"}}', "s", SERVICE_ERROR),
]


def test_bad_input_gets_an_error_line_and_deck_carries_on(run_deck):
    deck = run_deck(agent_block("a"))
    for raw, request_id, code in BAD_LINES:
        error = _error(deck, raw, request_id)
        assert error["code"] == code, (raw, error)
        assert error["message"], raw
    assert "unknown agent 'zz'" in _error(deck, BAD_LINES[-3][0], 19)["message"]
    assert "empty" in _error(deck, BAD_LINES[-2][0], 20)["message"]
    # None of it started the agent, and deck still answers.
    assert deck.states("a") == []
    assert deck.popen.poll() is None
    assert [a["name"] for a in deck.call("AgentService.List")] == ["a"]
    deck.call("ChatService.Send", {"agent": "a", "text": "still here"})
    deck.event("message:delta", agent="a", text="You said: still here")
    deck.close_stdin()
    assert deck.wait(15) == 0
    assert b"Traceback" not in deck.stderr


def test_a_lone_surrogate_in_a_string_param_is_an_invalid_params_error(run_deck, tmp_path):
    deck = run_deck(agent_block("a"))
    calls = [("ChatService.OpenConversation", {"id": "\ud800"}), ("ChatService.History", {"agent": "\ud800"}),
             ("ConfigService.Open", {"path": str(tmp_path / "x\udfff.toml")})]  # fmt: skip
    for method, params in calls:
        reply = deck.response(deck.request(method, params))
        assert reply["error"]["code"] == -32602, (method, reply)
        assert "lone surrogate (U+D800)" in reply["error"]["message"] or "(U+DFFF)" in reply["error"]["message"]
    assert [a["name"] for a in deck.call("AgentService.List")] == ["a"]
    deck.close_stdin()
    assert deck.wait(15) == 0
    assert b"Traceback" not in deck.stderr and b"UnicodeEncodeError" not in deck.stderr


def test_a_notification_gets_no_reply(run_deck):
    deck = run_deck(agent_block("a"))
    deck.send_raw('{"jsonrpc": "2.0", "method": "AgentService.List"}')
    marker = deck.call("AgentService.List")
    assert marker[0]["name"] == "a"
    assert [x for x in deck.lines if "jsonrpc" in x] == [deck.response(1)]  # only the call's reply


def test_a_request_whose_id_is_null_or_not_a_number_json_has_is_answered_with_a_null_id(run_deck):
    deck = run_deck(agent_block("a"))
    for raw in ('{"jsonrpc": "2.0", "id": null, "method": "AgentService.List"}',
                '{"jsonrpc": "2.0", "id": NaN, "method": "AgentService.List"}',
                '{"jsonrpc": "2.0", "id": 1e400, "method": "AgentService.List"}'):  # fmt: skip
        seen = len(deck.lines)
        deck.send_raw(raw)
        reply = deck.wait_for(lambda lines: next((x for x in lines[seen:] if "jsonrpc" in x), None))
        assert reply["id"] is None and reply["result"][0]["name"] == "a", raw
    deck.close_stdin()
    assert deck.wait(15) == 0


def test_an_optional_parameter_given_as_null_is_as_if_left_out(run_deck):
    deck = run_deck(agent_block("a"))
    assert deck.call("ChatService.History", {"agent": None, "limit": None}) == []
    refused = deck.response(deck.request("ChatService.History", {"limit": 0}))["error"]
    assert refused["code"] == INVALID_PARAMS and "limit must be a positive integer" in refused["message"]
    deck.close_stdin()
    assert deck.wait(15) == 0


def test_end_of_stdin_finishes_the_work_in_hand_then_exits_0(run_deck):
    deck = run_deck(agent_block("a"))
    deck.send_raw(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ChatService.Send", "params": {"agent": "a", "text": "stream 20"}}))
    deck.send_raw(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ChatService.Send", "params": {"agent": "a", "text": "second"}}))
    deck.close_stdin()  # both requests are in the pipe; the second is queued behind the first
    assert deck.wait(30) == 0
    answers = [e["message"] for e in deck.events("message:updated", agent="a") if e["message"]["role"] == "agent" and e["message"]["done"]]
    assert [m["stopReason"] for m in answers] == ["end_turn", "end_turn"]
    assert answers[1]["parts"] == [{"type": "text", "text": "You said: second"}]
    assert len(answers[0]["parts"][0]["text"].split()) == 20
    assert deck.states("a")[-1] == "stopped"
    assert deck.response(1)["result"] and deck.response(2)["result"]
    assert b"Traceback" not in deck.stderr


def test_a_permission_asked_after_end_of_stdin_is_cancelled_not_awaited_forever(run_deck):
    deck = run_deck(agent_block("a"))
    deck.send_raw(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ChatService.Send", "params": {"agent": "a", "text": "perm"}}))
    deck.close_stdin()  # before the agent has even started, let alone asked
    assert deck.wait(30) == 0
    asked = deck.events("permission:requested", agent="a")
    assert len(asked) == 1
    assert deck.events("permission:resolved", agent="a")[0]["id"] == asked[0]["id"]
    answer = [e["message"] for e in deck.events("message:updated", agent="a") if e["message"]["done"] and e["message"]["role"] == "agent"]
    assert answer[-1]["parts"][-1]["text"].endswith("permission: cancelled")
    assert deck.states("a")[-1] == "stopped"


def test_end_of_stdin_stops_running_agents(run_deck):
    deck = run_deck(agent_block("a") + agent_block("b"))
    deck.call("AgentService.Start", {"name": "a"})
    deck.call("AgentService.Start", {"name": "b"})
    agents = deck.descendants()
    assert len(agents) == 2
    deck.close_stdin()
    assert deck.wait(15) == 0
    assert deck.states("a")[-1] == "stopped" and deck.states("b")[-1] == "stopped"
    assert wait_dead(agents) == []


@pytest.mark.timeout(30)
def test_stay_keeps_running_after_end_of_stdin_until_sigterm(run_deck):
    deck = run_deck(agent_block("a"), "--stay")
    deck.call("AgentService.Start", {"name": "a"})
    agents = deck.descendants()
    deck.close_stdin()
    time.sleep(1.5)
    assert deck.popen.poll() is None  # still running with stdin closed
    assert deck.states("a") == ["starting", "ready"]
    assert all(alive(pid) for pid in agents)
    deck.signal(signal.SIGTERM)
    assert deck.wait(15) == 128 + signal.SIGTERM
    assert deck.states("a")[-1] == "stopped"
    assert wait_dead(agents) == []
    assert b"Traceback" not in deck.stderr


def test_without_stay_end_of_stdin_exits_at_once(run_deck):
    deck = run_deck(agent_block("a"))
    started = time.monotonic()
    deck.close_stdin()
    assert deck.wait(15) == 0
    assert time.monotonic() - started < 10
    assert deck.states("a") == []  # nothing asked for it: never started


@pytest.mark.timeout(30)
def test_closed_stdout_ends_deck_quietly(tmp_path):
    """`deck run --frontend=jsonl | head -1`: the reader goes away after one line."""
    config = write_config(tmp_path / "deck.toml", agent_block("a"))
    proc = subprocess.Popen(
        [*DECK, "run", "--frontend=jsonl", "--config", str(config)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    agents: list[int] = []
    try:
        # A slow turn writes a delta every 50 ms until cancelled, so deck keeps writing.
        request = {"jsonrpc": "2.0", "id": 1, "method": "ChatService.Send", "params": {"agent": "a", "text": "slow"}}
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        first = json.loads(proc.stdout.readline())
        assert first.get("event") or first.get("id") == 1
        deadline = time.monotonic() + 10
        while not agents and time.monotonic() < deadline:
            agents = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
            time.sleep(0.05)
        assert agents, "the agent never started"
        proc.stdout.close()  # what `head -1` does after its line; stdin stays open
        started = time.monotonic()
        code = proc.wait(15)
        assert time.monotonic() - started < 8, "deck did not notice its reader went away"
        assert code == 0
        stderr = proc.stderr.read().decode()
        assert "Traceback" not in stderr and "Error" not in stderr, stderr
        assert wait_dead(agents) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)
        for pid in agents:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_closed_stdout_in_a_real_shell_pipeline(tmp_path):
    """The literal `deck run --frontend=jsonl | head -1`, fed a turn on stdin."""
    config = write_config(tmp_path / "deck.toml", agent_block("a"))
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ChatService.Send", "params": {"agent": "a", "text": "stream 2000"}})
    deck = " ".join(f"'{part}'" for part in DECK)
    result = subprocess.run(
        ["sh", "-c", f"{deck} run --frontend=jsonl --config '{config}' 2>'{tmp_path}/err' | head -1"],
        input=(request + "\n").encode(), capture_output=True, timeout=30,
    )
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 1
    json.loads(result.stdout)
    assert (tmp_path / "err").read_text() == ""


@pytest.mark.parametrize(
    "text, expected",
    [
        (None, "config file not found"),
        ("x = [\n", "invalid config"),
        ("[agents.a]\ncommand = 3\n", "invalid config"),
    ],
    ids=["missing", "not-toml", "bad-value"],
)
def test_bad_config_is_one_line_and_exit_2(tmp_path, text, expected):
    path = tmp_path / "deck.toml"
    if text is not None:
        path.write_text(text)
    result = subprocess.run(
        [*DECK, "run", "--frontend=jsonl", "--config", str(path)], stdin=subprocess.DEVNULL, capture_output=True, timeout=30
    )
    assert result.returncode == 2
    assert result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("deck: ") and expected in lines[0]
    if text is not None:
        assert "deck.toml:" in lines[0]  # points into the file


def test_a_stdout_that_cannot_be_written_is_reported_and_ends_deck(tmp_path):
    config = tmp_path / "deck.toml"
    config.write_text(agent_block("a"))
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "AgentService.Start", "params": {"name": "a"}})
    with open("/dev/full", "wb") as full:
        out = subprocess.run(
            [sys.executable, "-m", "deck", "run", "--frontend=jsonl", "--config", str(config)],
            input=(request + "\n").encode(), stdout=full, stderr=subprocess.PIPE, timeout=60,
        )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.decode().strip().splitlines()[-1] == "deck: cannot write to stdout: No space left on device"


# -- characters JSON writes raw -----------------------------------------------------------------------

#: What JSON leaves raw in a string but a terminal or an editor may act on: DEL, the C1 controls,
#: the line and paragraph separators, the bidi embeddings, overrides and isolates.
RAW_UNSAFE = "\x7f" + "".join(map(chr, range(0x80, 0xA0))) + "\u2028\u2029" + "".join(map(chr, (*range(0x202A, 0x202F), *range(0x2066, 0x206A))))


def unsafe_in(data: bytes) -> list[str]:
    """The characters of RAW_UNSAFE (and C0 controls) found raw in UTF-8 `data`."""
    text = data.decode()
    return sorted({c for c in text if c in RAW_UNSAFE or (c < " " and c != "\n")})


def test_the_wire_escapes_what_json_would_write_raw():
    from deck.events import MessageDelta
    from deck.wire import encode, encode_event, to_bytes

    text = f"a\x1b[2J {RAW_UNSAFE} é 日本 \U0001f600 \ud800 end"
    event = MessageDelta("a", "m", 0, "text", text=text)
    object.__setattr__(event, "seq", 7)
    lines = [encode_event(event), encode({"jsonrpc": "2.0", "id": 1, "result": {"text": text, RAW_UNSAFE: 1}})]
    data = to_bytes(lines)
    assert unsafe_in(data) == []
    delta, response = (json.loads(line) for line in data.decode().splitlines())
    assert delta["text"] == text and response["result"] == {"text": text, RAW_UNSAFE: 1}
    assert "\\u202e" in lines[0] and "\\u0085" in lines[0] and "\\u2028" in lines[0] and "é 日本" in lines[0]
    plain = MessageDelta("a", "m", 0, "text", text="plain ASCII text")
    object.__setattr__(plain, "seq", 8)
    assert encode_event(plain) == json.dumps({"event": "message:delta", "seq": 8, **plain.payload()}, separators=(",", ":"))
    child = MessageDelta("a", "m", 0, "text", text="a subagent's", session="c\u202e1")  # its session escaped too
    object.__setattr__(child, "seq", 9)
    assert json.loads(encode_event(child)) == {"event": "message:delta", "seq": 9, **child.payload()}
    assert "\\u202e" in encode_event(child)


def test_an_agents_c1_and_bidi_characters_reach_stdout_escaped(run_deck):
    deck = run_deck(agent_block("a"))
    said = f"evil {RAW_UNSAFE} \u202egnp.exe end"
    deck.call("ChatService.Send", {"agent": "a", "text": said})
    deck.event("turn:changed", agent="a", busy=False, queued=0)
    deck.close_stdin()
    assert deck.wait(15) == 0
    assert unsafe_in(b"".join(deck.raw)) == []
    answer = [e for e in deck.events("message:updated", agent="a") if e["message"]["role"] == "agent"][-1]
    assert answer["message"]["parts"] == [{"type": "text", "text": f"You said: {said}"}]
    assert "".join(d["text"] for d in deck.events("message:delta", agent="a")) == f"You said: {said}"


def test_a_permission_the_agent_withdraws_leaves_the_inbox(run_deck):
    deck = run_deck(agent_block("a"))
    deck.call("ChatService.Send", {"agent": "a", "text": "perm-withdrawn 0.5"})
    asked = deck.event("permission:requested", agent="a", timeout=20)
    resolved = deck.event("permission:resolved", id=asked["id"], timeout=20)
    assert "optionId" not in resolved  # nobody chose: it was withdrawn
    assert deck.call("DeckService.Inbox") == []
    deck.wait_line(lambda e: e.get("event") == "turn:changed" and not e["busy"], timeout=20)
    deck.close_stdin()
    assert deck.wait(15) == 0
