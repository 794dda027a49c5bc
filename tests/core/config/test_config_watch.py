"""Live config: edits to the file of a running deck, with real fake-agent subprocesses and a real watcher."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from deck.config import watch
from deck.config.check import parse
from deck.errors import ServiceError
from deck.frontend import Frontend

from tests.conftest import agent_block, alive
from tests.deck_process import run_deck  # noqa: F401  (a fixture)

pytestmark = pytest.mark.anyio


async def watching(deck) -> None:
    """Follow the deck's config file; return once a change is sure to be seen."""
    deck.config_service.start_watching()
    await asyncio.wait_for(deck.config_service.live.ready.wait(), 10)


async def next_change(rec, seen: int, timeout: float = 15.0) -> dict:
    """The config:changed event after the first `seen` ones."""
    await rec.wait(lambda r: len(r.named("config:changed")) > seen, timeout)
    return rec.named("config:changed")[seen]


async def names(deck) -> list[str]:
    return [a["name"] for a in await deck.agent_service.list_agents()]


async def test_new_agents_appear_in_file_order(make_deck):
    deck, rec = make_deck(agent_block("b"))
    await watching(deck)
    deck.config_path.write_text(agent_block("a") + agent_block("b") + agent_block("c", title="Agent C"))
    change = await next_change(rec, 0)
    assert change == {"path": str(deck.config_path), "valid": True, "problems": []}
    assert await names(deck) == ["a", "b", "c"]
    assert rec.named("agent:state", "c") == [{"agent": "c", "state": "stopped", "outdated": False}]
    await deck.agent_service.start("c")  # a new agent is a real one
    assert (await deck.agent_service.list_agents())[2]["title"] == "Agent C"
    assert deck.agents["c"].state.value == "ready"


