"""fs/read_text_file and fs/write_text_file against a hostile agent: races, FIFOs, big files, deck's own files."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import stat
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from deck.agent import fs
from deck.plugins.announcements.bridge import MAX_SOCKET_PATH
from deck.proc import storage as files
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import AGENTS, agent_table
from tests.deck_process import DeckProcess
from tests.turns import ask

pytestmark = pytest.mark.anyio

HOSTILE = AGENTS / "hostile_fs.py"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 and /proc are Linux's")


def hostile(name: str = "a", **keys: Any) -> str:
    return agent_table(name, [sys.executable, str(HOSTILE)], **keys)


@pytest.fixture(params=["openat2", "walk"])
def resolver(request, monkeypatch):
    """Every test runs with the kernel's openat2 and with the portable walk beneath a directory fd."""
    if request.param == "walk":
        monkeypatch.setattr(fs, "_openat2", None, raising=False)
    elif getattr(fs, "_openat2", None) is None:
        pytest.skip("openat2 is not available here")
    return request.param


async def attack(deck, rec, requests: list, exchange: list | None = None, timeout: float = 30.0) -> list[dict]:
    """Have the hostile agent send `requests` at once while it swaps the `exchange` pairs; its answers."""
    script = {"requests": requests, "exchange": [[str(a), str(b)] for a, b in exchange or []]}
    async with asyncio.timeout(timeout):
        reply = await ask(deck, rec, json.dumps(script))
    report = json.loads(reply.text)
    assert isinstance(report["swaps"], int), report["swaps"]
    if exchange:
        assert report["swaps"] > 0
    return report["answers"]


def read(path: Path, **extra: Any) -> list:
    return ["fs/read_text_file", {"path": str(path), **extra}]


def write(path: Path, content: str) -> list:
    return ["fs/write_text_file", {"path": str(path), "content": content}]


def refused_as_outside(answer: dict) -> bool:
    error = answer.get("error") or {}
    return error.get("code") == -32602 and "outside the agent's working directory" in error.get("message", "")


