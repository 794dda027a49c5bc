"""One agent's worktree: where it is, making or reusing it, its state, its diff, merging and removing it.

An agent whose cwd is in the repository whose top is TOP gets the worktree
`$XDG_STATE_HOME/deck/worktrees/NAME-HASH/AGENT` (NAME the last part of TOP, HASH of TOP's
path: two repositories never share a folder), on branch `deck/AGENT`, made from the main
checkout's HEAD; `AGENT.json` beside it remembers the repository and the base branch (the main
checkout's branch when the worktree was made), so that the worktree is found again when the
agent is gone from the config. The agent runs in the same subfolder as its cwd.

What the agent has not committed counts as its work: it is staged in a temporary index (a copy
of the worktree's, so only changed files are read again), never in the worktree's own, and
written as a tree. Every git command in a worktree is told its repository (`Checkout`), taken
from the main checkout's list of worktrees: nothing there — its `.git` file, a submodule's, any
file the agent writes — ever gives git a config, hooks or objects to use (of a nested repository
not tracked yet, git reads only its HEAD and repository version, to stage it as a submodule).
Its diff, its changed files and a merge are of that tree against the merge-base with the base
branch. A merge is computed first (`git merge-tree --write-tree`, git 2.38 or later) and only
then applied, so a refusal changes nothing anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import posixpath
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from deck.errors import ServiceError

from .config import worktree_name_problem
from .git import MAX_OUTPUT, GitError, Result
from .machine import LOCAL, Look, Machine

#: Options of every git command in a worktree: git never goes into a folder of it holding a `.git`
#: of its own (a submodule's, or one the agent wrote), whose config could name programs to run.
IN_WORKTREE = ("-c", "submodule.recurse=false", "-c", "diff.submodule=short")
#: The mode git records a submodule (a gitlink) with, in `git ls-files --stage`.
GITLINK = b"160000 "

#: Who commits the work deck commits, when git knows no one (no user.name / user.email).
FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "deck", "GIT_AUTHOR_EMAIL": "deck@localhost",
    "GIT_COMMITTER_NAME": "deck", "GIT_COMMITTER_EMAIL": "deck@localhost",
}  # fmt: skip


@dataclass(frozen=True)
class Place:
    """Where agent `agent`'s worktree is, for the repository whose main checkout's top is `repo`, on
    `machine` (this one, or the agent's host: then every path here is the host's)."""

    agent: str
    repo: str
    #: The agent's cwd relative to the repository's top ("" at the top).
    subdir: str = ""
    machine: Machine = field(default=LOCAL, compare=False)

    @property
    def host(self) -> str:
        return self.machine.host

    @property
    def key(self) -> str:
        """The repository, whatever machine it is on: what a lock and the overlaps go by."""
        return self.machine.at(self.repo)

    @property
    def folder(self) -> PurePosixPath:
        """The repository's folder of worktrees."""
        top = PurePosixPath(self.repo)
        digest = hashlib.sha256(str(top).encode("utf-8", "surrogateescape")).hexdigest()[:12]
        return self.machine.root / f"{top.name or 'repo'}-{digest}"

    @property
    def path(self) -> str:
        return str(self.folder / self.agent)

    @property
    def shown(self) -> str:
        """The worktree's path as messages give it (`HOST:PATH` on a host)."""
        return self.machine.at(self.path)

    @property
    def shown_repo(self) -> str:
        return self.machine.at(self.repo)

    @property
    def meta(self) -> str:
        return str(self.folder / f"{self.agent}.json")

    @property
    def lock(self) -> Path:
        """The lock file a deck running the agent in this worktree holds (`running.py`): on this
        machine, whatever machine the worktree is on (a host's under `hosts/`)."""
        if not self.host:
            return Path(self.folder) / f"{self.agent}.lock"
        digest = hashlib.sha256(self.host.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        return Path(LOCAL.root, "hosts", digest, self.folder.name, f"{self.agent}.lock")

    @property
    def branch(self) -> str:
        return f"deck/{self.agent}"

    @property
    def workdir(self) -> str:
        return posixpath.join(self.path, self.subdir) if self.subdir else self.path

    async def look(self) -> Look:
        return await self.machine.look(self.path)

    async def exists(self) -> bool:
        return (await self.look()).git

    async def lost(self) -> bool:
        """Its folder is there without its `.git` (the agent's to delete): files git no longer sees as
        the worktree, kept in sight, never reused nor dropped unless forced."""
        found = await self.look()
        return found.folder and not found.git

    async def refuse_symlink(self) -> None:
        if (await self.look()).link:
            raise self.symlink_error()

    def symlink_error(self) -> ServiceError:
        return ServiceError(f"{self.shown} is a symlink, not {self.agent}'s worktree: deck does not follow it")

    def lost_error(self) -> ServiceError:
        return ServiceError(f"{self.shown} is there without its .git file: git no longer sees it as {self.agent}'s "
                            f"worktree; its files are kept (move them away to start afresh, or `deck worktree remove {self.agent} --force`)")  # fmt: skip


def check_name(agent: str) -> None:
    """Refuse a name git refuses in a branch, or one whose folder would be another agent's `NAME.json`
    record: the rule `deck config validate` warns of, so that the two never disagree."""
    if (why := worktree_name_problem(agent)) is not None:
        raise ServiceError(why)


async def locate(agent: str, cwd: str, machine: Machine = LOCAL) -> Place:
    """The place of `agent`'s worktree for an agent whose cwd is `cwd` (on `machine`)."""
    check_name(agent)
    found = await machine.top(cwd)
    if found is None:
        raise ServiceError(f"{machine.at(cwd)} is in no git repository: worktree = true needs one")
    top, real = found
    subdir = posixpath.relpath(real, top)
    return Place(agent, top, "" if subdir == "." else subdir, machine)


def top_of(folder: str) -> str | None:
    """The top of the checkout `folder` is in (the folder above it holding `.git`), without running git."""
    path = Path(os.path.realpath(folder))
    return next((str(p) for p in (path, *path.parents) if (p / ".git").exists()), None)


def parse_meta(data: bytes | None) -> dict[str, Any]:
    try:
        found = json.loads(data or b"")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


async def read_meta(place: Place) -> dict[str, Any]:
    return parse_meta(await place.machine.read(place.meta))


async def write_meta(place: Place, base: str) -> None:
    data = json.dumps({"agent": place.agent, "repo": place.repo, "base": base}, indent=2) + "\n"
    await place.machine.write(place.meta, data.encode())


async def orphans(
    machine: Machine, repo_folders: set[str], known: set[tuple[str, str]], metas: dict[str, dict[str, Any]] | None = None
) -> list[Place]:
    """Worktrees kept in `repo_folders` (on `machine`) whose agent is not in `known` ((agent, repo)
    pairs): removed from the config, their work kept. Every record read is put in `metas` (by path)."""
    found = []
    for path, data in await machine.records(sorted(repo_folders)):
        meta = parse_meta(data)
        if metas is not None:
            metas[path] = meta
        agent, repo = meta.get("agent"), meta.get("repo")
        if isinstance(agent, str) and isinstance(repo, str) and (agent, repo) not in known:
            if worktree_name_problem(agent) is not None:
                continue
            place = Place(agent, repo, "", machine)
            if place.meta == path and (await place.exists() or await place.lost()):
                found.append(place)
    return found


async def find_kept(agent: str, machine: Machine = LOCAL) -> Place:
    """The kept worktree of `agent` on `machine`, whatever repository it is of (an agent no longer in the config)."""
    check_name(agent)
    places = [p for p in await orphans(machine, set(await machine.folders()), set()) if p.agent == agent]
    if not places:
        raise ServiceError(f"no worktree of {agent!r}: it has no worktree = true in the config, and none is kept")
    if len(places) > 1:
        raise ServiceError(f"{agent!r} has worktrees in several repositories: {', '.join(p.shown_repo for p in places)}")
    return places[0]


# -- making and reusing ---------------------------------------------------------------------------


async def current_branch(place: Place) -> str | None:
    found = await place.machine.git("symbolic-ref", "--short", "-q", "HEAD", cwd=place.repo, check=False)
    return found.out.strip() or None if found.code == 0 else None


async def can_make(place: Place) -> None:
    """Refuse, with the reason, what would stop `place`'s worktree from being made at a start (its
    repository on no branch, or with no commit); nothing when it is there already."""
    look = await place.look()
    if look.folder and not look.git:
        raise place.lost_error()
    if not look.git:
        meta = await read_meta(place)
        await new_base(place, meta.get("base") if isinstance(meta.get("base"), str) else None)


async def new_base(place: Place, base: str | None) -> str:
    """The base branch a new worktree of `place` starts from: `base`, else the branch its repository
    is on; refused when it is on none, or has no commit to start from."""
    if base is None:
        base = await current_branch(place)
        if base is None:
            raise ServiceError(f"{place.shown_repo} is on no branch (detached HEAD): check out the branch to work from first")
    if (await place.machine.git("rev-parse", "--verify", "-q", "HEAD^{commit}", cwd=place.repo, check=False)).code != 0:
        raise ServiceError(f"{place.shown_repo} has no commit yet: a worktree starts from one")
    return base


async def ensure(place: Place) -> str:
    """Make `place`'s worktree if it is not there (reusing its branch if that is), return its base branch."""
    meta = await read_meta(place)
    base = meta.get("base") if isinstance(meta.get("base"), str) else None
    git = place.machine.git
    look = await place.look()
    if look.folder and not look.git:
        raise place.lost_error()  # `git worktree add` would fail there, after a prune that forgets its entry
    if look.git:
        await checkout_of(place, look)  # a worktree of this repository, registered there
        base = base or await current_branch(place)
        if base is None:
            raise ServiceError(f"the base branch of {place.shown} is not known and {place.shown_repo} is on no branch")
        if not meta:
            await write_meta(place, base)
        return base
    base = await new_base(place, base)
    await git("worktree", "prune", cwd=place.repo)  # a worktree folder deleted by hand is forgotten
    if await branch_exists(place, place.branch):
        await git("worktree", "add", place.path, place.branch, cwd=place.repo)
    else:
        await git("worktree", "add", "-b", place.branch, place.path, "HEAD", cwd=place.repo)  # its folders made
    await write_meta(place, base)
    return base


@dataclass(frozen=True)
class Checkout:
    """A worktree as deck points git at it: its repository `gitdir` (the main checkout's record of
    it, `.git/worktrees/ID`) and its files `path`, on `machine`."""

    gitdir: str
    path: str
    machine: Machine = LOCAL
    #: More options for every git command there (`no_filters`).
    options: tuple[str, ...] = ()

    async def git(
        self, *args: str, index: str | None = None, env: dict[str, str] | None = None, check: bool = True,
        into: BinaryIO | None = None, limit: int = MAX_OUTPUT, data: bytes | None = None,
    ) -> Result:
        """`git ARGS` in the worktree, its repository and files given both ways (`--git-dir` and
        `--work-tree`, `GIT_DIR` and `GIT_WORK_TREE`), with `index` for its index if given."""
        where = {"GIT_DIR": self.gitdir, "GIT_WORK_TREE": self.path, **({"GIT_INDEX_FILE": index} if index else {})}
        options = (*IN_WORKTREE, *self.options, f"--git-dir={self.gitdir}", f"--work-tree={self.path}")
        return await self.machine.git(*args, cwd=self.path, env={**where, **(env or {})}, check=check, options=options,
                                      into=into, limit=limit, data=data)  # fmt: skip


async def checkout_of(place: Place, look: Look | None = None) -> Checkout:
    """`place`'s worktree as git is pointed at it, its repository taken from the main checkout.

    Never found through the worktree's own `.git`: that file is the agent's to rewrite, and a
    repository it points to could name programs in its config (a clean filter, an ssh command
    for a lazy fetch) that git would run. Nor through a symlink put in the worktree's place: it
    could lead to another agent's worktree, whose work would be taken for this one's (diffed,
    merged, reset). The repository found (and a `config.worktree` in it) must be out of the
    worktree, where the agent cannot write. `look`: what is at its path, if looked at already."""
    if (look or await place.look()).link:
        raise place.symlink_error()
    machine = place.machine
    admin, entries, target = await machine.worktrees(place.repo, place.path)
    for entry in entries:
        if entry.worktree == target:
            if inside(entry.real, target) or inside(admin, target):
                raise ServiceError(f"the repository of {place.shown} is inside it: deck does not use it")
            return Checkout(entry.path, place.path, machine)
    raise ServiceError(f"{place.shown} is not a worktree of {place.shown_repo} (`git worktree list` there does not have it)")


async def no_filters(place: Place) -> tuple[str, ...]:
    """git options that switch off every filter the user's config defines (`filter.NAME.*`): a
    worktree's `.gitattributes` are the agent's, and could name one for git to run (its clean command
    as git stages the work, its smudge command as a merge of it is checked out)."""
    found = await place.machine.git("config", "-z", "--get-regexp", r"^filter\.", cwd=place.repo, check=False)
    names = set()
    for entry in found.out.split("\0"):
        key = entry.partition("\n")[0]
        name = key[len("filter.") : key.rfind(".")]
        if key.startswith("filter.") and name:
            if "=" in name:
                raise ServiceError(f"filter {name!r} of the git config cannot be switched off for a checkout (its name holds =)")
            names.add(name)
    options: list[str] = []
    for name in sorted(names):
        for key in ("clean", "smudge", "process"):
            options += ["-c", f"filter.{name}.{key}="]
        options += ["-c", f"filter.{name}.required=false"]
    return tuple(options)


def inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


async def branch_exists(place: Place, branch: str) -> bool:
    found = await place.machine.git("rev-parse", "--verify", "-q", f"refs/heads/{branch}", cwd=place.repo, check=False)
    return found.code == 0


# -- its state ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    place: Place
    base: str
    ahead: int
    files: tuple[str, ...]
    dirty: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent": self.place.agent, "path": self.place.path, "branch": self.place.branch, "base": self.base,
            "ahead": self.ahead, "changedFiles": len(self.files), "dirty": self.dirty,
            **({"host": self.place.host} if self.place.host else {}),
        }  # fmt: skip


