"""The web page's conversation of a tool's name, a context compaction and an agent's notice, in a real
headless Chromium against a real `deck serve --web` and real agents (tests/agents/fake_agent.py's
`named-tool`, `compact [fail]` and `notice SEVERITY TITLE`; terminal_agent.py's scripted updates)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.browser import browser, page  # noqa: F401 (fixtures)
from tests.conftest import agent_block, agent_table
from tests.core.remote.test_server import runtime  # noqa: F401 (a fixture)
from tests.frontends.web.test_web_newcomer import LEVEL_COLOURS, TERMINAL_AGENT, drawn, opened, say, serve  # noqa: F401

pytestmark = pytest.mark.timeout(120)

#: The page's colours of a compaction's end (style.css: --good, --bad, --warn).
GOOD, BAD, WARN = "rgb(63, 185, 80)", "rgb(248, 81, 73)", LEVEL_COLOURS["warning"]


def colour(page: Any, selector: str, what: str = "color") -> str:  # noqa: F811
    return page.eval_on_selector(selector, f"x => getComputedStyle(x)[{what!r}]")


def test_a_tools_name_stands_beside_its_title(page: Any, serve: Any) -> None:  # noqa: F811
    opened(page, serve(agent_block("a")))
    say(page, "named-tool")
    page.wait_for_selector(".msg.agent.done .tool")
    drawn(page, "(fs.read)")  # the name its update gave last
    head = page.eval_on_selector(".tool > div", "h => [...h.children].map(x => [x.className, x.innerText])")
    assert head == [["title", "Read a.txt"], ["name", "(fs.read)"], ["status completed", "completed"]]
    assert colour(page, ".tool .name") != colour(page, ".tool .title")


def test_a_compaction_is_one_line_as_it_goes_and_as_it_ends(page: Any, serve: Any) -> None:  # noqa: F811
    served = serve(agent_block("a") + agent_block("b") + agent_table("t", TERMINAL_AGENT))
    opened(page, served)
    say(page, "compact")
    page.wait_for_selector(".msg.agent.done .compaction")
    assert page.eval_on_selector_all(".compaction", "xs => xs.map(x => [x.className, x.innerText])") == [
        ["compaction completed", "compacted: Kept the plan and the file list."]  # its summary's first line
    ]
    assert colour(page, ".compaction") == GOOD
    page.click("#agent-list button[data-agent=b]")
    say(page, "compact fail")
    page.wait_for_selector(".msg.agent.done .compaction")
    assert page.inner_text(".compaction.failed") == "compaction failed: the model refused"
    assert colour(page, ".compaction") == BAD and "Kept" not in page.inner_text("#messages")
    # As it goes, then cancelled.
    page.click("#agent-list button[data-agent=t]")
    begun = {"sessionUpdate": "compaction_update", "compactionId": "k", "status": "in_progress"}
    ended = {"sessionUpdate": "compaction_update", "compactionId": "k", "status": "cancelled"}
    say(page, json.dumps({"steps": [["update", begun], ["sleep", 1.5], ["update", ended]]}))
    page.wait_for_selector(".compaction.in_progress")
    assert page.inner_text(".compaction") == "compacting…"
    page.wait_for_selector(".compaction.cancelled")
    assert page.inner_text(".compaction") == "compaction cancelled" and colour(page, ".compaction") == WARN


def test_an_agents_notice_says_its_level_in_its_colour(page: Any, serve: Any) -> None:  # noqa: F811
    opened(page, serve(agent_block("a")))
    for i, (level, title) in enumerate((("warning", "Budget low"), ("error", "Disk full"), ("info", "Indexed"))):
        say(page, f"notice {level} {title}")
        page.wait_for_selector(f".msg.agent.done >> nth={i}")  # its note came before the turn ended
    notes = page.eval_on_selector_all(".msg.system", "xs => xs.map(x => [x.className, x.querySelector('.level').innerText])")
    assert notes == [
        ["msg system done said warning", "warning"], ["msg system done said error", "error"], ["msg system done said info", "notice"],
    ]  # fmt: skip
    for level in ("warning", "error", "info"):
        assert colour(page, f".msg.said.{level}", "borderLeftColor") == LEVEL_COLOURS[level]
        assert colour(page, f".msg.said.{level} .level") == LEVEL_COLOURS[level]
    assert "Budget low" in page.inner_text(".msg.said.warning") and "see the log" in page.inner_text(".msg.said.warning")
    assert page.locator(".toast").count() == 0  # the agent shown: its note says it, no toast says it again


def test_an_agents_notice_is_a_toast_while_another_agent_is_shown(page: Any, serve: Any) -> None:  # noqa: F811
    opened(page, serve(agent_block("a") + agent_table("t", TERMINAL_AGENT)))
    page.click("#agent-list button[data-agent=t]")
    notice = {"sessionUpdate": "notice", "severity": "warning", "title": "Quota low"}
    say(page, json.dumps({"steps": [["sleep", 1.5], ["update", notice]]}))
    page.click("#agent-list button[data-agent=a]")  # t's notice comes while a is shown
    page.wait_for_selector(".toast")
    assert "Quota low" in page.inner_text(".toast")
