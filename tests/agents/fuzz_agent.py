"""An ACP agent that answers each prompt with random and mutated messages (stdlib only): for the wire's fuzz test.

A prompt `fuzz SEED COUNT` sends COUNT messages drawn from SEED: session/update of every kind
with fields well-formed, missing, of the wrong type, huge or full of terminal control
sequences; requests to the client (fs, terminals, permissions, questions, unknown methods) with
junk params, never waiting for their answers; answers to requests deck never made; batches;
lines that are not JSON, cut short, nested too deep or with lone surrogates. Then the prompt
ends. Any other prompt is answered `pong: TEXT`, so the test can see the agent still heard.
"""

from __future__ import annotations

import json
import random
import sys

KINDS = [
    "agent_message_chunk", "agent_thought_chunk", "user_message_chunk", "tool_call", "tool_call_update",
    "plan", "available_commands_update", "current_mode_update", "config_option_update", "config_options_update",
    "session_info_update", "usage_update", "compaction_update", "subagent_update", "notice", "no_such_kind",
]  # fmt: skip
METHODS = [
    "fs/read_text_file", "fs/write_text_file", "terminal/create", "terminal/output", "terminal/kill",
    "terminal/release", "terminal/wait_for_exit", "session/request_permission", "elicitation/create",
    "no/such_method", "", "$/cancel_request",
]  # fmt: skip
#: What an untrusted agent writes to take over the user's terminal: OSC 52 (clipboard), OSC 0 (title),
#: clear screen, C1 CSI, a right-to-left override, BEL, a backspace.
ESCAPES = ["\x1b]52;c;aGk=\x07", "\x1b]0;pwned\x07", "\x1b[2J", "\x9b31m", "\u202e", "\x07", "\x08", "\x1bc"]

sid = "s1"


def send_raw(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def send(message: object) -> None:
    send_raw(json.dumps(message))


def junk(r: random.Random, depth: int = 0) -> object:
    """Any JSON value, escapes and huge strings included."""
    pick = r.randrange(12 if depth < 3 else 8)
    if pick == 0:
        return None
    if pick == 1:
        return r.choice([True, False])
    if pick == 2:
        return r.choice([0, -1, 2**63, -(2**70), 1e308, 3.5])
    if pick == 3:
        return r.choice(ESCAPES) + "text" + r.choice(ESCAPES)
    if pick == 4:
        return "x" * r.choice([0, 1, 1000, 200_000])
    if pick == 5:
        return r.choice(["", "a", "edit", "allow_once", "pending", "completed", "text", "diff", "/etc/passwd", "../x"])
    if pick == 6:
        return float("nan") if r.random() < 0.5 else float("inf")
    if pick == 7:
        return "".join(chr(r.randrange(0, 0x3000)) for _ in range(r.randrange(1, 30)))
    if pick < 10:
        return [junk(r, depth + 1) for _ in range(r.randrange(4))]
    return {r.choice(["type", "text", "id", "title", "content", "status", "kind", "value"]): junk(r, depth + 1)
            for _ in range(r.randrange(4))}  # fmt: skip


def maybe(r: random.Random, good: object) -> object:
    return good if r.random() < 0.6 else junk(r)


def text_block(r: random.Random) -> object:
    return maybe(r, {"type": "text", "text": maybe(r, r.choice(ESCAPES) + "hello" + r.choice(ESCAPES))})


def update(r: random.Random) -> dict:
    kind = r.choice(KINDS)
    body: dict = {"sessionUpdate": kind}
    fields = {
        "content": text_block(r) if "chunk" in kind else maybe(r, [{"type": "content", "content": text_block(r)},
                                                                   {"type": "diff", "path": "/x", "oldText": "a", "newText": junk(r)},
                                                                   {"type": "terminal", "terminalId": junk(r)}]),
        "toolCallId": maybe(r, r.choice(["t1", "t2", "t3"])), "title": maybe(r, r.choice(ESCAPES) + "title"),
        "kind": maybe(r, "edit"), "status": maybe(r, r.choice(["pending", "in_progress", "completed", "failed"])),
        "entries": maybe(r, [{"content": junk(r), "priority": "high", "status": "pending"}]),
        "availableCommands": maybe(r, [{"name": maybe(r, "go"), "description": junk(r)}]),
        "currentModeId": junk(r), "configOptions": maybe(r, [{"id": maybe(r, "model"), "name": junk(r), "type": "select",
                                                               "currentValue": junk(r), "options": junk(r)}]),
        "used": junk(r), "size": junk(r), "cost": maybe(r, {"amount": junk(r), "currency": junk(r)}),
        "messageId": junk(r), "sessionId": junk(r), "message": junk(r), "name": junk(r),
    }  # fmt: skip
    for key, value in fields.items():
        if r.random() < 0.4:
            body[key] = value
    return {"jsonrpc": "2.0", "method": "session/update",
            "params": maybe(r, {"sessionId": maybe(r, sid), "update": maybe(r, body)})}  # fmt: skip


def request(r: random.Random, rid: int) -> dict:
    params = {
        "sessionId": maybe(r, sid), "path": maybe(r, r.choice(["notes.txt", "/etc/passwd", "../../x", "\x1b[2J"])),
        "content": junk(r), "command": maybe(r, "true"), "args": junk(r), "terminalId": junk(r),
        "toolCall": maybe(r, {"toolCallId": "t1", "title": junk(r)}), "options": maybe(r, [
            {"optionId": maybe(r, "yes"), "name": maybe(r, r.choice(ESCAPES)), "kind": maybe(r, "allow_once")}]),
        "mode": maybe(r, "form"), "message": junk(r), "requestedSchema": junk(r), "requestId": junk(r),
    }  # fmt: skip
    return {"jsonrpc": "2.0", "id": maybe(r, rid), "method": r.choice(METHODS),
            "params": maybe(r, {k: v for k, v in params.items() if r.random() < 0.5})}  # fmt: skip


def bad_line(r: random.Random) -> str:
    return r.choice([
        "not json", "{", '{"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "\\ud800"}}}}',
        "[" * 5000 + "]" * 5000, '{"jsonrpc": "2.0", "id": 999999, "result": {}}', '{"jsonrpc": "2.0", "id": "x", "error": {"code": "no"}}',
        "[]", "[1, 2]", "null", '"\\u001b[2J"', "NaN", '{"jsonrpc": "1.0"}', "\x1b[2J", "",
    ])  # fmt: skip


def fuzz(seed: int, count: int) -> None:
    r = random.Random(seed)
    for i in range(count):
        pick = r.random()
        if pick < 0.6:
            send(update(r))
        elif pick < 0.8:
            send(request(r, 10_000 + seed * 1000 + i))
        elif pick < 0.9:
            send_raw(bad_line(r))
        else:
            send([update(r) for _ in range(r.randrange(3))] + [junk(r)])


def main() -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or "method" not in message:
            continue  # answers to what it asked: nobody waits for them
        method, rid, params = message["method"], message.get("id"), message.get("params") or {}
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": False}}})
        elif method == "session/new":
            send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": sid}})
        elif method == "session/prompt":
            text = " ".join(b.get("text", "") for b in params.get("prompt", []) if isinstance(b, dict))
            word, *rest = text.split()
            if word == "fuzz":
                fuzz(int(rest[0]), int(rest[1]))
            else:
                send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {
                    "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"pong: {text}"}}}})  # fmt: skip
            send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "result": {}})


if __name__ == "__main__":
    main()
