"""`deck send` as a real command: the conversation it goes to, its prompt from stdin, its lines on a
terminal, its JSON lines, and what Ctrl-C does, alone and through a deck server."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from deck.acp.connection import MAX_LINE_BYTES
from deck.wire import encode

from tests.conftest import agent_block
from tests.core.remote.test_server import clients, runtime, serve  # noqa: F401 - the deck server fixtures
from tests.deck_process import DECK

pytestmark = pytest.mark.timeout(60)


def deck(*args: str, cwd: Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    if "input" not in kwargs:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run([*DECK, *args], capture_output=True, text=True, timeout=30, cwd=cwd, **kwargs)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "deck.toml"
    path.write_text(agent_block("a"))
    return path


def send(config: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return deck("send", "--config", str(config), *args, cwd=config.parent, **kwargs)


def stored(config: Path) -> list[dict[str, Any]]:
    """The conversations of `config` in the history, newest first, each with its messages."""
    rows = json.loads(deck("history", "--json", "--config", str(config), cwd=config.parent).stdout)
    return [json.loads(deck("export", row["id"], "--format", "json", cwd=config.parent).stdout) for row in rows]


def roles(conversation: dict[str, Any]) -> list[str]:
    return [m["role"] for m in conversation["messages"]]


# -- the conversation ---------------------------------------------------------------------------


def test_each_send_has_a_conversation_of_its_own_with_no_note(config: Path) -> None:
    for text in ("echo one", "echo two"):
        done = send(config, "a", text)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
    second, first = stored(config)
    assert [roles(first), roles(second)] == [["user", "agent"], ["user", "agent"]]  # no agent-restarted note
    assert (first["title"], second["title"]) == ("echo one", "echo two")


def test_a_send_with_a_plugin_off_keeps_nothing_of_it(config: Path) -> None:
    """`-p no:history`, as `deck run` takes it: the answer comes, and the history keeps no conversation."""
    done = send(config, "a", "echo off the record", "-p", "no:history")
    assert (done.returncode, done.stdout, done.stderr) == (0, "You said: echo off the record\n", "")
    assert stored(config) == []
    misspelt = send(config, "a", "echo hi", "-p", "no:histroy")
    assert misspelt.stderr == "deck: -p no:histroy: no plugin is named 'histroy' (did you mean history?), so it switches nothing off\n"


def test_an_agent_that_crashes_leaves_its_last_stderr_lines_on_stderr(config: Path) -> None:
    """`deck send` has no `/logs` to read later: a crash says why in the agent's own last lines."""
    done = send(config, "a", "crash out of memory: heap")
    assert (done.returncode, done.stdout) == (1, "about to crash\n")
    assert done.stderr == ("deck: a: the agent exited on its own with code 7\n"
                           "deck: a's last stderr lines:\n| out of memory: heap\n")  # fmt: skip
    quiet = send(config, "a", "crash")  # nothing on stderr: nothing more said
    assert (quiet.returncode, quiet.stderr) == (1, "deck: a: the agent exited on its own with code 7\n")
    refused = send(config, "a", "error")  # an error answer, the agent still running: its words alone
    assert refused.returncode == 1 and "stderr lines" not in refused.stderr


def test_an_agent_that_fails_to_start_leaves_its_last_stderr_lines_as_a_crash_does(tmp_path: Path) -> None:
    script = "read -r line; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo line$i >&2; done; exit 3"  # read: initialize came
    config = tmp_path / "deck.toml"
    config.write_text(f"[agents.c]\ncommand = [\"sh\", \"-c\", \"{script}\"]\n")
    done = send(config, "c", "hi")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "deck: c could not start: the agent exited during the handshake with code 3",
        "deck: c's last stderr lines:",
        *(f"| line{i}" for i in range(3, 13)),  # the last ten
    ]


