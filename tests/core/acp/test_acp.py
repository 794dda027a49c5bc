"""JSON-RPC line framing and dispatch (deck.acp): LineFramer and Connection, without a process, and
JSON-RPC batches from a real agent."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest
from deck.acp.connection import MAX_LINE_BYTES, Connection, LineFramer
from deck.errors import AcpError, ConnectionClosed

from tests.conftest import AGENTS, agent_table
from tests.turns import ask

pytestmark = pytest.mark.timeout(30)


class Framed:
    """A LineFramer recording its lines and overflows."""

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.lines: list[bytes] = []
        self.overflows: list[int] = []
        self.framer = LineFramer(self.lines.append, self.overflows.append, max_bytes)


def test_the_documented_maximum_is_far_above_asyncio_default():
    assert MAX_LINE_BYTES >= 20 * 1024 * 1024 > 64 * 1024
    assert LineFramer(print, print).max_bytes == MAX_LINE_BYTES


def test_a_line_split_across_chunks_is_joined():
    f = Framed()
    for piece in (b'{"a"', b": 1", b"2", b"3}\n"):
        f.framer.feed(piece)
    assert f.lines == [b'{"a": 123}']


def test_one_byte_at_a_time():
    f = Framed()
    for byte in b"one\ntwo\n":
        f.framer.feed(bytes([byte]))
    assert f.lines == [b"one", b"two"]


def test_many_lines_in_one_chunk_and_a_partial_tail():
    f = Framed()
    f.framer.feed(b"a\nbb\nccc\ndd")
    assert f.lines == [b"a", b"bb", b"ccc"]
    f.framer.feed(b"d\n\n")
    assert f.lines == [b"a", b"bb", b"ccc", b"ddd", b""]


def test_a_last_line_without_newline_counts_at_close():
    f = Framed()
    f.framer.feed(b"first\nlast")
    f.framer.close()
    assert f.lines == [b"first", b"last"]


def test_an_over_limit_line_in_one_chunk_is_skipped_and_the_next_works():
    f = Framed(max_bytes=10)
    f.framer.feed(b"x" * 11 + b"\nok\n")
    assert f.overflows == [11]
    assert f.lines == [b"ok"]


def test_an_over_limit_line_across_chunks_is_skipped_and_reported_once():
    f = Framed(max_bytes=10)
    f.framer.feed(b"short\n" + b"y" * 6)
    for _ in range(5):
        f.framer.feed(b"y" * 6)  # grows past the limit without a newline
    assert f.lines == [b"short"] and f.overflows == []
    f.framer.feed(b"yy\nafter\n")
    assert f.overflows == [38]  # the whole line's size, not its last piece
    assert f.lines == [b"short", b"after"]
    f.framer.close()
    assert f.lines == [b"short", b"after"]


def test_after_an_over_limit_line_a_line_split_across_chunks_still_works():
    f = Framed(max_bytes=10)
    f.framer.feed(b"y" * 12)
    f.framer.feed(b"yy\n")
    f.framer.feed(b"ab")
    f.framer.feed(b"c\n")
    assert f.overflows == [14]
    assert f.lines == [b"abc"]


def test_an_over_limit_last_line_is_reported_at_close():
    f = Framed(max_bytes=10)
    f.framer.feed(b"ok\n" + b"w" * 25)
    f.framer.close()
    assert f.lines == [b"ok"] and f.overflows == [25]


def test_a_line_of_exactly_the_limit_is_kept():
    f = Framed(max_bytes=10)
    f.framer.feed(b"z" * 5)
    f.framer.feed(b"z" * 5 + b"\n")
    assert f.lines == [b"z" * 10] and f.overflows == []


# -- Connection ---------------------------------------------------------------------------


class Peer:
    """A Connection whose writes are parsed back into messages."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.bad: list[str] = []
        self.conn = Connection(lambda data: self.sent.append(json.loads(data)), on_bad_line=self.bad.append)

    def receive(self, *messages: Any) -> None:
        self.conn.feed(b"".join((m if isinstance(m, bytes) else json.dumps(m).encode()) + b"\n" for m in messages))


@pytest.mark.anyio
async def test_an_unknown_method_request_gets_minus_32601():
    peer = Peer()
    peer.receive({"jsonrpc": "2.0", "id": 5, "method": "nope/nothing", "params": {}})
    assert peer.sent == [{"jsonrpc": "2.0", "id": 5, "error": {"code": -32601, "message": "method not found: nope/nothing"}}]


