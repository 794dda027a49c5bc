"""A fast ACP agent for benchmarks: each prompt streams N agent_message_chunk updates of S characters.

Usage: producer.py N S [RATE] [SESSION]   (RATE: chunks per second, 0 = as fast as it can)
With SESSION `child`, the chunks are a subagent's: a `subagent_update` announces child session "child"
first, and every chunk carries its id. Stdlib only; exits at the end of stdin.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    count, size = int(sys.argv[1]), int(sys.argv[2])
    rate = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    session = "child" if sys.argv[4:5] == ["child"] else "bench"
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        msg = json.loads(raw)
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            reply = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
        elif method == "session/new":
            reply = {"sessionId": "bench"}
        elif method == "session/prompt":
            if session == "child":
                announce = {"sessionUpdate": "subagent_update", "sessionId": "child", "title": "worker"}
                out.write(json.dumps({"jsonrpc": "2.0", "method": "session/update",
                                      "params": {"sessionId": "bench", "update": announce}}).encode() + b"\n")  # fmt: skip
            stream(out, count, size, rate, session)
            reply = {"stopReason": "end_turn"}
        elif rid is not None:
            out.write(json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}).encode() + b"\n")
            out.flush()
            continue
        else:
            continue
        out.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": reply}).encode() + b"\n")
        out.flush()


def stream(out, count: int, size: int, rate: float, session: str = "bench") -> None:
    text = ("0123456789abcdefghijklmnopqrstuvwxyz" * (size // 36 + 1))[:size]
    if rate > 0:  # paced: each line carries its send time, for latency measurement
        start = time.perf_counter()
        for i in range(count):
            target = start + i / rate
            if (wait := target - time.perf_counter()) > 0:
                time.sleep(wait)  # one wake-up per chunk: the producers' own load stays small
            chunk = f"{time.time():.6f}|"
            line = _line(chunk + text[len(chunk):])
            out.write(line)
            out.flush()
        return
    line = _line(text, session)
    batch = line * 256
    for _ in range(count // 256):
        out.write(batch)
    out.write(line * (count % 256))
    out.flush()


def _line(text: str, session: str = "bench") -> bytes:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}}).encode() + b"\n"


if __name__ == "__main__":
    main()
