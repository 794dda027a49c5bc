"""An ACP agent (stdlib only) that sends many terminal/create requests at once: for deck's terminal caps.

Each prompt is a JSON object `{"count": N, "command": C, "args": [...], "outputByteLimit": L, "wait": W,
"release": [ID, …]}`: the terminals named in `release` are released first (all at once), then
N terminal/create requests for C ARGS (with L when given), written to deck in one write, before
any answer is read. With W true, each terminal created is then waited for (terminal/wait_for_exit,
all at once too). The turn's one agent_message_chunk is a JSON object: `created` (the terminal ids),
`errors` (the error of each refused create), `exits` (the exit statuses waited for).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading

lock = threading.Lock()
ids = itertools.count(1000)
answers: dict = {}
arrived = threading.Condition()


def write(data: bytes) -> None:
    with lock:
        view = memoryview(data)
        while view:
            view = view[os.write(1, view) :]


def line(msg: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **msg}).encode() + b"\n"


def burst(method: str, params: list[dict]) -> list[dict]:
    """One request per entry of `params`, all in one write; their answers, in the same order."""
    request_ids = [next(ids) for _ in params]
    write(b"".join(line({"id": rid, "method": method, "params": p}) for rid, p in zip(request_ids, params)))
    with arrived:
        arrived.wait_for(lambda: all(rid in answers for rid in request_ids))
        return [answers.pop(rid) for rid in request_ids]


def run(rid, sid: str, spec: dict) -> None:
    if spec.get("release"):
        burst("terminal/release", [{"sessionId": sid, "terminalId": t} for t in spec["release"]])
    create = {"sessionId": sid, "command": spec["command"], "args": spec.get("args", [])}
    if "outputByteLimit" in spec:
        create["outputByteLimit"] = spec["outputByteLimit"]
    results = burst("terminal/create", [create] * spec["count"])
    created = [r["result"]["terminalId"] for r in results if "result" in r]
    report: dict = {"created": created, "errors": [r["error"] for r in results if "error" in r], "exits": []}
    if spec.get("wait") and created:
        waited = burst("terminal/wait_for_exit", [{"sessionId": sid, "terminalId": t} for t in created])
        report["exits"] = [w.get("result") for w in waited]
    text = json.dumps(report)
    write(line({"method": "session/update", "params": {"sessionId": sid, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}}))  # fmt: skip
    write(line({"id": rid, "result": {"stopReason": "end_turn"}}))


def handle(msg: dict) -> None:
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method is None:
        with arrived:
            answers[rid] = msg
            arrived.notify_all()
    elif method == "initialize":
        write(line({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}}))
    elif method == "session/new":
        write(line({"id": rid, "result": {"sessionId": "s1"}}))
    elif method == "session/prompt":
        text = " ".join(b.get("text", "") for b in params.get("prompt", []))
        threading.Thread(target=run, args=(rid, params.get("sessionId"), json.loads(text)), daemon=True).start()
    elif rid is not None:
        write(line({"id": rid, "error": {"code": -32601, "message": "method not found"}}))


def main() -> None:
    for raw in sys.stdin.buffer:
        handle(json.loads(raw))


if __name__ == "__main__":
    main()
