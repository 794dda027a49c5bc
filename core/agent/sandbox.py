"""An agent in a sandbox (`sandbox = true`): its command run under bubblewrap (`bwrap`) as the
distribution packages it. deck has no sandbox code of its own: it builds bwrap's arguments.

Inside, the agent and what it starts see the file system read-only, but for its working folder,
its additional directories and its `write` paths; a private `/tmp`, `/dev` and `/proc` (a PID
namespace of its own: no process outside it can be seen or signalled); an empty folder (or an
empty file) in place of each hidden path: `HIDDEN` and the `hide` paths, deck's own folders
(config, state — its history, logs and every worktree —, runtime: sockets and tokens) and deck's
config file; only its `env` and `KEPT_VARIABLES` of deck's environment; no network but a loopback
of its own with `network = false`; a session of its own (no TIOCSTI into the user's terminal);
no capability, even run by root (`--cap-drop ALL`: nothing hidden can be unmounted, nothing
remounted writable). The folders deck keeps for its agents to reach (the asks bridge's socket)
are bound back in. It ends with deck (`--die-with-parent`) and, a PID namespace, all at once.

A sandbox is never silently dropped: where bwrap is missing, or cannot make its namespaces,
`check()` says why and what to do in one line, and the agent does not start.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from deck.config.models import AgentConfig, SandboxDefaults, SandboxTable
from deck.proc.supervisor import SpawnError

#: The secret folders and files hidden from every sandboxed agent (`~` is the user's home), before
#: an agent's own `hide` paths.
HIDDEN = (
    "~/.ssh", "~/.gnupg", "~/.aws", "~/.azure", "~/.config/gcloud", "~/.config/gh", "~/.docker", "~/.kube",
    "~/.netrc", "~/.password-store",
)  # fmt: skip
#: What a sandboxed agent gets of deck's environment, besides its own `env`.
KEPT_VARIABLES = ("HOME", "PATH", "LANG", "TERM", "USER")
#: The folders each sandbox has its own of: what is beneath them is out of sight already.
PRIVATE = ("/tmp", "/dev", "/proc")
#: The bubblewrap command.
BWRAP = "bwrap"
#: How long the check that bwrap can make its namespaces may take, in seconds.
CHECK_TIMEOUT = 10.0
#: The arguments of that check.
PROBE = ("--die-with-parent", "--unshare-pid", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--proc", "/proc")
#: deck's folders on a host, hidden from a sandboxed agent there (its worktree, within, is bound back).
HOST_FOLDERS = ("~/.config/deck", "~/.local/state/deck")
HOST_MISSING = "deck: sandbox: bwrap is not installed on this host: install bubblewrap there, or set sandbox = false"
HOST_BROKEN = ("deck: sandbox: bwrap cannot make its namespaces on this host: allow unprivileged user namespaces "
               "there (sysctl kernel.unprivileged_userns_clone=1), or set sandbox = false")  # fmt: skip


@dataclass(frozen=True)
class Sandbox:
    """What an agent's sandbox lets it write, what it hides from it, and whether it has the network."""

    write: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    network: bool = True

    def describe(self, writable: Iterable[str]) -> dict[str, object]:
        """As `AgentService.List()` gives it: `{enabled, network, write}`."""
        return {"enabled": True, "network": self.network, "write": list(writable)}


@dataclass
class View:
    """One sandboxed command's view of the machine: the folders it writes, those hidden from it,
    those of deck's it reaches all the same, and its environment."""

    sandbox: Sandbox
    cwd: str
    writable: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    #: What it must read under a folder it has its own of (/tmp): its program, deck's own install.
    readable: list[str] = field(default_factory=list)
    reachable: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def command(self, argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None) -> list[str]:
        """`argv` run in the sandbox, in `cwd` there (default: the agent's), with `env` added to the agent's."""
        args = [BWRAP, *_isolation(self.sandbox)]
        bound = [*self.writable, *self.reachable]
        hidden = [p for p in self.hidden if p not in bound]  # what deck keeps for the agent to reach shows
        inside = [p for p in hidden if any(_within(p, w) for w in bound)]
        seen = [p for p in hidden if not any(_within(p, f) for f in PRIVATE) or any(_within(p, r) for r in self.readable)]
        shown = [p for p in seen if p not in inside]  # beneath /tmp, only what a folder read there shows
        for path in self.readable:
            args += ["--ro-bind", path, path]
        for path in shown:  # first: a folder bound below one shows again
            args += _hiding(path)
        # Then, parents before what is beneath them: a bound folder, what is hidden in it (deck's
        # config file in the agent's cwd, deck's state in a home bound writable), a folder bound in that.
        mounts = [(p, 0) for p in bound] + [(p, 1) for p in inside]
        for path, hiding in sorted(mounts, key=lambda m: (m[0].rstrip("/").count("/"), m[1])):
            args += _hiding(path) if hiding else ["--bind", path, path]
        args.append("--clearenv")
        for name, value in {**self.env, **(env or {})}.items():
            args += ["--setenv", name, value]
        return [*args, "--chdir", cwd or self.cwd, "--", *argv]


