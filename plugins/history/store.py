"""The history database: conversations and their messages in SQLite, full-text search, a batching writer.

One file, `$XDG_STATE_HOME/deck/history.db` (folder 0700, file 0600), in WAL mode so that
two decks can use it at once and a killed deck never leaves it corrupt. `PRAGMA user_version`
is the schema version and `MIGRATIONS` the way up to it. Whatever makes the file unusable —
corrupt, not deck's, read-only, locked, written by a newer deck — raises `HistoryUnavailable`
before anything is written: such a file is never changed.

Messages are kept whole in their wire form (the dicts of `message:updated`), so that a stored
conversation reads back exactly as it was shown; a few fields are copied into columns for
queries, and the text of finished messages (text and thought parts, tool titles; the first
SEARCH_MAX characters) into an FTS5 index. A streamed message is a row plus the text appended
to its parts since (`message_chunks`): each flush writes only the new text, never the whole
message again; when it finishes, its row takes the finished version without the streamed
text, which stays in its chunks, and its text is indexed, once.

Everything here is synchronous and thread-safe: deck calls it from a worker thread, and the
`Writer` turns a stream of message versions and chunks into one transaction a second.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import logging
import os
import re
import sqlite3
import stat
import sys
import threading
import time
import unicodedata
import urllib.parse
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = [
    "APPLICATION_ID",
    "FLUSH_INTERVAL",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "HistoryStore",
    "HistoryUnavailable",
    "Writer",
    "default_path",
    "fts_query",
]

log = logging.getLogger(__name__)

#: `PRAGMA application_id`: "deck" in ASCII, so that another program's SQLite file is never taken for ours.
APPLICATION_ID = 0x6465636B
#: How long an operation waits for another deck's write lock before the database counts as locked.
BUSY_TIMEOUT = 2.0
#: The writer's longest delay between a message changing and that change being on disk.
FLUSH_INTERVAL = 1.0
#: How many words a search snippet shows around the matches.
SNIPPET_WORDS = 16
#: The longest message text whose snippet FTS5 makes: its snippet() weighs each match against every
#: other, so a word found 100,000 times in one pasted log would take it minutes. A longer message's
#: snippet is the words around its first match, found here in one pass (`_snippet`).
SNIPPET_DIRECT = 2000
#: The shortest prefix a search may end with `*` (the index holds 3-letter prefixes).
MIN_PREFIX = 3
#: How much of a message's text search finds: its first 1 Mi characters. Indexing a message
#: costs about six times its size in memory at once; a longer one is kept whole all the same.
SEARCH_MAX = 1 << 20

Conversation = dict[str, Any]
Message = dict[str, Any]


class HistoryUnavailable(Exception):
    """The history database cannot be used; `reason` says why, in one line that names the file."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def default_path() -> Path:
    """`$XDG_STATE_HOME/deck/history.db` (a relative XDG_STATE_HOME is ignored, as the XDG spec says)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "deck" / "history.db"


# -- schema -----------------------------------------------------------------------------------------

_V1 = (
    """CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        config_path TEXT NOT NULL,
        agent TEXT NOT NULL,
        session_id TEXT,
        title TEXT,
        created_at INTEGER NOT NULL,  -- ms since the epoch
        updated_at INTEGER NOT NULL
    )""",
    "CREATE INDEX conversations_by_agent ON conversations (config_path, agent, updated_at, created_at)",
    "CREATE INDEX conversations_by_time ON conversations (updated_at, created_at)",
    """CREATE TABLE messages (
        pk INTEGER PRIMARY KEY,  -- explicit, so that VACUUM keeps the full-text index's row ids
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        id TEXT NOT NULL,
        seq INTEGER NOT NULL,  -- order in the conversation: when the message was first stored
        role TEXT NOT NULL,
        created_at TEXT,  -- the wire createdAt
        done INTEGER NOT NULL,
        stop_reason TEXT,
        error TEXT,
        code TEXT,
        parts TEXT,  -- JSON; NULL when the message had no parts key
        data TEXT NOT NULL,  -- JSON of the whole wire message, parts as a null placeholder
        UNIQUE (conversation_id, id)
    )""",
    "CREATE INDEX messages_in_order ON messages (conversation_id, seq)",
    f"PRAGMA application_id = {APPLICATION_ID}",
)

_V2_FTS = (
    "ALTER TABLE messages ADD COLUMN text TEXT NOT NULL DEFAULT ''",  # what search finds
    "ALTER TABLE messages ADD COLUMN scope TEXT NOT NULL DEFAULT ''",  # tokens naming agent and config
    """CREATE VIRTUAL TABLE messages_fts USING fts5 (
        text, scope, content = 'messages', content_rowid = 'pk',
        tokenize = 'unicode61 remove_diacritics 2', prefix = '3'  -- "con*" without a merge of every con… word
    )""",
)
_V2_TRIGGERS = (
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts (rowid, text, scope) VALUES (new.pk, new.text, new.scope);
    END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, text, scope) VALUES ('delete', old.pk, old.text, old.scope);
    END""",
    """CREATE TRIGGER messages_fts_update AFTER UPDATE OF text, scope ON messages
    WHEN old.text IS NOT new.text OR old.scope IS NOT new.scope BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, text, scope) VALUES ('delete', old.pk, old.text, old.scope);
        INSERT INTO messages_fts (rowid, text, scope) VALUES (new.pk, new.text, new.scope);
    END""",
)


def _v1(db: sqlite3.Connection) -> None:
    """Conversations and messages."""
    for statement in _V1:
        db.execute(statement)


def _v2(db: sqlite3.Connection) -> None:
    """Full-text search: each message's searchable text, indexed by FTS5 and kept in step by triggers."""
    for statement in _V2_FTS:
        db.execute(statement)
    rows = db.execute(
        "SELECT m.pk, m.parts, c.agent, c.config_path"
        " FROM messages AS m JOIN conversations AS c ON c.id = m.conversation_id"
    ).fetchall()
    db.executemany(
        "UPDATE messages SET text = ?, scope = ? WHERE pk = ?",
        ((_searchable(json.loads(p) if p else None), _scope(agent, config), pk) for pk, p, agent, config in rows),
    )
    db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")
    for statement in _V2_TRIGGERS:
        db.execute(statement)


_V3 = (
    """CREATE TABLE message_chunks (
        pk INTEGER PRIMARY KEY,  -- the order they were written in
        message_pk INTEGER NOT NULL REFERENCES messages (pk) ON DELETE CASCADE,
        part INTEGER NOT NULL,  -- the index of the part in the message
        kind TEXT NOT NULL,  -- text, thought: the text is appended to the part; tool, plan: the part is replaced
        body NOT NULL  -- that text (TEXT, or a BLOB of UTF-8 that may hold lone surrogates), or that part's JSON
    )""",
    "CREATE INDEX message_chunks_by_message ON message_chunks (message_pk, pk)",
    "UPDATE messages SET text = '' WHERE done = 0",  # the triggers take them out of the index
)


def _v3(db: sqlite3.Connection) -> None:
    """Streaming messages: chunks appended instead of whole rewrites, and only finished messages searched."""
    for statement in _V3:
        db.execute(statement)


