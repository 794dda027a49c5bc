"""`deck run --frontend=jsonl` as a subprocess driving fast-agent: the whole stack, end to end."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from .conftest import agent_toml, claude_command, fast_agent_command, processes_in
from .fake_anthropic import StalledAnthropic
from .schema import AcpSchema, OutgoingChecker

pytestmark = pytest.mark.timeout(120)

DECK = [sys.executable, "-c", "from deck.cli.commands import main; main()"]


class Bridge:
    """A running `deck run --frontend=jsonl`: lines out are parsed, requests go in."""

    def __init__(self, config: Path, trace: Path) -> None:
        self.proc = subprocess.Popen(
            [*DECK, "run", "--frontend=jsonl", "--config", str(config), "--trace", str(trace)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy(),
        )  # fmt: skip
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.descendants: dict[int, psutil.Process] = {}
        threading.Thread(target=self._read, daemon=True).start()
        self._next_id = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(json.loads(raw))
        self.lines.put(None)

    def snapshot(self) -> None:
        try:
            for p in psutil.Process(self.proc.pid).children(recursive=True):
                self.descendants.setdefault(p.pid, p)
        except psutil.Error:
            pass

    def left_behind(self, cwd: Path, timeout: float = 5) -> list[str]:
        """Processes deck started (or that run in `cwd`) still alive once orphans have had `timeout` to go."""
        deadline = time.monotonic() + timeout
        while True:
            left = [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in self.descendants.values() if _alive(p)]
            left += [f"{line} (in the agent's cwd)" for line in processes_in(cwd)]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)  # orphans are reaped by init a moment after deck exits

    def request(self, method: str, **params: Any) -> int:
        self._next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        return self._next_id

    def drain(self) -> list[dict[str, Any]]:
        """Every line left once deck has exited."""
        rest = []
        while (line := self.lines.get(timeout=10)) is not None:
            rest.append(line)
        return rest

    def expect(self, timeout: float = 60, **match: Any) -> dict[str, Any]:
        """The next line (event or response) whose keys match; earlier ones are kept in `seen`."""
        deadline = time.monotonic() + timeout
        while True:
            self.snapshot()
            try:
                line = self.lines.get(timeout=max(0.01, min(0.2, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise AssertionError(f"no line matching {match} within {timeout}s; last lines: {self.seen[-5:]}")
                continue
            if line is None:
                raise AssertionError(f"deck ended before a line matching {match}; last lines: {self.seen[-5:]}")
            self.seen.append(line)
            if all(line.get(k) == v for k, v in match.items()):
                return line


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def conformant(trace: Path) -> OutgoingChecker:
    """The --trace file holds every ACP message; what deck sent must conform to the schema."""
    checker = OutgoingChecker(AcpSchema())
    for line in trace.read_text().splitlines():
        record = json.loads(line)
        checker.seen(record["direction"], record["message"])
    assert checker.checked, "nothing traced"
    assert not checker.problems, "\n".join(checker.problems)
    return checker


def test_jsonl_bridge_drives_fast_agent_through_a_permission(home: Path, workdir: Path, tmp_path: Path):
    (workdir / "data.txt").write_text("42\n")
    config = tmp_path / "deck.toml"
    config.write_text(agent_toml("fast", fast_agent_command(home), workdir))
    trace = tmp_path / "trace.jsonl"
    bridge = Bridge(config, trace)
    started = time.monotonic()
    try:
        prompt = f"***CALL_TOOL read_text_file {json.dumps({'path': str(workdir / 'data.txt')})}"
        send = bridge.request("ChatService.Send", agent="fast", text=prompt)
        user_id = bridge.expect(id=send)["result"]
        assert user_id.startswith("msg-")
        bridge.expect(event="agent:state", agent="fast", state="ready")
        asked = bridge.expect(event="permission:requested", agent="fast")
        assert asked["toolCall"]["kind"] == "read"
        answer = bridge.request("ChatService.AnswerPermission", id=asked["id"], optionId="allow_once")
        assert bridge.expect(id=answer)["result"] == {"id": asked["id"], "optionId": "allow_once"}
        done = bridge.expect(event="message:updated", agent="fast", timeout=60)
        while not done["message"]["done"] or done["message"]["role"] != "agent":
            done = bridge.expect(event="message:updated", agent="fast", timeout=60)
        assert done["message"]["stopReason"] == "end_turn"
        tool = next(p for p in done["message"]["parts"] if p["type"] == "tool")
        assert tool["status"] == "completed" and tool["output"] == "42\n"
        conv = bridge.request("ChatService.Conversation", agent="fast")
        messages = bridge.expect(id=conv)["result"]["messages"]
        assert [m["role"] for m in messages] == ["user", "agent"] and messages[0]["id"] == user_id
        # End of input: deck stops the agent and exits 0.
        assert bridge.proc.stdin is not None
        bridge.proc.stdin.close()
        bridge.expect(event="agent:state", agent="fast", state="stopped", timeout=30)
        assert bridge.proc.wait(timeout=30) == 0
    finally:
        if bridge.proc.poll() is None:
            bridge.proc.kill()
            bridge.proc.wait()
    print(f"jsonl bridge run: {time.monotonic() - started:.1f}s")
    assert bridge.descendants, "the agent process was never seen"
    left = bridge.left_behind(workdir)
    assert not left, f"processes left behind by deck: {left}"
    checker = conformant(trace)
    assert [m.get("method") for m in checker.checked][:3] == ["initialize", "session/new", "session/prompt"]


def test_sigterm_while_claude_is_busy_leaves_no_process(home: Path, workdir: Path, tmp_path: Path):
    """claude-agent-acp ignores stdin EOF and runs a child: deck's exit must still end them all."""
    config = tmp_path / "deck.toml"
    trace = tmp_path / "trace.jsonl"
    with StalledAnthropic() as stalled:  # the model never answers: the turn stays busy
        env = {"IS_SANDBOX": "1", "ANTHROPIC_BASE_URL": stalled.url, "ANTHROPIC_API_KEY": "sk-ant-fake-key",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}  # fmt: skip
        config.write_text(agent_toml("claude", claude_command(), workdir, env=env))
        bridge = Bridge(config, trace)
        try:
            bridge.request("ChatService.Send", agent="claude", text="hello?")
            bridge.expect(event="turn:changed", agent="claude", busy=True)
            # Claude Code (the child that asks the model) is running once its model request has come in.
            assert stalled.requested.wait(60), f"no model request; seen: {stalled.requests}"
            bridge.snapshot()
            assert len(bridge.descendants) >= 2, "claude-agent-acp and the Claude Code process it runs"
            started = time.monotonic()
            bridge.proc.send_signal(signal.SIGTERM)
            code = bridge.proc.wait(timeout=30)
            elapsed = time.monotonic() - started
        finally:
            if bridge.proc.poll() is None:
                bridge.proc.kill()
                bridge.proc.wait()
    print(f"deck exited {elapsed:.1f}s after SIGTERM")
    assert code == 128 + signal.SIGTERM
    assert elapsed < 15, f"deck took {elapsed:.1f}s to exit"  # stdin close 5 s + SIGTERM 3 s at most, with slack
    rest = bridge.drain()
    states = [{k: v for k, v in e.items() if k != "seq"} for e in rest if e.get("event") == "agent:state"]
    assert {"event": "agent:state", "agent": "claude", "state": "stopped", "outdated": False} in states, rest
    left = bridge.left_behind(workdir)
    assert not left, f"processes left behind by deck: {left}"
    conformant(trace)
