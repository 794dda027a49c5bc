"""The web page in a real headless Chromium against what an agent may send to wedge it.

A real `deck serve --web` runs a real agent (tests/agents/odd_shapes_agent.py) that asks for
permission with options [], null or of odd shapes, asks questions whose form is null or odd, and
answers with 12,000 nested quotes or a megabyte of unclosed Markdown: the page draws each (or shows
it as text), throws nothing, and draws the next message. Events of shapes deck's server never
relays are fed to the page's own socket handler too, a drawing made to throw is shown as text, and
markdown.js takes time linear in its text.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import browser, page  # noqa: F401 (fixtures)
from tests.conftest import AGENTS, agent_table
from tests.core.remote.test_server import Raw, runtime  # noqa: F401 (a fixture)
from tests.deck_process import write_config
from tests.web_server import WebServe

pytestmark = pytest.mark.timeout(120)

ODD_AGENT = [sys.executable, str(AGENTS / "odd_shapes_agent.py")]


@pytest.fixture
def served(tmp_path: Path, runtime: Path) -> Iterator[WebServe]:  # noqa: F811
    server = WebServe(write_config(tmp_path / "deck.toml", agent_table("h", ODD_AGENT)))
    yield server
    server.stop()


@pytest.fixture
def terminal(served: WebServe) -> Iterator[Raw]:
    """A terminal client on the server's socket: it sends the prompts, the page only draws."""
    from deck.remote.serverdir import socket_path

    client = Raw(socket_path(served.name))
    yield client
    client.close()


def opened(page: Any, served: WebServe) -> Any:  # noqa: F811
    page.goto(served.url)
    page.wait_for_selector("#link.up")
    page.wait_for_selector("#agent-name:text('h')")
    return page


def drawn(page: Any, text: str, timeout: float = 30000) -> None:  # noqa: F811
    page.wait_for_function(
        "(text) => document.querySelector('#messages').innerText.includes(text)", arg=text, timeout=timeout
    )


def goes_on(page: Any, terminal: Raw, n: int) -> None:  # noqa: F811
    """A normal message after the odd one is drawn: the page did not stop."""
    terminal.call("ChatService.Send", {"agent": "h", "text": f"after {n}"})
    drawn(page, f"You said: after {n}")


def buttons(page: Any) -> list[str]:  # noqa: F811
    return page.eval_on_selector_all("#ask-options button", "bs => bs.map(b => b.textContent)")


@pytest.mark.parametrize("options", ["[]", "null", "5"])
def test_a_permission_with_no_options_to_choose_from_never_stops_the_page(page: Any, served: WebServe, terminal: Raw, options: str) -> None:  # noqa: F811
    opened(page, served)
    for n in range(2):
        terminal.call("ChatService.Send", {"agent": "h", "text": f"perm {options}"})
        drawn(page, "no options to choose from")  # deck refused it for the agent: nobody could answer it
        assert not page.evaluate("document.querySelector('#ask').open")
        goes_on(page, terminal, n)


def test_a_permission_with_options_of_odd_shapes_is_asked_and_answered(page: Any, served: WebServe, terminal: Raw) -> None:  # noqa: F811
    opened(page, served)
    options = [
        {"optionId": "ok", "name": {"not": "text"}, "kind": 7}, {"optionId": "no", "name": "Refuse", "kind": ["reject_once"]},
        None, 5, "x", {"optionId": 3, "name": "no id"}, {"name": "none"},
    ]  # fmt: skip
    terminal.call("ChatService.Send", {"agent": "h", "text": "perm " + json.dumps(options)})
    page.wait_for_selector("#ask[open]")
    assert "touch x" in page.inner_text("#ask-title")
    assert buttons(page) == ["ok", "Refuse", "Later"]  # a name that is no text: the option's id
    page.click("#ask-options button[data-option=ok]")
    drawn(page, '"optionId": "ok"')  # what the agent got back
    page.wait_for_function("() => !document.querySelector('#ask').open")
    goes_on(page, terminal, 0)


