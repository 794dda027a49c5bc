"""An agent of the registry made runnable: its pinned command for npx or uvx, or its binary for
this platform downloaded and unpacked into `$XDG_DATA_HOME/deck/agents/ID/VERSION/`.

A binary is downloaded and unpacked into a temp folder beside its final one, which is renamed into
place only once the command is found in it: a failed install leaves nothing, and of two installs of
one version at once the first rename wins while the second finds it there and removes its own copy.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from deck.errors import ExitCode
from deck.registry.catalog import Binary, Entry, Package, RegistryError
from deck.registry.download import Progress, download
from deck.registry.unpack import archive_kind, find_command, unpack

#: The order a distribution is chosen in when the user does not name one: no download by deck first.
METHODS = ("npx", "uvx", "binary")


@dataclass(frozen=True)
class Installed:
    """What the config's entry gets: the command, the environment the registry gives, and the folder
    deck downloaded the binary into (None for npx and uvx)."""

    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    folder: str | None = None


def data_dir() -> Path:
    """Where binaries of the registry's agents go: `$XDG_DATA_HOME/deck/agents`."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "deck" / "agents"


def choose(entry: Entry, platform: str, via: str | None = None) -> Package | Binary:
    """The distribution to install `entry` by: `via` if given, else the first of METHODS it has
    (a binary only for `platform`). RegistryError naming the platform key when there is none."""
    if via is not None and via not in METHODS:
        raise RegistryError(f"--via {via!r}: use npx, uvx or binary", ExitCode.USAGE)
    for method in [via] if via else METHODS:
        if method in entry.packages:
            return entry.packages[method]
        if method == "binary" and platform in entry.binaries:
            return entry.binaries[platform]
    if via is not None and (via != "binary" or not entry.binaries):
        raise RegistryError(
            f"{entry.id} {entry.version} has no {via} distribution (it has {', '.join(entry.methods())})"
        )
    builds = ", ".join(entry.binaries) or "none"
    raise RegistryError(f"{entry.id} {entry.version} has no build for this platform, {platform} (builds: {builds})")


def package_command(package: Package) -> list[str]:
    """`npx -y PACKAGE@VERSION ARGS`, `uvx PACKAGE==VERSION ARGS`, or with the registry's `cmd`:
    `npx -y --package PACKAGE CMD ARGS`, `uvx --from PACKAGE CMD ARGS`."""
    if package.kind == "npx":
        head = (
            ["npx", "-y", "--package", package.package, package.cmd] if package.cmd else ["npx", "-y", package.package]
        )
    else:
        head = ["uvx", "--from", package.package, package.cmd] if package.cmd else ["uvx", package.package]
    return [*head, *package.args]


def version_folder(entry: Entry, root: Path | None = None) -> Path:
    return (root or data_dir()) / entry.id / entry.version


async def install_binary(
    entry: Entry, binary: Binary, progress: Progress | None = None, root: Path | None = None
) -> Installed:
    """`binary` of `entry` downloaded, checked and unpacked into its version folder (kept if it is there)."""
    final = version_folder(entry, root)
    if not (final / binary.cmd).is_file():
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{entry.version}.tmp-", dir=final.parent))
        try:
            tree = await fetch_tree(binary, work, progress)
            _move_into_place(tree, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            _remove_if_empty(final.parent)
    if not (final / binary.cmd).is_file():  # a folder of that version left there by something else
        raise RegistryError(f"{final} is there without {binary.cmd}: remove that folder, then add the agent again")
    command = find_command(final, binary.cmd)
    return Installed([str(command), *binary.args], dict(binary.env), str(final))


async def fetch_tree(binary: Binary, work: Path, progress: Progress | None = None) -> Path:
    """Download `binary`'s archive into `work` and unpack it there; the folder it is unpacked in,
    the command checked inside it."""
    archive, tree = work / "download", work / "tree"
    await download(binary.archive, archive, sha256=binary.sha256, progress=progress)
    tree.mkdir()
    unpack(archive, tree, archive_kind(binary.archive), binary.cmd)
    find_command(tree, binary.cmd)
    return tree


def _move_into_place(tree: Path, final: Path) -> None:
    """Rename the unpacked `tree` to `final`; one there already (another install won) is kept."""
    try:
        os.rename(tree, final)
    except OSError:
        if not final.is_dir():
            raise


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def remove_folder(folder: str, root: Path | None = None) -> bool:
    """Remove a version folder deck downloaded (only one under `data_dir()`), and its id's folder if
    that is then empty. Whether anything was removed."""
    base = (root or data_dir()).resolve()
    path = Path(folder)
    if not path.resolve().is_relative_to(base) or path.resolve() == base or not path.is_dir():
        return False
    shutil.rmtree(path, ignore_errors=True)
    _remove_if_empty(path.parent)
    return True
