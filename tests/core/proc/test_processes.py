"""`start_process`: a helper process whose caller is cancelled as it starts is killed and reaped,
and the event loop's end never waits for ever on a process cancelled half made."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from deck.proc.processes import settled, start_process

pytestmark = pytest.mark.anyio

#: A process started, its caller cancelled at once, then the main coroutine ends: what `deck` does
#: when a server stops while a client's call runs git.
ENDING = textwrap.dedent("""
    import asyncio, sys
    from deck.cli.common import run_async
    from deck.proc.processes import start_process

    async def main():
        call = asyncio.ensure_future(start_process("sleep", "30", stdin=asyncio.subprocess.PIPE,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE))
        await asyncio.sleep(0)  # it is being made
        call.cancel()
        return 0

    sys.exit(run_async(main()))
""")


def test_the_loop_ends_though_a_process_was_cancelled_as_it_started(tmp_path: Path) -> None:
    for _ in range(5):
        done = subprocess.run([sys.executable, "-c", ENDING], capture_output=True, timeout=30)
        assert done.returncode == 0, done.stderr


async def test_a_caller_cancelled_as_its_process_starts_has_it_killed_and_reaped(tmp_path: Path) -> None:
    script = "import time; time.sleep(30)"
    call = asyncio.ensure_future(start_process(sys.executable, "-c", script, start_new_session=True,
                                               stdout=asyncio.subprocess.PIPE))  # fmt: skip
    await asyncio.sleep(0)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await settled()  # made, killed and reaped
    def ours(p: psutil.Process) -> bool:
        try:
            return p.cmdline()[-1:] == [script] and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:  # gone, or a zombie: not running
            return False

    assert not [p for p in psutil.Process().children() if ours(p)]


async def test_a_process_started_whole_is_the_callers() -> None:
    process = await start_process("sh", "-c", "echo made", stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    assert out == b"made\n" and process.returncode == 0 and os.getpid() != process.pid
