"""A scripted ACP v1 agent that shows every kind of part deck can display.

Each prompt gets a thought, a plan, a Markdown answer, a tool call with a diff
that asks for permission, and a closing line. Prompts starting with `echo `
are answered with the rest of the text at once. Stdlib only.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time

DELAY = 0.02  # between streamed chunks: fast, but visibly streaming

_write_lock = threading.Lock()
_ids = itertools.count()
_waiting: dict[int, tuple[threading.Event, list]] = {}
_cancelled: set[str] = set()


def send(message: dict) -> None:
    line = json.dumps({"jsonrpc": "2.0", **message}) + "\n"
    with _write_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def update(session: str, body: dict) -> None:
    send({"method": "session/update", "params": {"sessionId": session, "update": body}})


def ask(method: str, params: dict) -> dict:
    """A request to the client, answered on the reader thread."""
    request_id = next(_ids)
    done = threading.Event()
    box: list = []
    _waiting[request_id] = (done, box)
    send({"id": request_id, "method": method, "params": params})
    done.wait()
    return box[0]


def stream(session: str, kind: str, text: str) -> bool:
    for word in text.split(" "):
        if session in _cancelled:
            return False
        update(session, {"sessionUpdate": kind, "content": {"type": "text", "text": word + " "}})
        time.sleep(DELAY)
    return session not in _cancelled


ANSWER = (
    "Here is what deck can show. **Markdown** text streams in as it is written, "
    "with `inline code` and lists:\n\n- a thought, shown dimmed\n- a plan, as a checklist\n"
    "- a tool call with a diff, which asks for your permission\n\n"
)
OLD = "def greet(name):\n    print('hello ' + name)\n"
NEW = "def greet(name: str) -> None:\n    print(f'hello {name}')\n"


def prompt(request_id: int, session: str, text: str) -> None:
    _cancelled.discard(session)
    if text.startswith("echo "):
        update(session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text[5:]}})
        send({"id": request_id, "result": {"stopReason": "end_turn"}})
        return
    steps = [
        {"content": "Read the request", "priority": "high", "status": "completed"},
        {"content": "Propose an edit", "priority": "medium", "status": "in_progress"},
        {"content": "Summarise", "priority": "low", "status": "pending"},
    ]
    ok = stream(session, "agent_thought_chunk", f"The user said {text[:60]!r}; let me show them around.")
    if ok:
        update(session, {"sessionUpdate": "plan", "entries": steps})
        ok = stream(session, "agent_message_chunk", ANSWER)
    if ok:
        tool = {
            "toolCallId": "edit-1", "title": "Add type hints to greet.py", "kind": "edit", "status": "pending",
            "locations": [{"path": "/demo/greet.py", "line": 1}],
            "rawInput": {"path": "/demo/greet.py"},
            "content": [{"type": "diff", "path": "/demo/greet.py", "oldText": OLD, "newText": NEW}],
        }  # fmt: skip
        update(session, {"sessionUpdate": "tool_call", **tool})
        answer = ask("session/request_permission", {
            "sessionId": session,
            "toolCall": {"toolCallId": "edit-1"},
            "options": [
                {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
            ],
        })  # fmt: skip
        outcome = (answer.get("result") or {}).get("outcome") or {}
        allowed = outcome.get("outcome") == "selected" and outcome.get("optionId") == "allow"
        status = "completed" if allowed else "failed"
        update(session, {"sessionUpdate": "tool_call_update", "toolCallId": "edit-1", "status": status})
        steps[1]["status"] = "completed"
        steps[2]["status"] = "in_progress"
        update(session, {"sessionUpdate": "plan", "entries": steps})
        ok = stream(session, "agent_message_chunk", "The edit was applied (in pretend)." if allowed else "Fine, I left the file alone.")
        steps[2]["status"] = "completed"
        update(session, {"sessionUpdate": "plan", "entries": steps})
    update(session, {"sessionUpdate": "usage_update", "used": 1200 + len(text), "size": 200000})
    send({"id": request_id, "result": {"stopReason": "end_turn" if ok else "cancelled"}})


def handle(message: dict) -> None:
    method = message.get("method")
    request_id = message.get("id")
    params = message.get("params") or {}
    if method is None:
        waiting = _waiting.pop(request_id, None) if isinstance(request_id, int) else None
        if waiting:
            waiting[1].append(message)
            waiting[0].set()
    elif method == "initialize":
        send({"id": request_id, "result": {
            "protocolVersion": 1, "agentCapabilities": {"loadSession": False}, "authMethods": [],
            "agentInfo": {"name": "deck-demo", "title": "deck demo agent", "version": "1.0"},
        }})  # fmt: skip
    elif method == "session/new":
        session = f"demo-{next(_ids)}"
        send({"id": request_id, "result": {"sessionId": session, "modes": {
            "currentModeId": "default",
            "availableModes": [{"id": "default", "name": "Default"}, {"id": "plan", "name": "Plan only"}],
        }}})  # fmt: skip
        update(session, {"sessionUpdate": "available_commands_update", "availableCommands": [
            {"name": "tour", "description": "Show everything deck can display"}]})  # fmt: skip
    elif method == "session/set_mode":
        send({"id": request_id, "result": {}})
    elif method == "session/prompt":
        text = " ".join(b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text")
        threading.Thread(target=prompt, args=(request_id, params.get("sessionId", ""), text), daemon=True).start()
    elif method == "session/cancel":
        _cancelled.add(params.get("sessionId", ""))
    elif request_id is not None:
        send({"id": request_id, "error": {"code": -32601, "message": f"method not found: {method}"}})


def main() -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
        except ValueError:
            print(f"demo: not JSON: {line[:80]}", file=sys.stderr)
            continue
        handle(message)


if __name__ == "__main__":
    main()
