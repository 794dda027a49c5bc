"""`deck send AGENT TEXT` run as a real command against real fake agents."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import AGENTS, agent_block

DECK = [sys.executable, "-c", "from deck.cli.commands import main; main()"]


def deck_send(tmp_path: Path, config: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "deck.toml"
    path.write_text(config)
    return subprocess.run(
        [*DECK, "send", "--config", str(path), *args], capture_output=True, text=True, timeout=timeout, cwd=tmp_path
    )


def test_answer_on_stdout_exit_zero(tmp_path):
    done = deck_send(tmp_path, agent_block("a"), "a", "hello there")
    assert (done.returncode, done.stdout) == (0, "You said: hello there\n")
    assert done.stderr == ""


def test_thoughts_and_tools_go_to_stderr(tmp_path):
    done = deck_send(tmp_path, agent_block("a"), "a", "thought")
    assert done.returncode == 0 and done.stdout == "answer\n"
    assert "thinking" in done.stderr and "more thinking" in done.stderr
    done = deck_send(tmp_path, agent_block("a"), "a", "tools")
    assert done.returncode == 0 and done.stdout == "done\n"
    assert "[tool] Read a.txt (read): completed" in done.stderr
    done = deck_send(tmp_path, agent_block("a"), "a", "plan")
    assert done.stdout == "" and "[plan] 1/1 done" in done.stderr


@pytest.mark.parametrize(
    ("reason", "code"), [("max_tokens", 3), ("max_turn_requests", 4), ("refusal", 5), ("cancelled", 6)]
)
def test_each_other_stop_reason_has_its_exit_code(tmp_path, reason, code):
    done = deck_send(tmp_path, agent_block("a"), "a", f"stop {reason}")
    assert done.returncode == code
    assert done.stdout == f"stopping: {reason}\n"
    assert f"stopped: {reason}" in done.stderr


def test_agent_errors_exit_one(tmp_path):
    crash = deck_send(tmp_path, agent_block("a"), "a", "crash")
    assert crash.returncode == 1 and crash.stdout == "about to crash\n"
    assert "code 7" in crash.stderr and "Traceback" not in crash.stderr
    error = deck_send(tmp_path, agent_block("a"), "a", "error")
    assert error.returncode == 1 and "Authentication required" in error.stderr
    missing = deck_send(tmp_path, agent_block("a", command=["/no/such/agent-binary"]), "a", "hi")
    assert missing.returncode == 1 and "command not found: /no/such/agent-binary" in missing.stderr


def test_usage_errors_exit_two(tmp_path):
    unknown = deck_send(tmp_path, agent_block("a"), "nope", "hi")
    assert unknown.returncode == 2 and "unknown agent 'nope'" in unknown.stderr
    empty = deck_send(tmp_path, agent_block("a"), "a", " ")
    assert empty.returncode == 2 and "empty message" in empty.stderr


def test_permission_requests_are_refused_unless_the_policy_allows(tmp_path):
    refused = deck_send(tmp_path, agent_block("a"), "a", "perm")
    assert refused.returncode == 0 and refused.stdout == "permission: no\n"
    assert "permission for Edit file (edit) refused: deck send cannot ask (--approve edit or" in refused.stderr
    allowed = deck_send(tmp_path, agent_block("a", permissions="allow"), "a", "perm")
    assert allowed.returncode == 0 and allowed.stdout == "permission: yes\n"
    assert "refused" not in allowed.stderr
    reads = deck_send(tmp_path, agent_block("a", permissions="allow-reads"), "a", "perms 2 read")
    assert reads.stdout == "p0: yes; p1: yes; \n"


def test_questions_are_declined(tmp_path):
    done = deck_send(tmp_path, agent_block("a"), "a", "question")
    assert done.returncode == 0 and json.loads(done.stdout) == {"action": "decline"}
    assert "question declined" in done.stderr


def test_json_prints_every_event_as_a_line(tmp_path):
    done = deck_send(tmp_path, agent_block("a"), "--json", "a", "stream 3")
    assert done.returncode == 0
    events = [json.loads(line) for line in done.stdout.splitlines()]
    names = [e["event"] for e in events]
    assert names[:2] == ["conversation:reset", "message:updated"]  # a conversation of its own, then the prompt
    assert "turn:changed" in names and "agent:state" in names
    assert [e["text"] for e in events if e["event"] == "message:delta"] == ["c0 ", "c1 ", "c2 "]
    finished = [e["message"] for e in events if e["event"] == "message:updated" and e["message"].get("stopReason")]
    assert finished[0]["stopReason"] == "end_turn" and finished[0]["parts"] == [{"type": "text", "text": "c0 c1 c2 "}]
    stopped = deck_send(tmp_path, agent_block("a"), "--json", "a", "stop refusal")
    assert stopped.returncode == 5


def test_a_closed_stdout_ends_quietly_and_leaves_no_agent(tmp_path):
    path = tmp_path / "deck.toml"
    path.write_text(agent_block("a"))
    proc = subprocess.Popen(
        [*DECK, "send", "--json", "--config", str(path), "a", "slow"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    children: list[psutil.Process] = []
    assert proc.stdout is not None and proc.stderr is not None
    while not children:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        children = psutil.Process(proc.pid).children(recursive=True)
    time.sleep(0.2)
    proc.stdout.close()
    assert proc.wait(timeout=20) == 0
    assert "Traceback" not in proc.stderr.read().decode()
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def test_approve_approves_the_matching_tool_calls_only(tmp_path):
    reads = deck_send(tmp_path, agent_block("a"), "--approve", "read", "a", "perms 2 read")
    assert (reads.returncode, reads.stdout) == (0, "p0: yes; p1: yes; \n")
    assert "refused" not in reads.stderr
    edits = deck_send(tmp_path, agent_block("a"), "--approve", "read", "a", "perms 1 edit")
    assert edits.stdout == "p0: no; \n"  # an edit is not a read: refused as usual
    assert "permission for Tool 0 (edit) refused" in edits.stderr
    titled = deck_send(
        tmp_path, agent_block("a"), "--approve", "edit:Tool 1", "--approve", "execute", "a", "perms 3 edit"
    )
    assert titled.stdout == "p0: no; p1: yes; p2: no; \n"  # the title glob picks one edit, and allow_once it is
    edit = deck_send(tmp_path, agent_block("a"), "--approve", "*:Edit *", "a", "perm")
    assert edit.stdout == "permission: yes\n"


def test_a_bad_approve_pattern_is_a_usage_error(tmp_path):
    for pattern, why in [("reed", "reed is not a tool kind"), ("edit:", "no title glob after edit:"), ("", "empty")]:
        done = deck_send(tmp_path, agent_block("a"), "--approve", pattern, "a", "hi")
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"deck: bad --approve {pattern!r}: {why}"), done.stderr
        assert done.stdout == ""


def test_a_lone_surrogate_from_the_agent_is_written_as_its_escape(tmp_path):
    """An agent's chunk carrying a lone surrogate (valid JSON: "\\ud800") neither hangs nor drops the answer."""
    unruly = AGENTS / "unruly_agent.py"
    config = agent_block("u", command=[sys.executable, str(unruly)])
    done = deck_send(tmp_path, config, "u", "surrogate")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "\\ud800after\n"
    as_json = deck_send(tmp_path, config, "--json", "u", "surrogate", timeout=20)
    assert as_json.returncode == 0, as_json.stderr
    assert any("after" in line for line in as_json.stdout.splitlines())
