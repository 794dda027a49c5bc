"""An ACP agent that attacks its client's fs/* methods (stdlib only, Linux for the swaps).

Each prompt is a JSON script: `{"requests": [[METHOD, PARAMS], …], "exchange": [[A, B], …]}`.
Every request goes out at once (pipelined, `sessionId` added); while they are in flight, a
thread swaps each pair of paths A and B with renameat2(RENAME_EXCHANGE), as fast as it can,
an even number of times in all so the tree ends as it began. The answers come back in the
order of the requests as one agent_message_chunk: a JSON list of `{"result": …}` or
`{"error": …}`, with the number of swaps done (or why a swap failed).
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import sys
import threading

RENAME_EXCHANGE = 2
AT_FDCWD = -100

lock = threading.Lock()
ids = itertools.count(1000)
waiting: dict = {}
out = sys.stdout.buffer
libc = ctypes.CDLL(None, use_errno=True)


def send(msg: dict) -> None:
    data = json.dumps({"jsonrpc": "2.0", **msg}).encode() + b"\n"
    with lock:
        out.write(data)
        out.flush()


def exchange(a: str, b: str) -> None:
    if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), a)


def swapper(pairs: list, done: threading.Event, counted: list) -> None:
    swaps = 0
    try:
        while not done.is_set() or swaps % 2:
            for a, b in pairs:
                exchange(a, b)
            swaps += 1
    except OSError as exc:
        counted.append(f"swap failed: {exc}")
        return
    counted.append(swaps)


def run(rid, sid: str, script: dict) -> None:
    done, counted = threading.Event(), []
    thread = threading.Thread(target=swapper, args=(script.get("exchange", []), done, counted))
    if script.get("exchange"):
        thread.start()
    pending = []
    for method, params in script.get("requests", []):
        ev, box = threading.Event(), []
        request_id = next(ids)
        waiting[request_id] = (ev, box)
        pending.append((ev, box))
        send({"id": request_id, "method": method, "params": {"sessionId": sid, **params}})
    answers = []
    for ev, box in pending:
        ev.wait()
        answers.append({k: box[0][k] for k in ("result", "error") if k in box[0]})
    done.set()
    if thread.is_alive():
        thread.join()
    text = json.dumps({"answers": answers, "swaps": counted[0] if counted else 0})
    send({"method": "session/update", "params": {"sessionId": sid, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})
    send({"id": rid, "result": {"stopReason": "end_turn"}})


def handle(msg: dict) -> None:
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method is None:
        ev, box = waiting.pop(rid, (None, None))
        if ev:
            box.append(msg)
            ev.set()
    elif method == "initialize":
        send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
    elif method == "session/new":
        send({"id": rid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        text = " ".join(b.get("text", "") for b in params.get("prompt", []))
        threading.Thread(target=run, args=(rid, params.get("sessionId"), json.loads(text)), daemon=True).start()
    elif rid is not None:
        send({"id": rid, "error": {"code": -32601, "message": "method not found"}})


def main() -> None:
    for raw in sys.stdin.buffer:
        handle(json.loads(raw))


if __name__ == "__main__":
    main()
