"""The web page in a real headless Chromium, against a real `deck serve --web` and real agents.

Load, a prompt and its streamed answer, agents' HTML shown as text, a permission and a question
answered from the page, start and stop, a dropped connection, history and search, a worktree
merged, usage, the phone's size, a page of another origin, and a 200,000-chunk answer."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import browser, page  # noqa: F401 (fixtures)
from tests.conftest import agent_block
from tests.core.remote.test_server import Raw, runtime  # noqa: F401 (a fixture)
from tests.deck_process import write_config
from tests.web_server import WebServe

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def served(tmp_path: Path, runtime: Path) -> Iterator[WebServe]:  # noqa: F811
    server = WebServe(write_config(tmp_path / "deck.toml", agent_block("a") + agent_block("b")))
    yield server
    server.stop()


@pytest.fixture
def terminal(served: WebServe) -> Iterator[Raw]:
    """A terminal client on the server's socket, beside the browser."""
    from deck.remote.serverdir import socket_path

    client = Raw(socket_path(served.name))
    yield client
    client.close()


def opened(page: Any, served: WebServe) -> Any:  # noqa: F811
    page.goto(served.url)
    page.wait_for_selector("#link.up")
    return page


def say(page: Any, text: str) -> None:  # noqa: F811
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")


def messages_text(page: Any) -> str:  # noqa: F811
    return page.inner_text("#messages")


def test_the_page_loads_and_streams_an_answer(page: Any, served: WebServe) -> None:  # noqa: F811
    opened(page, served)
    assert page.evaluate("location.hash") == ""  # the token is off the address bar (kept for this tab only)
    assert page.eval_on_selector_all("#agent-list button", "bs => bs.map(b => b.dataset.agent)") == ["a", "b"]
    say(page, "stream 300")
    page.wait_for_function("() => document.querySelector('#messages').innerText.includes('c299')")
    text = messages_text(page)
    assert text.count("stream 300") == 1 and "c0 c1 c2" in text
    assert page.input_value("#prompt") == ""
    page.wait_for_selector(".msg.agent.done")
    page.click("#agent-list button[data-agent=b]")
    page.wait_for_selector("#agent-name:text('b')")
    assert "c299" not in messages_text(page)


def test_html_and_scripts_in_an_agents_text_are_shown_as_text(page: Any, served: WebServe) -> None:  # noqa: F811
    opened(page, served)
    hostile = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script> **bold** [click](javascript:window.pwned=3) <b>b</b>'
    say(page, hostile)
    page.wait_for_function("() => [...document.querySelectorAll('.msg.agent')].some(m => m.innerText.includes('You said'))")
    answer = page.locator(".msg.agent").last
    assert '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>' in answer.inner_text()
    assert answer.locator("img, script, b, [onerror]").count() == 0
    assert answer.locator("strong").inner_text() == "bold"  # Markdown, still
    assert answer.locator("a").count() == 0  # a javascript: link stays text
    page.click("#agent-list button[data-agent=a]")
    assert page.evaluate("window.pwned") is None


def test_a_permission_asked_of_the_terminal_is_answered_from_the_page(page: Any, served: WebServe, terminal: Raw) -> None:  # noqa: F811
    opened(page, served)
    terminal.call("ChatService.Send", {"agent": "a", "text": "perm"})
    page.wait_for_selector("#ask[open]")
    assert "Edit file" in page.inner_text("#ask-title")
    assert "- a" in page.inner_text("#ask-body") and "+ b" in page.inner_text("#ask-body")  # the diff
    assert page.inner_text("#inbox-count") == "1"
    page.click("#ask-options button[data-option=yes]")
    resolved = terminal.wait_for(lambda lines: [x for x in lines if x.get("event") == "permission:resolved"])
    assert resolved[0]["optionId"] == "yes"
    page.wait_for_function("() => document.querySelector('#messages').innerText.includes('permission: yes')")
    assert not page.locator("#ask").evaluate("d => d.open") and page.locator("#inbox").is_hidden()


def test_a_question_is_answered_from_the_page_and_one_answered_elsewhere_leaves_it(page: Any, served: WebServe, terminal: Raw) -> None:  # noqa: F811
    opened(page, served)
    say(page, "question")
    page.wait_for_selector("#ask[open]")
    assert "Your name?" in page.inner_text("#ask-body")
    page.fill("#ask-body input[name=name]", "Ada")
    page.click("#ask-options button:text('Answer')")
    page.wait_for_function("() => document.querySelector('#messages').innerText.includes('Ada')")
    assert '"content": {"name": "Ada"}' in messages_text(page)  # what the agent got back
    terminal.call("ChatService.Send", {"agent": "a", "text": "perm"})
    asked = terminal.wait_for(lambda lines: [x for x in lines if x.get("event") == "permission:requested"])[0]
    page.wait_for_selector("#ask[open]")
    terminal.call("ChatService.AnswerPermission", {"id": asked["id"], "optionId": "no"})
    page.wait_for_function("() => !document.querySelector('#ask').open")  # answered in the terminal: gone here too
    page.wait_for_function("() => document.querySelector('#messages').innerText.includes('permission: no')")


