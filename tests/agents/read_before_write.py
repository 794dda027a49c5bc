"""An ACP agent whose write tool reads the file through the client first, as Gemini CLI and Qwen Code do (stdlib only).

--like gemini-cli   Gemini CLI 0.32–0.61 (write_file): the pre-read must succeed. Its ACP SDK rejects
                    with the JSON-RPC error object itself, no `Error`, so no error answer is ever taken
                    for "no file yet" (ENOENT): any error fails the tool, "Error checking existing file: …".
--like qwen-code    Qwen Code 0.24 (write_file through its ACP file service): an error with code -32002
                    becomes ENOENT, "File not found", and the file is new; any other error fails the tool.
--name NAME         the agentInfo.name of the initialize answer (default: the --like value);
--no-agent-info     no agentInfo at all, as Gemini CLI before 0.32.

Prompts: `write_file PATH TEXT` runs the write tool: a tool call, its update (completed or failed,
with the tool's message), then one chunk of JSON {"read": the pre-read's answer, "status", "message"}.
`read PATH` sends one fs/read_text_file and answers its raw answer as JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import threading

parser = argparse.ArgumentParser()
parser.add_argument("--like", choices=["gemini-cli", "qwen-code"], default="gemini-cli")
parser.add_argument("--name")
parser.add_argument("--no-agent-info", action="store_true")
args = parser.parse_args()

RESOURCE_NOT_FOUND = -32002
lock = threading.Lock()
ids = itertools.count(1)
waiting: dict = {}
out = sys.stdout.buffer


def send(msg: dict) -> None:
    data = json.dumps({"jsonrpc": "2.0", **msg}).encode() + b"\n"
    with lock:
        out.write(data)
        out.flush()


def update(sid: str, body: dict) -> None:
    send({"method": "session/update", "params": {"sessionId": sid, "update": body}})


def ask(method: str, params: dict) -> dict:
    """A request to the client; its whole answer, `result` or `error`."""
    rid = next(ids)
    ev, box = threading.Event(), []
    waiting[rid] = (ev, box)
    send({"id": rid, "method": method, "params": params})
    ev.wait()
    return box[0]


class ToolError(Exception):
    """The tool failed: its message is what the model is told."""


def exists(answer: dict) -> bool:
    """What the tool makes of its pre-read's answer: the file exists, is new, or ToolError."""
    if "error" in answer:
        error = answer["error"]
        if args.like == "qwen-code" and error.get("code") == RESOURCE_NOT_FOUND:
            return False  # createEnoentError: "File not found", a new file
        raise ToolError(f"Error checking existing file: {error.get('message')}")
    if not isinstance(answer.get("result", {}).get("content"), str):
        raise ToolError("Error checking existing file: content must be a string")
    return True


def write_file(sid: str, path: str, content: str) -> dict:
    report = {"read": ask("fs/read_text_file", {"sessionId": sid, "path": path})}
    try:
        existed = exists(report["read"])
        os.makedirs(os.path.dirname(path), exist_ok=True)  # both make the folder themselves
        answer = ask("fs/write_text_file", {"sessionId": sid, "path": path, "content": content})
        if "error" in answer:
            raise ToolError(f"Error writing to file: {answer['error'].get('message')}")
    except ToolError as exc:
        return {**report, "status": "failed", "message": str(exc)}
    done = f"Successfully overwrote file: {path}." if existed else f"Successfully created and wrote to new file: {path}."
    return {**report, "status": "completed", "message": done}


def turn(rid, sid: str, text: str) -> None:
    word, _, rest = text.partition(" ")
    if word == "write_file":
        path, _, content = rest.partition(" ")
        call = f"write_file-{rid}"
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": call, "title": f"Writing to {os.path.basename(path)}",
                     "kind": "edit", "status": "in_progress", "locations": [{"path": path}]})  # fmt: skip
        report = write_file(sid, path, content)
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": call, "status": report["status"],
                     "content": [{"type": "content", "content": {"type": "text", "text": report["message"]}}]})  # fmt: skip
        reply = json.dumps(report)
    elif word == "read":
        reply = json.dumps(ask("fs/read_text_file", {"sessionId": sid, "path": rest}))
    else:
        reply = f"unknown prompt: {text}"
    update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": reply}})
    send({"id": rid, "result": {"stopReason": "end_turn"}})


def initialize(params: dict) -> dict:
    result: dict = {"protocolVersion": params.get("protocolVersion", 1), "agentCapabilities": {}, "authMethods": []}
    if not args.no_agent_info:
        result["agentInfo"] = {"name": args.name or args.like, "title": args.like, "version": "0.0.0-test"}
    return result


def main() -> None:
    sessions = itertools.count(1)
    for line in sys.stdin.buffer:
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if method is None:  # an answer to one of our requests
            ev, box = waiting.pop(rid)
            box.append(msg)
            ev.set()
        elif method == "initialize":
            send({"id": rid, "result": initialize(msg["params"])})
        elif method == "session/new":
            send({"id": rid, "result": {"sessionId": f"s{next(sessions)}"}})
        elif method == "session/prompt":
            params = msg["params"]
            text = "".join(b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text")
            threading.Thread(target=turn, args=(rid, params["sessionId"], text), daemon=True).start()
        elif rid is not None:
            send({"id": rid, "error": {"code": -32601, "message": f"method not found: {method}"}})


if __name__ == "__main__":
    main()