@dataclass(frozen=True)
class Pending:
    """The worktree with its uncommitted work staged in a temporary index (`env` points git at it)."""

    head: str
    head_tree: str
    tree: str
    merge_base: str
    #: The worktree (`checkout_of`), and the temporary index its work is staged in.
    checkout: Checkout
    index: str

    @property
    def dirty(self) -> bool:
        return self.tree != self.head_tree


@contextlib.asynccontextmanager
async def pending(place: Place, base: str) -> AsyncIterator[Pending]:
    look = await place.look()
    if not look.git:
        raise place.lost_error() if look.folder else ServiceError(f"{place.agent} has no worktree at {place.shown}")
    checkout = dataclasses.replace(await checkout_of(place, look), options=await no_filters(place))
    # The worktree's index is its repository's `index` (`git rev-parse --git-path index`). Its copy
    # keeps its time: git trusts an entry's recorded stat only when the index was written after that
    # second; a copy dated now would hide a same-size edit made in the second the index was written
    # ("racily clean").
    async with place.machine.staging(posixpath.join(checkout.gitdir, "index")) as (index, copied):
        if not copied:
            await checkout.git("read-tree", "HEAD", index=index)
        await stage(checkout, index)
        tree = (await checkout.git("write-tree", index=index)).out.strip()
        found = await checkout.git("rev-parse", "HEAD", "HEAD^{tree}", f"refs/heads/{base}", check=False)
        if found.code != 0 and not await branch_exists(place, base):
            raise ServiceError(f"the base branch {base!r} of {place.agent}'s worktree does not exist in {place.shown_repo}")
        if found.code != 0:
            raise GitError(f"git rev-parse failed in {place.shown}: {found.err.strip() or found.code}")
        head, head_tree, _ = found.out.split()
        merge_base = (await checkout.git("merge-base", f"refs/heads/{base}", head)).out.strip()
        yield Pending(head, head_tree, tree, merge_base, checkout, index)


