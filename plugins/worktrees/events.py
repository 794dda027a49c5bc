"""The worktrees plugin's events: registered through `deck_register_events`, so that `from_wire`
(a client reading them off the socket or the jsonl bridge) rebuilds them as these classes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from deck.events import Event


@dataclass(frozen=True, slots=True)
class WorktreeChanged(Event):
    """An agent's worktree after one of its turns: the files it changed against its base, the
    commits it is ahead, and whether it holds uncommitted work."""

    name: ClassVar[str] = "worktree:changed"
    agent: str
    changed_files: int
    ahead: int
    dirty: bool


@dataclass(frozen=True, slots=True)
class WorktreeOverlap(Event):
    """The worktrees of the two `agents` change `count` of the same files: `files` the first of them
    by name (50 at most), `file` the first; when they share none any more, the same event with
    `count` 0 (cleared)."""

    name: ClassVar[str] = "worktree:overlap"
    file: str
    agents: list[str]
    files: list[str]
    count: int


@dataclass(frozen=True, slots=True)
class LandProgress(Event):
    """`deck land` as it goes: agent `agent`'s landing at `step` (`merge`, `check`, `done`) with
    `result` (`started`, `merged`, `passed`, `output`, and at `done` the outcome: `landed`,
    `conflict`, `failed`, `nothing`, `busy`, `error`); `text` says it in words, or is the check's
    output as it comes (`output`)."""

    name: ClassVar[str] = "land:progress"
    agent: str
    step: str
    result: str
    text: str = ""


EVENTS = (WorktreeChanged, WorktreeOverlap, LandProgress)