async def test_removed_agents_stop_and_vanish(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    await watching(deck)
    await deck.agent_service.start("a")
    pid = deck.agents["a"].process.pid
    deck.config_path.write_text(agent_block("b"))
    await next_change(rec, 0)
    assert await names(deck) == ["b"]
    assert rec.states("a")[-1] == "stopped" and not alive(pid)
    with pytest.raises(ServiceError, match="unknown agent 'a'"):
        await deck.agent_service.start("a")


async def test_removing_a_busy_agent_abandons_its_queue(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    await watching(deck)
    deck.chat.send("a", "slow")
    deck.chat.send("a", "queued")
    await rec.wait_event("agent:state", agent="a", state="busy")
    pid = deck.agents["a"].process.pid
    deck.config_path.write_text(agent_block("b"))
    await next_change(rec, 0)
    await rec.wait_event("turn:changed", agent="a", busy=False, queued=0)
    assert not alive(pid) and await names(deck) == ["b"]
    await asyncio.sleep(0.2)
    assert not alive(pid) and rec.states("a")[-1] == "stopped"  # the queued message did not restart it


async def test_a_changed_running_agent_is_outdated_until_restarted(make_deck):
    deck, rec = make_deck(agent_block("a", title="Old"))
    await watching(deck)
    await deck.agent_service.start("a")
    pid = deck.agents["a"].process.pid
    deck.config_path.write_text(agent_block("a", "--modes", title="New"))
    await next_change(rec, 0)
    assert rec.named("agent:state", "a")[-1] == {"agent": "a", "state": "ready", "outdated": True}
    info = (await deck.agent_service.list_agents())[0]
    assert info["outdated"] is True and info["title"] == "Old"  # still the running definition
    assert alive(pid) and deck.agents["a"].process.pid == pid  # it keeps running
    await deck.agent_service.restart("a")
    info = (await deck.agent_service.list_agents())[0]
    assert (info["outdated"], info["title"], info["state"]) == (False, "New", "ready")
    assert "--modes" in deck.agents["a"].config.command and deck.agents["a"].process.pid != pid
    assert deck.chat.conversation("a").modes  # the restarted process got the new flags


async def test_an_edit_back_clears_outdated(make_deck):
    original = agent_block("a", permissions="ask")
    deck, rec = make_deck(original)
    await watching(deck)
    await deck.agent_service.start("a")
    deck.config_path.write_text(agent_block("a", permissions="allow"))
    await next_change(rec, 0)
    assert deck.agents["a"].outdated
    deck.config_path.write_text(original)
    await next_change(rec, 1)
    assert rec.named("agent:state", "a")[-1]["outdated"] is False and deck.agents["a"].pending_config is None


async def test_a_new_title_shows_at_once_without_a_restart(make_deck):
    deck, rec = make_deck(agent_block("a", title="Old"))
    await watching(deck)
    await deck.agent_service.start("a")
    pid = deck.agents["a"].process.pid
    deck.config_path.write_text(agent_block("a", title="New", icon="N", description="shown only"))
    await next_change(rec, 0)
    info = (await deck.agent_service.list_agents())[0]
    assert (info["title"], info["icon"], info["description"], info["outdated"]) == ("New", "N", "shown only", False)
    assert deck.agents["a"].process.pid == pid and info["state"] == "ready"
    assert rec.named("agent:state", "a")[-1] == {"agent": "a", "state": "ready", "outdated": False}


async def test_outdated_is_cleared_when_the_agent_stops(make_deck):
    deck, rec = make_deck(agent_block("a", permissions="ask"))
    await watching(deck)
    await deck.agent_service.start("a")
    deck.config_path.write_text(agent_block("a", permissions="allow"))
    await next_change(rec, 0)
    assert deck.agents["a"].outdated
    await deck.agent_service.stop("a")
    assert rec.named("agent:state", "a")[-1] == {"agent": "a", "state": "stopped", "outdated": False}
    assert deck.agents["a"].config.permissions == "allow" and deck.agents["a"].pending_config is None


async def test_a_changed_stopped_agent_takes_the_new_definition(make_deck):
    deck, rec = make_deck(agent_block("a", title="Old"))
    await watching(deck)
    deck.config_path.write_text(agent_block("a", title="New", icon="N"))
    await next_change(rec, 0)
    info = (await deck.agent_service.list_agents())[0]
    assert (info["title"], info["icon"], info["outdated"], info["state"]) == ("New", "N", False, "stopped")
    assert rec.named("agent:state", "a") == [{"agent": "a", "state": "stopped", "outdated": False}]


async def test_changed_limits_apply(make_deck):
    deck, rec = make_deck(agent_block("slow", "--hang-handshake"))
    await watching(deck)
    deck.config_path.write_text('[limits]\nhandshakeTimeout = "300ms"\n' + agent_block("slow", "--hang-handshake"))
    await next_change(rec, 0)
    assert deck.config.limits.handshake_timeout == 0.3
    with pytest.raises(ServiceError, match=r"handshake timed out after 0.3s"):
        await deck.agent_service.start("slow")


async def test_an_invalid_edit_keeps_the_last_valid_config(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await watching(deck)
    await deck.agent_service.start("a")
    pid = deck.agents["a"].process.pid
    deck.config_path.write_text(agent_block("b") + '[agents.a]\ncommand = []\n')
    change = await next_change(rec, 0)
    assert change == {
        "path": str(deck.config_path),
        "valid": False,
        "problems": [{"line": 4, "column": 11, "message": "agents.a.command: command must not be empty", "warning": False}],
    }
    assert await names(deck) == ["a"] and deck.agents["a"].process.pid == pid and alive(pid)
    current = await deck.config_service.current()
    assert current["valid"] is False and current["problems"] == change["problems"]
    # Fixing it applies it.
    deck.config_path.write_text(agent_block("a") + agent_block("b"))
    assert (await next_change(rec, 1))["valid"] is True
    assert await names(deck) == ["a", "b"] and (await deck.config_service.current())["valid"] is True


async def test_a_syntax_error_is_reported_with_its_position(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await watching(deck)
    deck.config_path.write_text(agent_block("a") + 'title = "x" "y"\n')
    change = await next_change(rec, 0)
    assert change["valid"] is False
    assert [(p["line"], p["column"]) for p in change["problems"]] == [(3, 13)]


async def test_a_deleted_file_is_reported_and_a_recreated_one_applies(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await watching(deck)
    await deck.agent_service.start("a")
    deck.config_path.unlink()
    change = await next_change(rec, 0)
    assert change["valid"] is False and change["problems"][0]["message"].startswith("file deleted")
    assert deck.agents["a"].state.value == "ready"  # not fatal: the agents go on
    deck.config_path.write_text(agent_block("a") + agent_block("z"))
    assert (await next_change(rec, 1))["valid"] is True
    assert await names(deck) == ["a", "z"]


async def test_save_by_rename_like_vscode(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await watching(deck)
    temp = deck.config_path.with_name(".deck.toml.tmp")
    temp.write_text(agent_block("a") + agent_block("renamed"))
    os.replace(temp, deck.config_path)
    assert (await next_change(rec, 0))["valid"] is True
    assert await names(deck) == ["a", "renamed"]
    # And again: the watch survives the inode it started with being replaced.
    temp.write_text(agent_block("again"))
    os.replace(temp, deck.config_path)
    await next_change(rec, 1)
    assert await names(deck) == ["again"]


async def test_save_by_rename_like_vim(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await watching(deck)
    backup = deck.config_path.with_name("deck.toml~")
    os.rename(deck.config_path, backup)  # vim: move the original aside, write a new file, drop the backup
    deck.config_path.write_text(agent_block("a") + agent_block("vim"))
    backup.unlink()
    await rec.wait(lambda r: any(c["valid"] for c in r.named("config:changed")))
    assert await names(deck) == ["a", "vim"]
    assert rec.named("config:changed")[-1]["valid"] is True


async def test_other_files_in_the_folder_are_ignored(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await watching(deck)
    (deck.config_path.parent / "notes.toml").write_text(agent_block("x"))
    deck.config_path.write_text(agent_block("a") + agent_block("b"))  # a change to wait for
    await next_change(rec, 0)
    assert len(rec.named("config:changed")) == 1 and await names(deck) == ["a", "b"]


async def test_an_edit_made_before_the_watch_began_is_caught_up(make_deck):
    deck, rec = make_deck(agent_block("a"))
    deck.config_path.write_text(agent_block("early"))
    await watching(deck)
    await next_change(rec, 0)
    assert await names(deck) == ["early"]


async def test_deck_run_watches_the_config(make_deck):
    deck, rec = make_deck(agent_block("a"))

    class EditingFrontend(Frontend):
        """A frontend that edits the config file while deck runs and waits to see the change."""

        name = "editing"

        async def run(self) -> int:
            seen = asyncio.Event()
            self.client.subscribe(lambda e: seen.set() if e.name == "config:changed" else None)
            await asyncio.wait_for(deck.config_service.live.ready.wait(), 10)
            path = (await self.client.call("ConfigService.Current"))["path"]
            Path(path).write_text(agent_block("a") + agent_block("added"))
            await asyncio.wait_for(seen.wait(), 15)
            self.names = [info["name"] for info in await self.client.call("AgentService.List")]
            return 0

    assert await deck.run(EditingFrontend) == 0
    assert deck.frontend.names == ["a", "added"]


async def test_an_undecodable_file_is_reported_and_the_last_config_kept(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await watching(deck)
    deck.config_path.write_bytes(b'[agents.a]\ntitle = "\xff"\n')
    change = await next_change(rec, 0)
    assert change["valid"] is False and "cannot read" in change["problems"][0]["message"]
    assert await names(deck) == ["a"] and "command" in await deck.config_service.content()


async def test_a_removed_agent_cannot_be_started_while_it_stops(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b", "--ignore-eof"))
    await watching(deck)
    await deck.agent_service.start("b")
    deck.config_path.write_text(agent_block("a"))
    await rec.wait(lambda r: deck.agents["a"] is not None and "b" not in deck.agents, timeout=10)
    with pytest.raises(ServiceError):
        await deck.agent_service.start("b")
    await next_change(rec, 0)
    assert await names(deck) == ["a"] and rec.states("b")[-1] == "stopped"


@contextlib.asynccontextmanager
async def watched_in_a_folder(tmp_path: Path) -> AsyncIterator[tuple[Any, Any, Path]]:
    """A deck following conf/deck.toml (one agent "a"), watching already: the deck, its recorder, the file."""
    from deck.runtime.deck import Deck
    from deck.testing import FAST_STOP, Recorder

    folder = tmp_path / "conf"
    folder.mkdir()
    path = folder / "deck.toml"
    path.write_text(agent_block("a"))
    deck = Deck(path, "flag", timings=FAST_STOP)
    rec = Recorder()
    deck.subscribe(rec)
    try:
        await watching(deck)
        yield deck, rec, path
    finally:
        await deck.shutdown()


async def test_a_folder_replaced_once_its_file_was_deleted_is_watched_again(tmp_path):
    """The file goes first (as `rm -r` does it), the deck reads that; then the folder is removed and
    made again: the watch on the old folder sees nothing more, so the deck must watch the new one."""
    async with watched_in_a_folder(tmp_path) as (deck, rec, path):
        path.unlink()
        change = await next_change(rec, 0)
        assert change["problems"][0]["message"].startswith("file deleted")
        path.parent.rmdir()
        path.parent.mkdir()
        path.write_text(agent_block("b"))
        await rec.wait(lambda r: "b" in deck.agents, timeout=15)
        path.write_text(agent_block("c"))  # and the watch goes on
        await rec.wait(lambda r: "c" in deck.agents, timeout=15)


async def test_watching_survives_its_folder_removed_and_made_again(tmp_path):
    import shutil

    async with watched_in_a_folder(tmp_path) as (deck, rec, path):
        shutil.rmtree(path.parent)
        change = await next_change(rec, 0)
        assert change["valid"] is False and change["problems"][0]["message"].startswith("file deleted")
        path.parent.mkdir()
        path.write_text(agent_block("a") + agent_block("b"))
        await rec.wait(lambda r: r.named("config:changed")[-1]["valid"], timeout=15)
        assert await names(deck) == ["a", "b"]
        path.write_text(agent_block("c"))  # and the watch goes on
        await rec.wait(lambda r: "c" in deck.agents, timeout=15)


async def test_open_still_works_when_recent_files_cannot_be_saved(make_deck, tmp_path, monkeypatch):
    (tmp_path / "not-a-dir").write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "not-a-dir" / "sub"))
    deck, rec = make_deck(agent_block("a"))
    other = tmp_path / "other.toml"
    other.write_text(agent_block("b"))
    await deck.config_service.open(str(other))
    assert await names(deck) == ["b"] and deck.config_path == other
    other.write_text(agent_block("b") + agent_block("c"))  # followed
    await rec.wait(lambda r: "c" in deck.agents, timeout=15)


async def test_save_where_it_cannot_write_is_a_clear_error(make_deck, tmp_path):
    deck, rec = make_deck(agent_block("a"))
    blocker = tmp_path / "file"
    blocker.write_text("")
    other = tmp_path / "other.toml"
    other.write_text(agent_block("a"))
    await deck.config_service.open(str(other))
    other.unlink()
    other.symlink_to(blocker / "deck.toml")  # its folder is a file: nothing can be written there
    with pytest.raises(ServiceError, match="cannot write"):
        await deck.config_service.save(agent_block("a") + agent_block("b"))


async def test_a_save_caught_between_truncate_and_write_stops_nothing(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await watching(deck)
    await deck.agent_service.start("a")
    with open(deck.config_path, "w") as f:  # an in-place save: truncated first…
        f.flush()
        os.fsync(f.fileno())
        await asyncio.sleep(0.2)  # …the watcher sees the empty file meanwhile…
        f.write(agent_block("a") + agent_block("b"))  # …then the text arrives
    await rec.wait(lambda r: "b" in deck.agents, timeout=15)
    assert "stopped" not in rec.states("a") and deck.agents["a"].state.value == "ready"
    assert all(c["valid"] for c in rec.named("config:changed"))


async def test_the_config_deck_runs_with_is_among_the_recent_files(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    assert await deck.config_service.recent() == [str(deck.config_path.absolute())]


async def test_a_too_deeply_nested_file_keeps_the_last_valid_config(make_deck):
    from deck.config.models import MAX_NESTING

    deck, rec = make_deck(agent_block("a"))
    await watching(deck)
    # Renamed into place: a file written in place can be read half-written (a problem of its own).
    temp = deck.config_path.with_name("deep.toml")
    temp.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n" + agent_block("a"))
    os.replace(temp, deck.config_path)
    change = await next_change(rec, 0)
    message = f"nested more than {MAX_NESTING} levels deep"
    assert change["valid"] is False and change["problems"] == [
        {"line": 1, "column": 5 + MAX_NESTING, "message": message, "warning": False}]  # fmt: skip
    assert await names(deck) == ["a"] and (await deck.config_service.current())["problems"] == change["problems"]


async def test_a_file_over_the_size_cap_is_not_read_and_the_last_config_kept(make_deck):
    from deck.config.models import MAX_SIZE

    deck, rec = make_deck(agent_block("a"))
    await watching(deck)
    with open(deck.config_path, "r+b") as out:
        out.truncate(8 * MAX_SIZE)
    change = await next_change(rec, 0)
    assert change["valid"] is False
    # Its size as it was opened, or as far as it was read should it grow meanwhile (the truncate
    # may come between the two): more than the cap either way.
    found = re.search(r"(\d+) bytes: a config file has (\d+) \(1 MiB\) at most$", change["problems"][0]["message"])
    assert found is not None and int(found.group(1)) > MAX_SIZE and int(found.group(2)) == MAX_SIZE
    assert await names(deck) == ["a"] and await deck.config_service.content() == agent_block("a")


def test_the_config_replaced_by_a_fifo_is_refused_and_deck_goes_on(run_deck, tmp_path):
    proc = run_deck(agent_block("a"))
    assert [a["name"] for a in proc.call("AgentService.List")] == ["a"]  # started: the file is followed
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes to it: reading it would wait forever
    os.replace(fifo, tmp_path / "deck.toml")
    change = proc.event("config:changed", valid=False)
    assert change["problems"][0]["message"].endswith("deck.toml: not a regular file (a FIFO or pipe)")
    assert [a["name"] for a in proc.call("AgentService.List")] == ["a"]  # the last valid config, still answering
    temp = tmp_path / "new.toml"
    temp.write_text(agent_block("a") + agent_block("b"))
    os.replace(temp, tmp_path / "deck.toml")  # a regular file again: followed as before
    proc.event("config:changed", valid=True)
    assert [a["name"] for a in proc.call("AgentService.List")] == ["a", "b"]
    proc.close_stdin()
    assert proc.wait(15) == 0 and b"Traceback" not in proc.stderr


# -- who owns what: the watcher reads and writes the file, the deck and its agents change themselves ------


def test_the_watcher_assigns_no_attribute_of_the_deck_or_its_agents():
    tree = ast.parse((Path(watch.__file__)).read_text())
    written = [
        f"{ast.unparse(target)} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for part in (target.elts if isinstance(target, ast.Tuple) else [target])
        if isinstance(part, ast.Attribute) and not (isinstance(part.value, ast.Name) and part.value.id == "self")
    ]
    assert written == []


async def test_deck_apply_config_is_the_one_way_a_config_comes_in(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    await deck.agent_service.start("a")
    text = agent_block("a", "--modes") + agent_block("c")
    await deck.apply_config(text, parse(text))
    assert list(deck.agents) == ["a", "c"] and deck.text == text
    assert deck.agents["a"].outdated and deck.agents["a"].pending_config is not None
    changed = rec.named("config:changed")[-1]
    assert changed["valid"] is True and changed["path"] == str(deck.config_path)
    # An invalid config changes only what is reported.
    await deck.apply_config("[agents.x]\n", parse("[agents.x]\n"))
    assert list(deck.agents) == ["a", "c"] and rec.named("config:changed")[-1]["valid"] is False


async def test_an_agent_takes_its_new_definition_itself_and_says_so_once(make_deck):
    deck, rec = make_deck(agent_block("a"))
    agent = deck.agents["a"]
    await agent.start()
    first, changed = agent.config, parse(agent_block("a", "--modes")).config.agents["a"]
    before = len(rec.named("agent:state", "a"))
    agent.redefine(changed)  # running: applies at its next start
    assert agent.config is first and agent.pending_config is changed and agent.outdated
    agent.redefine(changed)  # the same again: nothing to say
    agent.redefine(first)  # edited back to what it runs with
    assert agent.pending_config is None and not agent.outdated
    states = rec.named("agent:state", "a")[before:]
    assert [s["outdated"] for s in states] == [True, False]
