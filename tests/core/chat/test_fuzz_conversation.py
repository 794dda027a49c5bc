"""Property tests: any stream of session/update values, interleaved with turns, folds into a sound conversation.

The values are what a JSON line from an untrusted agent can hold: the known update kinds and unknown
ones, every field missing, of the wrong type, nested junk, huge strings, NaN and infinities.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from deck.acp.updates import TOOL_KINDS, TOOL_STATUSES
from deck.chat.conversation import Conversation, Message, TextPart
from deck.events import Event, MessageDelta
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KINDS = [
    "agent_message_chunk", "agent_thought_chunk", "user_message_chunk", "tool_call", "tool_call_update",
    "plan", "available_commands_update", "current_mode_update", "config_option_update",
    "session_info_update", "usage_update",
]  # fmt: skip

# Everything json.loads can return (NaN and infinities included: Python's json reads them).
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
keys = st.sampled_from(["type", "text", "id", "value", ""])
junk = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3), max_leaves=6
)
huge = st.integers(50_000, 300_000).map(lambda n: "x" * n)
text = st.text(max_size=20) | huge


def maybe(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's well-formed value, or junk of any type in its place."""
    return good | junk


block = maybe(
    st.fixed_dictionaries({"type": st.just("text"), "text": maybe(text)})
    | st.fixed_dictionaries({"type": st.sampled_from(["image", "audio"]), "mimeType": maybe(st.text(max_size=8))})
    | st.fixed_dictionaries({"type": st.just("resource_link"), "uri": maybe(text), "name": maybe(text)})
    | st.fixed_dictionaries({"type": st.just("resource"), "resource": maybe(st.fixed_dictionaries({}, optional={
        "uri": maybe(text), "text": maybe(text)}))})  # fmt: skip
)
tool_content = maybe(
    st.lists(
        maybe(
            st.fixed_dictionaries({"type": st.just("content"), "content": block})
            | st.fixed_dictionaries({"type": st.just("diff")}, optional={
                "path": maybe(text), "oldText": maybe(text), "newText": maybe(text)})  # fmt: skip
            | st.fixed_dictionaries({"type": st.just("terminal"), "terminalId": maybe(text)})
        ),
        max_size=4,
    )
)
locations = maybe(
    st.lists(maybe(st.fixed_dictionaries({}, optional={"path": maybe(text), "line": maybe(st.integers())})), max_size=3)
)
entries = maybe(
    st.lists(
        maybe(st.fixed_dictionaries({}, optional={
            "content": maybe(text), "priority": maybe(st.sampled_from(["high", "medium", "low"])),
            "status": maybe(st.sampled_from(["pending", "in_progress", "completed"]))})),  # fmt: skip
        max_size=4,
    )
)
mode_ids = st.sampled_from(["default", "auto-edit", "plan", "nope"])
config_options = maybe(
    st.lists(
        maybe(st.fixed_dictionaries({"id": maybe(st.sampled_from(["mode", "model"])), "type": maybe(st.just("select"))}, optional={
            "name": maybe(text), "category": maybe(st.sampled_from(["mode", "model", "_x"])),
            "currentValue": maybe(mode_ids),
            "options": maybe(st.lists(maybe(st.fixed_dictionaries({"value": maybe(mode_ids), "name": maybe(text)})), max_size=4)),
        })),  # fmt: skip
        max_size=3,
    )
)
fields = {
    "content": block | tool_content,
    "messageId": maybe(st.sampled_from(["m1", "m2", ""])),
    "toolCallId": maybe(st.sampled_from(["t1", "t2"])),
    "title": maybe(text),
    "kind": maybe(st.sampled_from(sorted(TOOL_KINDS))),
    "status": maybe(st.sampled_from(sorted(TOOL_STATUSES))),
    "rawInput": junk,
    "rawOutput": junk,
    "locations": locations,
    "entries": entries,
    "availableCommands": maybe(st.lists(maybe(st.fixed_dictionaries({"name": maybe(text)})), max_size=3)),
    "currentModeId": maybe(mode_ids),
    "configOptions": config_options,
    "used": maybe(st.integers(0, 10**6)),
    "size": maybe(st.integers(0, 10**6)),
    "cost": junk,
}
TOOL_FIELDS = ["toolCallId", "title", "kind", "status", "rawInput", "rawOutput", "locations", "content"]
READS = {  # the fields each kind reads: drawing only those keeps the examples quick to make
    "agent_message_chunk": ["content", "messageId"], "agent_thought_chunk": ["content", "messageId"],
    "user_message_chunk": ["content"], "tool_call": TOOL_FIELDS, "tool_call_update": TOOL_FIELDS,
    "plan": ["entries"], "available_commands_update": ["availableCommands"], "current_mode_update": ["currentModeId"],
    "config_option_update": ["configOptions"], "session_info_update": ["title"], "usage_update": ["used", "size", "cost"],
}  # fmt: skip


