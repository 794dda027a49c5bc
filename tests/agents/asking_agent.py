"""An ACP agent that asks its client odd but legal things (stdlib only).

Prompts:
  `ask SCHEMA`     an elicitation/create with SCHEMA (JSON) as its requestedSchema; the answer,
                   as JSON, is the reply's text
  `perm OPTIONS`   a session/request_permission with OPTIONS (JSON), or none at all for `perm -`;
                   the reply is the whole answer (`result` or `error`) as JSON
  `batch`          messages sent as JSON-RPC batches: an update alone in one, two fs requests in
                   another (a write of batched.txt and a read of given.txt in
                   its cwd; their answers are the reply), an empty one and one of non-objects,
                   and the prompt's own answer in a batch with the last update
  `perms N`        N permission requests at once, none waiting for another; the reply counts the
                   outcomes once all are answered (`{"yes": 3, "cancelled": 1}`)
  `stray ID…`      an update for each session ID given (one deck may not know), then the answer

Sessions are s1, s2, … in the order made.
"""

from __future__ import annotations

import itertools
import json
import os
import sys

ids = itertools.count(1000)
sessions = itertools.count(1)
later: list[dict] = []  # what came while waiting for an answer


def send(message: dict | list) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def chunk(sid: str, text: str) -> dict:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}}


def answers(*request_ids: int) -> dict[int, dict]:
    """Wait for the answers to `request_ids`; other messages are handled afterwards."""
    got: dict[int, dict] = {}
    while len(got) < len(request_ids):
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        message = json.loads(line)
        if "method" not in message and message.get("id") in request_ids:
            got[message["id"]] = {k: message[k] for k in ("result", "error") if k in message}
        else:
            later.append(message)
    return got


def request(method: str, params: dict) -> dict:
    request_id = next(ids)
    send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    return answers(request_id)[request_id]


def prompt(rid: int, sid: str, text: str) -> None:
    word, _, rest = text.partition(" ")
    done = {"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}}
    if word == "ask":
        answer = request("elicitation/create", {"sessionId": sid, "mode": "form", "message": "Tell me",
                                                "requestedSchema": json.loads(rest)})
        send(chunk(sid, json.dumps(answer.get("result", answer))))
    elif word == "perm":
        params: dict = {"sessionId": sid, "toolCall": {"toolCallId": "t1", "title": "touch x", "kind": "edit"}}
        if rest != "-":
            params["options"] = json.loads(rest)
        send(chunk(sid, json.dumps(request("session/request_permission", params))))
    elif word == "batch":
        send([chunk(sid, "from a batch; ")])
        first, second = next(ids), next(ids)
        written, read = os.path.join(os.getcwd(), "batched.txt"), os.path.join(os.getcwd(), "given.txt")
        send([
            {"jsonrpc": "2.0", "id": first, "method": "fs/write_text_file", "params": {"sessionId": sid, "path": written, "content": "both"}},
            {"jsonrpc": "2.0", "id": second, "method": "fs/read_text_file", "params": {"sessionId": sid, "path": read}},
        ])  # fmt: skip
        got = answers(first, second)
        send([])
        send([1, "two", None])
        send([chunk(sid, json.dumps([got[first], got[second]])), done])
        return
    elif word == "perms":
        asked = [next(ids) for _ in range(int(rest))]
        sys.stdout.write("".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "session/request_permission", "params": {
            "sessionId": sid, "toolCall": {"toolCallId": f"t{i}", "title": f"edit {i}", "kind": "edit"},
            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}]}}) + "\n" for i in asked))
        sys.stdout.flush()
        counts: dict[str, int] = {}
        for answer in answers(*asked).values():
            outcome = answer.get("result", {}).get("outcome", {})
            key = outcome.get("optionId") or outcome.get("outcome") or "error"
            counts[key] = counts.get(key, 0) + 1
        send(chunk(sid, json.dumps(counts)))
    elif word == "stray":
        for other in rest.split():
            send(chunk(other, f"for {other}"))
        send(chunk(sid, "sent"))
    send(done)


def handle(message: dict) -> None:
    method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": f"s{next(sessions)}"}})
    elif method == "session/prompt":
        prompt(rid, params["sessionId"], " ".join(b.get("text", "") for b in params.get("prompt", [])))
    elif rid is not None and method is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            handle(json.loads(line))
        while later:
            handle(later.pop(0))


if __name__ == "__main__":
    main()
