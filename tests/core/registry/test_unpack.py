"""Unpacking an agent's archive: every hostile member refused by name, nothing written outside the
folder, the size and member caps, and what a good tar, zip or bare file gives."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from deck.registry.catalog import RegistryError
from deck.registry.unpack import archive_kind, find_command, unpack

from tests.registry_server import tar_bytes, tar_special, zip_bytes


def unpacked(tmp_path: Path, data: bytes, kind: str, cmd: str = "bin/agent", **caps: int) -> Path:
    archive = tmp_path / "download"
    archive.write_bytes(data)
    dest = tmp_path / "box" / "tree"
    dest.mkdir(parents=True)
    unpack(archive, dest, kind, cmd, **caps)
    return dest


def refused(tmp_path: Path, data: bytes, kind: str, words: str, **caps: int) -> None:
    with pytest.raises(RegistryError, match=words):
        unpacked(tmp_path, data, kind, **caps)
    outside = [p for p in tmp_path.rglob("*") if not p.is_relative_to(tmp_path / "box") and p.name != "download"]
    assert outside == [], "something was written outside the folder"
    assert not (tmp_path / "escaped").exists() and not (tmp_path.parent / "escaped").exists()


def test_a_good_tar_and_zip_unpack_with_their_command_executable(tmp_path: Path) -> None:
    for kind, data in (("tar", tar_bytes([("bin/agent", b"#!/bin/sh\n"), ("README", b"hi")])),
                       ("zip", zip_bytes([("bin/agent", b"#!/bin/sh\n"), ("README", b"hi", 0o100644)]))):  # fmt: skip
        folder = tmp_path / kind
        folder.mkdir()
        dest = unpacked(folder, data, kind)
        assert (dest / "README").read_bytes() == b"hi"
        command = find_command(dest, "bin/agent")
        assert command == dest / "bin" / "agent" and os.access(command, os.X_OK)


def test_a_bare_file_is_kept_under_its_command_name(tmp_path: Path) -> None:
    dest = unpacked(tmp_path, b"\x7fELF...", "file", cmd="agent")
    assert (dest / "agent").read_bytes() == b"\x7fELF..." and os.access(find_command(dest, "agent"), os.X_OK)


def test_archive_kinds_follow_the_registrys_names() -> None:
    names = ("a.zip", "a.tar.gz", "a.tgz", "a.tar.bz2", "a.tbz2", "a.tar.xz?x=1", "agent")
    assert [archive_kind(u) for u in names] == [
        "zip", "tar", "tar", "tar", "tar", "tar", "file"]  # fmt: skip


@pytest.mark.parametrize(
    ("members", "words"),
    [
        ([("../escaped", b"x")], r"climbs out of its folder \(\.\.\)"),
        ([("bin/../../escaped", b"x")], r"climbs out"),
        ([("/tmp/escaped-abs", b"x")], r"has an absolute path"),
        ([tar_special("bin/link", tarfile.SYMTYPE, "/etc/passwd")], r"links to an absolute path '/etc/passwd'"),
        ([tar_special("bin/link", tarfile.SYMTYPE, "../../escaped")], r"links out of its folder"),
        ([tar_special("hard", tarfile.LNKTYPE, "../escaped")], r"climbs out"),
        ([tar_special("hard", tarfile.LNKTYPE, "/etc/passwd")], r"absolute path"),
        ([tar_special("dev", tarfile.CHRTYPE)], r"'dev' is a device"),
        ([tar_special("disk", tarfile.BLKTYPE)], r"'disk' is a device"),
        ([tar_special("pipe", tarfile.FIFOTYPE)], r"'pipe' is a FIFO"),
    ],
    ids=[
        "dotdot",
        "dotdot-inside",
        "absolute",
        "symlink-absolute",
        "symlink-out",
        "hardlink-out",
        "hardlink-absolute",
        "char-device",
        "block-device",
        "fifo",
    ],  # fmt: skip
)
def test_a_hostile_tar_member_is_refused_and_nothing_is_written(tmp_path: Path, members: list, words: str) -> None:
    refused(tmp_path, tar_bytes([("bin/agent", b"ok"), *members]), "tar", words)


def test_a_path_through_a_link_to_outside_made_by_an_earlier_member_is_refused(tmp_path: Path) -> None:
    # `d` -> `.` is inside; `d/../escaped` is refused as climbing out before any link is followed.
    refused(tmp_path, tar_bytes([tar_special("d", tarfile.SYMTYPE, "."), ("d/../escaped", b"x")]), "tar", "climbs out")


def test_a_link_inside_the_folder_is_kept(tmp_path: Path) -> None:
    dest = unpacked(
        tmp_path, tar_bytes([("bin/real", b"#!/bin/sh\n"), tar_special("bin/agent", tarfile.SYMTYPE, "real")]), "tar"
    )
    assert os.readlink(dest / "bin" / "agent") == "real" and find_command(dest, "bin/agent").exists()


def test_a_command_that_is_a_link_out_of_the_folder_is_not_found(tmp_path: Path) -> None:
    dest = tmp_path / "tree"
    (dest / "bin").mkdir(parents=True)
    (dest / "bin" / "agent").symlink_to("/bin/sh")
    with pytest.raises(RegistryError, match="has no file 'bin/agent'"):
        find_command(dest, "bin/agent")


@pytest.mark.parametrize(
    ("members", "words"),
    [
        ([("../escaped", b"x")], "climbs out"),
        ([("/escaped-abs", b"x")], "absolute path"),
        ([("C:/escaped", b"x")], "absolute path"),
        ([("link", b"/etc/passwd", 0o120777)], "links to an absolute path"),
        ([("link", b"../../escaped", 0o120777)], "links out of its folder"),
        ([("link", b"x" * 5000, 0o120777)], "is a link of 5000 bytes"),
        ([("fifo", b"", 0o010644)], "a device, a FIFO or a special file"),
        ([("dev", b"", 0o020644)], "a device, a FIFO or a special file"),
    ],
    ids=["dotdot", "absolute", "drive", "symlink-absolute", "symlink-out", "symlink-huge", "fifo", "device"],
)
def test_a_hostile_zip_member_is_refused(tmp_path: Path, members: list, words: str) -> None:
    refused(tmp_path, zip_bytes([("bin/agent", b"ok"), *members]), "zip", words)


def test_a_zip_member_written_through_an_earlier_link_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, zip_bytes([("d", b".", 0o120777), ("d/x", b"x")]), "zip", "written through")


def test_the_total_size_cap_holds_for_tar_zip_and_a_bare_file(tmp_path: Path) -> None:
    big = b"x" * 5000
    for kind, data in (
        ("tar", tar_bytes([("a", big), ("b", big)])),
        ("zip", zip_bytes([("a", big), ("b", big)])),
        ("file", big * 2),
    ):
        folder = tmp_path / kind
        folder.mkdir()
        refused(folder, data, kind, "more than 8000 bytes", max_total=8000)


def test_a_zip_that_lies_about_its_sizes_is_stopped_by_what_is_written(tmp_path: Path) -> None:
    data = bytearray(zip_bytes([("a", b"y" * 100_000, 0o100644)]))
    # Say 10 bytes in the central directory (its uncompressed size field), write 100 000.
    central = data.rindex(b"PK\x01\x02")
    data[central + 24 : central + 28] = (10).to_bytes(4, "little")
    archive = tmp_path / "download"
    archive.write_bytes(bytes(data))
    dest = tmp_path / "box"
    dest.mkdir()
    with pytest.raises(RegistryError, match="more bytes than it says|cannot be unpacked"):
        unpack(archive, dest, "zip", "a", max_total=1000)
    assert not (dest / "a").exists() or (dest / "a").stat().st_size <= 1000


def test_too_many_members_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("deck.registry.unpack.MAX_MEMBERS", 3)
    refused(tmp_path, tar_bytes([(f"f{i}", b"") for i in range(5)]), "tar", "more than 3 members")


def test_a_broken_archive_is_one_clear_error(tmp_path: Path) -> None:
    for kind, data in (("tar", b"not a tar at all" * 10), ("zip", b"PK\x03\x04 truncated")):
        (tmp_path / kind).mkdir()
        refused(tmp_path / kind, data, kind, "the archive cannot be unpacked")


@pytest.mark.parametrize(
    ("mode", "name"), [("w:gz", "a.tgz"), ("w:bz2", "a.tar.bz2"), ("w:xz", "a.tar.xz"), ("w", "a.tar")]
)
def test_every_tar_compression_the_registry_names_unpacks(tmp_path: Path, mode: str, name: str) -> None:
    dest = unpacked(tmp_path, tar_bytes([("bin/agent", b"#!/bin/sh\n")], mode=mode), archive_kind(name))
    assert (dest / "bin" / "agent").read_bytes() == b"#!/bin/sh\n"


def test_an_archive_made_from_inside_its_folder_unpacks(tmp_path: Path) -> None:
    top = tarfile.TarInfo("./")
    top.type = tarfile.DIRTYPE
    data = tar_bytes([top, ("./bin/agent", b"#!/bin/sh\n")])  # `tar -C folder -czf a.tgz .`
    assert (unpacked(tmp_path, data, "tar") / "bin" / "agent").read_bytes() == b"#!/bin/sh\n"
    (tmp_path / "z").mkdir()
    dest = unpacked(tmp_path / "z", zip_bytes([("./", b"", 0o040755), ("./bin/agent", b"#!/bin/sh\n")]), "zip")
    assert (dest / "bin" / "agent").read_bytes() == b"#!/bin/sh\n"


# -- links whose target means something else on disk than on paper ------------------------------------------

LINK = 0o120777
#: `c` -> `.`: on paper `c/c/…/../..` is `.`, on disk every `..` climbs a real folder.
UP = "c/" * 12 + "../" * 12


def escape_target(tmp_path: Path) -> str:
    """The probe's target: from `box/tree`, through the `c` links, to `tmp_path/escaped`."""
    return UP + str(tmp_path / "escaped").lstrip("/")