@pytest.mark.anyio
@pytest.mark.parametrize("request_id", [0, "req-1", "", 7])
async def test_request_ids_from_the_agent_are_answered_as_given(request_id):
    peer = Peer()
    seen: list[dict[str, Any]] = []

    async def handler(params: dict[str, Any]) -> dict[str, Any]:
        seen.append(params)
        return {"ok": params["n"]}

    peer.conn.on_request("fs/read_text_file", handler)
    peer.receive({"jsonrpc": "2.0", "id": request_id, "method": "fs/read_text_file", "params": {"n": 3}})
    await asyncio.sleep(0.01)
    assert seen == [{"n": 3}]
    assert peer.sent == [{"jsonrpc": "2.0", "id": request_id, "result": {"ok": 3}}]


@pytest.mark.anyio
async def test_notifications_are_dispatched_by_method_in_order():
    peer = Peer()
    got: list[Any] = []
    peer.conn.on_notification("session/update", lambda params: got.append(params["i"]))
    peer.receive(*({"jsonrpc": "2.0", "method": "session/update", "params": {"i": i}} for i in range(3)))
    peer.receive({"jsonrpc": "2.0", "method": "unheard/of", "params": {}})  # ignored, no reply
    assert got == [0, 1, 2]
    assert peer.sent == [] and peer.bad == []


@pytest.mark.anyio
async def test_our_requests_are_futures_keyed_by_id_even_across_chunks():
    peer = Peer()
    first = asyncio.ensure_future(peer.conn.request("initialize", {"protocolVersion": 1}))
    second = asyncio.ensure_future(peer.conn.request("session/new", {}))
    await asyncio.sleep(0)
    ids = [m["id"] for m in peer.sent]
    assert ids[0] == 0 and len(set(ids)) == 2
    # Answered out of order, the second reply split across two reads.
    reply = json.dumps({"jsonrpc": "2.0", "id": ids[1], "result": {"sessionId": "s1"}}).encode() + b"\n"
    peer.conn.feed(reply[:7])
    peer.conn.feed(reply[7:] + json.dumps({"jsonrpc": "2.0", "id": ids[0], "error": {"code": -32000, "message": "no"}}).encode() + b"\n")
    assert await second == {"sessionId": "s1"}
    with pytest.raises(AcpError, match="no") as info:
        await first
    assert info.value.code == -32000


@pytest.mark.anyio
async def test_garbage_and_stray_responses_are_reported_and_skipped():
    peer = Peer()
    got: list[Any] = []
    peer.conn.on_notification("n", lambda params: got.append(params))
    peer.receive(b"this is not json", b"42", {"jsonrpc": "2.0", "id": 99, "result": {}}, {"jsonrpc": "2.0", "method": "n", "params": {"x": 1}})
    assert len(peer.bad) == 3
    assert "not JSON" in peer.bad[0]
    assert got == [{"x": 1}]


@pytest.mark.anyio
async def test_an_over_limit_line_is_reported_and_the_next_message_works():
    peer = Peer()
    peer.conn.framer.max_bytes = 100
    got: list[Any] = []
    peer.conn.on_notification("n", lambda params: got.append(params))
    big = json.dumps({"jsonrpc": "2.0", "method": "n", "params": {"x": "a" * 200}}).encode()
    peer.conn.feed(big[:50])
    peer.conn.feed(big[50:] + b"\n" + json.dumps({"jsonrpc": "2.0", "method": "n", "params": {"x": "b"}}).encode() + b"\n")
    assert got == [{"x": "b"}]
    assert len(peer.bad) == 1 and "skipped" in peer.bad[0]


@pytest.mark.anyio
async def test_a_failing_handler_answers_an_error_and_the_connection_goes_on():
    peer = Peer()

    async def broken(params: dict[str, Any]) -> Any:
        raise ValueError("boom")

    peer.conn.on_request("x", broken)
    peer.receive({"jsonrpc": "2.0", "id": "a", "method": "x", "params": {}})
    await asyncio.sleep(0.01)
    assert peer.sent[0]["id"] == "a" and peer.sent[0]["error"]["code"] == -32603
    assert "boom" in peer.sent[0]["error"]["message"]


