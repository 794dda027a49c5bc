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
    "listens",
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
    "AgentConfig",
    "Duration",
    "CommandLine",
    "find_config",
    "decode_line",
    "TooDeep",
    "now_iso",
    "state_dir",
    "lock_file",
    "same_file",
    "Command",
    "check_agent",
    "config_agents",
    "server_of",
    "call_server",
    "host_command",
    "call_deck",
    "start_process",
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
    from deck import client, diffs, errors, events, frontend, states, tty
    from deck.acp.connection import TooDeep, decode_line
    from deck.agent.agent import Agent
    from deck.agent.remote import host_command
    from deck.agent.session import CONVERSATION, Session, SessionSink
    from deck.cli.commands import Command
    from deck.cli.common import check_agent, config_agents
    from deck.client import Client
    from deck.config.files import find_config
    from deck.config.models import AgentConfig, CommandLine, Duration
    from deck.errors import AcpError, ConnectionClosed, ServiceError
    from deck.events import now_iso
    from deck.frontend import Frontend
    from deck.hookspecs import hookimpl, listens
    from deck.proc.processes import start_process
    from deck.proc.storage import lock_file, same_file, state_dir
    from deck.remote.socket_client import call_deck, call_server, server_of
    from deck.runtime.deck import Deck
    from deck.runtime.rpc import rpc as rpc_method
    from deck.states import AgentState

_LAZY = {
    "hookimpl": ("hookspecs", "hookimpl"),
    "listens": ("hookspecs", "listens"),
    "rpc_method": ("runtime.rpc", "rpc"),
    "Deck": ("runtime.deck", "Deck"),
    "Agent": ("agent.agent", "Agent"),
    "AgentState": ("states", "AgentState"),
    "Session": ("agent.session", "Session"),
    "SessionSink": ("agent.session", "SessionSink"),
    "CONVERSATION": ("agent.session", "CONVERSATION"),
    "Frontend": ("frontend", "Frontend"),
    "Client": ("client", "Client"),
    "ServiceError": ("errors", "ServiceError"),
    "AcpError": ("errors", "AcpError"),
    "ConnectionClosed": ("errors", "ConnectionClosed"),
    "AgentConfig": ("config.models", "AgentConfig"),
    "Duration": ("config.models", "Duration"),
    "CommandLine": ("config.models", "CommandLine"),
    "find_config": ("config.files", "find_config"),
    "decode_line": ("acp.connection", "decode_line"),
    "TooDeep": ("acp.connection", "TooDeep"),
    "now_iso": ("events", "now_iso"),
    "state_dir": ("proc.storage", "state_dir"),
    "lock_file": ("proc.storage", "lock_file"),
    "same_file": ("proc.storage", "same_file"),
    "Command": ("cli.commands", "Command"),
    "check_agent": ("cli.common", "check_agent"),
    "config_agents": ("cli.common", "config_agents"),
    "server_of": ("remote.socket_client", "server_of"),
    "call_server": ("remote.socket_client", "call_server"),
    "host_command": ("agent.remote", "host_command"),
    "call_deck": ("remote.socket_client", "call_deck"),
    "start_process": ("proc.processes", "start_process"),
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
