"""No agent process outlives deck: double-forked setsid daemons, re-parented orphans, a SIGKILL of deck."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from deck.proc import supervisor
from deck.proc.supervisor import Process

from tests.conftest import AGENTS, FAKE_AGENT, SHORT, agent_block, alive
from tests.deck_process import run_deck, wait_dead  # noqa: F401  (run_deck: fixture)

DAEMONIZING = AGENTS / "daemonizing.py"


def daemon_agent(name: str, pidfile: Path, *flags: str, until: Path | None = None, own_session: bool = False) -> str:
    """An agent whose daemon is re-parented before deck sees it, then the fake agent with `flags`."""
    options = [*(["--until", str(until)] if until else []), *(["--own-session"] if own_session else [])]
    return agent_block(name, command=[sys.executable, str(DAEMONIZING), str(pidfile), *options, "--", *flags])


async def vanished(pids: list[int], timeout: float = 5.0) -> list[int]:
    """The pids that still exist after up to `timeout` seconds, zombies included: nothing may remain.

    Awaited: the deck in this process runs meanwhile (its reaper too).
    """
    deadline = time.monotonic() + timeout
    while (left := [pid for pid in pids if psutil.pid_exists(pid)]) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return left


def sentinel_of(deck_pid: int) -> int:
    """The pid of the sentinel a real deck process started."""
    for p in psutil.process_iter(["cmdline"]):
        cmdline = p.info["cmdline"] or []
        if any(arg.endswith("sentinel.py") for arg in cmdline) and cmdline[-1].startswith(f"{deck_pid}-"):
            return p.pid
    raise AssertionError(f"no sentinel for deck {deck_pid}")


def _kill(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


# -- in-process: a Deck in this test process -------------------------------------------------

@pytest.mark.anyio
async def test_stop_ends_the_daemon_an_agent_left(make_deck, tmp_path):
    pidfile = tmp_path / "daemon.pid"
    deck, rec = make_deck(daemon_agent("a", pidfile))
    await deck.agent_service.start("a")
    daemon = int(pidfile.read_text())
    try:
        assert alive(daemon) and os.getsid(daemon) != deck.agents["a"].process.pid  # left the agent's session
        await deck.agent_service.stop("a")
        assert await vanished([daemon]) == []
    finally:
        _kill([daemon])


@pytest.mark.anyio
async def test_a_crashed_agents_daemon_is_ended(make_deck, tmp_path):
    pidfile = tmp_path / "daemon.pid"
    deck, rec = make_deck(daemon_agent("a", pidfile))
    await deck.agent_service.start("a")
    daemon = int(pidfile.read_text())
    try:
        deck.chat.send("a", "crash")
        await rec.wait_event("agent:state", agent="a", state="error")
        assert await vanished([daemon]) == []
    finally:
        _kill([daemon])


@pytest.mark.anyio
async def test_each_orphan_is_ended_with_its_own_agent(make_deck, tmp_path):
    deck, rec = make_deck(daemon_agent("a", tmp_path / "a.pid") + daemon_agent("b", tmp_path / "b.pid"))
    await asyncio.gather(deck.agent_service.start("a"), deck.agent_service.start("b"))
    daemons = [int((tmp_path / f"{name}.pid").read_text()) for name in "ab"]
    try:
        assert all(psutil.Process(pid).ppid() == os.getpid() for pid in daemons)  # both re-parented to deck
        await deck.agent_service.stop("a")
        assert await vanished(daemons[:1]) == []
        assert alive(daemons[1]) and deck.agents["b"].state.value == "ready"
        await deck.agent_service.stop("b")
        assert await vanished(daemons[1:]) == []
    finally:
        _kill(daemons)


@pytest.mark.anyio
@pytest.mark.parametrize("own_session", [False, True], ids=["session-of-a-dead-parent", "own-session"])
async def test_an_orphan_that_exits_is_reaped_not_left_a_zombie(make_deck, tmp_path, own_session):
    pidfile, end = tmp_path / "daemon.pid", tmp_path / "end"
    deck, rec = make_deck(daemon_agent("a", pidfile, until=end, own_session=own_session))
    await deck.agent_service.start("a")
    daemon = int(pidfile.read_text())
    try:
        assert psutil.Process(daemon).ppid() == os.getpid()  # deck is its reaper, not init
        assert (os.getsid(daemon) == daemon) == own_session
        end.write_text("")
        assert await vanished([daemon], timeout=supervisor.REAP_EVERY + 4) == []  # waited for by deck, while the agent runs
        assert deck.agents["a"].state.value == "ready"
    finally:
        _kill([daemon])


@pytest.mark.anyio
async def test_the_reaper_leaves_an_agents_exit_status_to_it():
    process = await Process.spawn(
        [sys.executable, "-c", "import sys; sys.exit(7)"], cwd=None, env=dict(os.environ),
        on_stdout=lambda data: None, on_stderr_line=lambda line: None, log=lambda line: None,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 5  # no await: the exit watcher cannot run before the reaper
        while psutil.Process(process.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        supervisor.reap_orphans()
        async with asyncio.timeout(5):
            assert await process.exited == 7
    finally:
        await process.stop(SHORT)


# -- a real deck process ---------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["stop", "end-of-input", "sigterm"])
def test_a_real_deck_leaves_no_daemon(run_deck, tmp_path, how):
    pidfile = tmp_path / "daemon.pid"
    deck = run_deck(daemon_agent("a", pidfile))
    assert deck.call("AgentService.Start", {"name": "a"})["state"] == "ready"
    daemon = int(pidfile.read_text())
    pids = deck.descendants()
    watcher = sentinel_of(deck.pid)
    try:
        assert daemon in pids and watcher not in pids  # the daemon re-parented to deck; the sentinel away from it
        if how == "stop":
            deck.call("AgentService.Stop", {"name": "a"})
            assert wait_dead(pids) == [] and deck.popen.poll() is None
            deck.close_stdin()
            assert deck.wait(15) == 0
        elif how == "end-of-input":
            deck.close_stdin()
            assert deck.wait(15) == 0
        else:
            deck.signal(signal.SIGTERM)
            assert deck.wait(15) == 128 + signal.SIGTERM
        assert not alive(watcher)  # at a normal exit deck waits for its sentinel
        assert wait_dead(pids) == []
        assert b"Traceback" not in deck.stderr
    finally:
        _kill([*pids, daemon])


@pytest.mark.timeout(60)
def test_kill_9_of_deck_ends_an_agent_that_ignores_eof_and_what_it_left(run_deck, tmp_path):
    daemon_file, child_file = tmp_path / "daemon.pid", tmp_path / "child.pid"
    deck = run_deck(daemon_agent("a", daemon_file, "--ignore-eof", "--ignore-sigterm", "--grandchild", str(child_file)))
    assert deck.call("AgentService.Start", {"name": "a"})["state"] == "ready"
    daemon, child = int(daemon_file.read_text()), int(child_file.read_text())
    pids = sorted({*deck.descendants(), daemon, child})
    watcher = sentinel_of(deck.pid)
    try:
        assert len(pids) == 3  # the agent, its setsid child, the daemon it left
        deck.signal(signal.SIGKILL)
        assert deck.wait(5) == -signal.SIGKILL
        assert wait_dead([*pids, watcher]) == []  # the sentinel ends too, once done
    finally:
        _kill(pids)


@pytest.mark.timeout(30)
def test_an_agent_gets_sigkill_when_the_thread_that_spawned_it_ends():
    """PR_SET_PDEATHSIG: the kernel kills the agent when its parent thread goes (with deck, it is deck's loop)."""
    spawned: list[Process] = []

    async def spawn() -> None:
        process = await Process.spawn(
            [sys.executable, str(FAKE_AGENT), "--ignore-eof", "--ignore-sigterm"], cwd=None, env=dict(os.environ),
            on_stdout=lambda data: None, on_stderr_line=lambda line: None, log=lambda line: None,
        )  # fmt: skip
        process.close_pipes()  # and nothing else: no stop
        spawned.append(process)

    thread = threading.Thread(target=asyncio.run, args=(spawn(),))
    thread.start()
    thread.join(10)
    (process,) = spawned
    try:
        assert process.popen.wait(5) == -signal.SIGKILL
    finally:
        _kill([process.pid])
