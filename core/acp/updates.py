"""ACP's session/update payloads read into deck's shapes: a tool call as a part, content blocks
as short text. Whatever an agent sends, these return the right type or a default, never raise."""

from __future__ import annotations

import json
from typing import Any

#: ACP's ToolKind (v1), `switch_mode` included (the agent leaving plan mode asks with it).
TOOL_KINDS = frozenset({"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"})


TOOL_STATUSES = frozenset({"pending", "in_progress", "completed", "failed"})
#: The characters kept of a tool's programmatic name (ToolCall `name`).
TOOL_NAME_MAX = 200


def compact_json(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:  # an agent's value nested about as deep as json could read it
        return "[nested too deep to show]"


def tool_part(call: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    """ACP ToolCall / ToolCallUpdate → deck's tool part; only the fields sent (with the right type) change."""
    part: dict[str, Any] = dict(old) if old else {
        "type": "tool", "id": tool_id(call), "title": "", "kind": "other",
        "status": "pending", "input": "", "output": "", "locations": [], "diffs": [],
    }  # fmt: skip
    if isinstance(call.get("title"), str):
        part["title"] = call["title"]
    if isinstance(call.get("name"), str):  # a string sets it ("" too); null or none: the name it had stays
        part["name"] = call["name"][:TOOL_NAME_MAX]
    if call.get("kind") is not None:
        part["kind"] = choice(call["kind"], TOOL_KINDS, "other")
    part["status"] = choice(call.get("status"), TOOL_STATUSES, part["status"])
    if "rawInput" in call:
        part["input"] = compact_json(call["rawInput"])
    if isinstance(call.get("locations"), list):
        part["locations"] = [location(loc) for loc in dicts(call["locations"])]
    if isinstance(call.get("content"), list):
        texts, diffs, terminals, sessions = [], [], [], []
        for item in dicts(call["content"]):
            if item.get("type") == "diff":
                old_text = item.get("oldText")
                diffs.append(
                    {"path": as_string(item.get("path")), "oldText": as_string(old_text),
                     "newText": as_string(item.get("newText")), "newFile": old_text is None}  # fmt: skip
                )
            elif item.get("type") == "content":
                texts.append(describe_block(item.get("content"), text_too=True))
            elif item.get("type") == "terminal" and as_string(item.get("terminalId")):
                terminals.append(as_string(item.get("terminalId")))
            elif item.get("type") == "session" and as_string(item.get("sessionId")):
                sessions.append(as_string(item.get("sessionId"))[:200])  # the subagent doing the work
        part["output"] = "\n".join(t for t in texts if t)
        part["diffs"] = diffs
        if sessions:
            part["sessions"] = list(dict.fromkeys(sessions))[:16]
        if terminals:  # content without a terminal leaves the output shown so far where it is
            embed_terminals(part, terminals)
    meta = call.get("_meta")
    info = meta.get("terminal_info") if isinstance(meta, dict) else None
    if isinstance(info, dict) and as_string(info.get("terminal_id")):
        embed_terminals(part, [e["terminalId"] for e in part.get("terminals") or []] + [info["terminal_id"]])
    if call.get("rawOutput") is not None and not part["output"]:
        part["output"] = compact_json(call["rawOutput"])
    return part


def embed_terminals(part: dict[str, Any], ids: list[str]) -> None:
    """`part["terminals"]`: one entry per terminal it embeds, `{terminalId, output, exitStatus}`
    (what was known of each is kept)."""
    known = {e["terminalId"]: e for e in part.get("terminals") or []}
    new = {"output": "", "exitStatus": None}
    part["terminals"] = [dict(known.get(i) or {"terminalId": i, **new}) for i in dict.fromkeys(ids)]


def block_text(content: Any) -> str:
    """The text of a chunk's content block; other blocks (and malformed ones) as a short stand-in."""
    if isinstance(content, dict):
        text = content.get("text")
        if isinstance(text, str):
            return text
        return describe_block(content)
    return ""


def describe_block(block: Any, text_too: bool = False) -> str:
    """A non-text content block as a short Markdown stand-in (images, links, resources)."""
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return as_string(block.get("text")) if text_too else ""
    if kind == "resource_link":
        uri = as_string(block.get("uri"))
        return f"[{as_string(block.get('name')) or uri}]({uri})"
    if kind == "resource":
        resource = block.get("resource")
        resource = resource if isinstance(resource, dict) else {}
        return as_string(resource.get("text")) or f"[{as_string(resource.get('uri')) or 'resource'}]"
    if kind in ("image", "audio"):
        return f"[{kind} {as_string(block.get('mimeType'))}]"
    return ""


def as_string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def choice(value: Any, allowed: frozenset[str], default: str) -> str:
    """`value` if it is one of `allowed` (a list or a dict is none of them), else `default`."""
    return value if isinstance(value, str) and value in allowed else default


def dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a list; other items, or a value that is no list, are dropped."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def tool_id(call: dict[str, Any]) -> str:
    """A toolCallId as a string; a number is accepted as its digits, anything else is no id ("")."""
    value = call.get("toolCallId")
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else ""


def location(loc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(loc.get("path"), str):
        out["path"] = loc["path"]
    if isinstance(loc.get("line"), int) and not isinstance(loc.get("line"), bool):
        out["line"] = loc["line"]
    return out
