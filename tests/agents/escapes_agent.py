"""An ACP agent (stdlib only) that puts terminal control sequences everywhere it can, or sends malformed requests.

Prompt `hostile`: HOSTILE in a stderr line, a thought, a tool call's title, and the answer
(after a **bold** word, then a line with a CR LF ending); `malformed N`: N rounds of requests
whose params deck's handlers cannot take (a session id that is a list, options that are a
number), then "done"; `ask`: a permission request whose options' ids and names carry EVERY, the
turn ending once it is answered; `junk`: a config_option_update of JUNK_OPTIONS. Anything else
is echoed.

Flags: `--stderr` (a stderr line with EVERY as it starts), `--info` (EVERY in its agentInfo),
`--init-error` (initialize answered with an error carrying EVERY), `--logout` (offers ACP logout and
answers it with such an error), `--junk-options` (JUNK_OPTIONS in its session/new answer).
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
#: HOSTILE, and OSC 0, which sets the terminal's title.
EVERY = HOSTILE + " title\x1b]0;owned\x07"
#: EVERY's raw sequences.
EVERY_RAW = (*RAW, "\x1b]0;")

#: Config options as an agent may garble them, around three well-formed ones (`model`, `effort`
#: and `fast`): `options` a number, a string, an object or a list of non-objects, values and
#: current values of the wrong type, groups whose options are no list or are groups again.
JUNK_OPTIONS: list = [
    {"id": "model", "name": "Model", "type": "select", "currentValue": "m1", "category": 7,
     "options": [{"value": "m1", "name": "M1"}, 5, "m9", None, [1], {"value": 3, "name": "three"},
                 {"name": "no value"}, {"value": "m2", "name": ["M2"]}, {"value": "m3", "name": "M3", "description": 4}]},
    {"id": "number", "name": "Number", "type": "select", "currentValue": "a", "options": 5},
    {"id": "text", "name": "Text", "type": "select", "currentValue": "a", "options": "abc"},
    {"id": "object", "name": "Object", "type": "select", "currentValue": "a", "options": {"value": "a"}},
    {"id": "scalars", "name": "Scalars", "type": "select", "currentValue": "a", "options": [1, "a", None, True]},
    {"id": "current", "name": "Current", "type": "select", "currentValue": ["a"], "options": [{"value": "a", "name": "A"}]},
    {"id": "flag", "name": "Flag", "type": "boolean", "currentValue": "yes"},
    {"id": "effort", "name": {"en": "Effort"}, "type": "select", "currentValue": "low", "description": ["x"],
     "options": [{"group": "g1", "name": "Quick", "options": [{"value": "low", "name": "Low"}, 2, {"value": None}]},
                 {"group": "g2", "name": "Broken", "options": 5},
                 {"group": "g3", "name": "Strings", "options": "high"},
                 {"group": "g4", "name": "Nested", "options": [{"group": "g5", "name": "Inner", "options": [{"value": "x", "name": "X"}]}]},
                 {"group": 6, "name": "Bad id", "options": [{"value": "y", "name": "Y"}]},
                 {"group": "g7", "name": "Deep", "options": [{"value": "high", "name": "High"}]}]},
    {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": False},
    17, "option", None,
]
#: What deck keeps of JUNK_OPTIONS: their ids and the values each select offers.
JUNK_KEPT = {"model": ["m1", "m2", "m3"], "effort": ["low", "high"], "fast": []}


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
    elif word == "ask":
        asking[f"ask-{rid}"] = rid  # the turn ends once the request is answered
        send({"id": f"ask-{rid}", "method": "session/request_permission", "params": {
            "sessionId": sid, "toolCall": {"toolCallId": "t-ask", "title": f"ask {EVERY}", "kind": "edit"},
            "options": [{"optionId": f"yes {EVERY}", "name": f"Yes {EVERY}", "kind": "allow_once"},
                        {"optionId": "no", "name": f"No {EVERY}", "kind": "reject_once"}]}})  # fmt: skip
        return
    elif word == "junk":
        update(sid, {"sessionUpdate": "config_option_update", "configOptions": JUNK_OPTIONS})
        chunk(sid, "done")
    else:
        chunk(sid, f"You said: {text}")
    send({"id": rid, "result": {"stopReason": "end_turn"}})


#: The permission requests waiting for an answer, and the prompt each ends.
asking: dict = {}


def main() -> None:
    flags = set(sys.argv[1:])
    if "--stderr" in flags:
        print(f"stderr {EVERY}", file=sys.stderr, flush=True)
    for raw in sys.stdin:
        message = json.loads(raw)
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method is None and rid in asking:
            send({"id": asking.pop(rid), "result": {"stopReason": "end_turn"}})
        elif method == "initialize" and "--init-error" in flags:
            send({"id": rid, "error": {"code": -32603, "message": f"init {EVERY}", "data": {"details": f"details {EVERY}"}}})
        elif method == "initialize":
            result: dict = {"protocolVersion": 1, "agentCapabilities": {"auth": {"logout": {}}} if "--logout" in flags else {}}
            if "--info" in flags:
                result["agentInfo"] = {"name": f"name {EVERY}", "version": f"v{EVERY}"}
            send({"id": rid, "result": result})
        elif method == "logout":
            send({"id": rid, "error": {"code": -32603, "message": f"logout {EVERY}", "data": {"details": f"details {EVERY}"}}})
        elif method == "session/new":
            send({"id": rid, "result": {"sessionId": "s1", **({"configOptions": JUNK_OPTIONS} if "--junk-options" in flags else {})}})
        elif method == "session/prompt":
            turn(rid, params.get("sessionId"), " ".join(b.get("text", "") for b in params.get("prompt", [])))
        elif method is not None and rid is not None:
            send({"id": rid, "error": {"code": -32601, "message": "method not found"}})


if __name__ == "__main__":
    main()
