"""An ACP agent (stdlib only) that delegates to subagents: child sessions announced by `subagent_update`.

Prompts (first word):
  `delegate`     child "c1" (Explore, cancellable) streams a thought, text and a tool call; the parent's tool
                 call links to it (`session` content); messages go between the sessions both ways;
                 the child goes idle; the parent answers "delegated"
  `nested`       child "c1" announces its own child "c2" (on c1's session), which answers "deep"
  `junk`         a child announced twice (the second time by another child, renamed), an update for a child
                 never announced, a subagent_update without a sessionId, one naming the parent's session
  `many N`       N children, each saying "child I"
  `perm`         child "c1" asks a permission; the answer, as JSON, is the parent's reply
  `hold [nocancel]`  child "c1" works until deck sends `session/cancel` for it (then goes idle, cancelled);
                 with `nocancel` it offers no cancel and finishes at the parent's own cancel
  `late`         child "c1" (cancellable) works until deck sends `session/cancel` for it, then asks a permission
                 all the same, streams a word and asks again, then reports `running` (new work) and asks a
                 third time; the three answers, as a JSON list, are the parent's reply
  `between N`    child "c1" sends N messages to the parent, each of its own messageId, in one chunk each
  `cost`         child "c1" reports its session's cost twice (0.5 USD, then 1.25 USD in all), then the
                 parent its own, 2 USD (the child's within it)
  `official`     as ACP v1's draft shows it: child "c1" announced with its `cwd` and `additionalDirectories`;
                 the parent's message to it on the child's own session (its incoming view: an upsert, then
                 a chunk of content alone); the child's text, a compaction of its context (streamed summary,
                 completed) and a notice; then its own state `_paused` (stop reason `_waiting`), its
                 directories cleared; a notice of the parent's; the parent answers "reviewed"
  `caps`         the initialize request's clientCapabilities, as JSON
  `forkas WHAT`  the next `session/fork` answers WHAT: `parent` (the forked session's own id), `child` (the
                 live child "c1", announced now), `huge` (an id of 5,000,000 characters), `fresh` ("f1")
Anything else is answered `You said: TEXT`.

It lists `sessionCapabilities.fork`. `--new-id ID` makes `session/new` answer ID (`huge`: 5,000,000 characters).
"""

from __future__ import annotations

import itertools
import json
import sys

ids = itertools.count(1000)
init_params: dict = {}
fork_as = ["fresh"]
HUGE = "F" * 5_000_000


def send(message: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def update(sid: str, body: dict) -> None:
    send({"method": "session/update", "params": {"sessionId": sid, "update": body}})


def text(sid: str, words: str, kind: str = "agent_message_chunk") -> None:
    update(sid, {"sessionUpdate": kind, "content": {"type": "text", "text": words}})


def announce(parent: str, child: str, **fields: object) -> None:
    update(parent, {"sessionUpdate": "subagent_update", "sessionId": child, **fields})


def read() -> dict:
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def request(method: str, params: dict) -> dict:
    request_id = next(ids)
    send({"id": request_id, "method": method, "params": params})
    while True:
        message = read()
        if "method" not in message and message.get("id") == request_id:
            return {k: message[k] for k in ("result", "error") if k in message}


def delegate(sid: str) -> None:
    announce(sid, "c1", title="Explore", description="Find the config loader",
             capabilities={"cancel": {}}, state={"state": "running"})  # fmt: skip
    update(sid, {"sessionUpdate": "tool_call", "toolCallId": "task1", "title": "Task: explore", "kind": "think",
                 "status": "in_progress", "content": [{"type": "session", "sessionId": "c1"}]})  # fmt: skip
    update(sid, {"sessionUpdate": "session_message", "messageId": "m1", "senderSessionId": sid,
                 "recipientSessionId": "c1", "content": [{"type": "text", "text": "Look for the loader"}]})  # fmt: skip
    text("c1", "reading files", "agent_thought_chunk")
    update("c1", {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read config.py", "kind": "read",
                  "status": "completed"})  # fmt: skip
    text("c1", "The loader is ")
    text("c1", "in config.py")
    update(sid, {"sessionUpdate": "session_message_chunk", "messageId": "m2", "senderSessionId": "c1",
                 "recipientSessionId": sid, "content": {"type": "text", "text": "Found: "}})  # fmt: skip
    update(sid, {"sessionUpdate": "session_message_chunk", "messageId": "m2",
                 "content": {"type": "text", "text": "config.py"}})  # fmt: skip
    announce(sid, "c1", state={"state": "idle", "stopReason": "end_turn"})
    update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "task1", "status": "completed"})
    text(sid, "delegated")


def official(sid: str) -> None:
    announce(sid, "c1", title="Review", cwd="/work/app", additionalDirectories=["/work/lib", "/work/docs"],
             capabilities={"cancel": {}}, state={"state": "running"})  # fmt: skip
    update("c1", {"sessionUpdate": "session_message", "messageId": "in1", "senderSessionId": sid,
                  "recipientSessionId": "c1", "content": [{"type": "text", "text": "Review the diff"}]})  # fmt: skip
    update("c1", {"sessionUpdate": "session_message_chunk", "messageId": "in1",
                  "content": {"type": "text", "text": ", please"}})  # fmt: skip
    text("c1", "Looking at it")
    update("c1", {"sessionUpdate": "compaction_update", "compactionId": "k1", "status": "in_progress"})
    update("c1", {"sessionUpdate": "compaction_summary_chunk", "compactionId": "k1",
                  "content": {"type": "text", "text": "kept: the diff"}})  # fmt: skip
    update("c1", {"sessionUpdate": "compaction_update", "compactionId": "k1", "status": "completed"})
    update("c1", {"sessionUpdate": "notice", "severity": "warning", "title": "Slow disk"})
    announce(sid, "c1", state={"state": "_paused", "stopReason": "_waiting"}, additionalDirectories=None)
    update(sid, {"sessionUpdate": "notice", "severity": "info", "title": "Review started", "description": "one child"})
    text(sid, "reviewed")


