"""Short-lived helper processes (git, ssh checks, notification commands) started from the event loop.

`start_process` is `asyncio.create_subprocess_exec` made safe to cancel. On Python 3.11 a process
cancelled while asyncio connects its pipes can leave its task waiting for ever (the transport,
closed half made, waits for the end of a pipe it never connected): `asyncio.run`, which cancels
every task left when the main one ends, then never returns. So the creation runs in a task of its
own that no caller's cancel reaches; a caller cancelled meanwhile has the new process killed (its
group when it leads one) and reaped. `settled()` waits for the creations and reapings under way:
`deck` awaits it before its event loop ends, so that none is cancelled half made.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

#: Seconds `settled` waits for processes being started.
SETTLE_MAX = 5.0

#: The creations under way, and the waits of processes killed by `_reap` (asyncio holds tasks weakly).
_CREATING: set[asyncio.Future[asyncio.subprocess.Process]] = set()
_REAPING: set[asyncio.Future[int]] = set()


async def start_process(*argv: str, **options: Any) -> asyncio.subprocess.Process:
    """`asyncio.create_subprocess_exec(*argv, **options)`, safe to cancel at any point."""
    creating = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, **options))
    _CREATING.add(creating)
    creating.add_done_callback(_CREATING.discard)
    try:
        return await asyncio.shield(creating)
    except asyncio.CancelledError:
        creating.add_done_callback(_reap)
        raise


async def settled() -> None:
    """Return once no process is being started, or killed for a cancelled caller and not yet
    reaped (at most SETTLE_MAX seconds)."""
    deadline = asyncio.get_running_loop().time() + SETTLE_MAX
    while (busy := _CREATING | _REAPING) and (left := deadline - asyncio.get_running_loop().time()) > 0:
        await asyncio.wait(busy, timeout=left)


def _reap(creating: asyncio.Future[asyncio.subprocess.Process]) -> None:
    """A process nobody waits for any more (its caller was cancelled as it started): killed, its
    group too when it leads one, then waited for in the background so that it leaves no zombie."""
    if creating.cancelled() or creating.exception() is not None:
        return
    process = creating.result()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    waiting = asyncio.ensure_future(process.wait())
    _REAPING.add(waiting)
    waiting.add_done_callback(_REAPING.discard)
