"""The latency floor: the least code that turns several producers' ACP streams into JSON lines.

One selector loop, as deck's event loop is: each readable pipe is read, its whole lines are
decoded with json.loads, each chunk becomes an event line with json.dumps, and what one
round of the loop made goes to stdout in one write. Usage: floor_many.py AGENTS N S RATE
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
from pathlib import Path

PRODUCER = Path(__file__).with_name("producer.py")


def request(rid: int, method: str, params: dict[str, object]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode() + b"\n"


def main() -> None:
    count, rest = int(sys.argv[1]), sys.argv[2:5]
    agents = [subprocess.Popen([sys.executable, str(PRODUCER), *rest], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
              for _ in range(count)]  # fmt: skip
    for agent in agents:
        assert agent.stdin and agent.stdout
        for rid, (method, params) in enumerate([("initialize", {"protocolVersion": 1}), ("session/new", {"cwd": "/", "mcpServers": []})]):
            agent.stdin.write(request(rid, method, params))
            agent.stdin.flush()
            while json.loads(agent.stdout.readline()).get("id") != rid:
                pass
    selector = selectors.DefaultSelector()
    partial: dict[int, bytes] = {}
    for n, agent in enumerate(agents):
        assert agent.stdin and agent.stdout
        agent.stdin.write(request(2, "session/prompt", {"sessionId": "bench", "prompt": [{"type": "text", "text": "go"}]}))
        agent.stdin.flush()
        fd = agent.stdout.fileno()
        selector.register(fd, selectors.EVENT_READ, f"a{n}")
        partial[fd] = b""
    running = count
    while running:
        out = []
        for key, _ in selector.select():
            fd = key.fileobj
            assert isinstance(fd, int)
            data = os.read(fd, 65536)
            if not data:
                selector.unregister(fd)
                running -= 1
                continue
            *lines, partial[fd] = (partial[fd] + data).split(b"\n")
            for line in lines:
                msg = json.loads(line)
                if "method" in msg:
                    text = msg["params"]["update"]["content"]["text"]
                    out.append(json.dumps({"event": "message:delta", "agent": key.data, "text": text}))
                elif msg.get("id") == 2:
                    stdin = agents[int(key.data[1:])].stdin
                    assert stdin is not None
                    stdin.close()  # its turn is over: it ends
        if out:
            os.write(1, ("\n".join(out) + "\n").encode())
    for agent in agents:
        agent.wait()


if __name__ == "__main__":
    main()
