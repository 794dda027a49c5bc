"""Worktrees against an agent that means harm: it writes whatever files it likes in its worktree
through fs/write_text_file, its `.git` file included, and two agents' worktrees may share any
number of files. Real git repositories, real agents, real `deck` processes.

The harm looked for is git running the agent's code: a git directory the agent writes (text
only) names `core.sshCommand`, a script of its own, with a partial-clone promisor remote, so that
any git pointed at that directory which misses an object runs the script in a lazy fetch. The
script leaves a marker file: it must never appear.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deck import ServiceError

from tests.deck_process import DeckProcess
from tests.plugins.worktrees.test_worktrees import git, make_repo, run_cli, turn, worktree_agent

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

#: A commit id no repository here has: the agent's repository names it, so git must fetch it.
MISSING = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose `build/` is ignored: what the agent writes there is no work of its."""
    path = make_repo(tmp_path / "repo")
    (path / ".gitignore").write_text("build/\n")
    git(path, "add", ".gitignore")
    git(path, "commit", "-q", "-m", "ignore build/")
    return path


def evil_repository(worktree: Path, mark: Path, head: str = MISSING, name: str = "evil") -> dict[str, str]:
    """The files (path in the worktree → text) of a git directory `build/NAME` whose lazy fetch
    runs `build/run.sh`, which appends to `mark`. Text only: what fs/write_text_file writes."""
    return {
        "build/run.sh": f"echo ran >> '{mark}'\nexit 1\n",
        f"build/{name}/HEAD": f"{head}\n",
        f"build/{name}/objects/info/packs": "\n",
        f"build/{name}/refs/heads/README": "refs\n",
        f"build/{name}/config": (
            f"[core]\n\trepositoryformatversion = 1\n\tsshCommand = sh '{worktree}/build/run.sh'\n"
            "[extensions]\n\tpartialClone = origin\n"
            '[remote "origin"]\n\turl = ssh://example.invalid/x\n\tpromisor = true\n'
        ),
    }  # fmt: skip


async def write_through_deck(deck: Any, rec: Any, agent: str, files: dict[str, str]) -> None:
    """The agent writes `files` with fs/write_text_file, a turn each."""
    for name, text in files.items():
        await turn(deck, rec, agent, f"fswrite {name} {text}")
        assert not any("refused" in line for line in deck.agents[agent].logs), deck.agents[agent].logs


def plain_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=30)


def armed(worktree: Path, mark: Path) -> None:
    """git pointed at the agent's repository does run its script: what deck must never let happen."""
    plain_git(worktree, f"--git-dir={worktree}/build/evil", f"--work-tree={worktree}", "status")
    assert mark.exists(), "the agent's repository runs nothing: the test proves nothing"
    mark.unlink()


IN_CLOSE_NOWRITE = 0x10


