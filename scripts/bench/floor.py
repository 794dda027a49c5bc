"""The floor: the least code that turns the producer's ACP stream into JSON lines.

A plain blocking loop: readline, json.loads, json.dumps, write. Usage: floor.py N S
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PRODUCER = Path(__file__).with_name("producer.py")


def main() -> None:
    agent = subprocess.Popen([sys.executable, str(PRODUCER), *sys.argv[1:3]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    send = agent.stdin
    out = sys.stdout
    for rid, (method, params) in enumerate(
        [("initialize", {"protocolVersion": 1}), ("session/new", {"cwd": "/", "mcpServers": []}),
         ("session/prompt", {"sessionId": "bench", "prompt": [{"type": "text", "text": "go"}]})]
    ):  # fmt: skip
        send.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode() + b"\n")
        send.flush()
        for line in agent.stdout:
            msg = json.loads(line)
            if msg.get("id") == rid:
                break
            update = msg["params"]["update"]
            out.write(json.dumps({"event": "message:delta", "agent": "bench", "text": update["content"]["text"]}) + "\n")
    send.close()
    agent.wait()


if __name__ == "__main__":
    main()
