"""`deck land`: one merge train for many worktrees, each agent's work merged onto its base branch
in turn, each onto the tip the ones before it left.

A step (`Train._land_one`) never leaves the base branch half-merged, whatever stops it (Ctrl-C,
kill -9, a crash): the merge is computed without a checkout (`tree.merge_tree`), committed as an
object on no branch, checked, if a check is set, in a scratch worktree on a detached HEAD
(`check.py`), and only then does the base branch move, by one `git update-ref` compare-and-swap
from the tip the merge was made on. Until that moment nothing the user sees has changed; after it
the step is done, and the agent's worktree follows its merge while the train goes on. A step that
conflicts or fails its check is skipped, its worktree untouched, and the train goes on. Without
names, every worktree is looked at once, as the train reaches it: those with nothing to land are
passed over without a word.

The main checkout's files follow the base branch only when it is checked out there and clean (a
dirty one refuses the whole train before anything is done); a checkout on another branch is left
as it is; that they can follow (no untracked file of the user's in the way) is tried before the
branch moves. Between the branch's move and its files' (`git read-tree -m -u`), a journal
(`JOURNAL`) says what was moving: the next `deck land` finishes it if it was cut there, and
deletes a scratch worktree left behind. One `deck land` at a time per repository: a lock file
beside the worktrees' locks, which the kernel lets go of however its holder ends.

What the agent wrote never runs: git runs as everywhere in this plugin (no hook), and every
filter the user's config defines is switched off where a merge result is checked out (its
`.gitattributes` are the agent's, and could name one). The check is the user's own command: it
runs on the merge result, its output streamed as `land:progress` events and its last lines kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shlex
import shutil
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deck import AgentState, CommandLine, Duration, lock_file
from deck.errors import ServiceError
from pydantic import BaseModel, ConfigDict, Field

from . import tree
from .check import Scratch, drop_scratch, run_check
from .events import LandProgress, WorktreeChanged
from .git import GitError
from .tree import Conflict, Place

if TYPE_CHECKING:
    from deck import Deck

    from .service import Worktrees

log = logging.getLogger(__name__)

#: The journal's file, in the repository's folder of worktrees: a name no agent can have
#: (`worktree_name_problem` refuses a leading dot).
JOURNAL = ".land.json"
#: The most files a result names (landed, or conflicting), by name; `fileCount` / `conflictCount` say
#: how many there are when there are more.
MAX_NAMED = 200
#: How often a step is tried again when the base branch moved under it (another merge meanwhile).
ATTEMPTS = 3
#: A step's outcomes.
LANDED, CONFLICT, FAILED, NOTHING, BUSY, ERROR = "landed", "conflict", "failed", "nothing", "busy", "error"


class LandSettings(BaseModel):
    """The `[land]` section of the config file: what `deck land` checks a merge with."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    check: CommandLine = Field(
        [], description='The command a merge must pass to land, run on the merge result (a list, or one string split '
        'like a shell: "pytest -q"); none by default.'
    )  # fmt: skip
    timeout: Duration = Field(600.0, description='How long the check may run before it counts as failed ("10m").')


def land_settings(deck: Deck) -> LandSettings:
    found = deck.config_service.section("land")
    return found if isinstance(found, LandSettings) else LandSettings.model_validate({})


@dataclass
class Outcome:
    """What became of one agent's work in a train."""

    agent: str
    result: str
    summary: str
    base: str = ""
    commit: str = ""
    files: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    check: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"agent": self.agent, "result": self.result, "base": self.base, "summary": self.summary}
        if self.commit:
            found["commit"] = self.commit
        if self.result == LANDED:
            found["files"] = self.files[:MAX_NAMED]
            if len(self.files) > MAX_NAMED:
                found["fileCount"] = len(self.files)
        if self.conflicts:
            found["conflicts"] = self.conflicts[:MAX_NAMED]
            if len(self.conflicts) > MAX_NAMED:
                found["conflictCount"] = len(self.conflicts)
        if self.check:
            found["check"] = self.check
        return found


class Moved(Exception):
    """The base branch moved between a step's merge and its compare-and-swap: the step is made again."""


