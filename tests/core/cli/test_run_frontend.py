"""`deck run --frontend=NAME` checks NAME before anything runs or attaches, and names the frontend a
typo is likely of. Real `deck` processes, a real `deck serve` of the same config."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import agent_block
from tests.core.remote.test_server import clients, runtime, serve  # noqa: F401  (the deck server fixtures)
from tests.deck_process import DECK, write_config

pytestmark = pytest.mark.timeout(60)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, "run", *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def test_a_mistyped_frontend_beside_a_server_is_refused_before_attaching(serve, clients) -> None:  # noqa: F811
    server = serve(agent_block("a"))
    config = server.popen.args[server.popen.args.index("--config") + 1]
    done = run("--frontend=urwd", "--config", config)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "deck: unknown frontend 'urwd': did you mean urwid? (available: jsonl, line, urwid)\n"
    watcher = clients(server.path)
    assert len(watcher.call("DeckService.Clients")) == 1  # nobody attached: the watcher alone


def test_a_frontend_switched_off_or_unknown_is_refused_at_once(tmp_path, runtime) -> None:  # noqa: F811
    config = write_config(tmp_path / "deck.toml", '[plugins]\ndisabled = ["line"]\n' + agent_block("a"))
    off = run("--frontend=line", "--config", str(config))
    assert off.returncode == 2 and off.stderr == "deck: unknown frontend 'line' (available: jsonl, urwid)\n"
    other = run("--frontend=nothing-like-it", "--config", str(config))
    assert other.returncode == 2 and other.stderr == "deck: unknown frontend 'nothing-like-it' (available: jsonl, urwid)\n"


NO_TERMINAL = "deck: the console (urwid) needs a terminal: {}; use --frontend=line or jsonl\n"


def test_the_console_without_a_terminal_is_a_usage_error(tmp_path) -> None:
    """Chosen by the flag or by the config, the console with stdin or stdout no terminal says so at
    once, exit 2: it neither draws into a pipe nor spins on a closed input."""
    config = write_config(tmp_path / "deck.toml", 'frontend = "urwid"\n' + agent_block("a"))
    by_flag = run("--frontend", "urwid", "--config", str(write_config(tmp_path / "plain.toml", agent_block("a"))))
    assert (by_flag.returncode, by_flag.stdout) == (2, "")
    assert by_flag.stderr == NO_TERMINAL.format("stdin and stdout are not terminals")
    piped = subprocess.run([*DECK, "run", "--config", str(config)], input="hi\n", capture_output=True, text=True,
                           timeout=30)  # fmt: skip
    assert (piped.returncode, piped.stdout) == (2, "")
    assert piped.stderr == NO_TERMINAL.format("stdin and stdout are not terminals")


def test_the_console_says_which_stream_is_no_terminal(tmp_path) -> None:
    import os

    config = write_config(tmp_path / "deck.toml", 'frontend = "urwid"\n' + agent_block("a"))
    main, side = os.openpty()
    try:
        done = subprocess.run([*DECK, "run", "--config", str(config)], stdin=side, capture_output=True, text=True,
                              timeout=30)  # fmt: skip
    finally:
        os.close(main)
        os.close(side)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == NO_TERMINAL.format("stdout is not a terminal")


def test_attaching_the_console_without_a_terminal_is_a_usage_error(tmp_path, serve) -> None:  # noqa: F811
    """`deck attach` and a `deck run` that attaches to a server of its config: the same error."""
    server = serve('frontend = "urwid"\n' + agent_block("a"))
    config = server.popen.args[server.popen.args.index("--config") + 1]
    attach = subprocess.run([*DECK, "attach", "t", "--frontend", "urwid"], capture_output=True, text=True, timeout=30,
                            stdin=subprocess.DEVNULL)  # fmt: skip
    assert (attach.returncode, attach.stdout) == (2, "")
    assert attach.stderr == NO_TERMINAL.format("stdin and stdout are not terminals")
    through_run = run("--config", config)
    assert (through_run.returncode, through_run.stdout) == (2, "")
    assert through_run.stderr.endswith(NO_TERMINAL.format("stdin and stdout are not terminals"))
