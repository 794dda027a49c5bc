"""`WorktreeService` and the watch on one deck's worktrees: made at an agent's start, looked at
after each of its turns (`worktree:changed`), compared with each other (`worktree:overlap`).

Work on one repository's worktrees runs one at a time (a lock per repository): git's own locks
would make two at once fail rather than wait. An agent running in its worktree holds that
worktree's lock file (`running.py`), so that no other deck removes it meanwhile. Overlaps are told
per pair of agents, with how many files they share and the first 50 by name, worked out off the
event loop: two worktrees of 200,000 files each make one event, not 200,000.
"""

from __future__ import annotations

import asyncio
import builtins
import heapq
import logging
import os
import shlex
from typing import TYPE_CHECKING, Any

from deck import AgentState, hookimpl, listens, rpc_method
from deck.errors import ServiceError, StartFailed
from deck.events import AgentStateChanged, TurnChanged

from . import running, tree
from .config import wants_worktree
from .events import WorktreeChanged, WorktreeOverlap
from .git import GitMissing
from .land import Train, land_settings
from .machine import LOCAL, Machine, Remote, Unreachable
from .tree import Place, Status

if TYPE_CHECKING:
    from deck import Agent, Deck
    from deck.events import Event

log = logging.getLogger(__name__)

#: The most files one `worktree:overlap` names (the first by name); `count` says how many there are.
OVERLAP_FILES = 50
#: The most files `ChangedFiles` names per worktree (by name); `count` says how many there are.
CHANGED_FILES = 500
#: The states of an agent that runs no more: its worktree's lock file is let go.
ENDED = (AgentState.STOPPED.value, AgentState.ERROR.value)

#: Two agents' names (in order) → how many files both their worktrees change, and the first of them.
Overlaps = dict[tuple[str, str], tuple[int, tuple[str, ...]]]


