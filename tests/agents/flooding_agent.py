"""An ACP agent that sends far more than any real answer (stdlib only): for deck's size caps.

It can load sessions. Flags: `--replay-forever` (a `session/load` is never answered: its replay
streams 1 MiB chunks until stdin ends), `--alternate` (that replay alternates user and agent
chunks, so that each chunk starts a message of its own).

Prompt commands: `flood MIB` (MIB mebibytes of answer in 64 KiB chunks, the first chunk starting
"HEAD", the last one ending "TAIL"), `tools N SIZE` (N tool calls, each with a diff of SIZE bytes
a side), `plan N` (a plan of N entries of 1 KiB); anything else is echoed.
"""

from __future__ import annotations

import json
import os
import sys

REPLAY_FOREVER = "--replay-forever" in sys.argv[1:]
ALTERNATE = "--alternate" in sys.argv[1:]
CHUNK = 64 * 1024


def write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def line(msg: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **msg}).encode() + b"\n"


def update(sid: str, body: dict) -> bytes:
    return line({"method": "session/update", "params": {"sessionId": sid, "update": body}})


def chunk(sid: str, text: str, kind: str = "agent_message_chunk") -> bytes:
    return update(sid, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})


def flood(sid: str, mebibytes: float) -> None:
    count = max(int(mebibytes * (1 << 20)) // CHUNK, 2)
    body = "x" * (CHUNK - 5) + "\n"
    write(chunk(sid, "HEAD" + body))
    batch = []
    for _ in range(count - 2):
        batch.append(chunk(sid, body + "y"))
        if len(batch) == 16:
            write(b"".join(batch))
            batch = []
    write(b"".join(batch) + chunk(sid, body + "TAIL"))


def tools(sid: str, count: int, size: int) -> None:
    for n in range(count):
        diff = {"type": "diff", "path": f"/f{n}.txt", "oldText": "a" * size, "newText": "b" * size}
        write(update(sid, {"sessionUpdate": "tool_call", "toolCallId": f"t{n}", "title": f"edit {n}",
                           "kind": "edit", "status": "completed", "content": [diff]}))  # fmt: skip


def plan(sid: str, count: int) -> None:
    entries = [{"content": f"{n} " + "p" * 1024, "priority": "low", "status": "pending"} for n in range(count)]
    write(update(sid, {"sessionUpdate": "plan", "entries": entries}))


def replay_forever(sid: str) -> None:
    body = "r" * (1 << 20)
    try:
        while True:
            if ALTERNATE:
                write(chunk(sid, body[:4096], "user_message_chunk"))
            write(chunk(sid, body))
    except OSError:  # deck went away
        os._exit(0)


def turn(rid, sid: str, text: str) -> None:
    word, _, rest = text.partition(" ")
    args = rest.split()
    if word == "flood":
        flood(sid, float(args[0]))
    elif word == "tools":
        tools(sid, int(args[0]), int(args[1]))
    elif word == "plan":
        plan(sid, int(args[0]))
    else:
        write(chunk(sid, text))
    write(line({"id": rid, "result": {"stopReason": "end_turn"}}))


def handle(msg: dict) -> None:
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        caps = {"loadSession": True}
        write(line({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": caps}}))
    elif method == "session/new":
        write(line({"id": rid, "result": {"sessionId": "flood-1"}}))
    elif method == "session/load":
        if REPLAY_FOREVER:
            replay_forever(params.get("sessionId", ""))
        write(line({"id": rid, "result": {}}))
    elif method == "session/prompt":
        blocks = params.get("prompt") or []
        text = "".join(b.get("text", "") for b in blocks if isinstance(b, dict))
        turn(rid, params.get("sessionId", ""), text)
    elif rid is not None and method is not None:
        write(line({"id": rid, "error": {"code": -32601, "message": f"no {method}"}}))


def main() -> None:
    for raw in sys.stdin.buffer:
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        if isinstance(msg, dict):
            handle(msg)


if __name__ == "__main__":
    main()
