"""`deck agents --check [--handshake]`: commands found or not, handshakes completed or not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil

from tests.conftest import agent_block

DECK = [sys.executable, "-c", "from deck.cli.commands import main; main()"]


def deck_agents(config: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, "agents", "--config", str(config), *flags], capture_output=True, text=True, timeout=60)


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "deck.toml"
    config.write_text(
        agent_block("good")
        + agent_block("missing", command=["no-such-agent-binary-xyz", "acp"])
        + agent_block("broken", "--fail-start")
        + agent_block("relative", command=["./agent.sh"], cwd=str(tmp_path))
    )
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\nexec true\n")
    script.chmod(0o755)
    return config


def test_check_reports_missing_commands(tmp_path):
    result = deck_agents(write_config(tmp_path), "--check")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"✓ good             command: {sys.executable}"
    assert lines[1] == "✗ missing          command not found: no-such-agent-binary-xyz"
    assert lines[2].startswith("✓ broken ")
    assert lines[3] == f"✓ relative         command: {tmp_path}/./agent.sh"


def test_check_says_why_an_agent_cannot_start_as_its_start_would(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "plain").write_text("#!/bin/sh\nexec true\n")  # there, but not executable
    config = tmp_path / "deck.toml"
    config.write_text(
        agent_block("nowhere", cwd=str(tmp_path / "gone"))
        + agent_block("path", command=[str(tmp_path / "bin" / "plain")])
        + agent_block("searched", command=["plain"])
        + f"env = {{ PATH = {json.dumps(str(tmp_path / 'bin'))} }}\n"
    )
    result = deck_agents(config, "--check")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"✗ nowhere          working directory does not exist: {tmp_path / 'gone'}",
        f"✗ path             command not executable: {tmp_path / 'bin' / 'plain'}",
        "✗ searched         command not executable: plain",
    ]
    rows = {row["name"]: row for row in json.loads(deck_agents(config, "--check", "--json").stdout)}
    assert rows["nowhere"]["found"] is None and rows["nowhere"]["problem"].startswith("working directory")


def test_check_with_handshake(tmp_path):
    config = write_config(tmp_path)
    result = deck_agents(config, "--check", "--handshake", "--json")
    assert result.returncode == 1, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["good"]["handshake"]["ok"] is True
    assert rows["missing"]["found"] is None and rows["missing"]["handshake"] is None
    broken = rows["broken"]["handshake"]
    assert broken["ok"] is False and "exited during the handshake with code 3" in broken["error"]
    assert "fatal: missing API key" in broken["error"]  # the agent's own stderr explains why
    assert rows["relative"]["handshake"]["ok"] is False
    # Every agent it started is stopped again.
    assert not [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


def test_check_passes_when_every_agent_is_fine(tmp_path):
    config = tmp_path / "deck.toml"
    config.write_text(agent_block("a") + agent_block("b", title="Second"))
    result = deck_agents(config, "--check", "--handshake")
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(line.startswith("✓ ") and "handshake ok" in line for line in result.stdout.splitlines())
    plain = deck_agents(config)
    assert plain.returncode == 0 and "handshake" not in plain.stdout


def test_check_refuses_a_worktree_agent_whose_cwd_is_in_no_repository(tmp_path):
    (tmp_path / "plain").mkdir()
    for repo in ("repo", "empty"):
        subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path / repo)], check=True)
    subprocess.run(["git", "-C", str(tmp_path / "repo"), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "first"], check=True)  # fmt: skip
    config = tmp_path / "deck.toml"
    config.write_text(
        agent_block("loose", cwd=str(tmp_path / "plain"), worktree=True)
        + agent_block("kept", cwd=str(tmp_path / "repo"), worktree=True)
        + agent_block("early", cwd=str(tmp_path / "empty"), worktree=True)
    )
    result = deck_agents(config, "--check")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"✗ loose            {tmp_path / 'plain'} is in no git repository: worktree = true needs one",
        f"✓ kept             command: {sys.executable}",
        f"✗ early            {tmp_path / 'empty'} has no commit yet: a worktree starts from one",
    ]
    off = deck_agents(config, "kept", "--check", "-p", "no:worktrees")  # it would run in the main checkout
    assert off.returncode == 1
    assert off.stdout == "✗ kept             worktree is set, but the worktrees plugin, which reads it, is off (-p no:worktrees)\n"