def test_the_probes_zip_a_link_out_through_a_link_to_dot_and_a_folder_made_through_it_is_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "escaped").mkdir()
    data = zip_bytes([("c", b".", LINK), ("b", escape_target(tmp_path).encode(), LINK),
                      ("b/made_by_zip/", b"", 0o040755), ("agent", b"#!/bin/sh\n")])  # fmt: skip
    with pytest.raises(RegistryError, match="not installed"):
        unpacked(tmp_path, data, "zip", cmd="agent")
    assert list((tmp_path / "escaped").iterdir()) == [], "a folder was made outside"


def test_the_probes_tar_a_link_out_through_a_link_to_dot_and_a_folder_made_through_it_is_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "escaped").mkdir()
    made = tar_special("b/made_by_tar", tarfile.DIRTYPE)
    out = tar_special("b", tarfile.SYMTYPE, escape_target(tmp_path))
    data = tar_bytes([tar_special("c", tarfile.SYMTYPE, "."), out, made, ("agent", b"#!/bin/sh\n")])
    with pytest.raises(RegistryError, match="not installed|refused"):
        unpacked(tmp_path, data, "tar", cmd="agent")
    assert list((tmp_path / "escaped").iterdir()) == [], "a folder was made outside"


@pytest.mark.parametrize("kind", ["zip", "tar"])
@pytest.mark.parametrize(
    "links",
    [
        [("c", "."), ("out", "c/c/../..")],  # the link to `.` first
        [("out", "c/c/../.."), ("c", ".")],  # the link to `.` last: judged on the finished tree
        [("c", "."), ("d", "c"), ("e", "d/d"), ("out", "e/e/../../..")],  # a chain of links to links
        [("c", "."), ("up", "c/.."), ("out", "up")],  # a link to a link that climbs out
        [("sub/c", ".."), ("sub/out", "c/sub/c/..")],  # a link to its own folder's parent, taken twice
        [("a", "b"), ("b", "a")],  # a loop
    ],
    ids=["dot-then-climb", "climb-then-dot", "chain", "link-to-climbing-link", "parent-link", "loop"],
)
def test_a_link_chain_that_climbs_out_on_disk_is_refused(tmp_path: Path, kind: str, links: list) -> None:
    files = [("bin/agent", b"#!/bin/sh\n"), ("sub/keep", b"x")]
    if kind == "zip":
        data = zip_bytes([*files, *((n, t.encode(), LINK) for n, t in links)])
    else:
        data = tar_bytes([*files, *(tar_special(n, tarfile.SYMTYPE, t) for n, t in links)])
    refused(tmp_path, data, kind, "links out of its folder|links round in a loop|refused")


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_a_folder_entry_under_a_link_is_refused_even_one_inside(tmp_path: Path, kind: str) -> None:
    if kind == "zip":
        data = zip_bytes([("real/", b"", 0o040755), ("d", b"real", LINK), ("d/made/", b"", 0o040755)])
    else:
        data = tar_bytes([tar_special("real", tarfile.DIRTYPE), tar_special("d", tarfile.SYMTYPE, "real"),
                          tar_special("d/made", tarfile.DIRTYPE)])  # fmt: skip
    refused(tmp_path, data, kind, "a link other members are written through")


