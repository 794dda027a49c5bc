"""The base every frontend derives from: it gets the deck, runs until done, returns an exit code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .app import Deck


class Frontend:
    """A way to show deck and drive it. Registered through `deck_register_frontends`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def __init__(self, deck: Deck, **options: Any) -> None:
        self.deck = deck
        self.options = options

    async def run(self) -> int:
        """Show deck until the user is done; return the exit code."""
        raise NotImplementedError

    def choose_file(self) -> Any:
        """Let the user pick a config file (an awaitable of a path, "" if cancelled); None: no picker."""
        return None
