"""ACP terminal/*: real commands run for a real fake agent (tests/agents/terminal_agent.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from deck.agent import terminals
from deck.agent.terminals import Output
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import AGENTS, agent_table
from tests.deck_process import alive, run_deck, wait_dead, write_config  # noqa: F401  (run_deck: fixture)
from tests.turns import ask

pytestmark = pytest.mark.anyio

AGENT = AGENTS / "terminal_agent.py"
PY = sys.executable


def agent(name: str = "a", *flags: str, **keys: Any) -> str:
    return agent_table(name, [PY, str(AGENT), *flags], **keys)


def create(command: list[str], name: str = "t", **extra: Any) -> list:
    return ["terminal/create", {"command": command[0], "args": command[1:], **extra}, name]


def on(method: str, name: str = "t") -> list:
    return [f"terminal/{method}", {"terminalId": f"${name}"}]


async def script(deck, rec, *steps: list, agent: str = "a", timeout: float = 20.0) -> list[dict]:
    """Run `steps` in the agent; its answers, one per request."""
    async with asyncio.timeout(timeout):
        reply = await ask(deck, rec, json.dumps({"steps": list(steps)}), agent)
    return json.loads(reply.text)


def py(code: str) -> list[str]:
    return [PY, "-c", code]


async def test_create_output_wait_release(make_deck, tmp_path):
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    answers = await script(
        deck, rec,
        create(py("import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)")),
        on("wait_for_exit"), on("output"), on("release"), on("output"),
    )  # fmt: skip
    created, waited, output, released, gone = answers
    assert created["result"]["terminalId"].startswith("term-")
    assert waited == {"result": {"exitCode": 3, "signal": None}}
    assert output["result"]["output"].split() == ["out", "err"]  # stdout and stderr in one stream
    assert output["result"]["truncated"] is False and output["result"]["exitStatus"] == {"exitCode": 3, "signal": None}
    assert released == {"result": {}}
    assert "unknown terminal" in gone["error"]["message"]


async def test_kill_a_running_command_keeps_its_output(make_deck, tmp_path):
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    code = "import time; print('started', flush=True); time.sleep(60)"
    answers = await script(
        deck, rec, create(py(code)), ["sleep", 0.5], on("kill"), on("wait_for_exit"), on("output"), on("release"),
    )  # fmt: skip
    assert answers[1] == {"result": {}}
    assert answers[2] == {"result": {"exitCode": None, "signal": "SIGTERM"}}
    assert answers[3]["result"]["output"] == "started\n"


async def test_a_command_ignoring_sigterm_still_dies(make_deck, tmp_path):
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    answers = await script(deck, rec, create(py(code)), ["sleep", 0.5], on("kill"), on("wait_for_exit"))
    assert answers[2] == {"result": {"exitCode": None, "signal": "SIGKILL"}}


async def test_env_is_the_agent_s_plus_the_given_one(make_deck, tmp_path, monkeypatch):
    monkeypatch.setenv("FROM_DECK", "deck")
    deck, rec = make_deck(agent(cwd=str(tmp_path)) + 'env = { FROM_CONFIG = "config" }\n')
    code = ("import os; e = os.environ; print(e['FROM_DECK'], e['FROM_CONFIG'], e['GIVEN'], os.getcwd(), "
            "e['DECK_AGENT_TOKEN'] != 'forged')")  # fmt: skip
    env = [{"name": "GIVEN", "value": "given"}, {"name": "DECK_AGENT_TOKEN", "value": "forged"}]
    answers = await script(deck, rec, create(py(code), env=env), on("wait_for_exit"), on("output"))
    # The token that finds the command again if deck is killed is deck's, whatever the agent gives.
    assert answers[2]["result"]["output"].split() == ["deck", "config", "given", str(tmp_path.resolve()), "True"]


async def test_cwd_is_confined_to_the_agent_s(make_deck, tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    (root / "inside").symlink_to(root / "sub")
    deck, rec = make_deck(agent(cwd=str(root)))
    pwd = py("import os; print(os.getcwd())")
    answers = await script(
        deck, rec,
        create(pwd, cwd=str(root / "sub")), on("wait_for_exit"), on("output"),
        create(pwd, "u", cwd=str(root / "inside")), on("wait_for_exit", "u"), on("output", "u"),
        create(pwd, "x", cwd=str(outside)),
        create(pwd, "y", cwd=str(root / "escape")),
        create(pwd, "z", cwd=str(root / "sub" / ".." / "..")),
        create(pwd, "w", cwd="relative"),
        create(pwd, "v", cwd=str(root / "missing")),
    )  # fmt: skip
    assert answers[2]["result"]["output"] == f"{root / 'sub'}\n"
    assert answers[5]["result"]["output"] == f"{root / 'sub'}\n"  # a symlink that stays inside is followed
    for refused in answers[6:9]:
        assert "outside the agent's working directory" in refused["error"]["message"], refused
    assert "absolute" in answers[9]["error"]["message"]
    assert "no such directory" in answers[10]["error"]["message"]
    assert any("terminal/create refused" in line for line in deck.agent("a").logs)


async def test_output_byte_limit_keeps_the_end_at_a_character_boundary(make_deck, tmp_path):
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    # 10 MB of three-byte characters, then a known end: 1 KiB is not a multiple of 3.
    code = "import sys; w = sys.stdout.buffer.write; [w('€'.encode() * 100_000) for _ in range(35)]; w(b'END')"
    answers = await script(deck, rec, create(py(code), outputByteLimit=1024), on("wait_for_exit"), on("output"))
    result = answers[2]["result"]
    assert result["truncated"] is True
    assert result["output"].endswith("€END") and set(result["output"][:-3]) == {"€"}
    assert 1024 - 3 <= len(result["output"].encode()) <= 1024
    kept = deck.agent("a").terminals.terminals[answers[0]["result"]["terminalId"]]
    assert len(kept.output) == 1024  # what deck holds of the 10 MB, whatever was asked
    live = "".join(e["text"] for e in rec.named("terminal:output", "a"))
    assert live.endswith("€END") and len(rec.named("terminal:output", "a")) < 1000


def test_output_is_bounded_and_cut_at_characters():
    out = Output(10)
    for _ in range(1000):
        out.add("aé€😀".encode())
    assert len(out) == sum(map(len, out.chunks)) == 10 and out.truncated
    text = out.text(final=True)
    assert "\ufffd" not in text and len(text.encode()) <= 10
    running = Output(100)
    running.add("ab€".encode()[:-1])  # a character cut by a read
    assert running.text(final=False) == "ab"
    assert running.text(final=True) == "ab\ufffd"


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(0, 300), reads=st.lists(st.binary(max_size=120), max_size=40))
def test_output_keeps_exactly_the_last_limit_bytes_read(limit, reads):
    """Whatever the reads, what is kept is the end of what was read, `limit` bytes at most, and
    `truncated` says whether anything was dropped."""
    out = Output(limit)
    for data in reads:
        out.add(data)
    everything = b"".join(reads)
    kept = b"".join(out.chunks)
    assert kept == everything[len(everything) - min(limit, len(everything)) :] and len(out) == len(kept)
    assert out.truncated == (len(everything) > limit)


async def test_terminals_off_refuses_and_is_not_advertised(make_deck, tmp_path):
    init = tmp_path / "init.json"
    deck, rec = make_deck(agent("a", "--initialize", str(init), cwd=str(tmp_path), terminals=False))
    answers = await script(deck, rec, create(py("print(1)")))
    assert "terminals are off for a" in answers[0]["error"]["message"]
    caps = json.loads(init.read_text())["clientCapabilities"]
    assert caps["terminal"] is False and caps["_meta"] == {"terminal_output": True}


async def test_terminals_on_is_advertised(make_deck, tmp_path):
    init = tmp_path / "init.json"
    deck, rec = make_deck(agent("a", "--initialize", str(init), cwd=str(tmp_path)))
    await deck.agent("a").start()
    assert json.loads(init.read_text())["clientCapabilities"]["terminal"] is True


async def test_too_many_terminals_are_refused(make_deck, tmp_path, monkeypatch):
    monkeypatch.setattr(terminals, "MAX_TERMINALS", 2)
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    sleep = py("import time; time.sleep(60)")
    answers = await script(deck, rec, create(sleep, "a"), create(sleep, "b"), create(sleep, "c"), on("release", "a"),
                           create(sleep, "d"))  # fmt: skip
    assert "too many terminals: 2 are open" in answers[2]["error"]["message"]
    assert "result" in answers[4]


def daemon_code(pidfile: Path) -> str:
    """A command that double-forks a setsid daemon (writing its pid), then exits."""
    return (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)\n"
        "    os._exit(0)\n"
        "time.sleep(0.3); print('spawned', flush=True)\n"
    )


async def wait_pid(pidfile: Path) -> int:
    async with asyncio.timeout(5):
        while not pidfile.exists() or not pidfile.read_text():
            await asyncio.sleep(0.02)
    return int(pidfile.read_text())


async def test_a_daemon_forked_by_a_command_dies_at_release(make_deck, tmp_path):
    pidfile = tmp_path / "daemon.pid"
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    answers = await script(deck, rec, create(py(daemon_code(pidfile))), on("wait_for_exit"))
    assert answers[1] == {"result": {"exitCode": 0, "signal": None}}
    daemon = await wait_pid(pidfile)
    assert alive(daemon)  # the command exited, its daemon lives on until the release
    await script(deck, rec, on_id("release", answers[0]))
    assert wait_dead([daemon]) == []


def on_id(method: str, created: dict) -> list:
    return [f"terminal/{method}", {"terminalId": created["result"]["terminalId"]}]


async def test_terminals_die_when_the_agent_stops(make_deck, tmp_path):
    pidfile = tmp_path / "daemon.pid"
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    sleep = py("import time; print('x', flush=True); time.sleep(60)")
    answers = await script(deck, rec, create(sleep), create(py(daemon_code(pidfile)), "d"))
    command = deck.agent("a").terminals.terminals[answers[0]["result"]["terminalId"]].process.pid
    daemon = await wait_pid(pidfile)
    assert alive(command) and alive(daemon)
    await deck.agent("a").stop()
    assert wait_dead([command, daemon]) == []
    exited = {e["terminalId"]: e["exitStatus"] for e in rec.named("terminal:exited", "a")}
    assert exited[answers[0]["result"]["terminalId"]] == {"exitCode": None, "signal": "SIGTERM"}


async def test_cancel_while_a_command_runs(make_deck, tmp_path):
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    sleep = py("import time; print('working', flush=True); time.sleep(60)")
    steps = [create(sleep), ["tool", {"id": "c1", "terminal": "$t"}], on("wait_for_exit"), on("release")]
    message = deck.chat.turns.send("a", json.dumps({"steps": steps}))
    await rec.wait_event("terminal:output", agent="a", text="working\n")
    deck.chat.cancel("a")
    reply = await rec.wait(lambda r: next((m for m in deck.chat.conversation("a").messages
                                            if m.role == "agent" and m.done), None))  # fmt: skip
    assert message.id != reply.id and reply.stop_reason == "cancelled"
    exited = rec.named("terminal:exited", "a")
    assert [e["exitStatus"] for e in exited] == [{"exitCode": None, "signal": "SIGTERM"}]


async def test_live_output_reaches_the_tool_part(make_deck, tmp_path):
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    code = "import time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.1)"
    steps = [create(py(code)), ["tool", {"id": "c1", "terminal": "$t"}], on("wait_for_exit"),
             ["tool", {"id": "c1", "terminal": "$t", "status": "completed"}], on("release")]  # fmt: skip
    await script(deck, rec, *steps)
    live = rec.named("terminal:output", "a")
    assert "".join(e["text"] for e in live) == "line 0\nline 1\nline 2\n"
    assert len(live) >= 2  # as it came, not all at the end
    terminal_id = live[0]["terminalId"]
    assert rec.named("terminal:exited", "a") == [
        {"agent": "a", "terminalId": terminal_id, "exitStatus": {"exitCode": 0, "signal": None}}
    ]
    snapshot = deck.chat.conversation("a").snapshot()
    tool = next(p for m in snapshot["messages"] for p in m["parts"] if p["type"] == "tool")
    assert tool["terminals"] == [
        {"terminalId": terminal_id, "output": "line 0\nline 1\nline 2\n", "exitStatus": {"exitCode": 0, "signal": None}}
    ]


async def test_a_flood_is_coalesced_into_few_events(make_deck, tmp_path):
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    code = "import sys\nfor i in range(20000):\n    sys.stdout.write(f'{i}\\n'); sys.stdout.flush()"
    await script(deck, rec, create(py(code)), on("wait_for_exit"), on("output"))
    live = rec.named("terminal:output", "a")
    assert "".join(e["text"] for e in live).endswith("19999\n")
    assert len(live) < 2000  # one per ~30 ms, not one per write


async def test_codex_shape_of_meta_terminal_streams(make_deck, tmp_path):
    """codex-acp: tool_call with terminal content and `terminal_info`, updates with `terminal_output` chunks,
    a last update with `terminal_exit`."""
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    call = {"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "ls", "kind": "execute",
            "status": "in_progress", "content": [{"type": "terminal", "terminalId": "call_1"}],
            "_meta": {"terminal_info": {"terminal_id": "call_1", "cwd": str(tmp_path)}}}  # fmt: skip

    def chunk(data: str) -> list:
        return ["update", {"sessionUpdate": "tool_call_update", "toolCallId": "call_1",
                           "_meta": {"terminal_output": {"terminal_id": "call_1", "data": data}}}]  # fmt: skip

    end = {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "failed",
           "_meta": {"terminal_exit": {"terminal_id": "call_1", "exit_code": 2, "signal": None}}}  # fmt: skip
    await script(deck, rec, ["update", call], chunk("a\n"), chunk("b\x1b]52;c;aGk=\x07\n"), ["update", end])
    assert [e["text"] for e in rec.named("terminal:output", "a")] == ["a\n", "b\x1b]52;c;aGk=\x07\n"]
    assert rec.named("terminal:exited", "a")[0]["exitStatus"] == {"exitCode": 2, "signal": None}
    tool = next(p for m in deck.chat.conversation("a").snapshot()["messages"] for p in m["parts"] if p["type"] == "tool")
    assert tool["status"] == "failed"
    assert tool["terminals"][0]["output"] == "a\nb\x1b]52;c;aGk=\x07\n"
    assert tool["terminals"][0]["exitStatus"] == {"exitCode": 2, "signal": None}


# -- a real deck process ------------------------------------------------------------------------------


def jsonl_script(deck, *steps: list) -> None:
    deck.call("ChatService.Send", {"agent": "a", "text": json.dumps({"steps": list(steps)})})


def test_live_output_through_the_jsonl_bridge_and_nothing_outlives_deck(run_deck, tmp_path):
    pidfile = tmp_path / "daemon.pid"
    deck = run_deck(agent(cwd=str(tmp_path)), "--stay")
    code = "import time; print('tick', flush=True); time.sleep(60)"
    jsonl_script(deck, create(py(daemon_code(pidfile)), "d"), create(py(code)), ["tool", {"id": "c", "terminal": "$t"}])
    live = deck.event("terminal:output", agent="a", text="tick\n")
    assert live["terminalId"].startswith("term-") and isinstance(live["seq"], int)
    deck.event("turn:changed", agent="a", busy=False)
    tool = [d["part"] for d in deck.events("message:delta", agent="a") if d["kind"] == "tool"][-1]
    assert tool["terminals"][0]["terminalId"] == live["terminalId"]
    deck.wait_for(lambda _: pidfile.exists() and pidfile.read_text())
    pids = [*deck.descendants(), int(pidfile.read_text())]
    deck.signal(signal.SIGTERM)
    assert deck.wait(15) == 128 + signal.SIGTERM
    assert wait_dead(pids) == []


def test_nothing_outlives_a_deck_killed_with_sigkill(run_deck, tmp_path):
    pidfile = tmp_path / "daemon.pid"
    deck = run_deck(agent(cwd=str(tmp_path)), "--stay")
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('tick', flush=True); time.sleep(60)"
    jsonl_script(deck, create(py(daemon_code(pidfile)), "d"), create(py(code)))
    deck.event("turn:changed", agent="a", busy=False)
    deck.wait_for(lambda _: pidfile.exists() and pidfile.read_text())
    pids = [*deck.descendants(), int(pidfile.read_text())]
    assert len(pids) >= 3
    deck.signal(signal.SIGKILL)
    assert wait_dead(pids) == []


# -- frontends ------------------------------------------------------------------------------------------

HOSTILE = "\x1b[31mred\x1b[0m \x1b]52;c;aGk=\x07clip \x1b[2Jclear \x1b[999999999999;1Hhuge \x9b2Jc1\n"


def hostile_steps() -> list:
    code = f"import sys; sys.stdout.write({HOSTILE!r}); sys.stdout.write('partial')"
    return [create(py(code)), ["tool", {"id": "c", "terminal": "$t"}], on("wait_for_exit"), on("release")]


def test_line_mode_shows_output_indented_with_no_escape_in_a_pipe(tmp_path):
    from tests.frontends.test_line import LineDeck

    config = write_config(tmp_path / "deck.toml", agent(cwd=str(tmp_path)))
    deck = LineDeck(config)
    try:
        deck.expect(r"\[deck\] talking to a; /help lists the commands")
        deck.send("@a " + json.dumps({"steps": hostile_steps()}))
        deck.expect(r"\[a\]     │ red clip clear huge c1")
        deck.expect(r"\[a\]     │ partial")  # the last line, unended, once the command exited
        deck.expect(r"\[a\]     └ exit code 0")
        assert deck.close() == 0
        assert b"\x1b" not in deck.output and b"\x9b" not in deck.output.replace("\\x9b".encode(), b"")
    finally:
        if deck.proc.poll() is None:
            deck.proc.kill()


def test_line_mode_on_a_terminal_keeps_only_the_colours(tmp_path):
    import pexpect

    from tests.frontends.test_line import spawn_tty

    child, log = spawn_tty(tmp_path, agent(cwd=str(tmp_path)), columns=120)
    try:
        child.expect("/help lists the commands")
        child.sendline("@a " + json.dumps({"steps": hostile_steps()}))
        child.expect("exit code 0")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    raw = log.getvalue()
    line = next(x for x in raw.splitlines() if "clip" in x and "│" in x)
    assert "\x1b[31mred" in line  # the command's colour, as rich writes it
    shown = "\n".join(x for x in raw.splitlines() if "│" in x or "└" in x)
    assert "partial" in shown
    for hostile in ("\x1b]52", "\x1b[2J", "999999999999", "\x9b", "\x07"):
        assert hostile not in shown


async def test_console_shows_a_live_box_in_the_tool_call_with_hostile_ansi_neutralised(make_deck, tmp_path):
    from deck.frontends.urwid.app import FPS

    from tests.frontends.urwid.test_urwid_widgets import canvas_text, console

    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    app = await console(deck)
    size = (120, 50)
    try:
        lines = "".join(f"\x1b[32mline {i}\x1b[0m\n" for i in range(30))
        code = f"import sys, time; sys.stdout.write({HOSTILE!r}); sys.stdout.flush(); time.sleep(0.2); sys.stdout.write({lines!r})"
        steps = [create(py(code)), ["tool", {"id": "c", "title": "hostile", "terminal": "$t"}], ["sleep", 0.1],
                 on("wait_for_exit"), on("release")]  # fmt: skip
        started = asyncio.get_running_loop().time()
        frames = app.frames
        await script(deck, rec, *steps)
        await asyncio.sleep(2 / FPS)
        elapsed = asyncio.get_running_loop().time() - started
        assert app.frames - frames <= FPS * elapsed + 3
        screen = canvas_text(app.root, *size)
        assert "│ line 29" in screen and "│ line 20" in screen and "│ line 19" not in screen  # the last 10 lines
        assert "… 21 earlier lines · Ctrl-E to show" in screen and "└ exit code 0" in screen
        app.conversation.toggle_all("diffs")  # the tool call's expand toggle shows all that is kept
        screen = canvas_text(app.root, *size)
        assert "│ red clip clear huge c1" in screen and "│ line 0" in screen
        for hostile in ("\x1b", "\x9b", "\x07", "999999999999"):
            assert hostile not in screen
        view = app.conversation
        canvas = view.render(size, focus=False)
        attrs = {a for row in canvas.content() for a, _cs, _t in row}
        assert "sgr green" in attrs and "sgr red" in attrs  # the command's own colours, as the console's attributes
    finally:
        app.detach()


@pytest.mark.parametrize(
    ("raw", "plain", "coloured"),
    [
        ("a\x1b]52;c;aGk=\x07b", "ab", "ab"),  # OSC 52: writes the clipboard
        ("a\x1b]52;c;aGk=\x1b\\b", "ab", "ab"),  # the same, ended by ST
        ("x\x1b[2Jy\x1b[Hz", "xyz", "xyz"),  # clear the screen, move the cursor
        ("\x1b[999999999999999999999;1Hz", "z", "z"),  # CSI with huge parameters
        ("\x1b[31mred\x1b[0m", "red", "\x1b[31mred\x1b[0m"),  # SGR: kept only where colours are shown
        ("\x1b[38;5;99999m!", "!", "!"),  # an SGR with a huge parameter is dropped too
        ("u\x1b]0;title never ended", "u", "u"),  # an unterminated OSC is dropped whole
        ("p\x1bPq#0;2;0;0;0\x1b\\q", "pq", "pq"),  # DCS (sixel)
        ("\x9b2Jc1 \x9d0;t\x9c.", "c1 .", "c1 ."),  # C1 CSI, OSC and ST
        ("e\x1bcf", "ef", "ef"),  # ESC c: resets the terminal
        ("10%\r20%\r\nok", "20%\nok", "20%\nok"),  # a progress bar: what a CR overwrites goes
        ("bell\x07 back\x08 bidi\u202e", "bell␇ back␈ bidi\\u202e", "bell␇ back␈ bidi\\u202e"),
    ],
)
def test_terminal_text_neutralises_every_control_sequence(raw, plain, coloured):
    from deck.tty import terminal_text

    assert terminal_text(raw) == plain
    assert terminal_text(raw, keep_sgr=True) == coloured


def test_sgr_spans_map_basic_colours():
    from deck.tty import sgr_spans

    assert sgr_spans("\x1b[1;31mred\x1b[0m plain \x1b[92mgreen\x1b[39m") == [
        ("red", True, "red"), (None, False, " plain "), ("light green", False, "green")
    ]  # fmt: skip


async def test_a_terminal_no_tool_call_embeds_shows_on_the_running_one(make_deck, tmp_path):
    """As fast-agent does: a tool call in progress, then terminal/create, the output never embedded."""
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    call = {"sessionUpdate": "tool_call", "toolCallId": "x1", "title": "execute", "kind": "execute", "status": "in_progress"}
    await script(deck, rec, ["update", call], create(py("print('hi')")), on("wait_for_exit"), on("release"))
    tool = next(p for m in deck.chat.conversation("a").snapshot()["messages"] for p in m["parts"] if p["type"] == "tool")
    (terminal,) = tool["terminals"]
    assert terminal["output"] == "hi\n" and terminal["exitStatus"] == {"exitCode": 0, "signal": None}


async def test_a_flood_is_read_at_a_bounded_pace(make_deck, tmp_path, monkeypatch):
    """Past READ_BUDGET bytes between two live sends, reading pauses: the command waits on its pipe."""
    monkeypatch.setattr(terminals, "READ_BUDGET", 64 * 1024)
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    code = "import sys; w = sys.stdout.buffer.write\nfor _ in range(3 * 1024): w(b'y' * 1023 + b'\\n')"
    answers = await script(deck, rec, create(py(code)), on("wait_for_exit"), on("output"))
    assert answers[1] == {"result": {"exitCode": 0, "signal": None}}
    assert answers[2]["result"]["output"].endswith("y\n")
    assert len(rec.named("terminal:output", "a")) >= 15  # 3 MB in windows of about 128 KiB at most


async def test_console_redraws_stay_coalesced_during_a_flood(make_deck, tmp_path):
    from deck.frontends.urwid.app import FPS

    from tests.frontends.urwid.test_urwid_widgets import canvas_text, console

    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    app = await console(deck)
    try:
        code = "import sys\nfor i in range(200_000): sys.stdout.write(f'\\x1b[33mrow {i}\\x1b[0m\\n')"
        steps = [create(py(code)), ["tool", {"id": "c", "terminal": "$t"}], on("wait_for_exit"), on("release")]
        loop = asyncio.get_running_loop()
        started, frames = loop.time(), app.frames
        await script(deck, rec, *steps)
        await asyncio.sleep(2 / FPS)
        elapsed = loop.time() - started
        assert app.frames - frames <= FPS * elapsed + 3, (app.frames - frames, elapsed)
        assert "│ row 199999" in canvas_text(app.root, 120, 50)
    finally:
        app.detach()


async def test_a_terminal_id_or_env_of_the_wrong_type_is_refused_as_such(make_deck, tmp_path):
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    answers = await script(
        deck, rec,
        ["terminal/output", {"terminalId": ["x"]}], ["terminal/release", {"terminalId": {"a": 1}}],
        ["terminal/wait_for_exit", {}], create(py("print('still here')")), on("wait_for_exit"),
        create(py("pass"), "e", env=5), create(py("pass"), "e", env={"A": "b"}),
    )  # fmt: skip
    for refused in answers[:2]:
        assert refused["error"]["code"] == -32602 and refused["error"]["message"] == "terminalId must be a string"
    assert answers[2]["error"] == {"code": -32602, "message": "terminalId must be a string"}
    assert answers[4] == {"result": {"exitCode": 0, "signal": None}}
    for refused in answers[5:]:
        assert refused["error"] == {"code": -32602, "message": "env must be a list of {name, value} strings"}


async def test_a_session_id_that_is_no_string_is_an_unknown_session(make_deck, tmp_path):
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    answers = await script(
        deck, rec,
        ["terminal/create", {"command": PY, "sessionId": ["x"]}], ["terminal/output", {"terminalId": "t", "sessionId": {}}],
    )  # fmt: skip
    for refused in answers:
        assert refused["error"]["code"] == -32002 and refused["error"]["message"].startswith("unknown session"), refused


async def test_a_meta_terminal_exit_status_out_of_range_is_unknown(make_deck, tmp_path):
    """`terminal_exit` is the agent's to write: an exit code that is no uint32 (ACP's
    `TerminalExitStatus.exitCode`) is unknown, a signal is a short string or unknown."""
    deck, rec = make_deck(agent(cwd=str(tmp_path)))
    given = [  # (exit_code, signal) the agent sends → the exit status shown
        ((0, "SIGKILL"), (0, "SIGKILL")),
        ((2**32 - 1, None), (2**32 - 1, None)),
        ((-1, None), (None, None)),
        ((2**32, None), (None, None)),
        ((10**30, None), (None, None)),
        ((True, None), (None, None)),
        (("2", 9), (None, None)),
        ((1.0, ["SIGTERM"]), (None, None)),
        ((None, "S" * 100_000), (None, "S" * 64)),
    ]
    steps = [
        ["update", {"sessionUpdate": "tool_call_update", "toolCallId": f"call_{i}",
                    "_meta": {"terminal_exit": {"terminal_id": f"call_{i}", "exit_code": code, "signal": sig}}}]
        for i, ((code, sig), _) in enumerate(given)
    ]  # fmt: skip
    await script(deck, rec, *steps)
    shown = {e["terminalId"]: e["exitStatus"] for e in rec.named("terminal:exited", "a")}
    assert shown == {f"call_{i}": {"exitCode": code, "signal": sig} for i, (_, (code, sig)) in enumerate(given)}
