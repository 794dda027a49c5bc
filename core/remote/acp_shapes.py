"""What `deck acp` says in ACP's terms: deck's parts and messages as `session/update`s, a prompt's
content blocks as the text `ChatService.Send` takes, and deck's conversations as ACP sessions.

Pure functions of the wire's shapes (docs/reference.md), for `deck.remote.acp_proxy`; none raises on
an odd shape of deck's (an older server's, a plugin's part): what it cannot say is left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from deck.acp.connection import decode_line
from deck.errors import INVALID_PARAMS, AcpError

#: The content blocks a prompt may hold (ACP's baseline, and embedded resources as text).
PROMPT_BLOCKS = ("text", "resource_link", "resource")
#: What a tool part's `kind` may be in ACP; anything else is sent as `other`.
TOOL_KINDS = frozenset({"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"})
TOOL_STATUSES = frozenset({"pending", "in_progress", "completed", "failed"})
PRIORITIES = frozenset({"high", "medium", "low"})
PLAN_STATUSES = frozenset({"pending", "in_progress", "completed"})
NOTICE_SEVERITIES = frozenset({"info", "warning", "error"})
COMPACTION_STATUSES = frozenset({"in_progress", "completed", "failed", "cancelled"})
#: What a client was told of a compaction: its status, its summary and its error.
Told = tuple[str, str, str]


def prompt_text(blocks: Any) -> str:
    """The text `ChatService.Send` takes for a `session/prompt`'s `prompt`: its text blocks as they are,
    a resource link as a Markdown link, an embedded text resource as a fenced block naming its URI.
    An image, audio or binary resource is refused (deck passes text to the agent): -32602."""
    if not isinstance(blocks, list) or not blocks:
        raise AcpError(INVALID_PARAMS, "prompt must be a non-empty array of content blocks")
    pieces: list[str] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in PROMPT_BLOCKS:
            raise AcpError(INVALID_PARAMS, f"a prompt block of type {str(kind)[:40]!r} is not served: deck passes text, resource links and text resources")
        assert isinstance(block, dict)
        pieces.append(_block_text(block))
    return "\n\n".join(p for p in pieces if p)


def _block_text(block: dict[str, Any]) -> str:
    kind = block["type"]
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise AcpError(INVALID_PARAMS, "a text block needs a string text")
        return text
    if kind == "resource_link":
        uri, name = block.get("uri"), block.get("name")
        if not isinstance(uri, str):
            raise AcpError(INVALID_PARAMS, "a resource_link block needs a string uri")
        return f"[{name if isinstance(name, str) and name else uri}]({uri})"
    resource = block.get("resource")
    text = resource.get("text") if isinstance(resource, dict) else None
    if not isinstance(text, str):
        raise AcpError(INVALID_PARAMS, "an embedded resource must be text (a blob is not served)")
    uri = resource.get("uri") if isinstance(resource, dict) else None
    return f"```{uri if isinstance(uri, str) else ''}\n{text}\n```"


# -- deck → ACP ------------------------------------------------------------------------------------


def chunk(kind: str, text: str) -> dict[str, Any]:
    """The update of a piece of text: `agent_message_chunk`, `agent_thought_chunk` or `user_message_chunk`."""
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


#: The update each streamed part kind of deck's is, for an agent's message and a user's.
AGENT_CHUNKS = {"text": "agent_message_chunk", "thought": "agent_thought_chunk"}


def tool_call(part: dict[str, Any], first: bool) -> dict[str, Any]:
    """A tool part as ACP's `tool_call` (`first`: the agent announced it now) or `tool_call_update`: every
    field it has, each time (an update replaces what it names)."""
    update: dict[str, Any] = {
        "sessionUpdate": "tool_call" if first else "tool_call_update",
        "toolCallId": str(part.get("id") or ""),
        "title": str(part.get("title") or ""),
        "kind": part.get("kind") if part.get("kind") in TOOL_KINDS else "other",
        "status": part.get("status") if part.get("status") in TOOL_STATUSES else "pending",
        "content": list(_tool_content(part)),
    }
    locations = [
        {"path": loc["path"], **({"line": loc["line"]} if isinstance(loc.get("line"), int) else {})}
        for loc in part.get("locations") or []
        if isinstance(loc, dict) and isinstance(loc.get("path"), str)
    ]
    if locations:
        update["locations"] = locations
    raw = part.get("input")
    if isinstance(raw, str) and raw:
        update["rawInput"] = _json_or_text(raw)
    if isinstance(part.get("name"), str) and part["name"]:
        update["name"] = part["name"]  # the tool's own name, as the agent gave it (unstable)
    return update


def _tool_content(part: dict[str, Any]) -> Iterator[dict[str, Any]]:
    output = part.get("output")
    if isinstance(output, str) and output:
        yield {"type": "content", "content": {"type": "text", "text": output}}
    for diff in part.get("diffs") or []:
        if isinstance(diff, dict) and isinstance(diff.get("path"), str) and isinstance(diff.get("newText"), str):
            old = None if diff.get("newFile") else diff.get("oldText")
            yield {"type": "diff", "path": diff["path"], "oldText": old if isinstance(old, str) else None, "newText": diff["newText"]}


def _json_or_text(raw: str) -> Any:
    try:
        return decode_line(raw)
    except ValueError:
        return raw


def plan(part: dict[str, Any]) -> dict[str, Any]:
    """A plan part as ACP's `plan`: a priority or status ACP does not have reads as medium, pending."""
    entries = [
        {
            "content": str(e.get("content", "")),
            "priority": e.get("priority") if e.get("priority") in PRIORITIES else "medium",
            "status": e.get("status") if e.get("status") in PLAN_STATUSES else "pending",
        }
        for e in part.get("entries") or []
        if isinstance(e, dict)
    ]
    return {"sessionUpdate": "plan", "entries": entries}


