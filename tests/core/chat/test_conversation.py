"""Every ACP session/update variant folded into the conversation, against a real fake agent."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from deck.chat.conversation import Conversation
from deck.events import Event

from tests.conftest import agent_block
from tests.turns import ask, deltas, position

pytestmark = pytest.mark.anyio

MESSAGE_KEYS = {"id", "agent", "createdAt", "role", "parts", "done", "queued"}


async def test_agent_chunks_append_to_one_text_part(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "stream 4")
    assert [p.to_dict() for p in reply.parts] == [{"type": "text", "text": "c0 c1 c2 c3 "}]
    got = deltas(rec, reply.id)
    assert got == [
        {"agent": "a", "messageId": reply.id, "index": 0, "kind": "text", "text": f"c{i} "} for i in range(4)
    ]


async def test_a_chunk_of_another_kind_starts_a_new_part(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "thought")
    assert [p.to_dict() for p in reply.parts] == [
        {"type": "thought", "text": "thinking"},
        {"type": "text", "text": "answer"},
        {"type": "thought", "text": " more thinking"},
    ]
    assert [(d["index"], d["kind"], d["text"]) for d in deltas(rec, reply.id)] == [
        (0, "thought", "thinking"), (1, "text", "answer"), (2, "thought", " more thinking"),
    ]  # fmt: skip


async def test_user_message_chunks_make_one_user_message(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "user")
    users = [m for m in deck.chat.conversation("a").messages if m.role == "user"]
    assert [m.text for m in users] == ["user", "earlier question"]
    assert reply.text == "answer"
    added = [u["message"] for u in rec.named("message:updated") if u["message"]["id"] == users[1].id]
    assert added[0]["role"] == "user"


def test_a_replayed_user_message_keeps_its_images_and_resources_on_lines_of_their_own():
    conv = Conversation("a", lambda event: None)
    conv.session_started("s1", {})
    for block in (
        {"type": "text", "text": "look at"},
        {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
        {"type": "resource", "resource": {"uri": "file:///w/a.txt", "text": "RESOURCE BODY"}},
        {"type": "text", "text": "and "},
        {"type": "text", "text": "tell me"},
    ):
        conv.apply_update({"sessionUpdate": "user_message_chunk", "content": block})
    (message,) = conv.messages
    assert message.role == "user"
    assert message.text == "look at\n[image image/png]\nRESOURCE BODY\nand tell me"


async def test_tool_call_updates_change_only_the_fields_sent(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "tools")
    tool = reply.parts[0].to_dict()
    assert tool == {
        "type": "tool", "id": "ta", "title": "Read a.txt", "kind": "read", "status": "completed",
        "input": '{"path":"a.txt"}', "output": "file text", "locations": [{"path": "/w/a.txt", "line": 2}],
        "diffs": [{"path": "/w/new.txt", "oldText": "", "newText": "new", "newFile": True}],
    }  # fmt: skip
    tool_deltas = [d for d in deltas(rec, reply.id) if d["kind"] == "tool"]
    assert [d["index"] for d in tool_deltas] == [0, 0, 0]
    assert "text" not in tool_deltas[0]
    middle = tool_deltas[1]["part"]
    # The update sent only a status: title, kind, input and locations are kept.
    assert middle["status"] == "in_progress"
    assert (middle["title"], middle["kind"], middle["input"]) == ("Read a.txt", "read", '{"path":"a.txt"}')
    assert middle["locations"] == [{"path": "/w/a.txt", "line": 2}] and middle["output"] == ""
    assert reply.parts[1].to_dict() == {"type": "text", "text": "done"}


async def test_a_tool_id_reused_in_a_later_turn_is_a_new_part(make_deck):
    deck, rec = make_deck(agent_block("a", permissions="allow"))
    first = await ask(deck, rec, "perm")
    second = await ask(deck, rec, "perm")
    assert first.parts[0].to_dict()["status"] == "completed"
    assert second.parts[0].type == "tool" and second.parts[0].to_dict()["id"] == "t1"
    assert len(first.parts) == 2  # the second turn's tool call did not land in the first message


async def test_plan_replaces_the_plan_part(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "plan")
    assert [p.to_dict() for p in reply.parts] == [
        {"type": "plan", "entries": [{"content": "one", "priority": "high", "status": "completed"}]}
    ]
    plan_deltas = deltas(rec, reply.id)
    assert [(d["index"], d["kind"], d["part"]["entries"][0]["status"]) for d in plan_deltas] == [
        (0, "plan", "pending"), (0, "plan", "completed"),
    ]  # fmt: skip


async def test_session_level_updates(make_deck):
    deck, rec = make_deck(agent_block("a", "--modes"))
    await ask(deck, rec, "session")
    snap = await deck.chat.conversation_snapshot("a")
    assert snap["modes"] == {"currentModeId": "b", "availableModes": [{"id": "a", "name": "A"}, {"id": "b", "name": "B"}]}
    assert snap["configOptions"][0]["currentValue"] == "m2"
    assert snap["title"] == "A title"
    assert snap["commands"] == [{"name": "web", "description": "search the web", "input": {"hint": "query"}}]
    changed = {c["field"] for c in rec.named("conversation:changed", "a")}
    assert {"modes", "configOptions", "title", "commands"} <= changed


async def test_usage_update_and_turn_stats(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "usage")
    assert rec.named("usage:changed") == [
        {"agent": "a", "usage": {"used": 1000, "size": 200000}},
        {"agent": "a", "usage": {"used": 1000, "size": 200000, "tokens": 30}, "tokens": 30},  # the prompt response's
    ]
    assert (await deck.chat.conversation_snapshot("a"))["usage"] == {"used": 1000, "size": 200000, "tokens": 30}
    wire = reply.to_dict()
    assert wire["usage"] == {"totalTokens": 30, "inputTokens": 10, "outputTokens": 20}
    assert isinstance(wire["durationMs"], int) and wire["durationMs"] >= 0
    slow = await ask(deck, rec, "sleep 0.3")
    assert slow.to_dict()["durationMs"] >= 300 and "usage" not in slow.to_dict()


async def test_unknown_variant_is_passed_on_raw_and_not_fatal(make_deck, caplog):
    deck, rec = make_deck(agent_block("a"))
    with caplog.at_level(logging.INFO, logger="deck.chat.conversation"):
        reply = await ask(deck, rec, "unknown-update")
    assert any("'future_update' passed on raw" in r.getMessage() for r in caplog.records)
    assert rec.named("session:update") == [
        {"agent": "a", "update": {"sessionUpdate": "future_update", "status": "started"}}
    ]
    assert reply.text == "still fine" and reply.stop_reason == "end_turn"
    assert deck.agents["a"].state.value == "ready"


async def test_updates_before_the_session_new_reply_are_kept(make_deck):
    deck, rec = make_deck(agent_block("a", "--early-update"))
    await deck.agent_service.start("a")
    snap = await deck.chat.conversation_snapshot("a")
    assert snap["commands"] == [{"name": "early", "description": "sent before the reply"}]


async def test_updates_after_the_prompt_response_are_kept(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "late")
    assert reply.stop_reason == "end_turn" and reply.text == "before "
    await rec.wait(lambda r: reply.text == "before after")
    agents = [m for m in deck.chat.conversation("a").messages if m.role == "agent"]
    assert agents == [reply]


async def test_turn_events_in_order_with_their_exact_payloads(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "stream 2")
    await rec.wait_event("turn:changed", agent="a", busy=False)
    reply = deck.chat.conversation("a").messages[-1]
    updated = [u for u in rec.named("message:updated", "a")]
    assert all(set(u) == {"agent", "message"} for u in updated)
    user_added, reply_added, reply_done = updated
    assert user_added["message"] == {
        "id": user.id, "agent": "a", "createdAt": user.created_at, "role": "user",
        "parts": [{"type": "text", "text": "stream 2"}], "done": True, "queued": False,
    }  # fmt: skip
    assert set(reply_added["message"]) == MESSAGE_KEYS
    assert reply_added["message"]["done"] is False and reply_added["message"]["parts"] == []
    assert set(reply_done["message"]) == MESSAGE_KEYS | {"stopReason", "durationMs"}
    assert reply_done["message"]["done"] is True and reply_done["message"]["stopReason"] == "end_turn"
    assert reply_done["message"]["createdAt"].endswith("Z")
    turns = rec.named("turn:changed", "a")
    assert turns == [{"agent": "a", "busy": True, "queued": 0}, {"agent": "a", "busy": False, "queued": 0}]
    first_delta = position(rec, "message:delta", messageId=reply.id)
    assert position(rec, "turn:changed", busy=True) < first_delta
    done_at = next(
        i for i, e in enumerate(rec.events) if e.name == "message:updated" and e.payload()["message"].get("stopReason")
    )
    assert first_delta < done_at < position(rec, "turn:changed", busy=False)
    assert set(rec.named("message:delta")[0]) == {"agent", "messageId", "index", "kind", "text"}



# -- modes, offered as `modes` and as the config option of category "mode" ----------------------


def mode_option(snap: dict[str, Any]) -> Any:
    return next(o["currentValue"] for o in snap["configOptions"] if o.get("category") == "mode")


async def test_a_mode_update_alone_moves_the_mode_option_too(make_deck):
    deck, rec = make_deck(agent_block("a", "--mode-option"))
    await ask(deck, rec, "mode auto-edit")
    snap = await deck.chat.conversation_snapshot("a")
    assert snap["modes"]["currentModeId"] == "auto-edit" and mode_option(snap) == "auto-edit"
    assert [o["currentValue"] for o in snap["configOptions"]] == ["auto-edit", "m1"]  # the model is left alone
    assert rec.named("conversation:changed", "a")[-1]["value"] == snap["configOptions"]


async def test_a_mode_option_update_alone_moves_the_mode_too(make_deck):
    deck, rec = make_deck(agent_block("a", "--mode-option"))
    await ask(deck, rec, "mode-option plan")
    snap = await deck.chat.conversation_snapshot("a")
    assert mode_option(snap) == "plan" and snap["modes"]["currentModeId"] == "plan"
    assert [m["id"] for m in snap["modes"]["availableModes"]] == ["default", "auto-edit", "plan"]


async def test_set_mode_and_set_config_option_keep_both_forms_in_step(make_deck):
    deck, rec = make_deck(agent_block("a", "--mode-option"))
    await deck.agent_service.start("a")
    await deck.chat.set_mode("a", "plan")
    snap = await deck.chat.conversation_snapshot("a")
    assert snap["modes"]["currentModeId"] == "plan" and mode_option(snap) == "plan"
    await deck.chat.set_config_option("a", "mode", "auto-edit")
    snap = await deck.chat.conversation_snapshot("a")
    assert mode_option(snap) == "auto-edit" and snap["modes"]["currentModeId"] == "auto-edit"
    await deck.chat.set_config_option("a", "model", "m2")  # another option: the mode stays
    snap = await deck.chat.conversation_snapshot("a")
    assert snap["modes"]["currentModeId"] == "auto-edit" and mode_option(snap) == "auto-edit"


def conversation(modes: list[str], options: list[Any]) -> tuple[Conversation, list[Event]]:
    events: list[Event] = []
    conv = Conversation("a", events.append)
    conv.session_started("s1", {
        "modes": {"currentModeId": modes[0], "availableModes": [{"id": m, "name": m} for m in modes]},
        "configOptions": [
            {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": modes[0],
             "options": options},
            {"id": "effort", "name": "Effort", "category": "thought_level", "type": "select", "currentValue": "low",
             "options": [{"value": "low", "name": "Low"}, {"value": "plan", "name": "Plan"}]},
        ],
    })  # fmt: skip
    events.clear()
    return conv, events


def option_values(conv: Conversation) -> list[Any]:
    return [o["currentValue"] for o in conv.config_options]


def test_a_mode_the_option_does_not_offer_leaves_the_option():
    conv, events = conversation(["default", "plan", "yolo"], [{"value": "default", "name": "D"}, {"value": "plan", "name": "P"}])
    conv.apply_update({"sessionUpdate": "current_mode_update", "currentModeId": "yolo"})
    assert conv.modes["currentModeId"] == "yolo" and option_values(conv) == ["default", "low"]  # type: ignore[index]
    assert [e.payload()["field"] for e in events] == ["modes"]
    conv.apply_update({"sessionUpdate": "current_mode_update", "currentModeId": "plan"})
    assert option_values(conv) == ["plan", "low"]  # the other category's "plan" is not the mode
    assert [e.payload()["field"] for e in events] == ["modes", "modes", "configOptions"]


def test_grouped_mode_option_values_count_too():
    groups = [{"group": "g", "name": "G", "options": [{"value": "default", "name": "D"}, {"value": "plan", "name": "P"}]}]
    conv, _ = conversation(["default", "plan"], groups)
    conv.apply_update({"sessionUpdate": "current_mode_update", "currentModeId": "plan"})
    assert option_values(conv) == ["plan", "low"]


def test_an_option_value_that_is_no_mode_leaves_the_modes():
    options = [{"value": "default", "name": "D"}, {"value": "plan", "name": "P"}, {"value": "other", "name": "O"}]
    conv, events = conversation(["default", "plan"], options)
    changed = [{**conv.config_options[0], "currentValue": "other"}, conv.config_options[1]]
    conv.apply_update({"sessionUpdate": "config_option_update", "configOptions": changed})
    assert conv.modes["currentModeId"] == "default"  # type: ignore[index]
    conv.apply_update({"sessionUpdate": "config_option_update", "configOptions": [changed[1]]})  # no mode option
    assert conv.modes["currentModeId"] == "default"  # type: ignore[index]
    assert [e.payload()["field"] for e in events] == ["configOptions", "configOptions"]


def test_a_mode_update_without_a_mode_id_is_skipped():
    conv, events = conversation(["default", "plan"], [{"value": "default", "name": "D"}])
    for junk in (None, 3, ["plan"], {"id": "plan"}):
        conv.apply_update({"sessionUpdate": "current_mode_update", "currentModeId": junk})
    assert conv.modes["currentModeId"] == "default" and events == []  # type: ignore[index]


def test_a_long_stream_is_kept_in_blocks_not_one_string_per_chunk() -> None:
    from deck.chat.conversation import JOIN_EVERY, TextPart

    part = TextPart("text")
    pieces = [f"c{i} " for i in range(JOIN_EVERY * 5 + 7)]
    for piece in pieces:
        part.append(piece)
    assert len(part._chunks) == 5 + 7  # five blocks, and the chunks since the last one
    assert part.text == "".join(pieces) and len(part._chunks) == 1
    part.append("more")
    assert part.text == "".join(pieces) + "more"


def test_a_very_long_stream_is_kept_in_few_large_strings() -> None:
    from deck.chat.conversation import JOIN_EVERY, MERGE_EVERY, TextPart

    part = TextPart("text")
    pieces = [f"c{i} " for i in range(JOIN_EVERY * (MERGE_EVERY * 2 + 3) + 7)]
    for piece in pieces:
        part.append(piece)
    assert len(part._chunks) == 2 + 3 + 7  # two merged blocks, three blocks since, and the chunks since the last
    assert part.text == "".join(pieces) and len(part._chunks) == 1


def test_commands_options_and_counts_deck_cannot_use_are_skipped() -> None:
    """A command with no name of one word, a config option with no id or of a type deck does not
    know, a negative token count: an agent's junk never reaches the frontends."""
    conv = Conversation("a", lambda event: None)
    conv.apply_update({"sessionUpdate": "available_commands_update", "availableCommands": [
        {"name": "review", "description": "review the diff"}, {"description": "no name"}, {"name": ""},
        {"name": "two words", "description": "x"}, {"name": 7}, "not a command", {"name": "plan"}]})
    assert [c["name"] for c in conv.commands] == ["review", "plan"]
    conv.apply_update({"sessionUpdate": "config_option_update", "configOptions": [
        {"id": "model", "name": "Model", "type": "select", "currentValue": "m1", "options": [{"value": "m1", "name": "M1"}]},
        {"id": "weird", "name": "Weird", "type": "number", "currentValue": 3},
        {"name": "No id", "type": "boolean", "currentValue": False},
        {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": False}]})
    assert [o["id"] for o in conv.config_options] == ["model", "fast"]
    conv.apply_update({"sessionUpdate": "usage_update", "used": -5, "size": -1})
    assert conv.usage == {"used": 0, "size": 0}
