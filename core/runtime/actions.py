"""Actions: what a plugin offers the user to do, as data on the wire (`deck_register_actions`).

An action names a service method and its parameters in the order a user types them, and how
its result reads, so that every frontend offers it alike with no code of the plugin's: line
mode as `/NAME ARGS`, the console in its menu, the web page in its own. `DeckService.Actions()`
and the snapshot list them; `checked` keeps a plugin's junk out of the wire.
"""

from __future__ import annotations

import re
from typing import Any

#: How an action's result reads: plain text (a string, or an object's `summary`), a unified diff,
#: a table (a list of objects), stored conversations (`ChatService.History`'s rows), stored
#: messages found (`ChatService.Search`'s), or a conversation made current (`{agent, …}`).
SHOWS = ("text", "diff", "table", "conversations", "messages", "conversation")
_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")
_METHOD = re.compile(r"[A-Za-z][A-Za-z0-9]*\.[A-Za-z][A-Za-z0-9]*")
_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def checked(action: Any, source: str) -> dict[str, Any]:
    """`action` as the wire carries it, with its `source` (the plugin); ValueError naming what is wrong."""
    if not isinstance(action, dict):
        raise ValueError(f"an action must be an object, not {type(action).__name__}")
    name, method, shows = action.get("name"), action.get("method"), action.get("shows", "text")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"action name {name!r}: lower-case letters, digits and -, a letter first")
    if not isinstance(method, str) or not _METHOD.fullmatch(method):
        raise ValueError(f"action {name}: method {method!r} is no Service.Method")
    if shows not in SHOWS:
        raise ValueError(f"action {name}: shows {shows!r} is not one of {', '.join(SHOWS)}")
    params = [_param(name, p) for p in action.get("params") or []]
    if any(p.get("rest") for p in params[:-1]):
        raise ValueError(f"action {name}: only its last parameter may take the rest of the line")
    found = {"name": name, "help": str(action.get("help") or ""), "method": method, "params": params,
             "shows": shows, "source": source}  # fmt: skip
    if isinstance(action.get("empty"), str):
        found["empty"] = action["empty"]
    return found


def _param(action: str, param: Any) -> dict[str, Any]:
    if not isinstance(param, dict) or not isinstance(param.get("name"), str) or not _PARAM.fullmatch(param["name"]):
        raise ValueError(f"action {action}: a parameter must be an object with a name")
    found: dict[str, Any] = {"name": param["name"], "help": str(param.get("help") or "")}
    for flag in ("required", "agent", "rest"):
        if param.get(flag):
            found[flag] = True
    if isinstance(param.get("metavar"), str) and param["metavar"]:
        found["metavar"] = param["metavar"]
    return found
