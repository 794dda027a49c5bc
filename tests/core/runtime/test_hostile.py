"""Hostile JSON from every side (an agent, deck's stdin, the ask socket): nesting bombs, non-finite
numbers, lone surrogates, floods of unknown sessions, an agent that closes its output and stays.

Real agents (tests/agents/unruly_agent.py) and real `deck` processes; the decoders and framing
also get property tests (hypothesis) on arbitrary input.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import tempfile
from typing import Any

import pytest
from deck import Session
from deck.acp.connection import MAX_DEPTH, Connection, LineFramer, decode_line
from deck.agent import early as early_module
from deck.errors import ServiceError, UnknownMethod
from deck.frontends.jsonl import JsonlFrontend
from deck.plugins.announcements import bridge
from deck.proc.tasks import TaskGroup
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import AGENTS, agent_block, alive
from tests.deck_process import DECK, run_deck  # noqa: F401 - run_deck is a fixture

pytestmark = [pytest.mark.timeout(60), pytest.mark.anyio]

UNRULY = AGENTS / "unruly_agent.py"
BOMB = "[" * 100_000
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def unruly(name: str = "u", *flags: str) -> str:
    return agent_block(name, command=[sys.executable, str(UNRULY), *flags])


def refuse_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def strict(line: bytes | str) -> Any:
    """What a strict parser (JavaScript's JSON.parse) reads: no NaN, no Infinity, valid UTF-8."""
    return json.loads(line.decode("utf-8") if isinstance(line, bytes) else line, parse_constant=refuse_constant)


def notification(i: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": "n", "params": {"i": i}}).encode()


class Peer:
    """A Connection whose writes are parsed back (strictly) and whose notifications are recorded."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.bad: list[str] = []
        self.got: list[Any] = []
        self.tasks = TaskGroup("peer")  # owns the request handlers, as an agent's connection group does
        self.conn = Connection(self._write, on_bad_line=self.bad.append, spawn=self.tasks.spawn)
        self.conn.on_notification("n", lambda params: self.got.append(params.get("i")))

    def _write(self, data: bytes) -> None:
        self.raw.append(data)
        self.sent.append(strict(data))


# -- nesting --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bomb, why",
    [
        (BOMB, "nested deeper than"),
        ('{"a":' * 100_000, "nested deeper than"),
        ("[" * 5000 + "]" * 5000, "nested deeper than"),  # valid JSON, deep enough for Python's recursion limit
        ('{"a":' * 900 + "1" + "}" * 900, "nested deeper than"),  # valid JSON that json.loads would read
        ("{" * 100_000, "not JSON"),  # the parser stops at the second brace
    ],
)
async def test_a_nesting_bomb_between_two_good_lines_in_one_chunk_is_skipped_alone(bomb, why):
    peer = Peer()
    peer.conn.feed(notification(1) + b"\n" + bomb.encode() + b"\n" + notification(2) + b"\n")
    assert peer.got == [1, 2]
    assert len(peer.bad) == 1 and why in peer.bad[0]
    assert len(peer.bad[0]) < 300


async def test_the_depth_limit_is_exact_and_brackets_in_strings_do_not_count():
    def message(levels: int, **params: Any) -> bytes:
        """A notification nested `levels` deep in all: the message, its params, then arrays."""
        deep = "[" * (levels - 2) + "]" * (levels - 2)
        return json.dumps({"jsonrpc": "2.0", "method": "n", "params": {"i": levels, "deep": json.loads(deep), **params}}).encode()

    peer = Peer()
    peer.conn.feed(message(MAX_DEPTH) + b"\n" + message(MAX_DEPTH + 1) + b"\n")
    code = "[{" * 10_000 + '\\"[' * 500 + "]"  # brackets and escaped quotes inside a string
    peer.conn.feed(message(3, code=code) + b"\n")
    assert peer.got == [MAX_DEPTH, 3]
    assert len(peer.bad) == 1 and "nested deeper" in peer.bad[0]
    # Long lines too, whether their brackets are few and far apart or many.
    padding = "x" * 100_000
    long_deep = '{"a":' * (MAX_DEPTH + 1) + json.dumps(padding) + "}" * (MAX_DEPTH + 1)
    with pytest.raises(ValueError, match="nested deeper"):
        decode_line(long_deep)
    few = json.dumps({"text": padding, "deep": json.loads("[" * 10 + "]" * 10)})
    assert decode_line(few)["text"] == padding
    many = json.dumps({"code": padding + "{[" * 5000})
    assert decode_line(many) == json.loads(many)
    assert decode_line("[" * MAX_DEPTH + "]" * MAX_DEPTH) == json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    with pytest.raises(ValueError, match="nested deeper"):
        decode_line("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


async def test_a_nesting_bomb_from_a_real_agent_leaves_the_turn_whole(make_deck):
    deck, rec = make_deck(unruly())
    deck.chat.send("u", "bomb")
    await rec.wait_event("turn:changed", agent="u", busy=False, timeout=10)
    reply = deck.chat.conversation("u").messages[-1]
    assert reply.done and reply.stop_reason == "end_turn" and reply.text == "beforeafter"
    assert any(line.startswith("deck: ") and "nested deeper than" in line for line in deck.agents["u"].logs)


async def test_a_deep_value_that_json_could_read_is_refused_before_anything_encodes_it(make_deck):
    deck, rec = make_deck(unruly())
    deck.chat.send("u", "deep 900")
    await rec.wait_event("turn:changed", agent="u", busy=False, timeout=10)
    reply = deck.chat.conversation("u").messages[-1]
    assert reply.done and reply.text == "after"
    assert rec.named("usage:changed", "u") == []  # the deep update never got in
    assert any("nested deeper than" in line for line in deck.agents["u"].logs)


def test_a_nesting_bomb_on_stdin_gets_a_parse_error_and_both_neighbours_are_answered(run_deck):
    deck = run_deck(agent_block("a"))
    first = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "AgentService.List"})
    second = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "AgentService.List"})
    deck.send_raw(f"{first}\n{BOMB}\n{second}")  # one write
    assert deck.response(1)["result"][0]["name"] == "a"
    assert deck.response(2)["result"][0]["name"] == "a"
    (error,) = [x for x in deck.lines if "error" in x and x.get("id") is None]
    assert error["error"]["code"] == -32700 and f"nested deeper than {MAX_DEPTH} levels" in error["error"]["message"]
    deck.close_stdin()
    assert deck.wait(15) == 0
    assert b"Traceback" not in deck.stderr


async def test_the_ask_socket_answers_a_nesting_bomb_and_non_finite_numbers(make_deck):
    deck, rec = make_deck(agent_block("a"))
    (entry,) = deck.hooks.session_mcp_servers(deck.agents["a"], Session(deck.agents["a"]))
    env = {e["name"]: e["value"] for e in entry["env"]}

    async def exchange(line: bytes) -> bytes:
        reader, writer = await asyncio.open_unix_connection(env[bridge.ENV_SOCKET])
        writer.write(line + b"\n")
        await writer.drain()
        try:
            return await reader.readline()
        finally:
            writer.close()

    answer = await exchange(BOMB.encode())
    assert strict(answer) == {"error": f"not a JSON request: JSON nested deeper than {MAX_DEPTH} levels"}
    agent, token = json.dumps(env[bridge.ENV_AGENT]), json.dumps(env[bridge.ENV_TOKEN])
    nan = f'{{"agent":{agent},"token":{token},"method":"ask_agent","params":{{"agent":"a","question":NaN}}}}'
    assert strict(await exchange(nan.encode())) == {"error": "ask_agent needs the parameters agent and question, both strings"}
    assert [a["name"] for a in strict(await exchange(nan.replace("ask_agent", "list_agents").encode()))["result"]] == ["a"]


# -- numbers and strings ----------------------------------------------------------------------------


def test_non_finite_numbers_read_as_null_and_the_rest_as_sent():
    line = '{"a":NaN,"b":Infinity,"c":-Infinity,"d":1e400,"e":-1e400,"f":1.5,"g":-0.0,"h":12345678901234567890,"i":1e308}'
    value = decode_line(line)
    assert value == {"a": None, "b": None, "c": None, "d": None, "e": None, "f": 1.5, "g": -0.0,
                     "h": 12345678901234567890, "i": 1e308}  # fmt: skip
    assert decode_line("NaN") is None and decode_line("  [Infinity] ") == [None]


async def test_what_deck_sends_an_agent_is_strict_json():
    peer = Peer()

    async def handler(params: dict[str, Any]) -> Any:
        return {"ratio": params["kind"] == "nan" and math.nan or math.inf}

    peer.conn.on_request("x", handler)
    peer.conn.feed(b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"kind":"nan"}}\n')
    await asyncio.sleep(0.01)
    # A result JSON cannot carry is an error to the agent, not a line it cannot parse.
    assert peer.sent[0]["id"] == 1 and peer.sent[0]["error"]["code"] == -32603
    peer.conn.notify("session/prompt", {"text": "lone \ud800 surrogate"})
    assert peer.raw[-1].decode("utf-8")  # valid UTF-8: the surrogate as its JSON escape
    assert peer.sent[-1]["params"]["text"] == "lone \ud800 surrogate"
    with pytest.raises(ValueError):
        peer.conn.notify("n", {"x": math.nan})


def test_every_stdout_line_is_strict_json_whatever_numbers_and_strings_an_agent_sends(tmp_path):
    config = tmp_path / "deck.toml"
    config.write_text(unruly("u"))
    requests = [
        {"jsonrpc": "2.0", "id": i, "method": "ChatService.Send", "params": {"agent": "u", "text": text}}
        for i, text in enumerate(["numbers", "surrogate"], 1)
    ]
    stdin = "".join(json.dumps(r) + "\n" for r in requests) + '{"jsonrpc":"2.0","id":3,"method":"AgentService.List","params":NaN}\n'
    trace = tmp_path / "trace.jsonl"
    done = subprocess.run([*DECK, "run", "--frontend=jsonl", "--config", str(config), "--trace", str(trace)],
                          input=stdin.encode(), capture_output=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    traced = [strict(line) for line in trace.read_bytes().splitlines()]  # the trace file is strict JSON too
    assert any(t["direction"] == "in" and "usage_update" in json.dumps(t) and "null" in json.dumps(t) for t in traced)
    lines = [strict(line) for line in done.stdout.splitlines()]
    usage = [(x["usage"], x.get("spent")) for x in lines if x.get("event") == "usage:changed"]
    assert usage == [({"used": 0, "size": 0}, None)]  # a NaN amount is no cost: unknown, and nothing spent
    finals = [x["message"] for x in lines if x.get("event") == "message:updated" and x["message"]["done"]
              and x["message"]["role"] == "agent"]  # fmt: skip
    assert finals[0]["parts"] == [{"type": "text", "text": "counted"}] and finals[0]["stopReason"] == "end_turn"
    assert finals[0]["usage"] == {"totalTokens": None, "inputTokens": None, "outputTokens": None, "cost": None}
    assert finals[1]["parts"] == [{"type": "text", "text": "\ud800after"}]  # the surrogate kept, as its escape
    assert next(x for x in lines if x.get("id") == 3)["result"][0]["name"] == "u"


# -- unknown session ids ------------------------------------------------------------------------------


async def test_a_flood_of_unknown_session_ids_stays_bounded_and_the_turn_completes(make_deck):
    deck, rec = make_deck(unruly())
    deck.chat.send("u", "unknown 50000")
    await rec.wait_event("turn:changed", agent="u", busy=False, timeout=30)
    reply = deck.chat.conversation("u").messages[-1]
    assert reply.done and reply.stop_reason == "end_turn" and reply.text == "after"
    agent = deck.agents["u"]
    assert len(agent.early.sessions) <= early_module.MAX_EARLY_SESSIONS
    assert agent.early.bytes <= early_module.MAX_EARLY_BYTES
    assert agent.early.bytes == sum(early.size for early in agent.early.sessions.values())
    flood = [line for line in agent.logs if "unknown session" in line]
    assert 1 <= len(flood) <= 2, flood  # said once for the flood, not once per update or per id
    assert f"more than {early_module.MAX_EARLY_SESSIONS}" in flood[0] and "dropping" in flood[0]


async def test_big_updates_for_unknown_session_ids_are_bounded_by_their_bytes(make_deck):
    deck, rec = make_deck(unruly())
    deck.chat.send("u", "unknown 12 1000000")  # 12 ids, 1 MB each: under the id bound, over the byte bound
    await rec.wait_event("turn:changed", agent="u", busy=False, timeout=30)
    assert deck.chat.conversation("u").messages[-1].text == "after"
    agent = deck.agents["u"]
    assert 0 < agent.early.bytes <= early_module.MAX_EARLY_BYTES and len(agent.early.sessions) < 12
    assert agent.early.bytes == sum(early.size for early in agent.early.sessions.values())
    assert len([line for line in agent.logs if "unknown session" in line]) == 1


async def test_updates_whose_session_id_is_no_string_are_skipped_and_the_turn_completes(make_deck):
    deck, rec = make_deck(unruly())
    deck.chat.send("u", "badsid")
    await rec.wait_event("turn:changed", agent="u", busy=False, timeout=30)
    reply = deck.chat.conversation("u").messages[-1]
    assert reply.done and reply.stop_reason == "end_turn" and reply.text == "after"
    skipped = [line for line in deck.agents["u"].logs if "sessionId that is no string" in line]
    assert len(skipped) == 4, skipped
    assert deck.agents["u"].early.sessions == {}


async def test_updates_whose_session_update_is_a_list_or_an_object_are_skipped_without_a_traceback(make_deck, caplog):
    deck, rec = make_deck(unruly())
    deck.chat.send("u", "badkind")
    await rec.wait_event("turn:changed", agent="u", busy=False, timeout=30)
    reply = deck.chat.conversation("u").messages[-1]
    assert reply.done and reply.stop_reason == "end_turn" and reply.text == "after" and not reply.parts[1:]
    logs = deck.agents["u"].logs
    skipped = [line for line in logs if "sessionUpdate is no string" in line]
    assert [line.rsplit("(", 1)[1] for line in skipped] == ["list), skipped", "dict), skipped", "int), skipped",
                                                            "NoneType), skipped", "list), skipped"]  # fmt: skip
    assert not any("error while handling" in line for line in logs), logs
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert deck.agents["u"].early.sessions == {} and not rec.named("session:update", "u")


async def test_early_updates_within_the_bounds_are_still_replayed(make_deck):
    deck, rec = make_deck(agent_block("a", "--early-update"))
    await deck.agent_service.start("a")
    assert deck.chat.conversation("a").commands[0]["name"] == "early"
    assert deck.agents["a"].early.sessions == {} and deck.agents["a"].early.bytes == 0


# -- a closed stdout ----------------------------------------------------------------------------------


async def test_an_agent_that_closes_its_output_mid_turn_ends_the_turn_and_is_stopped(make_deck):
    deck, rec = make_deck(unruly("u", "--ignore-eof"))  # it even ignores the end of its stdin: SIGTERM ends it
    await deck.agent_service.start("u")
    pid = deck.agents["u"].process.pid
    deck.chat.send("u", "close-stdout")
    await rec.wait_event("turn:changed", agent="u", busy=False, timeout=10)
    reply = deck.chat.conversation("u").messages[-1]
    assert reply.done and reply.stop_reason is None and reply.text == "closing"
    assert "closed its output" in reply.error
    state = await rec.wait_event("agent:state", agent="u", state="error")
    assert "closed its output" in state["error"]
    assert deck.agents["u"].process is None and not alive(pid)
    assert any("closed its output" in line for line in deck.agents["u"].logs)


async def test_an_agent_that_closes_its_output_during_the_handshake_fails_at_once(make_deck):
    deck, rec = make_deck(unruly("u", "--close-stdout"))
    async with asyncio.timeout(10):  # not the 30 s handshake timeout
        with pytest.raises(ServiceError, match="closed its output"):
            await deck.agent_service.start("u")
    assert rec.states("u") == ["starting", "error"]


def test_deck_exits_at_end_of_stdin_when_an_agent_closed_its_output(run_deck):
    deck = run_deck(unruly("u"))
    deck.request("ChatService.Send", {"agent": "u", "text": "close-stdout"})
    deck.close_stdin()
    assert deck.wait(15) == 0
    reply = [x["message"] for x in deck.events("message:updated", agent="u") if x["message"]["role"] == "agent"][-1]
    assert reply["done"] and "closed its output" in reply["error"]
    assert "error" in deck.states("u")


# -- properties: framing, the ACP decoder, the jsonl request parser --------------------------------------

pieces = st.binary(max_size=40) | st.sampled_from([b"\n", b"\r\n", b"[" * 300, b'{"a":' * 250, b"NaN", b"\xff\xfe"])


@PROPERTY
@given(st.lists(pieces, max_size=30), st.data())
def test_framing_is_the_same_however_the_stream_is_cut(parts, data):
    stream = b"".join(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    for limit in (1 << 20, 16):
        whole, cut = ([], []), ([], [])
        for record, feeds in ((whole, [stream]), (cut, chunks)):
            framer = LineFramer(record[0].append, record[1].append, limit)
            for chunk in feeds:
                framer.feed(chunk)
            framer.close()
        assert cut == whole
        if limit > len(stream):
            lines = stream.split(b"\n")
            assert whole[0] == lines[:-1] + ([lines[-1]] if lines[-1].strip() else []) and whole[1] == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from([math.nan, math.inf, -math.inf])
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=8,
)
messages = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "1.0"]), "method": st.sampled_from(["n", "x", "nope"]) | st.integers()},
    optional={"id": st.integers() | st.text(max_size=3) | st.none() | json_values, "params": json_values},
)
depths = st.integers(0, 3 * MAX_DEPTH) | st.sampled_from([MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 3000])
lines = (
    messages.map(json.dumps)
    | json_values.map(json.dumps)
    | st.text(max_size=60)
    | depths.map(lambda n: "[" * n + "]" * n)
    | depths.map(lambda n: '{"a":' * n)
).map(lambda s: s.replace("\n", " "))


@PROPERTY
@given(st.lists(lines, max_size=8), st.data())
def test_the_acp_decoder_never_raises_and_accounts_for_every_line(texts, data):
    stream = "".join(t + "\n" for t in texts).encode(errors="surrogatepass")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))

    async def run() -> tuple[Peer, int]:
        peer = Peer()
        seen = 0

        def note(params: dict[str, Any]) -> None:
            nonlocal seen
            seen += 1

        async def echo(params: dict[str, Any]) -> Any:
            return {"echo": params}

        peer.conn.on_notification("n", note)
        peer.conn.on_request("x", echo)
        for a, b in zip([0, *cuts], [*cuts, len(stream)]):
            peer.conn.feed(stream[a:b])
        peer.conn.framer.close()
        await peer.tasks.wait()  # every handler has answered
        return peer, seen

    peer, seen = asyncio.run(run())
    # Each line is dispatched, answered or reported, once; replies are strict JSON (Peer parses them so).
    expected = sum(_accounted(line) for line in stream.split(b"\n")[:-1])
    assert seen + len(peer.bad) + len(peer.sent) == expected


def _accounted(line: bytes) -> int:
    """How many visible things a Connection must do with `line`: one for a message or a line it
    skips, one for each message of a batch (and one for its values that are no object, or for an
    empty batch); 0 for a blank line or a notification nobody handles."""
    if not line.decode(errors="replace").strip():
        return 0
    try:
        value = decode_line(line.decode())
    except ValueError:
        return 1
    if isinstance(value, list):
        objects = [v for v in value if isinstance(v, dict)]
        return sum(map(_one, objects)) + (len(objects) < len(value) or not value)
    return _one(value)


def _one(value: Any) -> int:
    """1 for a response, a request, a notification of "n" or one whose method is no string; 0 for
    another notification (nobody handles it)."""
    if not isinstance(value, dict) or "id" in value or value.get("method") in (None, "n"):
        return 1
    return 0 if isinstance(value["method"], str) else 1


class StubDeck:
    """Just what the jsonl frontend's request path calls."""

    async def call(self, method: str, params: Any) -> Any:
        if method == "Echo.Params":
            return params
        if method == "Refuse.Now":
            raise ServiceError("refused")
        if method == "Break.Now":
            raise RuntimeError("a bug")
        raise UnknownMethod(f"unknown method {method}")


requests = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "2.0", "1.0"]),
     "method": st.sampled_from(["Echo.Params", "Refuse.Now", "Break.Now", "No.Such"]) | st.integers()},
    optional={"id": st.integers() | st.text(max_size=3) | st.none() | st.booleans() | json_values, "params": json_values},
)  # fmt: skip
jsonl_lines = (requests.map(json.dumps) | lines).map(lambda s: s.replace("\n", " "))