def test_continue_and_conversation_go_on_in_a_stored_conversation_and_say_what_the_agent_forgot(config: Path) -> None:
    assert send(config, "a", "echo one").returncode == 0
    assert send(config, "a", "echo two").returncode == 0
    kept = send(config, "--continue", "a", "echo three")
    assert kept.returncode == 0 and kept.stdout == "You said: echo three\n"
    assert kept.stderr == "deck: a: The agent cannot resume sessions: it starts a new one and does not remember what came before.\n"
    second, first = stored(config)
    assert roles(second) == ["user", "agent", "user", "system", "agent"] and roles(first) == ["user", "agent"]
    again = send(config, "--conversation", first["id"][:8], "a", "echo four")  # the start of its id will do
    assert again.returncode == 0, again.stderr
    assert [m["parts"][0]["text"] for m in stored(config)[0]["messages"] if m["role"] == "user"] == ["echo one", "echo four"]
    unknown = send(config, "--conversation", "nope", "a", "hi")
    assert unknown.returncode == 2 and "no conversation 'nope' of a in the history of this config" in unknown.stderr
    both = send(config, "--continue", "--conversation", first["id"], "a", "hi")
    assert both.returncode == 2 and both.stderr == "deck: --continue and --conversation: give one of them\n"


# -- the prompt from stdin ----------------------------------------------------------------------


def test_the_prompt_is_read_from_stdin_for_a_dash_or_no_text(config: Path) -> None:
    for args in (("a", "-"), ("a",)):
        done = send(config, *args, input="echo from\nstdin")
        assert (done.returncode, done.stdout, done.stderr) == (0, "You said: echo from\nstdin\n", ""), args


def test_no_text_with_stdin_a_terminal_is_a_usage_error(config: Path) -> None:
    main, secondary = pty.openpty()
    try:
        done = send(config, "a", stdin=secondary)
    finally:
        os.close(main)
        os.close(secondary)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "deck: no TEXT: give the prompt as TEXT, or on stdin (`… | deck send AGENT`, or TEXT `-`)\n"


def test_a_prompt_on_stdin_over_the_line_cap_is_a_usage_error(config: Path, tmp_path: Path) -> None:
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(MAX_LINE_BYTES + 1)  # sparse: nothing is written to the disk
    with open(big, "rb") as stdin:
        done = send(config, "a", "-", stdin=stdin)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "deck: the prompt on stdin is over 64 MiB: deck reads 64 MiB at most\n"


# -- stdout and stderr --------------------------------------------------------------------------


def test_each_control_line_is_a_labelled_line_of_its_own(config: Path) -> None:
    multi = send(config, "a", "multi 2")
    assert multi.stdout == "Found the file, reading on. The answer is 42. \n"  # the answer's text, as sent
    assert multi.stderr == "[thought] pondering 0\n[tool] Step 0 (read): pending\n[tool] Step 0 (read): completed\n"
    thought = send(config, "a", "thought")
    assert thought.stdout == "answer\n"
    assert thought.stderr == "[thought] thinking\n[thought]  more thinking\n"  # two thoughts, one line each


def on_one_terminal(config: Path, *args: str) -> str:
    """What `deck send` shows with stdout and stderr on the same terminal."""
    main, secondary = pty.openpty()
    proc = subprocess.Popen(
        [*DECK, "send", "--config", str(config), *args],
        stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary, cwd=config.parent,
    )  # fmt: skip
    os.close(secondary)
    shown = b""
    try:
        while data := os.read(main, 65536):
            shown += data
    except OSError:  # EIO: every end of the terminal is closed
        pass
    finally:
        os.close(main)
    assert proc.wait(20) == 0
    return shown.decode().replace("\r\n", "\n")


def test_on_one_terminal_a_control_line_starts_a_line_and_the_answer_goes_on_below_it(config: Path) -> None:
    assert on_one_terminal(config, "a", "multi 2") == (
        "Found the file, reading on. \n"
        "[thought] pondering 0\n"
        "[tool] Step 0 (read): pending\n"
        "[tool] Step 0 (read): completed\n"
        "The answer is 42. \n"
    )
    assert on_one_terminal(config, "a", "thought") == "[thought] thinking\nanswer\n[thought]  more thinking\n"


