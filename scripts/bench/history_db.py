"""Build a large history database for the search and start-up benchmarks, fast.

The schema is the store's own (it creates the file) and rows are made by the store's own
message → row function, so the file holds what deck would have written; but they go in with
executemany in one unjournalled transaction, and the full-text index is built once at the
end rather than row by row. Usage:
    history_db.py PATH [CONVERSATIONS] [MESSAGES_PER_CONVERSATION]
"""

from __future__ import annotations

import itertools
import random
import sqlite3
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from deck.plugins.history.store import _UPSERT, HistoryStore, _message_row, _scope

AGENTS = [f"agent{i}" for i in range(10)]
CONFIG = "/home/user/project/deck.toml"
#: Words every corpus has in plenty, then a long tail; the rare ones are what users search for.
COMMON = (
    "the a to of and in is it that for this file function test error we you with on be not can "
    "change code line value return should use add fix run now here check build type name path"
).split()
#: Each in one message in RARE_EVERY: what the benchmark's rare queries look for.
RARE = ["websocket", "zephyrine", "kubernetes", "quokka"]
RARE_EVERY = 5_000


def _vocabulary(rng: random.Random, size: int = 30_000) -> list[str]:
    syllables = [a + b for a in "bcdfghjklmnprstvwz" for b in "aeiou"]
    return ["".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(size)]


def _sentences(rng: random.Random, count: int = 20_000) -> list[str]:
    vocabulary = _vocabulary(rng)
    cumulative = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(vocabulary))))  # Zipf's law
    out = []
    for _ in range(count):
        words = rng.choices(vocabulary, cum_weights=cumulative, k=rng.randint(4, 10))
        words += rng.choices(COMMON, k=rng.randint(2, 6))
        rng.shuffle(words)
        out.append(" ".join(words).capitalize() + ".")
    return out


def _message(rng: random.Random, sentences: list[str], n: int, agent: str, at: str) -> dict[str, object]:
    text = " ".join(rng.choices(sentences, k=rng.randint(1, 6)))
    if n % RARE_EVERY == 0:
        text += f" {RARE[(n // RARE_EVERY) % len(RARE)]}"
    role = "user" if n % 2 == 0 else "agent"
    parts: list[dict[str, object]] = [{"type": "text", "text": text}]
    if role == "agent" and n % 3 == 1:
        parts.insert(0, {"type": "thought", "text": rng.choice(sentences)})
        title = f"Read src/{rng.choice(sentences).split()[0].lower()}.py"
        parts.append({"type": "tool", "id": f"call_{n}", "title": title, "kind": "read", "status": "completed",
                      "input": "{}", "output": "", "locations": [], "diffs": []})  # fmt: skip
    message: dict[str, object] = {
        "id": f"msg-{n}", "agent": agent, "createdAt": at, "role": role, "parts": parts, "done": True, "queued": False,
    }  # fmt: skip
    if role == "agent":
        message["stopReason"] = "end_turn"
    return message


def build(path: Path, conversations: int = 10_000, per_conversation: int = 100) -> float:
    """Write the database at `path` (which must not exist); returns the seconds it took."""
    started = time.perf_counter()
    HistoryStore(path).close()
    rng = random.Random(1)
    sentences = _sentences(rng)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    db.execute("PRAGMA cache_size = -262144")  # 256 MB
    (trigger,) = db.execute("SELECT sql FROM sqlite_schema WHERE name = 'messages_fts_insert'").fetchone()
    db.execute("DROP TRIGGER messages_fts_insert")
    db.execute("BEGIN")
    start_ms = int(time.time() * 1000) - conversations * 60_000
    n = 0
    for c in range(conversations):
        cid = f"00000000-0000-4000-8000-{c:012d}"
        agent = AGENTS[c % len(AGENTS)]
        at_ms = start_ms + c * 60_000
        db.execute(
            "INSERT INTO conversations (id, config_path, agent, session_id, title, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (cid, CONFIG, agent, f"sess-{c}", f"conversation {c}", at_ms, at_ms + 59_000),
        )
        at = datetime.fromtimestamp(at_ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
        scope = _scope(agent, CONFIG)
        rows = []
        for _ in range(per_conversation):
            n += 1
            rows.append({"conversation": cid, "scope": scope, **_message_row(_message(rng, sentences, n, agent, at))})
        db.executemany(_UPSERT, rows)
    db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")
    db.execute(trigger)
    db.execute("COMMIT")
    db.execute("PRAGMA journal_mode = WAL")
    db.close()
    return time.perf_counter() - started


if __name__ == "__main__":
    target = Path(sys.argv[1])
    counts = [int(a) for a in sys.argv[2:4]]
    print(f"built {target} in {build(target, *counts):.1f} s")
