"""What an agent's output may take: a message and a conversation keep at most `[limits]
messageSize` and `conversationSize` bytes (the head and the tail, and a note of what was cut),
a session/load replay too, and a start reads only the tail of a long stored conversation.
Real agent processes (tests/agents/flooding_agent.py), a real database."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from deck.chat.conversation import Caps, Conversation, fit_part, part_size
from deck.plugins.history.store import HistoryStore

from tests.conftest import AGENTS, agent_table

pytestmark = pytest.mark.timeout(90)

FLOODING = AGENTS / "flooding_agent.py"
KIB = 1024


def config(*flags: str, message: str = "64 KiB", conversation: str = "256 KiB", timeout: str = "30s") -> str:
    limits = f'[limits]\nmessageSize = "{message}"\nconversationSize = "{conversation}"\nhandshakeTimeout = "{timeout}"\n'
    return limits + agent_table("a", [sys.executable, str(FLOODING), *flags])


def ended(rec: Any) -> int:
    return len([p for p in rec.named("turn:changed", "a") if not p["busy"]])


async def say(deck: Any, rec: Any, text: str) -> None:
    before = ended(rec)
    await deck.call("ChatService.Send", {"agent": "a", "text": text})
    await rec.wait(lambda r: ended(r) > before, timeout=60)


async def messages(deck: Any) -> list[dict[str, Any]]:
    return (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]


def text_of(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


@pytest.mark.anyio
async def test_an_answer_past_the_message_cap_keeps_its_head_its_tail_and_says_what_was_cut(make_deck) -> None:
    deck, rec = make_deck(config())
    await deck.startup()
    await say(deck, rec, "flood 4")  # 4 MiB against a 64 KiB cap
    answer = (await messages(deck))[-1]
    text = text_of(answer)
    assert answer["role"] == "agent" and answer["done"]
    assert text.startswith("HEAD") and text.endswith("TAIL")
    assert "deck cut" in text and "it keeps the first 64 KiB and the last 8 KiB" in text
    assert len(text) < 64 * KIB + 8 * KIB + 1024
    conv = deck.chat.conversations["a"]
    assert conv.size < 256 * KIB
    # What streamed to the frontends is bounded too: deltas stopped at the cap, then one for the tail.
    streamed = sum(len(d["text"] or "") for d in rec.named("message:delta", "a") if d["messageId"] == answer["id"])
    assert streamed == len(text)


@pytest.mark.anyio
async def test_a_conversation_past_its_cap_lets_go_of_its_oldest_messages_but_the_first(make_deck) -> None:
    deck, rec = make_deck(config())
    await deck.startup()
    await say(deck, rec, "first words")
    for _ in range(6):
        await say(deck, rec, "flood 0.06")  # each answer just under the message cap
    kept = await messages(deck)
    assert text_of(kept[0]) == "first words"  # the head stays
    assert text_of(kept[-1]).endswith("TAIL")  # and the tail
    conv = deck.chat.conversations["a"]
    assert conv.size <= 256 * KIB
    assert sum(len(text_of(m)) for m in kept) <= 256 * KIB
    cut = rec.named("conversation:changed", "a")
    cut = [c["value"] for c in cut if c["field"] == "cut"]
    assert cut and cut[-1]["messages"] > 0 and cut[-1]["messageIds"]
    gone = {i for c in cut for i in c["messageIds"]}
    assert not gone & {m["id"] for m in kept}
    snapshot = await deck.call("ChatService.Conversation", {"agent": "a"})
    assert snapshot["cut"]["messages"] == len(gone)


@pytest.mark.anyio
async def test_tool_calls_and_plans_count_against_the_message_cap(make_deck) -> None:
    deck, rec = make_deck(config())
    await deck.startup()
    await say(deck, rec, "tools 50 20000")  # 50 diffs of 40 KB each: 2 MB
    await say(deck, rec, "plan 2000")  # 2 MB of plan
    conv = deck.chat.conversations["a"]
    assert conv.size <= 256 * KIB
    for message in conv.messages:
        assert message.size <= 64 * KIB + 8 * KIB + 1024
        assert sum(part_size(p.to_dict()) for p in message.parts) <= message.size + 8 * KIB


def test_a_part_too_big_is_cut_to_its_room_with_a_note() -> None:
    part = {"type": "tool", "title": "t" * 100, "input": "i" * 10**6, "output": "é" * 10**6,
            "diffs": [{"path": "/a", "oldText": "o" * 10**6, "newText": "n" * 10**6}] * 1000, "locations": []}  # fmt: skip
    fitted = fit_part(part, 64 * KIB)
    assert part_size(fitted) <= 64 * KIB + 4 * KIB
    assert "deck cut" in fitted["input"] and fitted["input"].startswith("iii")
    assert fitted["output"].startswith("éé")  # cut at a character boundary
    small = {"type": "tool", "title": "edit", "input": "", "output": "ok", "diffs": [], "locations": []}
    assert fit_part(small, 64 * KIB) is small


def test_a_replayed_user_text_past_the_cap_is_cut_too() -> None:
    conv = Conversation("a", lambda e: None, caps=Caps(16 * KIB, 64 * KIB))
    for _ in range(100):
        conv.apply_update({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "u" * 4096}})
    assert len(conv.messages) == 1
    assert conv.size <= 16 * KIB + 2 * KIB + 4096
    assert "deck cut" in conv.messages[0].to_dict()["parts"][-1]["text"]


@pytest.mark.anyio
@pytest.mark.parametrize("flags", [(), ("--alternate",)], ids=["one-message", "many-messages"])
async def test_a_session_load_replay_that_never_ends_stays_within_the_caps(make_deck, flags) -> None:
    first, rec = make_deck(config(*flags, message="1 MiB", conversation="4 MiB", timeout="4s"))
    await first.startup()
    await say(first, rec, "hello")
    await first.shutdown()

    deck, rec = make_deck(config("--replay-forever", *flags, message="1 MiB", conversation="4 MiB", timeout="4s"))
    await deck.startup()
    rss = psutil.Process().memory_info().rss
    peak = rss
    task = deck.spawn(deck.agents["a"].start(), "start")

    def grown(r: Any) -> bool:
        nonlocal peak
        peak = max(peak, psutil.Process().memory_info().rss)
        return task.done()

    await rec.wait(grown, timeout=30)  # the handshake timeout ends the load
    conv = deck.chat.conversations["a"]
    assert conv.size <= 4 * 1024 * KIB
    assert peak - rss < 150 * 1024 * KIB  # without caps: over a gigabyte in these 4 s


def test_a_start_reads_only_the_tail_of_a_long_stored_conversation(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "history.db") as store:
        cid = store.new_conversation("/c.toml", "a")
        big = "z" * (512 * KIB)
        store.put_messages(cid, [
            {"id": f"m{n}", "role": "agent", "done": True, "parts": [{"type": "text", "text": f"{n} {big}"}]}
            for n in range(40)
        ])  # fmt: skip
        whole = store.latest("/c.toml", "a")
        tail = store.latest("/c.toml", "a", tail=3 * 1024 * KIB)
    assert whole is not None and tail is not None
    assert len(whole["messages"]) == 40 and "cut" not in whole
    assert [m["id"] for m in tail["messages"]] == [f"m{n}" for n in range(35, 40)]
    assert tail["cut"]["messages"] == 35 and tail["cut"]["bytes"] > 35 * 512 * KIB


@pytest.mark.anyio
async def test_the_next_deck_shows_the_tail_of_a_conversation_over_its_cap(make_deck) -> None:
    deck, rec = make_deck(config(conversation="1 MiB"))
    await deck.startup()
    await say(deck, rec, "first words")
    for _ in range(20):
        await say(deck, rec, "flood 0.06")
    await deck.shutdown()

    deck, rec = make_deck(config(conversation="1 MiB"))
    await deck.startup()
    restored = deck.chat.conversations["a"]
    assert 0 < restored.size <= 1024 * KIB * 3 // 4
    assert restored.cut["messages"] > 0
    assert text_of(restored.messages[-1].to_dict()).endswith("TAIL")


def test_the_caps_are_checked_in_the_config(tmp_path: Path) -> None:
    from deck.config.check import parse

    assert parse('[limits]\nmessageSize = "2 MiB"\nconversationSize = "1 GiB"\n').config.limits.message_size == 2 << 20
    problems = parse('[limits]\nmessageSize = "8 MiB"\nconversationSize = "8 MiB"\n').problems
    assert any("at least twice messageSize" in p.message for p in problems)
    problems = parse('[limits]\nmessageSize = "huge"\n').problems
    assert any("bad size" in p.message and p.line == 2 for p in problems)


def test_a_single_chunk_past_the_cap_keeps_what_fits_as_the_head() -> None:
    conv = Conversation("a", lambda e: None, caps=Caps(16 * KIB, 64 * KIB))
    conv.begin_reply()
    conv.apply_update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "h" * 100 * KIB}})
    conv.finish(conv.messages[-1], "end_turn")
    text = conv.messages[-1].text
    assert text.startswith("h" * 16 * KIB + "\n\n[… deck cut") and text.endswith("h" * 2 * KIB)
