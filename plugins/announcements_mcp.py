"""The `deck` MCP server (stdio) an agent starts from its `session/new`: `ask_agent`, `list_agents` and
`changed_files`.

Run as `python -m deck.plugins.announcements_mcp` with the socket, agent name, token and
origin of the announcements bridge in its environment. It holds no state: each tool call
is one request to the deck over that socket, and a cancelled tool call closes it, which
cancels the ask on the deck's side.

Some agents give their MCP servers about a second to answer `initialize` and then drop
them without a word, so this server must be up in a few tens of milliseconds: it imports
the standard library only, speaks MCP itself (JSON-RPC 2.0, one message per line), and
lives outside the announcements package, whose `__init__` loads the whole plugin. Tool
calls run in threads of their own, so several may be in flight at once.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

from deck import __version__

if TYPE_CHECKING:
    import socket  # imported by the first tool call: it is a tenth of the start-up, and `initialize` needs none

# The bridge's side of these names lives in announcements/bridge.py.
ENV_SOCKET = "DECK_ASK_SOCKET"
ENV_AGENT = "DECK_ASK_AGENT"
ENV_TOKEN = "DECK_ASK_TOKEN"
ENV_ORIGIN = "DECK_ASK_ORIGIN"
#: The longest request line deck takes on its socket (the bridge's MAX_LINE): a longer question is the tool's error.
MAX_LINE = 1024 * 1024
#: The longest line this server reads, from its client or from deck; longer lines are refused.
MAX_MESSAGE = 16 * 1024 * 1024

#: The MCP revisions whose `initialize` handshake this server speaks, newest first.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603

INSTRUCTIONS = (
    "Other coding agents run beside you in deck. list_agents names them; ask_agent puts a question "
    "to one and returns its final answer once it has finished working; changed_files lists the files "
    "the others change in their worktrees, so check it before you edit a file."
)
TOOLS: list[dict[str, Any]] = [
    {
        "name": "ask_agent",
        "title": "Ask another agent",
        "description": (
            "Ask the agent named `agent` a question and wait for its final answer. It works on it in a "
            "session of its own (its other work is untouched) and may take a while; only its last message "
            "comes back. list_agents gives the names."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "agent": {"title": "Agent", "type": "string"}, "question": {"title": "Question", "type": "string"},
            },  # fmt: skip
            "required": ["agent", "question"],
        },
    },
    {
        "name": "list_agents",
        "title": "List the agents",
        "description": "The agents deck runs, as JSON: name, title, description, state; `you` marks yourself.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "changed_files",
        "title": "Files the other agents change",
        "description": (
            "The files the other agents change in their worktrees (worktree = true), as JSON: per agent its "
            "base branch, how many files it changes and the first of them, each with whether the change is "
            "committed and whether it holds uncommitted changes. Check it before you edit a file: one another "
            "agent changes too will conflict when the work is landed."
        ),
        "inputSchema": {"type": "object", "properties": {}},
    },
]


# -- the bridge client ----------------------------------------------------------------------------


class DeckRequest:
    """One request to the deck that started this process, over a connection of its own.

    A JSON line `{"agent", "token", "origin", "method", "params"}` out, a JSON line
    `{"result": …}` or `{"error": "…"}` back. `cancel()`, from any thread, ends the
    connection: the deck then cancels the work (the requester gave up).
    """

    def __init__(self, method: str, params: dict[str, Any], env: Mapping[str, str] = os.environ) -> None:
        self.method, self.params, self.env = method, params, env
        self.cancelled = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def send(self) -> dict[str, Any]:
        """Blocks until the deck answers, or until `cancel()`; `{"result": …}` or `{"error": "…"}`."""
        import socket

        path = self.env.get(ENV_SOCKET)
        if not path:
            return {"error": f"deck's socket is unknown: {ENV_SOCKET} is not set"}
        message = request_line({
            "agent": self.env.get(ENV_AGENT, ""), "token": self.env.get(ENV_TOKEN, ""),
            "origin": self.env.get(ENV_ORIGIN, ""), "method": self.method, "params": self.params,
        })  # fmt: skip
        if len(message) > MAX_LINE + 1:
            return {"error": f"too long: deck takes requests of {MAX_LINE // 1024 // 1024} MiB at most, "
                             f"this one is {len(message)} bytes; ask a shorter question"}  # fmt: skip
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self._lock:
                if self.cancelled:
                    return {"error": "cancelled"}
                self._sock = sock
            sock.connect(path)
            if self.cancelled:  # between the two: `cancel()` could not shut an unconnected socket
                return {"error": "cancelled"}
            sock.sendall(message)
            with sock.makefile("rb") as answers:
                line = answers.readline(MAX_MESSAGE + 1)
        except OSError as exc:
            return {"error": "cancelled" if self.cancelled else f"cannot reach deck: {exc.strerror or exc}"}
        finally:
            with self._lock:  # not while `cancel()` shuts it
                sock.close()
                self._sock = None
        if self.cancelled:
            return {"error": "cancelled"}
        if not line.endswith(b"\n"):
            too_long = len(line) > MAX_MESSAGE
            return {"error": "deck's answer is too long" if too_long else "deck closed the connection without an answer"}
        try:
            answer = json.loads(line)
        except ValueError:
            return {"error": "deck's answer is not JSON"}
        return answer if isinstance(answer, dict) else {"error": "deck's answer is not an object"}

    def cancel(self) -> None:
        """Hang up (wakes a `send()` blocked in another thread); the deck sees the end of the connection."""
        import socket

        with self._lock:
            self.cancelled = True
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # not connected yet, or already closed: `send()` sees `cancelled`


def request_line(message: dict[str, Any]) -> bytes:
    """A request as deck reads it: one JSON line, UTF-8 as it is (escaped only where a string holds a lone
    surrogate, which UTF-8 cannot carry)."""
    try:
        return json.dumps(message, ensure_ascii=False).encode() + b"\n"
    except UnicodeEncodeError:
        return json.dumps(message).encode() + b"\n"


def request(method: str, params: dict[str, Any], env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """One blocking request to the deck that started this process: `{"result": …}` or `{"error": "…"}`."""
    return DeckRequest(method, params, env).send()


# -- the tools --------------------------------------------------------------------------------------


def tool_request(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]] | str:
    """The deck request for a call of tool `name` (a known one), or the reason its arguments are wrong."""
    if name in ("list_agents", "changed_files"):
        return name, {}
    wrong = [
        f"`{key}` is missing" if key not in arguments else f"`{key}` must be a string, not {_json_type(arguments[key])}"
        for key in ("agent", "question")
        if not isinstance(arguments.get(key), str)
    ]
    if wrong:
        return "invalid arguments for ask_agent: " + "; ".join(wrong) + " (it takes agent and question, both strings)"
    return "ask_agent", {"agent": arguments["agent"], "question": arguments["question"]}


def _json_type(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return {int: "a number", float: "a number", list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


def tool_result(method: str, answer: dict[str, Any]) -> dict[str, Any]:
    """deck's answer as the tool's result: the text, or the error's text with isError (no prefix added)."""
    if "error" in answer:
        return text_result(str(answer["error"]), error=True)
    result = answer.get("result", "")
    if method in ("list_agents", "changed_files"):
        return text_result(json.dumps(result, ensure_ascii=False))
    return text_result(str(result))


