"""The line frontend end to end: `deck run --frontend=line` with real fake agents, through pipes and a pty."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pexpect
import pytest
from deck.frontends import line as line_frontend
from deck.frontends.line import context_share, diff_summary

from tests.conftest import AGENTS, agent_block
from tests.core.runtime.test_diffs import DIFF_PATH, TOO_LARGE, diff_agent

DECK = [sys.executable, "-c", "from deck.cli.commands import main; main()"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SGR = r"\x1b\[[0-9;]*m"


def plain_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "COLORTERM", "DECK_CONFIG")}
    return {**env, **extra}


class LineDeck:
    """`deck run --frontend=line` with stdin and stdout as pipes; output read line by line."""

    def __init__(self, config: Path, *args: str, **env: str) -> None:
        self.spawn([*DECK, "run", "--frontend=line", "--config", str(config), *args], plain_env(**env))

    def spawn(self, command: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        self.lines: list[str] = []
        self.raw: list[bytes] = []
        self.cursor = 0
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()  # type: ignore[union-attr]

    def _read(self) -> None:
        for raw in self.proc.stdout:  # type: ignore[union-attr]
            with self._changed:
                self.raw.append(raw)
                self.lines.append(raw.decode().rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def send(self, line: str) -> None:
        self.proc.stdin.write(line.encode() + b"\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def expect(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        """The first line after the last one matched that matches `pattern` (a regex, whole line)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for i in range(self.cursor, len(self.lines)):
                    if m := re.fullmatch(pattern, self.lines[i]):
                        self.cursor = i + 1
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    raise AssertionError(f"no line matching {pattern!r} in:\n" + "\n".join(self.lines[self.cursor :]))
                self._changed.wait(left)

    def close(self, timeout: float = 30.0) -> int:
        self.proc.stdin.close()  # type: ignore[union-attr]
        return self.wait(timeout)

    def wait(self, timeout: float = 30.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)  # everything deck wrote is in `lines`
        return code

    @property
    def output(self) -> bytes:
        return b"".join(self.raw)


@pytest.fixture
def line_deck(tmp_path: Path):
    """`line_deck(toml, *args, **env)` → a running LineDeck; killed after the test if still running."""
    made: list[LineDeck] = []

    def make(text: str, *args: str, **env: str) -> LineDeck:
        config = tmp_path / "deck.toml"
        config.write_text(text)
        deck = LineDeck(config, *args, **env)
        made.append(deck)
        return deck

    yield make
    for deck in made:
        if deck.proc.poll() is None:
            deck.proc.kill()
            deck.proc.wait()


def test_answer_streams_as_whole_lines_without_escape_codes(line_deck):
    deck = line_deck(agent_block("a"))
    deck.expect(r"\[deck\] talking to a; /help lists the commands")
    deck.send("@a stream 5")
    deck.expect(r"\[a\] > stream 5")
    deck.expect(r"\[a\] starting…")
    deck.expect(r"\[a\] ready")
    deck.expect(r"\[a\] busy")
    deck.expect(r"\[a\] c0 c1 c2 c3 c4")  # five chunks, one line
    deck.expect(r"\[a\] ready")
    assert deck.close() == 0
    deck.expect(r"\[a\] stopped")
    assert not [line for line in deck.lines if re.fullmatch(r"\[a\] c\d", line)]
    assert b"\x1b" not in deck.output  # stdout is a pipe: plain text


def test_text_wraps_to_columns_in_a_pipe(line_deck):
    deck = line_deck(agent_block("a"), COLUMNS="30")
    deck.send("stream 40")
    deck.expect(r"\[a\] c0 c1 .*")
    deck.expect(r"\[a\] ready")
    assert deck.close() == 0
    text = [line for line in deck.lines if re.fullmatch(r"\[a\] (c\d+ ?)+", line)]
    assert len(text) > 4 and all(len(line) <= 30 for line in text)
    assert " ".join(line[4:] for line in text).split() == [f"c{i}" for i in range(40)]