@PROPERTY
@given(jsonl_lines)
def test_the_jsonl_parser_answers_every_request_exactly_once_in_strict_json(text):
    raw = text.encode(errors="surrogatepass")
    with tempfile.TemporaryFile() as stdout:
        frontend = JsonlFrontend(StubDeck(), stdin_fd=0, stdout_fd=stdout.fileno())

        async def run() -> None:
            frontend._handle_line(raw)
            if frontend._requests:
                await asyncio.gather(*frontend._requests)
            frontend.flush()

        asyncio.run(run())
        stdout.seek(0)
        out = [strict(line) for line in stdout.read().splitlines()]  # strict JSON, valid UTF-8
    seen = raw.decode(errors="replace")  # what deck reads
    if not seen.strip():
        assert out == []
        return
    try:
        request = decode_line(seen)
    except ValueError:
        request = None
    request_id = request.get("id") if isinstance(request, dict) else None
    valid_id = isinstance(request_id, (int, str)) and not isinstance(request_id, bool)
    well_formed = isinstance(request, dict) and request.get("jsonrpc") == "2.0" and isinstance(request.get("method"), str)
    if well_formed and valid_id:
        assert len(out) == 1 and out[0]["id"] == request_id and ("result" in out[0]) != ("error" in out[0])
    elif well_formed and "id" in request and request_id is None and request["method"] == "Echo.Params":
        assert len(out) == 1 and out[0]["id"] is None and "result" in out[0]  # a null id is answered, with null
    elif well_formed and request_id is None and request["method"] == "Echo.Params":
        assert out == []  # a notification that worked: no reply
    else:
        assert len(out) == 1 and "error" in out[0]


def test_a_request_deck_abandons_is_withdrawn_with_cancel_request_but_a_prompt_is_not():
    async def run() -> Peer:
        peer = Peer()
        load = peer.conn.start_request("session/load", {"sessionId": "s1"})
        prompt = peer.conn.start_request("session/prompt", {"sessionId": "s1", "prompt": []})
        load.cancel()  # deck gave up waiting (its handshake's time limit)
        prompt.cancel()
        await asyncio.sleep(0)  # the futures' callbacks run
        peer.conn.feed(b'{"jsonrpc": "2.0", "id": 0, "result": {}}\n')  # a late answer: logged, skipped
        return peer

    peer = asyncio.run(run())
    withdrawn = [m for m in peer.sent if m.get("method") == "$/cancel_request"]
    assert withdrawn == [{"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 0}}]  # the load alone
    assert [b for b in peer.bad if "no pending request" in b]
