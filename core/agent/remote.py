"""An agent on another machine (`host = "…"`): its command run there through the OpenSSH client.

deck has no SSH of its own: `ssh` as installed does the work, with the user's keys, agent,
`~/.ssh/config`, ProxyJump and known_hosts, as in their shell. deck adds:

- `BatchMode=yes`: a host that wants a password, or whose key is unknown, fails at once with
  ssh's own line on stderr, never a prompt on deck's terminal (the agent's `ssh` arguments cannot
  turn it off);
- by default (the agent's `ssh` arguments may say otherwise): one multiplexed connection per host
  (`ControlMaster=auto`, its socket in `control_dir()`, `ControlPersist` a minute), shared by the
  agents there, so a second agent starts without a new handshake; keep-alives, so that a
  connection that drops is noticed within a minute (ssh exits 255).

On the host, a small POSIX sh script (`REMOTE_SCRIPT`) goes to the agent's `cwd`, starts the
command in a session of its own with the agent's `env` (and nothing else of deck's), and relays
the channel's input to it. When that input ends — deck stopped the agent, or deck or the
connection went away — the agent has REMOTE_GRACE seconds to end, then its whole process group
is sent SIGTERM, and REMOTE_GRACE seconds later SIGKILL. A descendant that left the group (a session
of its own, a daemon) is found by the mark in its environment (`DECK_RUN`, a token made per start)
through the host's /proc, and ended the same way: nothing of the agent is left running there.
"""

from __future__ import annotations

import os
import secrets
import shlex
import stat
from pathlib import Path

from deck.agent import sandbox
from deck.proc.supervisor import SpawnError

#: What deck always asks of ssh, before the user's own `ssh` arguments: ssh takes the first value it
#: is given for an option, so these hold whatever the user adds.
SSH_OPTIONS = (
    "-T",  # no terminal: the channel carries the ACP stream byte for byte
    "-o", "BatchMode=yes",
)  # fmt: skip
#: deck's defaults, after the user's arguments: theirs win (`-o ControlPath=none` for a connection of
#: the agent's own, `-o ServerAliveInterval=…`).
SSH_DEFAULTS = (
    "-o", "ConnectTimeout=15",
    "-o", "ServerAliveInterval=15",
    "-o", "ServerAliveCountMax=3",
    "-o", "ControlMaster=auto",
    "-o", "ControlPersist=60",
)  # fmt: skip
#: How long the agent has on its host between SIGTERM and SIGKILL once its input ended, in seconds.
REMOTE_GRACE = 3
#: The script the host's shell runs: {cwd}, {command}, {mark} and {grace} are filled in, each quoted;
#: {prelude} is the sandbox's (`sandbox.remote_prelude`), empty for an agent in none.
REMOTE_SCRIPT = """\
cd -- {cwd} || exit 126
{prelude}d=$(mktemp -d) && mkfifo "$d/in" || exit 126
exec 3<&0
setsid {command} <"$d/in" 3<&- &
pid=$!
marked() {{
  for e in /proc/[0-9]*/environ; do
    tr '\\000' '\\n' <"$e" 2>/dev/null | grep -qx {mark} && {{ p=${{e#/proc/}}; echo "${{p%/environ}}"; }}
  done
}}
( cat <&3 >"$d/in"
  for sig in TERM KILL; do
    i=0; while kill -0 -"$pid" 2>/dev/null && [ $i -lt {grace}0 ]; do sleep 0.1; i=$((i+1)); done
    kill -$sig -"$pid" 2>/dev/null
  done
  for sig in TERM KILL; do
    left=$(marked); [ -n "$left" ] || break
    kill -$sig $left
    i=0; while [ $i -lt {grace}0 ] && [ -n "$(marked)" ]; do sleep 0.5; i=$((i+5)); done
  done ) >/dev/null 2>&1 &
exec 3<&-
wait "$pid"; status=$?
rm -rf "$d"
exit $status
"""
#: The variable that marks every process of one start of an agent on its host, descendants included.
RUN_MARK = "DECK_RUN"
#: ssh's exit status when the connection failed or dropped (the remote command's own otherwise).
SSH_FAILED = 255


def ssh_command(
    host: str, ssh_args: list[str], cwd: str, command: list[str], env: dict[str, str], control: Path,
    sandboxed: sandbox.Sandbox | None = None,
) -> list[str]:
    """The local command line that runs `command` on `host`, in `cwd` there, with `env` only added;
    `sandboxed`: under bubblewrap there, refused (exit 126, the cause on stderr) where it cannot be."""
    mark = f"{RUN_MARK}={secrets.token_hex(8)}"
    assigned = [f"{name}={value}" for name, value in env.items()]
    prelude, run = "", shlex.join(["env", *assigned, mark, *command])
    if sandboxed is not None:
        prelude = sandbox.remote_prelude(sandboxed, cwd, {**env, RUN_MARK: mark.partition("=")[2]}, command)
        run = shlex.join(["env", mark, "bwrap"]) + ' "$@"'
    script = REMOTE_SCRIPT.format(
        cwd=shlex.quote(cwd), prelude=prelude, command=run, mark=shlex.quote(mark), grace=REMOTE_GRACE
    )  # fmt: skip
    # One word for the host's login shell, whatever it is: `sh -c SCRIPT`.
    return [*ssh_base(ssh_args, control), "--", host, "sh -c " + shlex.quote(script)]


def ssh_base(ssh_args: list[str], control: Path) -> list[str]:
    """`ssh` and its options, before `-- HOST COMMAND`: deck's own, the user's, deck's defaults."""
    return ["ssh", *SSH_OPTIONS, *ssh_args, *SSH_DEFAULTS, "-o", f"ControlPath={control / 'ssh-%C'}"]


def host_command(host: str, ssh_args: list[str], script: str, *args: str) -> list[str]:
    """The local command line that runs the sh `script` on `host` through the connection its agents
    share (the same options and socket), `args` its `$1`, `$2`…: each quoted, so the host's shell
    never reads an argument as anything but one word."""
    return [*ssh_base(ssh_args, control_dir()), "--", host, shlex.join(["sh", "-c", script, "sh", *args])]


def connection_lost(host: str, code: int | None) -> str | None:
    """What an agent's exit says when ssh itself failed (exit 255): the host named; else None."""
    if code == SSH_FAILED:
        return f"the connection to {host} failed or was lost (ssh exited 255; its stderr is in the agent's log)"
    return None


def control_dir() -> Path:
    """The folder of the multiplexed connections' sockets: `$XDG_RUNTIME_DIR/deck-ssh`, else
    `/tmp/deck-ssh-UID`; made 0700, and refused unless it is a folder of the user's own that nobody
    else may enter (a socket there reaches the user's hosts)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(runtime) / "deck-ssh" if runtime and os.path.isabs(runtime) else Path("/tmp") / f"deck-ssh-{os.getuid()}"
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise SpawnError(f"cannot make {folder} for ssh's connections: {exc.strerror}") from None
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise SpawnError(f"{folder} is not a folder of your own that only you may enter: ssh's connections are not kept there")
    return folder
