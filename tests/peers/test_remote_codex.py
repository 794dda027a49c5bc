"""Codex's adapter (codex-acp) on "another host": through ssh to a real sshd on 127.0.0.1 (tests/sshd.py),
with fs and terminals off in deck's capabilities, it applies its own patch on its host, after the user's
permission; the model is tests/peers/fake_openai.py, its key only in the agent's env."""

from __future__ import annotations

import asyncio
import time

import psutil
import pytest

from tests.sshd import sshd  # noqa: F401 (a fixture)

from .conftest import agent_toml, codex_command, on_testbox, processes_in
from .fake_openai import FakeOpenAI, Reply, last_user_text, provider_args, tool_outputs
from .test_codex_acp import FAKE_KEY

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_codex_on_a_remote_host_applies_its_own_patch(peer_deck, sshd, workdir, home):  # noqa: F811
    target = workdir / "remote.txt"
    patch = f"*** Begin Patch\n*** Add File: {target}\n+written on the host\n*** End Patch\n"
    script = [Reply(text="Writing it.", calls=[("apply_patch", patch)]), Reply(text="Done.")]
    with FakeOpenAI(lambda body: script[min(len(fake.turns), len(script)) - 1]) as fake:
        # HOME is the agent's CODEX_HOME's parent: a fresh ~/.codex, no real login or config of this machine.
        env = {"OPENAI_API_KEY": FAKE_KEY, "HOME": str(home)}
        command = codex_command() + provider_args(fake.url)
        pd = peer_deck(agent_toml("codex", command, workdir, env, authMethod="openai-api-key", **on_testbox(sshd)))
        pd.deck.chat.send("codex", "write the remote file")
        request = await pd.rec.wait_event("permission:requested", agent="codex", timeout=90)
        assert not target.exists()
        assert request["toolCall"]["kind"] == "edit" and str(target) in request["toolCall"]["title"]
        allow = next(o for o in request["options"] if o["kind"] == "allow_once")  # codex's: "approved"
        pd.deck.chat.answer_permission(request["id"], allow["optionId"])
        await pd.rec.wait(
            lambda r: (m := pd.deck.chat.conversation("codex").messages[-1]).role == "agent" and m.done, timeout=90
        )
    assert [last_user_text(body) for body in fake.turns] == ["write the remote file"] * 2
    assert all(body["model"] == "gpt-5.5" and body["stream"] is True for body in fake.turns)
    (output,) = tool_outputs(fake.turns[1])  # what its own apply_patch told the model
    assert output["type"] == "custom_tool_call_output" and f"A {target}" in output["output"]
    assert pd.deck.chat.conversation("codex").messages[-1].text.endswith("Done.")
    (initialize,) = pd.schema.sent("initialize")
    capabilities = initialize["params"]["clientCapabilities"]
    assert capabilities["fs"] == {"readTextFile": False, "writeTextFile": False} and capabilities["terminal"] is False
    assert [m["params"] for m in pd.schema.sent("authenticate")] == [{"methodId": "openai-api-key"}]
    (new,) = pd.schema.sent("session/new")
    assert new["params"]["cwd"] == str(workdir)  # the host's cwd
    assert target.read_text() == "written on the host\n"  # by the agent itself, on its host
    assert pd.schema.received("fs/write_text_file") == [] and pd.schema.received("terminal/create") == []
    on_host = [p for p in psutil.process_iter() if _cwd(p) == str(workdir)]
    assert on_host and all(sshd.pid in {a.pid for a in p.parents()} for p in on_host)  # run by the host's sshd
    await pd.deck.call("AgentService.Stop", {"name": "codex"})
    deadline = time.monotonic() + 20
    while processes_in(workdir) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # its host ends it: input closed, a grace, then its process group signalled
    assert processes_in(workdir) == []  # nothing of it left running on its host
    await pd.close()


def _cwd(process: psutil.Process) -> str | None:
    try:
        return process.cwd()
    except psutil.Error:
        return None