@dataclass(frozen=True)
class Merge:
    """One agent's work merged, not landed yet: onto `tip`, as `merged`; `commit` holds its work."""

    place: Place
    base: str
    tip: str
    commit: str
    merged: str
    work: tree.Pending


class Train:
    """One `deck land`: the agents' work landed in order on their base branches."""

    def __init__(self, worktrees: Worktrees, check: Sequence[str], timeout: float, squash: bool) -> None:
        self.worktrees = worktrees
        self.deck = worktrees.deck
        self.check = list(check)
        self.timeout = timeout
        self.squash = squash
        #: Per repository (`Place.key`): whether the main checkout's files follow its base branch.
        self._follows: dict[tuple[str, str], bool] = {}
        #: The scratch worktrees the checks run in, one per repository.
        self._scratch = Scratch()
        #: Per repository, as looked at once per train: who commits (`tree.identity`), the filters to switch off.
        self._who: dict[str, dict[str, str]] = {}
        self._filters: dict[str, tuple[str, ...]] = {}
        #: Whether the train is of every worktree (none named): those with nothing to land are passed over.
        self._every = False
        #: The landed agents' worktrees being brought to their merges (`_advance`).
        self._advancing: list[asyncio.Task[None]] = []

    # -- the train ------------------------------------------------------------------------------

    async def run(self, names: Sequence[str] | None) -> list[Outcome]:
        """Land `names` in that order (None: every worktree with work not in its base, in the config's
        order); a refusal of the whole train (a dirty main checkout) before anything is done."""
        self._every = names is None
        places = await self._chosen(names)
        self._check_exists([place for place, _ in places])
        async with self._locked({p.key: p for p, _ in places}.values()):
            for place, base in places:
                await self._ready(place, base)
            outcomes = []
            try:
                for place, base in places:
                    if (outcome := await self._step(place, base)) is not None:
                        outcomes.append(self._done(outcome))
            finally:
                await asyncio.shield(self._finish())
        return outcomes

    def _check_exists(self, places: Sequence[Place]) -> None:
        """A check command that is not there refuses the train at once, rather than fail for each agent
        (looked for here when an agent lands on this machine; a host's is found out as it runs)."""
        program = self.check[0] if self.check else None
        if program is None or os.sep in program or not any(not place.host for place in places):
            return  # a path is the checkout's own (a script of the repository's), run where the merge is
        if shutil.which(program) is None:
            raise ServiceError(f"the check command {program!r} is not found (check [land] check, or --check)")

    async def _finish(self) -> None:
        """The landed agents' worktrees brought to their merges, the scratch worktrees deleted."""
        await asyncio.gather(*self._advancing, return_exceptions=True)
        await self._scratch.drop()

    async def _chosen(self, names: Sequence[str] | None) -> list[tuple[Place, str]]:
        """The worktrees named, with their base branches; by default every worktree whose base is
        known (those without work are passed over as the train reaches them: one look at each)."""
        worktrees = self.worktrees
        if names is None:
            found = []
            for place in await worktrees.places():
                with contextlib.suppress(ServiceError):  # one that cannot be looked at is not picked
                    found.append((place, await worktrees.base(place)))
            return found
        if len(set(names)) != len(names):
            raise ServiceError("an agent is named twice: each lands once")
        chosen = []
        for name in names:
            place = await worktrees.made(name)
            chosen.append((place, await worktrees.base(place)))
        return chosen

    @contextlib.asynccontextmanager
    async def _locked(self, places: Any) -> AsyncIterator[None]:
        """One `deck land` at a time per repository, whatever deck runs it: a lock file each."""
        held = []
        try:
            for place in places:
                path = Path(place.lock).parent / ".land.lock"
                try:
                    fd = lock_file(path, shared=False)
                except OSError as exc:
                    raise ServiceError(f"cannot lock {path}: {exc.strerror or exc}") from exc
                if fd is None:
                    raise ServiceError(f"another `deck land` is landing work on {place.shown_repo}: wait for it to end")
                held.append(fd)
                await self._recover(place)
            yield
        finally:
            for fd in held:
                os.close(fd)

    async def _ready(self, place: Place, base: str) -> None:
        """Whether the main checkout's files follow `base`: on it and clean, yes; on another branch,
        no (only the branch moves); on it with uncommitted changes, the train is refused."""
        if (place.key, base) in self._follows:
            return
        elsewhere = await checked_out_elsewhere(place, base)
        if elsewhere is not None:
            raise ServiceError(f"nothing landed: {base} is checked out in {place.machine.at(elsewhere)}, whose files "
                               f"would not follow it: check out another branch there first")  # fmt: skip
        if await tree.current_branch(place) != base:
            self._follows[(place.key, base)] = False
            return
        try:
            await tree.main_checkout_ready(place, base)
        except ServiceError as exc:
            raise ServiceError(f"nothing landed: {exc}", exc.data) from None
        self._follows[(place.key, base)] = True

    async def _step(self, place: Place, base: str) -> Outcome | None:
        """One agent's outcome; None for one not named that has nothing to land (or cannot be looked at)."""
        agent = place.agent
        live = self.deck.agents.get(agent)
        if live is not None and live.state is AgentState.BUSY:
            if self._every and not await self._has_work(place):
                return None
            return Outcome(agent, BUSY, f"{agent} is busy: land it once its turn is over", base)
        try:
            for _ in range(ATTEMPTS):
                with contextlib.suppress(Moved):
                    return await self._land_one(place, base)
            return Outcome(agent, ERROR, f"{base} kept moving under the merge: try again", base)
        except ServiceError as exc:
            return Outcome(agent, ERROR, str(exc), base)

    async def _has_work(self, place: Place) -> bool:
        try:
            found = await self.worktrees.status(place.agent, place)
        except ServiceError:
            return False
        return bool(found.ahead or found.dirty)

    async def _land_one(self, place: Place, base: str) -> Outcome | None:
        """One agent's work: merged onto `base`'s tip, checked, landed by a compare-and-swap."""
        agent = place.agent
        try:
            merge = await self._merge(place, base)
        except Conflict as exc:
            summary = f"skipped: its work conflicts with {base} in {', '.join(exc.conflicts[:10])}" + (
                ", …" if len(exc.conflicts) > 10 else ""
            )
            return Outcome(agent, CONFLICT, summary, base, conflicts=exc.conflicts)
        except ServiceError:
            if self._every:
                log.info("land: %s's worktree cannot be looked at, passed over", agent, exc_info=True)
                return None
            raise
        if merge is None:
            return None if self._every else Outcome(agent, NOTHING, f"nothing to land: all of its work is in {base} already", base)
        pending = f", landed once the check passes" if self.check else ""
        self._progress(agent, "merge", "merged", f"merge made on {base}'s tip as {merge.merged[:12]}{pending}")
        if self.check:
            failed = await self._checked(merge)
            if failed is not None:
                return failed
        files = await self._move(merge)
        count = f"{len(files)} file{'' if len(files) == 1 else 's'}"
        return Outcome(agent, LANDED, f"landed on {base} as {merge.merged[:12]} ({count})", base, merge.merged, files)

    async def _merge(self, place: Place, base: str) -> Merge | None:
        """The agent's work (its pending work in a commit of its own) merged onto `base`'s tip; None
        when `base` holds it all already; a Conflict naming the files."""
        about = await self.worktrees.service.about(place.agent)
        if place.key not in self._who:
            self._who[place.key] = await tree.identity(place)
        who = self._who[place.key]
        git = place.machine.git
        async with self.worktrees.lock(place), tree.pending(place, base) as work:
            subject = tree.work_subject(place, about)
            commit = await tree.commit_pending(work, subject, who)
            tip = (await git("rev-parse", f"refs/heads/{base}", cwd=place.repo)).out.strip()
            if await tree.contains(place, tip, commit):
                return None
            self._progress(place.agent, "merge", "started", f"merging {place.agent}'s work onto {base}")
            merged_tree = await tree.merge_tree(place, tip, commit)
            text = tree.merge_message(place, self.squash, subject, None, about)
            merged = await tree.commit_merge(place, merged_tree, tip, commit, self.squash, text, who)
        return Merge(place, base, tip, commit, merged, work)

    async def _move(self, merge: Merge) -> list[str]:
        """Land `merge`: the base branch moved by a compare-and-swap (Moved when it moved meanwhile),
        the main checkout's files after it if they follow it, the agent's worktree onto the merge."""
        place, base = merge.place, merge.base
        git = place.machine.git
        async with self.worktrees.lock(place):
            follows = self._follows[(place.key, base)]
            if follows:
                await self._still_clean(place, base)
                await self._would_follow(place, base, merge)
                await self._journal(place, {"base": base, "from": merge.tip, "to": merge.merged})
            moved = await git("update-ref", "-m", f"deck land: {place.agent}", f"refs/heads/{base}", merge.merged,
                              merge.tip, cwd=place.repo, check=False)  # fmt: skip
            if moved.code != 0:
                if follows:
                    await self._journal(place, None)
                raise Moved
            if follows:
                await self._follow_files(place, merge.tip, merge.merged)
                await self._journal(place, None)
            files = await git("diff", "--name-only", "-z", merge.tip, merge.merged, cwd=place.repo)
        # Its worktree follows while the train goes on (git locks each worktree's index and HEAD apart
        # from the main checkout's); the train waits for them all at its end.
        self._advancing.append(self.deck.spawn(self._advance(merge), f"land: {place.agent}'s worktree to its merge"))
        return [f for f in files.out.split("\0") if f]

    async def _still_clean(self, place: Place, base: str) -> None:
        """The main checkout is still on `base` and clean (the user may have worked there meanwhile)."""
        try:
            await tree.main_checkout_ready(place, base)
        except ServiceError as exc:
            raise ServiceError(f"not landed, {base} unchanged: {exc}", exc.data) from None

    async def _would_follow(self, place: Place, base: str, merge: Merge) -> None:
        """The main checkout's files can follow the merge (no untracked file of the user's in the way):
        tried without changing anything, before the branch moves."""
        options = await self._no_filters(place)
        trial = await place.machine.git("read-tree", "-m", "-u", "-n", merge.tip, merge.merged, cwd=place.repo,
                                        options=options, check=False)  # fmt: skip
        if trial.code != 0:
            said = " ".join(trial.err.split()) or f"git read-tree exited {trial.code}"
            raise ServiceError(f"not landed, {base} unchanged: the main checkout {place.shown_repo} cannot take it: {said}")

    async def _follow_files(self, place: Place, tip: str, merged: str) -> None:
        """The main checkout's index and files from `tip` to `merged` (the branch is there already)."""
        options = await self._no_filters(place)
        await place.machine.git("read-tree", "-m", "-u", tip, merged, cwd=place.repo, options=options)

    async def _advance(self, merge: Merge) -> None:
        """The agent's worktree goes on from the merge, unless it moved meanwhile (then it is left, the
        user told, and it is looked at again); `worktree:changed` says where it is."""
        place = merge.place
        try:
            await tree.adopt(merge.work, merge.commit)
            head = await merge.work.checkout.git("rev-parse", "HEAD", check=False)
            if head.out.strip() != merge.commit:
                raise GitError(f"its HEAD moved meanwhile to {head.out.strip()[:12] or '?'}")
            await tree.follow(place, merge.work.checkout, merge.base, merge.merged)
        except ServiceError as exc:
            said = f"land: {place.agent} landed, but its worktree stays where it was: {exc}"
            self.deck.notice("worktrees", said, agent=place.agent, level="warning")
            await self.worktrees.refresh(place.agent)
            return
        # As deck left it: all of its work in its base, nothing pending (its next turn looks again).
        self.worktrees.changed[place.agent] = (place.key, frozenset())
        await self.worktrees.check_overlaps()
        self.deck.emit(WorktreeChanged(place.agent, 0, 0, False))

    async def _no_filters(self, place: Place) -> tuple[str, ...]:
        if place.key not in self._filters:
            self._filters[place.key] = await tree.no_filters(place)
        return self._filters[place.key]

    # -- the check ------------------------------------------------------------------------------

    async def _checked(self, merge: Merge) -> Outcome | None:
        """Run the check on `merge` in the scratch worktree: None when it passes, else the outcome."""
        agent, base = merge.place.agent, merge.base
        shown = shlex.join(self.check)
        self._progress(agent, "check", "started", f"checking {agent}'s merge: {shown}")
        try:
            folder = await self._scratch.at(merge.place, merge.merged, await self._no_filters(merge.place))
        except ServiceError as exc:
            return Outcome(agent, ERROR, f"skipped: no scratch worktree for the check: {exc}", base)
        streamed = functools.partial(self._progress, agent, "check", "output", notice=False)
        code, lines = await run_check(self.check, merge.place, folder, self.timeout, streamed)
        if code == 0:
            self._progress(agent, "check", "passed", f"{agent}'s merge passed the check")
            return None
        how = f"timed out after {self.timeout:g}s" if code is None else f"failed (exit code {code})"
        last = next((line for line in reversed(lines) if line.strip()), "")
        return Outcome(agent, FAILED, f"skipped: the check {how}" + (f": {last}" if last else ""), base, check=lines)

    # -- what is left of a train cut short ------------------------------------------------------

    async def _journal(self, place: Place, entry: dict[str, str] | None) -> None:
        path = str(place.folder / JOURNAL)
        if entry is None:
            await place.machine.delete(path)
        else:
            await place.machine.write(path, json.dumps({**entry, "repo": place.repo}).encode())

    async def _recover(self, place: Place) -> None:
        """Finish what a train cut short left in `place`'s repository: the main checkout's files
        behind its branch (the journal's move), a scratch worktree."""
        path = str(place.folder / JOURNAL)
        entry = tree.parse_meta(await place.machine.read(path))
        if all(isinstance(entry.get(k), str) for k in ("base", "from", "to")) and entry.get("repo") == place.repo:
            await self._finish_move(place, entry["base"], entry["from"], entry["to"])
        await place.machine.delete(path)
        await drop_scratch(place)

    async def _finish_move(self, place: Place, base: str, old: str, new: str) -> None:
        """The main checkout's files brought to `new` when its branch `base` is there and its index and
        files are still those of `old` (cut between the two); anything else is left as it is."""
        git = place.machine.git
        head = await git("rev-parse", "-q", "--verify", "HEAD", cwd=place.repo, check=False)
        if await tree.current_branch(place) != base or head.out.strip() != new:
            return
        behind = await git("diff-index", "--quiet", old, cwd=place.repo, check=False)
        if behind.code == 0:
            await self._follow_files(place, old, new)
            log.info("land: %s's files brought to %s after a train cut short", place.shown_repo, new[:12])

    # -- telling --------------------------------------------------------------------------------

    def _progress(self, agent: str, step: str, result: str, text: str, *, notice: bool = True) -> None:
        self.deck.emit(LandProgress(agent, step, result, text))
        if notice:
            self.deck.notice("worktrees", f"land: {text}", agent=agent)

    def _done(self, outcome: Outcome) -> Outcome:
        self.deck.emit(LandProgress(outcome.agent, "done", outcome.result, outcome.summary))
        level = "info" if outcome.result in (LANDED, NOTHING) else "warning"
        self.deck.notice("worktrees", f"land: {outcome.agent}: {outcome.summary}", agent=outcome.agent, level=level)
        return outcome


async def checked_out_elsewhere(place: Place, base: str) -> str | None:
    """A worktree of the repository but its main checkout that has branch `base` checked out (the
    user's own: the agents' are on `deck/…`), or None."""
    listed = await place.machine.git("worktree", "list", "--porcelain", "-z", cwd=place.repo)
    for record in listed.out.split("\0\0")[1:]:  # the main checkout's first
        fields = dict(field.split(" ", 1) for field in record.split("\0") if " " in field)
        if fields.get("branch") == f"refs/heads/{base}":
            return fields.get("worktree", "?")
    return None
