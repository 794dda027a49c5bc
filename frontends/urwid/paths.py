"""Paths as the console shows them: beneath an agent's folder (its cwd), relative to it.

The folder of each agent is read from what the deck tells any client: its config file's text
(`ConfigService.Content`: an agent's `cwd`, `host` and `worktree`) and its worktrees
(`WorktreeService.List`). An agent with a worktree works in it, in the folder its cwd is in its
repository; one without, in its cwd, which the deck resolves against its own folder: a console
attached to a server knows that folder only when the cwd is absolute.
"""

from __future__ import annotations

import os
import re
import tomllib
from typing import Any


def configured_agents(config_text: str) -> dict[str, dict[str, Any]]:
    """The `[agents.NAME]` tables of a config file's text; none when it is no valid TOML."""
    try:
        agents = tomllib.loads(config_text).get("agents")
    except (tomllib.TOMLDecodeError, ValueError):
        return {}
    if not isinstance(agents, dict):
        return {}
    return {str(name): table for name, table in agents.items() if isinstance(table, dict)}


def _repository_top(folder: str) -> str | None:
    """The folder holding the `.git` of the repository `folder` is in, None when it is in none."""
    path = folder
    while True:
        if os.path.exists(os.path.join(path, ".git")):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def agent_folders(config_text: str, worktrees: list[dict[str, Any]], here: str | None) -> dict[str, str]:
    """Each agent's folder, where it can be told: `here` is the folder the deck runs in (None when
    it is not known: a server's), `worktrees` the rows of `WorktreeService.List`."""
    folders: dict[str, str] = {}
    for name, table in configured_agents(config_text).items():
        given = table.get("cwd")
        cwd = given if isinstance(given, str) else ""
        if table.get("host"):  # a path on the agent's host, as written
            if cwd.startswith("/"):
                folders[name] = cwd.rstrip("/") or "/"
            continue
        cwd = os.path.expanduser(cwd or ".")
        if not os.path.isabs(cwd):
            if here is None:
                continue
            cwd = os.path.join(here, cwd)
        folders[name] = os.path.realpath(cwd)
    for row in worktrees:
        agent, path = row.get("agent"), row.get("path")
        if not isinstance(agent, str) or not isinstance(path, str) or not path.startswith("/") or row.get("host"):
            continue
        name = agent
        inside = ""  # the agent's cwd within its repository is the same folder within its worktree
        top = _repository_top(folders[name]) if name in folders else None
        if top is not None:
            inside = os.path.relpath(folders[name], top)
        folders[name] = os.path.normpath(os.path.join(path, inside)) if inside and inside != "." else path.rstrip("/")
    return folders


_PATH_CHARS = r"\w.~\-"


def relative(text: str, folder: str) -> str:
    """`text` with each path beneath `folder` written relative to it (`folder` itself as `.`)."""
    if not folder or folder == "/" or folder not in text:
        return text
    pattern = re.compile(rf"(?<![{_PATH_CHARS}/]){re.escape(folder)}(/+|(?![{_PATH_CHARS}]))")
    return pattern.sub(lambda match: "" if match.group(1) else ".", text)


def relative_tool(part: dict[str, Any], folder: str) -> dict[str, Any]:
    """A tool call (deck's shape) with the paths beneath `folder` relative to it: in its title, its
    input, its locations and its diffs."""
    if not folder:
        return part
    out = dict(part)
    for key in ("title", "input"):
        if isinstance(out.get(key), str):
            out[key] = relative(out[key], folder)
    if isinstance(out.get("locations"), list):
        out["locations"] = [_relative_path(location, folder) for location in out["locations"]]
    if isinstance(out.get("diffs"), list):
        out["diffs"] = [_relative_path(diff, folder) for diff in out["diffs"]]
    return out


def _relative_path(item: Any, folder: str) -> Any:
    if isinstance(item, dict) and isinstance(item.get("path"), str):
        return {**item, "path": relative(item["path"], folder)}
    return item
