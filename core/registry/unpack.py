"""Unpacking a downloaded archive into a folder, safely: no member lands outside it.

Refused, with the member named: an absolute path, a `..` component, a symbolic or hard link whose
target is outside the folder (or absolute), a member written through a link, a device, a FIFO or any
other special file, more than `MAX_MEMBERS` members, more than `max_total` bytes once unpacked (counted
as they are written, so a zip that lies about its sizes is stopped too). The folder is the caller's
fresh temp folder: on any error the caller removes it whole, and nothing of a half-unpacked archive is
ever used.

A link's target cannot be judged from its text alone: `c/..` is `.` on paper, but where `c` is itself
a link to `.`, each `..` climbs a real folder. So links are made last, once every file and folder is
written (nothing is ever written through one), and then each link of the tree is followed on disk, one
name at a time and through other links, as the system would: one that leaves the folder at any step
refuses the archive.

The formats are the registry's: `.zip`, `.tar.gz`/`.tgz`, `.tar.bz2`/`.tbz2`, `.tar.xz`, `.tar`, and
a bare executable (anything else), which is kept under the command's own name.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path
from typing import IO

from deck.registry.catalog import RegistryError

#: The most bytes an archive may unpack to.
MAX_TOTAL = 4 << 30
#: The most members an archive may have.
MAX_MEMBERS = 100_000
CHUNK = 1 << 16

_TARS = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar")


def archive_kind(url: str) -> str:
    """ "zip", "tar" or "file" (a bare executable), from the archive URL's name."""
    name = url.split("?", 1)[0].split("#", 1)[0].lower()
    if name.endswith(".zip"):
        return "zip"
    return "tar" if name.endswith(_TARS) else "file"


def unpack(archive: Path, dest: Path, kind: str, cmd: str, *, max_total: int = MAX_TOTAL) -> None:
    """Unpack `archive` (of `kind`) into the empty folder `dest`; a bare file becomes `dest/cmd`.
    RegistryError naming the first member refused."""
    if kind == "zip":
        _unzip(archive, dest, max_total)
    elif kind == "tar":
        _untar(archive, dest, max_total)
    else:
        if archive.stat().st_size > max_total:
            raise RegistryError(f"the download is more than {max_total} bytes")
        target = dest / _safe_name(cmd)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(archive, target)


def _safe_name(name: str) -> str:
    """`name` as a relative path inside the folder; RegistryError if it is absolute or climbs out."""
    cleaned = name.replace("\\", "/") if "\\" in name and "/" not in name else name
    parts = [p for p in cleaned.split("/") if p not in ("", ".")]
    if cleaned.startswith("/") or (len(cleaned) > 1 and cleaned[1] == ":"):
        raise RegistryError(f"archive member {name[:200]!r} has an absolute path: not installed")
    if ".." in parts:
        raise RegistryError(f"archive member {name[:200]!r} climbs out of its folder (..): not installed")
    if not parts or "\0" in name:
        raise RegistryError(f"archive member {name[:200]!r} has no usable name: not installed")
    return "/".join(parts)


def _is_top(name: str) -> bool:
    """Whether `name` is the archive's top folder itself (`.`, `./`)."""
    return name.strip("/") in (".", "") and not name.startswith("/")


def _inside_link(member: str, target: str) -> None:
    """A symbolic link at `member` pointing to `target` must stay inside the folder."""
    if target.startswith("/") or not target:
        raise RegistryError(
            f"archive member {member[:200]!r} links to an absolute path {target[:200]!r}: not installed"
        )
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(member), target))
    if resolved == ".." or resolved.startswith("../"):
        raise RegistryError(
            f"archive member {member[:200]!r} links out of its folder ({target[:200]!r}): not installed"
        )


def _count(members: int, total: int, max_total: int) -> None:
    if members > MAX_MEMBERS:
        raise RegistryError(f"the archive has more than {MAX_MEMBERS} members: not installed")
    if total > max_total:
        raise RegistryError(f"the archive unpacks to more than {max_total} bytes: not installed")


def _untar(archive: Path, dest: Path, max_total: int) -> None:
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = _checked_tar(tar, max_total)
            for member in sorted(members, key=lambda m: m.issym() or m.islnk()):  # links last
                _extract_tar_member(tar, member, dest)
        _links_stay_inside(dest)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise RegistryError(f"the archive cannot be unpacked: {str(exc)[:200] or type(exc).__name__}") from None


def _checked_tar(tar: tarfile.TarFile, max_total: int) -> list[tarfile.TarInfo]:
    """Every member of `tar`, each checked, before anything is written."""
    members, total = [], 0
    for member in tar:
        if member.isdir() and _is_top(member.name):
            continue  # `./`, as `tar -C folder -c .` writes first: the folder itself
        name = _safe_name(member.name)
        if member.issym():
            _inside_link(name, member.linkname)
        elif member.islnk():
            _safe_name(member.linkname)  # a hard link names another member: inside, never above
        elif not (member.isfile() or member.isdir()):
            kind = "a device" if member.ischr() or member.isblk() else "a FIFO" if member.isfifo() else "a special file"
            raise RegistryError(f"archive member {member.name[:200]!r} is {kind}: not installed")
        total += member.size if member.isfile() else 0
        members.append(member)
        _count(len(members), total, max_total)
    return members