ODD_FORM = {
    "type": "object",
    "properties": {
        "a": None, "b": {"oneOf": [None, {"const": "x"}, 5, {"title": "no const"}]}, "c": {"enum": "abc", "title": {"x": 1}},
        "d": 5, "e": {"type": "boolean", "title": "Sure?", "default": {"x": 1}}, "f": {"type": "number", "default": [1]},
    },
}  # fmt: skip


@pytest.mark.parametrize(
    "schema",
    [None, ODD_FORM, {"properties": None}, {"properties": [None, 5]}, "form", 5],
    ids=["null", "odd", "no-properties", "list", "text", "number"],
)
def test_a_question_whose_form_is_null_or_of_odd_shapes_never_stops_the_page(page: Any, served: WebServe, terminal: Raw, schema: Any) -> None:  # noqa: F811
    """deck refuses a form it cannot read (the agent gets the error) or asks it, its fields that are no
    object dropped: either way the page draws what comes, a form's odd fields included, and goes on."""
    opened(page, served)
    terminal.call("ChatService.Send", {"agent": "h", "text": "ask " + json.dumps(schema)})
    page.wait_for_function(
        "() => document.querySelector('#ask').open || document.querySelector('#messages').innerText.includes('\"error\"')"
    )
    if page.evaluate("document.querySelector('#ask').open"):
        assert "Tell me" in page.inner_text("#ask-body")
        assert buttons(page) == ["Answer", "Decline", "Later"]
        fields = page.eval_on_selector_all("#ask-body [name]", "xs => xs.map(x => x.name)")
        if schema is ODD_FORM:
            assert {"b", "c", "e", "f"} <= set(fields), fields
            assert page.eval_on_selector_all("#ask-body select[name=b] option", "os => os.map(o => o.value)") == ["x"]
            assert page.inner_text("#ask-body").count("Sure?") == 1
        else:
            assert fields == []
        page.click("#ask-options button:text('Decline')")
        drawn(page, '"action": "decline"')
    else:
        assert schema not in (None, ODD_FORM)  # these two are forms
        drawn(page, "requestedSchema")  # the error the agent got back
    goes_on(page, terminal, 0)


def test_12000_nested_quotes_are_drawn_and_the_page_goes_on(page: Any, served: WebServe, terminal: Raw) -> None:  # noqa: F811
    opened(page, served)
    terminal.call("ChatService.Send", {"agent": "h", "text": "quotes 12000"})
    page.wait_for_function(
        "() => [...document.querySelectorAll('.msg.agent.done')].some(m => m.innerText.includes('deep'))"
    )
    depth, innermost = page.evaluate("""() => {
        let depth = 0, quote = document.querySelector('.msg.agent blockquote'), last = null;
        while (quote) { depth++; last = quote; quote = quote.querySelector(':scope > blockquote'); }
        return [depth, last.innerText];
    }""")
    assert 2 <= depth <= 16, depth  # as quotes up to a depth, the rest as its text
    assert innermost.startswith("> > >") and innermost.endswith("deep")
    goes_on(page, terminal, 0)


def test_a_megabyte_of_unclosed_markdown_is_drawn_in_seconds(page: Any, served: WebServe, terminal: Raw) -> None:  # noqa: F811
    """250,000 `**a ` (a bold opened each time, never closed): it took minutes to draw, every later message
    waiting behind it; drawn as Markdown in well under a second, 15 s allowed on a busy machine."""
    opened(page, served)
    terminal.call("ChatService.Send", {"agent": "h", "text": 'repeat 250000 "**a "'})
    done = "() => document.querySelector('.msg.agent.done p')"  # drawn as Markdown, the message done
    page.wait_for_function(done, timeout=15000)
    assert page.evaluate("document.querySelector('.msg.agent.done p').textContent.length") == 1_000_000
    goes_on(page, terminal, 0)


def feed(page: Any, *lines: Any) -> None:  # noqa: F811
    """Lines given to the page's own socket handler, as if its server had sent them: a dict is an event
    (a `seq` just above the page's, so the server's next events are still applied), anything else a line as it is."""
    page.evaluate(
        """(lines) => {
            const seq = deckPage.state.seq;
            const text = lines.map((x, i) => typeof x === "string" ? x : JSON.stringify({ ...x, seq: seq + (i + 1) / 1000 }));
            deckPage.socket().onmessage({ data: text.join("\\n") });
        }""",
        list(lines),
    )


