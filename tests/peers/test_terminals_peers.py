"""Live command output with real peers: Claude Code running its own Bash tool and streaming it in
`_meta`, and fast-agent running its shell tool (`-x`) through deck's terminal/*."""

from __future__ import annotations

import json

import pytest

from .conftest import agent_toml, claude_command, fast_agent_command
from .fake_anthropic import FakeAnthropic, Reply, tool_results
from .test_claude_agent_acp import QUIET, last_reply

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def tools_of(reply) -> list[dict]:
    return [p.to_dict() for p in reply.parts if p.type == "tool"]


async def test_claude_streams_its_own_bash_output_in_meta(peer_deck, workdir):
    # Exit 0: for a failed command (is_error) the adapter sends the output as text content, not in `_meta`.
    command = "printf 'one\\ntwo\\n'; printf '\\033[31mthree\\033[0m\\n'"
    script = [Reply(tool_uses=[("Bash", {"command": command, "description": "print three lines"})]), Reply(text="Ran it.")]
    with FakeAnthropic(lambda body: script[len(fake.turns) - 1]) as fake:
        env = {**QUIET, "ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "sk-ant-fake-key"}
        pd = peer_deck(agent_toml("claude", claude_command(), workdir, env=env))
        pd.deck.chat.send("claude", "run the command")
        request = await pd.rec.wait_event("permission:requested", agent="claude", timeout=60)
        assert request["toolCall"]["kind"] == "execute"
        pd.deck.chat.answer_permission(request["id"], "allow")
        reply = await pd.rec.wait(lambda r: last_reply(pd), timeout=60)
        assert "three" in json.dumps(tool_results(fake.turns[1]))  # Claude Code ran it itself
    (init,) = pd.schema.sent("initialize")
    assert init["params"]["clientCapabilities"]["_meta"] == {"terminal_output": True}
    (tool,) = tools_of(reply)
    (terminal,) = tool["terminals"]
    assert terminal["terminalId"] == tool["id"]  # the adapter names the terminal after the tool call
    live = pd.rec.named("terminal:output", "claude")
    assert "".join(e["text"] for e in live) == terminal["output"]
    assert terminal["output"].split("\n")[:2] == ["one", "two"] and "three" in terminal["output"]
    exited = pd.rec.named("terminal:exited", "claude")
    assert [e["exitStatus"] for e in exited] == [{"exitCode": 0, "signal": None}] == [terminal["exitStatus"]]
    assert tool["status"] == "completed"
    await pd.close()


async def test_fast_agent_runs_its_shell_tool_through_deck_s_terminals(peer_deck, home, workdir):
    command = [*fast_agent_command(home), "-x", "--no-permissions"]
    pd = peer_deck(agent_toml("fast", command, workdir))
    code = "import time\nfor i in range(3):\n    print('tick', i, flush=True); time.sleep(0.2)\nraise SystemExit(4)"
    (workdir / "ticks.py").write_text(code)
    call = {"command": "python3", "args": [str(workdir / "ticks.py")]}
    pd.deck.chat.send("fast", f"***CALL_TOOL execute {json.dumps(call)}")
    first = await pd.rec.wait_event("terminal:output", agent="fast", timeout=60)
    exited = await pd.rec.wait_event("terminal:exited", agent="fast", timeout=30)
    assert exited["terminalId"] == first["terminalId"] and exited["exitStatus"] == {"exitCode": 4, "signal": None}
    await pd.rec.wait(lambda r: (conv := pd.deck.chat.conversation("fast")).messages and not conv.busy
                      and conv.messages[-1].done, timeout=60)  # fmt: skip
    live = "".join(e["text"] for e in pd.rec.named("terminal:output", "fast"))
    assert live == "tick 0\ntick 1\ntick 2\n"
    assert len(pd.rec.named("terminal:output", "fast")) >= 2  # as it came
    (created,) = pd.schema.received("terminal/create")
    assert created["params"]["command"] == "python3" and created["params"].get("cwd") in (None, str(workdir))
    # fast-agent embeds the terminal in no tool call: its output shows on the tool call running then.
    (tool,) = tools_of(pd.deck.chat.conversation("fast").messages[-1])
    assert tool["terminals"] == [{"terminalId": first["terminalId"], "output": live, "exitStatus": exited["exitStatus"]}]
    assert [m["method"] for m in pd.schema.received("terminal/release")] == ["terminal/release"]
    await pd.close()
