"""Run deck's benchmarks side by side with their baselines and print medians and ratios.

    python scripts/bench/run.py                 # every benchmark, 5 rounds
    python scripts/bench/run.py throughput -r 3 # one benchmark

Benchmarks and targets:
    throughput  200,000 chunks of 32 characters, producer → JSON lines, history on: deck ÷ floor ≤ 1.3
                (the official ACP SDK client is measured beside them as a peer, deck -p no:history
                as "deck off", and deck -p no:notify -p no:budget as "deck no attention")
    version     `deck --version` ÷ `python -c "import typer"` ≤ 1.5
    send        `deck send AGENT hello` to the answer beside acpx 0.19.1's `exec` (installed by
                scripts/bench/install-acpx.sh), 15 interleaved rounds; and the peak RSS of each for a
                200,000-chunk answer: deck send's ≤ 60 MB
    latency     p99 from an agent writing a chunk to its jsonl line, 10 agents × 500 chunks/s: ≤ 5 ms
                (with history, the default; deck -p no:history is measured beside it, as "off", and
                the floor: one selector loop turning the same streams into JSON lines)
    idle        deck's own CPU with 20 idle ready agents over 20 s: < 0.5 % of a core
    stop        end of stdin → exit with 20 agents ignoring SIGTERM: ≤ 9.5 s
    memory      RSS growth of deck for a 200,000-chunk conversation: ≤ 40 MB
                (with history; deck -p no:history beside it, as "off")
    mcp         spawn → `initialize` answered, for the `deck` MCP server each agent starts: ≤ 150 ms
                (a bare `python -c pass` is measured beside it)
    search      history search over 1,000,000 stored messages: p95 ≤ 50 ms
                (the bare FTS5 query of the same words is measured beside it as the floor)
    startup     a process that imports deck's core, then opens a history of 10,000 conversations
                and reads 10 agents' latest: ÷ the import alone ≤ 1.2 (open+latest in ms beside it)
    attach      spawn of `deck attach --frontend=jsonl` → its answer to `DeckService.Snapshot`, from a
                running `deck serve`: ≤ 150 ms (`python -c pass` and `deck --version` beside it)
    socket      the throughput prompt through a server to one attached jsonl client, from the client's
                start to its exit (the server started before): ÷ floor ≤ 1.6 (`deck run` beside it)
    clients     the server's CPU time while one prompt of the throughput's streams to 4 attached
                jsonl clients ÷ the same with 1 client ≤ 1.5
    flood       an agent's command prints 50 MB through a deck terminal as fast as it can while 3
                agents stream 500 chunks/s each: deck's RSS growth ≤ 40 MB; their p99 chunk latency
                is measured beside the same run without the flood ("quiet") and with the same flood
                outside deck, read at the pace deck reads it ("outside": what it costs the machine)
    web         the socket's prompt to an attached jsonl client while a headless Chromium shows the
                web page (scripts/bench/web.py): the client's time ÷ without the browser ≤ 1.2; the
                server's CPU with the browser ÷ without (≤ 1.3) and the page's first paint (≤ 1 s) beside it
    sandbox     an agent's start (spawn to its handshake done, in a fresh deck) sandboxed (bubblewrap) ÷ the same
                unsandboxed, + ≤ 50 ms (their difference beside it); and the throughput's stream sandboxed ÷ not
    permissions 10,000 permission requests an agent makes at once, until all wait in the inbox and are
                cancelled, with notify on (a command to run) ÷ with `-p no:notify` ≤ 1.5 (deck's CPU beside)
    acp         the throughput's 200,000-chunk answer through `deck acp` to a bare ACP client ÷ through
                `deck send` ≤ 1.3 (scripts/bench/acp_proxy.py); and acpx's `exec` through `deck acp demo` to
                its first answer beside acpx talking to the demo agent directly
    ssh         the throughput's prompt from an agent over ssh to 127.0.0.1 (a real sshd of the benchmark's
                own, scripts/bench/ssh.py) ÷ the same agent run directly; and the start of a second agent on
                that host, its connection already open, beside the first's

`--base PYTHON` also runs the throughput with the deck that PYTHON imports (another checkout
installed in its own venv: `git worktree add /tmp/base REV && python -m venv /tmp/base-venv &&
/tmp/base-venv/bin/pip install -e /tmp/base`), as "deck base", and prints deck ÷ deck base:
what a change costs the hot path, measured side by side in one run.

Deck's modules are byte-compiled first (and the base's, with `--base`), as installing a wheel
does, so that a start never times the compiling of deck's sources.

The history database of search and startup is built once (a few minutes) and kept in
$TMPDIR/deck-bench-history/ for later runs, rebuilt when the file's schema version
(`PRAGMA user_version`) is not the store's; delete that folder to rebuild it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PRODUCER = HERE / "producer.py"
FAKE_AGENT = ROOT / "tests" / "agents" / "fake_agent.py"
TERMINAL_AGENT = ROOT / "tests" / "agents" / "terminal_agent.py"
ASKING_AGENT = ROOT / "tests" / "agents" / "asking_agent.py"
PY = sys.executable
DECK = [PY, "-P", "-m", "deck"]  # as the `deck` script runs
#: The options of the "off" runs measured beside deck's default: no history plugin.
HISTORY_OFF = ("-p", "no:history")
#: What the notify and budget plugins cost the hot path: deck without them, beside deck.
ATTENTION_OFF = ("-p", "no:notify", "-p", "no:budget")
#: `--base PYTHON`: the interpreter of the deck the throughput is compared with, if any.
BASE: str | None = None


def config(agents: dict[str, list[str]], extra: str = "") -> Path:
    path = Path(tempfile.mkdtemp(prefix="deck-bench-")) / "deck.toml"
    body = extra + "".join(f"[agents.{n}]\ncommand = {json.dumps(c)}\n" for n, c in agents.items())
    path.write_text(body)
    return path


def request(rid: int, method: str, **params: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode() + b"\n"


def timed(command: list[str], stdin: bytes = b"", env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(command, input=stdin, stdout=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - started


#: Byte-compiles the deck an interpreter imports (its three packages), as installing a wheel does.
COMPILE = (
    "import compileall, deck, deck.frontends, deck.plugins\n"
    "for package in (deck, deck.frontends, deck.plugins):\n"
    "    for folder in package.__path__: compileall.compile_dir(folder, quiet=1)"
)


def compiled(python: str) -> None:
    """Deck's bytecode written for `python`'s deck before it is timed: an editable checkout run
    with PYTHONDONTWRITEBYTECODE (or read-only) would otherwise compile every module on each
    start, and the benchmarks would time the compiler rather than deck as installed."""
    subprocess.run([python, "-c", COMPILE], check=True)


def deck_env() -> dict[str, str]:
    env = dict(os.environ)
    env["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="deck-bench-state-")
    return env


def started_deck(cfg: Path, names: list[str], options: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    """`deck run --frontend=jsonl` on `cfg` (with `options`), once every agent in `names` has started."""
    proc = subprocess.Popen(
        [*DECK, "run", "--frontend=jsonl", "--config", str(cfg), *options],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=deck_env(),
    )
    assert proc.stdin and proc.stdout
    for i, name in enumerate(names):
        proc.stdin.write(request(i, "AgentService.Start", name=name))
    proc.stdin.flush()
    _read_until(proc, lambda e: e.get("id") == len(names) - 1 and "result" in e)
    return proc


# -- benchmarks ---------------------------------------------------------------------------------


def bench_throughput(rounds: int, count: int = 200_000, size: int = 32) -> dict[str, list[float]]:
    cfg = config({"bench": [PY, str(PRODUCER), str(count), str(size)]})
    send = request(1, "ChatService.Send", agent="bench", text="go")
    runs: dict[str, list[float]] = {"floor": [], "sdk peer": [], "deck": [], "deck off": [], "deck no attention": []}
    command = [*DECK, "run", "--frontend=jsonl", "--config", str(cfg)]
    for n in range(rounds):
        runs["floor"].append(timed([PY, str(HERE / "floor.py"), str(count), str(size)]))
        variants = [*_on_and_off(n), ("no attention", ATTENTION_OFF)]
        for label, options in variants[n % 3 :] + variants[: n % 3]:
            runs[f"deck {label}".strip()].append(timed([*command, *options], send, deck_env()))
        if BASE is not None:
            base = [BASE, "-P", "-m", "deck", *command[len(DECK) :]]
            runs.setdefault("deck base", []).append(timed(base, send, deck_env()))
        if "sdk peer" not in runs:
            continue
        try:
            runs["sdk peer"].append(timed([PY, str(HERE / "sdk_peer.py"), str(count), str(size)]))
        except (subprocess.CalledProcessError, FileNotFoundError):
            runs.pop("sdk peer", None)  # `pip install agent-client-protocol` to measure it
    return runs


def bench_subagent(rounds: int, count: int = 200_000, size: int = 32) -> dict[str, list[float]]:
    """The 200,000-chunk answer streamed by the agent's own session ÷ by a subagent's (every chunk
    carrying the child's sessionId), through `deck run --frontend=jsonl`, in turns."""
    send = request(1, "ChatService.Send", agent="bench", text="go")
    runs: dict[str, list[float]] = {"parent": [], "child": []}
    for n in range(rounds):
        for who in (("parent", "child") if n % 2 == 0 else ("child", "parent")):
            cfg = config({"bench": [PY, str(PRODUCER), str(count), str(size), "0", who]})
            runs[who].append(timed([*DECK, "run", "--frontend=jsonl", "--config", str(cfg)], send, deck_env()))
    return runs


def bench_send(rounds: int, count: int = 200_000, size: int = 32) -> dict[str, list[float]]:
    """`deck send AGENT hello` to the answer, beside acpx 0.19.1's `exec` on the same agent (installed
    by scripts/bench/install-acpx.sh: Node and npm), interleaved; then both one 200,000-chunk answer,
    their peak RSS."""
    try:
        acpx: str | None = subprocess.run(
            ["bash", str(HERE / "install-acpx.sh")], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        acpx = None  # no Node here: deck alone
    demo = [PY, "-P", "-m", "deck.demo"]
    producer = [PY, str(PRODUCER), str(count), str(size)]
    cfg = config({"demo": demo, "bench": producer})
    cwd = cfg.parent
    runs: dict[str, list[float]] = {"deck send": [], "acpx exec": [], "deck send MB": [], "acpx exec MB": []}
    for n in range(max(rounds, 15)):  # quick runs: 15 rounds at least
        pair = [("deck send", [*DECK, "send", "demo", "echo hi", "--config", str(cfg)])]
        if acpx is not None:
            pair.append(("acpx exec", [acpx, "--approve-all", "--agent", " ".join(demo), "exec", "echo hi"]))
        for label, command in pair if n % 2 == 0 else pair[::-1]:
            runs[label].append(_run_measured(command, cwd)[0])
    for _ in range(rounds):
        runs["deck send MB"].append(_run_measured([*DECK, "send", "bench", "go", "--config", str(cfg)], cwd)[1])
        if acpx is not None:
            command = [acpx, "--approve-all", "--agent", " ".join(producer), "exec", "go"]
            runs["acpx exec MB"].append(_run_measured(command, cwd)[1])
    return {label: values for label, values in runs.items() if values}


def _run_measured(command: list[str], cwd: Path) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one run of `command`, its output thrown away."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=deck_env())
    _pid, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, command)
    return took, usage.ru_maxrss / 1024  # KiB on Linux


def bench_version(rounds: int) -> dict[str, list[float]]:
    runs: dict[str, list[float]] = {"import typer": [], "deck --version": []}
    for _ in range(rounds):
        runs["import typer"].append(timed([PY, "-c", "import typer"]))
        runs["deck --version"].append(timed([*DECK, "--version"]))
    return runs


def bench_latency(rounds: int, agents: int = 10, rate: int = 500, seconds: float = 4.0) -> dict[str, list[float]]:
    count = int(rate * seconds)
    cfg = config(
        {f"a{i}": [PY, str(PRODUCER), str(count), "48", str(rate)] for i in range(agents)},
        f"[limits]\nmaxRunningAgents = {agents}\n",
    )
    runs: dict[str, list[float]] = {"p50 ms": [], "p99 ms": [], "off p50 ms": [], "off p99 ms": [],
                                    "floor p50 ms": [], "floor p99 ms": []}  # fmt: skip
    for n in range(rounds):
        for label, options in [*_on_and_off(n), ("floor", ())][n % 3 :] + [*_on_and_off(n), ("floor", ())][: n % 3]:
            if label == "floor":
                proc = subprocess.Popen([PY, str(HERE / "floor_many.py"), str(agents), str(count), "48", str(rate)],
                                        stdout=subprocess.PIPE)  # fmt: skip
            else:
                proc = started_deck(cfg, [f"a{i}" for i in range(agents)], options)
                assert proc.stdin
                for i in range(agents):
                    proc.stdin.write(request(100 + i, "ChatService.Send", agent=f"a{i}", text="go"))
                proc.stdin.close()
            assert proc.stdout
            delays: list[float] = []
            for line in proc.stdout:
                now = time.time()
                if b'"message:delta"' in line:
                    text = json.loads(line)["text"]
                    delays.append((now - float(text.split("|", 1)[0])) * 1000)
            proc.wait()
            delays.sort()
            runs[f"{label} p50 ms".strip()].append(delays[len(delays) // 2])
            runs[f"{label} p99 ms".strip()].append(delays[int(len(delays) * 0.99)])
    return runs


def bench_idle(rounds: int, agents: int = 20, seconds: float = 20.0) -> dict[str, list[float]]:
    cfg = config(
        {f"a{i}": [PY, str(FAKE_AGENT)] for i in range(agents)}, f"[limits]\nmaxRunningAgents = {agents}\n"
    )
    runs: dict[str, list[float]] = {"% of a core": []}
    for _ in range(rounds):
        proc = started_deck(cfg, [f"a{i}" for i in range(agents)])
        assert proc.stdin and proc.stdout
        time.sleep(1.0)
        me = psutil.Process(proc.pid)
        before = me.cpu_times()
        time.sleep(seconds)
        after = me.cpu_times()
        used = (after.user + after.system) - (before.user + before.system)
        runs["% of a core"].append(100 * used / seconds)
        proc.stdin.close()
        proc.wait()
    return runs


def bench_stop(rounds: int, agents: int = 20) -> dict[str, list[float]]:
    cfg = config(
        {f"a{i}": [PY, str(FAKE_AGENT), "--ignore-eof", "--ignore-sigterm"] for i in range(agents)},
        f"[limits]\nmaxRunningAgents = {agents}\n",
    )
    runs: dict[str, list[float]] = {"seconds": []}
    for _ in range(rounds):
        proc = started_deck(cfg, [f"a{i}" for i in range(agents)])
        assert proc.stdin and proc.stdout
        started = time.perf_counter()
        proc.stdin.close()
        for _line in proc.stdout:
            pass
        proc.wait()
        runs["seconds"].append(time.perf_counter() - started)
    return runs


def bench_memory(rounds: int, count: int = 200_000, size: int = 32) -> dict[str, list[float]]:
    cfg = config({"bench": [PY, str(PRODUCER), str(count), str(size)]})
    runs: dict[str, list[float]] = {"RSS growth MB": [], "off RSS growth MB": []}
    for n in range(rounds):
        for label, options in _on_and_off(n):
            runs[f"{label} RSS growth MB".strip()].append(_rss_growth(cfg, options))
    return runs


def _on_and_off(n: int) -> list[tuple[str, tuple[str, ...]]]:
    """Round `n`'s runs: deck as it is (label "") and without history ("off"), each first in turn,
    so that neither always follows the same run on a busy machine."""
    both: list[tuple[str, tuple[str, ...]]] = [("", ()), ("off", HISTORY_OFF)]
    return both if n % 2 == 0 else both[::-1]


def _rss_growth(cfg: Path, options: tuple[str, ...]) -> float:
    """The peak RSS growth of deck, in MB, while agent `bench` answers one prompt."""
    proc = started_deck(cfg, ["bench"], options)
    assert proc.stdin and proc.stdout
    me = psutil.Process(proc.pid)
    before = me.memory_info().rss
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], me.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc.stdin.write(request(2, "ChatService.Send", agent="bench", text="go"))
    proc.stdin.flush()
    for line in proc.stdout:
        if b'"turn:changed"' in line and b'"busy":false' in line:
            break
    done.set()
    sampler.join()
    grown = (max(peak[0], me.memory_info().rss) - before) / 2**20
    proc.stdin.close()
    proc.wait()
    return grown


def bench_flood(rounds: int, agents: int = 3, rate: int = 500, seconds: float = 4.0, megabytes: int = 50) -> dict[str, list[float]]:
    count = int(rate * seconds)
    names = [f"a{i}" for i in range(agents)]
    cfg = config(
        {**{n: [PY, str(PRODUCER), str(count), "48", str(rate)] for n in names}, "flood": [PY, str(TERMINAL_AGENT)]},
        f"[limits]\nmaxRunningAgents = {agents + 1}\n",
    )
    code = f"import sys; w = sys.stdout.buffer.write; line = b'x' * 1023 + b'\\n'\nfor _ in range({megabytes * 1024}): w(line)"
    # No terminal/output: the agent's own answer would carry its 1 MiB (an agent's big chunk, not the flood).
    steps = [["terminal/create", {"command": PY, "args": ["-c", code]}, "t"], ["terminal/wait_for_exit", {"terminalId": "$t"}],
             ["terminal/release", {"terminalId": "$t"}]]  # fmt: skip
    flood = json.dumps({"steps": steps})
    from deck.agent.terminals import LIVE_EVERY, READ_BUDGET

    # The same flood outside deck, read at the pace deck reads a terminal: what it costs the machine.
    reader = (f"import os, time\nn = 0\nwhile d := os.read(0, 1 << 16):\n    n += len(d)\n"
              f"    if n >= {READ_BUDGET}:\n        n = 0\n        time.sleep({LIVE_EVERY})\n")  # fmt: skip
    runs: dict[str, list[float]] = {"RSS growth MB": [], "p99 ms": [], "quiet p99 ms": [], "outside p99 ms": [],
                                    "flood s": [], "live events": []}  # fmt: skip
    modes = ["flooded", "quiet", "outside"]
    for n in range(rounds):
        for mode in modes[n % 3 :] + modes[: n % 3]:
            flooded = mode == "flooded"
            proc = started_deck(cfg, [*names, "flood"])
            assert proc.stdin and proc.stdout
            me = psutil.Process(proc.pid)
            before, peak, done = me.memory_info().rss, [0], threading.Event()

            def sample() -> None:
                while not done.wait(0.02):
                    try:
                        peak[0] = max(peak[0], me.memory_info().rss)
                    except psutil.Error:  # deck has exited
                        return

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            started = time.perf_counter()
            if flooded:
                proc.stdin.write(request(99, "ChatService.Send", agent="flood", text=flood))
            elif mode == "outside":
                outside = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE)
                drain = subprocess.Popen([PY, "-c", reader], stdin=outside.stdout)
                assert outside.stdout
                outside.stdout.close()
            for i, name in enumerate(names):
                proc.stdin.write(request(100 + i, "ChatService.Send", agent=name, text="go"))
            proc.stdin.close()
            delays: list[float] = []
            live = 0
            for line in proc.stdout:
                now = time.time()
                if b'"message:delta"' in line and b'"agent":"flood"' not in line:
                    delays.append((now - float(json.loads(line)["text"].split("|", 1)[0])) * 1000)
                elif b'"terminal:output"' in line:
                    live += 1
                elif flooded and b'"terminal:exited"' in line:
                    runs["flood s"].append(time.perf_counter() - started)
            proc.wait()
            done.set()
            sampler.join()
            if mode == "outside":
                drain.wait()
                outside.wait()
            delays.sort()
            runs["p99 ms" if flooded else f"{mode} p99 ms"].append(delays[int(len(delays) * 0.99)])
            if flooded:
                runs["RSS growth MB"].append((peak[0] - before) / 2**20)
                runs["live events"].append(live)
    return runs


def bench_mcp(rounds: int, spawns: int = 5) -> dict[str, list[float]]:
    """Some agents drop an MCP server that takes about a second to answer `initialize`."""
    from deck.plugins.announcements.bridge import SERVER_MODULE

    hello = request(1, "initialize", protocolVersion="2025-06-18", capabilities={}, clientInfo={"name": "bench", "version": "1"})
    runs: dict[str, list[float]] = {"python -c pass ms": [], "initialize ms": []}
    for _ in range(rounds * spawns):
        runs["python -c pass ms"].append(1000 * timed([PY, "-c", "pass"]))
        started = time.perf_counter()
        proc = subprocess.Popen([PY, "-m", SERVER_MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdin and proc.stdout
        proc.stdin.write(hello)
        proc.stdin.flush()
        answer = proc.stdout.readline()
        runs["initialize ms"].append(1000 * (time.perf_counter() - started))
        proc.stdin.close()
        proc.wait()
        if b'"result"' not in answer:
            raise RuntimeError(f"the MCP server did not answer initialize: {answer!r}")
    return runs


HISTORY_QUERIES: list[tuple[str, str | None]] = [
    ("the", None),  # in about every other message
    ("websocket", None),  # in one message in 20,000
    ("the file", None),
    ("error fix", "agent3"),
    ("zephyrine", "agent1"),
    ("ba*", None),  # too short a prefix: a whole word
    ("fil*", None),  # a prefix of common words
    ("conv*", None),
    ("return value", "nobody"),  # common words, an agent with no history: the filter must not scan
    ('"quoted" (syntax) -x', None),
    ("kubernetes quokka", None),  # never together
]


def history_db(conversations: int = 10_000, per_conversation: int = 100) -> Path:
    """The benchmark's history database, built on first use and kept while the builder and store are unchanged."""
    from deck.plugins.history import store
    from history_db import build

    sources = (HERE / "history_db.py").read_bytes() + Path(store.__file__).read_bytes()
    key = hashlib.sha256(sources).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / "deck-bench-history"
    path = folder / f"v{store.SCHEMA_VERSION}-{conversations}x{per_conversation}-{key}.db"
    if schema_of(path) != store.SCHEMA_VERSION:  # missing, cut short, or of another schema whatever its name
        folder.mkdir(mode=0o700, exist_ok=True)
        for stale in folder.iterdir():  # an older build or one cut short
            stale.unlink()
        partial = path.with_suffix(".part")
        print(f"building {path} ({conversations * per_conversation:,} messages) …", file=sys.stderr, flush=True)
        seconds = build(partial, conversations, per_conversation)
        print(f"built in {seconds:.0f} s", file=sys.stderr, flush=True)
        partial.rename(path)
    return path


def schema_of(path: Path) -> int | None:
    """The schema version a history database file says it has (`PRAGMA user_version`); None without a usable file."""
    if not path.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return int(db.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error:
        return None


def bench_search(rounds: int, repeat: int = 5) -> dict[str, list[float]]:
    from deck.plugins.history.store import HistoryStore, _agent_token, fts_query

    path = history_db()
    runs: dict[str, list[float]] = {"floor p50 ms": [], "search p50 ms": [], "search p95 ms": []}
    for _ in range(rounds):
        store = HistoryStore(path)
        floor = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        mine: list[float] = []
        bare: list[float] = []
        for query, agent in HISTORY_QUERIES * repeat:
            started = time.perf_counter()
            store.search(query, agent=agent)
            mine.append((time.perf_counter() - started) * 1000)
            expression = f"text : ({fts_query(query)})" + (f' AND scope : "{_agent_token(agent)}"' if agent else "")
            started = time.perf_counter()
            floor.execute(
                "SELECT rowid, snippet(messages_fts, 0, '**', '**', '…', 16) FROM messages_fts"
                " WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT 20",
                (expression,),
            ).fetchall()
            bare.append((time.perf_counter() - started) * 1000)
        floor.close()
        store.close()
        mine.sort()
        runs["floor p50 ms"].append(statistics.median(bare))
        runs["search p50 ms"].append(statistics.median(mine))
        runs["search p95 ms"].append(mine[int(len(mine) * 0.95)])
    return runs


STARTUP_WITH_HISTORY = """
import sys, time
from deck import Deck
started = time.perf_counter()
from deck.plugins.history.store import HistoryStore
store = HistoryStore(sys.argv[1])
for i in range(10):
    assert store.latest("/home/user/project/deck.toml", f"agent{i}") is not None
store.close()
print((time.perf_counter() - started) * 1000)
"""


def bench_startup(rounds: int) -> dict[str, list[float]]:
    path = history_db()
    runs: dict[str, list[float]] = {"without history": [], "with history": [], "open+latest ms": []}
    for _ in range(rounds):
        runs["without history"].append(timed([PY, "-c", "from deck import Deck"]))
        started = time.perf_counter()
        out = subprocess.run([PY, "-c", STARTUP_WITH_HISTORY, str(path)], capture_output=True, text=True, check=True)
        runs["with history"].append(time.perf_counter() - started)
        runs["open+latest ms"].append(float(out.stdout))
    return runs


def bench_attach(rounds: int, spawns: int = 5) -> dict[str, list[float]]:
    cfg = config({"a": [PY, str(FAKE_AGENT)]})
    runs: dict[str, list[float]] = {"python -c pass ms": [], "deck --version ms": [], "attach ms": []}
    snapshot = request(1, "DeckService.Snapshot")
    for _ in range(rounds):
        server, env = served(cfg)
        try:
            for _ in range(spawns):
                runs["python -c pass ms"].append(1000 * timed([PY, "-c", "pass"]))
                runs["deck --version ms"].append(1000 * timed([*DECK, "--version"]))
                started = time.perf_counter()
                client = attached(env, snapshot)
                _read_until(client, lambda e: e.get("id") == 1 and "result" in e)
                runs["attach ms"].append(1000 * (time.perf_counter() - started))
                _detach(client)
        finally:
            _stop(server)
    return runs


def bench_socket(rounds: int, count: int = 200_000, size: int = 32) -> dict[str, list[float]]:
    cfg = config({"bench": [PY, str(PRODUCER), str(count), str(size)]})
    send = request(1, "ChatService.Send", agent="bench", text="go")
    runs: dict[str, list[float]] = {"floor": [], "deck run": [], "socket": []}
    for _ in range(rounds):
        runs["floor"].append(timed([PY, str(HERE / "floor.py"), str(count), str(size)]))
        runs["deck run"].append(timed([*DECK, "run", "--frontend=jsonl", "--config", str(cfg)], send, deck_env()))
        server, env = served(cfg)
        try:
            started = time.perf_counter()
            client = attached(env, send)
            _read_to_turn_end(client)
            _detach(client)
            runs["socket"].append(time.perf_counter() - started)
        finally:
            _stop(server)
    return runs


def bench_clients(rounds: int, count: int = 200_000, size: int = 32, many: int = 4) -> dict[str, list[float]]:
    cfg = config({"bench": [PY, str(PRODUCER), str(count), str(size)]})
    runs: dict[str, list[float]] = {"1 client s": [], f"{many} clients s": []}
    for n in range(rounds):
        for clients in (1, many) if n % 2 == 0 else (many, 1):
            runs[f"{clients} client{'s' if clients > 1 else ''} s"].append(_server_cpu(cfg, clients))
    return runs


def _server_cpu(cfg: Path, count: int) -> float:
    """The server's CPU seconds (user + system) while agent `bench` answers one prompt, streamed to
    `count` attached jsonl clients; each client's stdout is read to the end of the turn."""
    server, env = served(cfg)
    try:
        # The agent runs, and every client is attached (it has answered a first request).
        first = [request(1, "AgentService.Start", name="bench")] + [request(1, "DeckService.Clients")] * (count - 1)
        clients = [attached(env, line) for line in first]
        for client in clients:
            _read_until(client, lambda e: e.get("id") == 1 and "result" in e)
        me = psutil.Process(server.pid)
        readers = [threading.Thread(target=_read_to_turn_end, args=(c,)) for c in clients]
        before = me.cpu_times()
        for reader in readers:
            reader.start()
        assert clients[0].stdin
        clients[0].stdin.write(request(2, "ChatService.Send", agent="bench", text="go"))
        clients[0].stdin.flush()
        for reader in readers:
            reader.join()
        after = me.cpu_times()
        for client in clients:
            _detach(client)
        return (after.user + after.system) - (before.user + before.system)
    finally:
        _stop(server)


def bench_permissions(rounds: int, count: int = 10_000) -> dict[str, list[float]]:
    cfg = config({"bench": [PY, str(ASKING_AGENT)]}, '[notify]\ncommand = ["true"]\n')
    runs: dict[str, list[float]] = {"notify on s": [], "notify off s": [], "on cpu s": [], "off cpu s": []}
    for n in range(rounds):
        variants = [("on", ()), ("off", ("-p", "no:notify"))]
        for label, options in variants[n % 2 :] + variants[: n % 2]:
            seconds, cpu = _permission_flood(cfg, count, options)
            runs[f"notify {label} s"].append(seconds)
            runs[f"{label} cpu s"].append(cpu)
    return runs


def bench_sandbox(rounds: int, count: int = 200_000, size: int = 32) -> dict[str, list[float]]:
    agent = [PY, str(PRODUCER), str(count), str(size)]
    plain, boxed = config({"bench": agent}), config({"bench": agent}, "[sandbox]\ndefault = true\n")
    runs: dict[str, list[float]] = {"sandboxed start ms": [], "start ms": [], "sandboxed stream s": [], "stream s": []}
    send = request(1, "ChatService.Send", agent="bench", text="go")
    for n in range(rounds):
        for label, cfg in [("sandboxed ", boxed), ("", plain)][:: 1 if n % 2 else -1]:
            runs[f"{label}start ms"].append(1000 * _start_time(cfg))
            runs[f"{label}stream s"].append(timed([*DECK, "run", "--frontend=jsonl", "--config", str(cfg)], send, deck_env()))
    runs["difference ms"] = [a - b for a, b in zip(runs["sandboxed start ms"], runs["start ms"], strict=True)]
    return runs


def _start_time(cfg: Path) -> float:
    """From AgentService.Start sent to its answer, in a deck that has started nothing before."""
    proc = subprocess.Popen([*DECK, "run", "--frontend=jsonl", "--config", str(cfg)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=deck_env())  # fmt: skip
    assert proc.stdin
    proc.stdin.write(request(0, "DeckService.Clients"))
    proc.stdin.flush()
    _read_until(proc, lambda e: e.get("id") == 0)  # the deck is up
    started = time.perf_counter()
    proc.stdin.write(request(1, "AgentService.Start", name="bench"))
    proc.stdin.flush()
    _read_until(proc, lambda e: e.get("id") == 1)
    seconds = time.perf_counter() - started
    proc.stdin.close()
    proc.wait(60)
    return seconds


def _permission_flood(cfg: Path, count: int, options: tuple[str, ...]) -> tuple[float, float]:
    """From the prompt to its turn's end: `count` requests asked at once, all waiting, then cancelled."""
    proc = started_deck(cfg, ["bench"], options)
    assert proc.stdin
    started = time.perf_counter()
    proc.stdin.write(request(100, "ChatService.Send", agent="bench", text=f"perms {count}"))
    proc.stdin.flush()
    asked = 0

    def all_asked(event: dict) -> bool:
        nonlocal asked
        asked += event.get("event") == "permission:requested"
        return asked == count

    _read_until(proc, all_asked)
    proc.stdin.write(request(101, "ChatService.Cancel", agent="bench"))
    proc.stdin.flush()
    _read_until(proc, lambda e: e.get("event") == "turn:changed" and not e.get("busy"))
    seconds = time.perf_counter() - started
    cpu = sum(psutil.Process(proc.pid).cpu_times()[:2])
    proc.stdin.close()
    proc.wait(60)
    return seconds, cpu


def served(cfg: Path, name: str = "bench", *options: str) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """`deck serve --name NAME` of `cfg` (with `options`), once it listens; and the environment of its
    clients (its socket in a folder of its own)."""
    env = deck_env()
    env["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="dk-")  # short: a socket path has at most 107 bytes
    ready, ready_w = os.pipe()
    server = subprocess.Popen(
        [*DECK, "serve", "--config", str(cfg), "--name", name, *options, "--ready-fd", str(ready_w)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, pass_fds=(ready_w,),
    )  # fmt: skip
    os.close(ready_w)
    with os.fdopen(ready, "rb") as f:
        if f.read(6) != b"ready\n":
            raise RuntimeError(f"deck serve ended: exit {server.wait()}")
    return server, env


def attached(env: dict[str, str], stdin: bytes, name: str = "bench") -> subprocess.Popen[bytes]:
    """`deck attach NAME --frontend=jsonl`, `stdin` written to it (its stdin stays open: its end detaches)."""
    client = subprocess.Popen(
        [*DECK, "attach", name, "--frontend=jsonl"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    assert client.stdin
    if stdin:
        client.stdin.write(stdin)
        client.stdin.flush()
    return client


def _read_to_turn_end(client: subprocess.Popen[bytes]) -> None:
    """Read `client`'s lines up to the end of a turn, searched and never decoded: the reader's cost
    stays out of the way of what is measured (on two cores, it would compete with deck)."""
    assert client.stdout
    for line in client.stdout:
        if b'"turn:changed"' in line and b'"busy":false' in line:
            return
    raise RuntimeError("deck attach ended early")


def _detach(client: subprocess.Popen[bytes]) -> None:
    assert client.stdin and client.stdout
    client.stdin.close()
    client.stdout.read()
    if client.wait() != 0:
        raise RuntimeError(f"deck attach ended with exit {client.returncode}")


def _stop(server: subprocess.Popen[bytes]) -> None:
    server.send_signal(signal.SIGTERM)
    server.wait()


def _read_until(proc: subprocess.Popen[bytes], done) -> None:
    assert proc.stdout
    for line in proc.stdout:
        if done(json.loads(line)):
            return
    raise RuntimeError("deck ended early")


# -- report ---------------------------------------------------------------------------------------

BENCHES = {
    "throughput": (bench_throughput, ("deck", "floor", 1.3)),
    "subagent": (bench_subagent, ("child", "parent", 1.05)),
    "version": (bench_version, ("deck --version", "import typer", 1.5)),
    "send": (bench_send, ("deck send MB", None, 60.0)),
    "latency": (bench_latency, ("p99 ms", None, 5.0)),
    "idle": (bench_idle, ("% of a core", None, 0.5)),
    "stop": (bench_stop, ("seconds", None, 9.5)),
    "memory": (bench_memory, ("RSS growth MB", None, 40.0)),
    "mcp": (bench_mcp, ("initialize ms", None, 150.0)),
    "search": (bench_search, ("search p95 ms", None, 50.0)),
    "startup": (bench_startup, ("with history", "without history", 1.2)),
    "attach": (bench_attach, ("attach ms", None, 150.0)),
    "socket": (bench_socket, ("socket", "floor", 1.6)),
    "clients": (bench_clients, ("4 clients s", "1 client s", 1.5)),
    "flood": (bench_flood, ("RSS growth MB", None, 40.0)),
    "web": (lambda rounds: __import__("web").bench_web(rounds), ("terminal+web s", "terminal s", 1.2)),
    "ssh": (lambda rounds: __import__("ssh").bench_ssh(rounds), ("over ssh", "direct", 1.5)),
    "permissions": (bench_permissions, ("notify on s", "notify off s", 1.5)),
    "sandbox": (bench_sandbox, ("difference ms", None, 50.0)),
    "acp": (lambda rounds: __import__("acp_proxy").bench_acp(rounds), ("deck acp", "deck send", 1.3)),
}
#: Ratios printed for information: (measure, peer it is compared with).
RATIOS = {
    "throughput": [
        ("sdk peer", "floor"), ("deck off", "floor"), ("deck", "deck off"), ("deck", "deck no attention"),
        ("deck", "deck base"),
    ],
    "latency": [("p99 ms", "off p99 ms"), ("p99 ms", "floor p99 ms"), ("off p99 ms", "floor p99 ms")],
    "memory": [("RSS growth MB", "off RSS growth MB")],
    "mcp": [("initialize ms", "python -c pass ms")],
    "search": [("search p50 ms", "floor p50 ms")],
    "attach": [("attach ms", "deck --version ms")],
    "socket": [("deck run", "floor"), ("socket", "deck run")],
    "send": [("deck send", "acpx exec"), ("deck send MB", "acpx exec MB")],
    "flood": [("p99 ms", "quiet p99 ms"), ("p99 ms", "outside p99 ms")],
    "web": [("server+web cpu s", "server cpu s")],
    "ssh": [("second start ms", "first start ms")],
    "permissions": [("on cpu s", "off cpu s")],
    "sandbox": [("sandboxed start ms", "start ms"), ("sandboxed stream s", "stream s")],
    "acp": [("served deck acp", "served deck send"), ("acpx→deck acp s", "acpx→agent s")],
}
SLOW = {"idle", "stop"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", choices=[*BENCHES, []], help="benchmarks to run (default: all)")
    parser.add_argument("-r", "--rounds", type=int, default=5)
    parser.add_argument("--base", metavar="PYTHON", help="also run the throughput with the deck this interpreter imports")
    args = parser.parse_args()
    global BASE
    BASE = args.base
    for python in [PY] if BASE is None else [PY, BASE]:
        compiled(python)
    names = args.names or list(BENCHES)
    print(f"{'benchmark':<12} {'measure':<16} {'median':>10} {'runs':>6}   result")
    for name in names:
        bench, (measure, baseline, target) = BENCHES[name]
        rounds = min(args.rounds, 2) if name in SLOW else args.rounds
        runs = bench(rounds)
        medians = {key: statistics.median(values) for key, values in runs.items()}
        for key, value in medians.items():
            print(f"{name:<12} {key:<16} {value:>10.3f} {len(runs[key]):>6}")
        value = medians[measure] / medians[baseline] if baseline else medians[measure]
        label = f"{measure} ÷ {baseline}" if baseline else measure
        verdict = "ok" if value <= target else "MISSED"
        print(f"{name:<12} {label:<16} {value:>10.3f} {'':>6}   target ≤ {target:g}: {verdict}")
        for top, bottom in RATIOS.get(name, []):
            if top in medians and bottom in medians:
                print(f"{name:<12} {f'{top} ÷ {bottom}':<16} {medians[top] / medians[bottom]:>10.3f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