def test_stop_start_restart_and_cancel_from_the_page(page: Any, served: WebServe) -> None:  # noqa: F811
    opened(page, served)
    say(page, "slow")
    page.wait_for_function("() => document.querySelector('#messages').innerText.includes('tick')")
    page.wait_for_selector("#cancel:enabled")
    page.click("#cancel")
    page.wait_for_selector("#cancel:disabled")
    page.wait_for_selector("#agent-state:text('ready')")
    page.click("[data-act=stop]")
    page.wait_for_selector("#agent-state:text('stopped')")
    page.click("[data-act=start]")
    page.wait_for_selector("#agent-state:text('ready')")
    # The state reads "ready" before the restart too: record every state the page shows after the click.
    page.evaluate("""() => {
        window.states = [];
        new MutationObserver(() => window.states.push(document.querySelector('#agent-state').innerText))
            .observe(document.querySelector('#agent-state'), {childList: true, characterData: true, subtree: true});
    }""")
    page.click("[data-act=restart]")
    page.wait_for_function("() => window.states.some(s => !s.includes('ready')) && window.states.at(-1).includes('ready')")
    page.wait_for_selector("#agent-list button[data-agent=a] .dot.ready")


def test_a_dropped_connection_reconnects_and_shows_nothing_twice(page: Any, served: WebServe, terminal: Raw) -> None:  # noqa: F811
    opened(page, served)
    say(page, "stream 5")
    page.wait_for_function("() => document.querySelector('#messages').innerText.includes('c4')")
    page.evaluate("deckPage.socket().close()")  # the connection drops
    page.wait_for_selector("#link.down")
    terminal.call("ChatService.Send", {"agent": "a", "text": "while away"})  # news while the page is gone
    page.wait_for_selector("#link.up")
    page.wait_for_function("() => document.querySelector('#messages').innerText.includes('You said: while away')")
    terminal.call("ChatService.Send", {"agent": "a", "text": "after"})
    page.wait_for_function("() => document.querySelector('#messages').innerText.includes('You said: after')")
    text = messages_text(page)
    for said in ("stream 5", "c0 c1 c2 c3 c4", "You said: while away", "You said: after"):
        assert text.count(said) == 1, (said, text)
    assert page.locator(".msg").count() == 6  # three prompts, three answers
    last_seq = terminal.call("DeckService.Snapshot")["seq"]
    assert page.evaluate("deckPage.state.seq") == last_seq
    assert len(terminal.call("DeckService.Clients")) == 2  # the page came back


def test_history_search_and_usage_from_the_page(page: Any, served: WebServe, terminal: Raw) -> None:  # noqa: F811
    opened(page, served)
    say(page, "remember the zebra")
    page.wait_for_function("() => document.querySelector('#messages').innerText.includes('You said: remember the zebra')")
    page.click("[data-act=new]")
    page.wait_for_selector(".empty:text('No messages yet')")
    page.click("[data-tab=history]")
    page.wait_for_selector("#history .item")
    page.fill("#search", "zebra")
    page.click("#search-form button")
    page.wait_for_selector("#history .snippet:has-text('zebra')")
    page.click("#history .item button:text('Open')")
    page.wait_for_function("() => document.querySelector('#messages').innerText.includes('You said: remember the zebra')")
    page.click("[data-tab=usage]")
    page.wait_for_selector("#usage table")
    assert "cost unknown" in page.inner_text("#usage")  # the fake agent reports no cost: never 0


def test_a_worktree_is_diffed_and_merged_from_the_page(page: Any, tmp_path: Path, runtime: Path) -> None:  # noqa: F811
    from tests.plugins.worktrees.test_worktrees import git, make_repo, worktree_agent

    repo = make_repo(tmp_path / "repo")
    server = WebServe(write_config(tmp_path / "deck.toml", worktree_agent("w", repo)))
    try:
        opened(page, server)
        say(page, "fswrite notes.txt from the page")
        page.wait_for_function("() => document.querySelector('#messages').innerText.includes('done')")
        page.click("[data-tab=worktree]")
        page.wait_for_selector("#worktree .diff .add:has-text('from the page')")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#wt-merge")
        page.wait_for_selector(".toast:has-text('merged')")
        assert (repo / "notes.txt").read_text().strip() == "from the page"
        assert "notes.txt" in git(repo, "log", "-1", "--name-only")
    finally:
        server.stop()


