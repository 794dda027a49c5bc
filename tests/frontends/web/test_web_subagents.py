"""Subagents on the web page, in a real headless Chromium against a real `deck serve --web`: a child's
messages nested under their parent and folded with a click; a child's request names it."""

from __future__ import annotations

import sys

from tests.browser import browser, page  # noqa: F401 (fixtures)
from tests.conftest import AGENTS, agent_table
from tests.core.remote.test_server import runtime  # noqa: F401 (a fixture)
from tests.frontends.web.test_web_newcomer import opened, say, serve  # noqa: F401

TOML = agent_table("a", [sys.executable, str(AGENTS / "subagent_agent.py")])


def test_the_web_page_nests_children_and_folds_one_with_a_click(page, serve):  # noqa: F811
    opened(page, serve(TOML))
    say(page, "delegate")
    page.wait_for_selector(".msg.child.folded", state="detached")
    page.wait_for_function("() => [...document.querySelectorAll('.msg .sub')].some(x => x.innerText.includes('Found'))"
                           " || document.body.innerText.includes('Found: config.py')")  # fmt: skip
    heads = page.eval_on_selector_all(".msg.child > .sub", "xs => xs.map(x => x.innerText)")
    assert heads == ["a · ✉ a → Explore", "▾ a › Explore", "a · ✉ Explore → a"]
    indent = page.eval_on_selector_all(".msg.child", "xs => xs.map(x => x.style.marginLeft)")
    assert indent == ["0em", "1.5em", "0em"]
    page.click("text=▾ a › Explore")
    page.wait_for_selector(".msg.child.folded")
    assert "The loader is in config.py" not in page.inner_text("#messages")
    assert page.inner_text(".msg.child.folded > .sub") == "▸ a › Explore"

def test_the_web_pages_request_dialog_names_the_child_that_asks(page, serve):  # noqa: F811
    opened(page, serve(TOML))
    say(page, "perm")
    page.wait_for_selector("#ask[open]")
    assert page.inner_text("#ask-title") == "a › Editor asks: edit main.py"
