"""Benchmark the console: CPU use and redraws per second while 4 agents stream fast.

Runs `deck run --frontend=urwid` in a 120×40 tmux pane with four agents, sends
`stream N` to each from the keyboard, and measures the deck process (not the agents)
from the first message until all four are ready again. The target: under half a core.

By default each agent streams at --rate chunks a second (2000: some ten times a fast
model's token rate); --unpaced uses the test suite's fake agent, which streams as fast
as it can write, to measure the cost of a chunk when deck is saturated.

    python scripts/bench_urwid.py [--chunks 20000] [--rate 2000] [--agents 4] [--unpaced]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
FAKE_AGENT = ROOT / "tests" / "agents" / "fake_agent.py"
TMUX = "/usr/bin/tmux"
TARGET_CORES = 0.5

#: An ACP agent streaming `stream N` at RATE chunks a second (stdlib only).
PACED_AGENT = """
import json, sys, threading, time
RATE = float(sys.argv[1])
lock = threading.Lock()
def send(msg):
    with lock:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **msg}) + "\\n")
        sys.stdout.flush()
def turn(rid, sid, n):
    start = time.monotonic()
    for i in range(n):
        if i % 20 == 0 and (ahead := start + i / RATE - time.monotonic()) > 0:
            time.sleep(ahead)
        send({"method": "session/update", "params": {"sessionId": sid, "update": {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"c{i} "}}}})
    send({"id": rid, "result": {"stopReason": "end_turn"}})
for line in sys.stdin:
    msg = json.loads(line)
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
    elif method == "session/new":
        send({"id": rid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        words = params["prompt"][0]["text"].split()
        threading.Thread(target=turn, args=(rid, params["sessionId"], int(words[1])), daemon=True).start()
"""


def tmux(socket: str, *args: str) -> str:
    return subprocess.run([TMUX, "-L", socket, "-f", "/dev/null", *args], check=True, capture_output=True, text=True).stdout


def wait(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=20000, help="chunks each agent streams")
    parser.add_argument("--rate", type=float, default=2000, help="chunks a second each agent streams")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--unpaced", action="store_true", help="the fake agent, as fast as it can")
    args = parser.parse_args()
    names = [f"agent{i}" for i in range(1, args.agents + 1)]
    socket = f"deck-bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "deck.toml"
        paced = Path(tmp) / "paced_agent.py"
        paced.write_text(PACED_AGENT)
        agent = [sys.executable, str(FAKE_AGENT)] if args.unpaced else [sys.executable, str(paced), str(args.rate)]
        config.write_text("".join(f"[agents.{n}]\ncommand = {json.dumps(agent)}\n" for n in names))
        stats = Path(tmp) / "stats.json"
        deck = shlex.join([sys.executable, "-m", "deck", "run", "--frontend=urwid", "--config", str(config)])
        command = f"env DECK_URWID_STATS={shlex.quote(str(stats))} XDG_STATE_HOME={shlex.quote(tmp)} {deck}; sleep 30"
        tmux(socket, "new-session", "-d", "-x", "120", "-y", "40", command)
        try:
            shell = psutil.Process(int(tmux(socket, "list-panes", "-F", "#{pane_pid}").strip()))
            screen = lambda: tmux(socket, "capture-pane", "-p")  # noqa: E731
            wait("deck", lambda: "Message to" in screen(), 20)
            proc = next(p for p in shell.children(recursive=True) if "deck.cli.commands" in " ".join(p.cmdline()))
            # Start the agents first, so the measure is about streaming, not process start-up.
            for number in range(1, len(names) + 1):
                tmux(socket, "send-keys", f"M-{number}", "F5")
            wait("agents ready", lambda: screen().count("   ready") == len(names), 30)
            cpu0, t0 = proc.cpu_times(), time.monotonic()
            for number in range(1, len(names) + 1):
                tmux(socket, "send-keys", f"M-{number}")
                tmux(socket, "send-keys", "-l", f"stream {args.chunks}")
                tmux(socket, "send-keys", "Enter")
            wait("streams to start", lambda: "ready" not in screen(), 30)
            wait("streams to end", lambda: screen().count("   ready") == len(names), 600)
            cpu1, t1 = proc.cpu_times(), time.monotonic()
            last = screen()
            tmux(socket, "send-keys", "C-q")
            wait("deck to exit", lambda: not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE, 30)
        finally:
            subprocess.run([TMUX, "-L", socket, "kill-server"], capture_output=True)
        data = json.loads(stats.read_text())
    seconds = t1 - t0
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    draws = [t for t in data["drawTimes"] if t0 <= t <= t1]
    per_second = [sum(1 for t in draws if s <= t - t0 < s + 1) for s in range(int(seconds))]
    cores = cpu / seconds
    chunks = args.chunks * len(names)
    pace = "as fast as they can" if args.unpaced else f"at {args.rate:,.0f} chunks/s each"
    print(f"{len(names)} agents × {args.chunks} chunks, {pace}, streamed in {seconds:.2f} s ({chunks / seconds:,.0f} chunks/s)")
    print(f"deck process CPU: {cpu:.2f} s over {seconds:.2f} s = {cores:.2f} core (target: under {TARGET_CORES})")
    print(f"redraws: {len(draws)} = {len(draws) / seconds:.1f}/s on average, at most {max(per_second, default=len(draws))} in any one second")
    print("last screen line:", last.rstrip("\n").split("\n")[-1][:100])
    ok = cores < TARGET_CORES
    print("PASS" if ok else "FAIL", f"{cores:.2f} core {'<' if ok else '>='} {TARGET_CORES}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