def test_json_lines_are_the_jsonl_bridge_lines(config: Path) -> None:
    done = send(config, "--json", "a", "multi 2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) > 10 and lines == [encode(json.loads(line)) for line in lines]


# -- interrupted --------------------------------------------------------------------------------


class Sending:
    """`deck send …` running, its stdout and stderr read on threads."""

    def __init__(self, *args: str, cwd: Path | None = None) -> None:
        self.popen = subprocess.Popen(
            [*DECK, "send", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd
        )
        self.answered = threading.Event()
        self.out = b""
        self.err = b""
        self._readers = [threading.Thread(target=read, daemon=True) for read in (self._read_out, self._read_err)]
        for reader in self._readers:
            reader.start()

    def _read_out(self) -> None:
        assert self.popen.stdout is not None
        while data := self.popen.stdout.read1(65536):
            self.out += data
            self.answered.set()

    def _read_err(self) -> None:
        assert self.popen.stderr is not None
        self.err = self.popen.stderr.read()

    def interrupt(self) -> int:
        """Ctrl-C once the answer streams; the exit code."""
        assert self.answered.wait(20), self.err
        return self.wait_after(signal.SIGINT)

    def wait_after(self, sig: signal.Signals) -> int:
        """Send `sig`; the exit code, once all of stdout and stderr are read."""
        self.popen.send_signal(sig)
        code = self.popen.wait(20)
        for reader in self._readers:
            reader.join(5)
        return code


def test_ctrl_c_cancels_the_turn_and_says_so(config: Path) -> None:
    sending = Sending("--config", str(config), "a", "slow", cwd=config.parent)
    assert sending.interrupt() == 130
    assert sending.err.decode() == "deck: interrupted: the turn was cancelled\n"


def cancelled(line: dict[str, Any]) -> bool:
    return line.get("event") == "message:updated" and line["message"].get("stopReason") == "cancelled"


def test_through_a_server_a_send_continues_the_conversation_and_ctrl_c_cancels_its_turn(serve, clients) -> None:  # noqa: F811
    server = serve(agent_block("a"))
    watcher = clients(server.path)
    watcher.call("ChatService.Send", {"agent": "a", "text": "echo from the console"})
    watcher.event("turn:changed", agent="a", busy=False, queued=0, timeout=20)
    sent = subprocess.run(
        [*DECK, "send", "--attach", "t", "a", "echo by deck send"], capture_output=True, text=True, timeout=30
    )
    assert (sent.returncode, sent.stdout, sent.stderr) == (0, "You said: echo by deck send\n", "")
    conversation = watcher.call("ChatService.Conversation", {"agent": "a"})
    texts = [m["parts"][0]["text"] for m in conversation["messages"] if m["role"] == "user"]
    assert texts == ["echo from the console", "echo by deck send"]  # the console's conversation, going on
    sending = Sending("--attach", "t", "a", "slow")
    assert sending.interrupt() == 130
    assert sending.err.decode() == "deck: interrupted: the turn was cancelled\n"
    watcher.wait_line(cancelled, timeout=10)  # the server's turn ended: it did not go on


def test_through_a_server_ctrl_c_leaves_a_message_queued_behind_another_turn(serve, clients) -> None:  # noqa: F811
    server = serve(agent_block("a"))
    watcher = clients(server.path)
    watcher.call("ChatService.Send", {"agent": "a", "text": "slow"})
    watcher.event("message:delta", agent="a", timeout=20)
    sending = Sending("--attach", "t", "a", "echo later")
    queued = watcher.wait_line(lambda x: x.get("event") == "message:updated" and x["message"].get("queued"), timeout=20)
    assert queued["message"]["parts"][0]["text"] == "echo later"
    assert sending.wait_after(signal.SIGINT) == 130
    assert sending.err.decode() == "deck: interrupted: the message stays queued behind a's turn in progress, which goes on\n"
    conversation = watcher.call("ChatService.Conversation", {"agent": "a"})
    assert conversation["busy"] and [m["queued"] for m in conversation["messages"] if m["role"] == "user"] == [False, True]
