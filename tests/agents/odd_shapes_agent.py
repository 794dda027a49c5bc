"""An ACP agent (stdlib only) that sends what a page has to draw, in shapes no well-behaved agent would.

Prompts (first word):
  `perm JSON`        a session/request_permission whose options are JSON (any value: [], null, a list
                     of odd things); the reply is the whole answer (`result` or `error`) as JSON
  `ask JSON`         an elicitation/create whose requestedSchema is JSON (null, fields of any shape);
                     the reply is the answer as JSON
  `quotes N`         an answer of N nested quotes (`> > > … deep`)
  `repeat N JSON`    an answer of the JSON string repeated N times (`repeat 250000 "[a"`: 500,000 characters)
Anything else is answered `You said: TEXT`.
"""

from __future__ import annotations

import itertools
import json
import sys

ids = itertools.count(1000)
later: list[dict] = []  # what came while waiting for an answer


def send(message: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def chunk(sid: str, text: str) -> None:
    send({"method": "session/update", "params": {"sessionId": sid, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})  # fmt: skip


def request(method: str, params: dict) -> dict:
    """Ask deck, and wait for its answer; what else comes meanwhile is handled afterwards."""
    request_id = next(ids)
    send({"id": request_id, "method": method, "params": params})
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        message = json.loads(line)
        if "method" not in message and message.get("id") == request_id:
            return {k: message[k] for k in ("result", "error") if k in message}
        later.append(message)


def prompt(rid: object, sid: str, text: str) -> None:
    word, _, rest = text.partition(" ")
    if word == "perm":
        answer = request("session/request_permission", {
            "sessionId": sid, "toolCall": {"toolCallId": "t1", "title": "touch x", "kind": "edit"}, "options": json.loads(rest)})  # fmt: skip
        chunk(sid, json.dumps(answer))
    elif word == "ask":
        answer = request(
            "elicitation/create",
            {"sessionId": sid, "mode": "form", "message": "Tell me", "requestedSchema": json.loads(rest)},
        )
        chunk(sid, json.dumps(answer))
    elif word == "quotes":
        chunk(sid, "> " * int(rest) + "deep")
    elif word == "repeat":
        count, _, unit = rest.partition(" ")
        chunk(sid, json.loads(unit) * int(count))
    else:
        chunk(sid, f"You said: {text}")
    send({"id": rid, "result": {"stopReason": "end_turn"}})


def handle(message: dict) -> None:
    method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
    if method == "initialize":
        send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
    elif method == "session/new":
        send({"id": rid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        prompt(rid, params.get("sessionId"), " ".join(b.get("text", "") for b in params.get("prompt", [])))
    elif rid is not None and method is not None:
        send({"id": rid, "error": {"code": -32601, "message": "method not found"}})


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            handle(json.loads(line))
        while later:
            handle(later.pop(0))


if __name__ == "__main__":
    main()
