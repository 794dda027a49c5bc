"""The history plugin: conversations recorded by a real deck into a real database file, and read back
with `deck history`, `deck search` and `deck export` (no deck running); what is never stored; a
database deck cannot use; streamed chunks written in batches, never one by one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pty
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from deck.config.models import format_duration, parse_duration
from deck.plugins import history
from deck.plugins.history import cli as history_cli
from deck.plugins.history import recorder as recording
from deck.plugins.history import store as history_store
from deck.plugins.history.recorder import config_key
from deck.plugins.history.store import HistoryStore, default_path
from typer.testing import CliRunner

from tests.conftest import AGENTS, agent_block
from tests.core.runtime.test_diffs import DIFF_PATH, TOO_LARGE, diff_agent, forget_comparisons, timed
from tests.deck_process import DECK, DeckProcess, write_config

pytestmark = pytest.mark.timeout(60)

DAY = 86_400.0
#: The fake agent's `multi` answer (tests/agents/fake_agent.py MULTI): three messages, two tools, two thoughts.
PREAMBLE, MIDDLE, CONCLUSION = "Let me look into it.", "Found the file, reading on.", "The answer is 42."
MESSAGE_ID = re.compile(r"^msg-[0-9a-f]{8}-\d+$")


def deck_cli(env: dict[str, str], *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DECK, *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, env=env, **kwargs
    )


def cli_here(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The history commands run in this process (as `deck_cli` would, without a Python start-up each)."""
    app = typer.Typer()
    history_cli.register(app)
    before = os.getcwd()
    try:
        os.chdir(cwd or before)
        result = CliRunner().invoke(app, list(args), env=env)
    finally:
        os.chdir(before)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def private_env(root: Path) -> dict[str, str]:
    env = {**os.environ, "XDG_STATE_HOME": str(root / "state"), "XDG_CONFIG_HOME": str(root / "config")}
    env.pop("DECK_CONFIG", None)
    env.pop("NO_COLOR", None)
    return env