def resolve(agent: AgentConfig, defaults: SandboxDefaults) -> Sandbox | None:
    """The sandbox an agent's config asks for: its `sandbox` (true, false, a table), else `[sandbox]
    default`; a table's `write` and `hide` add to `[sandbox]`'s, its `network` replaces it."""
    own = agent.sandbox
    if own is False or (own is None and not defaults.default):
        return None
    if not isinstance(own, SandboxTable):  # true, or the default: [sandbox] as it is
        return Sandbox(tuple(defaults.write), tuple(defaults.hide), defaults.network is not False)
    network = own.network if own.network is not None else defaults.network is not False
    return Sandbox((*defaults.write, *own.write), (*defaults.hide, *own.hide), network)


def view(
    sandbox: Sandbox,
    cwd: str,
    directories: Iterable[str],
    env: dict[str, str],
    private: Iterable[str | Path],
    reachable: Iterable[str | Path],
    command: Iterable[str] = (),
) -> View:
    """The view of an agent in `cwd` with `directories`, its `env` (added to KEPT_VARIABLES of
    deck's), deck's `private` folders and files hidden and its `reachable` ones bound back in.

    A `write` folder that does not exist yet is made (0700): an agent's state folder is made on
    its first run; a `write` file (a name with a suffix, ~/.claude.json) must exist, as deck cannot
    know what its agent wants in it. A hidden path that does not exist is left alone."""
    writable = _unique([cwd, *directories, *(_expand(p) for p in sandbox.write)])
    for path in writable:
        if os.path.exists(path):  # a file there (~/.claude.json) is bound as it is
            continue
        if "." in os.path.basename(path)[1:]:
            raise SpawnError(f"sandbox: {path}, a file it may write, does not exist: create it (or run the agent once unsandboxed)")
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise SpawnError(f"sandbox: cannot make the folder it may write, {path}: {exc.strerror}") from None
    hidden = [p for p in _unique(_expand(str(p)) for p in (*HIDDEN, *sandbox.hide, *private)) if os.path.lexists(p)]
    kept = {name: os.environ[name] for name in KEPT_VARIABLES if name in os.environ}
    reached = _unique(_expand(str(p)) for p in reachable if os.path.exists(p))
    return View(sandbox, cwd, writable, hidden, readable(command), reached, {**kept, **env})


def readable(command: Iterable[str]) -> list[str]:
    """What a sandboxed command must still read beneath /tmp, which it has a fresh one of: the
    folders of its program and of the files its arguments name, and deck's own install (its
    interpreter and package: the asks bridge runs from them) when it lies there."""
    deck = sys.modules["deck"]  # the package this module is in, loaded: its folders, not another import

    wanted = []
    for word in command:
        found = shutil.which(word) if os.sep not in word else word
        if found and os.path.isabs(found) and os.path.exists(found):
            wanted.append(os.path.dirname(os.path.abspath(found)) if os.path.isfile(found) else os.path.abspath(found))
    package = [os.path.realpath(p) for p in deck.__path__]
    wanted.append(os.path.commonpath([sys.prefix, *package, *(os.path.dirname(p) for p in deck.__path__)]))
    under = [p for p in _unique(wanted) if any(_within(p, f) for f in PRIVATE) and p.rstrip("/") not in PRIVATE]
    return [p for p in under if not any(p != q and _within(p, q) for q in under)]  # the outermost of each