_V4 = (
    "ALTER TABLE conversations ADD COLUMN usage TEXT",  # JSON: what the agent's session last reported
    """CREATE TABLE spending (
        day TEXT NOT NULL,  -- the local calendar's, YYYY-MM-DD
        config_path TEXT NOT NULL,
        agent TEXT NOT NULL,
        currency TEXT NOT NULL,
        amount REAL NOT NULL,
        PRIMARY KEY (day, config_path, agent, currency)
    )""",
)


def _v4(db: sqlite3.Connection) -> None:
    """Usage: each conversation's last usage report, and what the agents spent each day."""
    for statement in _V4:
        db.execute(statement)


def _v5(db: sqlite3.Connection) -> None:
    """The user's choices for each conversation (its config options and mode), set again on resume."""
    db.execute("ALTER TABLE conversations ADD COLUMN choices TEXT")  # JSON: {"options": {id: value}, "mode": id}


def _v6(db: sqlite3.Connection) -> None:
    """Each agent's current conversation per config, the one a start comes back to (NULL: a fresh one);
    a conversation kept apart (a one-shot `deck send`'s) never becomes it."""
    db.execute(
        """CREATE TABLE current_conversations (
            config_path TEXT NOT NULL,
            agent TEXT NOT NULL,
            conversation_id TEXT,
            PRIMARY KEY (config_path, agent)
        )"""
    )


def _v7(db: sqlite3.Connection) -> None:
    """Each conversation's subagents (the child sessions its messages name), restored with it."""
    db.execute("ALTER TABLE conversations ADD COLUMN children TEXT")  # JSON: [{session, parent, title, state…}]


#: Migration n (from 1) takes a database from version n - 1 to n, inside the opening transaction.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7]
SCHEMA_VERSION = len(MIGRATIONS)


# -- the store ---------------------------------------------------------------------------------------

_NEW_CONVERSATION_COLUMNS = "id, config_path, agent, session_id, title, created_at, updated_at"
_CONVERSATION_COLUMNS = f"{_NEW_CONVERSATION_COLUMNS}, usage, choices, children"

_UPSERT = """
    INSERT INTO messages (
        conversation_id, id, seq, role, created_at, done, stop_reason, error, code, parts, data, text, scope
    ) VALUES (
        :conversation, :id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE conversation_id = :conversation),
        :role, :created_at, :done, :stop_reason, :error, :code, :parts, :data, :text, :scope
    )
    ON CONFLICT (conversation_id, id) DO UPDATE SET
        role = excluded.role, created_at = excluded.created_at, done = excluded.done,
        stop_reason = excluded.stop_reason, error = excluded.error, code = excluded.code,
        parts = excluded.parts, data = excluded.data, text = excluded.text
    WHERE data IS NOT excluded.data OR parts IS NOT excluded.parts
"""

# Newest first: FTS5 walks its index backwards by row id and stops at the limit, so a word found
# in half the history costs no more than a rare one (ranking every match by relevance would).
# The agent and config filters are in the index too (the scope column), for the same reason;
# the SQL filters only confirm them.
_SEARCH = """
    SELECT m.conversation_id, c.agent, m.id, m.role,
        CASE WHEN length(m.text) <= ?1 THEN snippet(messages_fts, 0, ?2, ?3, '…', ?4) END,
        CASE WHEN length(m.text) > ?1 THEN m.text END,
        m.created_at
    FROM messages_fts
    JOIN messages AS m ON m.pk = messages_fts.rowid
    JOIN conversations AS c ON c.id = m.conversation_id
    WHERE messages_fts MATCH ?5 {filters}
    ORDER BY messages_fts.rowid DESC
    LIMIT ?
"""


#: config_path, agent, session_id, title, created_at (ms)
_NewConversation = tuple[str, str, str | None, str | None, int]
#: One change to a streaming message's part: (index, kind, text appended, or the tool/plan part that replaces it).
Chunk = tuple[int, str, str | dict[str, Any]]
#: The kinds of part whose chunks are text appended to them (the others replace the part).
TEXT_KINDS = frozenset({"text", "thought"})


#: A writer's change to one message: ("whole", message), ("chunks", [chunk, …]) or ("finish", (message, streamed)).
_Op = tuple[str, Any]


@dataclass
class _Changes:
    """What the writer holds of one message: its changes in order (a whole version makes the older ones moot)."""

    ops: list[_Op] = field(default_factory=list)

    def then(self, newer: _Changes) -> _Changes:
        """These changes followed by `newer`'s."""
        if newer.ops and newer.ops[0][0] == "whole":
            return newer
        return _Changes(self.ops + newer.ops)


@dataclass
class _Pending:
    """Changes the writer holds: new conversations, their latest title/session, each message's changes."""

    created: dict[str, _NewConversation] = field(default_factory=dict)
    meta: dict[str, dict[str, str | ChildrenLater | None]] = field(default_factory=dict)
    messages: dict[str, dict[str, _Changes]] = field(default_factory=dict)
    #: (day, config_path, agent, currency) → amount spent, added to what the table holds.
    spent: dict[tuple[str, str, str, str], float] = field(default_factory=dict)
    #: (config_path, agent) → its current conversation (None: a fresh one).
    current: dict[tuple[str, str], str | None] = field(default_factory=dict)
    #: (config_path, agent) whose next start begins a fresh conversation unless one was made current.
    fresh: set[tuple[str, str]] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.created or self.meta or self.messages or self.spent or self.current or self.fresh)

    def put_back(self, newer: _Pending) -> _Pending:
        """This (failed) batch with `newer`'s changes on top: nothing lost, no version goes back in time."""
        merged = _Pending(dict(self.created), {k: dict(v) for k, v in self.meta.items()}, {})
        merged.created.update(newer.created)
        merged.current = {**self.current, **newer.current}
        merged.spent = dict(self.spent)
        for key, amount in newer.spent.items():
            merged.spent[key] = merged.spent.get(key, 0.0) + amount
        for cid, fields in newer.meta.items():
            merged.meta.setdefault(cid, {}).update(fields)
        for source in (self.messages, newer.messages):  # first-seen order is the messages' order
            for cid, messages in source.items():
                into = merged.messages.setdefault(cid, {})
                for mid, changes in messages.items():
                    older = into.get(mid)
                    into[mid] = changes if older is None else older.then(changes)
        return merged