async def stage(checkout: Checkout, index: str) -> None:
    """`git add -A` of the worktree into `index`, but for its submodules, kept as recorded: to see
    whether one changed, git would run `git status` in it, with the config of the repository its
    `.git` names — a file the agent can write."""
    with tempfile.TemporaryDirectory(prefix="deck-worktree-") as temp:  # here, wherever the worktree is
        listing = os.path.join(temp, "listing")
        with open(listing, "wb") as out:
            await checkout.git("ls-files", "--stage", "-z", index=index, into=out)
        links = await asyncio.to_thread(gitlinks, listing)
    spec = b".\0" + b"".join(b":(exclude,literal)" + link + b"\0" for link in links)
    await checkout.git("add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul", index=index, data=spec)


def gitlinks(listing: str) -> list[bytes]:
    """The paths of the submodules in the file `listing`, output of `git ls-files --stage -z`."""
    found: list[bytes] = []
    rest = b""
    with open(listing, "rb") as f:
        while chunk := f.read(1 << 20):
            *entries, rest = (rest + chunk).split(b"\0")
            found += [entry.partition(b"\t")[2] for entry in entries if entry.startswith(GITLINK)]
    return found


def names(out: str) -> tuple[str, ...]:
    """The files of a `git diff --name-only -z`."""
    return tuple(name for name in out.split("\0") if name)


