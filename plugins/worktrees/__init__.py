"""worktrees: a git worktree per agent, so that agents working on one repository never write over
each other, nor over the main checkout, until their work is merged.

An agent with `worktree = true` runs in a worktree of the repository its cwd is in, on branch
`deck/AGENT` (`tree.py`: where it is, making, diffing, merging and removing it; `git.py`: git
run safely; `running.py`: the lock that keeps a worktree an agent runs in from being removed,
whatever deck runs it; `land.py`: `deck land`, the merge train of many worktrees, and `check.py`
its check in a scratch worktree). `WorktreeService` and the `worktree:changed`, `worktree:overlap`
and `land:progress` events come from `service.py`; `deck worktrees`, `deck diff`, `deck merge`,
`deck land` and `deck worktree remove` (`cli.py`) call that service on a deck of the config in
use that starts no agent.

Work is never deleted silently: an agent removed from the config keeps its worktree, listed and
merged like the others; removing one is refused while it holds work not in its base branch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deck import hookimpl
from deck.events import Event

from .events import EVENTS

if TYPE_CHECKING:
    import typer
    from deck import Deck


@hookimpl
def deck_register_events() -> list[type[Event]]:
    return list(EVENTS)


@hookimpl
def deck_config_sections() -> dict[str, Any]:
    from .config import AgentWorktree
    from .land import LandSettings

    return {"land": LandSettings, "agents": AgentWorktree}


@hookimpl
def deck_register_services(deck: Deck) -> dict[str, object]:
    from .service import Worktrees

    worktrees = Worktrees(deck)
    deck.pm.register(worktrees, name="worktrees.deck")  # its hooks: for this deck only
    return {"WorktreeService": worktrees.service}


#: What the worktrees offer the user to do, in every frontend (`deck_register_actions`).
ACTIONS = [
    {"name": "diff", "help": "its worktree's work as a diff against its base branch (worktree = true)",
     "method": "WorktreeService.Diff", "shows": "diff", "empty": "no change in its worktree",
     "params": [{"name": "agent", "help": "the agent whose worktree it is", "agent": True, "required": True}]},
    {"name": "merge", "help": "merge its worktree's work into its base branch",
     "method": "WorktreeService.Merge", "shows": "text",
     "params": [{"name": "agent", "help": "the agent whose worktree it is", "agent": True, "required": True}]},
    {"name": "land", "help": "land the worktrees' work on their base branches one after another, each checked "
     "([land] check) before its base moves; conflicting or failing ones skipped",
     "method": "WorktreeService.Land", "shows": "table", "empty": "nothing to land: no worktree has work ahead",
     "params": [{"name": "agents", "help": "the agents, in order (else every one with work ahead)", "metavar": "AGENT…",
                 "rest": True}]},
]  # fmt: skip


@hookimpl
def deck_register_actions() -> list[dict[str, Any]]:
    return ACTIONS


@hookimpl
def deck_register_commands(app: typer.Typer) -> None:
    from .cli import register

    register(app)
