"""The remote-agent benchmark (`python scripts/bench/run.py ssh`): an agent over ssh to this machine.

A real sshd on 127.0.0.1 (tests/sshd.py: its own keys, scripts/install-sshd.sh installs it), and the
throughput's producer (200,000 chunks) run by `deck run --frontend=jsonl` two ways, in turn first:
directly, and with `host = "testbox"` (through ssh to localhost). Also the start-up of a second agent
on that host once the first has opened the connection, beside the first's (a new connection).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests.sshd


def bench_ssh(rounds: int, count: int = 200_000, size: int = 32) -> dict[str, list[float]]:
    from run import DECK, PRODUCER, PY, _read_until, deck_env, request, timed

    from tests.sshd import SSHServer

    server = SSHServer(Path(tempfile.mkdtemp(prefix="deck-bench-sshd-")))
    folder = Path(tempfile.mkdtemp(prefix="deck-bench-ssh-"))
    producer = [PY, str(PRODUCER), str(count), str(size)]
    remote = f'host = "testbox"\ncwd = "{folder}"\nssh = ["-F", "{server.config}"]\n'
    direct_cfg, ssh_cfg = folder / "direct.toml", folder / "ssh.toml"
    direct_cfg.write_text(f"[agents.bench]\ncommand = {json.dumps(producer)}\n")
    ssh_cfg.write_text(f"[agents.bench]\ncommand = {json.dumps(producer)}\n{remote}")
    two = folder / "two.toml"
    two.write_text("".join(f"[agents.{n}]\ncommand = {json.dumps(producer)}\n{remote}" for n in ("one", "two")))
    send = request(1, "ChatService.Send", agent="bench", text="go")
    runs: dict[str, list[float]] = {"direct": [], "over ssh": [], "first start ms": [], "second start ms": []}
    try:
        for n in range(rounds):
            for label, cfg in (("direct", direct_cfg), ("over ssh", ssh_cfg)) if n % 2 == 0 else (("over ssh", ssh_cfg), ("direct", direct_cfg)):
                runs[label].append(timed([*DECK, "run", "--frontend=jsonl", "--config", str(cfg)], send, deck_env()))
            runs["first start ms"].append(0.0)
            runs["second start ms"].append(0.0)
            first, second = _starts(two, [*DECK, "run", "--frontend=jsonl", "--config", str(two)], deck_env(), _read_until, request)
            runs["first start ms"][-1], runs["second start ms"][-1] = first, second
    finally:
        server.stop()
    return runs


def _starts(cfg: Path, command: list[str], env: dict[str, str], read_until, request) -> tuple[float, float]:
    """(ms to start the first agent: a new connection, ms to start the second: the connection open)."""
    import subprocess

    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin and proc.stdout
    times = []
    try:
        for rid, name in ((1, "one"), (2, "two")):
            started = time.perf_counter()
            proc.stdin.write(request(rid, "AgentService.Start", name=name))
            proc.stdin.flush()
            read_until(proc, lambda e, rid=rid: e.get("id") == rid and "result" in e)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        proc.stdin.close()
        proc.stdout.read()
        proc.wait()
    return times[0], times[1]