class Worktrees:
    """One deck's worktrees: its `deck_before_start` and `deck_event` hooks and its service."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self.service = WorktreeService(self)
        #: The files each agent's worktree changes against its base, by repository, as last seen.
        self.changed: dict[str, tuple[str, frozenset[str]]] = {}
        #: The overlaps of each pair of agents, as last announced.
        self.overlaps: Overlaps = {}
        self._overlaps_lock = asyncio.Lock()
        self._locks: dict[str, asyncio.Lock] = {}
        #: Agent → the worktree it runs in and the descriptor of that worktree's lock file, held.
        self._running: dict[str, tuple[str, int]] = {}
        #: Whether every worktree was looked at once (work left from before this deck counts too).
        self._surveyed = False
        #: The hosts of agents with a `host`, by host and ssh arguments (each asked once where its worktrees are).
        self._hosts: dict[tuple[str, tuple[str, ...]], Remote] = {}

    def lock(self, place: Place) -> asyncio.Lock:
        return self._locks.setdefault(place.key, asyncio.Lock())

    async def machine(self, agent: Agent) -> Machine:
        """The machine `agent`'s repository is on: this one, or its host (through ssh)."""
        config = agent.config
        if not config.host:
            return LOCAL
        host = self._hosts.setdefault((config.host, tuple(config.ssh)), Remote(config.host, config.ssh))
        await host.prepare()
        return host

    async def locate(self, agent: Agent) -> Place:
        return await tree.locate(agent.name, agent.config.resolved_cwd(), await self.machine(agent))

    # -- hooks --------------------------------------------------------------------------------

    @hookimpl
    def deck_before_start(self, deck: Deck, agent: Agent) -> Any:
        if deck is not self.deck or not wants_worktree(deck, agent.name):
            return None
        return self._prepare(agent)

    @hookimpl
    def deck_check_agent(self, deck: Deck, agent: Agent) -> Any:
        if deck is not self.deck or not wants_worktree(deck, agent.name):
            return None
        return self._checked(agent)

    async def _checked(self, agent: Agent) -> str | None:
        """Why `agent`'s worktree cannot be made (its name, no git, no repository), or None."""
        try:
            await tree.can_make(await self.locate(agent))
        except ServiceError as exc:
            return str(exc)
        return None

    async def _prepare(self, agent: Agent) -> None:
        try:
            place = await self.locate(agent)
            self._claim(place)
            async with self.lock(place):
                await tree.ensure(place)
            if place.subdir:
                await place.machine.mkdirs(place.workdir)  # a cwd folder git does not track
        except ServiceError as exc:
            self._release(agent.name)
            raise StartFailed(f"no worktree: {exc}") from exc
        except OSError as exc:
            self._release(agent.name)
            raise StartFailed(f"no worktree: {exc.strerror or exc}") from exc
        except BaseException:
            self._release(agent.name)
            raise
        agent.workdir = place.workdir

    def _claim(self, place: Place) -> None:
        """Hold the lock file of the worktree `place`'s agent is about to run in, until it stops."""
        held = self._running.get(place.agent)
        if held is not None and held[0] == place.path:
            return
        self._release(place.agent)
        self._running[place.agent] = (place.path, running.claim(place))

    def _release(self, name: str) -> None:
        held = self._running.pop(name, None)
        if held is not None:
            os.close(held[1])

    @hookimpl
    @listens(AgentStateChanged, TurnChanged)
    def deck_event(self, deck: Deck, event: Event) -> None:
        if deck is not self.deck:
            return
        if type(event) is AgentStateChanged and event.state in ENDED:
            self._release(event.agent)
        if type(event) is not TurnChanged or event.busy:
            return
        agent = deck.agents.get(event.agent)
        if agent is not None and event.agent in self._running:
            deck.spawn(self.refresh(agent.name), f"worktrees: {agent.name} after its turn")

    @hookimpl
    def deck_shutdown(self, deck: Deck) -> None:
        if deck is self.deck:
            deck.pm.unregister(self)
            for name in list(self._running):
                self._release(name)

    async def refresh(self, name: str) -> None:
        """Look at agent `name`'s worktree again (after its turn, after a landing): `worktree:changed`,
        the overlaps told first."""
        try:
            found = await self.status(name)
        except ServiceError as exc:
            log.warning("worktrees: %s after its turn: %s", name, exc)
            return
        await self.survey()
        await self.check_overlaps()  # told before the change, so that it is known when the change is
        self.deck.emit(WorktreeChanged(name, len(found.files), found.ahead, found.dirty))

    async def survey(self) -> None:
        """Look once at every worktree not looked at yet: one that holds work from before this deck
        (its agent has had no turn here) overlaps with the others all the same."""
        if self._surveyed:
            return
        self._surveyed = True
        try:
            places = await self.places()
        except ServiceError as exc:
            log.warning("worktrees: looking at every worktree: %s", exc)
            return
        for place in places:
            if place.agent not in self.changed:
                try:
                    await self.status(place.agent, place)
                except ServiceError as exc:
                    log.warning("worktrees: %s: %s", place.agent, exc)

    # -- finding worktrees ----------------------------------------------------------------------

    async def place(self, name: str) -> Place:
        """The worktree of agent `name`: a `worktree = true` agent of the config, or one kept from before."""
        agent = self.deck.agents.get(name)
        if agent is not None and wants_worktree(self.deck, name):
            return await self.locate(agent)
        try:
            return await tree.find_kept(name)
        except ServiceError:  # on this machine; perhaps on the host of an agent of the config
            kept = [p for p in await self.places() if p.host and p.agent == name]
            if len(kept) != 1:
                raise
            return kept[0]

    async def made(self, name: str) -> Place:
        """`place(name)`, of a worktree made already (its folder, or its record if only the folder
        is gone): an agent that has not started yet is told so, not taken for a broken worktree."""
        place = await self.place(name)
        if not await place.exists() and not (await place.machine.look(place.meta)).exists:
            raise ServiceError(f"{name} has no worktree yet: it is made at its first start")
        return place

    async def base(self, place: Place, meta: dict[str, Any] | None = None) -> str:
        """The base branch of `place`'s worktree, from its record (`meta`, if read already)."""
        base = (meta if meta is not None else await tree.read_meta(place)).get("base")
        if not isinstance(base, str):
            raise ServiceError(f"the base branch of {place.agent}'s worktree is not known ({place.machine.at(place.meta)} is missing)")
        return base

    async def status(self, name: str, place: Place | None = None, meta: dict[str, Any] | None = None) -> Status:
        place = place or await self.place(name)
        async with self.lock(place):
            found = await tree.status(place, await self.base(place, meta))
        await self.seen(name, found)
        return found

    async def seen(self, name: str, found: Status) -> None:
        """`found` is what agent `name`'s worktree changes now."""
        self.changed[name] = (found.place.key, await asyncio.to_thread(frozenset, found.files))

    async def places(
        self, unreachable: dict[str, tuple[str, list[str]]] | None = None, metas: dict[str, dict[str, Any]] | None = None
    ) -> list[Place]:
        """Every worktree there is for this config: its agents' (made already), then those kept
        in the same repositories for agents gone from the config. A host ssh cannot reach is asked
        once, and left out: put in `unreachable` (host → ssh's reason and the agents there). The
        records read on the way are put in `metas` (by path)."""
        found: list[Place] = []
        repos: dict[Machine, set[str]] = {LOCAL: set()}
        missed: dict[tuple[str, tuple[str, ...]], Unreachable] = {}
        for agent in self.deck.agents.values():
            config = agent.config
            if not wants_worktree(self.deck, agent.name):  # its repository may keep worktrees of agents gone or switched off
                top = None if config.host else tree.top_of(config.resolved_cwd())
                if top is not None:
                    repos[LOCAL].add(top)
                continue
            try:
                if (config.host, tuple(config.ssh)) in missed:
                    raise missed[(config.host, tuple(config.ssh))]
                place = await self.locate(agent)
                repos.setdefault(place.machine, set()).add(place.repo)
                if (await place.look()).folder:  # made (or lost: there without its .git)
                    found.append(place)
            except GitMissing:
                raise  # not "no worktrees": none can be looked at
            except Unreachable as exc:
                missed[(config.host, tuple(config.ssh))] = exc
                if unreachable is not None:
                    unreachable.setdefault(exc.host, (exc.reason, []))[1].append(agent.name)
            except ServiceError:
                continue  # not in a repository: its start says so
        for machine, tops in repos.items():
            known = {(p.agent, p.repo) for p in found if p.machine is machine}
            try:
                found += await tree.orphans(machine, {str(Place("", top, "", machine).folder) for top in tops}, known, metas)
            except Unreachable as exc:  # lost since
                if unreachable is not None:
                    unreachable.setdefault(exc.host, (exc.reason, []))
        return found

    async def check_overlaps(self) -> None:
        """Announce each pair of agents whose worktrees change some of the same files, again when
        what it says changes, and once more with `count` 0 when they share none any more."""
        async with self._overlaps_lock:  # two checks at once would announce out of order
            now = await asyncio.to_thread(overlaps, dict(self.changed))
            for pair in sorted(set(now) | set(self.overlaps)):
                count, files = now.get(pair, (0, ()))
                if (count, files) == self.overlaps.get(pair, (0, ())):
                    continue
                if count:
                    self.overlaps[pair] = (count, files)
                else:
                    del self.overlaps[pair]
                self.deck.emit(WorktreeOverlap(files[0] if files else "", list(pair), list(files), count))
                self.deck.notice("worktrees", overlap_text(list(pair), list(files), count), level="warning" if count else "info")


