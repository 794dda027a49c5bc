"""A fast stream in the recorder: its chunks joined in blocks as they come, and its text handed to the
writer in pieces of at most `HAND_OFF_SIZE`, not in one row of a second's megabytes."""

from __future__ import annotations

import asyncio

import pytest
from deck.plugins import history
from deck.plugins.history import recorder as recording
from deck.plugins.history import store as history_store

from tests.conftest import agent_block
from tests.plugins.history.test_history import logged_writes, send, stored, turn_done


@pytest.mark.anyio
async def test_a_long_stream_goes_to_the_writer_in_pieces_within_the_interval(make_deck, monkeypatch) -> None:
    monkeypatch.setattr(history_store, "FLUSH_INTERVAL", 60)  # no hand-off by time: the size alone cuts
    monkeypatch.setattr(recording, "JOIN_EVERY", 64)
    monkeypatch.setattr(recording, "HAND_OFF_SIZE", 4096)
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    recorder = history.recorder_of(deck)
    assert recorder is not None
    db = logged_writes(recorder.store)
    await send(deck, "a", "stream 20000")
    await turn_done(rec, "a")
    await asyncio.to_thread(recorder.writer.flush)
    text = "".join(f"c{i} " for i in range(20000))
    (reply,) = {m["message"]["id"] for m in rec.named("message:updated", "a") if m["message"]["role"] == "agent"}
    with recorder.store._write_lock:
        (pk,) = db.execute("SELECT pk FROM messages WHERE id = ?", (reply,)).fetchone()
        pieces = [n for (n,) in db.execute("SELECT text FROM chunk_writes WHERE pk = ?", (pk,))]
    longest_block = 64 * len("c19999 ")
    assert len(pieces) >= len(text) // (4096 + longest_block)
    assert max(pieces) < 4096 + longest_block  # a piece ends with the block that took it past the size
    assert sum(pieces) == len(text)
    await deck.shutdown()
    (conversation,) = stored()
    assert conversation["messages"][-1]["parts"] == [{"type": "text", "text": text}]
