"""A scriptable ACP agent for tests (stdlib only). Flags shape the process; the prompt text picks the turn.

Flags: --hang-handshake, --protocol N, --fail-start, --stderr-mb N, --ignore-eof,
--ignore-sigterm, --grandchild PIDFILE, --garbage, --early-update, --string-ids,
--modes (modes and a model option in the session/new reply; with --boolean-option, `fast` too), --handshake-delay S,
--auth-methods JSON (the authMethods of the initialize reply; default one method "key"),
--require-auth (session/new answers -32000 "Authentication required" until `authenticate`
succeeded; then an unknown method id is refused, and an `env_var` method needs its variables set),
--bad-early-update (a usage_update with values that are not numbers, before the session/new reply),
--trap-child FILE (a child in the agent's group that writes FILE 0.3 s after SIGTERM, then ends),
--mcp-no-cancel (a cancelled turn leaves its `ask` tool call open: no MCP cancel, the server stays),
--refuse-settings (session/set_mode and session/set_config_option answered with an error),
--mode-option (modes default, auto-edit, plan offered twice: as `modes` and as the config option
`mode` of category "mode"; session/set_config_option answers the whole set, as it now stands;
with --boolean-option, a boolean option `fast` too), --commands NAME,NAME (its slash commands, said
once its session is made),
--sessions FILE (each session's prompts kept in FILE, so that a later process knows them; session
ids then name the process), --requests FILE (each request deck sends appended to FILE, a JSON line),
--resume (lists sessionCapabilities.resume; session/resume of a session in FILE answers {}),
--refuse-resume (lists it too, and answers session/resume with an error),
--resume-replays (lists it too, and session/resume replays like --load, then names its commands),
--load (lists loadSession; session/load replays each prompt of the session and its echo as updates),
--close (lists sessionCapabilities.close; session/close answers {}; --refuse-close: an error),
--delete (lists sessionCapabilities.delete; session/delete answers {}; --refuse-delete: an error),
--logout (lists agentCapabilities.auth.logout; logout answers {}),
--additional-dirs (lists sessionCapabilities.additionalDirectories),
--fork (lists sessionCapabilities.fork; session/fork answers a new session id, "forkN-of-ID"),
--list (lists sessionCapabilities.list; session/list answers the sessions in FILE, two a page, titled
with their first prompt; --list-pages-forever: every page has a nextCursor, a new one each time),
--crash-load / --crash-resume (lists loadSession / sessionCapabilities.resume; session/load replays one
user message chunk, session/resume nothing, then the agent exits with code 7), --hang-load (lists
loadSession; session/load is never answered).

Prompt commands (first word): `stream N` (N chunks), `slow` (a chunk every 50 ms
until cancelled), `big N` (one chunk of N bytes), `crash` (a chunk, then exit 7; `crash WORDS`: WORDS on stderr first),
`perm` (a tool call asking permission), `perm-after-cancel` (like slow; once cancelled, a
permission request, its outcome chunked), `perm-and-end` (a permission request left unanswered as the turn ends), `read PATH`, `write PATH TEXT`,
`question`, `late` (an update after the response), `error` (a JSON-RPC error),
`badtext` (chunks whose text is not a string, then "ok"),
`thought`, `tools`, `plan`, `usage`, `cost AMOUNT [CURRENCY]`, `spend AMOUNT` (the session's
cost, in USD, grows by AMOUNT), `spend-slowly AMOUNT` (by AMOUNT each 0.1 s until cancelled), `unknown-update`,
`user` (user_message_chunks), `session` (mode, config option, session info and
command updates), `perms N KIND` (N permission requests in one turn for a tool of
KIND), `readlines PATH LINE LIMIT`, `stop REASON` (that stop reason),
`sleep S`, `deaf [S]` (a chunk, then session/cancel is ignored: the answer comes S seconds
later, then "deaf: answered" on stderr; never without S), `cancel-late` (like slow, chunks with a messageId, then late chunks
after the cancelled response: one at once, one 1 s later with the messageId),
`slow-question` (an elicitation while chunks stream), `mode ID` (a current_mode_update alone),
`mode-option ID` (a config_option_update alone, with the `mode` option set to ID),
`ask AGENT QUESTION` / `list-agents` / `changed-files` (start the session's `deck` MCP server from
session/new `mcpServers`, call its tool ask_agent / list_agents / changed_files over stdio, report
the call as a tool call and chunk "answer: RESULT" or "tool error: TEXT"; a cancel
meanwhile sends MCP notifications/cancelled), `recall` (the session's earlier prompts, under
--sessions), `multi N` (the last N of MULTI's
messages, all 3 by default, separated by tool calls with a thought between), `silent` (a thought and a tool call,
no text), `notice SEVERITY TITLE` (a notice), `named-tool` (a tool call with a `name`), `compact [fail]`
(a context compaction with a streamed summary, completed or failed), `whoami` (the session's id);
anything else is echoed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--hang-handshake", action="store_true")
parser.add_argument("--protocol", type=int, default=1)
parser.add_argument("--no-protocol", action="store_true")  # initialize answers without a protocolVersion
parser.add_argument("--fail-start", action="store_true")
parser.add_argument("--stderr-mb", type=int, default=0)
parser.add_argument("--ignore-eof", action="store_true")
parser.add_argument("--ignore-sigterm", action="store_true")
parser.add_argument("--grandchild")
parser.add_argument("--garbage", action="store_true")
parser.add_argument("--early-update", action="store_true")
parser.add_argument("--string-ids", action="store_true")
parser.add_argument("--modes", action="store_true")
parser.add_argument("--handshake-delay", type=float, default=0.0)
parser.add_argument("--auth-methods", type=json.loads, default=[{"id": "key", "name": "API key"}])
parser.add_argument("--require-auth", action="store_true")
parser.add_argument("--bad-early-update", action="store_true")
parser.add_argument("--trap-child")
parser.add_argument("--mcp-no-cancel", action="store_true")
parser.add_argument("--mode-option", action="store_true")
parser.add_argument("--boolean-option", action="store_true")
parser.add_argument("--refuse-settings", action="store_true")
parser.add_argument("--close", action="store_true")  # lists sessionCapabilities.close; session/close answers {}
parser.add_argument("--refuse-close", action="store_true")
parser.add_argument("--delete", action="store_true")  # lists sessionCapabilities.delete; session/delete answers {}
parser.add_argument("--refuse-delete", action="store_true")  # with --delete: session/delete answers an error
parser.add_argument("--logout", action="store_true")  # lists agentCapabilities.auth.logout; logout answers {}
parser.add_argument("--additional-dirs", action="store_true")  # lists sessionCapabilities.additionalDirectories
parser.add_argument("--fork", action="store_true")  # lists sessionCapabilities.fork; session/fork answers a new id
parser.add_argument("--commands", default="")  # NAME,NAME…: its slash commands, said after session/new
parser.add_argument("--sessions")
parser.add_argument("--requests")
parser.add_argument("--resume", action="store_true")
parser.add_argument("--refuse-resume", action="store_true")
parser.add_argument("--load", action="store_true")
parser.add_argument("--resume-replays", action="store_true")
parser.add_argument("--list", action="store_true")
parser.add_argument("--list-pages-forever", action="store_true")
parser.add_argument("--crash-load", action="store_true")
parser.add_argument("--crash-resume", action="store_true")
parser.add_argument("--hang-load", action="store_true")  # lists loadSession; session/load is never answered
args = parser.parse_args()

lock = threading.Lock()
ids = itertools.count()
waiting: dict = {}
cancelled: set = set()
spent: dict = {}  # session id → its cost so far (`spend`)
#: `multi`'s messages: a preamble, a progress note, a conclusion.
MULTI = ["Let me look into it.", "Found the file, reading on.", "The answer is 42."]
mcp_servers: dict = {}  # session id → the mcpServers of its session/new
keep_open: list = []  # --mcp-no-cancel: MCP servers whose cancelled call is left open
authenticated: list = []  # --require-auth: the method ids authenticate accepted
MODES = ["default", "auto-edit", "plan"]
options: dict = {}  # --mode-option: session id → its config options, as they now stand
out = sys.stdout.buffer


def send(msg: dict) -> None:
    data = json.dumps({"jsonrpc": "2.0", **msg}).encode() + b"\n"
    with lock:
        out.write(data)
        out.flush()


def update(sid: str, body: dict) -> None:
    send({"method": "session/update", "params": {"sessionId": sid, "update": body}})


def chunk(sid: str, text: str, kind: str = "agent_message_chunk") -> None:
    update(sid, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})


def ask(method: str, params: dict) -> dict:
    rid = f"req-{next(ids)}" if args.string_ids else next(ids)
    ev = threading.Event()
    box: list = []
    waiting[rid] = (ev, box)
    send({"id": rid, "method": method, "params": params})
    ev.wait()
    return box[0]


def remembered() -> dict:
    """--sessions: session id → its prompts, as every process of this agent kept them."""
    try:
        with open(args.sessions) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def remember(sid: str, text: str) -> list:
    """--sessions: keep `text` as a prompt of `sid`; the prompts before it."""
    with lock:
        sessions = remembered()
        before = sessions.get(sid, [])
        sessions[sid] = [*before, text]
        with open(args.sessions, "w") as f:
            json.dump(sessions, f)
    return before


def turn(rid, sid: str, text: str) -> None:
    cancelled.discard(sid)
    earlier = remember(sid, text) if args.sessions else []
    word, _, rest = text.partition(" ")
    result: dict = {"stopReason": "end_turn"}
    if word == "stream":
        for i in range(int(rest or 10)):
            chunk(sid, f"c{i} ")
    elif word == "perm-withdrawn":  # a permission request, withdrawn with $/cancel_request after REST seconds
        withdrawn = next(ids)
        answered, box = threading.Event(), []
        waiting[withdrawn] = (answered, box)
        send({"id": withdrawn, "method": "session/request_permission", "params": {
            "sessionId": sid, "toolCall": {"toolCallId": "tw", "title": "Withdrawn edit"},
            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}]}})
        time.sleep(float(rest or 0.5))
        send({"method": "$/cancel_request", "params": {"requestId": withdrawn}})
        answered.wait(10)  # deck answers it cancelled
        chunk(sid, "withdrawn: " + json.dumps(box))
    elif word == "burst":  # `burst N`: N chunks written at once, as one write
        lines = [json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"c{i} "}}}}) for i in range(int(rest or 10))]
        with lock:
            out.write(("\n".join(lines) + "\n").encode())
            out.flush()
    elif word == "slow":
        while sid not in cancelled:
            chunk(sid, "tick ")
            time.sleep(0.05)
        result["stopReason"] = "cancelled"
    elif word == "big":
        chunk(sid, "x" * int(rest))
    elif word == "badtext":
        update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": 123}})
        update(sid, {"sessionUpdate": "agent_message_chunk", "content": "not a block"})
        chunk(sid, "ok")
    elif word == "crash":
        chunk(sid, "about to crash")
        if rest:
            print(rest, file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(7)
    elif word == "error":
        send({"id": rid, "error": {"code": -32000, "message": "Authentication required"}})
        return
    elif word == "perm":
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit file", "kind": "edit",
                     "status": "pending", "rawInput": {"path": "/x"},
                     "content": [{"type": "diff", "path": "/x", "oldText": "a", "newText": "b"}]})
        answer = ask("session/request_permission", {
            "sessionId": sid, "toolCall": {"toolCallId": "t1", "title": "Edit file"},
            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "no", "name": "Reject", "kind": "reject_once"}]})
        outcome = answer.get("result", {}).get("outcome", {})
        chosen = outcome.get("optionId") if outcome.get("outcome") == "selected" else "cancelled"
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t1",
                     "status": "completed" if chosen == "yes" else "failed"})
        chunk(sid, f"permission: {chosen}")
        if chosen == "cancelled" or sid in cancelled:
            result["stopReason"] = "cancelled"
    elif word == "perm-after-cancel":
        while sid not in cancelled:
            chunk(sid, "tick ")
            time.sleep(0.05)
        answer = ask("session/request_permission", {
            "sessionId": sid, "toolCall": {"toolCallId": "t2", "title": "Late edit"},
            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}]})
        chunk(sid, "late permission: " + json.dumps(answer.get("result")))
        result["stopReason"] = "cancelled"
    elif word == "perm-and-end":
        forgotten = next(ids)
        waiting[forgotten] = (threading.Event(), [])
        send({"id": forgotten, "method": "session/request_permission", "params": {
            "sessionId": sid, "toolCall": {"toolCallId": "t3", "title": "Forgotten edit"},
            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}]}})
        chunk(sid, "asked, not waiting")
    elif word == "perm-always-first":  # options in the order Claude Code's adapter sends them
        answer = ask("session/request_permission", {
            "sessionId": sid, "toolCall": {"toolCallId": "t1", "title": "Edit greet.py", "kind": "edit"},
            "options": [{"optionId": "allow_always", "name": "Always Allow", "kind": "allow_always"},
                        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]})
        outcome = answer.get("result", {}).get("outcome", {})
        chunk(sid, f"permission: {outcome.get('optionId') if outcome.get('outcome') == 'selected' else 'cancelled'}")
    elif word == "read":
        answer = ask("fs/read_text_file", {"sessionId": sid, "path": rest})
        chunk(sid, json.dumps(answer.get("result") or answer.get("error")))
    elif word == "write":
        path, _, content = rest.partition(" ")
        answer = ask("fs/write_text_file", {"sessionId": sid, "path": path, "content": content})
        chunk(sid, json.dumps({"error": answer["error"]} if "error" in answer else {"ok": True}))
    elif word == "question":
        answer = ask("elicitation/create", {"sessionId": sid, "mode": "form", "message": "Your name?",
                                            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}})
        chunk(sid, json.dumps(answer.get("result")))
    elif word == "getenv":  # `getenv NAME`: the value of NAME in its environment (null when unset)
        chunk(sid, json.dumps(os.environ.get(rest)))
    elif word == "url-question":  # `url-question URL`: a URL-mode elicitation
        answer = ask("elicitation/create", {"sessionId": sid, "mode": "url", "elicitationId": "e1", "url": rest,
                                            "message": "Sign in to go on"})
        chunk(sid, json.dumps(answer.get("result")))
    elif word == "late":
        chunk(sid, "before ")
        send({"id": rid, "result": result})
        time.sleep(0.1)
        chunk(sid, "after")
        return
    elif word == "thought":
        chunk(sid, "thinking", "agent_thought_chunk")
        chunk(sid, "answer")
        chunk(sid, " more thinking", "agent_thought_chunk")
    elif word == "plan":
        update(sid, {"sessionUpdate": "plan", "entries": [{"content": "one", "priority": "high", "status": "pending"}]})
        update(sid, {"sessionUpdate": "plan", "entries": [{"content": "one", "priority": "high", "status": "completed"}]})
    elif word == "usage":
        update(sid, {"sessionUpdate": "usage_update", "used": 1000, "size": 200000})
        result["usage"] = {"totalTokens": 30, "inputTokens": 10, "outputTokens": 20}
    elif word == "cost":  # `cost AMOUNT [CURRENCY]`: the session's cost so far
        amount = float(rest.split()[0]) if rest.split() else 0.5
        currency = rest.split()[1] if len(rest.split()) > 1 else "USD"
        update(sid, {"sessionUpdate": "usage_update", "used": 500, "size": 100000,
                     "cost": {"amount": amount, "currency": currency}})
    elif word in ("spend", "spend-slowly"):  # the session's cost grows by AMOUNT (each 0.1 s until cancelled)
        amount = float(rest.split()[0]) if rest.split() else 1.0
        while True:
            with lock:
                spent[sid] = spent.get(sid, 0.0) + amount
                so_far = spent[sid]
            update(sid, {"sessionUpdate": "usage_update", "used": 100, "size": 1000,
                         "cost": {"amount": round(so_far, 6), "currency": "USD"}})
            chunk(sid, f"spent {so_far:g} ")
            if word == "spend" or sid in cancelled:
                break
            time.sleep(0.1)
        if sid in cancelled:
            result["stopReason"] = "cancelled"
    elif word == "user":
        update(sid, {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "earlier "}})
        update(sid, {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "question"}})
        chunk(sid, "answer")
    elif word == "tools":
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "ta", "title": "Read a.txt", "kind": "read",
                     "status": "pending", "rawInput": {"path": "a.txt"}, "locations": [{"path": "/w/a.txt", "line": 2}]})
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "ta", "status": "in_progress"})
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "ta", "status": "completed",
                     "content": [{"type": "content", "content": {"type": "text", "text": "file text"}},
                                 {"type": "diff", "path": "/w/new.txt", "newText": "new"}]})
        chunk(sid, "done")
    elif word == "session":
        update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": "b"})
        update(sid, {"sessionUpdate": "config_option_update", "configOptions": [
            {"id": "model", "name": "Model", "type": "select", "currentValue": "m2",
             "options": [{"value": "m1", "name": "M1"}, {"value": "m2", "name": "M2"}]}]})
        update(sid, {"sessionUpdate": "session_info_update", "title": "A title"})
        update(sid, {"sessionUpdate": "available_commands_update",
                     "availableCommands": [{"name": "web", "description": "search the web", "input": {"hint": "query"}}]})
        chunk(sid, "ok")
    elif word == "perms":
        count, _, kind = rest.partition(" ")
        for i in range(int(count or 1)):
            tid = f"p{i}"
            update(sid, {"sessionUpdate": "tool_call", "toolCallId": tid, "title": f"Tool {i}", "kind": kind or "edit",
                         "status": "pending"})
            answer = ask("session/request_permission", {
                "sessionId": sid, "toolCall": {"toolCallId": tid},
                "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "always", "name": "Always", "kind": "allow_always"},
                            {"optionId": "no", "name": "Reject", "kind": "reject_once"}]})
            outcome = answer.get("result", {}).get("outcome", {})
            chosen = outcome.get("optionId") if outcome.get("outcome") == "selected" else "cancelled"
            chunk(sid, f"{tid}: {chosen}; ")
    elif word == "readlines":
        path, line, limit = rest.split(" ")
        answer = ask("fs/read_text_file", {"sessionId": sid, "path": path, "line": int(line), "limit": int(limit)})
        chunk(sid, json.dumps(answer.get("result") or answer.get("error")))
    elif word == "stop":
        chunk(sid, f"stopping: {rest}")
        result["stopReason"] = rest
    elif word == "sleep":
        time.sleep(float(rest))
        chunk(sid, "slept")
    elif word == "deaf":
        chunk(sid, "working ")
        if not rest:
            return
        time.sleep(float(rest))
        send({"id": rid, "result": result})
        print("deaf: answered", file=sys.stderr, flush=True)
        return
    elif word == "cancel-late":
        while sid not in cancelled:
            update(sid, {"sessionUpdate": "agent_message_chunk", "messageId": "m-cancelled",
                         "content": {"type": "text", "text": "tick "}})
            time.sleep(0.05)
        send({"id": rid, "result": {"stopReason": "cancelled"}})
        chunk(sid, "late-a ")
        time.sleep(1.0)
        update(sid, {"sessionUpdate": "agent_message_chunk", "messageId": "m-cancelled",
                     "content": {"type": "text", "text": "late-b"}})
        return
    elif word == "mode":
        update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": rest})
    elif word == "mode-option":
        set_option(sid, "mode", rest)
        update(sid, {"sessionUpdate": "config_option_update", "configOptions": options[sid]})
    elif word == "slow-question":
        chunk(sid, "asking ")
        answer = ask("elicitation/create", {"sessionId": sid, "mode": "form", "message": "Go on?",
                                            "requestedSchema": {"type": "object", "properties": {"go": {"type": "boolean"}}}})
        chunk(sid, json.dumps(answer.get("result")))
        if sid in cancelled:
            result["stopReason"] = "cancelled"
    elif word in ("ask", "list-agents", "changed-files"):
        target, _, question = rest.partition(" ")
        tool, arguments = ("ask_agent", {"agent": target, "question": question}) if word == "ask" else (word.replace("-", "_"), {})
        tid = f"mcp-{next(ids)}"
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": tid, "title": f"deck__{tool}", "kind": "other",
                     "status": "in_progress", "rawInput": arguments})
        reply = call_mcp_tool(sid, tool, arguments)
        text = "".join(c.get("text", "") for c in (reply.get("content") or []) if isinstance(c, dict))
        failed = bool(reply.get("isError"))
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": tid, "status": "failed" if failed else "completed",
                     "content": [{"type": "content", "content": {"type": "text", "text": text}}]})
        if reply.get("cancelled"):
            result["stopReason"] = "cancelled"
        else:
            chunk(sid, f"tool error: {text}" if failed else f"answer: {text}")
    elif word == "multi":
        messages = MULTI[-int(rest or len(MULTI)):]
        for i, message in enumerate(messages):
            for piece in message.split(" "):
                chunk(sid, piece + " ")
            if i < len(messages) - 1:
                chunk(sid, f"pondering {i}", "agent_thought_chunk")
                update(sid, {"sessionUpdate": "tool_call", "toolCallId": f"m{i}", "title": f"Step {i}", "kind": "read",
                             "status": "pending"})
                update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": f"m{i}", "status": "completed"})
    elif word == "recall":
        chunk(sid, "I remember: " + " | ".join(earlier))
    elif word == "silent":
        chunk(sid, "only thinking", "agent_thought_chunk")
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "s1", "title": "Look", "kind": "read", "status": "completed"})
    elif word == "rpc":  # `rpc METHOD JSON`: any request to deck, its whole answer as the reply
        method, _, params = rest.partition(" ")
        answer = ask(method, {"sessionId": sid, **json.loads(params or "{}")})
        chunk(sid, json.dumps({k: answer[k] for k in ("result", "error") if k in answer}))
    elif word == "escape":  # `escape`: a descendant in a session of its own, out of the agent's process group
        subprocess.Popen(["sh", "-c", "sleep 301"], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        chunk(sid, "escaped")
    elif word == "unknown-update":
        update(sid, {"sessionUpdate": "future_update", "status": "started"})
        chunk(sid, "still fine")
    elif word == "notice":  # `notice SEVERITY TITLE`: a notice, its description on a line of its own
        severity, _, title = rest.partition(" ")
        update(sid, {"sessionUpdate": "notice", "severity": severity, "title": title, "description": "see the log"})
        chunk(sid, "noted")
    elif word == "named-tool":  # a tool call with its programmatic name, renamed by its update
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "tn", "title": "Read a.txt", "name": "read_file",
                     "kind": "read", "status": "pending"})
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "tn", "status": "completed", "name": "fs.read"})
        chunk(sid, "done")
    elif word == "compact":  # `compact [fail]`: a context compaction, its summary streamed, then completed (or failed)
        update(sid, {"sessionUpdate": "compaction_update", "compactionId": "c1", "status": "in_progress"})
        for piece in ("Kept the plan", " and the file list.\nDropped the rest."):
            update(sid, {"sessionUpdate": "compaction_summary_chunk", "compactionId": "c1",
                         "content": {"type": "text", "text": piece}})
        if rest == "fail":
            update(sid, {"sessionUpdate": "compaction_update", "compactionId": "c1", "status": "failed",
                         "summary": None, "error": "the model refused"})
        else:
            update(sid, {"sessionUpdate": "compaction_update", "compactionId": "c1", "status": "completed"})
        chunk(sid, "compacted")
    elif word == "whoami":  # the session the prompt came in
        chunk(sid, f"session {sid}")
    else:
        chunk(sid, f"You said: {text}")
    send({"id": rid, "result": result})


def call_mcp_tool(sid: str, tool: str, arguments: dict) -> dict:
    """Start the session's `deck` MCP server, call `tool` over stdio JSON-RPC; the tools/call result.

    A `session/cancel` meanwhile sends MCP `notifications/cancelled`; the result is then {"cancelled": True}.
    """
    server = next((s for s in mcp_servers.get(sid, []) if s.get("name") == "deck"), None)
    if server is None:
        return {"isError": True, "content": [{"type": "text", "text": "no deck MCP server in session/new"}]}
    # Like real MCP clients: a small default environment plus the server's own variables.
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env.update({e["name"]: e["value"] for e in server.get("env", [])})
    proc = subprocess.Popen([server["command"], *server.get("args", [])], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env)
    answers: dict = {}
    arrived = threading.Condition()

    def read() -> None:
        for raw in proc.stdout:
            msg = json.loads(raw)
            if "id" in msg and "method" not in msg:
                with arrived:
                    answers[msg["id"]] = msg
                    arrived.notify_all()
        with arrived:
            answers["eof"] = True
            arrived.notify_all()

    def rpc(rid, method: str, params: dict | None = None) -> None:
        message = {"jsonrpc": "2.0", "method": method, **({"id": rid} if rid is not None else {})}
        if params is not None:
            message["params"] = params
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    def wait(rid, until_cancelled: bool = False, timeout: float = 600.0) -> dict:
        deadline = time.monotonic() + timeout
        with arrived:
            while rid not in answers and "eof" not in answers and time.monotonic() < deadline:
                if until_cancelled and sid in cancelled:
                    return {}
                arrived.wait(0.05)
            return answers.get(rid, {})

    threading.Thread(target=read, daemon=True).start()
    try:
        rpc(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "fake-agent", "version": "1"}})
        wait(1)
        rpc(None, "notifications/initialized")
        rpc(2, "tools/call", {"name": tool, "arguments": arguments})
        answer = wait(2, until_cancelled=True)
        if not answer:
            if args.mcp_no_cancel:  # an agent that lets the call hang: the MCP server stays, its call open
                keep_open.append(proc)
                return {"cancelled": True}
            rpc(None, "notifications/cancelled", {"requestId": 2, "reason": "the turn was cancelled"})
            wait(2, timeout=1.0)  # the server may still answer, or not
            return {"cancelled": True}
        if "error" in answer:
            return {"isError": True, "content": [{"type": "text", "text": answer["error"].get("message", "")}]}
        return answer.get("result") or {}
    finally:
        if proc not in keep_open:
            proc.stdin.close()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()


def replay(sid: str) -> None:
    """--load: each prompt of the session and its echo, as updates."""
    for text in remembered().get(sid, []) if args.sessions else []:
        update(sid, {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}})
        chunk(sid, f"You said: {text}")


def session_settings(sid: str) -> dict:
    """--mode-option: the modes and config options of a session as it opens (a new one, or one resumed by
    a new process, which does not remember what was chosen): the defaults."""
    if not args.mode_option:
        return {}
    result: dict = {"modes": {"currentModeId": "default", "availableModes": [{"id": m, "name": m} for m in MODES]}}
    options[sid] = result["configOptions"] = [
        {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "default",
         "options": [{"value": m, "name": m} for m in MODES]},
        {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "m1",
         "options": [{"value": "m1", "name": "M1"}, {"value": "m2", "name": "M2"}]}]
    if args.boolean_option:
        result["configOptions"].append({"id": "fast", "name": "Fast", "type": "boolean", "currentValue": False})
    return result


def set_option(sid: str, config_id: str, value) -> None:
    for option in options.get(sid, []):
        if option["id"] == config_id:
            option["currentValue"] = value


def auth_refusal(method_id) -> dict | None:
    """The JSON-RPC error `authenticate {method_id}` gets under --require-auth, like codex-acp's."""
    found = next((m for m in args.auth_methods if m.get("id") == method_id), None)
    if found is None:
        return {"code": -32602, "message": "Invalid params", "data": "unsupported authentication method"}
    unset = [v["name"] for v in found.get("vars", []) if not os.environ.get(v["name"])]
    if found.get("type") == "env_var" and unset:
        return {"code": -32603, "message": "Internal error", "data": f"{unset[0]} is not set"}
    return None


