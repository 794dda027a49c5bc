"""What the `deck` commands print never reaches the terminal as control sequences, whatever an agent
or a host puts in it: OSC 52 (the clipboard), OSC 0 (the title), a screen clear, CSI as a C1
control, a bidi override. A real hostile agent (tests/agents/escapes_agent.py), the real `deck`
command, its output through pipes and through a pseudo-terminal, and a real sshd as the host.
"""

from __future__ import annotations

import ast
import json
import os
import pty
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from deck.tty import printable

from tests.agents.escapes_agent import EVERY, EVERY_RAW
from tests.conftest import AGENTS, ROOT, agent_block
from tests.core.remote.test_server import clients, runtime, serve  # noqa: F401 - fixtures
from tests.deck_process import DECK, write_config
from tests.sshd import SSHServer

pytestmark = pytest.mark.timeout(90)

ESCAPES_AGENT = AGENTS / "escapes_agent.py"
#: EVERY as deck shows it.
SHOWN = printable(EVERY)


def escapes_agent(name: str, *flags: str) -> str:
    return agent_block(name, command=[sys.executable, str(ESCAPES_AGENT), *flags])


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """`deck ARGS`, its stdout and stderr through pipes."""
    return subprocess.run([*DECK, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def run_on_terminal(*args: str) -> tuple[int, str]:
    """`deck ARGS` with its stdout and stderr on one pseudo-terminal: its exit code, and what it
    wrote there (CR LF read as a newline)."""
    controller, terminal = pty.openpty()
    try:
        child = subprocess.Popen([*DECK, *args], stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal)
        os.close(terminal)
        out = b""
        while True:
            try:
                data = os.read(controller, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            out += data
        code = child.wait(60)
    finally:
        os.close(controller)
    return code, out.decode().replace("\r\n", "\n")


def assert_no_raw(*texts: str) -> None:
    for text in texts:
        for raw in EVERY_RAW:
            assert raw not in text, (raw, text)
        assert "\x1b" not in text and "\x9b" not in text and "\u202e" not in text, text


def test_the_handshake_check_shows_an_agents_name_stderr_and_initialize_error_never_raw(tmp_path: Path) -> None:
    config = write_config(tmp_path / "deck.toml",
                          escapes_agent("ok", "--info") + escapes_agent("bad", "--stderr", "--init-error"))  # fmt: skip
    args = ("agents", "--check", "--handshake", "--config", str(config))
    piped = run(*args)
    assert piped.returncode == 1, piped.stderr
    code, screen = run_on_terminal(*args)
    assert code == 1, screen
    for out in (piped.stdout, screen):
        assert_no_raw(out)
        assert "handshake ok in" in out and f"(name {SHOWN} v{SHOWN})" in out  # the agent's agentInfo
        assert f"handshake failed: init {SHOWN} (-32603): details {SHOWN}" in out  # its error answer
        assert f"\n    stderr {SHOWN}" in out  # and what it said on stderr
    assert_no_raw(piped.stderr)
    listed = run(*args, "--json")
    assert_no_raw(listed.stdout, listed.stderr)
    rows = {row["name"]: row for row in json.loads(listed.stdout)}  # the same values, escaped
    assert rows["ok"]["handshake"]["agent"] == f"name {EVERY} v{EVERY}"
    assert rows["bad"]["handshake"]["error"].startswith(f"init {EVERY} (-32603): details {EVERY}")


def test_logout_says_the_agents_error_in_one_line_never_raw(tmp_path: Path) -> None:
    config = write_config(tmp_path / "deck.toml",
                          escapes_agent("a", "--logout") + escapes_agent("bad", "--stderr", "--init-error"))  # fmt: skip
    refused = run("agents", "logout", "a", "--config", str(config))
    assert refused.returncode == 1
    assert refused.stderr == f"deck: logout {SHOWN} (-32603): details {SHOWN}\n"  # no traceback: one line
    assert_no_raw(refused.stdout, refused.stderr)
    code, screen = run_on_terminal("agents", "logout", "a", "--config", str(config))
    assert code == 1 and screen == f"deck: logout {SHOWN} (-32603): details {SHOWN}\n"
    unstarted = run("agents", "logout", "bad", "--config", str(config))
    assert unstarted.returncode == 1 and f"deck: bad could not start: init {SHOWN}" in unstarted.stderr
    assert f"stderr {SHOWN}" in unstarted.stderr and "Traceback" not in unstarted.stderr
    assert_no_raw(unstarted.stdout, unstarted.stderr)


def test_inbox_and_a_wrong_answer_show_the_agents_option_names_never_raw(serve, clients) -> None:  # noqa: F811
    server = serve(escapes_agent("h"))
    watcher = clients(server.path)
    watcher.request("ChatService.Send", {"agent": "h", "text": "ask"})
    asked = watcher.event("permission:requested", agent="h", timeout=20)

    listed = run("inbox", "--attach", server.name)
    assert listed.returncode == 0, listed.stderr
    assert f"options: yes {SHOWN} (Yes {SHOWN}), no (No {SHOWN})" in listed.stdout
    assert_no_raw(listed.stdout, listed.stderr)
    for wrong in (("nope",), ("--json", "{}"), ()):
        said = run("answer", asked["id"], *wrong, "--attach", server.name)
        assert said.returncode in (1, 2) and f"yes {SHOWN}, no" in said.stderr, said.stderr  # the options it takes
        assert_no_raw(said.stdout, said.stderr)
    code, screen = run_on_terminal("answer", asked["id"], "nope", "--attach", server.name)
    assert code == 1 and f"yes {SHOWN}, no" in screen
    assert_no_raw(screen)
    done = run("answer", asked["id"], f"yes {EVERY}", "--attach", server.name)  # the option as the agent named it
    assert done.returncode == 0 and done.stdout == f"answered {asked['id']} (h)\n", done.stderr
    watcher.event("turn:changed", agent="h", busy=False, timeout=20)


def test_the_check_of_a_remote_agent_shows_the_folder_on_the_hosts_path_never_raw() -> None:
    root = Path(tempfile.mkdtemp(prefix="dk-", dir="/tmp"))
    folder = root / "bin\x1b]52;c;aGk=\x07\x1b]0;owned\x07\x1b[2J\x9b2J\u202eevil"  # a folder name the host chose
    folder.mkdir()
    (folder / "hostile-agent").write_text("#!/bin/sh\nexit 0\n")
    (folder / "hostile-agent").chmod(0o755)
    host = SSHServer(root / "sshd", extra=f"SetEnv PATH={folder}:/usr/bin:/bin\n")  # the PATH the host gives
    try:
        config = write_config(root / "deck.toml", agent_block(
            "far", command=["hostile-agent"], cwd=str(root), host="testbox",
            ssh=["-F", str(host.config), "-o", "ControlPath=none"]))  # fmt: skip
        args = ("agents", "--check", "--config", str(config))
        piped = run(*args)
        assert piped.returncode == 0, piped.stderr
        code, screen = run_on_terminal(*args)
        assert code == 0, screen
        for out in (piped.stdout, screen):
            assert f"command: testbox:{printable(str(folder))}/hostile-agent" in out
            assert_no_raw(out)
        assert_no_raw(piped.stderr)
        listed = run(*args, "--json")
        assert_no_raw(listed.stdout)
        assert json.loads(listed.stdout)[0]["found"] == f"testbox:{folder}/hostile-agent"
    finally:
        host.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_the_commands_print_only_through_the_shared_helpers_that_make_text_printable() -> None:
    """Every command of the core prints through `deck.cli.common`'s echo, echo_json and fail: a new
    one is safe by default. A call of typer.echo, click.echo, print or a stream's write elsewhere is
    a way around them."""
    found = []
    for path in sorted((ROOT / "core" / "cli").glob("*.py")):
        if path.name == "common.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            if (owner in ("typer", "click") and name in ("echo", "secho")) or name == "print" or (name == "write" and owner == "sys"):
                found.append(f"{path.name}:{node.lineno}")
            if isinstance(func, ast.Attribute) and name == "write" and isinstance(func.value, ast.Attribute):
                if isinstance(func.value.value, ast.Name) and func.value.value.id == "sys":
                    found.append(f"{path.name}:{node.lineno}")  # sys.stdout.write, sys.stderr.write
    assert found == []