def tree(root: Path) -> dict[str, str]:
    """Every entry under `root` (symlinks not followed): its kind, or a file's content."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = path.read_text() if path.is_file() else "special"
    return found


@pytest.fixture
def layout(tmp_path):
    """work/ (the agent's cwd) and outside/, side by side."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "sub").mkdir(parents=True)
    outside.mkdir()
    (work / "sub" / "f.txt").write_text("inside")
    (outside / "f.txt").write_text("OUTSIDE")
    (outside / "sub").mkdir()
    (outside / "sub" / "f.txt").write_text("OUTSIDE")
    return work, outside


# -- confinement under races ---------------------------------------------------------------------


@linux_only
async def test_a_directory_swapped_for_a_symlink_never_lets_a_read_or_write_out(make_deck, layout, resolver):
    work, outside = layout
    (work / "link").symlink_to(outside)  # swapped with work/sub: work/sub/f.txt is then outside/f.txt
    (work / "proc").mkdir()
    (work / "proc" / "environ").write_text("inside")
    (work / "proclink").symlink_to("/proc/self")  # swapped with work/proc: deck's own environment
    before = tree(outside)
    deck, rec = make_deck(hostile(cwd=str(work)))
    requests = []
    for i in range(150):
        requests += [read(work / "sub" / "f.txt"), read(work / "proc" / "environ"), write(work / "sub" / f"w{i}.txt", f"w{i}")]
    answers = await attack(deck, rec, requests, [(work / "sub", work / "link"), (work / "proc", work / "proclink")])
    reads = [a for r, a in zip(requests, answers) if r[0] == "fs/read_text_file"]
    writes = [a for r, a in zip(requests, answers) if r[0] == "fs/write_text_file"]
    assert [a for a in reads if a.get("result") != {"content": "inside"} and not refused_as_outside(a)] == []
    assert [a for a in writes if a.get("result") != {} and not refused_as_outside(a)] == []
    assert any("error" in a for a in reads) and any("result" in a for a in reads)  # the race did happen both ways
    assert tree(outside) == before  # nothing written there, not even a temp file
    written = sorted(p.name for p in (work / "sub").iterdir() if p.name != "f.txt")
    assert len(written) == sum("result" in a for a in writes)
    assert all(name.startswith("w") and (work / "sub" / name).read_text() == name[:-4] for name in written)
    assert not [p for p in work.parent.rglob("*") if ".tmp" in p.name]


@linux_only
async def test_a_file_swapped_for_a_symlink_is_never_read_through(make_deck, layout, resolver):
    work, outside = layout
    (work / "file.txt").write_text("inside")
    (work / "flink").symlink_to(outside / "f.txt")
    deck, rec = make_deck(hostile(cwd=str(work)))
    answers = await attack(deck, rec, [read(work / "file.txt") for _ in range(300)], [(work / "file.txt", work / "flink")])
    assert [a for a in answers if a.get("result") != {"content": "inside"} and not refused_as_outside(a)] == []
    assert (outside / "f.txt").read_text() == "OUTSIDE"


@linux_only
async def test_a_fifo_swapped_in_never_blocks_and_deck_stops_promptly(make_deck, layout, resolver):
    work, _ = layout
    (work / "data.txt").write_text("data")
    fifos = [work / f"pipe{i}" for i in range(8)]
    for fifo in fifos:
        os.mkfifo(fifo)
    deck, rec = make_deck(hostile(cwd=str(work)))
    try:
        # Plain FIFOs, more of them than worker threads, then a FIFO swapped with a file while it is read.
        answers = await attack(deck, rec, [read(f) for f in fifos], timeout=10)
        assert all("not a regular file" in a["error"]["message"] for a in answers), answers
        answers = await attack(deck, rec, [read(work / "data.txt") for _ in range(200)], [(work / "data.txt", fifos[0])], timeout=10)
        assert all(a.get("result") == {"content": "data"} or "not a regular file" in a["error"]["message"] for a in answers)
        assert any("error" in a for a in answers)
        assert await attack(deck, rec, [read(work / "sub" / "f.txt")], timeout=10) == [{"result": {"content": "inside"}}]
        async with asyncio.timeout(5):
            await deck.shutdown()
    finally:
        _release_blocked_readers(fifos)


def _release_blocked_readers(fifos: list[Path]) -> None:
    """A reader stuck opening a FIFO (the bug this guards against) is let go, so the test ends."""
    for fifo in fifos:
        for _ in range(50):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                break


# -- what stays allowed, and the errors -------------------------------------------------------------


async def test_symlinks_that_stay_inside_are_followed(make_deck, layout, resolver):
    work, _ = layout
    (work / "alias").symlink_to("sub")  # relative, to a directory
    (work / "abs.txt").symlink_to(work / "sub" / "f.txt")  # absolute, inside
    (work / "sub" / "up").symlink_to("..")  # back to the cwd itself
    (work / "chain.txt").symlink_to("alias/up/abs.txt")
    (work / "dangling.txt").symlink_to("sub/new.txt")
    deck, rec = make_deck(hostile(cwd=str(work)))
    answers = await attack(deck, rec, [
        read(work / "alias" / "f.txt"), read(work / "abs.txt"), read(work / "sub" / "up" / "sub" / "f.txt"),
        read(work / "chain.txt"), read(work / "sub" / ".." / "sub" / "./f.txt"),
    ])  # fmt: skip
    assert answers == [{"result": {"content": "inside"}}] * 5
    answers = await attack(deck, rec, [write(work / "abs.txt", "through the link"), write(work / "dangling.txt", "created")])
    assert answers == [{"result": {}}] * 2
    assert (work / "abs.txt").is_symlink() and (work / "sub" / "f.txt").read_text() == "through the link"
    assert (work / "dangling.txt").is_symlink() and (work / "sub" / "new.txt").read_text() == "created"


async def test_errors_inside_the_cwd(make_deck, layout, resolver):
    work, outside = layout
    (work / "loop").symlink_to("loop")
    (work / "up-and-back.txt").symlink_to("../work/sub/f.txt")  # leaves the cwd, even if it comes back
    deck, rec = make_deck(hostile(cwd=str(work)))
    answers = await attack(deck, rec, [
        read(work / "missing.txt"), read(work / "nodir" / "x.txt"),
        read(work / "sub"), write(work / "sub", "x"), read(work), read(work / "loop"), read(work / "up-and-back.txt"),
        read(work / "sub" / "f.txt" / "x"), write(work / "sub" / "bad.txt", "\ud800"),
        write(work / "sub" / "f.txt" / "x" / "y.txt", "x"),
    ])  # fmt: skip
    codes = [a["error"]["code"] for a in answers]
    messages = [a["error"]["message"] for a in answers]
    assert codes[:2] == [fs.RESOURCE_NOT_FOUND] * 2  # ACP's resource-not-found
    assert ["is a directory" in m for m in messages[2:5]] == [True] * 3
    assert "symbolic links" in messages[5]
    assert "outside the agent's working directory" in messages[6]
    assert codes[7] == codes[9] == -32602 and "not a directory" in messages[7] and "not a directory" in messages[9]
    assert codes[8] == -32602 and "UTF-8" in messages[8]
    assert sorted(p.name for p in (work / "sub").iterdir()) == ["f.txt"] and not (work / "nodir").exists()


# -- folders made for a new file ------------------------------------------------------------------


async def test_a_write_makes_the_folders_it_lacks_inside_the_cwd_only(make_deck, layout, resolver):
    work, outside = layout
    (work / "out").symlink_to(outside)  # a way out
    (work / "alias").symlink_to("sub")  # a way in
    before = tree(outside)
    deck, rec = make_deck(hostile(cwd=str(work)))
    answers = await attack(deck, rec, [
        write(work / "src" / "newpkg" / "x.py", "x = 1"), write(work / "a" / ".." / "b" / "y.txt", "y"),
        write(work / "alias" / "deep" / "z.txt", "z"),
        write(work / "out" / "new" / "evil.txt", "x"), write(work / ".." / "outside" / "new" / "evil.txt", "x"),
        write(work / "c" / ".." / ".." / "outside" / "new" / "evil.txt", "x"),
        write(work / "sub" / "f.txt" / "new" / "x.txt", "x"),
    ])  # fmt: skip
    assert answers[:3] == [{"result": {}}] * 3
    assert (work / "src" / "newpkg" / "x.py").read_text() == "x = 1" and (work / "b" / "y.txt").read_text() == "y"
    assert (work / "sub" / "deep" / "z.txt").read_text() == "z"
    mode = 0o777 & ~files.UMASK  # as mkdir -p makes them
    assert {stat.S_IMODE((work / d).stat().st_mode) for d in ("src", "src/newpkg", "a", "b", "sub/deep")} == {mode}
    assert [refused_as_outside(a) for a in answers[3:6]] == [True] * 3
    assert answers[6]["error"]["code"] == -32602 and "not a directory" in answers[6]["error"]["message"]
    assert tree(outside) == before
    assert not (work / "c").exists()  # made on the way out, then taken away: a refused write leaves nothing
    logged = [line for line in deck.agents["a"].logs if "refused" in line]
    assert len(logged) == 4


@pytest.mark.parametrize(
    ("name", "code", "says"),
    [
        ("new/.", -32602, "is a directory"), ("new/", -32602, "is a directory"), ("new/..", -32602, "is a directory"),
        ("a\0b", -32602, "NUL"), ("x" * 300, -32602, "File name too long"), ("loop/x.txt", -32602, "symbolic links"),
    ],
)  # fmt: skip
def test_a_path_that_names_no_file_to_write_is_the_agents_error(tmp_path, resolver, name, code, says):
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(fs.AcpError, match=says) as refused:
        fs.write_text_file(str(tmp_path), {"path": f"{tmp_path}/{name}", "content": "x"})
    assert refused.value.code == code
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop"]  # nothing made, not even a file named "new"


def test_a_write_makes_no_folder_in_deck_s_folders_nor_past_the_limit(tmp_path, monkeypatch, resolver):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    with pytest.raises(fs.AcpError, match="take the place of deck's own"):  # deck's state folder, not made yet
        fs.write_text_file(str(tmp_path), {"path": str(tmp_path / "state" / "deck" / "x.txt"), "content": "x"})
    assert list((tmp_path / "state").iterdir()) == []
    (tmp_path / "state" / "deck").mkdir()
    with pytest.raises(fs.AcpError, match="deck's own state"):
        fs.write_text_file(str(tmp_path), {"path": str(tmp_path / "state" / "deck" / "new" / "x.txt"), "content": "x"})
    assert list((tmp_path / "state" / "deck").iterdir()) == []
    deep = "/".join(["d"] * (fs.MAX_NEW_FOLDERS + 1))
    with pytest.raises(fs.AcpError, match=f"more than {fs.MAX_NEW_FOLDERS} folders"):
        fs.write_text_file(str(tmp_path), {"path": f"{tmp_path}/{deep}/x.txt", "content": "x"})
    assert not (tmp_path / "d").exists()  # none of the hundred made is left
    deep = "/".join(["e"] * fs.MAX_NEW_FOLDERS)
    assert fs.write_text_file(str(tmp_path), {"path": f"{tmp_path}/{deep}/x.txt", "content": "x"}) == {}
    assert (tmp_path / deep / "x.txt").read_text() == "x"


@linux_only
async def test_a_folder_swapped_for_a_symlink_while_folders_are_made_never_lets_them_out(make_deck, layout, resolver):
    work, outside = layout
    (work / "link").symlink_to(outside)  # swapped with work/sub: a folder made in "sub" would be made outside
    before = tree(outside)
    deck, rec = make_deck(hostile(cwd=str(work)))
    requests = [write(work / "sub" / f"n{i}" / "deeper" / "x.txt", f"{i}") for i in range(200)]
    answers = await attack(deck, rec, requests, [(work / "sub", work / "link")])
    assert [a for a in answers if a.get("result") != {} and not refused_as_outside(a)] == []
    assert any("error" in a for a in answers) and any("result" in a for a in answers)  # the race did happen both ways
    assert tree(outside) == before  # not a folder made there
    made = [i for i, a in enumerate(answers) if "result" in a]
    assert all((work / "sub" / f"n{i}" / "deeper" / "x.txt").read_text() == f"{i}" for i in made)


# -- memory ---------------------------------------------------------------------------------------


@pytest.fixture
def sparse(layout):
    """A 128 MiB file of NULs after one short line, made at once (no disk used)."""
    work, _ = layout
    path = work / "huge.bin"
    path.write_bytes(b"first\n")
    os.truncate(path, 128 * 1024 * 1024)
    return path


async def test_a_huge_file_is_refused_whole_and_read_by_lines(make_deck, sparse, resolver):
    deck, rec = make_deck(hostile(cwd=str(sparse.parent)))
    answers = await attack(deck, rec, [read(sparse), read(sparse, line=1, limit=1), read(sparse, line=2, limit=1)])
    assert answers[1] == {"result": {"content": "first\n"}}
    for answer in (answers[0], answers[2]):
        assert answer["error"]["code"] == -32602
        assert f"{fs.MAX_READ_BYTES // 2**20} MiB" in answer["error"]["message"] and "line and limit" in answer["error"]["message"]


def test_reading_lines_of_a_huge_file_takes_little_memory(sparse, resolver):
    root = str(sparse.parent)
    tracemalloc.start()
    try:
        assert fs.read_text_file(root, {"path": str(sparse), "line": 1, "limit": 1}) == {"content": "first\n"}
        assert fs.read_text_file(root, {"path": str(sparse), "line": 3}) == {"content": ""}  # past the NULs
        _, peak = tracemalloc.get_traced_memory()
        assert peak < 2 * 2**20
        with pytest.raises(fs.AcpError, match="line and limit"):
            fs.read_text_file(root, {"path": str(sparse), "line": 2, "limit": 1})
        _, peak = tracemalloc.get_traced_memory()
        assert peak < fs.MAX_READ_BYTES + 4 * 2**20
    finally:
        tracemalloc.stop()


# -- deck's own files -----------------------------------------------------------------------------


def test_an_agent_cannot_rewrite_the_config_deck_runs_with(tmp_path):
    """The default layout: ./deck.toml where deck runs, the agent's cwd defaulting there."""
    config = tmp_path / "deck.toml"
    config.write_text(hostile())
    evil = config.read_text() + hostile("evil", permissions="allow")
    proc = DeckProcess(cwd=tmp_path)
    try:
        assert proc.call("ConfigService.Current")["path"] == str(config)
        script = {"requests": [write(config, evil), write(tmp_path / "." / "deck.toml", evil)], "exchange": []}
        proc.call("ChatService.Send", {"agent": "a", "text": json.dumps(script)})
        proc.event("turn:changed", agent="a", busy=False, queued=0, timeout=20)
        reply = [e["message"] for e in proc.events("message:updated", agent="a") if e["message"]["role"] == "agent"][-1]
        answers = json.loads(reply["parts"][0]["text"])["answers"]
        assert [a for a in answers if "deck's own" not in a.get("error", {}).get("message", "")] == []
        assert config.read_text() == hostile()
        assert [a["name"] for a in proc.call("AgentService.List")] == ["a"]
        assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
    finally:
        proc.kill_everything()


async def test_deck_files_are_off_limits_however_they_are_spelled(make_deck, tmp_path, monkeypatch, resolver, request):
    # deck's socket folder inside the agent's cwd, reached through a short link: a socket's path has room
    # for about 100 bytes, and a test's temp folder can be longer.
    short = Path(tempfile.mkdtemp(prefix="dk-", dir="/tmp")) / "t"
    short.symlink_to(tmp_path)
    request.addfinalizer(lambda: shutil.rmtree(short.parent))
    assert len(str(short / "run")) < MAX_SOCKET_PATH - 30
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    other = tmp_path / "other.toml"  # a config deck opened before
    other.write_text("")
    (tmp_path / "state" / "deck").mkdir(parents=True)
    (tmp_path / "state" / "deck" / "recent.json").write_text(json.dumps([str(other)]))
    (tmp_path / "alias.toml").symlink_to("deck.toml")
    (tmp_path / "st").symlink_to("state/deck")
    (tmp_path / "dir").mkdir()
    deck, rec = make_deck(hostile(cwd=str(tmp_path)))
    await deck.agent_service.start("a")  # its session/new opened deck's socket folder
    (runtime,) = (tmp_path / "run").iterdir()
    config = deck.config_path
    before = config.read_text()
    answers = await attack(deck, rec, [
        write(config, "x"), write(tmp_path / "alias.toml", "x"), write(tmp_path / "dir" / ".." / "deck.toml", "x"),
        write(other, "x"), write(tmp_path / "st" / "recent.json", "x"), write(tmp_path / "st" / "new.json", "x"),
        read(tmp_path / "st" / "recent.json"), read(tmp_path / "state" / "deck" / "recent.json"),
        write(runtime / "x", "x"), read(runtime / "ask.sock"),
        read(config), write(tmp_path / "dir" / "ok.txt", "fine"),
    ])  # fmt: skip
    assert [(i, a) for i, a in enumerate(answers[:10]) if "deck's own" not in a.get("error", {}).get("message", "")] == []
    assert answers[10:] == [{"result": {"content": before}}, {"result": {}}]  # the config may be read; other files written
    assert config.read_text() == before and other.read_text() == "" and not (tmp_path / "state" / "deck" / "new.json").exists()
    assert [p.name for p in runtime.iterdir()] == ["ask.sock"]
    logged = [line for line in deck.agents["a"].logs if "refused" in line]
    assert len(logged) == 10


def test_nothing_takes_the_place_of_deck_s_state_folder_before_it_exists(tmp_path, monkeypatch, resolver):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    with pytest.raises(fs.AcpError, match="deck's own"):
        fs.write_text_file(str(tmp_path), {"path": str(tmp_path / "state" / "deck"), "content": "in the way"})
    assert list((tmp_path / "state").iterdir()) == []


# -- the resolver on its own ---------------------------------------------------------------------


@pytest.mark.skipif(getattr(fs, "_openat2", None) is None, reason="openat2 is not available here")
def test_openat2_and_the_walk_agree(layout, monkeypatch):
    work, outside = layout
    (work / "alias").symlink_to("sub")
    (work / "abs").symlink_to(work / "sub")
    (work / "out").symlink_to(outside / "sub")
    (work / "rel-out").symlink_to("../outside")
    paths = ["sub/f.txt", "alias/f.txt", "abs/f.txt", "out/f.txt", "rel-out/f.txt", "sub/../alias/f.txt", "../outside/f.txt", "none/f.txt"]

    def outcome(name: str) -> str:
        try:
            return fs.read_text_file(str(work), {"path": f"{work}/{name}"})["content"]
        except fs.AcpError as exc:
            return str(exc.code)

    fast = [outcome(p) for p in paths]
    monkeypatch.setattr(fs, "_openat2", None)
    assert [outcome(p) for p in paths] == fast == ["inside", "inside", "inside", "-32602", "-32602", "inside", "-32602", "-32002"]


components = st.lists(st.sampled_from(["a", "b", "f", "l", "m", "..", "."]), max_size=4)
folders = st.sampled_from([[], ["a"], ["a", "b"]])
through_a_link = st.builds(lambda where, name, rest: [*where, name, *rest], folders, st.sampled_from(["l", "m"]), components)


@pytest.mark.skipif(getattr(fs, "_openat2", None) is None, reason="openat2 is not available here")
@settings(max_examples=60, deadline=None)
@given(
    links=st.lists(st.tuples(folders, st.sampled_from(["l", "m"]), components), min_size=1, max_size=4),
    query=st.one_of(through_a_link, components.filter(bool)),
)
def test_the_walk_resolves_relative_symlinks_as_the_kernel_does(links, query):
    """Random trees of directories, files and relative symlinks (loops, ways out, dangling ones)."""
    with tempfile.TemporaryDirectory() as top:
        base = Path(top) / "root"
        (base / "a" / "b").mkdir(parents=True)
        (base / "f").write_text("")
        (base / "a" / "f").write_text("")
        for where, name, target in links:
            with contextlib.suppress(FileExistsError):
                base.joinpath(*where, name).symlink_to("/".join(target) or ".")
        with fs._Root(str(base), set()) as root:
            kernel = _outcome(lambda: fs._openat2(root.fd, "/".join(query), fs._DIR_FLAGS))
            walk = _outcome(lambda: fs._walk(root, fs._components("/".join(query))))
        assert walk == kernel


def _outcome(open_dir) -> Any:
    """The directory opened (device, inode), or how it failed."""
    try:
        fd = open_dir()
    except fs._Outside:
        return "outside"
    except OSError as exc:
        return "outside" if exc.errno == errno.EXDEV else errno.errorcode[exc.errno]
    try:
        return fs._identity(os.fstat(fd))
    finally:
        os.close(fd)
