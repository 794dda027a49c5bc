"""deck-chime's own tests, with deck.testing's make_deck fixture and deck's demo agent."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from deck.testing import demo_agent

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def written(path, timeout: float = 10.0) -> list[str]:
    """The lines of `path` once the notification command has written it, and a moment more for any extra one."""
    async with asyncio.timeout(timeout):
        while not (path.exists() and path.read_text()):
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # a duplicate notification would land by now
    return path.read_text().splitlines()


async def test_a_finished_turn_runs_the_command(make_deck, tmp_path):
    out = tmp_path / "notified.txt"
    script = f"import sys; open({str(out)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')"
    command = json.dumps([sys.executable, "-c", script, "{agent}", "{what}"])
    deck, rec = make_deck(f"[chime]\nbell = false\ncommand = {command}\n" + demo_agent("demo"))
    assert deck.pm.has_plugin("chime")
    deck.chat.send("demo", "echo hi")
    await rec.wait_event("turn:changed", agent="demo", busy=False)
    assert await written(out) == ["demo finished its turn"]


async def test_a_permission_request_asks_for_input(make_deck, tmp_path):
    out = tmp_path / "notified.txt"
    script = f"import sys; open({str(out)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')"
    command = json.dumps([sys.executable, "-c", script, "{agent}", "{what}"])
    deck, rec = make_deck(f'[chime]\nbell = false\non = ["input"]\ncommand = {command}\n' + demo_agent("demo"))
    deck.chat.send("demo", "show me around")
    request = await rec.wait_event("permission:requested", agent="demo")
    assert await written(out) == ["demo needs your input"]
    deck.chat.answer_permission(request["id"], "allow")
    await rec.wait_event("turn:changed", agent="demo", busy=False)


async def test_a_setting_of_the_wrong_type_is_a_problem_with_its_line_not_a_guess(make_deck):
    deck, rec = make_deck('[chime]\nbell = "yes"\n' + demo_agent("demo"))
    said = [(p.line, p.message) for p in deck.problems]
    assert said == [(2, "chime.bell: expected true or false, got a string (\"yes\") (its plugin does without it)")], said