async def status(place: Place, base: str) -> Status:
    async with pending(place, base) as work:
        return await status_of(work, place, base)


async def status_of(work: Pending, place: Place, base: str) -> Status:
    listed = await work.checkout.git("diff", "--cached", "--no-renames", "--name-only", "-z", work.merge_base,
                                     index=work.index)  # fmt: skip
    ahead = await work.checkout.git("rev-list", "--count", f"refs/heads/{base}..{work.head}")
    files = await asyncio.to_thread(names, listed.out)  # 200,000 names: never on the event loop
    return Status(place, base, int(ahead.out.strip() or 0), files, work.dirty)


async def changes(place: Place, base: str, limit: int) -> dict[str, Any]:
    """The files the worktree changes against its merge-base, `limit` of them at most by name, each
    with whether its commits change it (`committed`) and whether it holds uncommitted changes to it
    (`uncommitted`); and how many there are in all."""
    async with pending(place, base) as work:
        committed = await work.checkout.git("diff", "--no-renames", "--name-only", "-z", work.merge_base, work.head)
        uncommitted = await work.checkout.git("diff", "--cached", "--no-renames", "--name-only", "-z", work.head,
                                              index=work.index)  # fmt: skip
    done, pending_ = set(names(committed.out)), set(names(uncommitted.out))
    every = sorted(done | pending_)
    files = [{"path": f, "committed": f in done, "uncommitted": f in pending_} for f in every[:limit]]
    return {"agent": place.agent, "base": base, "count": len(every), "files": files,
            **({"host": place.host} if place.host else {})}  # fmt: skip


