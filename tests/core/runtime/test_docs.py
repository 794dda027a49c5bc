"""The reference in docs/ is complete: every event deck and its built-in plugins emit, and every
service method on the wire, is documented in docs/reference.md (the site is built with
`mkdocs build --strict` in CI, so a broken link fails there)."""

from __future__ import annotations

import re

import pytest
from deck.events import ALL_EVENTS
from deck.plugins.announcements.events import EVENTS as ANNOUNCEMENT_EVENTS
from deck.plugins.budget.events import EVENTS as BUDGET_EVENTS
from deck.plugins.notify.events import EVENTS as NOTIFY_EVENTS
from deck.plugins.worktrees.events import EVENTS as WORKTREE_EVENTS
from deck.runtime.rpc import methods

from tests.conftest import ROOT, agent_block

pytestmark = pytest.mark.anyio
REFERENCE = ROOT / "docs" / "reference.md"


def documented() -> set[str]:
    """The names in the first column of the reference's tables."""
    return set(re.findall(r"(?m)^\| `([^`]+)` \|", REFERENCE.read_text()))


def test_every_event_is_in_the_reference() -> None:
    events = {cls.name for cls in (*ALL_EVENTS, *ANNOUNCEMENT_EVENTS, *WORKTREE_EVENTS, *NOTIFY_EVENTS, *BUDGET_EVENTS)}
    missing = sorted(events - documented())
    assert not missing, f"events missing from docs/reference.md: {missing}"


async def test_every_service_method_is_in_the_reference(make_deck) -> None:
    deck, _rec = make_deck(agent_block("a"))
    await deck.startup()  # the plugins' services too
    wire = set(methods(deck.services.values()))
    assert {"ChatService.Send", "DeckService.Usage", "WorktreeService.Merge"} <= wire
    missing = sorted(wire - documented())
    assert not missing, f"service methods missing from docs/reference.md: {missing}"