def test_a_zip_folder_entry_whose_name_is_an_earlier_link_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "box" / "tree"
    dest.mkdir(parents=True)
    (dest / "d").symlink_to(tmp_path / "escaped-dir", target_is_directory=True)
    archive = tmp_path / "download"
    archive.write_bytes(zip_bytes([("d/", b"", 0o040755), ("d/x/", b"", 0o040755)]))
    with pytest.raises(RegistryError, match="written through a link"):
        unpack(archive, dest, "zip", "x")
    assert not (tmp_path / "escaped-dir").exists()


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_links_within_the_folder_through_other_links_are_kept(tmp_path: Path, kind: str) -> None:
    files = [("lib/libfoo.so.1.2", b"elf"), ("bin/real", b"#!/bin/sh\n")]
    links = [("lib/libfoo.so.1", "libfoo.so.1.2"), ("lib/libfoo.so", "libfoo.so.1"), ("cur", "."),
             ("bin/agent", "../cur/bin/real"), ("bin/lib", "../lib/../cur/lib"), ("dangling", "nowhere/x")]  # fmt: skip
    if kind == "zip":
        data = zip_bytes([*files, *((n, t.encode(), LINK) for n, t in links)])
    else:
        data = tar_bytes([*files, *(tar_special(n, tarfile.SYMTYPE, t) for n, t in links)])
    dest = unpacked(tmp_path, data, kind)
    assert (dest / "bin" / "lib" / "libfoo.so").read_bytes() == b"elf"
    assert find_command(dest, "bin/agent").read_bytes() == b"#!/bin/sh\n"
