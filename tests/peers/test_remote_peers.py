"""Claude Code's adapter on "another host": through ssh to a real sshd on 127.0.0.1 (tests/sshd.py), with
fs and terminals off in deck's capabilities, it writes its files itself, on its host, after the user's
permission; the model is tests/peers/fake_anthropic.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.sshd import sshd  # noqa: F401 (a fixture)

from .conftest import agent_toml, claude_command, on_testbox, processes_in
from .fake_anthropic import FakeAnthropic, Reply
from .test_claude_agent_acp import QUIET

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_claude_code_on_a_remote_host_writes_its_own_files(peer_deck, sshd, workdir, home):  # noqa: F811
    target = workdir / "remote.txt"
    script = [
        Reply(text="Writing it.", tool_uses=[("Write", {"file_path": str(target), "content": "written on the host\n"})]),
        Reply(text="Done."),
    ]
    with FakeAnthropic(lambda body: script[min(len(fake.turns), len(script)) - 1]) as fake:
        env = {**QUIET, "ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "sk-ant-fake-key", "HOME": str(home)}
        pd = peer_deck(agent_toml("claude", claude_command(), workdir, env, **on_testbox(sshd)))
        pd.deck.chat.send("claude", "write the remote file")
        request = await pd.rec.wait_event("permission:requested", agent="claude", timeout=90)
        assert not target.exists()
        pd.deck.chat.answer_permission(request["id"], "allow")
        await pd.rec.wait(
            lambda r: (m := pd.deck.chat.conversation("claude").messages[-1]).role == "agent" and m.done, timeout=90
        )
    (initialize,) = pd.schema.sent("initialize")
    capabilities = initialize["params"]["clientCapabilities"]
    assert capabilities["fs"] == {"readTextFile": False, "writeTextFile": False} and capabilities["terminal"] is False
    assert target.read_text() == "written on the host\n"  # by the agent itself, on its host
    assert pd.schema.received("fs/write_text_file") == []  # never through deck
    await pd.deck.call("AgentService.Stop", {"name": "claude"})
    deadline = time.monotonic() + 20
    while processes_in(workdir) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # its host ends it: input closed, a grace, then its process group signalled
    assert processes_in(workdir) == []  # nothing of it left running on its host
    await pd.close()
