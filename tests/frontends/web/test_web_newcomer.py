"""The web page's words, numbers and marks, in a real headless Chromium against a real `deck serve --web`
and real agents (tests/agents/fake_agent.py, odd_shapes_agent.py, terminal_agent.py).

A question's required fields marked, described and enforced; the turn's line saying what goes on; amounts
and counts written as the terminal writes them; history and search in local time with their matches
highlighted; the Usage tab as full as `deck usage`; the permission dialog's default and its agent's title;
the phone's header on one row and its agents all in view; the user's own text as typed; plugins' notices
(`deck:notice`, from a real plugin loaded through its entry point) as toasts and on their agents; and a
sandboxed agent marked."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from datetime import date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.browser import browser, page  # noqa: F401 (fixtures)
from tests.conftest import AGENTS, agent_block, agent_table
from tests.core.remote.test_server import Raw, runtime  # noqa: F401 (a fixture)
from tests.deck_process import write_config
from tests.web_server import WebServe

pytestmark = pytest.mark.timeout(120)

ODD_AGENT = [sys.executable, str(AGENTS / "odd_shapes_agent.py")]
TERMINAL_AGENT = [sys.executable, str(AGENTS / "terminal_agent.py")]

#: A third-party plugin, loaded as any is (the "deck" entry points): a message `notice {...}` makes it
#: call `deck.notice(**{...})` before the message goes to its agent.
NOTICE_PLUGIN = '''
import json

from deck import hookimpl


@hookimpl
def deck_before_prompt(deck, agent, text):
    if text.startswith("tell "):
        deck.notice(**json.loads(text[len("tell "):]))
'''

#: The page's colours of a notice's levels (style.css: --accent, --warn, --bad).
LEVEL_COLOURS = {"info": "rgb(47, 129, 247)", "warning": "rgb(210, 153, 34)", "error": "rgb(248, 81, 73)"}


class Served:
    """`deck serve --web` of a config, and a terminal client on its socket."""

    def __init__(self, server: WebServe) -> None:
        from deck.remote.serverdir import socket_path

        self.server = server
        self.terminal = Raw(socket_path(server.name))

    def send(self, agent: str, text: str) -> None:
        self.terminal.call("ChatService.Send", {"agent": agent, "text": text})

    def event(self, name: str, **fields: Any) -> dict[str, Any]:
        def found(lines: list[dict[str, Any]]) -> Any:
            return [x for x in lines if x.get("event") == name and all(x.get(k) == v for k, v in fields.items())]

        return self.terminal.wait_for(found)[0]


@pytest.fixture
def serve(tmp_path: Path, runtime: Path) -> Iterator[Callable[..., Served]]:  # noqa: F811
    started: list[Served] = []

    def start(config: str, env: dict[str, str] | None = None) -> Served:
        served = Served(WebServe(write_config(tmp_path / "deck.toml", config), env=env))
        started.append(served)
        return served

    yield start
    for served in started:
        served.terminal.close()
        served.server.stop()


def opened(page: Any, served: Served) -> Any:  # noqa: F811
    page.goto(served.server.url)
    page.wait_for_selector("#link.up")
    return page


def drawn(page: Any, text: str, where: str = "#messages") -> None:  # noqa: F811
    page.wait_for_function("([where, text]) => document.querySelector(where).innerText.includes(text)", arg=[where, text])


def say(page: Any, text: str) -> None:  # noqa: F811
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")


def test_a_required_field_is_marked_described_and_nothing_is_sent_until_it_is_filled(page: Any, serve: Any) -> None:  # noqa: F811
    served = serve(agent_table("h", ODD_AGENT, title="Helper"))
    page.add_init_script(
        "window.sent = []; const send = WebSocket.prototype.send;"
        "WebSocket.prototype.send = function (data) { window.sent.push(String(data)); return send.call(this, data); };"
    )  # what the page sends, as it leaves
    opened(page, served)
    form = {
        "type": "object",
        "properties": {
            "branch": {"type": "string", "title": "Branch", "description": "The branch to merge into"},
            "note": {"type": "string", "description": "Anything the reviewer should know"},
            "count": {"type": "integer", "title": "Count"},
        },
        "required": ["branch"],
    }
    served.send("h", "ask " + json.dumps(form))
    page.wait_for_selector("#ask[open]")
    assert page.inner_text("#ask-title") == "Helper asks"
    names = page.eval_on_selector_all("#ask-body label .field-name", "xs => xs.map(x => x.innerText)")
    assert names == ["Branch *", "note", "Count"]
    hints = page.eval_on_selector_all("#ask-body label .hint", "xs => xs.map(x => x.innerText)")
    assert hints == ["The branch to merge into", "Anything the reviewer should know"]
    assert page.locator("#ask-body label .hint").first.is_visible()
    assert page.eval_on_selector("#ask-body input[name=branch]", "i => i.required") is True

    def answers() -> list[dict[str, Any]]:
        sent = [json.loads(x) for x in page.evaluate("window.sent")]
        return [x for x in sent if x.get("method") == "ChatService.AnswerQuestion"]

    for typed in ("", "   "):  # empty, then only spaces: refused, and said why
        page.fill("#ask-body input[name=branch]", typed)
        page.click("#ask-options button:text('Answer')")
        page.wait_for_selector("#ask-error:visible")
        assert "Branch is required" in page.inner_text("#ask-error")
        assert page.evaluate("document.activeElement.name") == "branch"
        assert page.eval_on_selector("#ask-body input[name=branch]", "i => i.getAttribute('aria-invalid')") == "true"
    assert answers() == [] and page.evaluate("document.querySelector('#ask').open")
    assert len(served.terminal.call("ChatService.Pending")) == 1
    page.fill("#ask-body input[name=branch]", "main")
    page.fill("#ask-body input[name=count]", "2.5")  # not a whole number: refused too
    page.click("#ask-options button:text('Answer')")
    page.wait_for_selector("#ask-error:has-text('Count must be a number')")
    assert answers() == []
    page.fill("#ask-body input[name=count]", "3")
    page.click("#ask-options button:text('Answer')")
    drawn(page, '"content": {"branch": "main", "count": 3}')  # the empty optional note left out
    assert [a["params"]["values"] for a in answers()] == [{"branch": "main", "count": 3}]


def test_the_turns_line_says_what_goes_on_and_never_the_conversations_title(page: Any, serve: Any) -> None:  # noqa: F811
    served = serve(agent_block("a") + agent_table("t", TERMINAL_AGENT))
    opened(page, served)
    say(page, "session")  # the agent names its conversation "A title"
    page.wait_for_function("() => deckPage.state.conversations.a.title === 'A title'")
    page.wait_for_selector(".msg.agent.done")
    assert "A title" not in page.inner_text("#turn")
    assert page.inner_text("#turn-now") == ""  # between turns: nothing goes on
    served.send("a", "perm")  # a tool call waits for the user's leave
    page.wait_for_selector("#ask[open]")
    page.wait_for_function("() => document.querySelector('#turn-now').innerText === 'waits for you · Edit file'")
    page.click("#ask-options button[data-option=yes]")
    page.wait_for_function("() => document.querySelector('#turn-now').innerText === ''")
    say(page, "slow")
    page.wait_for_function("() => document.querySelector('#turn-now').innerText === 'working…'")
    assert "A title" not in page.inner_text("#turn")
    page.click("#cancel")
    page.wait_for_function("() => document.querySelector('#turn-now').innerText === ''")
    page.click("#agent-list button[data-agent=t]")
    running = {"sessionUpdate": "tool_call", "toolCallId": "r1", "title": "Run the tests", "kind": "execute", "status": "in_progress"}
    finished = {"sessionUpdate": "tool_call_update", "toolCallId": "r1", "status": "completed"}
    say(page, json.dumps({"steps": [["update", running], ["sleep", 1.5], ["update", finished], ["sleep", 1.5]]}))
    page.wait_for_function("() => document.querySelector('#turn-now').innerText === 'working… · Run the tests'")
    page.wait_for_function("() => document.querySelector('#turn-now').innerText === 'working…'")  # the tool call is done
    page.wait_for_function("() => document.querySelector('#turn-now').innerText === ''")


def test_amounts_are_written_as_the_terminal_writes_them_and_counts_with_separators(page: Any, serve: Any) -> None:  # noqa: F811
    served = serve(agent_block("a") + agent_block("b"))
    opened(page, served)
    say(page, "cost 0.3")
    page.wait_for_function("() => document.querySelector('#turn-usage').innerText.includes('0.30 USD')")
    assert page.inner_text("#turn-usage") == "context 1% · 0.30 USD"
    page.wait_for_function("() => document.querySelector('#spent').innerText === 'spent 0.30 USD'")
    page.click("#agent-list button[data-agent=b]")
    say(page, "cost 0.0042")  # less than a cent: its first two significant digits
    page.wait_for_function("() => document.querySelector('#turn-usage').innerText.includes('0.0042 USD')")
    say(page, "cost 1234.5 EUR")
    page.wait_for_function("() => document.querySelector('#turn-usage').innerText.includes('1234.50 EUR')")
    page.wait_for_function("() => document.querySelector('#spent').innerText === 'spent 1234.50 EUR + 0.30 USD'")
    page.click("#agent-list button[data-agent=a]")
    say(page, "usage")  # 1000 of 200000 tokens
    page.wait_for_selector(".msg.agent.done >> nth=1")
    page.click("[data-tab=usage]")
    page.wait_for_selector("#usage td:text('1,000 / 200,000')")
    body = page.inner_text("body")
    assert "$" not in body and "0.3000" not in body and "200000" not in body


def test_history_and_search_show_local_times_and_highlight_the_matches_as_text(browser: Any, serve: Any) -> None:  # noqa: F811
    served = serve(agent_block("a"))
    zone = "Asia/Kolkata"  # +05:30: a local time no UTC one is
    context = browser.new_context(viewport={"width": 1280, "height": 800}, timezone_id=zone)
    tab = context.new_page()
    tab.set_default_timeout(20000)
    try:
        opened(tab, served)
        say(tab, "remember the zebra <b>striped</b>")
        drawn(tab, "You said: remember the zebra")
        tab.click("[data-tab=history]")
        tab.wait_for_selector("#history .item")
        [row] = served.terminal.call("ChatService.History", {"agent": "a"})
        local = datetime.fromisoformat(row["updatedAt"].replace("Z", "+00:00")).astimezone(ZoneInfo(zone))
        shown = tab.locator("#history .item time").first
        assert shown.inner_text() == local.strftime("%Y-%m-%d %H:%M")
        assert shown.get_attribute("datetime") == row["updatedAt"]
        assert "T" not in tab.inner_text("#history .item .snippet")
        tab.fill("#search", "zebra")
        tab.click("#search-form button")
        tab.wait_for_selector("#history .item mark")
        hits = served.terminal.call("ChatService.Search", {"query": "zebra"})
        assert len(hits) == 2 and all("**zebra**" in hit["snippet"] for hit in hits)
        assert tab.eval_on_selector_all("#history mark", "ms => ms.map(m => m.textContent)") == ["zebra", "zebra"]
        text = tab.inner_text("#history")
        assert "**" not in text and "<b>striped</b>" in text  # the markers are the highlight; the rest is text
        assert tab.locator("#history b").count() == 0
        times = tab.eval_on_selector_all("#history .item time", "ts => ts.map(t => [t.textContent, t.dateTime])")
        for (said, stored), hit in zip(times, hits, strict=True):
            assert stored == hit["at"]
            expected = datetime.fromisoformat(hit["at"].replace("Z", "+00:00")).astimezone(ZoneInfo(zone))
            assert said == expected.strftime("%Y-%m-%d %H:%M")
    finally:
        context.close()


def test_the_usage_tab_shows_what_deck_usage_shows_with_each_days_cost_and_the_budgets(page: Any, serve: Any) -> None:  # noqa: F811
    served = serve(agent_block("a", budget="0.25 USD") + agent_block("b"))
    opened(page, served)
    say(page, "cost 0.3")  # over a's budget: the budget plugin's sticky notice on a
    served.event("deck:notice", source="budget", agent="a")
    page.click("#agent-list button[data-agent=b]")
    say(page, "usage")  # 30 tokens reported
    page.wait_for_selector(".msg.agent.done")
    page.click("[data-tab=usage]")
    page.wait_for_selector("#usage h3:text('Per day')")
    text = page.inner_text("#usage")
    assert "Since the server started: 0.30 USD · today: 0.30 USD" in text
    assert "The agents' conversations: 0.30 USD" in text
    assert "Tokens reported: 30 since the server started, 30 today" in text
    rows = page.eval_on_selector_all(
        "#usage table.usage:not(.days) tr", "rs => rs.map(r => [...r.cells].map(c => c.innerText))"
    )
    assert rows[0] == ["agent", "context", "tokens", "conversation", "since start", "today", "budget"]
    a_row, b_row = rows[1], rows[2]
    assert a_row[:6] == ["a", "500 / 100,000", "—", "0.30 USD", "0.30 USD", "0.30 USD"]
    assert a_row[6].startswith("budget reached: ") and "0.30 USD spent" in a_row[6]
    assert b_row == ["b", "1,000 / 200,000", "30", "cost unknown (not counted)", "—", "—", "—"]
    days = page.eval_on_selector_all("#usage table.days tr", "rs => rs.map(r => [...r.cells].map(c => c.innerText))")
    assert days == [["day", "spent", "by agent", "tokens"], [date.today().isoformat(), "0.30 USD", "a 0.30 USD", "30"]]
    assert "Not counted (they report no cost): b" in text
    assert page.locator(".toast").count() == 0  # a sticky notice is on its agent, not a toast
    page.reload()  # from the snapshot: the notice is still on a
    page.wait_for_selector("#link.up")
    assert page.get_attribute("#agent-list button[data-agent=a]", "data-level") == "warning"
    assert "budget reached" in page.inner_text("#agent-list button[data-agent=a] .notice")
    assert "budget reached" in page.inner_text("#agent-marks")


def test_notices_are_toasts_of_their_level_or_stay_on_their_agent_until_taken_back(page: Any, serve: Any, tmp_path: Path) -> None:  # noqa: F811
    import os

    site = tmp_path / "site"
    (site / "deck_notices_test-1.0.dist-info").mkdir(parents=True)
    (site / "deck_notices_test-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: deck-notices-test\nVersion: 1.0\n")
    (site / "deck_notices_test-1.0.dist-info" / "entry_points.txt").write_text("[deck]\nnotices = deck_notices_test\n")
    (site / "deck_notices_test.py").write_text(NOTICE_PLUGIN)
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("DECK_DISABLE_PLUGIN_AUTOLOAD", None)
    served = serve(agent_block("a", title="Alpha") + agent_block("b", title="Bravo"), env=env)
    opened(page, served)

    def notice(**given: Any) -> None:
        served.send("a", "tell " + json.dumps({"source": "tests", **given}))

    for level in ("info", "warning", "error"):
        notice(text=f"said at {level}", level=level, agent="b")
        toast = page.locator(f".toast.{level}", has_text=f"said at {level}")
        toast.wait_for()
        assert toast.inner_text() == f"Bravo: said at {level}"
        assert toast.evaluate("t => getComputedStyle(t).borderLeftColor") == LEVEL_COLOURS[level]
    page.locator(".toast").first.click()  # a click takes one away
    page.wait_for_function("() => document.querySelectorAll('.toast').length === 2")

    notice(text="parked for the night", level="error", agent="b", sticky=True)
    page.wait_for_selector("#agent-list button[data-agent=b] .notice:text('parked for the night')")
    assert page.get_attribute("#agent-list button[data-agent=b]", "data-level") == "error"
    assert page.locator(".toast", has_text="parked").count() == 0
    page.click("#agent-list button[data-agent=b]")
    page.wait_for_selector("#agent-marks .notice.error:text('parked for the night')")
    notice(text="", agent="b", sticky=True, source="someone else")  # another source takes nothing back
    notice(text="still parked", level="warning", agent="b", sticky=True)  # the same source: replaced
    page.wait_for_selector("#agent-marks .notice.warning:text('still parked')")
    assert page.locator("#agent-marks .notice").count() == 1
    rows = {row["name"]: row for row in served.terminal.call("AgentService.List")}
    assert rows["b"]["notices"] == [{"source": "tests", "level": "warning", "text": "still parked"}]
    page.reload()  # the snapshot's agents carry it
    page.wait_for_selector("#link.up")
    page.wait_for_selector("#agent-list button[data-agent=b] .notice:text('still parked')")
    page.click("#agent-list button[data-agent=b]")
    page.wait_for_selector("#agent-marks .notice:text('still parked')")
    notice(text="", agent="b", sticky=True)  # taken back
    page.wait_for_selector("#agent-list button[data-agent=b] .notice", state="detached")
    assert page.locator("#agent-marks").is_hidden() and page.get_attribute("#agent-list button[data-agent=b]", "data-level") is None

    notice(text="the deck pauses", level="warning", sticky=True)  # on no agent: on the page
    page.wait_for_selector("#deck-notices .notice.warning:text('the deck pauses')")
    notice(text="", sticky=True)
    page.wait_for_selector("#deck-notices", state="hidden")


def test_the_permission_dialog_defaults_to_allow_once_and_names_the_agent_by_its_title(page: Any, serve: Any) -> None:  # noqa: F811
    served = serve(agent_block("a", title="Alpha"))
    opened(page, served)
    served.send("a", "perm-always-first")  # always-allow, allow, reject: in that order
    page.wait_for_selector("#ask[open]")
    assert page.inner_text("#ask-title") == "Alpha asks: Edit greet.py"
    assert page.eval_on_selector_all("#ask-options button.primary", "bs => bs.map(b => b.dataset.option)") == ["allow"]
    assert page.evaluate("document.activeElement.dataset.option") == "allow"
    always = page.locator("#ask-options button[data-option=allow_always]")
    assert always.evaluate("b => getComputedStyle(b).backgroundColor") != page.locator("#ask-options button.primary").evaluate(
        "b => getComputedStyle(b).backgroundColor"
    )
    page.keyboard.press("Enter")  # the default action
    assert served.event("permission:resolved")["optionId"] == "allow"
    drawn(page, "permission: allow")


def test_on_a_phone_the_header_is_one_row_and_every_agent_is_in_view(browser: Any, serve: Any) -> None:  # noqa: F811
    names = ["alpha", "bravo", "charlie", "delta", "echo"]
    served = serve("".join(agent_block(n, title=f"{n.title()} agent") for n in names))
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    phone = context.new_page()
    phone.set_default_timeout(20000)
    try:
        opened(phone, served)
        served.send("alpha", "cost 0.3")
        phone.wait_for_function("() => document.querySelector('#spent').textContent === 'spent 0.30 USD'")
        served.send("charlie", "perm")  # "needs you: 1" in the header
        phone.wait_for_selector("#inbox:visible")
        header = phone.evaluate(
            """() => [...document.querySelectorAll('#top > *')].filter(n => n.offsetParent !== null)
                .map(n => { const r = n.getBoundingClientRect(); return [n.id || n.tagName, r.top, r.bottom, r.left, r.right]; })"""
        )
        assert {h[0] for h in header} >= {"H1", "link", "inbox", "spent", "notify"}, header
        middles = [(top + bottom) / 2 for _, top, bottom, _, _ in header]
        assert max(middles) - min(middles) < 4, header  # one row
        assert all(0 <= left and right <= 390 for _, _, _, left, right in header), header
        assert phone.inner_text("#inbox") == "needs you: 1"
        assert phone.evaluate("document.querySelector('#top').getBoundingClientRect().height") < 56
        box = phone.evaluate("(() => { const r = document.querySelector('#agents').getBoundingClientRect(); return [r.top, r.bottom]; })()")
        tabs = phone.eval_on_selector_all(
            "#agent-list button", "bs => bs.map(b => { const r = b.getBoundingClientRect(); return [r.left, r.right, r.top, r.bottom]; })"
        )
        assert len(tabs) == 5
        for left, right, top, bottom in tabs:  # each whole, none cut at an edge
            assert 0 <= left and right <= 390 and box[0] <= top and bottom <= box[1], (tabs, box)
        assert phone.evaluate("(() => { const a = document.querySelector('#agents'); return a.scrollWidth <= a.clientWidth; })()")
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390
        names_shown = phone.eval_on_selector_all("#agent-list .name", "ns => ns.map(n => n.scrollWidth <= n.clientWidth)")
        assert all(names_shown), names_shown  # "Charlie agent": whole
    finally:
        context.close()


def test_the_users_own_message_is_shown_as_typed_not_as_markdown(page: Any, serve: Any) -> None:  # noqa: F811
    served = serve(agent_block("a"))
    opened(page, served)
    typed = "  *not emphasis*  and  __this__\n\n    four spaces in\n# not a heading\n- nor a list"
    say(page, typed)
    drawn(page, "You said:")
    page.wait_for_selector(".msg.agent.done")
    user = page.locator(".msg.user")
    assert user.locator("pre.typed").evaluate("p => p.textContent") == typed
    assert user.locator("em, strong, h1, li, code").count() == 0
    assert user.locator("pre.typed").evaluate("p => getComputedStyle(p).whiteSpace") == "pre-wrap"
    assert page.locator(".msg.agent em").count() >= 1  # the agent's answer is still Markdown


def test_a_sandboxed_agent_is_marked_and_one_without_the_network_says_so(browser: Any, serve: Any) -> None:  # noqa: F811
    config = agent_block("open") + agent_block("boxed", sandbox=True) + agent_block("offline") + "sandbox = { network = false }\n"
    served = serve(config)
    rows = {row["name"]: row["sandbox"] for row in served.terminal.call("AgentService.List")}
    assert (rows["open"]["enabled"], rows["boxed"]["enabled"], rows["offline"]["network"]) == (False, True, False)
    for width, height in ((1280, 800), (390, 844)):
        context = browser.new_context(viewport={"width": width, "height": height})
        tab = context.new_page()
        tab.set_default_timeout(20000)
        try:
            opened(tab, served)
            marks = tab.eval_on_selector_all(
                "#agent-list button", "bs => bs.map(b => [b.dataset.agent, b.querySelector('svg.lock')?.getAttribute('aria-label') ?? null])"
            )
            assert marks == [["open", None], ["boxed", "sandboxed"], ["offline", "sandboxed, no network"]]
            if width > 760:
                assert tab.inner_text("#agent-list button[data-agent=offline] .badge") == "sandboxed, no network"
            else:
                assert tab.locator("#agent-list button[data-agent=offline] svg.lock").is_visible()
            assert tab.locator("#agent-marks").is_hidden()  # "open" is selected: no sandbox
            tab.click("#agent-list button[data-agent=offline]")
            tab.wait_for_selector("#agent-marks .badge:text('sandboxed, no network')")
            assert "without the network" in tab.get_attribute("#agent-marks .badge", "title")
            tab.click("#agent-list button[data-agent=boxed]")
            tab.wait_for_function("() => document.querySelector('#agent-marks .badge').innerText === 'sandboxed'")
        finally:
            context.close()
