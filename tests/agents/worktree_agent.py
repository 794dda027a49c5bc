"""An ACP agent for the worktree tests (stdlib only): it edits files of its cwd, two ways.

Prompts: `fswrite NAME TEXT` writes NAME (relative to the session's cwd) through deck's
fs/write_text_file; `write NAME TEXT` writes it itself, directly in its own cwd, as Claude Code
does; `hook` writes executable git hooks into `.githooks/` of its cwd, each of which would create
`HOOK-RAN` beside deck's config (its path is in $HOOK_MARK); `where` answers its cwd; `sleep S`
takes S seconds. Each turn ends with the chunk "done".
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time

out = sys.stdout.buffer
cwd = os.getcwd()
sessions: dict[str, str] = {}
HOOKS = ("pre-commit", "post-commit", "post-checkout", "post-merge", "pre-merge-commit", "reference-transaction")


def send(message: dict) -> None:
    out.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    out.flush()


def chunk(sid: str, text: str) -> None:
    send({"method": "session/update", "params": {"sessionId": sid, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})


def read() -> dict:
    line = sys.stdin.buffer.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def ask(method: str, params: dict) -> dict:
    send({"id": "ask", "method": method, "params": params})
    while True:
        message = read()
        if message.get("id") == "ask" and "method" not in message:
            return message


def turn(sid: str, text: str) -> None:
    word, _, rest = text.partition(" ")
    name, _, content = rest.partition(" ")
    if word == "fswrite":
        answer = ask("fs/write_text_file", {"sessionId": sid, "path": os.path.join(sessions[sid], name), "content": content})
        chunk(sid, json.dumps(answer.get("error") or "ok"))
    elif word == "write":
        os.makedirs(os.path.dirname(os.path.join(cwd, name)) or cwd, exist_ok=True)
        with open(os.path.join(cwd, name), "w") as f:
            f.write(content)
    elif word == "hook":
        os.makedirs(os.path.join(cwd, ".githooks"), exist_ok=True)
        for hook in HOOKS:
            path = os.path.join(cwd, ".githooks", hook)
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\necho {hook} >> '{os.environ['HOOK_MARK']}'\n")
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    elif word == "where":
        chunk(sid, cwd)
    elif word == "sleep":
        time.sleep(float(name))
    chunk(sid, "done")


def main() -> None:
    while True:
        message = read()
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "initialize":
            send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
        elif method == "session/new":
            sid = f"s{len(sessions) + 1}"
            sessions[sid] = params["cwd"]
            send({"id": rid, "result": {"sessionId": sid}})
        elif method == "session/prompt":
            sid = params["sessionId"]
            text = "".join(b.get("text", "") for b in params.get("prompt", []) if isinstance(b, dict))
            turn(sid, text)
            send({"id": rid, "result": {"stopReason": "end_turn"}})
        elif rid is not None:
            send({"id": rid, "error": {"code": -32601, "message": f"unknown method {method}"}})


if __name__ == "__main__":
    main()
