"""`deck acp AGENT` under real third-party ACP clients: the ACP Python SDK (`agent-client-protocol`, the
test extra) over stdio, and acpx (npm, pinned; installed by scripts/install-acp-clients.sh into
$DECK_PEERS_DIR, as the peers are: missing, its tests fail, never skip)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.schema import AllowedOutcome, RequestPermissionResponse

from tests.conftest import agent_block
from tests.deck_process import DECK
from tests.peers.conftest import PEERS_DIR

pytestmark = [pytest.mark.timeout(120)]

#: acpx is installed beside the peers (scripts/install-acp-clients.sh): `-m "not peers"` leaves it out with them.
PEERS = pytest.mark.peers

ACPX = PEERS_DIR / "acpx" / "node_modules" / ".bin" / "acpx"


class SdkClient:
    """The SDK's client side: updates kept, a permission allowed once, fs and terminals never offered."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.asked: list[Any] = []

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> RequestPermissionResponse:
        self.asked.append(tool_call)
        allow = next(o for o in options if o.kind == "allow_once")
        return RequestPermissionResponse(outcome=AllowedOutcome(optionId=allow.option_id, outcome="selected"))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for u in self.updates if u.session_update == kind)

    def on_connect(self, conn: Any) -> None:
        pass


def deck_acp(config: Path) -> list[str]:
    return [*DECK, "acp", "a", "--config", str(config)]


@pytest.mark.anyio
async def test_the_python_sdk_drives_deck_acp_over_stdio(tmp_path: Path) -> None:
    config = tmp_path / "deck.toml"
    config.write_text(agent_block("a"))
    client = SdkClient()
    command = deck_acp(config)
    async with acp.spawn_agent_process(client, command[0], *command[1:], cwd=str(tmp_path)) as (conn, _process):
        init = await conn.initialize(protocol_version=1)
        assert init.agent_info is not None and init.agent_info.name == "deck" and init.agent_capabilities.load_session
        session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        answer = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("perm")])
        assert answer.stop_reason == "end_turn"
        assert client.asked and client.asked[0].title == "Edit file"  # asked of the SDK's client, answered there
        assert client.text().endswith("permission: yes")
        assert any(u.session_update == "tool_call" for u in client.updates)
        listed = await conn.list_sessions()
        assert [s.session_id for s in listed.sessions] == [session.session_id]
    again = SdkClient()
    async with acp.spawn_agent_process(again, command[0], *command[1:], cwd=str(tmp_path)) as (conn, _process):
        await conn.initialize(protocol_version=1)
        await conn.load_session(cwd=str(tmp_path), session_id=session.session_id, mcp_servers=[])
        assert again.text("user_message_chunk") == "perm"  # the stored conversation, told again
        assert again.text().endswith("permission: yes")
        answer = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("hello again")])
        assert answer.stop_reason == "end_turn" and again.text().endswith("hello again")
    assert not _left(tmp_path)


@pytest.mark.anyio
async def test_the_python_sdk_cancels_a_prompt(tmp_path: Path) -> None:
    config = tmp_path / "deck.toml"
    config.write_text(agent_block("a"))
    client = SdkClient()
    command = deck_acp(config)
    async with acp.spawn_agent_process(client, command[0], *command[1:], cwd=str(tmp_path)) as (conn, _process):
        await conn.initialize(protocol_version=1)
        session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        prompt = asyncio.ensure_future(conn.prompt(session_id=session.session_id, prompt=[acp.text_block("slow")]))
        async with asyncio.timeout(20):
            while "tick" not in client.text():
                await asyncio.sleep(0.02)
        await conn.cancel(session_id=session.session_id)
        assert (await asyncio.wait_for(prompt, 20)).stop_reason == "cancelled"


def _left(folder: Path) -> list[str]:
    """Processes still running from `folder` (deck acp and its agents end with the client)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(folder) in cmdline and proc.status() != psutil.STATUS_ZOMBIE:
            found.append(cmdline)
    return found


def acpx(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not ACPX.exists():
        pytest.fail(f"acpx is not installed: {ACPX} is missing; run scripts/install-acp-clients.sh (or set DECK_PEERS_DIR)", pytrace=False)
    config = tmp_path / "deck.toml"
    if not config.exists():
        config.write_text(agent_block("a"))
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    command = " ".join(deck_acp(config))
    return subprocess.run(
        [str(ACPX), "--agent", command, "--cwd", str(tmp_path), *args],
        capture_output=True, text=True, timeout=90, env=env, cwd=tmp_path,
    )  # fmt: skip


@PEERS
def test_acpx_runs_deck_acp_as_its_agent_command(tmp_path: Path) -> None:
    done = acpx(tmp_path, "--approve-all", "exec", "stream 3")
    assert done.returncode == 0, done.stderr
    assert "c0 c1 c2" in done.stdout and "end_turn" in done.stdout
    asked = acpx(tmp_path, "--approve-all", "exec", "perm")  # a permission request, approved by acpx
    assert asked.returncode == 0, asked.stderr
    assert "permission: yes" in asked.stdout
    refused = acpx(tmp_path, "--deny-all", "exec", "perm")
    assert "permission: no" in refused.stdout, refused.stdout + refused.stderr
    history = subprocess.run([*DECK, "history", "a", "--json", "--config", str(tmp_path / "deck.toml")], capture_output=True, text=True)
    assert history.stdout.count('"title": "perm"') == 2  # each run kept in deck's history
    assert not _left(tmp_path / "deck.toml")


if sys.version_info < (3, 11):  # pragma: no cover
    raise RuntimeError("deck needs Python 3.11")