def test_events_of_shapes_the_server_never_relays_never_stop_the_page(page: Any, served: WebServe, terminal: Raw) -> None:  # noqa: F811
    """deck's server refuses a permission request with nothing to choose from and makes a null form {}:
    the page does not count on it. Requests, messages and changes of any shape are drawn, or shown as
    text, one after another, and the page goes on drawing what the server sends."""
    opened(page, served)
    terminal.call("ChatService.Send", {"agent": "h", "text": "hello"})
    drawn(page, "You said: hello")
    feed(page, "null", "5", '"text"', "[null, 1]", "{not json", '{"event": null}', '{"event": "__proto__"}',
         '{"event": "constructor"}', '{"event": "toString"}')  # fmt: skip
    requests = [
        ({"event": "permission:requested", "id": "p1", "agent": "h", "toolCall": None, "options": None}, ["Later"]),
        ({"event": "permission:requested", "id": "p2", "agent": "h", "toolCall": 5, "options": []}, ["Later"]),
        ({"event": "permission:requested", "id": "p3", "agent": "h", "options": 5}, ["Later"]),
        ({"event": "permission:requested", "id": "p4", "agent": "h", "options": {"optionId": "x"}}, ["Later"]),
        (
            {
                "event": "permission:requested",
                "id": "p5",
                "agent": "h",
                "options": [None, 5, "x", {"optionId": 3}, {"optionId": "y", "kind": 7, "name": None}],
                "toolCall": {
                    "title": ["x"],
                    "diffs": [None, {"path": 5, "oldText": None, "newText": 7}],
                    "input": {"a": 1},
                },
            },
            ["y", "Later"],
        ),
        (
            {"event": "question:requested", "id": "q1", "agent": "h", "message": None, "schema": None},
            ["Answer", "Decline", "Later"],
        ),
        (
            {
                "event": "question:requested",
                "id": "q2",
                "agent": "h",
                "message": {"x": 1},
                "url": 5,
                "schema": {"properties": {"a": None, "b": {"oneOf": 5, "enum": {"x": 1}}, "c": {"oneOf": [None]}}},
            },
            ["Answer", "Decline", "Later"],
        ),
    ]
    for request, expected in requests:
        feed(page, request)
        page.wait_for_selector("#ask[open]")
        assert buttons(page) == expected, request
        if expected == ["Later"]:
            assert "The agent offers no option to choose from." in page.inner_text("#ask-body")
        resolved = "permission:resolved" if request["event"] == "permission:requested" else "question:resolved"
        feed(page, {"event": resolved, "id": request["id"], "agent": "h"})
        page.wait_for_function("() => !document.querySelector('#ask').open")
    odd_parts = [
        None, 5, "text", {"type": "plan", "entries": [None, 5, {"content": {"x": 1}, "status": 5}, {"content": "step one"}]},
        {"type": "tool", "title": None, "status": {"x": 1}, "locations": [None, {"path": 5, "line": {}}], "diffs": 5,
         "terminals": [None, {"terminalId": 5, "exitStatus": 5, "output": {"x": 1}}], "output": {"x": 1}},
        {"type": "text", "text": None}, {"type": ["text"], "text": "a list for a type"}, {"type": "thought", "text": 5},
        {"type": "text", "text": "> " * 12000 + "deepest"},
    ]  # fmt: skip
    feed(
        page,
        {"event": "message:updated", "agent": "h", "message": None},
        {
            "event": "message:updated",
            "agent": "h",
            "message": {"id": "m1", "role": {"x": 1}, "parts": None, "done": True},
        },
        {
            "event": "message:updated",
            "agent": "h",
            "message": {
                "id": "m2",
                "role": "agent",
                "done": True,
                "parts": odd_parts,
                "error": {"x": 1},
                "durationMs": "long",
            },
        },
        {"event": "message:delta", "agent": "h", "messageId": "m2", "index": "__proto__", "kind": "text", "text": "x"},
        {"event": "message:delta", "agent": "h", "messageId": "m2", "index": 1e9, "kind": "text", "text": "x"},
        {"event": "message:delta", "agent": "h", "messageId": "m2", "index": 5, "kind": "text", "text": " and more"},
        {"event": "conversation:changed", "agent": "h", "field": "__proto__", "value": {"messages": 5}},
        {
            "event": "conversation:changed",
            "agent": "h",
            "field": "configOptions",
            "value": [
                None,
                5,
                {
                    "id": "model",
                    "name": {"x": 1},
                    "options": [None, {"group": "g", "options": 5}, {"value": "m1", "name": None}],
                },
            ],
        },
        {
            "event": "conversation:changed",
            "agent": "h",
            "field": "modes",
            "value": {"availableModes": [None, 5, {"id": "plan", "name": 7}]},
        },
        {"event": "usage:changed", "agent": "h", "usage": {"size": "x", "used": None, "cost": 5}},
    )
    drawn(page, "deepest")
    text = page.inner_text(".msg[data-id=m2]")
    assert "step one" in text and "a list for a type" in text and "and more" in text
    models = page.eval_on_selector_all("#options select[data-option=model] option", "os => os.map(o => o.value)")
    assert models == ["m1"]
    assert page.locator(".msg[data-id=m1]").count() == 1
    goes_on(page, terminal, 0)  # the server's events after these are applied and drawn