def test_the_phone_size_has_no_horizontal_scrolling(browser: Any, served: WebServe) -> None:  # noqa: F811
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    phone = context.new_page()
    phone.set_default_timeout(20000)
    try:
        opened(phone, served)
        phone.fill("#prompt", "big 3000")  # one word of 3000 characters
        phone.press("#prompt", "Enter")  # on a touch screen, a new line: Send sends
        assert phone.input_value("#prompt") == "big 3000\n"
        phone.tap("#send")
        phone.wait_for_function("() => document.querySelectorAll('.msg.agent.done').length === 1")
        phone.fill("#prompt", "```\n" + "code " * 200 + "\n```")
        phone.tap("#send")
        phone.wait_for_function("() => document.querySelectorAll('.msg.agent.done').length === 2")
        phone.fill("#prompt", "perm")
        phone.tap("#send")
        phone.wait_for_selector("#ask[open]")
        widths = phone.evaluate("[document.documentElement.scrollWidth, document.body.scrollWidth, innerWidth]")
        assert widths[0] <= 390 and widths[1] <= 390, widths
        box = phone.locator("#ask").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390
        for control in ("#prompt", "#send", "#ask-options button[data-option=yes]"):
            found = phone.locator(control).bounding_box()
            assert found["x"] >= 0 and found["x"] + found["width"] <= 390 and found["height"] >= 32, control
    finally:
        context.close()


def test_a_page_of_another_origin_cannot_open_the_wire_even_knowing_the_token(page: Any, served: WebServe) -> None:  # noqa: F811
    """A page served on another port of this machine (another origin, not another network: the browser's own
    rules on reaching loopback from the internet play no part) opens a WebSocket with the token: deck refuses it."""
    ws_url = json.dumps(served.ws_url)
    protocols = json.dumps(["deck", "deck.token." + served.token])
    script = (
        f"const ws = new WebSocket({ws_url}, {protocols});"
        "ws.onopen = () => { document.title = 'open'; };"
        "ws.onmessage = () => { document.title = 'got an event'; };"
        "ws.onclose = () => { if (document.title === 'evil') document.title = 'refused'; };"
    ).encode()
    pages = {"/": b'<!doctype html><title>evil</title><script src="/evil.js"></script>', "/evil.js": script}

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/javascript" if self.path.endswith(".js") else "text/html")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        page.wait_for_function("() => document.title !== 'evil'")
        assert page.title() == "refused"
    finally:
        evil.shutdown()
    deadline = time.monotonic() + 10
    while b"another origin" not in served.stderr and time.monotonic() < deadline:
        time.sleep(0.05)  # the server's log line, as its stderr is read
    assert b"refused a web client at 127.0.0.1: the page of another origin may not connect" in served.stderr


def test_a_200000_chunk_answer_is_drawn_a_frame_at_a_time(page: Any, served: WebServe) -> None:  # noqa: F811
    opened(page, served)
    say(page, "stream 200000")
    page.wait_for_function("() => document.querySelector('.msg.agent.done')", timeout=120000)
    page.wait_for_function("() => document.querySelector('.msg.agent.done').innerText.includes('c199999')")
    text = page.locator(".msg.agent").inner_text()
    assert text.count(" c") >= 199990  # every chunk, once
    draws = page.evaluate("deckPage.draws()")
    assert draws < 5000, draws  # coalesced: not one draw per chunk


def test_a_commands_live_output_is_shown_on_its_tool_call(page: Any, tmp_path: Path, runtime: Path) -> None:  # noqa: F811
    """An agent runs a command through deck's terminal/* and embeds it in a tool call: the page shows its
    output as it comes, then how it ended."""
    import sys

    from tests.conftest import AGENTS
    from tests.deck_process import DECK  # noqa: F401 (the same interpreter runs the agent)

    agent = f'[agents.t]\ncommand = {json.dumps([sys.executable, str(AGENTS / "terminal_agent.py")])}\ncwd = {json.dumps(str(tmp_path))}\n'
    server = WebServe(write_config(tmp_path / "deck.toml", agent))
    code = "import time\nfor i in range(4):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\n"
    steps = [
        ["terminal/create", {"command": sys.executable, "args": ["-c", code]}, "t"],
        ["tool", {"id": "run1", "terminal": "$t", "status": "in_progress"}],
        ["terminal/wait_for_exit", {"terminalId": "$t"}],
        ["tool", {"id": "run1", "terminal": "$t", "status": "completed"}],
    ]
    try:
        opened(page, server)
        say(page, json.dumps({"steps": steps}))
        page.wait_for_function("() => [...document.querySelectorAll('.tool pre.terminal')].some(p => p.innerText.includes('tick 1'))")
        page.wait_for_function("() => [...document.querySelectorAll('.tool pre.terminal')].some(p => p.innerText.includes('tick 3'))")
        page.wait_for_selector(".tool .snippet:text('exit 0')")
        assert page.locator(".tool .status.completed").count() == 1
    finally:
        server.stop()


