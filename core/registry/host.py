"""A registry agent's binary installed on another host (`host = "…"`, through the same ssh as its
agents, `deck.agent.remote`).

The host's platform is asked (`uname`); the archive is downloaded, checked and unpacked here as for
this machine (the same digest, caps and refusals), and the checked tree is sent to the host as a tar
stream that a small sh script unpacks into a temp folder beside
`${XDG_DATA_HOME:-~/.local/share}/deck/agents/ID/VERSION` there and renames into place: nothing of
a failed install is left on the host. npx and uvx agents need nothing installed: their pinned
command runs on the host as it is.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from deck.registry.catalog import Binary, Entry, RegistryError, platform_key, valid_id, valid_version
from deck.registry.download import Progress
from deck.registry.install import Installed, fetch_tree

#: Seconds for a short command on the host (uname, rm), and for sending the files.
SHORT_TIMEOUT = 60.0
SEND_TIMEOUT = 600.0

_FOLDER = '"${XDG_DATA_HOME:-$HOME/.local/share}/deck/agents/$1/$2"'

#: $1 id, $2 version, $3 the command inside; the tar stream on stdin; prints the folder.
RECEIVE = f"""\
d={_FOLDER}; base="${{d%/*}}"
if [ -f "$d/$3" ]; then cat >/dev/null; printf '%s\\n' "$d"; exit 0; fi
mkdir -p "$base" || exit 1
t=$(mktemp -d "$base/.$2.tmp-XXXXXX") || exit 1
if ! tar -xf - -C "$t"; then rm -rf "$t"; rmdir "$base" 2>/dev/null; exit 1; fi
chmod 755 "$t"
if [ -e "$d" ]; then rm -rf "$t"; else mv "$t" "$d" || {{ rm -rf "$t"; exit 1; }}; fi
printf '%s\\n' "$d"
"""

#: $1 id, $2 version: the version folder removed, and the id's folder if then empty.
REMOVE = f"""\
d={_FOLDER}
rm -rf "$d" && rmdir "${{d%/*}}" 2>/dev/null; exit 0
"""


def _run(
    host: str, ssh: list[str], script: str, *args: str, stdin: Path | None = None, timeout: float = SHORT_TIMEOUT
) -> str:
    """Run the sh `script` on `host`; its stdout. RegistryError with ssh's or the script's last error line."""
    from deck.agent.remote import host_command
    from deck.proc.supervisor import SpawnError

    try:
        command = host_command(host, ssh, script, *args)
    except SpawnError as exc:  # the folder of ssh's shared connections is not safe to use
        raise RegistryError(str(exc)) from None
    try:
        with open(stdin, "rb") if stdin else open("/dev/null", "rb") as source:
            done = subprocess.run(command, stdin=source, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RegistryError(f"{host} did not answer within {timeout:.0f} s") from None
    except OSError as exc:
        raise RegistryError(f"cannot run ssh: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RegistryError(f"on {host}: {said[-1][:300] if said else f'exit {done.returncode}'}")
    return done.stdout.decode("utf-8", "replace")


def host_platform(host: str, ssh: list[str]) -> str:
    """The host's platform as the registry names it (`linux-x86_64`)."""
    words = _run(host, ssh, "uname -s && uname -m").split()
    if len(words) != 2:
        raise RegistryError(f"{host}: cannot tell its platform from `uname` ({' '.join(words)[:100]!r})")
    return platform_key(words[0], words[1])


async def install_on_host(
    host: str, ssh: list[str], entry: Entry, binary: Binary, progress: Progress | None = None
) -> Installed:
    """`binary` downloaded and checked here, then unpacked into its version folder on `host`."""
    work = Path(tempfile.mkdtemp(prefix="deck-registry-"))
    try:
        tree = await fetch_tree(binary, work, progress)
        stream = work / "send.tar"
        with tarfile.open(stream, "w") as tar:
            for item in sorted(tree.iterdir()):
                tar.add(item, arcname=item.name)
        out = await asyncio.to_thread(
            _run, host, ssh, RECEIVE, entry.id, entry.version, binary.cmd, stdin=stream, timeout=SEND_TIMEOUT
        )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    folder = out.strip().splitlines()[-1] if out.strip() else ""
    if not folder.startswith("/"):
        raise RegistryError(f"{host}: the install did not say where it went")
    return Installed([f"{folder}/{binary.cmd}", *binary.args], dict(binary.env), folder)


def remove_on_host(host: str, ssh: list[str], ident: str, version: str) -> None:
    """Remove the version folder of `ident` on `host` (an id and a version that name folders, never `..`)."""
    if not (valid_id(ident) and valid_version(version)):
        raise RegistryError(f"{ident!r} {version!r} is not a registry id and version: nothing removed on {host}")
    _run(host, ssh, REMOVE, ident, version)
