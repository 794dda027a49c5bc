"""Nothing an agent sends reaches the user's terminal as a control sequence; deck's own problems
reach it as one line each, their tracebacks only in the log file.

Real deck processes with a real hostile agent (tests/agents/escapes_agent.py), through pipes,
a pseudo-terminal and, for the console, tmux.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
from deck.tty import TerminalLog, json_printable, printable
from hypothesis import given
from hypothesis import strategies as st

from tests.agents.escapes_agent import HOSTILE, RAW, SHOWN
from tests.conftest import AGENTS, agent_block
from tests.deck_process import DeckProcess, run_deck  # noqa: F401 - run_deck is a fixture
from tests.frontends.test_line import DECK, line_deck, plain_env, spawn_tty  # noqa: F401 - line_deck is a fixture

ESCAPES_AGENT = AGENTS / "escapes_agent.py"
SGR_BOLD = re.compile(r"\x1b\[1m[^\x1b]*bold")


def escapes_block(name: str = "h", **keys: object) -> str:
    return agent_block(name, command=[sys.executable, str(ESCAPES_AGENT)], **keys)


def assert_no_raw(text: str) -> None:
    for raw in RAW:
        assert raw not in text, (raw, text)


# -- printable ---------------------------------------------------------------------------------


def test_printable_shows_every_control_but_tab_and_newline():
    assert printable(HOSTILE) == SHOWN
    assert printable("\x00\x07\x08\x1b\x7f") == "␀␇␈␛␡"
    assert printable("\x80\x9b\x9f") == "\\x80\\x9b\\x9f"
    assert printable("a\u202ab\u2066c\u2069") == "a\\u202ab\\u2066c\\u2069"
    assert printable("one\r\ntwo\rthree") == "one\ntwo␍three"  # CR LF is a newline, a lone CR is shown
    plain = "tab\tnewline\nunicode é → 日本 👍 and U+200E\u200e stay"
    assert printable(plain) is plain  # the fast path: no copy
    assert all(printable(chr(c)) != chr(c) for c in range(0x20) if chr(c) not in "\t\n")


@given(st.text(alphabet=st.characters(codec="utf-8")))
def test_printable_leaves_no_control_and_changes_nothing_else(text):
    shown = printable(text)
    assert not [c for c in shown if (ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F]
    assert not [c for c in shown if 0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069]
    assert printable(shown) == shown
    assert shown.count("\n") == text.count("\n")  # a CR LF stays the newline it was


def test_json_printable_escapes_what_json_leaves_raw_and_keeps_the_value():
    line = json.dumps({"text": "x\x1b[2J \x9b \u202e é"}, ensure_ascii=False)
    assert "\x1b" not in line  # JSON escapes C0 itself
    safe = json_printable(line)
    assert "\x9b" not in safe and "\u202e" not in safe and "é" in safe
    assert json.loads(safe) == json.loads(line)


# -- the line frontend ---------------------------------------------------------------------------


def test_line_frontend_shows_controls_from_every_agent_field_through_a_pipe(line_deck):
    deck = line_deck(escapes_block(title=f"title {HOSTILE}"))
    deck.send("hostile")
    deck.expect(r"\[h\] thinking: thought " + re.escape(SHOWN))
    deck.expect(r"\[h\] tool " + re.escape(SHOWN) + r" \[completed\]")
    deck.expect(r"\[h\] some \*\*bold\*\* text " + re.escape(SHOWN))
    deck.expect(r"\[h\] windows line")  # a CR LF ending is a line's end, not a control
    deck.expect(r"\[h\] ready")
    deck.send("/logs")
    deck.expect(r"\[h\] \| stderr " + re.escape(SHOWN))
    deck.send("/agents")
    deck.expect(r"\[h\] title " + re.escape(SHOWN) + " · ready  \\(current\\)")
    assert deck.close() == 0
    output = deck.output.decode()
    assert_no_raw(output)
    assert "\x1b" not in output and "\r" not in output


def test_line_frontend_on_a_terminal_keeps_markdown_styling_and_shows_controls(tmp_path):
    child, log = spawn_tty(tmp_path, escapes_block(), columns=200)
    try:
        child.expect("/help lists the commands")
        child.sendline("hostile")
        child.expect("last line")
        child.expect(r"\[h\] \S*ready")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    raw = log.getvalue()
    assert_no_raw(raw)
    assert re.search(r"\r(?!\n)", raw) is None  # no bare CR: every one is the pty's CR LF
    assert SGR_BOLD.search(raw)  # rich's own escapes still come out: **bold** as bold
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    assert f"some bold text {SHOWN}" in plain and f"thinking: thought {SHOWN}" in plain
    assert "windows line␍" not in plain


# -- deck send -----------------------------------------------------------------------------------


def test_deck_send_keeps_the_answer_byte_exact_in_a_pipe_and_shows_controls_on_stderr(tmp_path):
    config = tmp_path / "deck.toml"
    config.write_text(escapes_block())
    done = subprocess.run([*DECK, "send", "--config", str(config), "h", "hostile"], capture_output=True, timeout=30)
    assert done.returncode == 0
    assert done.stdout.decode() == f"some **bold** text {HOSTILE}\nwindows line\r\nlast line\n"  # data, as sent
    # stderr is for reading wherever it goes (often the terminal while stdout is piped): never raw.
    err = done.stderr.decode()
    assert_no_raw(err)
    assert f"thought {SHOWN}" in err and f"tool {SHOWN}" in err


def test_deck_send_on_a_terminal_shows_controls_in_the_answer_and_on_stderr(tmp_path):
    config = tmp_path / "deck.toml"
    config.write_text(escapes_block())
    child = pexpect.spawn(DECK[0], [*DECK[1:], "send", "--config", str(config), "h", "hostile"],
                          env=plain_env(TERM="xterm-256color"), encoding="utf-8", timeout=20)  # fmt: skip
    try:
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    raw = child.before
    assert child.exitstatus == 0, raw
    assert_no_raw(raw)
    assert f"some **bold** text {SHOWN}" in raw and f"thought {SHOWN}" in raw and f"tool {SHOWN}" in raw
    assert "windows line\r\n" in raw and "␍" not in raw.split("windows line")[1]


def test_deck_send_json_on_a_terminal_escapes_c1_and_bidi(tmp_path):
    config = tmp_path / "deck.toml"
    config.write_text(escapes_block())
    child = pexpect.spawn(DECK[0], [*DECK[1:], "send", "--json", "--config", str(config), "h", "hostile"],
                          env=plain_env(TERM="xterm-256color"), encoding="utf-8", timeout=20)  # fmt: skip
    try:
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    raw = child.before
    assert_no_raw(raw)
    texts = [json.loads(line).get("text") for line in raw.splitlines() if '"message:delta"' in line]
    assert f"some **bold** text {HOSTILE}\nwindows line\r\nlast line\n" in texts  # the same JSON values


def test_jsonl_writes_c0_controls_as_json_escapes(tmp_path):
    config = tmp_path / "deck.toml"
    config.write_text(escapes_block())
    request = {"jsonrpc": "2.0", "id": 1, "method": "ChatService.Send", "params": {"agent": "h", "text": "hostile"}}
    done = subprocess.run([*DECK, "run", "--frontend=jsonl", "--config", str(config)], input=json.dumps(request).encode(),
                          capture_output=True, timeout=30)  # fmt: skip
    assert done.returncode == 0
    assert b"\x1b" not in done.stdout and b"\\u001b]52;c;aGk=\\u0007" in done.stdout and b"cr\\rover" in done.stdout
    texts = [json.loads(line).get("text") for line in done.stdout.splitlines()]
    assert f"some **bold** text {HOSTILE}\nwindows line\r\nlast line\n" in texts  # a program gets the text exactly


# -- log records ---------------------------------------------------------------------------------


def log_file() -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "deck" / "deck.log"


@pytest.fixture
def failing_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A third-party plugin, installed on the path of the decks the test starts, that fails on every
    event about a message holding "fail me" (as a plugin with a bug would): its name."""
    site = tmp_path / "site"
    info = site / "deckfail-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: deckfail\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[deck]\ndeckfail = deckfail_plugin\n")
    (site / "deckfail_plugin.py").write_text(
        "import json\nfrom deck import hookimpl\n\n"
        "@hookimpl\ndef deck_event(deck, event):\n"
        "    if event.name == 'message:updated' and 'fail me' in json.dumps(event.payload()):\n"
        "        raise RuntimeError('the plugin broke')\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    return "deckfail"


def test_problems_are_one_line_each_on_stderr_and_tracebacks_in_the_log_file(run_deck, failing_plugin):
    deck: DeckProcess = run_deck(escapes_block(), env=dict(os.environ))
    for n in range(3):
        deck.call("ChatService.Send", {"agent": "h", "text": f"fail me {n}"})
    deck.event("turn:changed", agent="h", busy=False, queued=0)
    deck.close_stdin()
    assert deck.wait(15) == 0
    stderr = deck.stderr.decode()
    lines = stderr.splitlines()
    assert "Traceback" not in stderr and lines, stderr
    assert all(line.startswith("deck: ") and "(details in " in line for line in lines), lines
    assert len(lines) == len(set(lines)) == 1  # many failures, one problem: one line
    assert "plugin deckfail failed in deck_event: RuntimeError('the plugin broke')" in lines[0]
    logged = log_file().read_text()
    assert logged.count("plugin deckfail failed in deck_event") == logged.count("Traceback (most recent call last)") >= 3


def test_malformed_requests_are_refused_with_nothing_on_stderr(run_deck):
    deck: DeckProcess = run_deck(escapes_block())
    deck.call("ChatService.Send", {"agent": "h", "text": "malformed 3"})
    deck.event("message:delta", agent="h", text="done")
    logs = deck.call("AgentService.Logs", {"name": "h"})
    assert any("permission request with no options to choose from refused" in line for line in logs), logs
    deck.close_stdin()
    assert deck.wait(15) == 0
    assert deck.stderr == b""  # refused as ACP errors to the agent: no failure of deck's
    assert not log_file().exists() or "Traceback" not in log_file().read_text()


def test_terminal_log_lines_are_printable_and_bounded(capsys):
    logger = logging.getLogger("deck.test-terminal-log")
    handler = TerminalLog(Path("/state/deck.log"))
    logger.addHandler(handler)
    try:
        logger.warning("agent said %s", f"{HOSTILE}\nsecond line")
        for i in range(300):  # an agent varying what it sends: still a bounded number of lines
            logger.warning("refused %d", i)
        try:
            raise ValueError(HOSTILE)
        except ValueError:
            logger.exception("handling failed")
    finally:
        logger.removeHandler(handler)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"deck: agent said {SHOWN} …"
    assert lines[-1] == "deck: more problems, not shown here (details in /state/deck.log)"
    assert len(lines) == 101 and not [line for line in lines if "handling failed" in line]
    assert_no_raw("\n".join(lines))


@pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux")
def test_console_shows_problems_in_its_status_bar_not_over_the_screen(tmp_path, failing_plugin):
    from tests.frontends.urwid.test_urwid_e2e import Console

    config = tmp_path / "deck.toml"
    config.write_text(escapes_block(title=f"T {HOSTILE}"))
    console = Console(tmp_path, config)
    try:
        console.wait("Message to T")
        console.type("hostile")
        console.keys("Enter")
        screen = console.wait("last line")
        assert "some bold text osc␛]52;c;aGk=␇ clear␛[2J" in screen and "cr␍over bs␈" in screen
        console.type("fail me")
        console.keys("Enter")
        screen = console.wait("plugin deckfail failed in deck_event")
        assert "Traceback" not in screen and "deck: plugin deckfail" in screen
        assert "Traceback" in (tmp_path / "state" / "deck" / "deck.log").read_text()
    finally:
        console.close()