def test_a_request_in_a_tab_out_of_sight_is_a_browser_notification(browser: Any, served: WebServe, terminal: Raw) -> None:  # noqa: F811
    """With the user's leave (Notification.permission granted) and the tab hidden, a permission request shows one."""
    context = browser.new_context()
    context.add_init_script(
        "Object.defineProperty(document, 'hidden', { get: () => true });"
        "window.shown = [];"
        "window.Notification = class { constructor(title, options) { window.shown.push([title, options.body]); }"
        " static get permission() { return 'granted'; } static requestPermission() { return Promise.resolve('granted'); } };"
    )  # the browser's own Notification and visibility, as a user who allowed it and looks elsewhere
    tab = context.new_page()
    try:
        opened(tab, served)
        terminal.call("ChatService.Send", {"agent": "a", "text": "perm"})
        tab.wait_for_function("() => window.shown.length > 0")
        assert tab.evaluate("window.shown") == [["a needs you", "Edit file"]]
    finally:
        context.close()


def test_a_queued_message_is_edited_or_removed_from_the_page(page: Any, served: WebServe, terminal: Raw) -> None:  # noqa: F811
    opened(page, served)
    say(page, "sleep 6")  # long enough for both to queue behind it on a busy machine
    page.wait_for_selector("#cancel:enabled")
    say(page, "one")
    say(page, "two")
    page.wait_for_function("() => document.querySelectorAll('.msg.user.queued .queued-actions').length === 2")
    page.locator(".msg.user.queued", has_text="one").locator("button:text('Remove')").click()
    page.wait_for_selector(".msg.user .meta:has-text('removed from the queue')")
    page.once("dialog", lambda dialog: dialog.accept("zwei"))
    page.locator(".msg.user.queued", has_text="two").locator("button:text('Edit')").click()
    page.wait_for_function("() => document.querySelector('#messages').innerText.includes('You said: zwei')")
    assert [w["text"] for w in terminal.call("ChatService.Queue", {"agent": "a"})] == []
    text = messages_text(page)
    assert "You said: one" not in text and "You said: two" not in text
    assert page.locator(".queued-actions").count() == 0  # nothing waits: no buttons left


def test_the_agents_config_options_and_modes_are_shown_and_set_from_the_page(page: Any, tmp_path: Path, runtime: Path) -> None:  # noqa: F811
    import sys

    requests = tmp_path / "requests.jsonl"
    demo = f'[agents.demo]\ncommand = {json.dumps([sys.executable, "-P", "-m", "deck.demo"])}\n'
    config = agent_block("a", "--mode-option", "--boolean-option", "--requests", str(requests)) + demo
    server = WebServe(write_config(tmp_path / "deck.toml", config))
    try:
        opened(page, server)
        page.click("[data-act=start]")
        page.wait_for_selector("#options select[data-option=model]")
        assert page.input_value("#options select[data-option=model]") == "m1"
        page.select_option("#options select[data-option=model]", "m2")
        page.check("#options input[data-option=fast]")
        page.select_option("#options select[data-option=mode]", "plan")
        page.wait_for_function("() => deckPage.state.conversations.a.configOptions.find(o => o.id === 'mode').currentValue === 'plan'")
        chosen = [json.loads(line)["params"] for line in requests.read_text().splitlines() if '"session/set_config_option"' in line]
        assert [(c["configId"], c["value"]) for c in chosen] == [("model", "m2"), ("fast", True), ("mode", "plan")]
        assert page.locator("#options select[data-option=mode]").count() == 1  # the option, not the legacy modes too
        page.click("#agent-list button[data-agent=demo]")
        page.click("[data-act=start]")
        page.wait_for_selector("#options select[data-option=mode]")  # the demo's legacy session modes
        page.select_option("#options select[data-option=mode]", "plan")
        page.wait_for_function("() => deckPage.state.conversations.demo.modes.currentModeId === 'plan'")
    finally:
        server.stop()


def test_the_page_without_its_token_or_with_a_wrong_one_gets_nothing_and_says_so(browser: Any, served: WebServe) -> None:  # noqa: F811
    for fragment, said in (("", "no token"), ("#token=" + "x" * 43, "refused or unreachable")):
        context = browser.new_context()
        tab = context.new_page()
        try:
            tab.goto(served.base + fragment)
            tab.wait_for_function(f"() => document.querySelector('#link').textContent.includes({said!r})", timeout=30000)
            assert tab.evaluate("() => deckPage.state.agents.size") == 0  # not one agent, not one event
            assert tab.locator("#agent-list li").count() == 0
        finally:
            context.close()