def part_update(part: dict[str, Any], role: str, seen_tools: set[str]) -> dict[str, Any] | None:
    """One part of a message as the update that says it whole (a replay, a part replaced); None for a
    part that is no single update (a compaction: `compaction`, which a client takes only when it said
    so) or that ACP does not carry (a plugin's)."""
    kind = part.get("type")
    if kind in ("text", "thought") and isinstance(part.get("text"), str):
        if role == "user":
            return chunk("user_message_chunk", part["text"]) if kind == "text" else None
        return chunk(AGENT_CHUNKS[kind], part["text"])
    if kind == "tool":
        tool_id = str(part.get("id") or "")
        first = tool_id not in seen_tools
        seen_tools.add(tool_id)
        return tool_call(part, first)
    if kind == "plan":
        return plan(part)
    return None


def replay(messages: list[dict[str, Any]], compactions: bool = False) -> Iterator[dict[str, Any]]:
    """A stored conversation as the updates that tell it again (`session/load`): the user's and the
    agent's messages, their thoughts, tool calls and plans, and its compactions where the client takes
    them (they keep their place in the session's timeline); deck's own notes (system messages, the
    agent's notices among them: live events, no history) left out."""
    seen: set[str] = set()
    for message in messages:
        role = message.get("role")
        if role not in ("user", "agent") or message.get("queued"):
            continue
        for part in message.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "compaction":
                yield from compaction(part, None) if compactions else ()
                continue
            update = part_update(part, str(role), seen)
            if update is not None:
                yield update


def notice(message: dict[str, Any]) -> dict[str, Any] | None:
    """An agent's notice (deck's system message of code "notice") as ACP's `notice`: its first line the
    title, the rest the description (deck keeps them as one text, the title first); None without text."""
    text = "".join(p.get("text", "") for p in message.get("parts") or [] if isinstance(p, dict) and p.get("type") == "text")
    title, _, description = text.strip().partition("\n")
    if not title.strip():
        return None
    level = message.get("level")
    update = {"sessionUpdate": "notice", "severity": level if level in NOTICE_SEVERITIES else "info", "title": title.strip()}
    if description.strip():
        update["description"] = description.strip()
    return update


def compaction(part: dict[str, Any], told: Told | None) -> list[dict[str, Any]]:
    """A compaction part as the updates that bring a client from what it was told of it (`told`; None:
    nothing yet) to it: a `compaction_update` when it is new or its status or error changed, its summary
    streamed on as `compaction_summary_chunk`s while it grows, replaced whole otherwise (told anew, a
    replay: whole, so telling it twice changes nothing)."""
    compaction_id = str(part.get("id") or "")
    status = part.get("status") if part.get("status") in COMPACTION_STATUSES else "in_progress"
    summary, error = (v if isinstance(v, str) else "" for v in (part.get("summary"), part.get("error")))
    was_status, was_summary, was_error = told or ("", "", "")
    update: dict[str, Any] = {"sessionUpdate": "compaction_update", "compactionId": compaction_id, "status": status}
    if (told is None and summary) or (told is not None and not summary.startswith(was_summary)):
        update["summary"] = [{"type": "text", "text": summary}] if summary else None
    if error != was_error:
        update["error"] = error or None
    out = [update] if told is None or status != was_status or len(update) > 3 else []
    if "summary" not in update and len(summary) > len(was_summary):
        more = {"type": "text", "text": summary[len(was_summary) :]}
        out.append({"sessionUpdate": "compaction_summary_chunk", "compactionId": compaction_id, "content": more})
    return out


