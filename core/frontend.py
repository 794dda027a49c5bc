"""The base every frontend derives from (it gets a client of the deck, runs until done, returns an exit code),
and what frontends reading lines use: the stdin reader, the strict JSON line decoder, the jsonl wire's
encoder and request reader (`deck.wire`)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from deck.acp.connection import LineFramer, TooDeep, decode_line
from deck.client import Client
from deck.events import Handlers
from deck.wire import RequestReader, encode, encode_event, error_line, to_bytes

__all__ = [
    "Frontend", "RequestReader", "TooDeep", "decode_line", "encode", "encode_event", "error_line", "read_lines",
    "stdout_failed", "to_bytes",
]


class Frontend(Handlers):
    """A way to show deck and drive it. Registered through `deck_register_frontends`.

    It talks to deck through `self.client` only (`deck.client`), and handles events by their
    class (`@handles`, `self.dispatch`), as a frontend attached to a deck in another process must.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: Whether the deck this frontend runs follows its config file's changes (`deck send`, one
    #: prompt, does not: the file is read once, and nothing watches it).
    follows_config: ClassVar[bool] = True

    def __init__(self, client: Client, **options: Any) -> None:
        """`client` is how the frontend reaches deck: `deck.runtime.local.LocalClient` when it owns a
        deck in this process (`deck run`), a socket's client when it is attached to a server."""
        self.client = client
        self.options = options

    async def run(self) -> int:
        """Show deck until the user is done; return the exit code."""
        raise NotImplementedError

    def choose_file(self) -> Any:
        """Let the user pick a config file (an awaitable of a path, "" if cancelled); None: no picker."""
        return None


def read_lines(fd: int, on_overflow: Callable[[int], None] | None = None) -> asyncio.Queue[bytes | None]:
    """Lines read from file descriptor `fd` by a daemon thread, delivered on the running loop; None at the end.

    The thread uses `os.read`, not `sys.stdin`: a thread blocked inside a buffered
    file's read holds its lock, and the interpreter aborts at exit when deck ends
    while stdin is still open (a signal, a closed stdout, /quit).
    """
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[bytes | None] = asyncio.Queue()

    def overflow(size: int) -> None:
        if on_overflow is not None:
            loop.call_soon_threadsafe(on_overflow, size)

    def put(line: bytes) -> None:
        loop.call_soon_threadsafe(lines.put_nowait, line)

    def read() -> None:
        framer = LineFramer(put, overflow)
        try:
            while data := os.read(fd, 1 << 16):
                framer.feed(data)
            framer.close()
        except (OSError, RuntimeError):  # RuntimeError: the loop is closed, deck is gone
            pass
        finally:
            try:
                loop.call_soon_threadsafe(lines.put_nowait, None)
            except RuntimeError:
                pass

    threading.Thread(target=read, name=f"read-fd-{fd}", daemon=True).start()
    return lines


def stdout_failed(exc: OSError) -> int:
    """The exit code after a failed write to stdout: 0 when the reader went away, else 1 with a note."""
    if isinstance(exc, (BrokenPipeError, ConnectionResetError)):
        return 0  # `deck run … | head -1`: end quietly
    try:
        os.write(2, f"deck: cannot write to stdout: {exc.strerror or exc}\n".encode())
    except OSError:
        pass
    return 1


def action_usage(action: dict[str, Any]) -> str:
    """How a plugin's action (`DeckService.Actions()`) is typed: `/history [AGENT]`, `/search WORDS`."""
    words = [f"/{action['name']}"]
    for param in action.get("params") or []:
        shown = param.get("metavar") or str(param["name"]).upper()
        words.append(shown if param.get("required") else f"[{shown}]")
    return " ".join(words)


#: What a user may ask of a permission request, besides an option's number or id (`choose_option`).
ONCE, ALWAYS, REJECT = "once", "always", "reject"


def choose_option(options: list[dict[str, Any]], choice: str | int = ONCE) -> dict[str, Any]:
    """The option of a permission request's `options` that the user's `choice` names, the one way
    every frontend and `deck answer` read it: `once` (the default) the option that allows once — never
    one that allows always, which is given only when asked for —, `always` the one that allows always,
    `reject` the first that rejects (once before always), a number its option (from 1), anything else
    an option's id. ValueError, saying what the request offers instead, when it has none such."""
    kinds = [str(option.get("kind", "")) for option in options]
    if isinstance(choice, int):
        if not isinstance(choice, bool) and 1 <= choice <= len(options):
            return options[choice - 1]
        raise ValueError(f"N is an option number, 1 to {len(options)}")
    wanted = {ONCE: ("allow_once",), ALWAYS: ("allow_always",), REJECT: ("reject_once", "reject_always")}.get(choice)
    if wanted is None:
        found = next((o for o in options if o.get("optionId") == choice), None)
        if found is None:
            raise ValueError(f"unknown option {choice!r}: " + ", ".join(str(o.get("optionId")) for o in options))
        return found
    for kind in wanted:
        if kind in kinds:
            return options[kinds.index(kind)]
    what = {ONCE: "allow-once", ALWAYS: "allow-always", REJECT: "reject"}[choice]
    raise ValueError(f"no {what} option")


def default_option(options: list[dict[str, Any]]) -> int:
    """The index of the option a frontend offers first (Enter takes it): the one that allows once,
    else the first that is not an "always" (a standing permission is given only when picked)."""
    kinds = [str(option.get("kind", "")) for option in options]
    for wanted in (lambda kind: kind == "allow_once", lambda kind: not kind.endswith("_always")):
        found = next((i for i, kind in enumerate(kinds) if wanted(kind)), None)
        if found is not None:
            return found
    return 0
