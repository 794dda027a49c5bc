"""An ACP agent that tries to get out of its sandbox (stdlib only): for the sandbox's tests.

A prompt `probe JSON` tries each escape the JSON names and answers with what each one got, as
JSON: `{"name": "refused: …"}` or `{"name": "GOT: …"}`. The JSON may give `read` (paths to read),
`write` (paths to write), `list` (folders to list), `connect` (Unix sockets), `tcp` ("host:port"),
`signal` (pids, signal 0), `env` (variable names), `terminal` (a shell command run through deck's
terminal/create), `mount` (true: try to remount / writable and to unmount what hides a secret),
`bridge` (true: connect to the asks bridge's socket that session/new named).
Any other prompt is echoed.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys

ids = itertools.count(1000)
#: The environment of the `deck` MCP server each session/new names (the asks bridge's socket in it).
bridge: dict[str, str] = {}


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def ask(method: str, params: dict) -> dict:
    rid = next(ids)
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("id") == rid and "method" not in message:
            return message
    sys.exit(0)


def attempt(action) -> str:
    try:
        return "GOT: " + str(action())[:300]
    except Exception as exc:  # every refusal is an answer
        return f"refused: {type(exc).__name__}: {exc}"[:300]


def read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read(200).decode(errors="replace")


def write(path: str) -> str:
    with open(path, "w") as f:
        f.write("written from the sandbox")
    return "written"


def connect(path: str) -> str:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        return "connected"


def tcp(address: str) -> str:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=3):
        return "connected"


def mount() -> str:
    done = subprocess.run(["mount", "-o", "remount,rw", "/"], capture_output=True, text=True)
    if done.returncode == 0:
        return "remounted / writable"
    raise PermissionError(done.stderr.strip() or f"exit {done.returncode}")


def unmount(path: str) -> str:
    done = subprocess.run(["umount", path], capture_output=True, text=True)
    if done.returncode == 0:
        return f"unmounted {path}"
    raise PermissionError(done.stderr.strip() or f"exit {done.returncode}")


def terminal(sid: str, command: str) -> str:
    created = ask("terminal/create", {"sessionId": sid, "command": "sh", "args": ["-c", command]})
    if "error" in created:
        raise PermissionError(created["error"].get("message"))
    tid = created["result"]["terminalId"]
    ask("terminal/wait_for_exit", {"sessionId": sid, "terminalId": tid})
    output = ask("terminal/output", {"sessionId": sid, "terminalId": tid})
    return output["result"]["output"]


def probe(sid: str, wanted: dict) -> dict:
    found: dict[str, str] = {}
    for path in wanted.get("read", []):
        found[f"read {path}"] = attempt(lambda p=path: read(p))
    for path in wanted.get("write", []):
        found[f"write {path}"] = attempt(lambda p=path: write(p))
    for path in wanted.get("list", []):
        found[f"list {path}"] = attempt(lambda p=path: sorted(os.listdir(p)) or "empty")
    for path in wanted.get("connect", []):
        found[f"connect {path}"] = attempt(lambda p=path: connect(p))
    for address in wanted.get("tcp", []):
        found[f"tcp {address}"] = attempt(lambda a=address: tcp(a))
    for pid in wanted.get("signal", []):
        found[f"signal {pid}"] = attempt(lambda p=pid: os.kill(p, 0) or "signalled")
    for name in wanted.get("env", []):
        found[f"env {name}"] = attempt(lambda n=name: os.environ[n])
    if wanted.get("bridge"):
        found["bridge"] = attempt(lambda: connect(bridge["DECK_ASK_SOCKET"]))
    if wanted.get("terminal"):
        found["terminal"] = attempt(lambda: terminal(sid, wanted["terminal"]))
    if wanted.get("mount"):
        found["mount"] = attempt(mount)
        for path in wanted.get("read", []):
            found[f"unmount {os.path.dirname(path)}"] = attempt(lambda p=path: unmount(os.path.dirname(p)))
    found["pid"] = str(os.getpid())
    found["sid"] = str(os.getsid(0) == os.getpid())
    return found


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
        elif method == "session/new":
            for server in params.get("mcpServers") or []:
                if server.get("name") == "deck":
                    bridge.update({e["name"]: e["value"] for e in server.get("env") or []})
            send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "s1"}})
        elif method == "session/prompt":
            text = " ".join(b.get("text", "") for b in params.get("prompt", []))
            word, _, rest = text.partition(" ")
            reply = json.dumps(probe("s1", json.loads(rest))) if word == "probe" else f"You said: {text}"
            send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": {
                "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": reply}}}})  # fmt: skip
            send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
        elif rid is not None and method is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})


if __name__ == "__main__":
    main()