def subagent_update(event: dict[str, Any]) -> dict[str, Any]:
    """`subagent:changed`'s payload as ACP's `subagent_update`: every field deck keeps of the child, as
    the agent sent it (its state's word kept, even one ACP does not list), null where it said none or
    cleared it (a patch: null clears what the client had)."""
    state = event.get("state")
    said: dict[str, Any] | None = None
    if isinstance(state, str):
        said = {"state": state}
        if isinstance(event.get("stopReason"), str):
            said["stopReason"] = event["stopReason"]
    return {
        "sessionUpdate": "subagent_update", "sessionId": event.get("session"), "title": event.get("title"),
        "description": event.get("description"), "state": said,
        "capabilities": {"cancel": {}} if event.get("cancel") else {},
        "cwd": event.get("cwd"), "additionalDirectories": event.get("additionalDirectories"),
    }  # fmt: skip


def usage(value: dict[str, Any]) -> dict[str, Any]:
    """`usage:changed`'s `usage` as ACP's `usage_update`."""
    update: dict[str, Any] = {"sessionUpdate": "usage_update", "used": _count(value.get("used")), "size": _count(value.get("size"))}
    cost = value.get("cost")
    if isinstance(cost, dict) and isinstance(cost.get("amount"), (int, float)) and isinstance(cost.get("currency"), str):
        update["cost"] = {"amount": cost["amount"], "currency": cost["currency"]}
    return update


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def conversation_update(field: str, value: Any) -> dict[str, Any] | None:
    """`conversation:changed` as the update that says the same: commands, config options, the title,
    the mode; None for what ACP does not carry (deck's own `choices`)."""
    if field == "commands" and isinstance(value, list):
        return {"sessionUpdate": "available_commands_update", "availableCommands": value}
    if field == "configOptions" and isinstance(value, list):
        return {"sessionUpdate": "config_option_update", "configOptions": value}
    if field == "title":
        return {"sessionUpdate": "session_info_update", "title": value if isinstance(value, str) else None}
    if field == "modes" and isinstance(value, dict) and isinstance(value.get("currentModeId"), str):
        return {"sessionUpdate": "current_mode_update", "currentModeId": value["currentModeId"]}
    return None


def session_info(row: dict[str, Any], cwd: str) -> dict[str, Any]:
    """A stored conversation (a `ChatService.History` row) as ACP's `SessionInfo`."""
    info: dict[str, Any] = {"sessionId": str(row.get("id")), "cwd": cwd}
    if isinstance(row.get("title"), str):
        info["title"] = row["title"]
    if isinstance(row.get("updatedAt"), str):
        info["updatedAt"] = row["updatedAt"]
    return info


def settings(conversation: dict[str, Any]) -> dict[str, Any]:
    """What a session/new, load or resume answer tells of the conversation's session: its config
    options and modes, where the agent offers them."""
    result: dict[str, Any] = {}
    options = conversation.get("configOptions")
    if isinstance(options, list) and options:
        result["configOptions"] = options
    modes = conversation.get("modes")
    if isinstance(modes, dict) and modes:
        result["modes"] = modes
    return result


def question(params: dict[str, Any], session_id: str) -> dict[str, Any]:
    """`question:requested` as ACP's `elicitation/create`: a form, or a URL to open."""
    url = params.get("url")
    if isinstance(url, str) and url:
        message = str(params.get("message") or "").removesuffix("\n" + url)
        return {"sessionId": session_id, "mode": "url", "url": url, "message": message, "elicitationId": str(params["id"])}
    return {"sessionId": session_id, "mode": "form", "message": str(params.get("message") or ""), "requestedSchema": params.get("schema") or {}}


def tool_of_permission(tool: dict[str, Any]) -> dict[str, Any]:
    """A permission request's tool call (deck's tool part) as ACP's `ToolCallUpdate`."""
    update = tool_call(tool, first=False)
    del update["sessionUpdate"]
    return update
