"""deck: one terminal, many coding agents. The public API for plugins and frontends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

__all__ = [
    "__version__",
    "hookimpl",
    "Deck",
    "Frontend",
    "Agent",
    "AgentState",
    "ServiceError",
    "events",
]

if TYPE_CHECKING:
    from . import events
    from .agent import Agent
    from .app import Deck
    from .errors import ServiceError
    from .frontend import Frontend
    from .hookspecs import hookimpl
    from .states import AgentState

_LAZY = {
    "hookimpl": ("hookspecs", "hookimpl"),
    "Deck": ("app", "Deck"),
    "Frontend": ("frontend", "Frontend"),
    "Agent": ("agent", "Agent"),
    "AgentState": ("states", "AgentState"),
    "ServiceError": ("errors", "ServiceError"),
}


def __getattr__(name: str) -> Any:
    # Lazy, so that `deck --version` and `python -m deck.demo` import nothing heavy.
    if name == "events":
        from . import events

        return events
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