def overlap_text(agents: list[str], files: list[str], count: int) -> str:
    """What the user is told of an overlap between worktrees, or of its end (`count` 0)."""
    who = ", ".join(agents)
    if count == 1:
        return f"{files[0]} is changed in the worktrees of {who}"
    if count:
        return f"{count} files are changed in the worktrees of {who}: " + ", ".join(files[:5]) + (", …" if count > 5 else "")
    return f"the worktrees of {who} no longer change the same files"


def overlaps(changed: dict[str, tuple[str, frozenset[str]]]) -> Overlaps:
    """Each pair of agents whose worktrees (of one repository) change some of the same files: how
    many, and the first OVERLAP_FILES of them by name. Run in a thread: it is linear in the files."""
    found: Overlaps = {}
    agents = sorted(changed)
    for i, first in enumerate(agents):
        repo, files = changed[first]
        for second in agents[i + 1 :]:
            other_repo, other_files = changed[second]
            shared = files & other_files if repo == other_repo else frozenset()
            if shared:
                found[(first, second)] = (len(shared), tuple(heapq.nsmallest(OVERLAP_FILES, shared)))
    return found


class WorktreeService:
    """The worktrees of the agents with `worktree = true`: list, diff, merge, remove."""

    def __init__(self, worktrees: Worktrees) -> None:
        self.worktrees = worktrees

    @rpc_method("WorktreeService.List")
    async def list(self) -> list[dict[str, Any]]:
        """A row per worktree; then one per host that could not be reached, `{host, unreachable,
        agents}` (ssh's reason, the agents of the config there): its worktrees are not listed."""
        rows: list[dict[str, Any]] = []
        unreachable: dict[str, tuple[str, list[str]]] = {}
        metas: dict[str, dict[str, Any]] = {}
        for place in await self.worktrees.places(unreachable, metas):
            try:
                found = await self.worktrees.status(place.agent, place, metas.get(place.meta))
            except GitMissing:
                raise
            except ServiceError as exc:
                rows.append({"agent": place.agent, "path": place.path, "branch": place.branch, "error": str(exc),
                             **({"host": place.host} if place.host else {})})  # fmt: skip
                continue
            rows.append({**found.to_dict(), "configured": place.agent in self.worktrees.deck.agents})
        await self.worktrees.check_overlaps()
        return rows + [{"host": host, "unreachable": why, "agents": agents} for host, (why, agents) in unreachable.items()]

    @rpc_method("WorktreeService.Diff")
    async def diff(self, agent: str) -> str:
        worktrees = self.worktrees
        place = await worktrees.made(agent)
        async with worktrees.lock(place):
            text, found = await tree.diff(place, await worktrees.base(place))
        await worktrees.seen(agent, found)
        await worktrees.check_overlaps()
        return text

    @rpc_method("WorktreeService.Merge")
    async def merge(self, agent: str, squash: bool = False, message: str | None = None) -> dict[str, Any]:
        worktrees = self.worktrees
        if message is not None and "\0" in message:  # no argument of a command can hold one
            raise ServiceError("the commit message cannot contain NUL characters")
        live = worktrees.deck.agents.get(agent)
        if live is not None and live.state is AgentState.BUSY:
            raise ServiceError(f"{agent} is busy: merge once its turn is over")
        place = await worktrees.made(agent)
        about = await self.about(agent)
        async with worktrees.lock(place):
            result = await tree.merge(place, await worktrees.base(place), squash, message, about)
        found = await worktrees.status(agent, place)
        worktrees.deck.emit(WorktreeChanged(agent, len(found.files), found.ahead, found.dirty))
        await worktrees.check_overlaps()
        files = len(result.get("files") or [])
        summary = f"merged into {result['base']} as {str(result['commit'])[:12]} ({files} file{'' if files == 1 else 's'})"
        return {**result, "summary": summary}

    async def about(self, agent: str) -> str:
        """What the agent's work is, for its commits: its conversation's title, else its first user
        line, on one line of 72 printable characters at most ("" when there is neither)."""
        try:
            conv = await self.worktrees.deck.call("ChatService.Conversation", {"agent": agent})
        except ServiceError:
            return ""
        first = next((m for m in conv.get("messages") or [] if m.get("role") == "user"), None)
        text = conv.get("title") or "".join(
            p.get("text", "") for p in (first or {}).get("parts") or [] if p.get("type") == "text"
        )
        first_line = next(iter(str(text).strip().splitlines()), "")
        line = " ".join("".join(c for c in first_line if c.isprintable() or c.isspace()).split())
        return line if len(line) <= 72 else line[:71].rstrip() + "…"

    @rpc_method("WorktreeService.Land")
    async def land(
        self, agents: builtins.list[str] | str | None = None, check: builtins.list[str] | str | None = None,
        squash: bool = False,
    ) -> builtins.list[dict[str, Any]]:
        """Land the work of `agents` (names, or one string of names; by default every worktree with work
        not in its base) on their base branches, in order (`land.py`): a result per agent. `check`:
        the command a merge must pass (else `[land] check`; "" or [] for none)."""
        names = agents.split() if isinstance(agents, str) else agents
        if names is not None and not all(isinstance(n, str) for n in names):
            raise ServiceError("agents must be names")
        settings = land_settings(self.worktrees.deck)
        command = settings.check if check is None else shlex.split(check) if isinstance(check, str) else check
        if not all(isinstance(arg, str) and "\0" not in arg for arg in command):
            raise ServiceError("the check must be a command line: strings without NUL characters")
        outcomes = await Train(self.worktrees, command, settings.timeout, squash).run(names or None)
        await self.worktrees.check_overlaps()
        return [o.to_dict() for o in outcomes]

    @rpc_method("WorktreeService.ChangedFiles")
    async def changed_files(self, agent: str | None = None) -> builtins.list[dict[str, Any]]:
        """What the worktrees change, but `agent`'s own: per worktree its agent, base branch, how
        many files it changes against its base and the first CHANGED_FILES of them by name, each with
        whether it is `committed` and whether it holds `uncommitted` changes (the agents' MCP tool
        `changed_files`, so that an agent sees before it edits a file that another one changes it)."""
        rows = []
        for place in await self.worktrees.places():
            if place.agent == agent:
                continue
            try:
                async with self.worktrees.lock(place):
                    rows.append(await tree.changes(place, await self.worktrees.base(place), CHANGED_FILES))
            except GitMissing:
                raise
            except ServiceError as exc:
                rows.append({"agent": place.agent, "error": str(exc)})
        return rows

    @rpc_method("WorktreeService.Remove")
    async def remove(self, agent: str, force: bool = False) -> dict[str, Any]:
        worktrees = self.worktrees
        live = worktrees.deck.agents.get(agent)
        if live is not None and live.state not in (AgentState.STOPPED, AgentState.ERROR):
            raise ServiceError(f"{agent} is running in its worktree: stop it first")
        place = await worktrees.made(agent)
        base = (await tree.read_meta(place)).get("base")
        async with worktrees.lock(place):
            with running.removing(place):  # refused while another deck runs it there (`deck run`)
                result = await tree.remove(place, base if isinstance(base, str) else None, force)
        worktrees.changed.pop(agent, None)
        await worktrees.check_overlaps()
        return result