async def diff(place: Place, base: str) -> tuple[str, Status]:
    """The unified diff of the worktree (commits, uncommitted and untracked files) against its
    merge-base, and its status, from the same look at it."""
    async with pending(place, base) as work:
        found = await work.checkout.git(
            "diff", "--cached", "--no-ext-diff", "--no-textconv", "--no-color", "--submodule=short", "-M",
            work.merge_base, index=work.index,
        )  # fmt: skip
        now = await status_of(work, place, base)
    if found.truncated:
        return found.out + f"\n… the diff is longer than {len(found.out.encode()) >> 20} MiB: the rest is left out\n", now
    return found.out, now


# -- merging and removing -----------------------------------------------------------------------------


async def identity(place: Place) -> dict[str, str]:
    """The fallback identity when git knows none, else nothing (the user's own is used)."""
    for var in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
        if (await place.machine.git("var", var, cwd=place.repo, check=False)).code != 0:
            return dict(FALLBACK_IDENTITY)
    return {}


async def main_checkout_ready(place: Place, base: str) -> None:
    """The main checkout is on `base` and has no uncommitted change; else a refusal that says so."""
    branch = await current_branch(place)
    if branch != base:
        on = f"on {branch}" if branch else "on no branch"
        raise ServiceError(f"the main checkout {place.shown_repo} is {on}, not on {base}: check out {base} there first")
    changed = await place.machine.git("status", "--porcelain", "-z", "--untracked-files=no", cwd=place.repo)
    if changed.out.strip("\0"):
        files = porcelain_files(changed.out)[:10]
        raise ServiceError(f"the main checkout {place.shown_repo} has uncommitted changes ({', '.join(files)}): "
                           "commit or stash them first", {"files": files})  # fmt: skip