def test_a_message_whose_drawing_throws_is_shown_as_text_and_the_next_is_drawn(page: Any, served: WebServe, terminal: Raw) -> None:  # noqa: F811
    """Whatever a drawing may still throw on: the page's markdown.js is made to throw on one text (the
    only thing here not as shipped); that message is shown as its text, the next ones as Markdown."""
    opened(page, served)
    logged: list[str] = []
    page.on("console", lambda m: logged.append(m.text) if m.type == "error" else None)
    page.evaluate("""() => {
        const render = deckMarkdown.render;
        deckMarkdown.render = (text) => { if (text.includes("boom")) throw new Error("a drawing that fails"); return render(text); };
    }""")
    terminal.call("ChatService.Send", {"agent": "h", "text": "boom **x**"})
    drawn(page, "You said: boom **x**")  # as written: no Markdown
    assert page.locator(".msg.agent pre.plain", has_text="You said: boom **x**").count() == 1
    goes_on(page, terminal, 0)
    terminal.call("ChatService.Send", {"agent": "h", "text": "**bold** again"})
    page.wait_for_selector(".msg.agent strong:text('bold')")
    assert any("could not be drawn, shown as text" in line for line in logged), logged


#: Text that opens what it never closes, each of which took time growing with the square of its
#: length (4-5 s at 128,000 characters); quotes nested as deep as the text is long; a long list.
UNCLOSED = ["**a ", "~~a ", "__a ", "[a", "*a ", "_a ", "`a ", "``a ", "[a](", "http://.", "> ", "  - a\n"]


def test_markdown_takes_time_linear_in_the_size_of_what_it_draws(page: Any, served: WebServe) -> None:  # noqa: F811
    """Each text at 16,000 and 256,000 characters, rendered by the page's markdown.js: sixteen times the
    text takes less than 64 times as long — a square law would take 256 times (the best of 5 runs each,
    each run repeated to last 10 ms or more, small and big in turn: robust on a busy machine)."""
    opened(page, served)
    times = page.evaluate(
        """(units) => {
            const out = {};
            for (const unit of units) {
                const texts = [16000, 256000].map((n) => unit.repeat(Math.ceil(n / unit.length)).slice(0, n));
                const once = (text) => { const t = performance.now(); deckMarkdown.render(text); return performance.now() - t; };
                const repeat = Math.max(1, Math.ceil(10 / Math.max(once(texts[0]), 0.1)));
                const best = [Infinity, Infinity];
                for (let run = 0; run < 5 && (run === 0 || best[1] < 1000); run++) {
                    texts.forEach((text, i) => {
                        const t = performance.now();
                        for (let r = 0; r < repeat; r++) deckMarkdown.render(text);
                        best[i] = Math.min(best[i], (performance.now() - t) / repeat);
                    });
                }
                out[unit] = best;
            }
            return out;
        }""",
        UNCLOSED,
    )
    ratios = {unit: round(big / small, 2) for unit, (small, big) in times.items()}
    assert all(ratio < 64 for ratio in ratios.values()), (ratios, times)
