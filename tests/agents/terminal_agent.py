"""An ACP agent (stdlib only) that runs commands through its client's terminal/* methods.

Each prompt is a JSON script, `{"steps": [STEP, …]}`, run in order; a STEP is one of
  [METHOD, PARAMS]        a request to the client (`sessionId` added), e.g. ["terminal/create", {...}]
  [METHOD, PARAMS, NAME]  the same, its result's terminalId kept as NAME: "$NAME" in later params
  ["tool", {"id": ID, "terminal": "$NAME", "status": S}]  a tool_call (or its update) embedding the terminal
  ["update", UPDATE]      any session/update, sent as given
  ["sleep", SECONDS]
The answers (`{"result": …}` or `{"error": …}`, one per request) come back as one
agent_message_chunk, a JSON list. On session/cancel it kills (terminal/kill) every terminal it
created and did not release, and the turn ends `cancelled` once the script is done.
Flag --initialize FILE: the initialize request deck sent is written to FILE.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading

lock = threading.Lock()
ids = itertools.count(1000)
waiting: dict = {}
out = sys.stdout.buffer
terminals: list[str] = []
cancelled = threading.Event()


def send(msg: dict) -> None:
    data = json.dumps({"jsonrpc": "2.0", **msg}).encode() + b"\n"
    with lock:
        out.write(data)
        out.flush()


def request(method: str, params: dict) -> dict:
    ev, box = threading.Event(), []
    request_id = next(ids)
    waiting[request_id] = (ev, box)
    send({"id": request_id, "method": method, "params": params})
    ev.wait()
    return {k: box[0][k] for k in ("result", "error") if k in box[0]}


def update(sid: str, body: dict) -> None:
    send({"method": "session/update", "params": {"sessionId": sid, "update": body}})


def substitute(value, names: dict):
    if isinstance(value, str) and value.startswith("$") and value[1:] in names:
        return names[value[1:]]
    if isinstance(value, dict):
        return {k: substitute(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, names) for v in value]
    return value


def run(rid, sid: str, script: dict) -> None:
    names: dict = {}
    answers = []
    seen_tools: set = set()
    for step in script.get("steps", []):
        kind = step[0]
        if kind == "sleep":
            cancelled.wait(step[1])
        elif kind == "update":
            update(sid, substitute(step[1], names))
        elif kind == "tool":
            spec = substitute(step[1], names)
            first = spec["id"] not in seen_tools
            seen_tools.add(spec["id"])
            update(sid, {
                "sessionUpdate": "tool_call" if first else "tool_call_update", "toolCallId": spec["id"],
                "title": spec.get("title", "run"), "kind": "execute", "status": spec.get("status", "in_progress"),
                "content": [{"type": "terminal", "terminalId": spec["terminal"]}],
            })  # fmt: skip
        else:
            params = substitute(step[1], names)
            answer = request(kind, {"sessionId": sid, **params})
            answers.append(answer)
            if kind == "terminal/create" and "result" in answer:
                terminals.append(answer["result"]["terminalId"])
                if len(step) > 2:
                    names[step[2]] = answer["result"]["terminalId"]
            if kind == "terminal/release" and params.get("terminalId") in terminals:
                terminals.remove(params["terminalId"])
    update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": json.dumps(answers)}})
    send({"id": rid, "result": {"stopReason": "cancelled" if cancelled.is_set() else "end_turn"}})
    cancelled.clear()


def on_cancel(sid: str) -> None:
    cancelled.set()
    for terminal_id in list(terminals):
        request("terminal/kill", {"sessionId": sid, "terminalId": terminal_id})


def handle(msg: dict) -> None:
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method is None:
        ev, box = waiting.pop(rid, (None, None))
        if ev:
            box.append(msg)
            ev.set()
    elif method == "initialize":
        if "--initialize" in sys.argv:
            with open(sys.argv[sys.argv.index("--initialize") + 1], "w") as f:
                json.dump(params, f)
        send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
    elif method == "session/new":
        send({"id": rid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        text = " ".join(b.get("text", "") for b in params.get("prompt", []))
        threading.Thread(target=run, args=(rid, params.get("sessionId"), json.loads(text)), daemon=True).start()
    elif method == "session/cancel":
        threading.Thread(target=on_cancel, args=(params.get("sessionId"),), daemon=True).start()
    elif rid is not None:
        send({"id": rid, "error": {"code": -32601, "message": "method not found"}})


def main() -> None:
    for raw in sys.stdin.buffer:
        handle(json.loads(raw))


if __name__ == "__main__":
    main()
