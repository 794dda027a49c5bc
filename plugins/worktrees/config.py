"""The key the worktrees add to every agent's table (`worktree = true`) and the rule for the names
of the agents that have one: their branch (`deck/NAME`) and their folder are named as they are."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from deck import AgentConfig, Deck

#: Agent names a worktree can have.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class AgentWorktree(BaseModel):
    """`worktree`, in each `[agents.NAME]` table."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    worktree: bool = Field(
        False, description="Run in a git worktree of its own (branch deck/NAME) of the repository its cwd is in."
    )

    def config_warnings(self, agent: str, config: AgentConfig) -> list[tuple[str, str]]:
        """Why a `worktree = true` agent cannot start, as `deck config validate` warns of it: its name,
        or its cwd (on this machine; a host's is looked at as it starts) in no git repository."""
        if not self.worktree:
            return []
        found = []
        if (why := worktree_name_problem(agent)) is not None:
            found.append(("worktree", f"{why}, so the agent cannot start"))
        if not config.host and not in_git_repository(config.resolved_cwd()):
            found.append(("worktree", f"{config.resolved_cwd()} is in no git repository, so the agent cannot start"))
        return found


def wants_worktree(deck: Deck, agent: str) -> bool:
    """Whether agent `agent` of the config in force has `worktree = true`."""
    keys = (deck.config_service.section("agents") or {}).get(agent)
    return isinstance(keys, AgentWorktree) and keys.worktree


def worktree_name_problem(name: str) -> str | None:
    """Why a `worktree = true` agent cannot be named `name` (None when it can): git refuses it in a
    branch, or its folder would be another agent's `NAME.json` record beside the worktrees."""
    if _NAME.fullmatch(name) and not name.endswith((".", ".lock", ".json")) and ".." not in name:
        return None
    return (f"agent name {name!r} cannot name a branch and a folder: use letters, digits, '-', '_', '.', "
            "starting with a letter, a digit or '_', not ending in '.', '.lock' or '.json'")  # fmt: skip


def in_git_repository(folder: str) -> bool:
    """Whether `folder` or a folder above it holds a `.git` (a repository, or a worktree's link file)."""
    path = Path(os.path.expanduser(folder))
    return any((p / ".git").exists() for p in (path, *path.parents))