def update_of(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    read = {f: fields[f] for f in READS[kind]}
    if "content" in read:  # a chunk's content is one block, a tool call's a list of items
        read["content"] = tool_content if kind.startswith("tool_call") else block
    return st.fixed_dictionaries({"sessionUpdate": st.just(kind)}, optional=read)


updates = st.one_of(
    *[update_of(kind) for kind in KINDS],
    # any kind, known or not (or no string at all), with any of the fields
    st.fixed_dictionaries({"sessionUpdate": st.sampled_from(KINDS) | st.text(max_size=10) | junk}, optional=fields),
)
session_results = st.fixed_dictionaries({}, optional={
    "modes": maybe(st.fixed_dictionaries({"currentModeId": maybe(mode_ids), "availableModes": maybe(st.lists(
        maybe(st.fixed_dictionaries({"id": maybe(mode_ids), "name": maybe(text)})), max_size=4))})),
    "configOptions": config_options,
})  # fmt: skip
steps = st.lists(
    st.one_of(
        *[updates.map(lambda u: ("update", u))] * 4,
        st.just(("begin", None)),
        st.sampled_from(["end_turn", "cancelled", "max_tokens", "refusal"]).map(lambda s: ("finish", s)),
        st.just(("user", None)),
        session_results.map(lambda r: ("session", r)),
    ),
    max_size=30,
)

PART_KEYS = {
    "tool": {"type", "id", "title", "kind", "status", "input", "output", "locations", "diffs"},
    "plan": {"type", "entries"},
}


def check_part(part: dict[str, Any]) -> None:
    """The wire form a frontend relies on, whatever the agent sent."""
    if part["type"] in ("text", "thought"):
        assert set(part) == {"type", "text"} and isinstance(part["text"], str)
        return
    assert set(part) - {"terminals"} == PART_KEYS[part["type"]], part
    for terminal in part.get("terminals", []) if part["type"] == "tool" else ():  # only where it embeds some
        assert set(terminal) == {"terminalId", "output", "exitStatus"} and isinstance(terminal["output"], str)
        assert isinstance(terminal["terminalId"], str) and terminal["terminalId"], terminal
    if part["type"] == "plan":
        for entry in part["entries"]:
            assert set(entry) == {"content", "priority", "status"}
            assert all(isinstance(v, str) for v in entry.values()), entry
        return
    assert all(isinstance(part[k], str) for k in ("id", "title", "input", "output")), part
    assert part["kind"] in TOOL_KINDS and part["status"] in TOOL_STATUSES
    for location in part["locations"]:
        assert isinstance(location.get("path", ""), str) and isinstance(location.get("line", 0), int), location
    for diff in part["diffs"]:
        assert set(diff) == {"path", "oldText", "newText", "newFile"}
        assert all(isinstance(diff[k], str) for k in ("path", "oldText", "newText")) and isinstance(diff["newFile"], bool)


class Seen:
    """What a finished message showed, which no later update may take back.

    A late update (sent after the prompt's answer, or carrying an earlier messageId) still lands
    in the message it belongs to: parts may be added, text only grows, tools and plans are
    replaced by their newer state, but no part is removed or turned into another.
    """

    def __init__(self, message: Message) -> None:
        self.message = message
        self.stop_reason = message.stop_reason
        self.parts = [(p.type, p.text if isinstance(p, TextPart) else p.to_dict().get("id")) for p in message.parts]

    def check(self, conv: Conversation) -> None:
        message = self.message
        assert conv.by_id[message.id] is message and message in conv.messages
        assert message.done and message.stop_reason == self.stop_reason
        assert len(message.parts) >= len(self.parts)
        for part, (kind, shown) in zip(message.parts, self.parts):
            assert part.type == kind
            if isinstance(part, TextPart):
                assert part.text.startswith(shown)  # streamed text only grows
            else:
                assert part.to_dict().get("id") == shown


def run(script: list[tuple[str, Any]]) -> None:
    events: list[Event] = []
    conv = Conversation("a", events.append)
    conv.session_started("s0", {})
    seen: dict[str, Seen] = {}
    reply: Message | None = None
    for step, value in script:
        if step == "update":
            conv.apply_update(value)
        elif step == "begin":
            reply = conv.begin_reply()
        elif step == "finish" and reply is not None and not reply.done:
            conv.finish(reply, value)
        elif step == "user":
            conv.add_user("hello", queued=False)
        elif step == "session":
            conv.session_started(f"s{len(seen)}", value)
        for old in seen.values():
            old.check(conv)
        for message in conv.messages:
            if message.done and message.id not in seen:
                seen[message.id] = Seen(message)
        assert sum(m.done for m in conv.messages) == len(seen)  # the finished only grow in number
    for message in conv.messages:
        for part in message.to_dict()["parts"]:
            check_part(part)
    for event in events:
        if isinstance(event, MessageDelta):
            message = conv.by_id[event.message_id]
            assert 0 <= event.index < len(message.parts) and message.parts[event.index].type == event.kind
    snapshot = conv.snapshot()
    json.dumps(snapshot)
    assert isinstance(snapshot["usage"]["used"], int) and isinstance(snapshot["usage"]["size"], int)
    assert snapshot["title"] is None or isinstance(snapshot["title"], str)
    assert all(isinstance(c, dict) for c in snapshot["commands"])
    assert all(isinstance(o, dict) for o in snapshot["configOptions"])
    modes = snapshot["modes"]
    assert modes is None or (isinstance(modes, dict) and isinstance(modes.get("availableModes", []), list))


FUZZ = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(steps)
def test_any_update_stream_never_raises_nor_takes_back_a_finished_message(script: list[tuple[str, Any]]) -> None:
    run(script)


def test_not_numbers_count_as_zero_tokens() -> None:
    conv = Conversation("a", lambda e: None)
    for value in (math.nan, math.inf, -math.inf, "12", None, [1], True):
        conv.apply_update({"sessionUpdate": "usage_update", "used": value, "size": value})
        assert conv.usage == {"used": 0, "size": 0}


def test_values_nested_as_deep_as_a_line_can_hold_never_raise() -> None:
    deepest = next(v for n in range(sys.getrecursionlimit(), 0, -1) if (v := loads_or_none("[" * n + "]" * n)))
    conv = Conversation("a", lambda e: None)
    reply = conv.begin_reply()
    conv.apply_update({"sessionUpdate": "tool_call", "toolCallId": "t", "rawInput": deepest, "rawOutput": deepest})
    conv.apply_update({"sessionUpdate": deepest})
    tool = reply.parts[0].to_dict()
    assert tool["id"] == "t" and isinstance(tool["input"], str) and isinstance(tool["output"], str)


def loads_or_none(line: str) -> Any:
    """The value of a JSON line, or None where json itself gives up on its depth."""
    try:
        return json.loads(line)
    except RecursionError:
        return None
