"""The history store: file modes, exact round trips, upserts, search, migrations, unusable files left
untouched, two processes at once, the batching writer, and a kill -9 in the middle of an answer."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from deck.plugins.history import store as history
from deck.plugins.history.store import (
    SCHEMA_VERSION,
    SEARCH_MAX,
    WRITER_NICENESS,
    HistoryStore,
    HistoryUnavailable,
    Writer,
    default_path,
)
from hypothesis import given, settings
from hypothesis import strategies as st

CONFIG = "/home/u/project/deck.toml"
DAY = 86_400.0


def message(mid: str, text: str = "", role: str = "agent", done: bool = True, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": mid, "agent": "claude", "createdAt": "2025-03-01T10:00:00.000Z", "role": role,
        "parts": [{"type": "text", "text": text}] if text else [], "done": done, "queued": False,
    }  # fmt: skip
    return {**out, **extra}


def file_state(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), os.stat(path).st_mtime_ns


def closed_store(path: Path) -> Path:
    """A real history database at `path`, with one conversation, closed (its WAL checkpointed away)."""
    with HistoryStore(path) as store:
        cid = store.new_conversation(CONFIG, "claude")
        store.put_messages(cid, [message("m1", "hello")])
    return path


@pytest.fixture
def store(tmp_path: Path):
    with HistoryStore(tmp_path / "history.db") as s:
        yield s


# -- the file ---------------------------------------------------------------------------------------


def test_default_path_is_private_whatever_the_umask() -> None:
    old = os.umask(0)
    try:
        with HistoryStore() as s:
            cid = s.new_conversation(CONFIG, "claude")
            s.put_messages(cid, [message("m1", "hi")])
            path = default_path()
            assert s.path == path
            assert path == Path(os.environ["XDG_STATE_HOME"]) / "deck" / "history.db"
            assert os.stat(path.parent).st_mode & 0o777 == 0o700
            for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                assert os.stat(name).st_mode & 0o777 == 0o600, name
    finally:
        os.umask(old)


def test_relative_xdg_state_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_path() == tmp_path / ".local" / "state" / "deck" / "history.db"


def test_loose_modes_are_repaired_but_a_foreign_folder_is_left_alone(tmp_path: Path) -> None:
    closed_store(default_path())
    os.chmod(default_path(), 0o644)
    os.chmod(default_path().parent, 0o755)
    HistoryStore().close()
    assert os.stat(default_path()).st_mode & 0o777 == 0o600
    assert os.stat(default_path().parent).st_mode & 0o777 == 0o700

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    HistoryStore(shared / "h.db").close()
    assert os.stat(shared).st_mode & 0o777 == 0o755  # a folder the user chose is theirs
    assert os.stat(shared / "h.db").st_mode & 0o777 == 0o600
    HistoryStore(tmp_path / "new" / "deeper" / "h.db").close()
    assert os.stat(tmp_path / "new" / "deeper").st_mode & 0o777 == 0o700


# -- conversations and messages ---------------------------------------------------------------------


def test_a_message_reads_back_exactly_key_order_included(store: HistoryStore) -> None:
    full = {
        "id": "msg-7", "agent": "claude", "createdAt": "2025-03-01T10:00:00.123Z", "role": "agent",
        "parts": [
            {"type": "thought", "text": "hmm \ud83d lone surrogate, NUL \x00, émoji 🚀"},
            {"type": "text", "text": "# Title\n\n`code`"},
            {"type": "tool", "id": "t1", "title": "Read x.py", "kind": "read", "status": "completed",
             "input": '{"path":"x.py"}', "output": "…", "locations": [{"path": "/x.py", "line": 3}],
             "diffs": [{"path": "/x.py", "oldText": None, "newText": "a", "newFile": True}]},
            {"type": "plan", "entries": [{"content": "do", "priority": "high", "status": "pending"}]},
        ],
        "done": True, "queued": False, "stopReason": "end_turn", "durationMs": 1234,
        "usage": {"used": 10, "size": 200, "cost": {"amount": 0.5, "currency": "USD"}},
    }  # fmt: skip
    no_parts = {"id": "s1", "role": "system", "code": "agent-restarted", "error": "why \ud800", "done": True}
    cid = store.new_conversation(CONFIG, "claude")
    store.put_messages(cid, [full, no_parts])
    got = store.get(cid)
    assert got is not None
    assert json.dumps(got["messages"]) == json.dumps([full, no_parts])


def test_a_streaming_message_is_rewritten_in_place_never_duplicated(store: HistoryStore) -> None:
    cid = store.new_conversation(CONFIG, "claude")
    store.put_messages(cid, [message("u1", "question", role="user")])
    for n in range(1, 6):
        store.put_messages(cid, [message("a1", "tok " * n + "draftword", done=False)])
    store.put_messages(cid, [message("u2", "queued follow-up", role="user", queued=True)])
    store.put_messages(cid, [message("a1", "the final answer", stopReason="end_turn")])
    got = store.get(cid)
    assert got is not None
    assert [m["id"] for m in got["messages"]] == ["u1", "a1", "u2"]  # first-stored order, one of each
    assert got["messages"][1] == message("a1", "the final answer", stopReason="end_turn")
    assert store.search("draftword") == []  # the index follows the rewrite
    assert [r["messageId"] for r in store.search("final")] == ["a1"]
    assert store.list()[0]["messages"] == 3


def test_latest_and_list_newest_first_with_filters(store: HistoryStore) -> None:
    old = store.new_conversation(CONFIG, "claude", session_id="s-old", title="old one")
    other_agent = store.new_conversation(CONFIG, "codex")
    other_config = store.new_conversation("/elsewhere/deck.toml", "claude")
    new = store.new_conversation(CONFIG, "claude")
    store.put_messages(new, [message("m1", "x"), message("m2", "y")])
    assert store.latest(CONFIG, "claude")["id"] == new  # type: ignore[index]
    store.put_messages(old, [message("m9", "revived")])  # activity makes it the latest again
    latest = store.latest(CONFIG, "claude")
    assert latest is not None and latest["id"] == old and latest["sessionId"] == "s-old"
    assert latest["messages"] == [message("m9", "revived")]
    assert store.latest(CONFIG, "nobody") is None

    listed = store.list(CONFIG, "claude")
    assert [c["id"] for c in listed] == [old, new]
    assert set(listed[0]) == {"id", "agent", "configPath", "title", "sessionId", "createdAt", "updatedAt", "messages", "usage", "choices", "children"}
    assert (listed[0]["title"], listed[0]["messages"], listed[1]["messages"]) == ("old one", 1, 2)
    assert listed[0]["createdAt"].endswith("Z") and listed[0]["updatedAt"] >= listed[0]["createdAt"]
    assert [c["id"] for c in store.list()] == [old, new, other_config, other_agent]
    assert [c["id"] for c in store.list(agent="codex")] == [other_agent]
    assert [c["id"] for c in store.list(config_path="/elsewhere/deck.toml")] == [other_config]
    assert len(store.list(limit=2)) == 2
    with pytest.raises(ValueError):
        store.list(limit=0)


def test_session_title_forget_and_unknown_ids(store: HistoryStore) -> None:
    cid = store.new_conversation(CONFIG, "claude")
    store.put_messages(cid, [message("m1", "remember the walrus")])
    store.set_session(cid, "sess-1")
    store.set_title(cid, "Walrus talk")
    got = store.get(cid)
    assert got is not None and (got["sessionId"], got["title"]) == ("sess-1", "Walrus talk")
    for call in (lambda: store.set_title("nope", "t"), lambda: store.put_messages("nope", [message("m", "x")])):
        with pytest.raises(KeyError):
            call()
    with pytest.raises(ValueError):
        store.put_messages(cid, [{"role": "user"}])
    assert store.forget(cid) is True
    assert store.forget(cid) is False
    assert store.get(cid) is None
    assert store.search("walrus") == []  # its messages left the index with it


def test_prune_deletes_conversations_idle_longer_than_keep(tmp_path: Path) -> None:
    now = [1_700_000_000.0]
    with HistoryStore(tmp_path / "h.db", clock=lambda: now[0]) as s:
        stale = s.new_conversation(CONFIG, "claude")
        s.put_messages(stale, [message("m1", "ancient history")])
        elsewhere = s.new_conversation("/elsewhere/deck.toml", "claude")  # another config's: its own keep
        now[0] += 100 * DAY
        fresh = s.new_conversation(CONFIG, "claude")
        assert s.prune(CONFIG, 90 * DAY) == 1
        assert [c["id"] for c in s.list()] == [fresh, elsewhere]
        assert s.search("ancient") == []
        assert s.prune(CONFIG, 90 * DAY) == 0


# -- search -----------------------------------------------------------------------------------------


def test_search_finds_text_thoughts_and_tool_titles_newest_first_with_filters(store: HistoryStore) -> None:
    a = store.new_conversation(CONFIG, "claude")
    b = store.new_conversation(CONFIG, "codex")
    c = store.new_conversation("/other/deck.toml", "claude")
    tool = {"type": "tool", "id": "t", "title": "Edit websocket.py", "kind": "edit", "status": "completed",
            "input": "", "output": "secretoutput", "locations": [], "diffs": []}  # fmt: skip
    store.put_messages(a, [message("a1", "the websocket reconnects", role="user")])
    store.put_messages(a, [{**message("a2"), "parts": [{"type": "thought", "text": "websocket backoff"}, tool]}])
    store.put_messages(b, [message("b1", "a websocket in codex")])
    store.put_messages(c, [message("c1", "websocket elsewhere")])
    assert [r["messageId"] for r in store.search("websocket")] == ["c1", "b1", "a2", "a1"]
    assert [r["messageId"] for r in store.search("websocket", agent="claude")] == ["c1", "a2", "a1"]
    assert [r["messageId"] for r in store.search("websocket", agent="claude", config_path=CONFIG)] == ["a2", "a1"]
    assert [r["messageId"] for r in store.search("websocket", limit=1)] == ["c1"]
    assert store.search("secretoutput") == []  # tool output is not searched, its title is
    hit = store.search("reconnects")[0]
    assert hit == {
        "conversationId": a, "agent": "claude", "messageId": "a1", "role": "user",
        "snippet": "the websocket **reconnects**", "at": "2025-03-01T10:00:00.000Z",
    }  # fmt: skip
    assert store.search("WEBSOCK*", agent="codex", marks=("<", ">"))[0]["snippet"] == "a <websocket> in codex"
    assert [r["messageId"] for r in store.search("websocket backoff")] == ["a2"]  # every word, anywhere


def test_fts_syntax_in_a_query_is_plain_text(store: HistoryStore) -> None:
    cid = store.new_conversation(CONFIG, "claude")
    store.put_messages(cid, [message("m1", 'call foo(bar) with -x and "quoted" key:value OR NOT')])
    for query in ['foo(bar)', '"quoted"', "key:value", "-x", "OR", "NOT", "(", '"', "text:foo", "scope:a", "NEAR(x y)"]:
        found = store.search(query)
        assert isinstance(found, list), query
    assert [r["messageId"] for r in store.search("foo(bar)")] == ["m1"]
    assert [r["messageId"] for r in store.search('"quoted" key:value')] == ["m1"]
    assert store.search("scope : a") == []  # the filter column cannot be reached from a query
    assert [r["messageId"] for r in store.search("quot*")] == ["m1"]
    assert store.search("qu*") == []  # too short for a prefix: the word "qu"
    for blank in ("", "   ", "\n\t"):
        with pytest.raises(ValueError, match="empty"):
            store.search(blank)


def test_a_word_found_all_through_a_long_message_is_found_at_once(store: HistoryStore) -> None:
    """A log pasted whole: each search answers at once with a short snippet around a match
    (FTS5's snippet() alone takes the square of the matches in a message: minutes for this one)."""
    cid = store.new_conversation(CONFIG, "claude")
    log = "".join(f"line {i}: the Ünïcode worker will retry now\n" for i in range(20_000))
    store.put_messages(cid, [message("m1", "Here is the log:\n" + log + "the end")])
    for query, found in [("retry", "retry"), ("unicode", "Ünïcode"), ("RETR*", "retry"), ("will retry", "will")]:
        started = time.monotonic()
        (hit,) = store.search(query)
        assert time.monotonic() - started < 1.0, query
        assert f"**{found}**" in hit["snippet"] and len(hit["snippet"].split()) <= 2 * history.SNIPPET_WORDS, hit
        assert hit["snippet"].startswith("Here is the log") and hit["snippet"].endswith("…")
    (hit,) = store.search("19999")  # a match far into the message: the snippet is around it
    assert hit["snippet"].startswith("…") and "line **19999**:" in hit["snippet"]
    store.put_messages(cid, [message("m2", "a " + "z" * 100_000 + " b")])
    (hit,) = store.search("zzz*")
    assert hit["snippet"].startswith("a **zzz") and len(hit["snippet"]) < 100  # one huge word, cut


def test_a_match_at_the_end_of_a_megabyte_is_snipped_at_once_whatever_the_query(store: HistoryStore) -> None:
    cid = store.new_conversation(CONFIG, "claude")
    store.put_messages(cid, [message("m1", "ж " * 520_000 + "needle zebra")])
    many = " ".join(f"ж{i}*" for i in range(300))  # prefixes of words all there: "ж" + digits are not
    for query in ["needle", "need*", "zebra* needle"]:
        started = time.monotonic()
        (hit,) = store.search(query)
        assert time.monotonic() - started < 1.0, query
        assert "**needle**" in hit["snippet"] and hit["snippet"].startswith("…"), hit
    started = time.monotonic()
    assert store.search(many + " needle") == []  # no such words: nothing, at once
    assert time.monotonic() - started < 1.0


FTS_WORDS = st.sampled_from(
    ['"', "*", "-", ":", "(", ")", "^", "+", "{", "}", "AND", "OR", "NOT", "NEAR", "text", "scope", "\x00", " "]
)


def test_no_query_makes_search_fail(store: HistoryStore) -> None:
    cid = store.new_conversation(CONFIG, "claude")
    store.put_messages(cid, [message("m1", "alpha beta (gamma) delta-epsilon")])

    pieces = st.one_of(FTS_WORDS, st.characters(), st.sampled_from(["alpha", "beta", "gamma", "\ud800"]))

    @settings(max_examples=300, deadline=None)
    @given(st.lists(pieces, max_size=12).map("".join))
    def check(query: str) -> None:
        if not query.strip():
            with pytest.raises(ValueError):
                store.search(query)
        else:
            assert isinstance(store.search(query, agent="claude"), list)

    check()


# -- migrations and unusable files -------------------------------------------------------------------


def test_a_version_1_database_is_migrated_forward(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    db = sqlite3.connect(path, isolation_level=None)
    history.MIGRATIONS[0](db)  # the database as the first schema wrote it
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO conversations VALUES ('c1', ?, 'claude', 's1', 'Old', 1000, 2000)", (CONFIG,))
    old = message("m1", "pelican migration notes")
    db.execute(
        "INSERT INTO messages (conversation_id, id, seq, role, created_at, done, parts, data)"
        " VALUES ('c1', 'm1', 1, 'agent', ?, 1, ?, ?)",
        (old["createdAt"], json.dumps(old["parts"]), json.dumps({**old, "parts": None})),
    )
    db.close()
    with HistoryStore(path) as s:
        assert s.schema_version == SCHEMA_VERSION > 1
        latest = s.latest(CONFIG, "claude")
        assert latest is not None and latest["messages"] == [old] and latest["title"] == "Old"
        assert [r["messageId"] for r in s.search("pelican", agent="claude", config_path=CONFIG)] == ["m1"]
        s.put_messages("c1", [message("m2", "pelican again")])
        assert [r["messageId"] for r in s.search("pelican")] == ["m2", "m1"]


def test_a_version_2_database_stops_searching_its_unfinished_messages(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    db = sqlite3.connect(path, isolation_level=None)
    for migration in history.MIGRATIONS[:2]:
        migration(db)
    db.execute("PRAGMA user_version = 2")
    db.execute("INSERT INTO conversations VALUES ('c1', ?, 'claude', NULL, NULL, 1000, 2000)", (CONFIG,))
    for mid, text, done in (("m1", "finished walrus", True), ("m2", "streaming walrus", False)):
        old = message(mid, text, done=done)
        db.execute(
            "INSERT INTO messages (conversation_id, id, seq, role, done, parts, data, text, scope)"
            " VALUES ('c1', ?, ?, 'agent', ?, ?, ?, ?, ?)",
            (mid, int(mid[1]), done, json.dumps(old["parts"]), json.dumps({**old, "parts": None}), text,
             history._scope("claude", CONFIG)),
        )  # fmt: skip
    db.close()
    with HistoryStore(path) as s:
        assert [r["messageId"] for r in s.search("walrus")] == ["m1"]  # the one still streaming left the index
        assert [m["parts"][0]["text"] for m in s.get("c1")["messages"]] == ["finished walrus", "streaming walrus"]  # type: ignore[index]


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_a_database_from_a_newer_deck_is_refused_untouched(tmp_path: Path, journal: str) -> None:
    path = closed_store(tmp_path / "h.db")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"PRAGMA journal_mode = {journal}")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    before = file_state(path)
    with pytest.raises(HistoryUnavailable, match=f"newer deck.*version {SCHEMA_VERSION + 1}"):
        HistoryStore(path)
    assert file_state(path) == before


def _garbage() -> bytes:
    return b"this is not a database at all\n" * 300


def _header_then_garbage(tmp_path: Path) -> bytes:
    good = closed_store(tmp_path / "good.db").read_bytes()
    return good[:100] + b"\xff" * 3000 + good[3100:]


def _another_programs(tmp_path: Path) -> bytes:
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.commit()
    db.close()
    return path.read_bytes()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (lambda tmp: _garbage(), "corrupt, or not an SQLite database"),
        (_header_then_garbage, "corrupt"),
        (_another_programs, "not a deck history database"),
    ],
    ids=["garbage", "header-then-garbage", "another-programs-database"],
)
def test_a_corrupt_or_foreign_file_is_refused_untouched(tmp_path: Path, content: Any, reason: str) -> None:
    path = tmp_path / "history.db"
    path.write_bytes(content(tmp_path))
    os.chmod(path, 0o600)
    before = file_state(path)
    with pytest.raises(HistoryUnavailable) as refused:
        HistoryStore(path)
    assert reason in refused.value.reason and str(path) in refused.value.reason
    assert file_state(path) == before


