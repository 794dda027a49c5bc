"""The notify plugin: a moment (an agent asking, in error, a budget reached, a turn done) tells the
user through `notify:sent` (bell and terminal notification in the terminal frontends), and runs
the user's command with the moment on its stdin and in its environment — a command that fails,
hangs or floods is logged, cut off, and never holds an agent up."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import psutil
import pytest
from deck.plugins import notify
from deck.plugins.notify import senders

from tests.conftest import agent_block
from tests.core.remote.test_server import clients, runtime, serve  # noqa: F401  (fixtures)
from tests.deck_process import DECK
from tests.frontends.test_line import ANSI, spawn_tty

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

RECORD = """\
import json, os, sys
data = sys.stdin.read()
env = {k: v for k, v in os.environ.items() if k in ("DECK_AGENT", "DECK_WHAT", "DECK_TITLE")}
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"stdin": json.loads(data), "env": env, "pid": os.getpid()}) + "\\n")
"""


def recorder(tmp_path: Path) -> tuple[list[str], Path]:
    """A command that appends what it got to a file: its argv, and that file."""
    script, out = tmp_path / "record.py", tmp_path / "got.jsonl"
    script.write_text(RECORD)
    return [sys.executable, str(script), str(out)], out


def got(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def notify_table(command: list[str] | None = None, **keys: object) -> str:
    lines = ["[notify]"]
    if command is not None:
        lines.append(f"command = {json.dumps(command)}")
    lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def wait_until(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.05)
    return result


def test_a_server_with_no_client_runs_the_command_with_the_moment(serve, clients, tmp_path) -> None:
    command, out = recorder(tmp_path)
    server = serve(notify_table(command) + agent_block("a"))
    client = clients(server.path)
    client.call("ChatService.Send", {"agent": "a", "text": "perm"})
    client.close()  # nobody is attached when the agent asks
    (record,) = wait_until(lambda: got(out))
    moment = record["stdin"]
    assert moment["agent"] == "a" and moment["what"] == "input" and moment["id"].startswith("perm-")
    assert moment["title"].startswith("permission: ") and moment["since"].endswith("Z")
    assert record["env"] == {"DECK_AGENT": "a", "DECK_WHAT": "input", "DECK_TITLE": moment["title"]}
    watcher = clients(server.path)
    (waiting,) = watcher.call("DeckService.Inbox")
    assert waiting["id"] == moment["id"]  # telling of it answered nothing


def test_notify_sent_reaches_an_attached_client_and_each_moment_is_told_once(serve, clients, tmp_path) -> None:
    command, out = recorder(tmp_path)
    server = serve(notify_table(command, on=["input", "error", "done"]) + agent_block("a") + agent_block("b", "--fail-start"))
    watcher = clients(server.path)
    watcher.call("ChatService.Send", {"agent": "a", "text": "hello"})
    done = watcher.event("notify:sent", agent="a", what="done", timeout=20)
    assert done["title"] == "finished its turn" and done["bell"] is True and done["desktop"] is False
    watcher.request("AgentService.Start", {"name": "b"})
    failed = watcher.event("notify:sent", agent="b", what="error", timeout=20)
    assert "handshake" in failed["title"] and "\n" not in failed["title"]  # the error's first line
    wait_until(lambda: len(got(out)) == 2)
    assert [r["stdin"]["what"] for r in got(out)] == ["done", "error"]


def test_after_tells_only_of_what_is_still_waiting(serve, clients, tmp_path) -> None:
    command, out = recorder(tmp_path)
    server = serve(notify_table(command, after="1s") + agent_block("a") + agent_block("b"))
    watcher = clients(server.path)
    watcher.call("ChatService.Send", {"agent": "a", "text": "perm"})
    answered = watcher.event("permission:requested", agent="a", timeout=20)
    watcher.call("ChatService.AnswerPermission", {"id": answered["id"], "optionId": "yes"})  # at once
    watcher.call("ChatService.Send", {"agent": "b", "text": "perm"})
    left = watcher.event("permission:requested", agent="b", timeout=20)
    sent = watcher.event("notify:sent", agent="b", timeout=20)
    asked_at = [line for line in watcher.lines if line.get("event") == "permission:requested" and line["agent"] == "b"]
    told_at = [line for line in watcher.lines if line.get("event") == "notify:sent"]
    assert told_at[0]["seq"] > asked_at[0]["seq"] and sent["what"] == "input"
    (record,) = wait_until(lambda: got(out))
    assert record["stdin"]["id"] == left["id"]  # the one answered within `after` was never told of
    time.sleep(1.2)
    assert len(got(out)) == 1 and len([x for x in watcher.lines if x.get("event") == "notify:sent"]) == 1


def test_a_flood_of_requests_is_told_of_in_a_few_moments_that_count_them(serve, clients, tmp_path) -> None:
    command, out = recorder(tmp_path)
    asking = [sys.executable, str(Path(__file__).parents[2] / "agents" / "asking_agent.py")]
    server = serve(notify_table(command) + agent_block("a", command=asking))
    watcher = clients(server.path)
    watcher.call("ChatService.Send", {"agent": "a", "text": "perms 2000"})
    wait_until(lambda: len(watcher.call("DeckService.Inbox")) == 2000, timeout=60)
    time.sleep(notify.COALESCE + 0.5)  # the last gathering is told of
    told = [line for line in watcher.lines if line.get("event") == "notify:sent"]
    records = wait_until(lambda: got(out) if len(got(out)) == len(told) else None)
    assert 1 <= len(told) <= 6, len(told)  # one per gathering, not one per request
    counted = [r["stdin"]["title"] for r in records if "requests wait" in r["stdin"]["title"]]
    first = records[0]["stdin"]["title"]
    told_of = (1 if "requests wait" not in first else 0) + sum(int(t.split()[0]) for t in counted)
    assert told_of == 2000 and all(t.endswith("permission: edit " + t.split("edit ")[-1]) for t in counted)
    watcher.call("ChatService.Cancel", {"agent": "a"})
    watcher.event("turn:changed", agent="a", busy=False, timeout=30)


def test_on_chooses_the_moments(serve, clients, tmp_path) -> None:
    command, out = recorder(tmp_path)
    server = serve(notify_table(command, on=["done"]) + agent_block("a"))
    watcher = clients(server.path)
    watcher.call("ChatService.Send", {"agent": "a", "text": "perm"})
    asked = watcher.event("permission:requested", agent="a", timeout=20)
    watcher.call("ChatService.AnswerPermission", {"id": asked["id"], "optionId": "yes"})
    watcher.event("notify:sent", agent="a", what="done", timeout=20)
    wait_until(lambda: got(out))
    assert [r["stdin"]["what"] for r in got(out)] == ["done"]


async def test_a_failing_command_is_logged_and_the_agent_goes_on(make_deck, tmp_path) -> None:
    command = [sys.executable, "-c", "import sys; print('no route to ntfy'); sys.exit(3)"]
    deck, rec = make_deck(notify_table(command, on=["done"]) + agent_block("a"))
    await deck.startup()
    deck.chat.send("a", "hello")
    await rec.wait_event("notify:sent", agent="a")
    deck.chat.send("a", "again")
    logs = await rec.wait(lambda r: [p["line"] for p in r.named("agent:log", "a") if "notify:" in p["line"]])
    assert "failed (exit 3): no route to ntfy" in logs[0]
    await rec.wait(lambda r: len([p for p in r.named("turn:changed", "a") if not p["busy"]]) >= 2)


async def test_a_command_that_cannot_run_is_logged(make_deck, tmp_path) -> None:
    deck, rec = make_deck(notify_table([str(tmp_path / "no-such-notifier")], on=["done"]) + agent_block("a"))
    await deck.startup()
    deck.chat.send("a", "hello")
    logs = await rec.wait(lambda r: [p["line"] for p in r.named("agent:log", "a") if "notify:" in p["line"]])
    assert "cannot run" in logs[0] and "no-such-notifier" in logs[0]


async def test_a_hanging_command_is_killed_with_its_children_and_the_next_one_runs(make_deck, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(senders, "TIMEOUT", 2.0)
    pids = tmp_path / "pids"
    hang = (
        "import os, subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}} {{child.pid}}\\n')\n"
        "time.sleep(60)\n"
    )
    deck, rec = make_deck(notify_table([sys.executable, "-c", hang], on=["done"]) + agent_block("a"))
    await deck.startup()
    deck.chat.send("a", "hello")
    await rec.wait_event("notify:sent", agent="a")
    deck.chat.send("a", "again")  # a second moment while the first command hangs: it waits its turn
    await rec.wait(lambda r: len(r.named("notify:sent", "a")) >= 2, timeout=1.5)  # the agent was not held up
    wait_until(pids.exists)
    time.sleep(0.3)
    assert len(pids.read_text().splitlines()) == 1  # one command at a time
    logs = await rec.wait(lambda r: [p["line"] for p in r.named("agent:log", "a") if "did not finish" in p["line"]])
    assert "within 2s: stopped" in logs[0]
    await rec.wait(lambda r: len([p for p in r.named("agent:log", "a") if "did not finish" in p["line"]]) >= 2, timeout=10)
    def gone(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    started = [int(pid) for line in pids.read_text().splitlines() for pid in line.split()]
    assert len(started) == 4  # two commands, each with a child of its own
    wait_until(lambda: all(gone(pid) for pid in started), timeout=5)  # each process group killed whole


async def test_a_flood_of_moments_drops_the_oldest_with_one_line_then_a_count(make_deck, tmp_path) -> None:
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    ran = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(ran)!r}, 'a').write('x')"]
    told = senders.Senders(deck, lambda moment: [command])
    for i in range(senders.QUEUE_MAX + 40):
        told.send(senders.Moment("a", "input", f"request {i}", f"t{i}"))
    logs = await rec.wait(lambda r: [p["line"] for p in r.named("agent:log", "a") if "in all" in p["line"]], timeout=30)
    lines = [p["line"] for p in rec.named("agent:log", "a") if "notify:" in p["line"]]
    assert lines == ["deck: notify: too many notifications waiting: dropping the oldest, from t0",
                     "deck: notify: 40 notifications were dropped in all"] and logs  # fmt: skip
    assert len(ran.read_text()) == senders.QUEUE_MAX  # the last ones: what was told in one go
    silent = senders.Senders(deck, lambda moment: [])  # no command: nothing waits, nothing is said
    for i in range(senders.QUEUE_MAX + 40):
        silent.send(senders.Moment("a", "input", f"request {i}", f"u{i}"))
    assert not silent._waiting and len([p for p in rec.named("agent:log", "a") if "notify:" in p["line"]]) == 2


async def test_a_command_that_floods_its_output_is_read_and_cut(make_deck, tmp_path) -> None:
    flood = "import sys; sys.stdout.write('x' * 5_000_000); sys.exit(1)"
    deck, rec = make_deck(notify_table([sys.executable, "-c", flood], on=["done"]) + agent_block("a"))
    await deck.startup()
    deck.chat.send("a", "hello")
    logs = await rec.wait(lambda r: [p["line"] for p in r.named("agent:log", "a") if "notify:" in p["line"]])
    assert "failed (exit 1)" in logs[0] and len(logs[0]) < senders.OUTPUT_MAX + 200


def test_an_agents_title_is_one_clean_line_in_the_environment_and_the_terminal() -> None:
    from deck.tty import notification, one_line

    assert one_line("rm\x1b]52;c;x\x07\n-rf\u202e " + "y" * 500, senders.TITLE_MAX).startswith("rm ]52;c;x -rf y")
    assert len(one_line("y" * 500, senders.TITLE_MAX)) == senders.TITLE_MAX
    assert "\x00" not in one_line("a\x00b", senders.TITLE_MAX)
    shown = notification("deck: a", "x;\x1b]52;c;AAAA\x07\n y")  # no field ends early, no sequence of the agent's
    assert shown == "\x1b]777;notify;deck: a;x ]52 c AAAA y\x07\x1b]9;deck: a: x ]52 c AAAA y\x07"


def test_the_line_frontend_rings_and_shows_a_terminal_notification(tmp_path) -> None:
    config = notify_table(None, desktop=True) + agent_block("a")
    child, log = spawn_tty(tmp_path, config)
    try:
        child.expect("/help lists the commands")
        child.sendline("@a perm")
        child.expect(r"\x1b\]777;notify;deck: a;permission: ")
        child.sendline("/allow")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    raw = log.getvalue()
    assert "\a" in raw.replace("\x1b]777", "").split("\x07")[0] or "\a\x1b]777" in raw
    assert re.search(r"\x1b\]9;deck: a: permission: [^\x07\x1b]*\x07", raw)
    assert "permission" in ANSI.sub("", raw)


def test_no_bell_when_bell_is_off(tmp_path) -> None:
    child, log = spawn_tty(tmp_path, notify_table(None, bell=False) + agent_block("a"))
    try:
        child.expect("/help lists the commands")
        child.sendline("@a perm")
        child.expect("permission")
        child.sendline("/allow")
        child.expect(r"\[a\] \S*ready")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert "\a" not in log.getvalue() and "]777;" not in log.getvalue()


def test_notify_can_be_switched_off(serve, clients, tmp_path) -> None:
    command, out = recorder(tmp_path)
    server = serve("[plugins]\ndisabled = [\"notify\"]\n" + notify_table(command, on=["done"]) + agent_block("a"))
    watcher = clients(server.path)
    watcher.call("ChatService.Send", {"agent": "a", "text": "hello"})
    watcher.event("turn:changed", agent="a", busy=False, timeout=20)
    time.sleep(0.5)
    assert not got(out) and not watcher.events("notify:sent")
    assert os.path.exists(server.path)


async def test_desktop_runs_the_desktops_notifier_where_there_is_one(make_deck, tmp_path, monkeypatch) -> None:
    """`desktop = true`: notify-send (found on PATH, with a display) gets the agent and the title as
    its arguments, never through a shell."""
    bin_dir, out = tmp_path / "bin", tmp_path / "notified.json"
    bin_dir.mkdir()
    notifier = bin_dir / "notify-send"
    notifier.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(out)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    notifier.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DISPLAY", ":99")
    deck, rec = make_deck(notify_table(None, desktop=True) + agent_block("a"))
    await deck.startup()
    deck.chat.send("a", "perm")
    sent = await rec.wait_event("notify:sent", agent="a")
    assert sent["desktop"] is True and sent["title"].startswith("permission: ")
    async with asyncio.timeout(15):
        while not (out.exists() and out.read_text()):
            await asyncio.sleep(0.05)
    (argv,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert argv == ["--app-name=deck", "deck: a", sent["title"]]
    monkeypatch.delenv("DISPLAY")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert senders.desktop_notifier("deck: a", "x") is None  # no display: no desktop to notify


def test_done_says_how_the_turn_ended_and_an_agent_that_failed_is_told_once(serve, clients, tmp_path) -> None:
    command, out = recorder(tmp_path)
    server = serve(notify_table(command, on=["done", "error"]) + agent_block("a") + agent_block("b", "--fail-start"))
    watcher = clients(server.path)
    watcher.call("ChatService.Send", {"agent": "a", "text": "slow"})
    watcher.event("message:delta", agent="a", timeout=20)
    watcher.call("ChatService.Cancel", {"agent": "a"})
    cancelled = watcher.event("notify:sent", agent="a", what="done", timeout=20)
    assert cancelled["title"] == "its turn was cancelled"
    watcher.request("ChatService.Send", {"agent": "b", "text": "hello"})
    watcher.event("notify:sent", agent="b", what="error", timeout=20)
    wait_until(lambda: len(got(out)) == 2)
    time.sleep(0.5)
    assert [(r["stdin"]["agent"], r["stdin"]["what"]) for r in got(out)] == [("a", "done"), ("b", "error")]  # no "done" for b


@pytest.mark.parametrize("table, said", [
    ('on = ["sometimes"]', "notify.on"), ('after = "soon"', "bad duration"), ('command = 5', "notify.command"),
    ("bell = 1", "notify.bell"),
])  # fmt: skip
def test_a_bad_notify_table_is_a_config_error_with_its_line(tmp_path, table, said) -> None:
    config = tmp_path / "deck.toml"
    config.write_text(f"[notify]\n{table}\n" + agent_block("a"))
    checked = subprocess.run([*DECK, "config", "validate", str(config)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 1 and f"{config}:2:" in checked.stdout and said in checked.stdout, checked.stdout
