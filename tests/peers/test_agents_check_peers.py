"""`deck agents --check --handshake` against the real peers: each completes an ACP handshake."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest

from .conftest import agent_toml, chuk_command, claude_command, fast_agent_command, processes_in

pytestmark = pytest.mark.timeout(120)


def test_every_peer_completes_a_handshake(home, workdir, tmp_path):
    config = tmp_path / "deck.toml"
    config.write_text(
        agent_toml("fast", fast_agent_command(home), workdir)
        + agent_toml("echo", chuk_command(), workdir)
        + agent_toml("claude", claude_command(), workdir, env={"IS_SANDBOX": "1"})
    )
    result = subprocess.run(
        [sys.executable, "-c", "from deck.cli.commands import main; main()", "agents", "--config", str(config), "--check", "--handshake", "--json"],
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["fast"]["handshake"]["agent"].startswith("fast-agent")
    assert rows["echo"]["handshake"]["ok"] is True
    assert rows["claude"]["handshake"]["agent"] == "@zed-industries/claude-agent-acp 0.23.1"
    assert all(row["found"] for row in rows.values())
    assert not [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    assert not processes_in(workdir), "agents left running after the check"