def text_result(text: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], **({"isError": True} if error else {})}


# -- the MCP server ---------------------------------------------------------------------------------


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


class Server:
    """MCP over stdio: reads JSON-RPC lines, writes one line per answer, runs tool calls in threads.

    Answers go straight to the file descriptor `out`, not through `sys.stdout`: a tool call's
    thread (a daemon) still in a write as the process exits would hold the buffered writer's lock,
    and the interpreter aborts when its final flush cannot take it.
    """

    def __init__(self, out: int, env: Mapping[str, str] = os.environ) -> None:
        self.out, self.env = out, env
        self._write_lock = threading.Lock()
        self._calls: dict[str | int, DeckRequest] = {}
        self._calls_lock = threading.Lock()
        self._methods: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "initialize": self.initialize,
            "ping": lambda params: {},
            "tools/list": lambda params: {"tools": TOOLS},
        }

    def serve(self, stdin: BinaryIO) -> None:
        """Until the end of stdin (the client is gone or shutting down), which cancels the calls in flight."""
        try:
            for line in read_lines(stdin):
                self.handle(line)
        finally:
            with self._calls_lock:
                calls = list(self._calls.values())
            for call in calls:
                call.cancel()

    def handle(self, line: bytes | None) -> None:
        """One line from the client; None is a line over MAX_MESSAGE (already skipped)."""
        if line is None:
            self.send_error(None, INVALID_REQUEST, f"message longer than {MAX_MESSAGE} bytes")
            return
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested too deep for json
            self.send_error(None, PARSE_ERROR, "Parse error: not a JSON message")
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self.send_error(_valid_id(message.get("id")) if isinstance(message, dict) else None, INVALID_REQUEST,
                            "not a JSON-RPC 2.0 message")
            return
        method, rid = message.get("method"), message.get("id")
        if method is None and "id" in message and ("result" in message or "error" in message):
            return  # an answer: this server never asks, so nothing waits for it
        if not isinstance(method, str):
            self.send_error(_valid_id(rid), INVALID_REQUEST, "a request needs a method")
            return
        params = message.get("params", {})
        if "id" not in message:
            self.notification(method, params)
            return
        rid = _valid_id(rid)
        if rid is None:
            self.send_error(None, INVALID_REQUEST, "a request id is a string or an integer")
            return
        try:
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "params must be an object")
            if method == "tools/call":
                self.call_tool(rid, params)
                return
            handler = self._methods.get(method)
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, "Method not found", method)
            self.send({"jsonrpc": "2.0", "id": rid, "result": handler(params)})
        except RpcError as exc:
            self.send_error(rid, exc.code, exc.message, exc.data)
        except Exception as exc:  # a bug here must not end the server for the agent's other calls
            self.send_error(rid, INTERNAL_ERROR, f"deck's MCP server failed: {exc!r}")

    def notification(self, method: str, params: Any) -> None:
        """Never answered; of the client's notifications only a cancel asks for something."""
        if method == "notifications/cancelled" and isinstance(params, dict):
            rid = _valid_id(params.get("requestId"))
            with self._calls_lock:
                call = self._calls.get(rid) if rid is not None else None
            if call is not None:
                call.cancel()

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        """The client's revision when this server speaks it, else this server's newest (the client decides)."""
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "deck", "version": __version__},
            "instructions": INSTRUCTIONS,
        }

    def call_tool(self, rid: str | int, params: dict[str, Any]) -> None:
        """Unknown tools and malformed calls are protocol errors; wrong arguments are the tool's error (the model
        can fix those)."""
        name, arguments = params.get("name"), params.get("arguments")
        if arguments is None:  # optional; some clients send null for a tool without parameters
            arguments = {}
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "tools/call needs the tool's name")
        if name not in {t["name"] for t in TOOLS}:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "the arguments of a tool call must be an object")
        wanted = tool_request(name, arguments)
        if isinstance(wanted, str):
            self.send({"jsonrpc": "2.0", "id": rid, "result": text_result(wanted, error=True)})
            return
        method, deck_params = wanted
        call = DeckRequest(method, deck_params, self.env)
        with self._calls_lock:
            if rid in self._calls:
                raise RpcError(INVALID_REQUEST, f"request id {rid!r} is already in use")
            self._calls[rid] = call
        try:
            threading.Thread(target=self._run_call, args=(rid, call), name=f"tools/call {rid}", daemon=True).start()
        except RuntimeError:
            with self._calls_lock:
                del self._calls[rid]
            raise

    def _run_call(self, rid: str | int, call: DeckRequest) -> None:
        try:
            result = tool_result(call.method, call.send())
        except Exception as exc:
            result = text_result(f"deck's MCP server failed: {exc!r}", error=True)
        finally:
            with self._calls_lock:
                self._calls.pop(rid, None)
        if not call.cancelled:  # a cancelled request gets no answer
            self.send({"jsonrpc": "2.0", "id": rid, "result": result})

    def send_error(self, rid: str | int | None, code: int, message: str, data: Any = None) -> None:
        error = {"code": code, "message": message, **({"data": data} if data is not None else {})}
        self.send({"jsonrpc": "2.0", "id": rid, "error": error})

    def send(self, message: dict[str, Any]) -> None:
        line = memoryview(json.dumps(message).encode() + b"\n")
        with self._write_lock:
            try:
                while line:
                    line = line[os.write(self.out, line) :]
            except OSError:
                pass  # the client closed its end: the end of stdin follows


def read_lines(stdin: BinaryIO) -> Iterator[bytes | None]:
    """stdin's lines; None for a line over MAX_MESSAGE, whose rest is skipped (memory stays bounded)."""
    while line := stdin.readline(MAX_MESSAGE + 1):
        if len(line) <= MAX_MESSAGE or line.endswith(b"\n"):
            yield line
            continue
        while (rest := stdin.readline(MAX_MESSAGE)) and not rest.endswith(b"\n"):
            pass
        yield None


def _valid_id(rid: Any) -> str | int | None:
    """MCP request ids are strings or integers, never null (nor booleans, which JSON keeps apart)."""
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def main() -> None:
    try:
        Server(sys.stdout.fileno()).serve(sys.stdin.buffer)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