@contextlib.contextmanager
def swap_after_read(folder: Path, name: str, text: str) -> Iterator[threading.Event]:
    """Replace `folder/name` with `text` (atomically, as fs/write_text_file does) the moment a
    process that opened it to read closes it: what an agent swapping the file in a loop wins by
    chance, made certain. The event yielded is set once it is swapped."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, os.fsencode(folder), IN_CLOSE_NOWRITE) >= 0
    done, stop = threading.Event(), threading.Event()

    def watch() -> None:
        while not stop.is_set() and not done.is_set():
            if not select.select([fd], [], [], 0.05)[0]:
                continue
            data = os.read(fd, 1 << 16)
            while data:
                _, _, _, size = struct.unpack_from("iIII", data)
                if data[16 : 16 + size].rstrip(b"\0") == name.encode():
                    (folder / f"{name}.new").write_text(text)
                    os.replace(folder / f"{name}.new", folder / name)
                    done.set()
                    return
                data = data[16 + size :]

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join(5)
        os.close(fd)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")
async def test_removing_a_worktree_never_runs_code_of_a_repository_its_dot_git_names(make_deck, repo, tmp_path):
    """`git worktree remove` checks the `.git` file, then runs `git status` through it: the agent
    swapping its `.git` in between got git to run its ssh command. deck removes the folder itself."""
    mark = tmp_path / "SSH-RAN"
    config = tmp_path / "deck.toml"
    deck, rec = make_deck(worktree_agent("a", repo))
    await deck.call("AgentService.Start", {"name": "a"})
    worktree = Path(deck.agents["a"].cwd)
    await write_through_deck(deck, rec, "a", evil_repository(worktree, mark))
    armed(worktree, mark)
    real = (worktree / ".git").read_text()
    await deck.shutdown()

    with swap_after_read(worktree, ".git", f"gitdir: {worktree}/build/evil\n"):
        removed = await asyncio.to_thread(run_cli, config, "worktree", "remove", "a")
    assert not mark.exists(), "git ran the agent's ssh command"
    assert removed.returncode == 0, removed.stderr
    assert not worktree.exists() and "deck/a" not in git(repo, "branch")
    assert str(worktree) not in git(repo, "worktree", "list") and real.startswith("gitdir: ")


async def test_a_rewritten_dot_git_is_no_obstacle_to_a_removal_nor_a_way_around_its_checks(make_deck, repo, tmp_path):
    """deck looks at the worktree through the repository the main checkout has for it: a `.git`
    pointing elsewhere hides no work, and a forced removal still removes (git itself refuses: the
    `.git` "does not point back")."""
    mark = tmp_path / "SSH-RAN"
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo))
    for agent in ("a", "b"):
        await deck.call("AgentService.Start", {"name": agent})
        await write_through_deck(deck, rec, agent, evil_repository(Path(deck.agents[agent].cwd), mark))
    a, b = Path(deck.agents["a"].cwd), Path(deck.agents["b"].cwd)
    armed(a, mark)
    await write_through_deck(deck, rec, "a", {"wip.txt": "unfinished", ".git": f"gitdir: {a}/build/evil\n"})
    await write_through_deck(deck, rec, "b", {".git": f"gitdir: {b}/build/evil\n"})
    for agent in ("a", "b"):
        await deck.call("AgentService.Stop", {"name": agent})

    with pytest.raises(ServiceError, match="a's worktree has uncommitted work"):
        await deck.call("WorktreeService.Remove", {"agent": "a"})
    assert (await deck.call("WorktreeService.Remove", {"agent": "a", "force": True}))["branchDeleted"]
    assert (await deck.call("WorktreeService.Remove", {"agent": "b"}))["branchDeleted"]  # b had no work
    assert not a.exists() and not b.exists() and not mark.exists()
    assert git(repo, "worktree", "list").count("\n") == 1 and "deck/" not in git(repo, "branch")


async def test_git_never_looks_into_a_submodule_whose_dot_git_the_agent_wrote(make_deck, repo, tmp_path):
    """A submodule's folder in the worktree is the agent's: a `.git` file there names its own
    repository. `git add` would run `git status` in it to see whether it changed, a diff with
    `diff.submodule = log` would read its commits, `submodule.recurse` would check it out: deck's
    list, diff, merge and removal do none of it."""
    mark = tmp_path / "SSH-RAN"
    first = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{first},sub")  # a submodule, at that commit
    git(repo, "commit", "-q", "-m", "a submodule")
    (repo / "sub").mkdir()  # as git leaves a submodule not checked out
    for key, value in (("diff.submodule", "log"), ("submodule.recurse", "true"), ("status.submoduleSummary", "true")):
        git(repo, "config", key, value)  # the user's own choices, which deck must not let lead into it
    deck, rec = make_deck(worktree_agent("a", repo))
    await deck.call("AgentService.Start", {"name": "a"})
    worktree = Path(deck.agents["a"].cwd)
    evil = evil_repository(worktree, mark, head=first)  # "unchanged": git would ask it whether it is dirty
    await write_through_deck(deck, rec, "a", {**evil, **evil_repository(worktree, mark, name="other")})
    await write_through_deck(deck, rec, "a", {"sub/.git": f"gitdir: {worktree}/build/evil\n", "feature.txt": "done",
                                              "emb/.git": f"gitdir: {worktree}/build/other\n"})  # fmt: skip
    armed(worktree, mark)
    added = plain_git(worktree, "add", "-A", "--dry-run")  # git left to itself goes into the submodule
    assert mark.exists(), added.stderr
    mark.unlink()

    async def call(method: str, **params: Any) -> Any:
        result = await deck.call(f"WorktreeService.{method}", params)
        assert not mark.exists(), f"git ran the agent's ssh command in {method}"
        return result

    row = (await call("List"))[0]
    assert (row["changedFiles"], row["dirty"]) == (2, True), row  # feature.txt and emb, a new gitlink
    diff = await call("Diff", agent="a")
    assert "+Subproject commit" in diff and "+done" in diff
    await deck.call("AgentService.Stop", {"name": "a"})
    assert sorted((await call("Merge", agent="a"))["files"]) == ["emb", "feature.txt"]
    await call("List")  # emb is a submodule of the worktree's own index now
    await call("Remove", agent="a", force=True)


def test_a_worktree_is_not_removed_while_a_deck_run_runs_its_agent(repo, tmp_path):
    """`deck run` is no server the command could ask: the lock file the running deck holds on the
    worktree tells. It goes when the agent stops, or when that deck dies, even by SIGKILL."""
    config = tmp_path / "deck.toml"
    config.write_text(worktree_agent("a", repo))
    decks: list[DeckProcess] = []
    try:
        for end in ("stop", "kill"):
            deck = DeckProcess("--config", str(config), "--stay")
            decks.append(deck)
            deck.call("ChatService.Send", {"agent": "a", "text": "write x.txt hi"})
            deck.event("worktree:changed", agent="a", timeout=20)
            refused = run_cli(config, "worktree", "remove", "a", "--force")
            assert refused.returncode == 1, refused.stderr
            assert f"a is running in its worktree (deck process {deck.pid}): stop it first" in refused.stderr
            if end == "stop":
                deck.call("AgentService.Stop", {"name": "a"}, timeout=20)
            else:
                deck.kill_everything()  # SIGKILL: its lock goes with it
            removed = run_cli(config, "worktree", "remove", "a", "--force")
            assert removed.returncode == 0, removed.stderr
            assert "deck/a" not in git(repo, "branch")
    finally:
        for deck in decks:
            deck.kill_everything()


async def test_two_worktrees_sharing_20000_files_make_one_overlap_and_hold_no_loop(make_deck, repo, tmp_path):
    """One event for the pair, with a count and the first 50 files, however many files they share;
    the work of finding them is done off the event loop."""
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo))
    names = [f"gen/file-{i:05d}.txt" for i in range(20_000)]
    empty = tmp_path / "empty"
    empty.touch()
    for agent in ("a", "b"):
        await deck.call("AgentService.Start", {"name": agent})
        await asyncio.to_thread(link_files, empty, Path(deck.agents[agent].cwd), names)

    gaps: list[float] = []
    listing = asyncio.ensure_future(deck.call("WorktreeService.List", {}))
    while not listing.done():  # the loop's heartbeat while the worktrees are looked at
        before = time.monotonic()
        await asyncio.sleep(0.005)
        gaps.append(time.monotonic() - before)
    rows = {row["agent"]: row for row in await listing}
    assert rows["a"]["changedFiles"] == rows["b"]["changedFiles"] == 20_000
    overlap = {"file": names[0], "agents": ["a", "b"], "files": names[:50], "count": 20_000}
    assert rec.named("worktree:overlap") == [overlap]
    assert max(gaps) < 0.2, f"the event loop was held {max(gaps):.2f}s"  # on the loop: 0.25 s quiet, more when busy

    for name in names[:19_990]:
        os.unlink(Path(deck.agents["b"].cwd) / name)
    await deck.call("WorktreeService.List", {})
    assert rec.named("worktree:overlap")[-1] == {"file": names[19_990], "agents": ["a", "b"], "files": names[19_990:],
                                                 "count": 10}  # fmt: skip
    await deck.call("WorktreeService.List", {})
    assert len(rec.named("worktree:overlap")) == 2  # said again only when it changes


def link_files(source: Path, folder: Path, names: list[str]) -> None:
    """`names` in `folder`, each a hard link to `source`: many files, made fast."""
    (folder / "gen").mkdir()
    for name in names:
        os.link(source, folder / name)


async def test_deck_merge_of_a_branch_naming_a_filter_runs_it_no_more(make_deck, repo, tmp_path):
    """The agent's `.gitattributes` name a filter the user's git config defines: neither staging its
    work nor merging it into the main checkout runs it."""
    mark = tmp_path / "RAN"
    git(repo, "config", "filter.run.smudge", f"sh -c 'echo smudge >> {mark}; cat'")
    git(repo, "config", "filter.run.clean", f"sh -c 'echo clean >> {mark}; cat'")
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write .gitattributes * filter=run")
    await turn(deck, rec, "a", "write notes.txt from a")
    merged = await deck.call("WorktreeService.Merge", {"agent": "a"})
    assert sorted(merged["files"]) == [".gitattributes", "notes.txt"] and (repo / "notes.txt").exists()
    assert not mark.exists()


async def test_git_cancelled_twice_is_killed_not_left_running_into_what_is_deleted_next(tmp_path):
    """deck ending cancels a worktree's look while git runs, then cancels its grace too: git is killed
    then and there, so it cannot go on writing into the temporary index folder being deleted."""
    import psutil
    from deck.plugins.worktrees.git import run

    pid_file = tmp_path / "pid"
    slow = [sys.executable, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"]
    task = asyncio.ensure_future(run(slow, cwd=str(tmp_path), env=dict(os.environ)))
    while not pid_file.exists() or not pid_file.read_text():
        await asyncio.sleep(0.01)
    child = psutil.Process(int(pid_file.read_text()))
    task.cancel()
    await asyncio.sleep(0.1)  # in its grace: waiting for git to end on its own
    assert child.is_running()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    child.wait(timeout=5)  # killed at the second cancel, not 5 s of grace later
    assert not child.is_running()