def _extract_tar_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    """One checked member, written by tarfile's own `data` filter as a second guard (it refuses a path
    that a link made earlier would lead out)."""
    name = _safe_name(member.name)
    _no_link_above(dest, name, itself=member.isdir())
    if member.issym() or member.islnk():
        _nothing_there(dest, name)
    try:
        tar.extract(member, dest, filter="data")
    except tarfile.FilterError as exc:
        raise RegistryError(f"archive member {member.name[:200]!r} refused: {exc}") from None


def _unzip(archive: Path, dest: Path, max_total: int) -> None:
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            _count(len(infos), sum(i.file_size for i in infos), max_total)
            written = 0
            for info in sorted(infos, key=_is_zip_link):  # links last
                written += _extract_zip_member(zf, info, dest, max_total - written)
        _links_stay_inside(dest)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
        raise RegistryError(f"the archive cannot be unpacked: {str(exc)[:200] or type(exc).__name__}") from None


def _extract_zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, room: int) -> int:
    """Write one member of a zip (a folder, a file, a link inside); the bytes written."""
    if info.is_dir() and _is_top(info.filename):
        return 0
    name = _safe_name(info.filename)
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    target = dest / name
    _no_link_above(dest, name, itself=info.is_dir())
    if info.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind == stat.S_IFLNK:
        if info.file_size > 4096:  # a link's target is its content: never a large one
            size = info.file_size
            raise RegistryError(f"archive member {info.filename[:200]!r} is a link of {size} bytes: not installed")
        link = zf.read(info)[:4096].decode("utf-8", "replace")
        _inside_link(name, link)
        _nothing_there(dest, name)
        os.symlink(link, target)
        return 0
    if kind not in (0, stat.S_IFREG):
        raise RegistryError(
            f"archive member {info.filename[:200]!r} is a device, a FIFO or a special file: not installed"
        )
    with zf.open(info) as src, open(target, "xb") as out:
        written = _copy_capped(src, out, room)
    if mode & 0o111:
        os.chmod(target, 0o755)
    return written


def _is_zip_link(info: zipfile.ZipInfo) -> bool:
    return stat.S_IFMT(info.external_attr >> 16) == stat.S_IFLNK


def _no_link_above(dest: Path, name: str, itself: bool = False) -> None:
    """No folder on the way to member `name` (nor, for a folder member, `name` itself) may be a link made
    by an earlier member: `mkdir` and `open` would follow it, and it may lead out."""
    here = dest
    parts = name.split("/")
    for part in parts if itself else parts[:-1]:
        here = here / part
        if here.is_symlink():
            raise RegistryError(f"archive member {name[:200]!r} is written through a link: not installed")


def _nothing_there(dest: Path, name: str) -> None:
    """A link, made last, may not take the place of a member written before it: a folder there means
    other members were written where the link would have led them."""
    path = dest / name
    if path.is_dir() and not path.is_symlink():
        raise RegistryError(f"archive member {name[:200]!r} is a link other members are written through: not installed")
    if os.path.lexists(path):
        raise RegistryError(f"archive member {name[:200]!r} is a link where another member is: not installed")


def _links_stay_inside(dest: Path) -> None:
    """Every link of the unpacked tree, followed on disk, stays inside `dest` at each step."""
    for folder, dirs, files in os.walk(dest):
        for name in dirs + files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                _follow_inside(str(dest), os.path.relpath(path, dest))


def _follow_inside(root: str, member: str) -> None:
    """Walk to the link `member` (a path under `root`) and on through its target one name at a time, as
    the system would, through every link met; RegistryError as soon as a step leaves `root`, a target is
    an absolute path, or the links go round in a loop."""
    here: list[str] = []  # the folders walked into under root, none of them a link
    todo, hops = member.split("/"), 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not here:
                raise RegistryError(f"archive member {member[:200]!r} links out of its folder: not installed")
            here.pop()
            continue
        path = os.path.join(root, *here, part)
        if not os.path.islink(path):
            here.append(part)
            continue
        target, hops = os.readlink(path), hops + 1
        if target.startswith("/"):
            raise RegistryError(f"archive member {member[:200]!r} leads to an absolute path: not installed")
        if hops > 40:
            raise RegistryError(f"archive member {member[:200]!r} links round in a loop: not installed")
        todo = target.split("/") + todo


def _copy_capped(src: IO[bytes], out: IO[bytes], room: int) -> int:
    written = 0
    while chunk := src.read(CHUNK):
        written += len(chunk)
        if written > room:
            raise RegistryError("the archive unpacks to more bytes than it says, past deck's cap: not installed")
        out.write(chunk)
    return written


def find_command(dest: Path, cmd: str) -> Path:
    """The unpacked command `dest/cmd`, a regular file inside `dest` (never a link out), made executable."""
    path = dest / cmd
    real = Path(os.path.realpath(path))
    root = Path(os.path.realpath(dest))
    if not real.is_relative_to(root) or not real.is_file():
        raise RegistryError(f"the archive has no file {cmd!r} (the registry's cmd): not installed")
    os.chmod(real, stat.S_IMODE(real.stat().st_mode) | 0o755)
    return path
