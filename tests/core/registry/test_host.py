"""A registry agent's binary installed on a host through ssh, against a real sshd on 127.0.0.1
(tests/sshd.py): checked here, unpacked there into the host's own data folder, started there for a
real handshake, and removed from there with its entry."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deck_process import DECK
from tests.registry_server import HERE, RegistryServer, agent_tar, binary_agent, sha256, tar_bytes, tar_special
from tests.sshd import SSHServer


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """sshd that lets a client give its sessions their own XDG_DATA_HOME (the host's data folder)."""
    server = SSHServer(tmp_path_factory.mktemp("sshd"), extra="AcceptEnv XDG_DATA_HOME\n")
    yield server
    server.stop()


def deck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, "agents", *args], capture_output=True, text=True, timeout=120)


def test_a_binary_is_installed_on_the_host_runs_there_and_is_removed_from_there(
    registry: RegistryServer, box: SSHServer, tmp_path: Path
) -> None:
    archive = agent_tar()
    registry.serve_registry(
        [binary_agent("tiny", "1.0.0", registry.serve("/tiny.tar.gz", archive), digest=sha256(archive))]
    )
    host_data = tmp_path / "host-data"  # the host's $XDG_DATA_HOME: not this machine's (tmp_path/data)
    config = tmp_path / "deck.toml"
    config.write_text("# on a box\n")
    ssh = ["-F", str(box.config), "-o", "ControlPath=none", "-o", f"SetEnv=XDG_DATA_HOME={host_data}"]
    added = deck(
        "add",
        "tiny",
        "--host",
        "testbox",
        "--cwd",
        str(tmp_path),
        *[f"--ssh={a}" for a in ssh],
        "--config",
        str(config),
    )
    assert added.returncode == 0, added.stderr
    assert added.stdout == f"added tiny: tiny 1.0.0 (binary {HERE}, on testbox) to {config}\n"
    folder = host_data / "deck" / "agents" / "tiny" / "1.0.0"
    assert (folder / "bin" / "agent").read_bytes().startswith(b"#!/bin/sh") and (
        folder / "LICENSE"
    ).read_bytes() == b"MIT"
    assert not (tmp_path / "data").exists()  # nothing installed on this machine
    text = config.read_text()
    assert f'command = ["{folder}/bin/agent", "acp"]' in text and 'host = "testbox"' in text
    checked = subprocess.run(
        [*DECK, "agents", "--check", "--handshake", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0 and "handshake ok" in checked.stdout, checked.stdout + checked.stderr
    removed = deck("remove", "tiny", "--config", str(config))
    assert removed.returncode == 0 and removed.stdout.endswith(f", and its binary {folder} on testbox\n"), (
        removed.stderr
    )
    assert not folder.parent.exists() and config.read_text() == "# on a box\n"


def test_a_hostile_archive_for_a_host_is_refused_here_and_nothing_reaches_the_host(
    registry: RegistryServer, box: SSHServer, tmp_path: Path
) -> None:
    hostile = tar_bytes([("bin/agent", b"#!/bin/sh\n"), tar_special("bin/x", b"2", "../../../escaped")])
    registry.serve_registry([binary_agent("evil", "1", registry.serve("/evil.tar.gz", hostile))])
    host_data = tmp_path / "host-data"
    config = tmp_path / "deck.toml"
    config.write_text("")
    ssh = ["-F", str(box.config), "-o", "ControlPath=none", "-o", f"SetEnv=XDG_DATA_HOME={host_data}"]
    added = deck(
        "add", "evil", "--host", "testbox", "--cwd", "/", *[f"--ssh={a}" for a in ssh], "--config", str(config)
    )
    assert added.returncode == 1 and "links out of its folder" in added.stderr and added.stderr.count("\n") == 1
    assert not host_data.exists() and config.read_text() == ""


def test_an_unreachable_host_is_one_line(registry: RegistryServer, tmp_path: Path) -> None:
    registry.serve_registry([binary_agent("tiny", "1", registry.serve("/t.tar.gz", agent_tar()))])
    config = tmp_path / "deck.toml"
    config.write_text("")
    added = deck(
        "add", "tiny", "--host", "nohost.invalid", "--cwd", "/", "--ssh=-oConnectTimeout=5", "--config", str(config)
    )
    assert (
        added.returncode == 1 and added.stderr.startswith("deck: on nohost.invalid: ") and added.stderr.count("\n") == 1
    )
    assert config.read_text() == ""


def test_an_entry_that_cannot_be_saved_takes_its_binary_off_the_host_again(
    registry: RegistryServer, box: SSHServer, tmp_path: Path
) -> None:
    registry.serve_registry([binary_agent("tiny", "1.0.0", registry.serve("/tiny.tar.gz", agent_tar()))])
    host_data = tmp_path / "host-data"
    config = tmp_path / "deck.toml"
    config.write_text("")
    ssh = ["-F", str(box.config), "-o", "ControlPath=none", "-o", f"SetEnv=XDG_DATA_HOME={host_data}"]
    added = deck(
        "add",
        "tiny",
        "--host",
        "testbox",
        "--cwd",
        "relative/dir",
        *[f"--ssh={a}" for a in ssh],
        "--config",
        str(config),
    )
    assert added.returncode == 1 and "not written: the edited config would be invalid" in added.stderr, added.stderr
    assert "is not an absolute path on testbox" in added.stderr and config.read_text() == ""
    assert not (host_data / "deck" / "agents" / "tiny").exists()


def test_an_npx_agent_on_a_host_needs_nothing_installed_there(registry: RegistryServer, tmp_path: Path) -> None:
    gemini = {"id": "gemini", "name": "Gemini CLI", "version": "0.37.0",
              "distribution": {"npx": {"package": "@google/gemini-cli@0.37.1", "args": ["--acp"]}}}  # fmt: skip
    registry.serve_registry([gemini])
    config = tmp_path / "deck.toml"
    config.write_text("")
    added = deck("add", "gemini", "--host", "nohost.invalid", "--cwd", "/srv/app", "--config", str(config))
    assert (
        added.returncode == 0 and added.stdout == f"added gemini: gemini 0.37.0 (npx, on nohost.invalid) to {config}\n"
    )
    text = config.read_text()
    assert (
        'command = ["npx", "-y", "@google/gemini-cli@0.37.1", "--acp"]\nhost = "nohost.invalid"\ncwd = "/srv/app"\n'
        in text
    )
