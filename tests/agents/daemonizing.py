"""An agent that first leaves a daemon behind, the classic way, then runs as the fake agent.

`daemonizing.py PIDFILE [--until FILE] [--own-session] [-- FAKE_AGENT_FLAGS...]`: fork;
the child calls setsid, forks the daemon, writes the daemon's pid to PIDFILE and
exits. The daemon is an orphan in another session than the agent's before deck
ever sees it (the child's session; its own with --own-session: it calls setsid
too), its stdio on /dev/null; it sleeps (until FILE exists, then it exits, with
--until). The agent waits for the child to exit, so PIDFILE is written, then
becomes the fake agent (exec).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

FAKE_AGENT = Path(__file__).with_name("fake_agent.py")


def daemon(until: str | None, own_session: bool) -> None:
    if own_session:
        os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (until and os.path.exists(until)):
        time.sleep(0.02)
    os._exit(0)


def main() -> None:
    pidfile, *rest = sys.argv[1:]
    until = None
    if rest[:1] == ["--until"]:
        until, rest = rest[1], rest[2:]
    own_session = rest[:1] == ["--own-session"]
    rest = rest[own_session:]
    flags = rest[1:] if rest[:1] == ["--"] else rest
    child = os.fork()
    if child == 0:
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            daemon(until, own_session)
        Path(pidfile).write_text(str(grandchild))
        os._exit(0)
    os.waitpid(child, 0)
    os.execv(sys.executable, [sys.executable, str(FAKE_AGENT), *flags])


if __name__ == "__main__":
    main()
