"""The peer: the official ACP Python SDK (`agent-client-protocol`) turning the producer's stream into JSON lines.

Usage: sdk_peer.py N S
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import acp

PRODUCER = Path(__file__).with_name("producer.py")


class Client:
    def __init__(self) -> None:
        self.out = sys.stdout

    async def session_update(self, session_id, update, **kwargs) -> None:
        self.out.write(json.dumps({"event": "message:delta", "agent": "bench", "text": update.content.text}) + "\n")

    def on_connect(self, conn) -> None:
        pass


async def main() -> None:
    async with acp.spawn_agent_process(
        Client(), sys.executable, str(PRODUCER), *sys.argv[1:3],
        transport_kwargs={"stderr": asyncio.subprocess.DEVNULL, "limit": 64 * 1024 * 1024},
    ) as (conn, _process):  # fmt: skip
        await conn.initialize(protocol_version=1)
        session = await conn.new_session(cwd="/", mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("go")])
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