@pytest.mark.parametrize("through", ["the-file", "a-symlink"])
def test_a_file_that_is_not_a_deck_database_keeps_its_mode(tmp_path: Path, through: str) -> None:
    target = tmp_path / "notes.db"
    target.write_bytes(_another_programs(tmp_path))
    os.chmod(target, 0o644)
    path = tmp_path / "state" / "history.db"
    path.parent.mkdir()
    if through == "a-symlink":
        path.symlink_to(target)
    else:
        path = target
    with pytest.raises(HistoryUnavailable, match="not a deck history database"):
        HistoryStore(path)
    assert os.stat(target).st_mode & 0o777 == 0o644


def test_a_read_only_file_is_refused_untouched_even_by_root(tmp_path: Path) -> None:
    path = closed_store(tmp_path / "h.db")
    os.chmod(path, 0o400)
    before = file_state(path)
    with pytest.raises(HistoryUnavailable, match=r"read-only \(mode 0400\)"):
        HistoryStore(path)
    assert file_state(path) == before
    assert os.stat(path).st_mode & 0o777 == 0o400


def _without_root_powers() -> None:
    """In the child: drop the capabilities that let root ignore file modes (nothing to do for a user)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


OPEN_AND_SAY = """
import sys
from deck.plugins.history.store import HistoryStore, HistoryUnavailable
try:
    HistoryStore(sys.argv[1]).close()
    print("opened")
