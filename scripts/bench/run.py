"""Run deck's benchmarks side by side with their baselines and print medians and ratios.

    python scripts/bench/run.py                 # every benchmark, 5 rounds
    python scripts/bench/run.py throughput -r 3 # one benchmark

Benchmarks and targets:
    throughput  200,000 chunks of 32 characters, producer → JSON lines: deck ÷ floor ≤ 1.5
                (the official ACP SDK client is measured beside them as a peer)
    version     `deck --version` ÷ `python -c "import typer"` ≤ 1.5
    latency     p99 from an agent writing a chunk to its jsonl line, 10 agents × 500 chunks/s: ≤ 5 ms
    idle        deck's own CPU with 20 idle ready agents over 20 s: < 0.5 % of a core
    stop        end of stdin → exit with 20 agents ignoring SIGTERM: ≤ 9.5 s
    memory      RSS growth of deck for a 200,000-chunk conversation: ≤ 40 MB
"""

from __future__ import annotations

import argparse
import json
import os
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
PY = sys.executable
DECK = [PY, "-m", "deck.cli"]


def config(agents: dict[str, list[str]], extra: str = "") -> Path:
    path = Path(tempfile.mkdtemp(prefix="deck-bench-")) / "deck.toml"
    body = extra + "".join(f"[agents.{n}]\ncommand = {json.dumps(c)}\n" for n, c in agents.items())
    path.write_text(body)
    return path


def request(rid: int, method: str, **params: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode() + b"\n"


def timed(command: list[str], stdin: bytes = b"") -> float:
    started = time.perf_counter()
    subprocess.run(command, input=stdin, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def deck_env() -> dict[str, str]:
    env = dict(os.environ)
    env["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="deck-bench-state-")
    return env


def started_deck(cfg: Path, names: list[str]) -> subprocess.Popen[bytes]:
    """`deck run --frontend=jsonl` on `cfg`, once every agent in `names` has started."""
    proc = subprocess.Popen(
        [*DECK, "run", "--frontend=jsonl", "--config", str(cfg)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=deck_env()
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
    runs: dict[str, list[float]] = {"floor": [], "sdk peer": [], "deck": []}
    for _ in range(rounds):
        runs["floor"].append(timed([PY, str(HERE / "floor.py"), str(count), str(size)]))
        runs["deck"].append(timed([*DECK, "run", "--frontend=jsonl", "--config", str(cfg)], send))
        try:
            runs["sdk peer"].append(timed([PY, str(HERE / "sdk_peer.py"), str(count), str(size)]))
        except (subprocess.CalledProcessError, FileNotFoundError):
            runs.pop("sdk peer", None)  # `pip install agent-client-protocol` to measure it
    return runs


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
    runs: dict[str, list[float]] = {"p50 ms": [], "p99 ms": []}
    for _ in range(rounds):
        proc = started_deck(cfg, [f"a{i}" for i in range(agents)])
        assert proc.stdin and proc.stdout
        for i in range(agents):
            proc.stdin.write(request(100 + i, "ChatService.Send", agent=f"a{i}", text="go"))
        proc.stdin.close()
        delays: list[float] = []
        for line in proc.stdout:
            now = time.time()
            if b'"message:delta"' in line:
                text = json.loads(line)["text"]
                delays.append((now - float(text.split("|", 1)[0])) * 1000)
        proc.wait()
        delays.sort()
        runs["p50 ms"].append(delays[len(delays) // 2])
        runs["p99 ms"].append(delays[int(len(delays) * 0.99)])
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
    runs: dict[str, list[float]] = {"RSS growth MB": []}
    for _ in range(rounds):
        proc = started_deck(cfg, ["bench"])
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
        peak = max(peak[0], me.memory_info().rss)
        runs["RSS growth MB"].append((peak - before) / 2**20)
        proc.stdin.close()
        proc.wait()
    return runs


def _read_until(proc: subprocess.Popen[bytes], done) -> None:
    assert proc.stdout
    for line in proc.stdout:
        if done(json.loads(line)):
            return
    raise RuntimeError("deck ended early")


# -- report ---------------------------------------------------------------------------------------

BENCHES = {
    "throughput": (bench_throughput, ("deck", "floor", 1.5)),
    "version": (bench_version, ("deck --version", "import typer", 1.5)),
    "latency": (bench_latency, ("p99 ms", None, 5.0)),
    "idle": (bench_idle, ("% of a core", None, 0.5)),
    "stop": (bench_stop, ("seconds", None, 9.5)),
    "memory": (bench_memory, ("RSS growth MB", None, 40.0)),
}
SLOW = {"idle", "stop"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", choices=[*BENCHES, []], help="benchmarks to run (default: all)")
    parser.add_argument("-r", "--rounds", type=int, default=5)
    args = parser.parse_args()
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
        if name == "throughput" and "sdk peer" in medians:
            print(f"{name:<12} {'sdk peer ÷ floor':<16} {medians['sdk peer'] / medians['floor']:>10.3f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
