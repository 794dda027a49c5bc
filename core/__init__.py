"""deck: one terminal, many coding agents. The public API for plugins and frontends.

`__all__` is that API, exactly: plugins and frontends import these names (`from deck import
Agent`) and these modules (`from deck.events import TurnChanged`), nothing else of deck's.
What they hold is documented in docs/plugins.md; the rest of the package may change at any time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

__all__ = [
    "__version__",
    "hookimpl",
    "rpc_method",
    # the deck, its agents and their sessions
    "Deck",
    "Agent",
    "AgentState",
    "Session",
    "SessionSink",
    "CONVERSATION",
    # what frontends derive from and talk through
    "Frontend",
    "Client",
    # errors
    "ServiceError",
    "AcpError",
    "ConnectionClosed",
    # helpers shared with the core
    "Duration",
    "find_config",
    "worktree_name_problem",
    "decode_line",
    "TooDeep",
    "now_iso",
    "state_dir",
    "Command",
    # public modules
    "client",
    "diffs",
    "errors",
    "events",
    "frontend",
    "states",
    "tty",
]

if TYPE_CHECKING:
    from . import client, diffs, errors, events, frontend, states, tty
    from .acp import TooDeep, decode_line
    from .agent import Agent
    from .app import Deck
    from .client import Client
    from .config import Duration, find_config, worktree_name_problem
    from .conversation import now_iso
    from .errors import AcpError, ConnectionClosed, ServiceError
    from .files import state_dir
    from .cli import Command
    from .frontend import Frontend
    from .hookspecs import hookimpl
    from .rpc import rpc as rpc_method
    from .session import CONVERSATION, Session, SessionSink
    from .states import AgentState

_LAZY = {
    "hookimpl": ("hookspecs", "hookimpl"),
    "rpc_method": ("rpc", "rpc"),
    "Deck": ("app", "Deck"),
    "Agent": ("agent", "Agent"),
    "AgentState": ("states", "AgentState"),
    "Session": ("session", "Session"),
    "SessionSink": ("session", "SessionSink"),
    "CONVERSATION": ("session", "CONVERSATION"),
    "Frontend": ("frontend", "Frontend"),
    "Client": ("client", "Client"),
    "ServiceError": ("errors", "ServiceError"),
    "AcpError": ("errors", "AcpError"),
    "ConnectionClosed": ("errors", "ConnectionClosed"),
    "Duration": ("config", "Duration"),
    "find_config": ("config", "find_config"),
    "worktree_name_problem": ("config", "worktree_name_problem"),
    "decode_line": ("acp", "decode_line"),
    "TooDeep": ("acp", "TooDeep"),
    "now_iso": ("conversation", "now_iso"),
    "state_dir": ("files", "state_dir"),
    "Command": ("cli", "Command"),
}
_MODULES = frozenset({"client", "diffs", "errors", "events", "frontend", "states", "tty"})


def __getattr__(name: str) -> Any:
    # Lazy, so that `deck --version` and `python -m deck.demo` import nothing heavy.
    import importlib

    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
