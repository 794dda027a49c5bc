"""An ACP agent that sends what a well-behaved one never would (stdlib only); the prompt text picks the turn.

Flags: --ignore-eof (after the end of stdin, sleep instead of exiting), --close-stdout (close fd 1
before anything else, and stay).

Prompt commands (first word), each written as raw lines, then the turn's answer:
`bomb` (in one write: a chunk "before", a line of 100,000 "[", a chunk "after"),
`deep N` (a usage_update whose cost is an object nested N levels, then a chunk "after"),
`numbers` (NaN, Infinity, -Infinity and 1e400 in a usage_update and in the answer's usage),
`surrogate` (a chunk whose text is a lone surrogate escape, then a chunk "after"),
`badkind` (updates whose sessionUpdate is a list, an object, a number or null, one more for a session nobody
opened, then a chunk "after"),
`unknown N [SIZE]` (updates for N distinct session ids nobody opened, each SIZE bytes longer, then a chunk "after"),
`close-stdout` (a chunk "closing", then fd 1 closed: the agent stays alive, reading stdin);
anything else is echoed.
"""

from __future__ import annotations

import json
import os
import sys
import time

IGNORE_EOF = "--ignore-eof" in sys.argv[1:]
closed = "--close-stdout" in sys.argv[1:]
if closed:
    os.close(1)


def write(data: bytes) -> None:
    """Everything in one write: the reader sees it in as few chunks as the pipe allows."""
    if closed:
        return
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def line(msg: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **msg}).encode() + b"\n"


def update(sid: str, body: dict) -> bytes:
    return line({"method": "session/update", "params": {"sessionId": sid, "update": body}})


def chunk(sid: str, text: str) -> bytes:
    return update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


def turn(rid, sid: str, text: str) -> None:
    global closed
    word, _, rest = text.partition(" ")
    result: dict = {"stopReason": "end_turn"}
    if word == "bomb":
        write(chunk(sid, "before") + b"[" * 100_000 + b"\n" + chunk(sid, "after"))
    elif word == "deep":
        depth = int(rest)
        cost = '{"a":' * depth + "1" + "}" * depth
        head = f'{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"{sid}","update":'
        write(f'{head}{{"sessionUpdate":"usage_update","used":1,"size":2,"cost":{cost}}}}}}}\n'.encode() + chunk(sid, "after"))
    elif word == "numbers":
        head = f'{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"{sid}","update":'
        usage = '{"sessionUpdate":"usage_update","used":NaN,"size":1e400,"cost":{"amount":NaN,"currency":"USD","x":[Infinity,-Infinity,-1e400]}}'
        write(f"{head}{usage}}}}}\n".encode() + chunk(sid, "counted"))
        answer = '{"stopReason":"end_turn","usage":{"totalTokens":Infinity,"inputTokens":-Infinity,"outputTokens":1e400,"cost":NaN}}'
        write(f'{{"jsonrpc":"2.0","id":{json.dumps(rid)},"result":{answer}}}\n'.encode())
        return
    elif word == "surrogate":
        write(line({"method": "session/update", "params": {"sessionId": sid, "update": {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "\ud800"}}}}) + chunk(sid, "after"))
    elif word == "unknown":
        count, _, size = rest.partition(" ")
        pad = "x" * int(size or 0)
        write(b"".join(chunk(f"ghost-{i}", f"boo {i}{pad}") for i in range(int(count))) + chunk(sid, "after"))
    elif word == "badsid":  # session ids that are no strings: a list, an object, a number, null
        write(b"".join(update(bad, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "boo"}})
                       for bad in (["s1"], {"id": "s1"}, 1, None)) + chunk(sid, "after"))
    elif word == "badkind":
        kinds = [(sid, ["tool_call"]), (sid, {"a": 1}), (sid, 1), (sid, None), ("ghost", ["agent_message_chunk"])]
        write(b"".join(update(to, {"sessionUpdate": kind, "toolCallId": "t", "content": {"type": "text", "text": "boo"}})
                       for to, kind in kinds) + chunk(sid, "after"))
    elif word == "close-stdout":
        write(chunk(sid, "closing"))
        os.close(1)
        closed = True
        return  # no answer: the turn can only end through deck noticing
    else:
        write(chunk(sid, f"You said: {text}"))
    write(line({"id": rid, "result": result}))


def handle(msg: dict) -> None:
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        write(line({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}}))
    elif method == "session/new":
        write(line({"id": rid, "result": {"sessionId": "s1"}}))
    elif method == "session/prompt":
        turn(rid, params.get("sessionId"), " ".join(b.get("text", "") for b in params.get("prompt", [])))
    elif rid is not None and method is not None:
        write(line({"id": rid, "error": {"code": -32601, "message": "method not found"}}))


def main() -> None:
    for raw in sys.stdin.buffer:
        try:
            handle(json.loads(raw))
        except ValueError:
            print(f"hostile agent: bad line {raw[:80]!r}", file=sys.stderr, flush=True)
    while IGNORE_EOF:
        time.sleep(1)


if __name__ == "__main__":
    main()
