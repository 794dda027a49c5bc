"""The watcher that ends what deck's agents left when deck itself dies, even by SIGKILL.

Deck starts it once, before its first agent, as `python -I -S sentinel.py PREFIX`
with a pipe on its stdin. It forks away at once, so it is no descendant of deck
and in no session or group of deck's: a SIGKILL of deck, or of deck's group,
leaves it alone. Deck holds the only write end of the pipe, and the kernel
closes that end however deck ends. Until then deck writes `PID START` lines:
processes it saw in an agent's tree. At the end of the pipe the sentinel
SIGKILLs every process whose environment carries one of deck's agent tokens
(`DECK_AGENT_TOKEN=PREFIX.N`), every listed process that is still the same
process, and everything those launched; then it exits. At a normal exit deck
closes the pipe itself and waits until the sentinel's stdout (never written)
is closed: the sentinel does not outlive deck then, and finds nothing left.

The standard library only (it reads /proc), so it starts in milliseconds; where
there is no /proc it needs psutil, and runs without -S.
"""

from __future__ import annotations

import os
import signal
import sys
import time

TOKEN_VAR = "DECK_AGENT_TOKEN"
#: Scans of the sweep: a process that forks while it runs is caught by the next one.
ROUNDS = 5
#: How many listed processes are kept before the dead ones are dropped.
LISTED_MAX = 4096
_PROC = os.path.exists("/proc/self/stat")


class Stat:
    """What /proc/PID/stat says of a process (a plain class: typing's NamedTuple would add the
    import of typing to the sentinel's start, which every deck's first agent waits for)."""

    __slots__ = ("state", "ppid", "session", "start")

    def __init__(self, state: str, ppid: int, session: int, start: str) -> None:
        self.state = state  # "Z": a zombie, "X": dead
        self.ppid = ppid
        self.session = session  # -1 where there is no /proc
        self.start = start  # when it started: a reused pid has another start


def stat(pid: int) -> Stat | None:
    """What /proc/PID/stat says of `pid` (psutil where there is no /proc); None when it is gone."""
    if not _PROC:
        import psutil

        try:
            p = psutil.Process(pid)
            with p.oneshot():
                state = "Z" if p.status() == psutil.STATUS_ZOMBIE else "R"
                return Stat(state, p.ppid(), -1, repr(p.create_time()))
        except psutil.Error:
            return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the name, in parentheses, may hold anything
        return Stat(fields[0].decode(), int(fields[1]), int(fields[3]), fields[19].decode())
    except (OSError, IndexError, ValueError):
        return None


def identity(pid: int) -> str | None:
    """When `pid` started; None when it is gone."""
    found = stat(pid)
    return found.start if found else None


def _pids() -> list[int]:
    if not _PROC:
        import psutil

        return psutil.pids()
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def carries(pid: int, marker: bytes) -> bool:
    """Whether the environment `pid` started with has an entry beginning with `marker`."""
    if not _PROC:
        import psutil

        try:
            value = psutil.Process(pid).environ().get(TOKEN_VAR)
        except psutil.Error:
            return False
        return value is not None and f"{TOKEN_VAR}={value}".encode().startswith(marker)
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return False
    return any(entry.startswith(marker) for entry in environ.split(b"\0"))


def sweep(prefix: str, listed: dict[int, str]) -> int:
    """SIGKILL what deck's agents left: token carriers, listed processes, their descendants; how many."""
    marker = f"{TOKEN_VAR}={prefix}.".encode()
    me = os.getpid()
    killed = 0
    for _ in range(ROUNDS):
        seen = {pid: found for pid in _pids() if pid != me and (found := stat(pid)) and found.state not in ("Z", "X")}
        targets = {pid for pid, found in seen.items() if listed.get(pid) == found.start or carries(pid, marker)}
        children: dict[int, list[int]] = {}
        for pid, found in seen.items():
            children.setdefault(found.ppid, []).append(pid)
        todo = list(targets)
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in targets:
                    targets.add(child)
                    todo.append(child)
        hit = sum(_kill(pid, seen[pid].start) for pid in targets)
        if not hit:
            break
        killed += hit
        time.sleep(0.05)  # let them die before the next scan
    return killed


def _kill(pid: int, start: str) -> bool:
    """SIGKILL `pid` if it is still the process that started at `start` (through a pidfd: no reuse race)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = -1
    try:
        if identity(pid) != start:
            return False
        if fd >= 0:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    finally:
        if fd >= 0:
            os.close(fd)
    return True


def watch(prefix: str) -> None:
    """Read `PID START` lines until deck is gone, then sweep."""
    for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's, meant for deck
        signal.signal(sig, signal.SIG_IGN)
    listed: dict[int, str] = {}
    limit = LISTED_MAX
    for line in sys.stdin.buffer:
        pid, _, start = line.decode(errors="replace").strip().partition(" ")
        if pid.isdigit() and start:
            listed[int(pid)] = start
        if len(listed) > limit:
            listed = {p: s for p, s in listed.items() if identity(p) == s}
            limit = max(LISTED_MAX, 2 * len(listed))
    sweep(prefix, listed)


def main() -> None:
    prefix = sys.argv[1]
    if os.fork():  # deck waits for this exit: the watcher goes on, re-parented away from deck
        os._exit(0)
    os.chdir("/")
    watch(prefix)  # stdout, never written, stays open until the exit: deck waits for that at its own exit


if __name__ == "__main__":
    main()