class HistoryStore:
    """The history database. Opening checks the file and migrates it; `HistoryUnavailable` if unusable.

    `path` defaults to `default_path()`, whose folder is made (and kept) 0700; another path's
    folder is created 0700 when missing and otherwise left as it is. `clock` gives the
    seconds since the epoch, for the conversations' times and `prune`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        busy_timeout: float = BUSY_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.clock = clock
        # Two connections, each used by one thread at a time: with WAL, a search or a `latest()`
        # reads its snapshot while the writer's transaction (perhaps waiting for another deck) runs.
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._clock_lock = threading.Lock()  # apart, so that the writer's ids never wait for a write
        self._last_ms = 0
        self._closed = False
        self._db = _open(self.path, busy_timeout, private_folder=self.path == default_path())
        try:
            self._reader = _connect(self.path, "rw", busy_timeout)
            self._reader.execute("PRAGMA query_only = ON")
        except sqlite3.Error as e:
            self._db.close()
            raise _unavailable(self.path, e) from e

    def close(self) -> None:
        with self._write_lock, self._read_lock:
            self._closed = True
            self._db.close()
            self._reader.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- conversations ------------------------------------------------------------------------------

    def new_conversation(
        self, config_path: str, agent: str, session_id: str | None = None, title: str | None = None
    ) -> str:
        """A fresh conversation of `agent` under `config_path` (now its latest); returns its id."""
        conversation_id = str(uuid.uuid4())
        with self._write() as db:
            _insert_conversation(db, conversation_id, (config_path, agent, session_id, title, self._now()))
        return conversation_id

    def latest(self, config_path: str, agent: str, tail: int | None = None) -> Conversation | None:
        """The agent's most recently updated conversation under `config_path`, with its messages
        (with `tail`, only its last ones that hold at most that many bytes: see `_with_messages`)."""
        with self._read() as db:
            row = db.execute(
                f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE config_path = ? AND agent = ?"
                " ORDER BY updated_at DESC, created_at DESC LIMIT 1",
                (config_path, agent),
            ).fetchone()
            return _with_messages(db, row, tail) if row else None

    def current(self, config_path: str, agent: str, tail: int | None = None) -> tuple[bool, Conversation | None]:
        """The conversation a start of `agent` under `config_path` comes back to: (True, it) when one
        was made current, (True, None) when a fresh one was, (False, its latest) when neither was said
        (a history older than the record, or a current one deleted since)."""
        with self._read() as db:
            row = db.execute(
                "SELECT conversation_id FROM current_conversations WHERE config_path = ? AND agent = ?",
                (config_path, agent),
            ).fetchone()
        if row is not None and row[0] is None:
            return True, None
        found = self.get(row[0], tail) if row is not None else None
        return (True, found) if found is not None else (False, self.latest(config_path, agent, tail))

    def get(self, conversation_id: str, tail: int | None = None) -> Conversation | None:
        """One conversation with its messages (`tail` as for `latest`), or None."""
        with self._read() as db:
            row = db.execute(
                f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            return _with_messages(db, row, tail) if row else None

    def ids_starting(self, prefix: str, limit: int = 50) -> builtins.list[str]:
        """The ids that start with `prefix`, in order, at most `limit` of them (a range of the index)."""
        with self._read() as db:
            rows = db.execute(
                "SELECT id FROM conversations WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                (prefix, prefix + "\U0010ffff", _limit(limit)),
            ).fetchall()
        return [row[0] for row in rows]

    def list(
        self, config_path: str | None = None, agent: str | None = None, limit: int = 50
    ) -> builtins.list[Conversation]:
        """Conversations newest first, `messages` being their message count."""
        where, args = _filters(("config_path", config_path), ("agent", agent), prefix="WHERE")
        with self._read() as db:
            rows = db.execute(
                f"SELECT {_CONVERSATION_COLUMNS}, (SELECT COUNT(*) FROM messages WHERE conversation_id = c.id)"
                f" FROM conversations AS c {where} ORDER BY updated_at DESC, created_at DESC LIMIT ?",
                (*args, _limit(limit)),
            ).fetchall()
        return [{**_conversation(row[:10]), "messages": row[10]} for row in rows]

    def set_session(self, conversation_id: str, session_id: str | None) -> None:
        """The agent's ACP session id for this conversation (what a later start resumes)."""
        self._set(conversation_id, "session_id", session_id)

    def set_title(self, conversation_id: str, title: str | None) -> None:
        self._set(conversation_id, "title", title)

    def set_choices(self, conversation_id: str, choices: dict[str, Any]) -> None:
        """The user's choices for the conversation (`{options: {id: value}, mode}`), to set again on resume."""
        self._set(conversation_id, "choices", _dumps(choices))

    def spending(self, config_path: str | None = None, day: str | None = None) -> builtins.list[dict[str, Any]]:
        """What was spent, per day, agent and currency, oldest day first: `{day, agent, currency, amount}`."""
        where, args = _filters(("config_path", config_path), ("day", day), prefix="WHERE")
        with self._read() as db:
            rows = db.execute(
                f"SELECT day, agent, currency, SUM(amount) FROM spending {where}"
                " GROUP BY day, agent, currency ORDER BY day, agent, currency",
                args,
            ).fetchall()
        return [{"day": d, "agent": a, "currency": c, "amount": amount} for d, a, c, amount in rows]

    def forget(self, conversation_id: str) -> bool:
        """Delete a conversation and its messages; False when there was no such conversation."""
        with self._write() as db:
            return db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,)).rowcount > 0

    def prune(self, config_path: str, older_than_seconds: float) -> int:
        """Delete the conversations of `config_path` not updated for `older_than_seconds` (another
        config's are kept as its own `keep` says); returns how many."""
        if not older_than_seconds >= 0:
            raise ValueError("older_than_seconds must be a number ≥ 0")
        cutoff = int((self.clock() - older_than_seconds) * 1000)
        with self._write() as db:
            return db.execute(
                "DELETE FROM conversations WHERE config_path = ? AND updated_at < ?", (config_path, cutoff)
            ).rowcount

    # -- messages -----------------------------------------------------------------------------------

    def put_messages(self, conversation_id: str, messages: Iterable[Message]) -> None:
        """Store messages in one transaction, each replacing the stored version with its id.

        A new id is appended to the conversation; a known one (a streaming message that grew,
        then finished) is rewritten in place. KeyError for an unknown conversation.
        """
        rows: list[_Step] = [("whole", _message_row(m)) for m in messages]
        with self._write() as db:
            if not _put(db, conversation_id, rows, self._now()):
                raise KeyError(conversation_id)

    def search(
        self,
        query: str,
        agent: str | None = None,
        config_path: str | None = None,
        limit: int = 20,
        marks: tuple[str, str] = ("**", "**"),
    ) -> builtins.list[dict[str, Any]]:
        """Full-text search over every stored message, newest first.

        Each whitespace-separated word of `query` must appear (a trailing `*` makes it a prefix);
        FTS5's own syntax is taken literally, so no query can fail. `marks` surround the matches
        in the snippet. ValueError for an empty query.
        """
        terms = _terms(query)
        words = _expression(terms)
        if words is None:
            return []
        expression = f"text : ({words})"
        if agent is not None:
            expression += f' AND scope : "{_agent_token(agent)}"'
        if config_path is not None:
            expression += f' AND scope : "{_config_token(config_path)}"'
        filters, args = _filters(("c.agent", agent), ("c.config_path", config_path), prefix="AND")
        with self._read() as db:
            rows = db.execute(
                _SEARCH.format(filters=filters),
                (SNIPPET_DIRECT, *marks, SNIPPET_WORDS, expression, *args, _limit(limit)),
            ).fetchall()
        return [
            {
                "conversationId": c, "agent": a, "messageId": m, "role": r,
                "snippet": s if long is None else _snippet(long, terms, marks), "at": at,
            }
            for c, a, m, r, s, long, at in rows
        ]  # fmt: skip

    # -- internals ----------------------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        with self._read() as db:
            return int(db.execute("PRAGMA user_version").fetchone()[0])

    def _now(self) -> int:
        """Milliseconds since the epoch, never the same twice from one store (so "latest" is well defined)."""
        with self._clock_lock:
            self._last_ms = max(int(self.clock() * 1000), self._last_ms + 1)
            return self._last_ms

    def _set(self, conversation_id: str, column: str, value: str | None) -> None:
        with self._write() as db:
            cursor = db.execute(
                f"UPDATE conversations SET {column} = ?, updated_at = ? WHERE id = ?",
                (_clean(value), self._now(), conversation_id),
            )
            if cursor.rowcount == 0:
                raise KeyError(conversation_id)

    def _apply(self, pending: _Pending) -> None:
        """The writer's batch in one transaction; messages of a conversation deleted meanwhile are dropped."""
        rows: dict[str, builtins.list[_Step]] = {}
        for cid, messages in pending.messages.items():
            rows[cid] = []
            for mid, changes in messages.items():
                try:
                    rows[cid].extend(_steps(mid, changes.ops))
                except (ValueError, TypeError, RecursionError) as e:  # one bad message must not block the rest
                    log.warning("history: message %r not stored: %s", mid, e)
        with self._write() as db:
            for cid, created in pending.created.items():
                _insert_conversation(db, cid, created)
            for cid, fields in pending.meta.items():
                if not fields:  # touched: the agent's latest conversation now
                    db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (self._now(), cid))
                for column, value in fields.items():
                    if isinstance(value, ChildrenLater):
                        value = value.text()
                    db.execute(
                        f"UPDATE conversations SET {column} = ?, updated_at = ? WHERE id = ?",
                        (_clean(value), self._now(), cid),
                    )
            for cid, message_rows in rows.items():
                _put(db, cid, message_rows, self._now())
            db.executemany(
                "INSERT INTO spending (day, config_path, agent, currency, amount) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (day, config_path, agent, currency) DO UPDATE SET amount = amount + excluded.amount",
                [(*key, amount) for key, amount in pending.spent.items()],
            )
            db.executemany(
                "INSERT INTO current_conversations (config_path, agent, conversation_id) VALUES (?, ?, NULL)"
                " ON CONFLICT (config_path, agent) DO NOTHING",
                sorted(pending.fresh),
            )
            db.executemany(
                "INSERT INTO current_conversations (config_path, agent, conversation_id) VALUES (?, ?, ?)"
                " ON CONFLICT (config_path, agent) DO UPDATE SET conversation_id = excluded.conversation_id",
                [(*key, cid) for key, cid in pending.current.items()],
            )

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock, self._transaction(self._db, "BEGIN IMMEDIATE") as db:
            yield db

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._read_lock, self._transaction(self._reader, "BEGIN") as db:  # one snapshot for the whole read
            yield db

    @contextlib.contextmanager
    def _transaction(self, db: sqlite3.Connection, begin: str) -> Iterator[sqlite3.Connection]:
        if self._closed:
            raise HistoryUnavailable(f"{self.path}: the history store is closed")
        try:
            db.execute(begin)
            try:
                yield db
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except (sqlite3.ProgrammingError, sqlite3.InterfaceError):
            raise  # the caller's mistake (a value SQLite cannot store), not the database's
        except sqlite3.Error as e:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise _unavailable(self.path, e) from e


