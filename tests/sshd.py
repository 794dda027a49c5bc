"""A real OpenSSH server on 127.0.0.1 for the tests (scripts/install-sshd.sh installs it): its own host key,
a client key made per run, an ssh_config naming it `testbox`, and a known_hosts that knows it."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


class SSHServer:
    """sshd on a free port of 127.0.0.1, for the current user with a key made here."""

    def __init__(self, folder: Path, extra: str = "") -> None:
        """`extra`: more lines for its sshd_config (`SetEnv PATH=…`: the PATH a host gives its sessions)."""
        if not os.path.exists(SSHD) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
            pytest.fail("no OpenSSH here: install it with `bash scripts/install-sshd.sh`")
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        self.folder = folder
        for name in ("host_key", "id_ed25519"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True)
        (folder / "authorized_keys").write_text((folder / "id_ed25519.pub").read_text())
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config = folder / "sshd_config"
        config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\nPidFile {folder / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {folder / 'authorized_keys'}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nLogLevel VERBOSE\nMaxStartups 50\n"
            # A client may give its sessions their own state folder and git variables (`-o SetEnv=…`),
            # as a host's login environment would: the worktree tests do.
            "AcceptEnv XDG_STATE_HOME GIT_*\n" + extra
        )
        if os.getuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # its privilege separation folder
        # As a daemon (no -D): not a child of the test, so what runs on "the host" is no test's descendant,
        # as it would not be on another machine (the peers' tests look for processes left behind).
        started = subprocess.run([SSHD, "-f", str(config), "-E", str(folder / "sshd.log")], capture_output=True, text=True)
        if started.returncode != 0:
            raise AssertionError(f"sshd did not start: {started.stderr}{(folder / 'sshd.log').read_text()}")
        deadline = time.monotonic() + 15
        while True:
            try:
                self.pid = int((folder / "sshd.pid").read_text())
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    raise AssertionError(f"sshd did not start: {(folder / 'sshd.log').read_text()}") from None
                time.sleep(0.05)
        host_key = (folder / "host_key.pub").read_text().split()
        (folder / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {host_key[0]} {host_key[1]}\n")
        (folder / "empty_known_hosts").write_text("")
        self.config = self.client_config("known_hosts")

    def client_config(self, known_hosts: str, name: str = "ssh_config") -> Path:
        """An ssh_config where `testbox` is this server, its host keys in `known_hosts`."""
        path = self.folder / name
        path.write_text(
            f"Host testbox\n  HostName 127.0.0.1\n  Port {self.port}\n  User {getpass.getuser()}\n"
            f"  IdentityFile {self.folder / 'id_ed25519'}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.folder / known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
        )
        return path

    def connections(self) -> list[psutil.Process]:
        """The server's processes for its connections (its children)."""
        try:
            return psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        for child in self.connections():
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        try:
            server = psutil.Process(self.pid)
            server.terminate()
            server.wait(10)
        except psutil.NoSuchProcess:
            pass


def marked(mark: str) -> list[psutil.Process]:
    """The processes whose environment holds DECK_TEST_MARK=`mark` (an agent started on the host)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("DECK_TEST_MARK") == mark:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_unmarked(mark: str, timeout: float = 20.0) -> list[psutil.Process]:
    """Wait until no process holds `mark`; what is left then."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in marked(mark) if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    server = SSHServer(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()