@pytest.mark.anyio
async def test_close_fails_pending_requests():
    peer = Peer()
    pending = asyncio.ensure_future(peer.conn.request("session/prompt", {}))
    await asyncio.sleep(0)
    peer.conn.close("the agent exited with code 7")
    with pytest.raises(ConnectionClosed, match="code 7"):
        await pending
    with pytest.raises(ConnectionClosed):
        peer.conn.notify("session/cancel", {})


# -- batches ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_batch_is_handled_as_its_messages_one_by_one():
    peer = Peer()
    got: list[Any] = []
    peer.conn.on_notification("n", lambda params: got.append(params["i"]))

    async def handler(params: dict[str, Any]) -> dict[str, Any]:
        return {"echo": params["i"]}

    peer.conn.on_request("r", handler)
    ours = asyncio.ensure_future(peer.conn.request("ours", {}))
    await asyncio.sleep(0)
    our_id = peer.sent.pop()["id"]
    peer.receive([
        {"jsonrpc": "2.0", "method": "n", "params": {"i": 1}},
        {"jsonrpc": "2.0", "id": "a", "method": "r", "params": {"i": 2}},
        {"jsonrpc": "2.0", "id": our_id, "result": {"answered": True}},
        {"jsonrpc": "2.0", "method": "n", "params": {"i": 3}},
        {"jsonrpc": "2.0", "id": "b", "method": "r", "params": {"i": 4}},
    ])  # fmt: skip
    assert got == [1, 3]  # in order, at once
    assert await ours == {"answered": True}
    await asyncio.sleep(0.01)
    assert sorted(peer.sent, key=lambda m: m["id"]) == [
        {"jsonrpc": "2.0", "id": "a", "result": {"echo": 2}}, {"jsonrpc": "2.0", "id": "b", "result": {"echo": 4}}]  # fmt: skip
    assert peer.bad == []


@pytest.mark.anyio
async def test_a_batch_longer_than_the_limit_is_refused_whole_with_one_answer():
    from deck.acp.connection import MAX_BATCH

    peer = Peer()
    got: list[Any] = []
    peer.conn.on_notification("n", lambda params: got.append(params["i"]))
    peer.receive([{"jsonrpc": "2.0", "method": "n", "params": {"i": i}} for i in range(MAX_BATCH)])
    assert len(got) == MAX_BATCH and peer.bad == [] and peer.sent == []  # as long as the limit: served
    got.clear()
    peer.receive([{"jsonrpc": "2.0", "method": "n", "params": {"i": i}} for i in range(MAX_BATCH + 1)])
    assert got == []
    assert peer.bad == [f"a JSON-RPC batch of {MAX_BATCH + 1} messages refused: deck serves {MAX_BATCH} at most in one"]
    assert peer.sent == [{"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": peer.bad[0]}}]


@pytest.mark.anyio
async def test_an_empty_batch_and_values_that_are_no_object_are_logged_and_skipped():
    peer = Peer()
    got: list[Any] = []
    peer.conn.on_notification("n", lambda params: got.append(params))
    peer.receive([], [1, "two", None, {"jsonrpc": "2.0", "method": "n", "params": {"x": 1}}, [3]], [{"jsonrpc": "2.0", "id": 99, "result": {}}])
    assert got == [{"x": 1}]
    assert len(peer.bad) == 3
    assert "empty JSON-RPC batch" in peer.bad[0]
    assert "4 value(s) in a JSON-RPC batch that are no object" in peer.bad[1] and "'two'" in peer.bad[1]
    assert "response to no pending request" in peer.bad[2]


ASKING = AGENTS / "asking_agent.py"


@pytest.mark.anyio
async def test_an_agent_s_batches_are_served(make_deck, tmp_path):
    (tmp_path / "given.txt").write_text("given")
    deck, rec = make_deck(agent_table("a", [sys.executable, str(ASKING)], cwd=str(tmp_path)))
    async with asyncio.timeout(20):
        reply = await ask(deck, rec, "batch")
    text, _, answers = reply.text.partition("; ")
    assert text == "from a batch" and reply.stop_reason == "end_turn"  # the prompt's answer came in a batch
    assert json.loads(answers) == [{"result": {}}, {"result": {"content": "given"}}]
    assert (tmp_path / "batched.txt").read_text() == "both"
    logs = deck.agents["a"].logs
    assert [line for line in logs if "empty JSON-RPC batch" in line]
    assert [line for line in logs if "3 value(s) in a JSON-RPC batch that are no object" in line]