def _insert_conversation(db: sqlite3.Connection, cid: str, created: _NewConversation) -> None:
    config_path, agent, session_id, title, at = created
    db.execute(
        f"INSERT OR IGNORE INTO conversations ({_NEW_CONVERSATION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (cid, _clean(config_path), _clean(agent), _clean(session_id), _clean(title), at, at),
    )


#: One write to a message, ready for the database (built outside the write lock):
#: ("whole", row) replaces it and its chunks; ("chunks", (id, [(part, kind, body), …])) appends to it;
#: ("finish", (row, [part, …], message)) writes its finished row and keeps the text chunks of those parts.
_Step = tuple[str, Any]


def _steps(message_id: str, ops: Iterable[_Op]) -> Iterator[_Step]:
    """A writer's changes to one message → the writes they make (ValueError, TypeError for a bad one)."""
    for kind, value in ops:
        if kind == "whole":
            yield "whole", _message_row(value)
        elif kind == "chunks":
            yield "chunks", (_clean(message_id), [_chunk_row(chunk) for chunk in value])
        else:
            message, streamed = value
            yield "finish", (_message_row(message, streamed), sorted(streamed), message)


def _put(db: sqlite3.Connection, conversation_id: str, steps: Iterable[_Step], now: int) -> bool:
    """Write to messages in order; False (and nothing written) for an unknown conversation.

    A whole version replaces the chunks stored before it. Chunks for a message that is not
    stored (its conversation was forgotten and made again, say) have nothing to extend: dropped.
    """
    found = db.execute("SELECT agent, config_path FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
    if found is None:
        return False
    db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id))
    scope = _scope(*found)
    for kind, value in steps:
        if kind == "whole":
            db.execute(_UPSERT, {"conversation": conversation_id, "scope": scope, **value})
            db.execute(_DROP_CHUNKS, {"conversation": conversation_id, "id": value["id"]})
            continue
        row = value[0] if kind == "finish" else {"id": value[0]}
        stored = db.execute(_MESSAGE_PK, {"conversation": conversation_id, "id": row["id"]}).fetchone()
        if kind == "chunks":
            if stored is None:
                log.warning("history: chunks of message %r dropped: it is not stored", row["id"])
            else:
                db.executemany(_APPEND_CHUNK, ((stored[0], *chunk) for chunk in value[1]))
        elif stored is None:  # its streamed text was never stored: the message goes whole
            db.execute(_UPSERT, {"conversation": conversation_id, "scope": scope, **_message_row(value[2])})
        else:
            db.execute(_UPSERT, {"conversation": conversation_id, "scope": scope, **row})
            db.execute(_DROP_OTHER_CHUNKS, (stored[0], json.dumps(value[1])))
    return True


_MESSAGE_PK = "SELECT pk FROM messages WHERE conversation_id = :conversation AND id = :id"
_DROP_CHUNKS = f"DELETE FROM message_chunks WHERE message_pk = ({_MESSAGE_PK})"
_DROP_OTHER_CHUNKS = (  # of a finished message: all but the text of its streamed parts
    "DELETE FROM message_chunks WHERE message_pk = ?"
    " AND NOT (kind IN ('text', 'thought') AND part IN (SELECT value FROM json_each(?)))"
)
_APPEND_CHUNK = "INSERT INTO message_chunks (message_pk, part, kind, body) VALUES (?, ?, ?, ?)"


def _scope(agent: str, config_path: str) -> str:
    """The index tokens that let a search filter by agent and config inside FTS5 (letters and digits only)."""
    return f"{_agent_token(agent)} {_config_token(config_path)}"


def _agent_token(agent: str) -> str:
    return "a" + agent.encode("utf-8", "replace").hex()


def _config_token(config_path: str) -> str:
    return "c" + hashlib.sha256(config_path.encode("utf-8", "replace")).hexdigest()[:16]


# A stored message's size: its row's texts and its chunks (measured by SQLite: nothing is read into Python).
_SIZES = """
    SELECT m.seq, length(m.data) + COALESCE(length(m.parts), 0)
        + COALESCE((SELECT SUM(length(body)) FROM message_chunks WHERE message_pk = m.pk), 0)
    FROM messages AS m WHERE m.conversation_id = ? ORDER BY m.seq DESC
"""