except HistoryUnavailable as e:
    print("unavailable:", e.reason)
"""


def test_a_read_only_folder_is_refused_untouched(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    existing = closed_store(folder / "h.db")
    before = file_state(existing)
    os.chmod(folder, 0o500)
    try:
        for path in (existing, folder / "new.db"):
            try:
                result = subprocess.run(
                    [sys.executable, "-c", OPEN_AND_SAY, str(path)],
                    preexec_fn=_without_root_powers, capture_output=True, text=True, timeout=30,
                )  # fmt: skip
            except subprocess.SubprocessError as e:
                pytest.skip(f"cannot run a child without root's file powers here: {e}")
            assert result.stdout.startswith("unavailable:"), result.stdout + result.stderr
            assert f"{path}: its folder is not writable" in result.stdout
        assert file_state(existing) == before
        assert sorted(os.listdir(folder)) == ["h.db"]
    finally:
        os.chmod(folder, 0o700)


@pytest.mark.parametrize("hold", ["begin-exclusive", "exclusive-locking-mode"])
def test_a_locked_database_is_refused_untouched(tmp_path: Path, hold: str) -> None:
    path = closed_store(tmp_path / "h.db")
    holder = sqlite3.connect(path, isolation_level=None)
    if hold == "begin-exclusive":
        holder.execute("BEGIN EXCLUSIVE")
    else:
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("COMMIT")  # the lock stays until the connection closes
    before = file_state(path)
    started = time.monotonic()
    with pytest.raises(HistoryUnavailable, match="locked by another program"):
        HistoryStore(path, busy_timeout=0.1)
    assert time.monotonic() - started < 3
    assert file_state(path) == before
    holder.close()
    HistoryStore(path).close()  # usable again once the lock is gone


def test_a_lock_during_use_keeps_the_writers_changes_for_later(tmp_path: Path) -> None:
    errors: list[HistoryUnavailable] = []
    with HistoryStore(tmp_path / "h.db", busy_timeout=0.05) as s:
        cid = s.new_conversation(CONFIG, "claude")
        writer = Writer(s, interval=60, on_error=errors.append)
        holder = sqlite3.connect(s.path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        writer.update(cid, message("a1", "first draft", done=False))
        for _ in range(2):
            with pytest.raises(HistoryUnavailable, match="locked"):
                writer.flush()
        writer.update(cid, message("a1", "second draft", done=False))
        assert len(errors) == 1 and writer.error is not None  # reported once, when it began
        holder.rollback()
        writer.flush()
        assert writer.error is None
        got = s.get(cid)
        assert got is not None and got["messages"] == [message("a1", "second draft", done=False)]
        writer.close()
        holder.close()


def test_reads_do_not_wait_for_a_write_that_waits_for_another_deck(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.db", busy_timeout=5) as s:
        cid = s.new_conversation(CONFIG, "claude")
        s.put_messages(cid, [message("m1", "a heron")])
        holder = sqlite3.connect(s.path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another deck, writing
        waiting = threading.Event()
        s._db.set_trace_callback(lambda statement: waiting.set() if statement == "BEGIN IMMEDIATE" else None)
        outcome: list[object] = []
        write = threading.Thread(target=lambda: outcome.append(s.put_messages(cid, [message("m2", "an egret")])))
        write.start()
        assert waiting.wait(5)
        started = time.monotonic()
        latest = s.latest(CONFIG, "claude")
        found = s.search("heron")
        assert time.monotonic() - started < 1.0  # not the 5 s the write may wait
        assert latest is not None and [m["id"] for m in latest["messages"]] == ["m1"]
        assert [r["messageId"] for r in found] == ["m1"]
        holder.rollback()
        write.join()
        assert outcome == [None]
        assert [m["id"] for m in s.get(cid)["messages"]] == ["m1", "m2"]  # type: ignore[index]
        holder.close()


SHARE = """
import json, sys
from deck.plugins.history.store import HistoryStore
store = HistoryStore(sys.argv[1], busy_timeout=10)
cid = store.new_conversation("/c/deck.toml", sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
for i in range(150):
    text = {"type": "text", "text": f"{sys.argv[2]} {i}"}
    store.put_messages(cid, [{"id": f"m{i}", "role": "user", "parts": [text]}])
print("written", flush=True)
sys.stdin.readline()
print(json.dumps(sorted((c["agent"], c["messages"]) for c in store.list())), flush=True)
"""


def test_two_processes_write_and_read_the_same_database(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SHARE, str(path), name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for name in ("left", "right")
    ]
    try:
        for step in ("ready", "written"):
            for p in procs:
                assert p.stdout and p.stdout.readline().strip() == step
            for p in procs:  # both go at once: their writes interleave
                assert p.stdin
                p.stdin.write("\n")
                p.stdin.flush()
        for p in procs:
            assert p.stdout and json.loads(p.stdout.readline()) == [["left", 150], ["right", 150]]
            assert p.wait(timeout=30) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    with HistoryStore(path) as s:
        found = s.search("right", agent="right", limit=200)
        assert sorted(r["messageId"] for r in found) == sorted(f"m{i}" for i in range(150))
        assert s._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


# -- the writer -------------------------------------------------------------------------------------


def commits_of(s: HistoryStore) -> tuple[list[str], list[float], threading.Event]:
    """The store's COMMIT statements, and when each of the writer's batches was done (committed)."""
    commits: list[str] = []
    written: list[float] = []
    event = threading.Event()
    s._db.set_trace_callback(lambda statement: commits.append(statement) if statement == "COMMIT" else None)
    apply = s._apply

    def recorded(pending: Any) -> None:
        apply(pending)
        written.append(time.monotonic())
        event.set()

    s._apply = recorded  # type: ignore[method-assign]
    return commits, written, event


def test_the_writer_keeps_only_the_latest_version_and_writes_one_transaction(store: HistoryStore) -> None:
    commits, _, _ = commits_of(store)
    with Writer(store, interval=60) as writer:
        cid = writer.new_conversation(CONFIG, "claude", title="Streams")
        for n in range(2000):
            for mid in ("a1", "a2"):
                writer.update(cid, message(mid, f"{mid} has {n} chunks", done=False))
        writer.set_session(cid, "sess-9")
        assert commits == []  # nothing written per chunk
        writer.flush()
        assert len(commits) == 1
    got = store.get(cid)
    assert got is not None and (got["title"], got["sessionId"]) == ("Streams", "sess-9")
    assert got["messages"] == [message(m, f"{m} has 1999 chunks", done=False) for m in ("a1", "a2")]


def chunk_bodies(s: HistoryStore) -> list[Any]:
    """What each chunk stored holds, in the order written: text, or a part."""
    rows = s._db.execute("SELECT kind, body FROM message_chunks ORDER BY pk")
    return [
        (body if isinstance(body, str) else body.decode("utf-8", "surrogatepass")) if kind in ("text", "thought")
        else json.loads(body)
        for kind, body in rows
    ]  # fmt: skip


def test_streamed_chunks_are_written_once_and_kept_when_the_message_finishes(store: HistoryStore) -> None:
    cid = store.new_conversation(CONFIG, "claude")
    tool = {"type": "tool", "id": "t1", "title": "Read x.py", "kind": "read", "status": "pending",
            "input": "", "output": "", "locations": [], "diffs": []}  # fmt: skip
    done_tool = {**tool, "status": "completed", "output": "42"}
    plan = {"type": "plan", "entries": [{"content": "look", "priority": "high", "status": "pending"}]}
    with Writer(store, interval=60) as writer:
        writer.update(cid, message("a1", done=False))  # the reply begins, no parts yet
        writer.append(cid, "a1", [(0, "thought", "pondering ")])
        writer.flush()
        writer.append(cid, "a1", [(0, "thought", "more \ud800"), (1, "tool", tool), (2, "text", "Hello ")])
        writer.append(cid, "a1", [(3, "plan", plan)])
        writer.flush()
        writer.append(cid, "a1", [(1, "tool", done_tool), (2, "text", "zebra world")])
        writer.flush()
        parts = [{"type": "thought", "text": "pondering more \ud800"}, done_tool,
                 {"type": "text", "text": "Hello zebra world"}, plan]  # fmt: skip
        assert store.get(cid)["messages"] == [{**message("a1", done=False), "parts": parts}]  # type: ignore[index]
        assert store.search("zebra") == []  # not searchable while it streams
        # Each flush wrote what came since, never the message again.
        assert chunk_bodies(store) == ["pondering ", "more \ud800", tool, "Hello ", plan, done_tool, "zebra world"]
        finished = {**message("a1", done=True, stopReason="end_turn"), "parts": parts}
        writer.finish(cid, finished, {0: 0, 2: 0})  # both text parts were streamed from nothing
        writer.flush()
    assert store.get(cid)["messages"] == [finished]  # type: ignore[index]
    assert [r["messageId"] for r in store.search("zebra pondering")] == ["a1"]
    assert chunk_bodies(store) == ["pondering ", "more \ud800", "Hello ", "zebra world"]  # the text stays where it is
    (row_parts,) = store._db.execute("SELECT parts FROM messages").fetchone()
    assert "pondering" not in row_parts and "zebra" not in row_parts and '"status":"completed"' in row_parts
    store.put_messages(cid, [message("a1", "rewritten whole")])  # a whole version replaces it all
    assert store.get(cid)["messages"] == [message("a1", "rewritten whole")]  # type: ignore[index]
    assert chunk_bodies(store) == []


def test_a_finished_version_must_end_with_the_streamed_text(store: HistoryStore) -> None:
    cid = store.new_conversation(CONFIG, "claude")
    with Writer(store, interval=60) as writer:
        for streamed in ({1: 0}, {0: 4}, {0: -1}):
            with pytest.raises(ValueError):
                writer.finish(cid, message("a1", "abc"), streamed)
    assert store.get(cid)["messages"] == []  # type: ignore[index]


def test_chunks_held_through_a_lock_are_written_in_order_once(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.db", busy_timeout=0.05) as s:
        cid = s.new_conversation(CONFIG, "claude")
        writer = Writer(s, interval=60)
        writer.update(cid, message("a1", done=False))
        writer.append(cid, "a1", [(0, "text", "one ")])
        holder = sqlite3.connect(s.path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        for more in ("two ", "three"):
            with pytest.raises(HistoryUnavailable, match="locked"):
                writer.flush()
            writer.append(cid, "a1", [(0, "text", more)])
        holder.rollback()
        writer.flush()
        assert s.get(cid)["messages"] == [message("a1", "one two three", done=False)]  # type: ignore[index]
        assert chunk_bodies(s) == ["one ", "two ", "three"]
        writer.append(cid, "a1", [(0, "text", "!")])
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(HistoryUnavailable, match="locked"):
            writer.flush()
        writer.finish(cid, message("a1", "one two three!"), {0: 0})
        holder.rollback()
        writer.flush()
        assert s.get(cid)["messages"] == [message("a1", "one two three!")]  # type: ignore[index]
        assert [r["messageId"] for r in s.search("three")] == ["a1"]
        writer.close()
        holder.close()
        assert s.forget(cid)
        assert chunk_bodies(s) == []  # they went with their message


def test_search_finds_the_first_search_max_characters_of_a_message(store: HistoryStore) -> None:
    cid = store.new_conversation(CONFIG, "claude")
    text = "early " + "x" * SEARCH_MAX + " lateword"
    store.put_messages(cid, [message("m1", text)])
    assert [r["messageId"] for r in store.search("early")] == ["m1"]
    assert store.search("lateword") == []
    assert store.get(cid)["messages"][0]["parts"][0]["text"] == text  # type: ignore[index]


def test_the_writer_flushes_a_streaming_message_within_the_interval(store: HistoryStore) -> None:
    cid = store.new_conversation(CONFIG, "claude")
    _, written, event = commits_of(store)
    with Writer(store, interval=0.2) as writer:
        started = time.monotonic()
        writer.update(cid, message("a1", "partial", done=False))
        assert event.wait(5)
        assert 0.15 <= written[0] - started < 1.0
        assert store.get(cid)["messages"][0]["parts"][0]["text"] == "partial"  # type: ignore[index]


def test_the_writer_writes_a_finished_message_at_once(store: HistoryStore) -> None:
    cid = store.new_conversation(CONFIG, "claude")
    _, written, event = commits_of(store)
    with Writer(store, interval=60) as writer:
        started = time.monotonic()
        writer.update(cid, message("a1", "done now", stopReason="end_turn"))
        assert event.wait(5)
        assert written[0] - started < 1.0  # not an interval of 60 s later
        assert store.get(cid)["messages"][0]["stopReason"] == "end_turn"  # type: ignore[index]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own priority is Linux's")
def test_the_writer_thread_runs_at_a_lower_priority_than_the_deck(store: HistoryStore) -> None:
    """Its writes and full-text indexing yield the CPU to the deck's loop on a busy machine."""
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    cid = store.new_conversation(CONFIG, "claude")
    _, _written, event = commits_of(store)
    with Writer(store, interval=60) as writer:
        writer.update(cid, message("a1", "done now", stopReason="end_turn"))
        assert event.wait(5)  # written by the writer's thread: it has lowered its priority first
        tid = writer._thread.native_id
        assert tid is not None and os.getpriority(os.PRIO_PROCESS, tid) == min(19, mine + WRITER_NICENESS)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine  # the deck's own is unchanged


def test_the_writer_close_flushes_then_refuses_more(store: HistoryStore) -> None:
    writer = Writer(store, interval=60)
    cid = writer.new_conversation(CONFIG, "claude")
    gone = store.new_conversation(CONFIG, "claude")
    writer.update(cid, message("a1", "last words", done=False))
    writer.update(gone, message("g1", "for a forgotten conversation", done=False))
    store.forget(gone)
    writer.close()
    assert not writer._thread.is_alive()
    got = store.get(cid)
    assert got is not None and got["messages"] == [message("a1", "last words", done=False)]
    assert store.get(gone) is None
    with pytest.raises(RuntimeError, match="closed"):
        writer.update(cid, message("a2", "too late"))
    writer.close()  # twice is fine


STREAM_THEN_DIE = """
import sys, time
from deck.plugins.history.store import HistoryStore, Writer
writer = Writer(HistoryStore(sys.argv[1]), interval=float(sys.argv[2]))
cid = writer.new_conversation("/c/deck.toml", "claude")
def reply(mid, chunks, done):
    return {"id": mid, "role": "agent", "parts": [{"type": "text", "text": "".join(chunks)}], "done": done}
for turn in range(4):
    writer.update(cid, {"id": f"u{turn}", "role": "user", "parts": [{"type": "text", "text": "go"}], "done": True})
    chunks = []
    for i in range(100):
        chunks.append(f"{i} ")
        writer.update(cid, reply(f"r{turn}", chunks, False))
    writer.update(cid, {**reply(f"r{turn}", chunks, True), "stopReason": "end_turn"})
print("conversation", cid, flush=True)
chunks = []
appended = sys.argv[3] == "chunks"
writer.update(cid, reply("live", chunks, False))
while True:  # an agent streaming an answer, one timestamped chunk every 2 ms
    chunks.append(f"{time.time():.3f} ")
    if appended:
        writer.append(cid, "live", [(0, "text", chunks[-1])])
    else:
        writer.update(cid, reply("live", chunks, False))
    if len(chunks) % 50 == 0:
        print("tick", time.time(), flush=True)
    time.sleep(0.002)
"""


@pytest.mark.parametrize("live", ["whole", "chunks"])
def test_kill_9_mid_answer_loses_at_most_the_last_interval(tmp_path: Path, live: str) -> None:
    path = tmp_path / "h.db"
    interval = 0.25
    child = subprocess.Popen(
        [sys.executable, "-c", STREAM_THEN_DIE, str(path), str(interval), live], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout
        cid = child.stdout.readline().split()[1]
        streaming_since = None
        for line in child.stdout:
            at = float(line.split()[1])
            streaming_since = streaming_since or at
            if at - streaming_since >= 1.2:  # several intervals of streaming
                break
        killed_at = time.time()
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    with HistoryStore(path) as s:
        assert s._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        got = s.get(cid)
    assert got is not None
    ids = [m["id"] for m in got["messages"]]
    assert ids == [x for turn in range(4) for x in (f"u{turn}", f"r{turn}")] + ["live"]  # none lost, none twice
    finished = [m for m in got["messages"] if m["id"].startswith("r")]
    assert all(m["done"] and m["parts"][0]["text"] == "".join(f"{i} " for i in range(100)) for m in finished)
    live = got["messages"][-1]
    assert live["done"] is False
    newest_stored = float(live["parts"][0]["text"].split()[-1])
    assert killed_at - newest_stored < 1.0


def test_a_limit_above_what_sqlite_counts_is_all_of_them(store: HistoryStore) -> None:
    cid = store.new_conversation(CONFIG, "claude")
    store.put_messages(cid, [message("m1", "hello world")])
    assert [row["id"] for row in store.list(CONFIG, limit=10**20)] == [cid]
    assert [hit["messageId"] for hit in store.search("hello", limit=10**20)] == ["m1"]


def test_a_lone_surrogate_in_a_title_is_stored_replaced_and_the_writer_goes_on(store: HistoryStore) -> None:
    """An agent's title (session_info_update) or a first message may hold a lone surrogate: UTF-8
    cannot, so it is stored as "?", and the messages around it are written all the same."""
    with Writer(store, interval=0.01) as writer:
        cid = writer.new_conversation(CONFIG, "claude", None, "first \ud800 words")
        writer.update(cid, message("u1", "first \ud800 words", role="user"))
        writer.set_title(cid, "evil \udfff title")
        writer.update(cid, message("a1", "after the title"))
        deadline = time.monotonic() + 10
        while len((store.get(cid) or {}).get("messages", [])) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # written by the writer's own thread, which a bad title used to end
    stored = store.get(cid)
    assert stored is not None and stored["title"] == "evil ? title"
    assert [m["id"] for m in stored["messages"]] == ["u1", "a1"]
    store.set_title(cid, "again \ud800")
    assert store.get(cid)["title"] == "again ?"  # type: ignore[index]
    other = store.new_conversation(CONFIG, "claude", "s-\ud800", "t \ud800")
    assert store.get(other)["title"] == "t ?"  # type: ignore[index]