def test_thought_plan_and_usage(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("@a thought")
    deck.expect(r"\[a\] thinking: thinking")
    deck.expect(r"\[a\] answer")
    deck.expect(r"\[a\] thinking: more thinking")
    deck.send("plan")
    deck.expect(r"\[a\] plan:")
    deck.expect(r"\[a\]   \[ \] one")
    deck.expect(r"\[a\] plan:")
    deck.expect(r"\[a\]   \[x\] one")
    deck.send("usage")
    deck.expect(r"\[a\] context: 1,000 / 200,000 tokens \(<1%\) · cost unknown \(not counted\)")  # 0.5 %: some, if less than 1 %
    deck.expect(r"\[a\] tokens: 10 in · 20 out · 30 total")
    deck.send("cost 0.25 usd")
    deck.expect(r"\[a\] context: 500 / 100,000 tokens \(<1%\) · 0\.25 USD")
    assert deck.close() == 0


def test_permission_allow_and_deny_by_number(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("@a perm")
    deck.expect(r"\[a\] Edit file \[pending\]  \+1 -1 /x")
    deck.expect(r"\[a\] permission\? Edit file  \+1 -1 /x")
    deck.expect(r"\[a\]   1\. Allow   2\. Reject   → /allow \(once\), /allow N, /deny")
    deck.send("/allow 3")
    deck.expect(r"\[a\] /allow N: N is an option number, 1 to 2")
    deck.send("/allow 1")
    deck.expect(r"\[a\] permission: Allow")
    deck.expect(r"\[a\] Edit file \[completed\]  \+1 -1 /x")
    deck.expect(r"\[a\] permission: yes")
    deck.expect(r"\[a\] ready")
    deck.send("perm")
    deck.expect(r"\[a\] permission\? Edit file.*")
    deck.send("/allow x")
    deck.expect(r"\[a\] /allow N: N is an option number, 1 to 2")
    deck.send("/deny")
    deck.expect(r"\[a\] permission: Reject")
    deck.expect(r"\[a\] Edit file \[failed\]  \+1 -1 /x")
    deck.expect(r"\[a\] permission: no")
    assert deck.close() == 0


def test_messages_go_to_the_agent_addressed_last(line_deck):
    deck = line_deck(agent_block("a") + agent_block("b"))
    deck.send("hello")  # nobody addressed yet: the first agent
    deck.expect(r"\[a\] You said: hello")
    deck.send("@b hi")
    deck.expect(r"\[b\] You said: hi")
    deck.send("again")
    deck.expect(r"\[b\] You said: again")
    deck.send("@zz hi")
    deck.expect(r"\[deck\] unknown agent 'zz' \(agents: a, b\)")
    deck.send("one \\")  # a trailing backslash goes on to the next line
    deck.send("two")
    deck.expect(r"\[b\] You said: one")
    deck.expect(r"\[b\] two")
    assert deck.close() == 0
    assert not any(line.startswith("[a] You said: again") for line in deck.lines)


def test_commands_and_unknown_command(line_deck):
    deck = line_deck(agent_block("a") + agent_block("b", "--garbage"))
    deck.send("/start b")
    deck.expect(r"\[b\] ready")
    deck.send("/agents")
    deck.expect(r"\[a\] a · stopped  \(current\)")
    deck.expect(r"\[b\] b · ready")
    deck.send("/logs b")
    deck.expect(r"\[b\] \| deck: not JSON, skipped: this is not json")
    deck.send("/frobnicate")
    deck.expect(r"\[deck\] unknown command: /frobnicate")
    deck.expect(r"\[deck\] /allow \[N\] .*")  # the help
    deck.send("/help")
    deck.expect(r"\[deck\] /help +this help, then the plugins' commands, then the current agent.s own")
    deck.send("/stop b")
    deck.expect(r"\[b\] stopped")
    deck.send("/restart a")
    deck.expect(r"\[a\] starting…")
    deck.expect(r"\[a\] ready")
    deck.send("@a still here")  # deck carried on after the unknown command
    deck.expect(r"\[a\] You said: still here")
    deck.send("/quit")  # stdin still open
    assert deck.wait() == 0


def test_cancel_stops_the_answer(line_deck):
    deck = line_deck(agent_block("a"), COLUMNS="24")  # narrow: ticks come out as wrapped lines while they stream
    deck.send("/cancel")
    deck.expect(r"\[a\] nothing to cancel")
    deck.send("@a slow")
    deck.expect(r"\[a\] busy")
    deck.expect(r"\[a\] (tick ?)+")  # the answer is streaming
    deck.send("/cancel a")
    deck.expect(r"\[a\] stopped: cancelled")
    deck.expect(r"\[a\] ready")
    assert deck.close() == 0


def test_start_failure_is_reported_with_its_reason(line_deck):
    deck = line_deck(agent_block("c", "--fail-start"))
    deck.send("@c hi")
    deck.expect(r"\[c\] error: the agent exited during the handshake with code 3")
    deck.expect(r"\[c\] fatal: missing API key")
    deck.expect(r"\[c\] unavailable: c could not start: .*")
    deck.send("/start c")
    deck.expect(r"\[c\] error: .*")
    assert deck.close() == 0


def test_states_in_french(line_deck):
    deck = line_deck('language = "fr"\n' + agent_block("a"))
    deck.send("@a bonjour")
    deck.expect(r"\[a\] démarre…")
    deck.expect(r"\[a\] prêt")
    deck.expect(r"\[a\] occupé")
    deck.expect(r"\[a\] You said: bonjour")
    deck.send("/agents")
    deck.expect(r"\[a\] a · prêt  \(current\)")
    deck.send("/stop a")
    deck.expect(r"\[a\] arrêté")
    assert deck.close() == 0


def test_end_of_stdin_finishes_the_work_in_hand(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("@a stream 3")
    deck.send("@a queued after")
    assert deck.close() == 0  # stdin closed at once: both turns still run to the end
    deck.expect(r"\[a\] c0 c1 c2")
    deck.expect(r"\[a\] You said: queued after")
    deck.expect(r"\[a\] stopped")


@pytest.mark.parametrize(("language", "shown"), [("en", "ready · restart to apply changes"), ("fr", "prêt · à redémarrer")])
def test_outdated_agent_says_so(line_deck, tmp_path, language, shown):
    deck = line_deck(f'language = "{language}"\n' + agent_block("a"))
    deck.send("/start a")
    deck.expect(r"\[a\] (ready|prêt)")
    (tmp_path / "deck.toml").write_text(f'language = "{language}"\n' + agent_block("a", permissions="allow"))
    deck.expect(rf"\[a\] {shown}")
    deck.expect(r"\[deck\] config reloaded: .*deck.toml")
    deck.send("/restart a")
    deck.expect(r"\[a\] (ready|prêt)")  # the flag is gone once restarted
    assert deck.close() == 0


def test_diff_summary_counts_lines():
    diffs = [
        {"path": "a.py", "oldText": "x\ny\nz\n", "newText": "x\nY\nz\nw\n", "newFile": False},
        {"path": "new.py", "oldText": "", "newText": "1\n2\n", "newFile": True},
    ]
    assert diff_summary(diffs) == "+2 -1 a.py, +2 -0 new.py (new)"


def test_a_diff_made_to_stall_difflib_is_shown_at_once_however_often_its_call_is_updated(line_deck, tmp_path):
    """The hostile diff (tests/core/runtime/test_diffs.py) in a tool call, then in 3 updates and the one that
    completes it: difflib took 4-5 s on each; now the turn shows in well under half a second each."""
    deck = line_deck(diff_agent(tmp_path, updates=3))
    deck.send("/start a")
    deck.expect(r"\[a\] ready")
    start = time.monotonic()
    deck.send("@a rewrite")
    deck.expect(re.escape(f"[a] Rewrite big.txt [pending]  {DIFF_PATH} {TOO_LARGE}"))
    deck.expect(re.escape(f"[a] Rewrite big.txt [completed]  {DIFF_PATH} {TOO_LARGE}"))
    deck.expect(r"\[a\] after")
    took = time.monotonic() - start
    assert took < 5 * 0.5, f"{took:.2f} s for 5 updates carrying the diff"
    assert deck.close() == 0


# -- under a pseudo-terminal ------------------------------------------------------------------------


def spawn_tty(tmp_path: Path, text: str, columns: int = 60, **env: str) -> tuple[pexpect.spawn, io.StringIO]:
    config = tmp_path / "deck.toml"
    config.write_text(text)
    child = pexpect.spawn(
        DECK[0], [*DECK[1:], "run", "--frontend=line", "--config", str(config)],
        env=plain_env(TERM="xterm-256color", **env), dimensions=(40, columns), echo=False,
        encoding="utf-8", timeout=20,
    )  # fmt: skip
    log = io.StringIO()
    child.logfile_read = log
    return child, log


def test_terminal_colours_markdown_and_width(tmp_path):
    child, log = spawn_tty(tmp_path, agent_block("a") + agent_block("c", "--fail-start"))
    try:
        child.expect("/help lists the commands")
        child.sendline("@a some **bold** and `code`")
        child.expect("You said")
        child.expect(r"\[a\] \S*ready")
        child.sendline("intro \\")
        child.sendline("```python \\")
        child.sendline("x = 1 \\")
        child.sendline("```")
        child.expect("You said: intro")
        child.expect(r"\[a\] \S*ready")
        child.sendline("@a " + "word " * 30)
        child.expect(r"\[a\] \S*ready")
        child.setwinsize(40, 100)
        child.sendline("@a " + "wide " * 30)
        child.expect(r"\[a\] \S*ready")
        child.sendline("@c hi")
        child.expect("missing API key")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    raw = log.getvalue()
    text = ANSI.sub("", raw).replace("\r\n", "\n")
    lines = text.splitlines()
    # A colour per agent on the prefix, errors in red.
    assert re.search(SGR + r"\[a\] " + SGR, raw)
    assert re.search(r"\x1b\[31m[^\n]*error: the agent exited during the handshake", raw)
    # Markdown rendered once: no asterisks or backticks, bold as bold, the answer not printed twice.
    said = [line for line in lines if "You said: some" in line]
    assert said == ["[a] You said: some bold and code"]
    assert re.search(r"\x1b\[1mbold", raw)
    # A fenced block: no fence shown, the code highlighted (a colour change between `x` and `=`).
    assert not any("```" in line for line in lines if line.startswith("[a]") and "> " not in line)
    assert re.search(r"x" + SGR + r"(?:" + SGR + r"| )*=", raw)
    # Width follows the terminal, also after a resize.
    narrow = [line.rstrip() for line in lines if re.fullmatch(r"\[a\] (You said: )?(word ?)+", line.rstrip())]
    wide = [line.rstrip() for line in lines if re.fullmatch(r"\[a\] (You said: )?(wide ?)+", line.rstrip())]
    assert len(narrow) >= 3 and max(map(len, narrow)) <= 60
    assert len(wide) >= 2 and 60 < max(map(len, wide)) <= 100


def test_no_color_on_a_terminal_writes_no_escape_codes(tmp_path):
    child, log = spawn_tty(tmp_path, agent_block("a"), NO_COLOR="1")
    try:
        child.expect("/help lists the commands")
        child.sendline("@a some **bold**")
        child.expect(r"\[a\] ready")
        child.sendline("@c nobody")
        child.expect("unknown agent")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    raw = log.getvalue()
    assert "\x1b" not in raw
    assert "[a] You said: some bold" in raw  # still rendered as Markdown on a terminal


def test_announcements_print_target_arrow_requester(line_deck):
    deck = line_deck(agent_block("a") + agent_block("b"))
    deck.send("@a ask b multi")
    deck.expect(r"\[a\] b → a: Let me look into it\.")
    deck.expect(r"\[a\] b → a: Found the file, reading on\.")
    deck.expect(r"\[a\] .*The answer is 42\..*")
    assert deck.close() == 0
    assert not any(re.fullmatch(r"\[b → a\] The answer is 42\.", line) for line in deck.lines)  # the final is no announcement


def test_questions_are_answered_or_declined(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("question")
    deck.expect(r"\[a\] question: Your name\?")
    deck.expect(r"\[a\]   name: string")
    deck.send('/answer name="Ann Lee"')
    deck.expect(r'\[a\] \{"action": "accept", "content": \{"name": "Ann Lee"\}\}')
    deck.send("question")
    deck.expect(r"\[a\] question: Your name\?")
    deck.send("/decline")
    deck.expect(r'\[a\] \{"action": "decline"\}')
    deck.send("/answer name=x")  # nothing pending any more
    deck.expect(r"\[deck\] no question is waiting for an answer")
    assert deck.close() == 0


def test_an_answer_the_form_refuses_leaves_the_question_for_the_next_answer(line_deck):
    asking = [sys.executable, str(AGENTS / "asking_agent.py")]
    deck = line_deck(agent_block("a", command=asking))
    schema = {"type": "object", "required": ["age"],
              "properties": {"age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}}  # fmt: skip
    deck.send("ask " + json.dumps(schema))
    deck.expect(r"\[a\] question: .*")
    deck.send('/answer {"age": "x"}')
    deck.expect(r"\[a\] .*field 'age' must be an integer; the question still waits for an answer")
    deck.send("/answer age=3 tags=red,green")
    deck.expect(r'\[a\] .*"action": "accept", "content": \{"age": 3, "tags": \["red", "green"\]\}.*')
    assert deck.close() == 0


def test_a_permission_asked_after_end_of_stdin_does_not_hang(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("perm")
    assert deck.close() == 0  # stdin ends before the agent asks
    deck.expect(r"\[a\] permission\? Edit file.*")
    deck.expect(r"\[a\] permission: cancelled")
    deck.expect(r"\[a\] stopped")


def test_a_bare_slash_is_an_unknown_command_not_a_crash(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("/")
    deck.expect(r"\[deck\] unknown command: /")
    deck.send("hi")
    deck.expect(r"\[a\] You said: hi")
    assert deck.close() == 0


# -- answers a script gives before the request comes ---------------------------------------------


def test_an_allow_typed_before_the_request_approves_it_after_end_of_stdin(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("@a perm")
    deck.send("/allow")
    assert deck.close() == 0  # stdin ends before the agent asks
    deck.expect(r"\[a\] waiting up to 60 s for a permission request from a: /allow answers it")
    deck.expect(r"\[a\] permission\? Edit file  \+1 -1 /x")
    deck.expect(r"\[a\] permission: Allow")
    deck.expect(r"\[a\] Edit file \[completed\]  \+1 -1 /x")
    deck.expect(r"\[a\] permission: yes")
    deck.expect(r"\[a\] stopped")


def test_each_early_answer_answers_one_request_in_order(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("@a perms 4 edit")
    deck.send("/deny")
    deck.send("/deny")
    deck.send("/allow 2")  # the second option: allow_always
    assert deck.close() == 0
    deck.expect(r"\[a\] permission\? Tool 0")
    deck.expect(r"\[a\] permission: Reject")
    deck.expect(r"\[a\] permission\? Tool 1  \(refused once this turn\)")
    deck.expect(r"\[a\] permission: Reject")
    deck.expect(r"\[a\] permission\? Tool 2  \(refused 2 times this turn\)")
    deck.expect(r"\[a\] permission: Always")
    deck.expect(r"\[a\] permission\? Tool 3  \(refused 2 times this turn\)")
    deck.expect(r"\[a\] permission: cancelled")  # three answers typed: the fourth request is nobody's
    assert "".join(line[4:] for line in deck.lines if re.match(r"\[a\] p\d: ", line)) == (
        "p0: no;p1: no;p2: always;p3: cancelled;"
    )


def test_an_early_answer_is_for_the_current_agent_only(line_deck):
    deck = line_deck(agent_block("a") + agent_block("b"))
    deck.send("@a perm")
    deck.expect(r"\[a\] permission\? Edit file.*")
    deck.send("@b hi")
    deck.send("/allow")  # b is the current agent: a's request is not b's
    deck.expect(r"\[b\] waiting up to 60 s for a permission request from b: /allow answers it"
                r" \(a has one waiting: @a, then /allow\)")  # fmt: skip
    deck.send("@a")
    deck.send("/allow")
    deck.expect(r"\[a\] permission: Allow")
    assert deck.close() == 0
    assert "[b] /allow unused: no permission request came from b" in deck.lines
    assert [line for line in deck.lines if line.startswith("[b] permission")] == []


def test_early_answers_are_bounded(line_deck):
    deck = line_deck(agent_block("a"))
    for _ in range(101):
        deck.send("/deny")
    deck.expect(r"\[a\] /deny refused: 100 answers already wait for a's requests")
    deck.send("/quit")
    assert deck.wait() == 0


def test_cancel_drops_the_early_answers_and_a_bad_number_is_refused_at_once(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("/allow two")
    deck.expect(r"\[a\] /allow N: N is an option number")
    deck.send("/allow")
    deck.expect(r"\[a\] waiting up to 60 s for a permission request from a: /allow answers it")
    deck.send("/cancel")
    deck.expect(r"\[a\] /allow dropped: it waited for a permission request")
    deck.send("@a perm")
    deck.expect(r"\[a\] permission\? Edit file.*")
    assert deck.close() == 0
    deck.expect(r"\[a\] permission: cancelled")


def test_an_early_answer_with_an_option_the_request_lacks_leaves_it_waiting(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("@a perm")
    deck.send("/allow 3")
    deck.expect(r"\[a\] permission\? Edit file.*")
    deck.expect(r"\[a\] /allow N: N is an option number, 1 to 2")
    deck.send("/allow 1")  # the request still waits: answered now
    deck.expect(r"\[a\] permission: Allow")
    assert deck.close() == 0


def test_approve_on_the_command_line_approves_that_kind_only(line_deck):
    deck = line_deck(agent_block("a"), "--approve", "edit")
    deck.send("@a perm")
    deck.expect(r"\[a\] Edit file: .+, by --approve")  # what allowed it, said
    deck.expect(r"\[a\] Edit file \[completed\]  \+1 -1 /x")
    deck.expect(r"\[a\] permission: yes")
    deck.send("perms 1 read")
    deck.expect(r"\[a\] permission\? Tool 0")  # a read is not an edit: asked as usual
    deck.send("/deny")
    deck.expect(r"\[a\] permission: Reject")
    assert deck.close() == 0
    assert not any(line.startswith("[a] permission? Edit file") for line in deck.lines)


def test_a_bad_approve_pattern_is_a_usage_error(tmp_path):
    config = tmp_path / "deck.toml"
    config.write_text(agent_block("a"))
    done = subprocess.run(
        [*DECK, "run", "--frontend=line", "--config", str(config), "--approve", "reed"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, env=plain_env(),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("deck: bad --approve 'reed': reed is not a tool kind (read, ")


def test_help_columns_line_up(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("/help")
    deck.expect(r"\[deck\] /quit +stop the agents and leave")
    assert deck.close() == 0
    start = deck.lines.index(next(line for line in deck.lines if line.startswith("[deck] @AGENT TEXT")))
    end = deck.lines.index(next(line for line in deck.lines if line.startswith("[deck] /quit")))
    columns = {re.match(r"\[deck\] .*? {2,}", line).end() for line in deck.lines[start : end + 1]}
    assert len(columns) == 1, deck.lines[start : end + 1]


def test_queued_counts_read_as_english(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("@a sleep 0.3")
    deck.send("@a one")
    deck.send("@a two")  # both wait while the agent sleeps: 2 queued, then 1 once "one" is sent
    assert deck.close() == 0
    assert "[a] 2 messages queued" in deck.lines and "[a] 1 message queued" in deck.lines
    assert not any("(s)" in line for line in deck.lines)


@pytest.mark.parametrize(
    ("used", "size", "shown"),
    [(0, 200_000, "0%"), (1, 200_000, "<1%"), (1_000, 200_000, "<1%"), (1_211, 200_000, "1%"), (150, 200, "75%")],
)
def test_context_share_rounds_and_never_says_zero_for_some(used, size, shown):
    assert context_share(used, size) == shown


@pytest.mark.anyio
async def test_an_early_answer_expires(make_deck, monkeypatch):
    monkeypatch.setattr(line_frontend, "ANSWER_WAIT", 0.2)
    deck, rec = make_deck(agent_block("a"))
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    protocol = asyncio.StreamReaderProtocol(reader)
    transport, _ = await loop.connect_read_pipe(lambda: protocol, os.fdopen(stdout_read, "rb"))
    running = loop.create_task(deck.run(line_frontend.LineFrontend, stdin_fd=stdin_read, stdout_fd=stdout_write))

    async def line_matching(pattern: str) -> str:
        while raw := await asyncio.wait_for(reader.readline(), 10):
            if re.fullmatch(pattern, text := raw.decode().rstrip("\n")):
                return text
        raise AssertionError(f"no line matching {pattern!r} before the end of the output")

    open_ends = [stdin_write, stdout_write, stdin_read]
    try:
        os.write(stdin_write, b"/allow\n")
        await line_matching(r"\[a\] waiting up to 0.2 s for a permission request from a: /allow answers it")
        await line_matching(r"\[a\] /allow expired: no permission request came from a within 0.2 s")
        os.write(stdin_write, b"@a perm\n")
        asked = await rec.wait_event("permission:requested", agent="a")
        assert [p["id"] for p in await deck.call("ChatService.Pending", None)] == [asked["id"]]  # nobody answered it
        os.close(open_ends.pop(0))  # end of stdin: the request is cancelled
        await line_matching(r"\[a\] permission: cancelled")
        assert await asyncio.wait_for(running, 20) == 0
    finally:
        running.cancel()
        transport.close()
        for fd in open_ends:
            os.close(fd)


def test_a_bare_allow_allows_once_and_always_only_when_asked(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("@a perm-always-first")
    deck.expect(r"\[a\]   1\. Always Allow   2\. Allow   3\. Reject   → /allow \(once\), /allow always, /allow N, /deny")
    deck.send("/allow")
    deck.expect(r"\[a\] permission: Allow$")
    deck.expect(r"\[a\] permission: allow$")  # what the agent got: its allow-once option
    deck.expect(r"\[a\] ready")
    deck.send("perm-always-first")
    deck.expect(r"\[a\] permission\? Edit greet.py")
    deck.send("/allow always")
    deck.expect(r"\[a\] permission: Always Allow")
    deck.expect(r"\[a\] permission: allow_always")
    assert deck.close() == 0


def test_inbox_lists_what_waits_and_next_goes_to_the_oldest(line_deck):
    deck = line_deck(agent_block("a") + agent_block("b"))
    deck.send("/inbox")
    deck.expect(r"\[deck\] nothing waits for you")
    deck.send("/next")
    deck.expect(r"\[deck\] nothing waits for you")
    deck.send("@a perm")
    deck.expect(r"\[a\] permission\? Edit file  \+1 -1 /x")
    deck.send("@b question")
    deck.expect(r"\[b\] question: Your name\?")
    deck.send("/inbox")
    deck.expect(r"\[deck\] 2 waiting for you, oldest first \(/next goes to it\):")
    deck.expect(r"\[a\] perm-\S+  permission: Edit file  since \S+Z")
    deck.expect(r"\[b\] question-\S+  Your name\?  since \S+Z")
    deck.send("/next")  # the oldest is a's: a is current again, its request shown again
    deck.expect(r"\[a\] permission\? Edit file  \+1 -1 /x")
    deck.send("/allow 1")
    deck.expect(r"\[a\] permission: yes")
    deck.send("/next")
    deck.expect(r"\[b\] question: Your name\?")
    deck.send('/answer name="Ann"')
    deck.expect(r'\[b\] \{"action": "accept", "content": \{"name": "Ann"\}\}')
    deck.send("/inbox")
    deck.expect(r"\[deck\] nothing waits for you")
    assert deck.close() == 0


def test_queue_unqueue_and_edit_what_waits_to_be_sent(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("sleep 1.5")
    deck.expect(r"\[a\] busy")
    deck.send("one")
    deck.send("two")
    deck.send("/queue")
    deck.expect(r"\[a\] 1\. one")
    deck.expect(r"\[a\] 2\. two")
    deck.send("/edit 2 deux")
    deck.expect(r"\[a\] message 2 edited")
    deck.send("/unqueue 1")
    deck.expect(r"\[a\] message 1 taken out of the queue: it will not be sent")
    deck.send("/unqueue 5")
    deck.expect(r".*no message 5 in the queue \(1 waiting: /queue lists them\)")
    deck.send("/edit x")
    deck.expect(r".*/edit N TEXT: N is the message's number in /queue")
    deck.send("/edit 1")
    deck.expect(r".*/edit 1 TEXT: the new text \(to drop message 1: /unqueue 1\)")
    deck.expect(r"\[a\] You said: deux")
    deck.send("/queue")
    deck.expect(r"\[a\] nothing waits to be sent")
    assert deck.close() == 0
    assert not any("You said: one" in line for line in deck.lines)


def test_mode_model_and_set_list_and_change_the_agents_config_options(line_deck, tmp_path):
    requests = tmp_path / "requests.jsonl"
    deck = line_deck(agent_block("a", "--mode-option", "--boolean-option", "--requests", str(requests)))
    deck.send("/set")
    deck.expect(r"\[a\] mode = default \(Mode: default, auto-edit, plan\)")
    deck.expect(r"\[a\] model = m1 \(Model: m1, m2\)")
    deck.expect(r"\[a\] fast = off \(Fast: on, off\)")
    deck.send("/model m2")
    deck.expect(r"\[a\] model = m2 \(Model: m1, m2\)")
    deck.send("/set fast on")
    deck.expect(r"\[a\] fast = on \(Fast: on, off\)")
    deck.send("/mode plan")  # the option of category mode
    deck.expect(r"\[a\] mode = plan \(Mode: default, auto-edit, plan\)")
    deck.send("/set fast maybe")
    deck.expect(r".*fast is on or off: /set fast on\|off")
    deck.send("/set nope 1")
    deck.expect(r".*no config option 'nope' \(options: mode, model, fast\)")
    deck.send("/model")
    deck.expect(r"\[a\] model = m2 \(Model: m1, m2\)")
    assert deck.close() == 0
    sent = [json.loads(line) for line in requests.read_text().splitlines()]
    capabilities = next(r for r in sent if r["method"] == "initialize")["params"]["clientCapabilities"]
    assert capabilities["session"]["configOptions"] == {"boolean": {}}  # deck says it takes boolean options
    chosen = [r["params"] for r in sent if r["method"] == "session/set_config_option"]
    assert [(c["configId"], c["value"], c.get("type")) for c in chosen] == [
        ("model", "m2", None), ("fast", True, "boolean"), ("mode", "plan", None),
    ]


def test_mode_falls_back_to_session_modes_and_says_when_there_is_no_choice(line_deck):
    """The demo agent offers legacy session modes only (no config options): /mode lists and sets them
    with session/set_mode; the fake agent offers neither."""
    demo = f'[agents.demo]\ncommand = {json.dumps([sys.executable, "-P", "-m", "deck.demo"])}\n'
    deck = line_deck(demo + agent_block("a"))
    deck.send("@demo")
    deck.send("/mode")
    deck.expect(r"\[demo\] \* default  Default")
    deck.expect(r"\[demo\]   plan  Plan only")
    deck.send("/mode nope")
    deck.expect(r".*demo offers no mode 'nope' \(modes: default, plan\)")
    deck.send("/mode plan")
    deck.expect(r"\[demo\] mode: plan")
    deck.send("/mode")
    deck.expect(r"\[demo\] \* plan  Plan only")
    deck.send("@a")
    deck.send("/model")
    deck.expect(r".*a offers no model to choose \(its config options: /set\)")
    deck.send("/mode")
    deck.expect(r".*a offers no mode to choose \(its config options: /set\)")
    deck.send("/set")
    deck.expect(r"\[a\] a offers no config options")
    assert deck.close() == 0


def test_the_agents_own_commands_are_listed_and_reached_and_deck_keeps_its_own(line_deck):
    """/NAME of the agent's goes to it as a message; one named as deck's is deck's, and //NAME reaches the agent's."""
    deck = line_deck(agent_block("a", "--commands", "review,new"))
    deck.send("/start")
    deck.expect(r"\[a\] ready")
    deck.send("/help")
    deck.expect(r"\[deck\] a's own commands \(sent to it as a message; //NAME for one that deck's hides\):")
    deck.expect(r"\[deck\] /new +the agent's new \(//new: deck has a /new\)")
    deck.expect(r"\[deck\] /review +the agent's review")
    deck.send("/review the diff")
    deck.expect(r"\[a\] You said: /review the diff")
    deck.send("//new")
    deck.expect(r"\[a\] You said: /new")
    deck.send("/new")  # deck's: a new conversation
    deck.expect(r"\[a\] new conversation")
    deck.send("/nosuch")
    deck.expect(r".*unknown command: /nosuch")
    assert deck.close() == 0


def test_a_url_question_shows_the_address_and_answer_goes_on(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("url-question https://auth.example.com/device")
    deck.expect(r"\[a\] question: Sign in to go on")
    deck.expect(r"\[a\] → open the address above, then /answer to go on, or /decline")
    deck.send("/answer")
    deck.expect(r'\[a\] \{"action": "accept"\}')
    assert deck.close() == 0
    assert any("https://auth.example.com/device" in line for line in deck.lines)


def test_piped_input_is_answered_in_the_order_of_its_lines(tmp_path):
    config = tmp_path / "deck.toml"
    config.write_text(agent_block("a") + agent_block("b"))
    script = "/agents\n@a echo two\n@nobody hi\n/nosuch\n@b echo five\n"
    done = subprocess.run([*DECK, "run", "--frontend=line", "--config", str(config)], input=script,
                          capture_output=True, text=True, timeout=60, env=plain_env())  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    order = [lines.index(line) for line in ("[a] a · stopped  (current)", "[a] > echo two",
             "[deck] unknown agent 'nobody' (agents: a, b)", "[deck] unknown command: /nosuch", "[b] > echo five")]  # fmt: skip
    assert order == sorted(order), lines


def test_logs_are_offered_after_an_error_only_when_the_agent_wrote_some(line_deck):
    """A command that is missing wrote nothing: no `/logs` hint (it would show `no log lines`); an
    agent that said why on stderr before it failed: the hint, and /logs shows the line."""
    loud = [sys.executable, "-c", "import sys; print('boom: no key', file=sys.stderr); sys.exit(1)"]
    deck = line_deck(agent_block("gone", command=["/no/such/agent-binary"]) + agent_block("loud", command=loud))
    deck.send("@gone hi")
    deck.expect(r"\[gone\] error: command not found: /no/such/agent-binary")
    deck.expect(r"\[gone\] unavailable: .*")
    deck.send("@loud hi")
    deck.expect(r"\[loud\] error: the agent exited during the handshake with code 1")
    deck.expect(r"\[loud\] /logs loud shows its last stderr lines")
    deck.send("/logs loud")
    deck.expect(r"\[loud\] \| boom: no key")
    assert deck.close() == 0
    assert not any(line.startswith("[gone] /logs") for line in deck.lines)


def test_quit_with_a_request_waiting_says_first_that_it_is_cancelled(line_deck):
    deck = line_deck(agent_block("a"))
    deck.send("perm")
    deck.expect(r"\[a\] permission\? Edit file  \+1 -1 /x")
    deck.send("/quit")
    deck.expect(r"\[deck\] quitting: 1 request waiting cancelled as the agents stop")
    deck.expect(r"\[a\] permission: cancelled")
    assert deck.close() == 0