def porcelain_files(out: str) -> list[str]:
    """The files of `git status --porcelain -z`, as they are named (git quotes names in its line output)."""
    fields = iter(out.split("\0"))
    files = []
    for field in fields:
        if len(field) > 3:
            files.append(field[3:])
            if field[0] in "RC":
                next(fields, None)  # the name it was renamed or copied from
    return files


class Conflict(ServiceError):
    """A merge that conflicts: `conflicts`, the files, as git names them (sorted)."""

    def __init__(self, message: str, conflicts: list[str]) -> None:
        super().__init__(message, {"conflicts": conflicts})
        self.conflicts = conflicts


async def merge(place: Place, base: str, squash: bool, message: str | None, about: str = "") -> dict[str, Any]:
    """Commit the worktree's pending work, merge it into `base` in the main checkout, move the worktree there.

    The commits say what the work is: `message`, else `about` (the agent's conversation title,
    or its first user line), else only whose it is."""
    subject = message or work_subject(place, about)
    await main_checkout_ready(place, base)
    who = await identity(place)
    git = place.machine.git
    async with pending(place, base) as work:
        commit = await commit_pending(work, subject, who)
        target = (await git("rev-parse", f"refs/heads/{base}", cwd=place.repo)).out.strip()
        if await contains(place, target, commit):
            raise ServiceError(f"nothing to merge: all of {place.agent}'s work is in {base} already")
        try:
            merged_tree = await merge_tree(place, target, commit)
        except Conflict as exc:
            raise Conflict(
                f"{place.agent}'s work conflicts with {base} in: {', '.join(exc.conflicts)}; nothing was changed. To go on: "
                f"ask {place.agent} to merge {base} into its branch and resolve them (or run `git merge {base}` in "
                f"{place.shown} yourself), then `deck merge {place.agent}` again; `deck diff {place.agent}` shows its work",
                exc.conflicts,
            ) from None
        text = merge_message(place, squash, message or subject, message, about)
        merged = await commit_merge(place, merged_tree, target, commit, squash, text, who)
        files = await git("diff", "--name-only", "-z", target, merged, cwd=place.repo)
        # The main checkout's files and its branch; the merge's `.gitattributes` name no filter that runs.
        await git("merge", "--ff-only", "-q", merged, cwd=place.repo, options=work.checkout.options)
        await adopt(work, commit)
    await follow(place, work.checkout, base, merged)
    return {"agent": place.agent, "base": base, "commit": merged, "squash": squash,
            "files": [f for f in files.out.split("\0") if f]}  # fmt: skip


def work_subject(place: Place, about: str) -> str:
    """The subject of the commit of an agent's pending work: what it is (`about`), else whose."""
    return f"{place.agent}: {about}" if about else f"{place.agent}'s work"


def merge_message(place: Place, squash: bool, subject: str, message: str | None, about: str) -> str:
    """A merge's commit message: the one given; squashed, the work's subject; else `Merge deck/AGENT: ABOUT`."""
    if squash:
        return message or subject
    return message or f"Merge {place.branch}" + (f": {about}" if about else "")


async def commit_pending(work: Pending, subject: str, who: dict[str, str]) -> str:
    """The commit holding all of the worktree's work: its HEAD, or, with work pending, a new commit
    on it (made, not yet on any branch: the worktree is untouched until `adopt`)."""
    if not work.dirty:
        return work.head
    return (await work.checkout.git("commit-tree", work.tree, "-p", work.head, "-m", subject, env=who)).out.strip()


async def contains(place: Place, target: str, commit: str) -> bool:
    """Whether commit `target` holds `commit` already (nothing of it left to merge)."""
    found = await place.machine.git("merge-base", "--is-ancestor", commit, target, cwd=place.repo, check=False)
    return found.code == 0


async def merge_tree(place: Place, target: str, commit: str) -> str:
    """The tree of `commit` merged into `target`, computed without a checkout (`git merge-tree
    --write-tree`, git 2.38+); a Conflict naming the files when it conflicts."""
    trial = await place.machine.git("merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", target, commit,
                                    cwd=place.repo, check=False)  # fmt: skip
    lines = [field for field in trial.out.split("\0") if field]  # the tree, then the files as named
    if trial.code == 1:
        conflicts = sorted(set(lines[1:]))
        raise Conflict(f"conflicts in: {', '.join(conflicts)}", conflicts)
    if trial.code != 0 or not lines:
        raise GitError(f"git merge-tree failed in {place.shown_repo}: {trial.err.strip() or trial.code} (it needs git 2.38+)")
    return lines[0]