def _with_messages(db: sqlite3.Connection, row: tuple[Any, ...], tail: int | None = None) -> Conversation:
    """The conversation of `row` with its messages. With `tail`, only its last messages that hold
    at most `tail` bytes: `cut` then counts those left out (`{messages, bytes}`), so that a start
    never reads a whole oversized conversation."""
    first, cut = 0, {"messages": 0, "bytes": 0}
    if tail is not None:
        first, cut = _tail_from(db, row[0], tail)
    rows = db.execute(
        "SELECT pk, parts, data FROM messages WHERE conversation_id = ? AND seq >= ? ORDER BY seq", (row[0], first)
    ).fetchall()
    messages = {pk: _message(parts, data) for pk, parts, data in rows}
    chunks: dict[int, list[tuple[int, str, str | bytes]]] = {}
    for pk, index, kind, body in db.execute(  # in the index's order: no sort of the bodies
        "SELECT message_pk, part, kind, body FROM message_chunks WHERE message_pk IN"
        " (SELECT pk FROM messages WHERE conversation_id = ? AND seq >= ?) ORDER BY message_pk, pk",
        (row[0], first),
    ):
        chunks.setdefault(pk, []).append((index, kind, body))
    for pk, found in chunks.items():
        _extend(messages[pk], found)
    out = {**_conversation(row), "messages": list(messages.values())}
    if cut["messages"]:
        out["cut"] = cut
    return out


def _tail_from(db: sqlite3.Connection, conversation_id: str, tail: int) -> tuple[int, dict[str, int]]:
    """The first `seq` of the conversation's last messages that hold at most `tail` bytes, and what is before it."""
    kept, first, cut = 0, 2**62, {"messages": 0, "bytes": 0}
    for seq, size in db.execute(_SIZES, (conversation_id,)):
        if cut["messages"] or kept + size > tail:
            cut["messages"] += 1
            cut["bytes"] += size
        else:
            kept += size
            first = seq
    return first, cut


def _extend(message: Message, chunks: Iterable[tuple[int, str, str | bytes]]) -> None:
    """Apply a message's stored chunks, in order: text appended to part `index`, or the part replaced.

    Each part's text is joined once at the end, however many chunks it took.
    """
    parts = message.get("parts")
    if not isinstance(parts, list):
        parts = message["parts"] = []
    texts: dict[int, list[str]] = {}  # position → the pieces of its text
    for index, kind, body in chunks:
        at = index if 0 <= index < len(parts) else len(parts)  # past the end: a part that started since
        if kind not in TEXT_KINDS:
            value = json.loads(body)
        else:
            value = body if isinstance(body, str) else bytes(body).decode("utf-8", "surrogatepass")
        old = parts[at] if at < len(parts) else None
        if kind not in TEXT_KINDS:
            part = value
            texts.pop(at, None)
        elif at in texts and isinstance(old, dict) and old.get("type") == kind:
            texts[at].append(value)
            continue
        elif isinstance(old, dict) and old.get("type") == kind and isinstance(old.get("text"), str):
            part, texts[at] = dict(old), [old["text"], value]
        else:
            part, texts[at] = {"type": kind, "text": ""}, [value]
        if at < len(parts):
            parts[at] = part
        else:
            parts.append(part)
    for at, pieces in texts.items():
        parts[at]["text"] = "".join(pieces)


def _conversation(row: tuple[Any, ...]) -> Conversation:
    cid, config_path, agent, session_id, title, created_at, updated_at, usage, choices, children = row
    return {
        "usage": _usage(usage),
        "choices": _usage(choices),  # a JSON object, or None
        "children": _children(children),
        "id": cid,
        "agent": agent,
        "configPath": config_path,
        "title": title,
        "sessionId": session_id,
        "createdAt": _iso(created_at),
        "updatedAt": _iso(updated_at),
    }


def _filters(*pairs: tuple[str, str | None], prefix: str) -> tuple[str, list[str]]:
    used = [(column, value) for column, value in pairs if value is not None]
    sql = " AND ".join(f"{column} = ?" for column, _ in used)
    return (f"{prefix} {sql}" if used else ""), [value for _, value in used]


#: The largest LIMIT SQLite takes (a 64-bit integer): any count above it is all of them.
_LIMIT_MAX = 2**63 - 1


def _usage(stored: str | None) -> dict[str, Any] | None:
    try:
        usage = json.loads(stored) if stored else None
    except ValueError:
        return None
    return usage if isinstance(usage, dict) else None


def _children(stored: str | None) -> list[dict[str, Any]]:
    try:
        children = json.loads(stored) if stored else []
    except ValueError:
        return []
    return [c for c in children if isinstance(c, dict)] if isinstance(children, list) else []


class ChildrenLater:
    """A conversation's subagents (its live registry: session id → a child with `to_dict()`), turned
    into the column's JSON when written: however many `subagent:changed` came, one dump per write."""

    __slots__ = ("children",)

    def __init__(self, children: dict[str, Any]) -> None:
        self.children = children

    def text(self) -> str:
        return _dumps([child.to_dict() for child in list(self.children.values())])


def _limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, not {limit!r}")
    return min(limit, _LIMIT_MAX)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- messages in and out -----------------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")
#: What FTS5's unicode61 tokenizer keeps as one token: runs of letters and digits.
_TOKEN = re.compile(r"[^\W_]+")


def _dumps(value: Any) -> str:
    """Compact JSON. A lone surrogate (an agent may send one as a JSON escape) stays escaped: UTF-8 cannot hold it."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(value, separators=(",", ":")) if _has_surrogate(text) else text


def _clean(value: Any) -> str | None:
    """A string column's value: None unless a string, and storable as UTF-8."""
    if not isinstance(value, str):
        return None
    return value.encode("utf-8", "replace").decode("utf-8") if _has_surrogate(value) else value


def _has_surrogate(text: str) -> bool:
    # isascii() reads a flag of the string: most text is never scanned (a scan takes ~10 ms a megabyte).
    return not text.isascii() and _SURROGATE.search(text) is not None


def _searchable(parts: Any, limit: int = SEARCH_MAX) -> str:
    """What search finds in a message: its text and thought parts and its tools' titles, `limit` characters at most."""
    found: list[str] = []
    room = limit
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        value = part.get("text") if kind in TEXT_KINDS else part.get("title") if kind == "tool" else None
        if isinstance(value, str) and value:
            found.append(value[:room])  # a slice, never a copy of the whole text
            room -= len(found[-1]) + 1
            if room <= 0:
                break
    return _clean("\n".join(found)) or ""


