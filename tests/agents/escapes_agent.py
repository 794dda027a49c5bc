"""An ACP agent (stdlib only) that puts terminal control sequences everywhere it can, or sends malformed requests.

Prompt `hostile`: HOSTILE in a stderr line, a thought, a tool call's title, and the answer
(after a **bold** word, then a line with a CR LF ending); `malformed N`: N rounds of requests
whose params deck's handlers cannot take (a session id that is a list, options that are a
number), then "done". Anything else is echoed.
"""

from __future__ import annotations

import json
import sys

#: OSC 52 (writes the clipboard), a screen clear, CSI as a C1 control, a carriage return and a
#: backspace that overwrite, a bidi override.
HOSTILE = "osc\x1b]52;c;aGk=\x07 clear\x1b[2J csi\x9b2J cr\rover bs\b bidi\u202eevil\u202c end"
#: HOSTILE as deck shows it.
SHOWN = "osc␛]52;c;aGk=␇ clear␛[2J csi\\x9b2J cr␍over bs␈ bidi\\u202eevil\\u202c end"
#: The raw sequences that must never reach a terminal.
RAW = ("\x1b]52", "\x1b[2J", "\x9b", "\u202e", "cr\rover", "bs\b")


def send(message: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def update(sid: str, body: dict) -> None:
    send({"method": "session/update", "params": {"sessionId": sid, "update": body}})


def chunk(sid: str, text: str, kind: str = "agent_message_chunk") -> None:
    update(sid, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})


def turn(rid: object, sid: str, text: str) -> None:
    word, _, rest = text.partition(" ")
    if word == "hostile":
        print(f"stderr {HOSTILE}", file=sys.stderr, flush=True)
        chunk(sid, f"thought {HOSTILE}", "agent_thought_chunk")
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": f"tool {HOSTILE}", "kind": "read",
                     "status": "completed"})  # fmt: skip
        chunk(sid, f"some **bold** text {HOSTILE}\nwindows line\r\nlast line\n")
    elif word == "malformed":
        for i in range(int(rest or 1)):
            send({"id": f"bad-session-{i}", "method": "session/request_permission",
                  "params": {"sessionId": [sid], "toolCall": {"toolCallId": "x"}, "options": []}})  # fmt: skip
            send({"id": f"bad-options-{i}", "method": "session/request_permission",
                  "params": {"sessionId": sid, "toolCall": {"toolCallId": "x"}, "options": 5}})  # fmt: skip
        chunk(sid, "done")
    else:
        chunk(sid, f"You said: {text}")
    send({"id": rid, "result": {"stopReason": "end_turn"}})


def main() -> None:
    for raw in sys.stdin:
        message = json.loads(raw)
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "initialize":
            send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
        elif method == "session/new":
            send({"id": rid, "result": {"sessionId": "s1"}})
        elif method == "session/prompt":
            turn(rid, params.get("sessionId"), " ".join(b.get("text", "") for b in params.get("prompt", [])))
        elif method is not None and rid is not None:
            send({"id": rid, "error": {"code": -32601, "message": "method not found"}})


if __name__ == "__main__":
    main()