def run_and_exit(config: Path, env: dict[str, str], *prompts: str, args: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """`deck run --frontend=jsonl` sending each prompt to agent `a` in turn; the event lines, once deck exited 0."""
    deck = DeckProcess("--config", str(config), *args, env=env)
    try:
        for n, prompt in enumerate(prompts, 1):
            deck.call("ChatService.Send", {"agent": "a", "text": prompt})
            deck.wait_for(lambda lines, n=n: len([x for x in lines if x.get("event") == "turn:changed"
                                                  and not x["busy"] and x["agent"] == "a"]) >= n)  # fmt: skip
        deck.close_stdin()
        assert deck.wait(15) == 0, deck.stderr
        return deck.lines
    finally:
        deck.kill_everything()


def shown_messages(lines: list[dict[str, Any]], agent: str = "a") -> list[dict[str, Any]]:
    """The last version of each of `agent`'s messages in `message:updated` events, in first-seen order."""
    latest: dict[str, dict[str, Any]] = {}
    for line in lines:
        if line.get("event") == "message:updated" and line["agent"] == agent:
            latest[line["message"]["id"]] = line["message"]
    return list(latest.values())


@dataclass
class Recorded:
    root: Path
    env: dict[str, str]
    config: Path
    lines: list[dict[str, Any]]

    def cli(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return cli_here(self.env, *args, cwd=cwd)

    def only_conversation(self) -> dict[str, Any]:
        result = self.cli("history", "--json", "--config", str(self.config))
        assert result.returncode == 0, result.stderr
        (row,) = json.loads(result.stdout)
        return row


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """One real deck run, read by the tests below: agent `a` streamed its `multi` answer, then deck exited."""
    root = tmp_path_factory.mktemp("recorded")
    env = private_env(root)
    config = write_config(root / "deck.toml", agent_block("a"))
    return Recorded(root, env, config, run_and_exit(config, env, "multi"))


def copy_of(recorded: Recorded, tmp_path: Path) -> Recorded:
    """The recorded history in a folder of its own, for a test that changes it."""
    shutil.copytree(recorded.root / "state" / "deck", tmp_path / "state" / "deck")
    return Recorded(tmp_path, private_env(tmp_path), recorded.config, recorded.lines)


# -- a conversation recorded, then read with no deck running ---------------------------------------


def test_a_recorded_conversation_is_listed_with_its_messages_and_title(recorded: Recorded) -> None:
    real = deck_cli(recorded.env, "history", "--json", "--config", str(recorded.config))  # the `deck` command itself
    assert real.returncode == 0, real.stderr
    (row,) = json.loads(real.stdout)
    assert (row["agent"], row["title"], row["messages"]) == ("a", "multi", 2)  # the first user text as title
    assert row["configPath"] == config_key(recorded.config)
    assert set(row) == {"id", "agent", "title", "createdAt", "updatedAt", "messages", "configPath"}
    # The config found in the current directory is the same config: same conversations.
    found_here = recorded.cli("history", "--json", cwd=recorded.root)
    assert json.loads(found_here.stdout) == [row]
    text = recorded.cli("history", "--config", str(recorded.config))
    assert text.returncode == 0 and text.stderr == ""
    (line,) = text.stdout.splitlines()
    assert line.startswith(row["id"]) and line.endswith("2 messages  multi")
    # Stored exactly as shown: every message as its last message:updated had it.
    exported = json.loads(recorded.cli("export", row["id"], "--format", "json").stdout)
    assert exported["messages"] == shown_messages(recorded.lines)
    assert [m["role"] for m in exported["messages"]] == ["user", "agent"]
    assert all(MESSAGE_ID.match(m["id"]) for m in exported["messages"])
    assert exported["sessionId"]  # the agent's ACP session, for a later resume


def test_search_finds_a_word_of_the_answer_with_a_snippet(recorded: Recorded) -> None:
    row = recorded.only_conversation()
    found = recorded.cli("search", "answer", "--json", "--config", str(recorded.config))
    assert found.returncode == 0, found.stderr
    (hit,) = json.loads(found.stdout)
    assert (hit["conversationId"], hit["agent"], hit["role"]) == (row["id"], "a", "agent")
    assert "The **answer** is 42." in hit["snippet"]
    piped = recorded.cli("search", "answer", "--config", str(recorded.config))
    assert piped.returncode == 0 and row["id"] in piped.stdout
    assert "The answer is 42." in piped.stdout and "**" not in piped.stdout and "\x1b" not in piped.stdout
    elsewhere = recorded.cli("search", "nowhere", "--agent", "a", "--config", str(recorded.config))
    assert elsewhere.returncode == 0 and elsewhere.stdout.startswith("nothing found for a")
    unknown = recorded.cli("search", "answer", "--agent", "b", "--config", str(recorded.config))
    assert unknown.returncode == 2 and unknown.stderr == "deck: unknown agent 'b' (agents: a)\n"


def test_export_as_a_markdown_transcript_and_as_json(recorded: Recorded) -> None:
    row = recorded.only_conversation()
    markdown = recorded.cli("export", row["id"])
    assert markdown.returncode == 0, markdown.stderr
    text = markdown.stdout
    assert text.startswith("# multi\n")
    assert "## User · " in text and "## Agent · " in text
    for said in (PREAMBLE, MIDDLE, CONCLUSION):
        assert said in text
    assert "> **Thought**\n>\n> ```text\n> pondering 0\n> ```\n" in text
    assert f"\n{CONCLUSION} \n" in text and "```markdown" not in text  # the agent's Markdown, as its Markdown
    assert "### Tool: Step 0\n\nread · completed\n" in text
    assert text.index(PREAMBLE) < text.index("Step 0") < text.index(MIDDLE) < text.index(CONCLUSION)
    as_json = json.loads(recorded.cli("export", row["id"], "--format", "json").stdout)
    assert {k: as_json[k] for k in ("id", "agent", "title")} == {"id": row["id"], "agent": "a", "title": "multi"}
    assert CONCLUSION in as_json["messages"][1]["parts"][-1]["text"]


def test_a_diff_made_to_stall_difflib_exports_at_once(tmp_path: Path) -> None:
    """The hostile diff (tests/core/runtime/test_diffs.py) recorded from a real agent: difflib took seconds on it."""
    env = private_env(tmp_path)
    config = write_config(tmp_path / "deck.toml", diff_agent(tmp_path, updates=1))
    run_and_exit(config, env, "rewrite")
    (row,) = json.loads(cli_here(env, "history", "--json", "--config", str(config)).stdout)
    forget_comparisons()
    exported, took = timed(cli_here, env, "export", row["id"])
    assert exported.returncode == 0, exported.stderr
    assert took < 0.5
    assert f"```diff\n--- {DIFF_PATH}\n+++ {DIFF_PATH}\n{TOO_LARGE}\n```\n" in exported.stdout


def test_forget_deletes_one_conversation_and_an_unknown_id_is_an_error(recorded: Recorded, tmp_path: Path) -> None:
    mine = copy_of(recorded, tmp_path)
    row = mine.only_conversation()
    forgot = deck_cli(mine.env, "history", "--forget", row["id"])
    assert forgot.returncode == 0 and forgot.stdout == f"forgot conversation {row['id']}\n"
    assert json.loads(mine.cli("history", "--json", "--all").stdout) == []
    assert mine.cli("search", "answer", "--json", "--all").stdout.strip() == "[]"
    again = mine.cli("history", "--forget", row["id"])
    assert again.returncode == 1 and again.stderr == f"deck: no conversation {row['id']!r} in the history\n"
    unknown = mine.cli("export", "no-such-id")
    assert unknown.returncode == 1 and unknown.stderr == "deck: no conversation 'no-such-id' in the history\n"


def test_history_is_per_config_and_all_lists_every_config(tmp_path: Path) -> None:
    env = private_env(tmp_path)
    here, there = tmp_path / "here.toml", tmp_path / "there.toml"
    with HistoryStore(tmp_path / "state" / "deck" / "history.db") as store:
        mine = store.new_conversation(config_key(here), "a", title="mine")
        store.new_conversation(config_key(there), "a", title="theirs")
        store.new_conversation("", "demo", title="built-in")
    listed = json.loads(cli_here(env, "history", "--json", "--config", str(here)).stdout)
    assert [r["id"] for r in listed] == [mine]
    every = cli_here(env, "history", "--all")
    assert every.returncode == 0
    assert [line.rsplit("  ", 1)[-1] for line in every.stdout.splitlines()] == ["built-in", "theirs", "mine"]
    assert "(built-in config)" in every.stdout and str(config_key(there)) in every.stdout


def test_with_no_history_yet_nothing_is_created_and_a_broken_file_is_one_line(tmp_path: Path) -> None:
    env = private_env(tmp_path)
    for args in (("history",), ("search", "word"), ("history", "--json")):
        result = cli_here(env, *args)
        assert (result.returncode, result.stderr) == (0, ""), args
        assert result.stdout.strip() in ("no history yet", "[]")
    missing = cli_here(env, "export", "x")
    assert missing.returncode == 1 and missing.stderr == "deck: no conversation 'x' in the history (no history yet)\n"
    assert not (tmp_path / "state").exists()
    path = tmp_path / "state" / "deck" / "history.db"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage, not SQLite " * 100)
    broken = deck_cli(env, "history")
    assert broken.returncode == 1 and len(broken.stderr.splitlines()) == 1
    assert broken.stderr.startswith(f"deck: cannot read the history: {path}: corrupt")
    assert path.read_bytes() == b"garbage, not SQLite " * 100


def test_search_on_a_terminal_marks_the_match_and_shows_control_characters(tmp_path: Path) -> None:
    env = private_env(tmp_path)
    config = tmp_path / "deck.toml"
    with HistoryStore(tmp_path / "state" / "deck" / "history.db") as store:
        cid = store.new_conversation(config_key(config), "a", title="a \x1b[2J title")
        store.put_messages(cid, [{"id": "m1", "role": "agent", "parts": [
            {"type": "text", "text": "before \x1b]52;c;ZXZpbA==\x07 the zebra crossed"}], "done": True}])  # fmt: skip
    controller, terminal = pty.openpty()
    try:
        child = subprocess.Popen([*DECK, "search", "zebra", "--config", str(config)], stdout=terminal,
                                 stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)  # fmt: skip
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
        assert child.wait(30) == 0
    finally:
        os.close(controller)
    text = out.decode()
    assert "\x1b[1mzebra\x1b[22m" in text  # the match in bold
    assert "\x1b]52" not in text and "␛]52" in text and "␇" in text  # the agent's escape shown, never run


# -- what a deck records -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["config", "flag"])
def test_history_switched_off_writes_nothing(tmp_path: Path, how: str) -> None:
    env = private_env(tmp_path)
    switch = "[history]\nenabled = false\n" if how == "config" else ""
    config = write_config(tmp_path / "deck.toml", switch + agent_block("a"))
    lines = run_and_exit(config, env, "hello", args=("-p", "no:history") if how == "flag" else ())
    assert any(x.get("event") == "message:updated" and x["message"]["role"] == "agent" for x in lines)
    assert not [x for x in lines if x.get("event") == "plugin:error"]
    assert not (tmp_path / "state" / "deck" / "history.db").exists()


def test_a_corrupt_database_is_reported_left_untouched_and_deck_runs_on(tmp_path: Path) -> None:
    env = private_env(tmp_path)
    path = tmp_path / "state" / "deck" / "history.db"
    path.parent.mkdir(parents=True)
    junk = bytes(range(256)) * 64
    path.write_bytes(junk)
    config = write_config(tmp_path / "deck.toml", agent_block("a"))
    lines = run_and_exit(config, env, "hello")
    (error,) = [x for x in lines if x.get("event") == "plugin:error"]
    assert error["plugin"] == "history"
    assert error["error"].startswith(f"history is off: {path}: corrupt")
    assert [m["parts"] for m in shown_messages(lines) if m["role"] == "agent"] == [[{"type": "text", "text": "You said: hello"}]]
    assert path.read_bytes() == junk
    assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith("history")) == ["history.db"]


def test_message_ids_are_unique_across_runs() -> None:
    make = "from deck.chat.conversation import Message; print(Message('a', 'user').id, Message('a', 'agent').id)"
    runs = [subprocess.run([sys.executable, "-c", make], capture_output=True, text=True, check=True).stdout.split()
            for _ in range(2)]  # fmt: skip
    assert all(MESSAGE_ID.match(i) for run in runs for i in run)
    assert not set(runs[0]) & set(runs[1])


def test_durations_may_be_given_in_days() -> None:
    assert parse_duration("90d") == 90 * DAY
    assert parse_duration("1.5d") == 1.5 * DAY
    assert format_duration(90 * DAY) == "90d"
    assert format_duration(3600) == "1h"
    assert history.HistorySettings().keep == 90 * DAY


def commits_of(store: HistoryStore) -> list[str]:
    """The COMMIT statements the store's writing connection runs from now on."""
    commits: list[str] = []
    store._db.set_trace_callback(lambda statement: commits.append(statement) if statement == "COMMIT" else None)
    return commits


async def turn_done(rec: Any, agent: str, count: int = 1, timeout: float = 30) -> None:
    await rec.wait(lambda r: len([p for p in r.named("turn:changed", agent) if not p["busy"]]) >= count, timeout=timeout)


async def send(deck: Any, agent: str, text: str) -> str:
    """`ChatService.Send`: the user message's id."""
    return await deck.call("ChatService.Send", {"agent": agent, "text": text})


def stored(config: str | None = None) -> list[dict[str, Any]]:
    """Every stored conversation (with its messages), oldest first."""
    with HistoryStore() as store:
        return [store.get(row["id"]) for row in reversed(store.list(config, limit=100))]  # type: ignore[misc]


@pytest.mark.anyio
async def test_streamed_chunks_are_written_in_a_few_batches_never_one_by_one(make_deck) -> None:
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    recorder = history.recorder_of(deck)
    assert recorder is not None
    commits = commits_of(recorder.store)
    await send(deck, "a", "stream 10000")
    await turn_done(rec, "a")
    assert len(rec.named("message:delta", "a")) == 10000
    await deck.shutdown()
    assert 1 <= len(commits) <= 10  # the user message, the reply started, once a second, the reply done
    (conversation,) = stored()
    assert conversation["messages"][-1]["parts"] == [{"type": "text", "text": "".join(f"c{i} " for i in range(10000))}]


def logged_writes(store: HistoryStore) -> sqlite3.Connection:
    """From now on, the store's writing connection logs each messages row it writes and each chunk it appends.

    `row_writes (pk, done, parts, text)` holds the lengths of the JSON parts and of the searchable
    text written (the full-text index follows that column), `chunk_writes (pk, text)` the length
    of the text of each chunk appended to a message.
    """
    with store._write_lock:
        db = store._db
        db.execute("CREATE TEMP TABLE row_writes (pk INTEGER, done INTEGER, parts INTEGER, text INTEGER)")
        db.execute("CREATE TEMP TABLE chunk_writes (pk INTEGER, text INTEGER)")
        for event in ("INSERT", "UPDATE"):
            db.execute(
                f"CREATE TEMP TRIGGER log_row_{event} AFTER {event} ON main.messages BEGIN INSERT INTO row_writes"
                " VALUES (new.pk, new.done, length(new.parts), length(new.text)); END"
            )
        if db.execute("SELECT 1 FROM sqlite_schema WHERE name = 'message_chunks'").fetchone():
            db.execute(
                "CREATE TEMP TRIGGER log_chunk AFTER INSERT ON main.message_chunks BEGIN"
                " INSERT INTO chunk_writes VALUES (new.message_pk, length(new.body)); END"
            )
    return db


@pytest.mark.anyio
async def test_a_streaming_message_is_appended_to_never_rewritten_nor_indexed_at_each_flush(
    make_deck, monkeypatch
) -> None:
    monkeypatch.setattr(history_store, "FLUSH_INTERVAL", 0.02)  # many flushes during one answer
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    recorder = history.recorder_of(deck)
    assert recorder is not None
    db = logged_writes(recorder.store)
    await send(deck, "a", "stream 20000")
    await turn_done(rec, "a")
    await asyncio.to_thread(recorder.writer.flush)  # the finished reply too
    text = "".join(f"c{i} " for i in range(20000))
    (reply,) = {m["message"]["id"] for m in rec.named("message:updated", "a") if m["message"]["role"] == "agent"}
    with recorder.store._write_lock:
        (pk,) = db.execute("SELECT pk FROM messages WHERE id = ?", (reply,)).fetchone()
        rows = db.execute("SELECT done, parts, text FROM row_writes WHERE pk = ?", (pk,)).fetchall()
        chunks = [n for (n,) in db.execute("SELECT text FROM chunk_writes WHERE pk = ?", (pk,))]
    # The row is written twice: when the reply began (nothing to search yet) and when it finished
    # (indexed then, once), both times without the streamed text, which went in chunk by chunk.
    parts_without_text = len(json.dumps([{"type": "text", "text": ""}], separators=(",", ":")))
    assert rows == [(0, len("[]"), 0), (1, parts_without_text, len(text))]
    assert len(chunks) >= 3  # it streamed over several flushes, each writing only the text that came since
    assert sum(chunks) == len(text)
    (conversation,) = stored()
    assert conversation["messages"][-1]["parts"] == [{"type": "text", "text": text}]


@pytest.mark.anyio
async def test_stored_as_the_conversation_shows_it_streamed_parts_and_late_chunks_included(make_deck) -> None:
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    for n, prompt in enumerate(("user", "multi", "thought", "tools", "plan"), 1):  # "user" extends a finished message
        await send(deck, "a", prompt)
        await turn_done(rec, "a", n)
    shown = await deck.call("ChatService.Conversation", {"agent": "a"})
    await deck.shutdown()
    (conversation,) = stored()
    assert conversation["messages"] == shown["messages"]
    assert "earlier question" in json.dumps(conversation)


@pytest.mark.anyio
async def test_a_streaming_message_reaches_the_disk_within_a_second(make_deck) -> None:
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    recorder = history.recorder_of(deck)
    assert recorder is not None
    loop = asyncio.get_running_loop()
    written = asyncio.Event()
    recorder.store._db.set_trace_callback(
        lambda statement: loop.call_soon_threadsafe(written.set) if statement == "COMMIT" else None
    )
    reply_id = await send(deck, "a", "slow")
    await rec.wait_event("message:delta", agent="a")
    first_chunk = time.monotonic()
    while True:  # after each commit: is the streaming reply on disk yet?
        written.clear()
        with HistoryStore() as reader:
            rows = reader.list()
            messages = reader.get(rows[0]["id"])["messages"] if rows else []  # type: ignore[index]
        partial = [m for m in messages if m["role"] == "agent" and m["parts"]]
        if partial:
            break
        await asyncio.wait_for(written.wait(), 5)
    assert time.monotonic() - first_chunk < 1.0 + 0.5  # the interval, and the write
    assert partial[0]["done"] is False and partial[0]["parts"][0]["text"].startswith("tick ")
    assert [m["id"] for m in messages][0] == reply_id
    await deck.call("ChatService.Cancel", {"agent": "a"})
    await turn_done(rec, "a")


@pytest.mark.anyio
async def test_the_agents_title_and_session_are_stored(make_deck) -> None:
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    await send(deck, "a", "hello there\nsecond line")
    await send(deck, "a", "session")  # the agent names the session: its title wins over the first user text
    await turn_done(rec, "a", 2)
    session_id = deck.agents["a"].session_id
    await deck.shutdown()
    (conversation,) = stored()
    assert (conversation["title"], conversation["sessionId"]) == ("A title", session_id)
    assert conversation["configPath"] == config_key(deck.config_path)
    assert [m["role"] for m in conversation["messages"]] == ["user", "user", "agent", "agent"]


@pytest.mark.anyio
async def test_announcements_and_ask_sessions_are_never_stored(make_deck) -> None:
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    await deck.startup()
    await send(deck, "a", "ask b multi")
    await turn_done(rec, "a")
    assert [p["text"] for p in rec.named("agent:announcement")] == [PREAMBLE, MIDDLE]  # there were some
    await deck.shutdown()
    (conversation,) = stored()
    assert conversation["agent"] == "a"  # b answered in an ask session: nothing of b is stored
    everything = json.dumps(conversation)
    assert PREAMBLE not in everything and MIDDLE not in everything
    assert f"answer: {CONCLUSION}" in everything


@pytest.mark.anyio
async def test_another_config_opened_starts_new_conversations_under_its_path(make_deck, tmp_path: Path) -> None:
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    await send(deck, "a", "first")
    await turn_done(rec, "a")
    other = write_config(tmp_path / "other.toml", agent_block("a"))
    await deck.call("ConfigService.Open", {"path": str(other)})
    await send(deck, "a", "second")
    await turn_done(rec, "a", 2)
    await deck.shutdown()
    first, second = stored()
    assert (first["configPath"], first["title"]) == (config_key(tmp_path / "deck.toml"), "first")
    assert (second["configPath"], second["title"]) == (config_key(other), "second")
    assert "You said: second" in json.dumps(second) and "second" not in json.dumps(first["messages"])


@pytest.mark.anyio
async def test_a_config_opened_brings_back_each_agents_latest_conversation_under_it(make_deck, tmp_path: Path) -> None:
    other = write_config(tmp_path / "other.toml", agent_block("b"))
    kept = {"id": "msg-0000000a-1", "agent": "b", "createdAt": "2026-01-01T00:00:00.000Z", "role": "user",
            "parts": [{"type": "text", "text": "kept under other"}], "done": True, "queued": False}  # fmt: skip
    with HistoryStore() as store:
        cid = store.new_conversation(config_key(other), "b", title="kept under other")
        store.put_messages(cid, [kept])
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    await deck.call("ConfigService.Open", {"path": str(other)})
    assert await rec.wait_event("conversation:reset", agent="b") == {"agent": "b", "conversationId": cid}
    assert (await deck.call("ChatService.Conversation", {"agent": "b"}))["messages"] == [kept]  # as at start
    await send(deck, "b", "and more")
    await turn_done(rec, "b")
    [listed] = await deck.call("ChatService.History", {"agent": "b"})
    assert (listed["id"], listed["messages"], listed["title"]) == (cid, 3, "kept under other")
    shown = await deck.call("ChatService.Conversation", {"agent": "b"})
    await deck.call("ConfigService.Open", {"path": str(other)})  # the same file again: the same conversation
    await rec.wait(lambda r: len(r.named("conversation:reset", "b")) == 2)
    assert (await deck.call("ChatService.Conversation", {"agent": "b"}))["messages"] == shown["messages"]
    await deck.shutdown()
    assert [c["id"] for c in stored(config_key(other))] == [cid]


@pytest.mark.anyio
async def test_old_conversations_are_pruned_at_start(make_deck) -> None:
    now = time.time()
    deck, _rec = make_deck('[history]\nkeep = "30d"\n' + agent_block("a"))
    ours = config_key(deck.config_path)
    with HistoryStore(clock=lambda: now - 100 * DAY) as old:
        old.new_conversation(ours, "a", title="old")
        old.new_conversation("/x/deck.toml", "a", title="another config's")  # kept as its own keep says
    with HistoryStore(clock=lambda: now - DAY) as recent:
        recent.new_conversation(ours, "a", title="recent")
    await deck.startup()
    await deck.shutdown()
    assert sorted(c["title"] for c in stored()) == ["another config's", "recent"]


@pytest.mark.anyio
async def test_an_invalid_history_section_turns_history_off_and_says_so(make_deck, monkeypatch) -> None:
    monkeypatch.setattr(recording, "FRONTEND_WAIT", 0.0)  # no frontend here to wait for
    deck, rec = make_deck('[history]\nenabled = false\nkeep = "soon"\n' + agent_block("a"))
    await deck.startup()
    error = await rec.wait_event("plugin:error", plugin="history")
    assert "[history] section of the config is invalid" in error["error"]
    assert history.recorder_of(deck) is None
    assert not default_path().exists()


def test_kill_9_mid_answer_loses_at_most_the_last_second(tmp_path: Path) -> None:
    env = private_env(tmp_path)
    config = write_config(tmp_path / "deck.toml", agent_block("a"))
    deck = DeckProcess("--config", str(config), env=env)

    def chunks(at_least: int) -> int:
        return len(deck.wait_for(lambda lines: [x for x in lines if x.get("event") == "message:delta"][at_least - 1:]))

    agents: list[int] = []
    try:
        deck.call("ChatService.Send", {"agent": "a", "text": "slow"})  # "tick " every 50 ms until cancelled
        chunks(5)  # the answer streams
        seen = len(deck.events("message:delta", agent="a"))
        chunks(seen + 30)  # 1.5 s more: what had come by then is on disk
        agents = deck.descendants()
        deck.signal(signal.SIGKILL)
        deck.wait(5)
    finally:
        for pid in agents:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deck.kill_everything()
    with HistoryStore(tmp_path / "state" / "deck" / "history.db") as store:
        assert store._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        (row,) = store.list()
        user, reply = store.get(row["id"])["messages"]  # type: ignore[index]
    assert user["done"] and user["parts"] == [{"type": "text", "text": "slow"}]
    assert reply["done"] is False
    assert reply["parts"][0]["text"].count("tick ") >= seen


@pytest.mark.anyio
async def test_each_deck_records_through_a_plugin_of_its_own_gone_at_its_shutdown(make_deck) -> None:
    one, rec_one = make_deck(agent_block("a"))
    two, rec_two = make_deck(agent_block("a"))
    await one.startup()
    await two.startup()
    mine, theirs = one.pm.get_plugin(history.PER_DECK), two.pm.get_plugin(history.PER_DECK)
    assert isinstance(mine, history.History) and isinstance(theirs, history.History) and mine is not theirs
    assert history.recorder_of(one) is mine.recorder and mine.recorder.deck is one
    await send(one, "a", "only in one")
    await turn_done(rec_one, "a")
    await one.shutdown()
    assert one.pm.get_plugin(history.PER_DECK) is None and history.recorder_of(one) is None
    assert history.recorder_of(two) is theirs.recorder and not theirs.recorder.closed  # the other deck records on
    await send(two, "a", "only in two")
    await turn_done(rec_two, "a")
    await two.shutdown()
    assert sorted(c["title"] for c in stored()) == ["only in one", "only in two"]


@pytest.mark.anyio
async def test_the_agents_title_is_stored_on_one_line_and_bounded(make_deck) -> None:
    """A title is the agent's to give: a megabyte of it, on many lines, is stored as a short line."""
    script = AGENTS / "terminal_agent.py"
    deck, rec = make_deck(agent_block("a", command=[sys.executable, str(script)]))
    await deck.startup()
    huge = "\n  Fix the\tparser " + "x" * 1_000_000 + "\nsecond line"
    steps = [["update", {"sessionUpdate": "session_info_update", "title": huge}]]
    await send(deck, "a", json.dumps({"steps": steps}))
    await turn_done(rec, "a")
    [listed] = await deck.call("ChatService.History", {"agent": "a"})
    await deck.shutdown()
    assert listed["title"].startswith("Fix the parser xxx") and listed["title"].endswith("…")
    assert len(listed["title"]) == recording.TITLE_MAX and "\n" not in listed["title"]
    (conversation,) = stored()
    assert conversation["title"] == listed["title"]


@pytest.mark.anyio
async def test_an_agent_that_drops_its_title_gives_a_restored_conversation_its_first_user_text(make_deck) -> None:
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    await send(deck, "a", "the first question")
    await send(deck, "a", "session")  # the agent names the session
    await turn_done(rec, "a", 2)
    await deck.shutdown()
    assert [c["title"] for c in stored()] == ["A title"]
    script = AGENTS / "terminal_agent.py"
    deck, rec = make_deck(agent_block("a", command=[sys.executable, str(script)]))
    await deck.startup()  # the conversation is restored, and this agent's session has no title
    steps = [["update", {"sessionUpdate": "session_info_update", "title": None}]]
    await send(deck, "a", json.dumps({"steps": steps}))
    await turn_done(rec, "a")
    [listed] = await deck.call("ChatService.History", {"agent": "a"})
    await deck.shutdown()
    assert listed["title"] == "the first question"  # not the title the agent dropped


def test_a_huge_limit_on_the_command_line_lists_everything(recorded: Recorded) -> None:
    done = cli_here(recorded.env, "history", "--config", str(recorded.config), "--limit", str(10**20))
    assert done.returncode == 0 and done.stdout.count("\n") == 1, done.stderr


@pytest.mark.parametrize("value", ["--all", "-n", "--json", "-"])
def test_forget_with_an_option_for_its_id_is_a_usage_error_and_forgets_nothing(
    recorded: Recorded, tmp_path: Path, value: str
) -> None:
    """`--forget --all`: the next option is not taken for the ID (no id starts with "-")."""
    mine = copy_of(recorded, tmp_path)
    row = mine.only_conversation()
    done = mine.cli("history", "--forget", value, "--all")
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr == f"deck: --forget needs a conversation ID (from `deck history`), not {value!r}\n"
    assert mine.only_conversation() == row
