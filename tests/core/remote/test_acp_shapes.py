"""What `deck acp` says in ACP's terms (`deck.remote.acp_shapes`): prompt blocks as text, deck's parts and
conversations as updates, checked against the ACP schema; odd shapes never raise."""

from __future__ import annotations

import pytest
from deck.errors import AcpError
from deck.remote import acp_shapes as shapes

from tests.peers.schema import AcpSchema

SCHEMA = AcpSchema()


def valid_update(update: dict) -> None:
    notification = {"sessionId": "s", "update": update}
    assert SCHEMA.errors(SCHEMA.definition("SessionNotification"), notification) == [], update


def test_a_prompt_is_its_text_its_links_and_its_text_resources() -> None:
    blocks = [
        {"type": "text", "text": "look at"},
        {"type": "resource_link", "uri": "file:///w/a.py", "name": "a.py"},
        {"type": "resource", "resource": {"uri": "file:///w/b.py", "text": "print(1)"}},
    ]
    assert shapes.prompt_text(blocks) == "look at\n\n[a.py](file:///w/a.py)\n\n```file:///w/b.py\nprint(1)\n```"


@pytest.mark.parametrize("blocks", [
    [], "text", [{"type": "image", "data": "", "mimeType": "image/png"}], [{"type": "audio"}], [{"type": "text", "text": 3}],
    [{"type": "resource", "resource": {"uri": "x", "blob": "AAAA"}}], [{"type": "resource_link"}], ["not a block"], None,
])  # fmt: skip
def test_a_prompt_deck_cannot_pass_on_is_invalid_params(blocks: object) -> None:
    with pytest.raises(AcpError) as refused:
        shapes.prompt_text(blocks)
    assert refused.value.code == -32602


def test_parts_are_valid_updates_and_a_tool_is_announced_once() -> None:
    seen: set[str] = set()
    tool = {"type": "tool", "id": "t1", "title": "Edit", "kind": "edit", "status": "pending", "input": '{"path":"/x"}',
            "output": "done", "locations": [{"path": "/x", "line": 3}, {"nope": 1}],
            "diffs": [{"path": "/x", "oldText": "a", "newText": "b", "newFile": False}]}  # fmt: skip
    first = shapes.part_update(tool, "agent", seen)
    again = shapes.part_update({**tool, "status": "completed"}, "agent", seen)
    assert first is not None and again is not None
    assert (first["sessionUpdate"], again["sessionUpdate"]) == ("tool_call", "tool_call_update")
    assert first["rawInput"] == {"path": "/x"} and first["locations"] == [{"path": "/x", "line": 3}]
    for update in (first, again, shapes.plan({"entries": [{"content": "a", "status": "done?"}, 7]}),
                   shapes.usage({"used": -1, "size": "big", "cost": {"amount": 0.5, "currency": "USD"}})):  # fmt: skip
        valid_update(update)
    odd = shapes.part_update({"type": "tool", "kind": "nonsense", "status": 7, "diffs": [None]}, "agent", seen)
    assert odd is not None and odd["kind"] == "other" and odd["status"] == "pending"
    assert shapes.part_update({"type": "compaction"}, "agent", seen) is None


def test_a_conversation_told_again_leaves_deck_s_notes_and_queued_messages_out() -> None:
    messages = [
        {"role": "user", "parts": [{"type": "text", "text": "hi"}]},
        {"role": "system", "code": "agent-restarted", "parts": [{"type": "text", "text": "restarted"}]},
        {"role": "agent", "parts": [{"type": "thought", "text": "hm"}, {"type": "text", "text": "hello"}, "junk"]},
        {"role": "user", "queued": True, "parts": [{"type": "text", "text": "later"}]},
    ]
    told = list(shapes.replay(messages))
    assert [(u["sessionUpdate"], u["content"]["text"]) for u in told] == [
        ("user_message_chunk", "hi"), ("agent_thought_chunk", "hm"), ("agent_message_chunk", "hello")]  # fmt: skip
    for update in told:
        valid_update(update)


def test_conversation_changes_and_questions_in_acp_terms() -> None:
    assert shapes.conversation_update("choices", {}) is None
    assert shapes.conversation_update("title", None) == {"sessionUpdate": "session_info_update", "title": None}
    for field, value in (("commands", [{"name": "web", "description": "search"}]), ("title", "T"),
                         ("modes", {"currentModeId": "plan", "availableModes": []})):  # fmt: skip
        update = shapes.conversation_update(field, value)
        assert update is not None
        valid_update(update)
    url = shapes.question({"id": "question-1", "message": "Sign in\nhttps://x.example/a", "url": "https://x.example/a"}, "s")
    assert url == {"sessionId": "s", "mode": "url", "url": "https://x.example/a", "message": "Sign in", "elicitationId": "question-1"}
    form = shapes.question({"id": "q", "message": "Name?", "schema": {"type": "object", "properties": {}}}, "s")
    assert form["mode"] == "form" and form["requestedSchema"] == {"type": "object", "properties": {}}


def test_a_compaction_is_told_by_what_changed_and_a_summary_replaced_is_sent_whole() -> None:
    part = {"type": "compaction", "id": "k", "status": "in_progress", "summary": ""}
    assert shapes.compaction(part, None) == [{"sessionUpdate": "compaction_update", "compactionId": "k", "status": "in_progress"}]
    grown = shapes.compaction({**part, "summary": "kept a"}, ("in_progress", "", ""))
    assert grown == [{"sessionUpdate": "compaction_summary_chunk", "compactionId": "k", "content": {"type": "text", "text": "kept a"}}]
    done = shapes.compaction({**part, "status": "completed", "summary": "kept a"}, ("in_progress", "kept a", ""))
    assert done == [{"sessionUpdate": "compaction_update", "compactionId": "k", "status": "completed"}]
    replaced = shapes.compaction({**part, "status": "completed", "summary": "other"}, ("completed", "kept a", ""))
    assert replaced == [{"sessionUpdate": "compaction_update", "compactionId": "k", "status": "completed",
                         "summary": [{"type": "text", "text": "other"}]}]  # fmt: skip
    failed = shapes.compaction({**part, "status": "failed", "error": "no room"}, None)
    assert failed == [{"sessionUpdate": "compaction_update", "compactionId": "k", "status": "failed", "error": "no room"}]
    assert shapes.compaction({**part, "status": "odd"}, ("in_progress", "", "")) == []  # nothing new: nothing said


def test_a_subagent_and_a_notice_as_acp_says_them() -> None:
    child = {"session": "c", "parent": "s", "title": None, "state": "_mine", "stopReason": "_why", "cancel": False,
             "cwd": "/w"}  # fmt: skip
    assert shapes.subagent_update(child) == {
        "sessionUpdate": "subagent_update", "sessionId": "c", "title": None, "description": None,
        "state": {"state": "_mine", "stopReason": "_why"}, "capabilities": {}, "cwd": "/w", "additionalDirectories": None,
    }  # fmt: skip
    note = {"role": "system", "code": "notice", "level": "_loud", "parts": [{"type": "text", "text": "Title\nmore\nlines"}]}
    assert shapes.notice(note) == {"sessionUpdate": "notice", "severity": "info", "title": "Title", "description": "more\nlines"}
    assert shapes.notice({**note, "parts": []}) is None