def junk(sid: str) -> None:
    announce(sid, "c1", title="First")
    announce(sid, "c2", title="Second")
    announce("c2", "c1", title="Renamed")  # announced again, by another session: its parent stays
    text("ghost", "nobody announced me")
    update(sid, {"sessionUpdate": "subagent_update", "title": "no id"})
    announce(sid, sid, title="myself")
    text("c1", "still here")
    text(sid, "survived")


def hold(rid: object, sid: str, cancellable: bool) -> None:
    caps = {"cancel": {}} if cancellable else {}
    announce(sid, "c1", title="Worker", capabilities=caps, state={"state": "running"})
    text("c1", "working")
    while True:
        message = read()
        if message.get("method") == "session/cancel":
            target = message["params"]["sessionId"]
            if target == "c1":
                announce(sid, "c1", state={"state": "idle", "stopReason": "cancelled"})
                text(sid, "child cancelled")
                send({"id": rid, "result": {"stopReason": "end_turn"}})
                return
            send({"id": rid, "result": {"stopReason": "cancelled"}})
            return


def edit(title: str) -> dict:
    return request("session/request_permission", {
        "sessionId": "c1", "toolCall": {"toolCallId": title, "title": title, "kind": "edit"},
        "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"}]})  # fmt: skip


def late(sid: str) -> None:
    announce(sid, "c1", title="Worker", capabilities={"cancel": {}}, state={"state": "running"})
    text("c1", "working")
    while read().get("method") != "session/cancel":
        pass
    answers = [edit("after its cancel")]
    text("c1", "still at it")
    answers.append(edit("after more words"))
    announce(sid, "c1", state={"state": "running"})
    answers.append(edit("new work"))
    text(sid, json.dumps(answers))


def prompt(rid: object, sid: str, words: str) -> None:
    word, _, rest = words.partition(" ")
    if word == "hold":
        hold(rid, sid, rest != "nocancel")
        return
    if word == "delegate":
        delegate(sid)
    elif word == "official":
        official(sid)
    elif word == "nested":
        announce(sid, "c1", title="Planner")
        announce("c1", "c2", title="Searcher")
        text("c2", "deep")
        text(sid, "nested done")
    elif word == "junk":
        junk(sid)
    elif word == "many":
        for i in range(int(rest)):
            announce(sid, f"k{i}", title=f"child {i}")
            text(f"k{i}", f"child {i}")
        text(sid, "many done")
    elif word == "perm":
        announce(sid, "c1", title="Editor")
        answer = request("session/request_permission", {
            "sessionId": "c1", "toolCall": {"toolCallId": "e1", "title": "edit main.py", "kind": "edit"},
            "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "no", "name": "Reject", "kind": "reject_once"}]})  # fmt: skip
        text(sid, json.dumps(answer))
    elif word == "late":
        late(sid)
    elif word == "between":
        announce(sid, "c1", title="Chatty")
        for i in range(int(rest)):
            update(sid, {"sessionUpdate": "session_message_chunk", "messageId": f"b{i}", "senderSessionId": "c1",
                         "recipientSessionId": sid, "content": {"type": "text", "text": f"note {i}"}})  # fmt: skip
        text(sid, "chatted")
    elif word == "cost":
        announce(sid, "c1", title="Spender")
        for amount in (0.5, 1.25):
            update("c1", {"sessionUpdate": "usage_update", "used": 10, "size": 100,
                          "cost": {"amount": amount, "currency": "USD"}})  # fmt: skip
        update(sid, {"sessionUpdate": "usage_update", "used": 20, "size": 100,
                     "cost": {"amount": 2.0, "currency": "USD"}})  # its own, the child's within it  # fmt: skip
        text(sid, "spent")
    elif word == "forkas":
        fork_as[0] = rest
        if rest == "child":
            announce(sid, "c1", title="Live", state={"state": "running"})
        text(sid, f"next fork: {rest}")
    elif word == "caps":
        text(sid, json.dumps(init_params.get("clientCapabilities")))
    else:
        text(sid, f"You said: {words}")
    send({"id": rid, "result": {"stopReason": "end_turn"}})


def main() -> None:
    sessions = itertools.count(1)
    while True:
        message = read()
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "initialize":
            init_params.update(params)
            caps = {"sessionCapabilities": {"fork": {}}}
            send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": caps, "authMethods": []}})
        elif method == "session/new":
            given = sys.argv[sys.argv.index("--new-id") + 1] if "--new-id" in sys.argv else None
            send({"id": rid, "result": {"sessionId": (HUGE if given == "huge" else given) or f"s{next(sessions)}"}})
        elif method == "session/fork":
            forked = {"parent": params.get("sessionId"), "child": "c1", "huge": HUGE}.get(fork_as[0], "f1")
            send({"id": rid, "result": {"sessionId": forked}})
        elif method == "session/prompt":
            blocks = params.get("prompt") or []
            prompt(rid, params["sessionId"], "".join(b.get("text", "") for b in blocks))
        elif rid is not None and method is not None:
            send({"id": rid, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
