"""`WorktreeService` and the watch on one deck's worktrees: made at an agent's start, looked at
after each of its turns (`worktree:changed`), compared with each other (`worktree:overlap`).

Work on one repository's worktrees runs one at a time (a lock per repository): git's own locks
would make two at once fail rather than wait.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from deck import AgentState, hookimpl, rpc_method
from deck.errors import ServiceError, StartFailed
from deck.events import TurnChanged, WorktreeChanged, WorktreeOverlap

from . import tree
from .git import GitMissing
from .tree import Place, Status

if TYPE_CHECKING:
    from deck import Agent, Deck
    from deck.events import Event

log = logging.getLogger(__name__)


class Worktrees:
    """One deck's worktrees: its `deck_before_start` and `deck_event` hooks and its service."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self.service = WorktreeService(self)
        #: The files each agent's worktree changes against its base, by repository, as last seen.
        self.changed: dict[str, tuple[str, frozenset[str]]] = {}
        #: (repository, file) → the agents changing it, as last announced (two or more).
        self.overlaps: dict[tuple[str, str], tuple[str, ...]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: Whether every worktree was looked at once (work left from before this deck counts too).
        self._surveyed = False

    def lock(self, repo: str) -> asyncio.Lock:
        return self._locks.setdefault(repo, asyncio.Lock())

    # -- hooks --------------------------------------------------------------------------------

    @hookimpl
    def deck_before_start(self, deck: Deck, agent: Agent) -> Any:
        if deck is not self.deck or not agent.config.worktree:
            return None
        return self._prepare(agent)

    async def _prepare(self, agent: Agent) -> None:
        try:
            place = await tree.locate(agent.name, agent.config.resolved_cwd())
            async with self.lock(place.repo):
                await tree.ensure(place)
            os.makedirs(place.workdir, exist_ok=True)  # a cwd folder git does not track
        except ServiceError as exc:
            raise StartFailed(f"no worktree: {exc}") from exc
        except OSError as exc:
            raise StartFailed(f"no worktree: {exc.strerror or exc}") from exc
        agent.workdir = place.workdir

    @hookimpl
    def deck_event(self, deck: Deck, event: Event) -> None:
        if deck is not self.deck or type(event) is not TurnChanged or event.busy:
            return
        agent = deck.agents.get(event.agent)
        if agent is not None and agent.config.worktree and agent.workdir is not None:
            deck.spawn(self._after_turn(agent.name), f"worktrees: {agent.name} after its turn")

    @hookimpl
    def deck_shutdown(self, deck: Deck) -> None:
        if deck is self.deck:
            deck.pm.unregister(self)

    async def _after_turn(self, name: str) -> None:
        try:
            found = await self.status(name)
        except ServiceError as exc:
            log.warning("worktrees: %s after its turn: %s", name, exc)
            return
        await self.survey()
        self.deck.emit(WorktreeChanged(name, len(found.files), found.ahead, found.dirty))
        await self.check_overlaps()

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
        if agent is not None and agent.config.worktree:
            return await tree.locate(name, agent.config.resolved_cwd())
        return await tree.find_kept(name)

    async def made(self, name: str) -> Place:
        """`place(name)`, of a worktree made already (its folder, or its record if only the folder
        is gone): an agent that has not started yet is told so, not taken for a broken worktree."""
        place = await self.place(name)
        if not place.exists() and not place.meta.exists():
            raise ServiceError(f"{name} has no worktree yet: it is made at its first start")
        return place

    async def base(self, place: Place) -> str:
        base = tree.read_meta(place).get("base")
        if not isinstance(base, str):
            raise ServiceError(f"the base branch of {place.agent}'s worktree is not known ({place.meta} is missing)")
        return base

    async def status(self, name: str, place: Place | None = None) -> Status:
        place = place or await self.place(name)
        async with self.lock(place.repo):
            found = await tree.status(place, await self.base(place))
        self.changed[name] = (place.repo, frozenset(found.files))
        return found

    async def places(self) -> list[Place]:
        """Every worktree there is for this config: its agents' (made already), then those kept
        in the same repositories for agents gone from the config."""
        found: list[Place] = []
        repos: set[str] = set()
        for agent in self.deck.agents.values():
            if not agent.config.worktree:  # its repository may keep worktrees of agents gone or switched off
                top = tree.top_of(agent.config.resolved_cwd())
                if top is not None:
                    repos.add(top)
                continue
            try:
                place = await tree.locate(agent.name, agent.config.resolved_cwd())
            except GitMissing:
                raise  # not "no worktrees": none can be looked at
            except ServiceError:
                continue  # not in a repository: `deck config validate` says so, its start fails
            repos.add(place.repo)
            if place.exists() or place.lost():
                found.append(place)
        known = {(p.agent, p.repo) for p in found}
        return found + tree.orphans({Place("", repo).folder for repo in repos}, known)

    async def check_overlaps(self) -> None:
        """Announce each file two agents' worktrees change, and each such overlap that has ended."""
        now: dict[tuple[str, str], set[str]] = {}
        for agent, (repo, files) in self.changed.items():
            for file in files:
                now.setdefault((repo, file), set()).add(agent)
        for key in sorted(set(now) | set(self.overlaps)):
            agents = tuple(sorted(now.get(key, ())))
            before = self.overlaps.get(key)
            if len(agents) >= 2 and agents != before:
                self.overlaps[key] = agents
                self.deck.emit(WorktreeOverlap(key[1], list(agents)))
            elif len(agents) < 2 and before is not None:
                del self.overlaps[key]
                self.deck.emit(WorktreeOverlap(key[1], list(agents)))  # cleared


class WorktreeService:
    """The worktrees of the agents with `worktree = true`: list, diff, merge, remove."""

    def __init__(self, worktrees: Worktrees) -> None:
        self.worktrees = worktrees

    @rpc_method("WorktreeService.List")
    async def list(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for place in await self.worktrees.places():
            try:
                found = await self.worktrees.status(place.agent, place)
            except GitMissing:
                raise
            except ServiceError as exc:
                rows.append({"agent": place.agent, "path": place.path, "branch": place.branch, "error": str(exc)})
                continue
            rows.append({**found.to_dict(), "configured": place.agent in self.worktrees.deck.agents})
        await self.worktrees.check_overlaps()
        return rows

    @rpc_method("WorktreeService.Diff")
    async def diff(self, agent: str) -> str:
        worktrees = self.worktrees
        place = await worktrees.made(agent)
        async with worktrees.lock(place.repo):
            text = await tree.diff(place, await worktrees.base(place))
        await worktrees.status(agent, place)
        await worktrees.check_overlaps()
        return text

    @rpc_method("WorktreeService.Merge")
    async def merge(self, agent: str, squash: bool = False, message: str | None = None) -> dict[str, Any]:
        worktrees = self.worktrees
        if message is not None and "\0" in message:  # no argument of a command can hold one
            raise ServiceError("the commit message cannot contain NUL characters")
        running = worktrees.deck.agents.get(agent)
        if running is not None and running.state is AgentState.BUSY:
            raise ServiceError(f"{agent} is busy: merge once its turn is over")
        place = await worktrees.made(agent)
        async with worktrees.lock(place.repo):
            result = await tree.merge(place, await worktrees.base(place), squash, message)
        found = await worktrees.status(agent, place)
        worktrees.deck.emit(WorktreeChanged(agent, len(found.files), found.ahead, found.dirty))
        await worktrees.check_overlaps()
        return result

    @rpc_method("WorktreeService.Remove")
    async def remove(self, agent: str, force: bool = False) -> dict[str, Any]:
        worktrees = self.worktrees
        running = worktrees.deck.agents.get(agent)
        if running is not None and running.state not in (AgentState.STOPPED, AgentState.ERROR):
            raise ServiceError(f"{agent} is running in its worktree: stop it first")
        place = await worktrees.made(agent)
        base = tree.read_meta(place).get("base")
        async with worktrees.lock(place.repo):
            result = await tree.remove(place, base if isinstance(base, str) else None, force)
        worktrees.changed.pop(agent, None)
        await worktrees.check_overlaps()
        return result