def handle(msg: dict) -> None:
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if args.requests and method is not None and rid is not None:
        with lock, open(args.requests, "a") as f:
            f.write(json.dumps({"method": method, "params": params}) + "\n")
    if method is None:
        ev, box = waiting.pop(rid, (None, None))
        if ev:
            box.append(msg)
            ev.set()
    elif method == "initialize":
        if args.hang_handshake:
            return
        time.sleep(args.handshake_delay)
        if args.garbage:
            out.write(b"this is not json\n{\"also\": broken\n[1,2,3]\n")
            out.flush()
        caps: dict = {}
        if args.resume or args.refuse_resume or args.resume_replays or args.crash_resume:
            caps["sessionCapabilities"] = {"resume": {}}
        if args.load or args.crash_load or args.hang_load:
            caps["loadSession"] = True
        if args.list or args.list_pages_forever:
            caps.setdefault("sessionCapabilities", {})["list"] = {}
        if args.close:
            caps.setdefault("sessionCapabilities", {})["close"] = {}
        if args.delete:
            caps.setdefault("sessionCapabilities", {})["delete"] = {}
        if args.logout:
            caps["auth"] = {"logout": {}}
        if args.additional_dirs:
            caps.setdefault("sessionCapabilities", {})["additionalDirectories"] = {}
        if args.fork:
            caps.setdefault("sessionCapabilities", {})["fork"] = {}
        answer = {"protocolVersion": args.protocol, "agentCapabilities": caps, "authMethods": args.auth_methods}
        if args.no_protocol:
            del answer["protocolVersion"]
        send({"id": rid, "result": answer})
    elif method == "authenticate":
        if args.require_auth:
            refused = auth_refusal(params.get("methodId"))
            if refused:
                send({"id": rid, "error": refused})
                return
            authenticated.append(params.get("methodId"))
        send({"id": rid, "result": {}})
        print(f"authenticated with {params.get('methodId')}", file=sys.stderr, flush=True)
    elif method == "session/new" and args.require_auth and not authenticated:
        send({"id": rid, "error": {"code": -32000, "message": "Authentication required"}})
    elif method == "session/load" and args.hang_load:
        pass  # never answered
    elif method in ("session/load", "session/resume") and (args.crash_load or args.crash_resume):
        if method == "session/load":
            update(params.get("sessionId"), {"sessionUpdate": "user_message_chunk",
                                             "content": {"type": "text", "text": "a replay cut short"}})
        sys.stdout.flush()
        os._exit(7)
    elif method == "session/resume" and args.resume_replays:
        replay(params.get("sessionId"))
        update(params.get("sessionId"), {"sessionUpdate": "available_commands_update",
                                         "availableCommands": [{"name": "resumed", "description": "after a resume"}]})
        send({"id": rid, "result": {}})
    elif method == "session/resume" and (args.resume or args.refuse_resume):
        if args.refuse_resume or (args.sessions and params.get("sessionId") not in remembered()):
            send({"id": rid, "error": {"code": -32002, "message": "Resource not found", "data": "no such session"}})
        else:
            send({"id": rid, "result": session_settings(params.get("sessionId"))})
    elif method == "session/load" and args.load:
        replay(params.get("sessionId"))
        send({"id": rid, "result": {}})
    elif method == "logout" and args.logout:
        send({"id": rid, "result": {}})
    elif method == "session/close" and args.refuse_close:
        send({"id": rid, "error": {"code": -32603, "message": "cannot close it now"}})
    elif method == "session/close" and args.close:
        send({"id": rid, "result": {}})
    elif method == "session/delete" and args.refuse_delete:
        send({"id": rid, "error": {"code": -32002, "message": "Resource not found", "data": "no such session"}})
    elif method == "session/delete" and args.delete:
        send({"id": rid, "result": {}})
    elif method == "session/list" and (args.list or args.list_pages_forever):
        start = int(params.get("cursor") or 0)
        listed = list(remembered().items()) if args.sessions else []
        page = [{"sessionId": sid, "cwd": params.get("cwd") or os.getcwd(), "title": prompts[0] if prompts else None,
                 "updatedAt": "2026-01-01T00:00:00Z"} for sid, prompts in listed[start:start + 2]]
        more = args.list_pages_forever or start + 2 < len(listed)
        send({"id": rid, "result": {"sessions": page, **({"nextCursor": str(start + 2)} if more else {})}})
    elif method == "session/new":
        sid = f"s{os.getpid()}-{next(ids)}" if args.sessions else f"s{next(ids)}"
        mcp_servers[sid] = params.get("mcpServers") or []
        if args.early_update:
            update(sid, {"sessionUpdate": "available_commands_update",
                         "availableCommands": [{"name": "early", "description": "sent before the reply"}]})
        if args.bad_early_update:
            update(sid, {"sessionUpdate": "usage_update", "used": "n/a", "size": None})
        result: dict = {"sessionId": sid}
        if args.modes:
            result["modes"] = {"currentModeId": "a", "availableModes": [{"id": "a", "name": "A"}, {"id": "b", "name": "B"}]}
            options[sid] = result["configOptions"] = [{"id": "model", "name": "Model", "type": "select", "currentValue": "m1",
                                                      "options": [{"value": "m1", "name": "M1"}, {"value": "m2", "name": "M2"}]}]
            if args.boolean_option:
                result["configOptions"].append({"id": "fast", "name": "Fast", "type": "boolean", "currentValue": False})
        result.update(session_settings(sid))
        send({"id": rid, "result": result})
        if args.commands:
            update(sid, {"sessionUpdate": "available_commands_update", "availableCommands": [
                {"name": n, "description": f"the agent's {n}"} for n in args.commands.split(",")]})
    elif method == "session/fork" and args.fork:
        forked = f"fork{next(ids)}-of-{params.get('sessionId')}"
        mcp_servers[forked] = params.get("mcpServers") or []
        send({"id": rid, "result": {"sessionId": forked}})
    elif method == "session/prompt":
        text = " ".join(b.get("text", "") for b in params.get("prompt", []))
        threading.Thread(target=turn, args=(rid, params.get("sessionId"), text), daemon=True).start()
    elif method == "session/cancel":
        cancelled.add(params.get("sessionId"))
    elif method in ("session/set_mode", "session/set_config_option") and args.refuse_settings:
        send({"id": rid, "error": {"code": -32602, "message": "not now, thank you"}})
    elif method == "session/set_mode":
        set_option(params.get("sessionId"), "mode", params.get("modeId"))  # no update sent: the client knows
        send({"id": rid, "result": {}})
    elif method == "session/set_config_option" and args.mode_option:
        set_option(params.get("sessionId"), params.get("configId"), params.get("value"))
        send({"id": rid, "result": {"configOptions": options.get(params.get("sessionId"), [])}})
    elif method == "session/set_config_option":
        now = options.get(params.get("sessionId"), [])
        for option in now:
            if option["id"] == params.get("configId"):
                option["currentValue"] = params.get("value")
        send({"id": rid, "result": {"configOptions": now}})
    elif rid is not None:
        send({"id": rid, "error": {"code": -32601, "message": "method not found"}})


def main() -> None:
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.trap_child:  # a child in the agent's group that needs a moment to end on SIGTERM
        script = f"trap 'sleep 0.3; echo ended > {args.trap_child}; exit 0' TERM; while :; do sleep 0.05; done"
        subprocess.Popen(["sh", "-c", script])
    if args.grandchild:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        with open(args.grandchild, "w") as f:
            f.write(str(child.pid))
    if args.stderr_mb:
        line = b"e" * 1023 + b"\n"
        for _ in range(args.stderr_mb * 1024):
            sys.stderr.buffer.write(line)
        sys.stderr.flush()
    if args.fail_start:
        print("fatal: missing API key", file=sys.stderr, flush=True)
        print("see the docs", file=sys.stderr, flush=True)
        sys.exit(3)
    for raw in sys.stdin.buffer:
        try:
            handle(json.loads(raw))
        except ValueError:
            print(f"fake agent: bad line {raw[:80]!r}", file=sys.stderr, flush=True)
    if args.ignore_eof:
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