def _message_row(message: Message, streamed: dict[int, int] | None = None) -> dict[str, Any]:
    """A wire message → the messages row that gives it back exactly (ValueError without a string id).

    `streamed` (a finished message whose text is in chunks) maps a part's index to how much of
    its text the row keeps: the rest is in the part's chunks, so the row leaves it out.
    """
    if not isinstance(message, dict) or not isinstance(message.get("id"), str) or not message["id"]:
        raise ValueError("a message must be a dict with a non-empty string id")
    has_parts = "parts" in message
    parts = message.get("parts")
    if streamed and isinstance(parts, list):
        parts = list(parts)
        for index, kept in streamed.items():
            parts[index] = {**parts[index], "text": parts[index]["text"][:kept]}
    return {
        "id": _clean(message["id"]),
        "role": _clean(message.get("role")) or "",
        "created_at": _clean(message.get("createdAt")),
        "done": 1 if message.get("done", True) else 0,
        "stop_reason": _clean(message.get("stopReason")),
        "error": _clean(message.get("error")),
        "code": _clean(message.get("code")),
        "parts": _dumps(parts) if has_parts else None,
        # The placeholder keeps `parts` at its place among the keys when the message is read back.
        "data": _dumps({**message, "parts": None} if has_parts else message),
        # Only a finished message is searched: one still streaming is indexed once, when it ends.
        "text": _searchable(message.get("parts")) if message.get("done", True) else "",
    }


def _chunk_row(chunk: Chunk) -> tuple[int, str, str | bytes]:
    """A chunk → its message_chunks columns (part, kind, body); ValueError when it is not one.

    Text is stored as it is, never encoded again: as TEXT when ASCII (SQLite takes the string's
    own bytes), else as UTF-8 bytes that keep a lone surrogate as the agent sent it.
    """
    index, kind, value = chunk
    if isinstance(index, bool) or not isinstance(index, int) or index < 0 or not isinstance(kind, str):
        raise ValueError(f"not a chunk: {str(chunk)[:80]}")
    if kind in TEXT_KINDS:
        if not isinstance(value, str):
            raise ValueError(f"a {kind} chunk must be text")
        return index, kind, value if value.isascii() else value.encode("utf-8", "surrogatepass")
    if not isinstance(value, dict):
        raise ValueError(f"a {kind} chunk must be a part")
    return index, _clean(kind) or "", _dumps(value)


def _message(parts: str | None, data: str) -> Message:
    message: Message = json.loads(data)
    if parts is not None:
        message["parts"] = json.loads(parts)
    return message


def fts_query(query: str) -> str | None:
    """A user's words → an FTS5 expression matching messages that contain them all, or None if no word.

    Each word is quoted, so FTS5 syntax in it (quotes, `*`, `-`, `:`, parentheses, AND, OR, NEAR)
    is only text; a trailing `*` after at least MIN_PREFIX letters stays a prefix search (a
    shorter prefix would merge the index entries of thousands of words: it is a whole word).
    ValueError when the query is empty.
    """
    return _expression(_terms(query))


#: A word of a query: its text, and whether it ends with a prefix (`word*`).
_Term = tuple[str, bool]