async def commit_merge(
    place: Place, merged_tree: str, target: str, commit: str, squash: bool, text: str, who: dict[str, str]
) -> str:
    """The commit of `merged_tree` on `target`: a merge commit with `commit` as second parent, or squashed one parent."""
    parents = ["-p", target] if squash else ["-p", target, "-p", commit]
    return (await place.machine.git("commit-tree", merged_tree, *parents, "-m", text, cwd=place.repo, env=who)).out.strip()


async def adopt(work: Pending, commit: str) -> None:
    """The worktree's pending work is `commit` now (its HEAD moved there only if it is still where it
    was, its index read again), its files untouched."""
    if commit != work.head:
        await work.checkout.git("update-ref", "-m", "deck: pending work", "HEAD", commit, work.head)
        await work.checkout.git("reset", "-q")


async def follow(place: Place, checkout: Checkout, base: str, merged: str) -> None:
    """The worktree goes on from the merge `merged` (what it holds since is kept)."""
    try:
        await checkout.git("reset", "-q", "--keep", merged)
    except GitError as exc:
        raise ServiceError(f"merged into {base} as {merged[:12]}, but {place.shown} stays where it was: {exc}") from exc


async def remove(place: Place, base: str | None, force: bool) -> dict[str, Any]:
    """Remove the worktree and its branch; refused while it holds work not in `base`, unless `force`.

    git's own `git worktree remove` is never run: it reads the worktree's `.git` file (the agent's)
    and runs `git status` in the repository that file names. deck's checks are made with the
    repository taken from the main checkout; then deck deletes the folder itself, without
    following a symlink out of it, and `git worktree prune` in the main checkout forgets it."""
    await place.refuse_symlink()
    machine = place.machine
    if await place.exists():
        # Forced, its work is not looked at (a base branch renamed or gone since stops nothing), but
        # it must still be this repository's worktree, whatever its `.git` file says now.
        checkout = await checkout_of(place)
        if (await machine.look(posixpath.join(checkout.gitdir, "locked"))).exists:
            raise ServiceError(f"{place.shown} is locked (git worktree lock): unlock it first")
    if not force:
        await removable(place, base)
    if await place.exists() or await place.lost():  # lost: forced, git no longer sees it as a worktree
        await machine.delete(place.path)
    await machine.git("worktree", "prune", cwd=place.repo)
    deleted = False
    if await branch_exists(place, place.branch) and (force or base is not None):
        await machine.git("branch", "-D", place.branch, cwd=place.repo)  # merged (ahead 0), or forced
        deleted = True
    await machine.delete(place.meta)
    return {"agent": place.agent, "path": place.path, "branch": place.branch, "branchDeleted": deleted,
            **({"host": place.host} if place.host else {})}  # fmt: skip


async def removable(place: Place, base: str | None) -> None:
    """Refuse the removal of a worktree, or of the branch left of it, that holds work not in `base`."""
    if await place.lost():
        raise place.lost_error()
    ahead = 0
    if await place.exists():
        if base is None:
            raise ServiceError(f"the base branch of {place.agent}'s worktree is not known: "
                               f"`deck worktree remove {place.agent} --force` removes it")  # fmt: skip
        found = await status(place, base)
        if found.dirty:
            raise ServiceError(f"{place.agent}'s worktree has uncommitted work: `deck merge {place.agent}` keeps it, "
                               f"`deck worktree remove {place.agent} --force` drops it")  # fmt: skip
        ahead = found.ahead
    elif base is not None and await branch_exists(place, place.branch):
        count = await place.machine.git("rev-list", "--count", f"refs/heads/{base}..refs/heads/{place.branch}", cwd=place.repo)
        ahead = int(count.out.strip() or 0)
    if ahead:
        commits = f"{ahead} commit{'' if ahead == 1 else 's'}"
        raise ServiceError(f"{place.branch} has {commits} not merged into {base}: `deck merge {place.agent}` "
                           f"keeps them, `deck worktree remove {place.agent} --force` drops them")  # fmt: skip