def remote_prelude(sandbox: Sandbox, cwd: str, env: dict[str, str], command: list[str]) -> str:
    """The host's sh lines that make `"$@"` bwrap's arguments for `command` in `cwd` there: the same
    sandbox as here, its `~` the host's home and deck's folders there hidden; refused (exit 126, the
    cause on stderr) where the host has no bwrap or it cannot make its namespaces."""

    def there(path: str) -> str:  # `~/x` → "$HOME"/'x', for the host's shell
        return '"$HOME"' + shlex.quote(path[1:]) if path.startswith("~/") or path == "~" else shlex.quote(path)

    hide = [*HIDDEN, *sandbox.hide, *HOST_FOLDERS]
    lines = [
        f"command -v {BWRAP} >/dev/null 2>&1 || {{ echo {shlex.quote(HOST_MISSING)} >&2; exit 126; }}",
        f"{BWRAP} {' '.join(PROBE)} true 2>/dev/null || {{ echo {shlex.quote(HOST_BROKEN)} >&2; exit 126; }}",
        "set -- " + " ".join(shlex.quote(a) for a in _isolation(sandbox)),
        f"for p in {' '.join(there(p) for p in hide)}; do",
        '  if [ -d "$p" ]; then set -- "$@" --tmpfs "$p"; elif [ -e "$p" ]; then set -- "$@" --ro-bind /dev/null "$p"; fi',
        "done",
        f"for p in {' '.join(there(p) for p in (cwd, *sandbox.write))}; do",
        '  { [ -e "$p" ] || mkdir -p "$p"; } && set -- "$@" --bind "$p" "$p"',
        "done",
        *(f'[ -d {shlex.quote(folder)} ] && set -- "$@" --ro-bind {shlex.quote(folder)} {shlex.quote(folder)}'
          for folder in _unique(os.path.dirname(w) for w in command if w.startswith("/tmp/"))),  # a fresh /tmp there too
        'set -- "$@" --clearenv',
        f"for v in {' '.join(KEPT_VARIABLES)}; do",
        '  eval "x=\\${$v-}"; [ -n "$x" ] && set -- "$@" --setenv "$v" "$x"',
        "done",
        'set -- "$@" ' + " ".join(shlex.quote(a) for name, value in env.items() for a in ("--setenv", name, value)),
        f'set -- "$@" --chdir {shlex.quote(cwd)} -- ' + shlex.join(command),
    ]
    return "\n".join(lines) + "\n"


def deck_folders(config_path: Path | None) -> list[Path]:
    """deck's own folders and file an agent never sees: its config folder and file, its state
    (history, logs, worktrees) and its runtime folders (servers' sockets and tokens, ssh's)."""
    from deck.proc.folders import socket_dir
    from deck.proc.storage import state_dir

    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    folders = [config_home / "deck", state_dir(), socket_dir()]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folders.append(Path(runtime) / "deck-ssh" if runtime and os.path.isabs(runtime) else Path("/tmp") / f"deck-ssh-{os.getuid()}")
    if config_path is not None:
        folders.append(config_path)
    return folders


@functools.cache
def check() -> str | None:
    """Why no sandbox can be made here (one line, the fix in it), or None when bwrap works."""
    if sys.platform == "darwin":
        return "sandbox: not supported on macOS yet (deck sandboxes through bubblewrap on Linux): set sandbox = false"
    if not sys.platform.startswith("linux"):
        return f"sandbox: not supported on {sys.platform} (deck sandboxes through bubblewrap on Linux): set sandbox = false"
    found = shutil.which(BWRAP)
    if found is None:
        return "sandbox: bwrap is not installed: install bubblewrap (apt install bubblewrap, dnf install bubblewrap), or set sandbox = false"
    probe = [BWRAP, *PROBE, "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=CHECK_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sandbox: bwrap did not run: {exc}"
    if done.returncode != 0:
        why = " ".join(done.stderr.split())[:300] or f"exit {done.returncode}"
        return (f"sandbox: bwrap cannot make its namespaces here ({why}): allow unprivileged user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1, or the AppArmor profile for bwrap), or set sandbox = false")  # fmt: skip
    return None


def required() -> None:
    """SpawnError, with the cause and the fix, unless a sandbox can be made here."""
    problem = check()
    if problem is not None:
        raise SpawnError(problem)


def _isolation(sandbox: Sandbox) -> list[str]:
    """bwrap's arguments before the folders: the namespaces, no capability, the read-only root."""
    args = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
    if not sandbox.network:
        args.append("--unshare-net")
    return [*args, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]


def _hiding(path: str) -> list[str]:
    """bwrap's arguments that put an empty folder (an empty file) in place of `path`."""
    return ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]


def _expand(path: str) -> str:
    return str(Path(os.path.expanduser(path)).resolve())


def _within(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or beneath it."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _unique(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(paths))