def _terms(query: str) -> list[_Term]:
    """The words of a query (ValueError when it is empty), `*` taken off those that end with a prefix."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError("the search query is empty")
    # FTS5 reads its query as a C string (a NUL ends it) and SQLite as UTF-8 (no lone surrogates).
    words = (_clean(query) or "").replace("\x00", " ").split()
    terms = []
    for word in words:
        body = word.rstrip("*")
        if body:
            tokens = _TOKEN.findall(body)
            terms.append((body, body != word and bool(tokens) and len(tokens[-1]) >= MIN_PREFIX))
    return terms


def _expression(terms: list[_Term]) -> str | None:
    quoted = ['"' + body.replace('"', '""') + '"' + ("*" if prefix else "") for body, prefix in terms]
    return " ".join(quoted) or None


def _fold(token: str) -> str:
    """A token as the index compares it (unicode61, remove_diacritics 2): its case and accents dropped."""
    if token.isascii():
        return token.lower()
    decomposed = unicodedata.normalize("NFKD", token)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


#: How far back from a match found by a plain search a snippet starts reading words (characters).
SNIPPET_BACK = 1024
#: The most words a snippet reads looking for a match the plain search did not find (one folded
#: only: "cafe" for "café"); past them it shows the message's start.
SNIPPET_SCAN = 20_000


def _snippet(text: str, terms: list[_Term], marks: tuple[str, str], size: int = SNIPPET_WORDS) -> str:
    """A long message's snippet, as FTS5 would show it: `size` words from a little before its first
    match (from its start when that match comes early), the words of the query marked, `…` where
    words are left out.

    The match is looked for first by a plain search of the text (case left aside, in C): the
    words are then read from a little before it. One the plain search misses (found by the
    index's accent folding) is looked for word by word, over the first SNIPPET_SCAN words."""
    exact: set[str] = set()
    prefixes: list[str] = []
    for body, prefix in terms:
        words = [_fold(t) for t in _TOKEN.findall(body)]
        if prefix and words:
            prefixes.append(words.pop())
        exact.update(words)
    starts = tuple(prefixes)

    def matches(token: str) -> bool:
        folded = _fold(token)
        return folded in exact or (bool(starts) and folded.startswith(starts))

    start = _near_a_match(text, exact, starts)
    before: deque[re.Match[str]] = deque(maxlen=size)  # the last words read, the match last
    tokens = _TOKEN.finditer(text, start)
    window: list[re.Match[str]] = []
    first = 0  # the index of the first word shown (counted from the message's start when 0)
    for index, token in enumerate(tokens):
        before.append(token)
        if matches(token.group()):
            late = start > 0 or index >= size - size // 4  # an early match: from the start
            first = max(1, index - size // 4) if late else 0
            window = list(before)[-(min(index, size // 4) + 1) :] if late else list(before)
            break
        if index >= SNIPPET_SCAN:
            tokens = _TOKEN.finditer(text)  # looked far enough: the message's start
            break
    else:  # nothing the index would match (its tokenizer differs): the message's start
        tokens = _TOKEN.finditer(text)
    for token in tokens:
        if len(window) >= size:
            break
        window.append(token)
    at = window[0].start() if first else 0
    out = ["…" if first else ""]
    for token in window:
        out.append(_between(text, at, token.start(), size))
        word = token.group()
        shown = word if len(word) <= 4 * size else word[: 4 * size] + "…"  # a megabyte-long "word"
        out.append(marks[0] + shown + marks[1] if matches(word) else shown)
        at = token.end()
    out.append("…" if _TOKEN.search(text, at) else _between(text, at, len(text), size))
    return "".join(out)


def _near_a_match(text: str, exact: set[str], starts: tuple[str, ...]) -> int:
    """Where to read a snippet's words from: a little before the first place a plain search finds
    a word of the query, or 0 when it finds none, or finds it early. Every word of the query is in
    the message (the index found it so): one is enough to look for, the longest (the rarest, most
    likely), then the next two should the plain search miss it."""
    words = sorted([(w, True) for w in exact] + [(p, False) for p in starts], key=lambda t: -len(t[0]))
    found = None
    for word, whole in words[:3]:
        pattern = r"(?<![^\W_])" + re.escape(word) + (r"(?![^\W_])" if whole else "")
        if (found := re.search(pattern, text, re.IGNORECASE)) is not None:
            break
    if found is None or found.start() <= SNIPPET_BACK:
        return 0
    back = found.start() - SNIPPET_BACK
    gap = re.compile(r"[\W_]").search(text, back)  # not in the middle of a word
    return gap.end() if gap is not None and gap.end() <= found.start() else found.start()


def _between(text: str, start: int, end: int, size: int) -> str:
    """What lies between two words of a snippet: as it is, unless it is long (an emoji wall)."""
    return text[start:end] if end - start <= 2 * size else text[start : start + size] + "…"


# -- opening -----------------------------------------------------------------------------------------


def _open(path: Path, busy_timeout: float, private_folder: bool) -> sqlite3.Connection:
    """Check the file, then connect, switch to WAL and migrate; nothing is written before every check passed."""
    try:
        _prepare_file(path, private_folder)
        _inspect(path, busy_timeout)
        for companion in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):  # ours, now that it is known to be
            _make_private(companion, 0o600)
        db = _connect(path, "rw", busy_timeout)
    except sqlite3.Error as e:
        raise _unavailable(path, e) from e
    except OSError as e:
        raise HistoryUnavailable(f"{path}: {e.strerror or e}") from e
    try:
        if db.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
            raise HistoryUnavailable(f"{path}: SQLite cannot use write-ahead logging on this file system")
        db.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: a killed process loses no committed transaction
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA cache_size = -256")  # 256 KiB: it appends; searches read through the reader's cache
        db.execute("BEGIN IMMEDIATE")  # also proves, now, that the file can be written and is not locked
        try:
            _migrate(path, db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    except sqlite3.Error as e:
        db.close()
        raise _unavailable(path, e) from e
    except BaseException:
        db.close()
        raise
    return db


def _prepare_file(path: Path, private_folder: bool) -> None:
    """Create the file 0600 before SQLite sees it; refuse one that is not ours to write.

    An existing file is not made private here: until `_inspect` has found a deck database in it,
    it may be another program's (or what a symlink there points to), and stays exactly as it is."""
    folder = path.parent
    if private_folder:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        _make_private(folder, 0o700)
    elif not folder.exists():
        folder.mkdir(mode=0o700, parents=True)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise HistoryUnavailable(f"{path}: its folder is not writable (SQLite keeps its write-ahead log beside it)")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.close(fd)
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise HistoryUnavailable(f"{path}: not a regular file")
    if info.st_uid != os.geteuid():
        raise HistoryUnavailable(f"{path}: owned by another user (uid {info.st_uid})")
    if not info.st_mode & stat.S_IWUSR:  # a file made read-only stays untouched, even by root
        raise HistoryUnavailable(f"{path}: read-only (mode {stat.S_IMODE(info.st_mode):04o})")


def _make_private(path: Path, mode: int) -> None:
    """Take the group and other bits off a file or folder of ours (a folder of someone else's is left alone)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, stat.S_IMODE(info.st_mode) & mode)


def _connect(path: Path, mode: str, busy_timeout: float) -> sqlite3.Connection:
    # A URI with mode=ro / mode=rw: SQLite never creates the file (it exists, with our mode).
    uri = f"file:{urllib.parse.quote(str(path.absolute()))}?mode={mode}"
    return sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None, check_same_thread=False)


def _inspect(path: Path, busy_timeout: float) -> None:
    """Read-only look at the file: a deck history database this code can use, or an empty file."""
    db = _connect(path, "ro", busy_timeout)
    try:
        application_id = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        tables = db.execute("SELECT COUNT(*) FROM sqlite_schema").fetchone()[0]
    finally:
        db.close()
    _check_identity(path, application_id, version, tables)


def _check_identity(path: Path, application_id: int, version: int, tables: int) -> None:
    if application_id == 0 and version == 0 and tables == 0:
        return  # a new, empty database
    if application_id != APPLICATION_ID:
        raise HistoryUnavailable(f"{path}: not a deck history database (another program's SQLite file)")
    if version > SCHEMA_VERSION:
        raise HistoryUnavailable(
            f"{path}: written by a newer deck (schema version {version}; this deck knows up to {SCHEMA_VERSION})"
        )


def _migrate(path: Path, db: sqlite3.Connection) -> None:
    """Bring the database to SCHEMA_VERSION, inside the caller's transaction (another deck may have just done it)."""
    application_id = db.execute("PRAGMA application_id").fetchone()[0]
    version = db.execute("PRAGMA user_version").fetchone()[0]
    tables = db.execute("SELECT COUNT(*) FROM sqlite_schema").fetchone()[0]
    _check_identity(path, application_id, version, tables)
    for number in range(version + 1, SCHEMA_VERSION + 1):
        MIGRATIONS[number - 1](db)
        db.execute(f"PRAGMA user_version = {number}")


_REASONS = {
    "SQLITE_BUSY": "locked by another program",
    "SQLITE_LOCKED": "locked by another program",
    "SQLITE_READONLY": "read-only",
    "SQLITE_CORRUPT": "corrupt",
    "SQLITE_NOTADB": "corrupt, or not an SQLite database",
    "SQLITE_FULL": "the disk is full",
    "SQLITE_CANTOPEN": "cannot be opened",
    "SQLITE_IOERR": "input/output error",
    "SQLITE_PERM": "permission denied",
}


def _unavailable(path: Path, error: sqlite3.Error) -> HistoryUnavailable:
    name = (getattr(error, "sqlite_errorname", None) or "").split("_")
    reason = _REASONS.get("_".join(name[:2]))  # SQLITE_IOERR_WRITE → SQLITE_IOERR
    return HistoryUnavailable(f"{path}: {reason} ({error})" if reason else f"{path}: {error}")


# -- the writer --------------------------------------------------------------------------------------


#: How much lower the writer thread's scheduling priority is than the deck's (its nice value, added).
WRITER_NICENESS = 10


def _in_the_background() -> None:
    """Lower the calling thread's priority (Linux: nice is per thread), so that on a busy machine
    the store's writes and full-text indexing (SQLite's, without the GIL) yield the CPU to the
    deck's loop and its agents, and streamed chunks keep their latency."""
    if not sys.platform.startswith("linux"):
        return  # elsewhere the call would change the whole process
    with contextlib.suppress(OSError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + WRITER_NICENESS))


class Writer:
    """Batches changes for a store: one transaction per interval, however fast messages stream.

    `update()` only keeps the latest whole version of each message in memory (the dict must not
    be changed afterwards: `Message.to_dict()` makes a fresh one); `append()` adds what streamed
    into a message since, which is written as it is, never with the rest of the message. A
    background thread writes what is pending at most `interval` seconds after it changed, at
    once when a message is finished (`done`) or `write_soon()` asks, so a killed deck loses at
    most the last interval of streamed text. A failed write keeps the changes for the next try
    and reports the error to `on_error` (from the writer's thread) when the store goes from
    working to failing.
    """

    def __init__(
        self,
        store: HistoryStore,
        interval: float = FLUSH_INTERVAL,
        on_error: Callable[[HistoryUnavailable], None] | None = None,
    ) -> None:
        self.store = store
        self.interval = interval
        self.on_error = on_error
        self.error: HistoryUnavailable | None = None  # the last write's failure, None once one succeeds
        self._pending = _Pending()
        self._urgent = False
        self._closed = False
        self._changed = threading.Condition(threading.Lock())
        self._flushing = threading.Lock()  # batches are taken and written in order: no version goes back
        self._thread = threading.Thread(target=self._run, name="deck-history-writer", daemon=True)
        self._thread.start()

    def new_conversation(
        self, config_path: str, agent: str, session_id: str | None = None, title: str | None = None
    ) -> str:
        """A fresh conversation, written with the next batch; its id is known at once."""
        conversation_id = str(uuid.uuid4())
        with self._pending_changes() as pending:
            pending.created[conversation_id] = (config_path, agent, session_id, title, self.store._now())
        return conversation_id

    def update(self, conversation_id: str, message: Message) -> None:
        """The latest version of one message (appended when new, replacing the older version otherwise)."""
        if not isinstance(message, dict) or not isinstance(message.get("id"), str):
            raise ValueError("a message must be a dict with a string id")
        with self._pending_changes() as pending:
            pending.messages.setdefault(conversation_id, {})[message["id"]] = _Changes([("whole", message)])
            if message.get("done", True):
                self._urgent = True

    def finish(self, conversation_id: str, message: Message, streamed: dict[int, int]) -> None:
        """The finished version of a message whose streamed text went in with `append()`.

        `streamed` maps each part that text was appended to, to the length of its text in the
        whole version written before: the row keeps that much and the appended text stays as
        it is, so the finished message costs the store its other fields and its search text,
        never its streamed text again. The caller vouches that the text appended makes the
        rest of each of those parts.
        """
        if not isinstance(message, dict) or not isinstance(message.get("id"), str):
            raise ValueError("a message must be a dict with a string id")
        parts = message.get("parts")
        for index, kept in streamed.items():
            part = parts[index] if isinstance(parts, list) and 0 <= index < len(parts) else None
            text = part.get("text") if isinstance(part, dict) and part.get("type") in TEXT_KINDS else None
            if not isinstance(text, str):
                raise ValueError(f"part {index} of the message is not a streamed text part")
            if not 0 <= kept <= len(text):
                raise ValueError(f"part {index} keeps {kept} characters of {len(text)}")
        with self._pending_changes() as pending:
            messages = pending.messages.setdefault(conversation_id, {})
            messages.setdefault(message["id"], _Changes()).ops.append(("finish", (message, dict(streamed))))
            self._urgent = True

    def append(self, conversation_id: str, message_id: str, chunks: Iterable[Chunk]) -> None:
        """What streamed into a stored message since its last whole version or chunks, in order.

        Each chunk is `(index, kind, value)` as in `message:delta`: the text appended to part
        `index` (text, thought), or the part that replaces it (tool, plan; the dict must not be
        changed afterwards). Only these are written: a streaming message costs the store its
        new text, whatever its length.
        """
        chunks = list(chunks)
        if not chunks:
            return
        with self._pending_changes() as pending:
            ops = pending.messages.setdefault(conversation_id, {}).setdefault(message_id, _Changes()).ops
            if ops and ops[-1][0] == "chunks":
                ops[-1][1].extend(chunks)
            else:
                ops.append(("chunks", chunks))

    def write_soon(self) -> None:
        """Write what is pending now rather than an interval later (the caller has gathered it already)."""
        with self._changed:
            if self._pending:
                self._urgent = True
                self._changed.notify()

    def set_session(self, conversation_id: str, session_id: str | None) -> None:
        with self._pending_changes() as pending:
            pending.meta.setdefault(conversation_id, {})["session_id"] = session_id

    def touch(self, conversation_id: str) -> None:
        """The conversation is updated now, changed or not: the one reopened is the latest."""
        with self._pending_changes() as pending:
            pending.meta.setdefault(conversation_id, {})

    def set_title(self, conversation_id: str, title: str | None) -> None:
        with self._pending_changes() as pending:
            pending.meta.setdefault(conversation_id, {})["title"] = title

    def set_usage(self, conversation_id: str, usage: dict[str, Any]) -> None:
        """What the conversation's session reported last (`{used, size, cost?}`)."""
        with self._pending_changes() as pending:
            pending.meta.setdefault(conversation_id, {})["usage"] = _dumps(usage)

    def set_choices(self, conversation_id: str, choices: dict[str, Any]) -> None:
        """The user's choices for the conversation (`{options: {id: value}, mode}`), to set again on resume."""
        with self._pending_changes() as pending:
            pending.meta.setdefault(conversation_id, {})["choices"] = _dumps(choices)

    def set_children(self, conversation_id: str, children: dict[str, Any]) -> None:
        """The conversation's subagents (session id → a child whose `to_dict()` is `{session, parent,
        title, state…}`), kept by the caller, which may change it further: read as it is when written."""
        with self._pending_changes() as pending:
            pending.meta.setdefault(conversation_id, {})["children"] = ChildrenLater(children)

    def set_current(self, config_path: str, agent: str, conversation_id: str | None) -> None:
        """`agent`'s current conversation under `config_path` is now `conversation_id` (None: a fresh one)."""
        with self._pending_changes() as pending:
            pending.current[(config_path, agent)] = conversation_id

    def fresh_unless_current(self, config_path: str, agent: str) -> None:
        """`agent`'s next start under `config_path` begins a fresh conversation, unless one is its current
        one already: a conversation kept apart (a one-shot `deck send`'s) is never taken for its latest."""
        with self._pending_changes() as pending:
            pending.fresh.add((config_path, agent))

    def spend(self, day: str, config_path: str, agent: str, currency: str, amount: float) -> None:
        """`amount` more spent by `agent` on `day`."""
        with self._pending_changes() as pending:
            key = (day, config_path, agent, currency)
            pending.spent[key] = pending.spent.get(key, 0.0) + amount

    def flush(self) -> None:
        """Write everything pending now, on the calling thread; HistoryUnavailable if that fails."""
        with self._flushing:
            with self._changed:
                batch, self._pending, self._urgent = self._pending, _Pending(), False
            if not batch:
                return
            try:
                self.store._apply(batch)
            except HistoryUnavailable as e:
                with self._changed:
                    self._pending = batch.put_back(self._pending)
                self._failed(e)
                raise
            self.error = None

    def close(self) -> None:
        """Stop the thread and write what is left (HistoryUnavailable if that fails). The store stays open."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._changed.notify()
        self._thread.join()
        self.flush()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _pending_changes(self) -> Iterator[_Pending]:
        with self._changed:
            if self._closed:
                raise RuntimeError("the history writer is closed")
            idle = not self._pending
            yield self._pending
            if idle or self._urgent:
                self._changed.notify()

    def _run(self) -> None:
        _in_the_background()
        while True:
            with self._changed:
                # Asleep while nothing is pending (no wake-ups on an idle deck), then one interval
                # to gather what follows the first change, cut short by a finished message or close().
                self._changed.wait_for(lambda: self._closed or bool(self._pending))
                self._changed.wait_for(lambda: self._closed or self._urgent, self.interval)
                if self._closed:
                    return
            try:
                self.flush()
            except HistoryUnavailable:
                pass  # kept for the next try, and reported
            except Exception:  # a change that cannot be written: that batch is lost, never the writer
                log.exception("history: changes not written")

    def _failed(self, error: HistoryUnavailable) -> None:
        first = self.error is None
        self.error = error
        if first and self.on_error is not None:
            try:
                self.on_error(error)
            except Exception:  # the callback's bug must not stop the writer
                log.exception("history: on_error callback failed")

