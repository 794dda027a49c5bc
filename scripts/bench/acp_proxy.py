"""`deck acp`'s benchmarks (run.py's `acp`), side by side with what it proxies:

- the 200,000-chunk answer of the producer through `deck acp` to an ACP client (a bare client of JSON
  lines, `client` below: it reads every line, as an editor would) ÷ the same answer through `deck send`,
  each with a deck of its own, then both through a running `deck serve` of the config;
- `deck acp demo`'s start to its first answer under acpx (`acpx exec`) ÷ acpx talking to the demo agent
  directly: what the proxy adds to a client's start.

    python scripts/bench/acp_proxy.py [ROUNDS]        # alone
    python scripts/bench/acp_proxy.py client CONFIG AGENT TEXT   # the client: exits once the answer ended
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import DECK, PRODUCER, PY, _run_measured, _stop, config, served  # noqa: E402


def client(cfg: str, agent: str, text: str) -> None:
    """A bare ACP client of `deck acp AGENT`: initialize, session/new, one prompt; every line read and
    decoded; exits 0 once the prompt is answered with end_turn."""
    proc = subprocess.Popen([*DECK, "acp", agent, "--config", cfg], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin and proc.stdout
    requests = [
        {"method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}},
        {"method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}},
    ]
    session = None
    chars = 0
    for rid, request in enumerate(requests + [None], 1):
        if request is None:
            request = {"method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "text", "text": text}]}}
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, **request}).encode() + b"\n")
        proc.stdin.flush()
        for line in proc.stdout:
            message = json.loads(line)
            if message.get("method") == "session/update":
                chars += len(message["params"]["update"].get("content", {}).get("text", ""))
            elif message.get("id") == rid:
                if rid == 2:
                    session = message["result"]["sessionId"]
                if rid == 3:
                    assert message["result"]["stopReason"] == "end_turn", message
                break
    proc.stdin.close()
    proc.wait()
    assert chars > 0
    sys.exit(proc.returncode)


def acpx_path() -> str | None:
    try:
        return subprocess.run(["bash", str(HERE / "install-acpx.sh")], capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None  # no Node here


def bench_acp(rounds: int, count: int = 200_000, size: int = 32) -> dict[str, list[float]]:
    producer = [PY, str(PRODUCER), str(count), str(size)]
    demo = [PY, "-P", "-m", "deck.demo"]
    cfg = config({"bench": producer, "demo": demo})
    cwd = cfg.parent
    runs: dict[str, list[float]] = {"deck send": [], "deck acp": []}
    send = [*DECK, "send", "bench", "go", "--config", str(cfg)]
    proxied = [PY, str(Path(__file__)), "client", str(cfg), "bench", "go"]
    for n in range(rounds):
        pair = [("deck send", send), ("deck acp", proxied)]
        for label, command in pair if n % 2 == 0 else pair[::-1]:
            runs[label].append(_run_measured(command, cwd)[0])
    server, env = served(cfg)
    try:  # the same through a running `deck serve` of the config: both go through it
        runs["served deck send"], runs["served deck acp"] = [], []
        for n in range(rounds):
            pair = [("served deck send", send), ("served deck acp", proxied)]
            for label, command in pair if n % 2 == 0 else pair[::-1]:
                runs[label].append(_timed(command, cwd, env))
    finally:
        _stop(server)
    acpx = acpx_path()
    if acpx is not None:
        runs["acpx→deck acp s"], runs["acpx→agent s"] = [], []
        through = " ".join([*DECK, "acp", "demo", "--config", str(cfg)])
        for n in range(max(rounds, 10)):
            pair = [("acpx→deck acp s", through), ("acpx→agent s", " ".join(demo))]
            for label, agent in pair if n % 2 == 0 else pair[::-1]:
                runs[label].append(_run_measured([acpx, "--approve-all", "--agent", agent, "exec", "echo hi"], cwd)[0])
    return runs


def _timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=env, check=True)
    return time.perf_counter() - started


def main() -> None:
    if sys.argv[1:2] == ["client"]:
        client(*sys.argv[2:5])
        return
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    runs = bench_acp(rounds)
    medians = {k: statistics.median(v) for k, v in runs.items()}
    for key, value in medians.items():
        print(f"{key:<18} {value:8.3f} s  ({len(runs[key])} runs)")
    print(f"deck acp ÷ deck send        {medians['deck acp'] / medians['deck send']:.3f}  (target ≤ 1.3)")
    print(f"through a server: deck acp ÷ deck send  {medians['served deck acp'] / medians['served deck send']:.3f}")
    if "acpx→agent s" in medians:
        print(f"acpx→deck acp ÷ acpx→agent  {medians['acpx→deck acp s'] / medians['acpx→agent s']:.3f}")


if __name__ == "__main__":
    main()
