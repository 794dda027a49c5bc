"""Keeping a running deck in step with its config file: watching it, applying changes, opening another.

A valid change applies at once: new agents appear (in file order), removed ones
stop and go, a changed running agent is flagged `outdated` and keeps running
until restarted (`Agent.start` applies its `pending_config`), a changed stopped
agent takes its new definition, and the new limits are in force. An invalid
change, or a deleted file, keeps the last valid config running. Either way
`config:changed {path, valid, problems}` is sent.

Reading and checking a file run in a thread: a big config never stalls the event loop, and
the lock keeps the changes in order (`config:changed` comes once the change is applied).
Only regular files are read (`config.read_text`); a pipe given at start is not followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import config as configmod
from .agent import Agent
from .config import DeckConfig, Loaded, Problem
from .errors import ServiceError
from .events import ConfigChanged
from .states import AgentState

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .app import Deck

log = logging.getLogger(__name__)

DELETED = "file deleted; the last valid config stays in use"
#: watchfiles yields a batch once no change came for STEP_MS (an editor's rename-save is one batch).
STEP_MS = 50
#: Wait between attempts when the file's directory cannot be watched (it was removed).
RETRY_AFTER = 1.0
#: How long an empty file gets to be written before it counts as empty.
SETTLE = 0.5


class LiveConfig:
    """The config file a running deck follows. One per deck; every change goes through its lock."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self.lock = asyncio.Lock()
        #: Set once the file is watched: a change after this is seen.
        self.ready = asyncio.Event()
        self._sections: dict[str, BaseModel] | None = None  # read on first use: plugins load after the config
        self._task: asyncio.Task[None] | None = None

    def section(self, name: str) -> BaseModel | None:
        """Plugin section `name` of the config in force, validated by the plugin's model."""
        if self._sections is None:
            self._sections = configmod.parse(self.deck.text, self.deck.config_sections()).sections
        return self._sections.get(name)

    # -- watching ---------------------------------------------------------------------------

    def start(self) -> None:
        """Watch `deck.config_path` (nothing to watch for the built-in config, or a pipe read at start)."""
        if self._task is not None:
            self._task.cancel()
        self.ready = asyncio.Event()
        path = self.deck.config_path
        if path is None or configmod.is_pipe(path):
            self._task = None
            return
        self._task = self.deck.spawn(self._watch(path), f"watch {path}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _watch(self, path: Path) -> None:
        reported = False
        while True:
            try:
                await self._follow(path)
                return
            except OSError as exc:  # the directory went away: report once, try again
                if not reported:
                    log.warning("cannot watch %s: %s", path, exc)
                    reported = True
                await self.reload()
                await asyncio.sleep(RETRY_AFTER)

    async def _follow(self, path: Path) -> None:
        from watchfiles import awatch

        # Watch the directory, not the file: editors that save by writing a new file and
        # renaming it over the old one (vim, VS Code) replace the inode a file watch follows.
        wanted = {str(path.absolute()), os.path.realpath(path)}
        folders = {os.path.dirname(p) for p in wanted}
        changes = awatch(*folders, watch_filter=lambda _change, p: p in wanted, step=STEP_MS, recursive=False)

        async def next_batch() -> Any:
            return await anext(changes)

        batch = asyncio.get_running_loop().create_task(next_batch(), name=f"watchfiles {path}")
        try:
            # The first step of `awatch` sets up the OS watch before it waits for a change.
            await asyncio.sleep(0)
            self.ready.set()
            await self._reload_logged()  # catch up with a change made before the watch began
            while True:
                try:
                    await batch
                except StopAsyncIteration:
                    return
                await self._reload_logged()
                if not all(os.path.isdir(folder) for folder in folders):
                    # The folder went away: a watch on it sees nothing more, even once it is back.
                    raise FileNotFoundError(f"no such directory: {', '.join(sorted(folders))}")
                batch = asyncio.get_running_loop().create_task(next_batch(), name=f"watchfiles {path}")
        finally:
            batch.cancel()
            await asyncio.gather(batch, return_exceptions=True)
            await changes.aclose()

    # -- reloading --------------------------------------------------------------------------

    async def _reload_logged(self) -> None:
        try:
            await self.reload()
        except Exception:  # a bug must not end the watch: the next save gets another chance
            log.exception("reloading %s failed", self.deck.config_path)

    async def reload(self) -> None:
        """Read the file again and apply it if it changed."""
        async with self.lock:
            deck = self.deck
            path = deck.config_path
            if path is None:
                return
            try:
                text = await asyncio.to_thread(configmod.read_text, path)
                if not text.strip() and deck.text.strip():
                    # An editor that truncates then writes may be caught in between: an empty
                    # file would stop every agent. Read it again once it had time to finish.
                    await asyncio.sleep(SETTLE)
                    text = await asyncio.to_thread(configmod.read_text, path)
            except FileNotFoundError:
                if [p.message for p in deck.problems] != [DELETED]:
                    deck.problems = [Problem(1, 1, DELETED)]
                    self._changed()
                return
            except (OSError, UnicodeDecodeError) as exc:
                text = deck.text  # what deck last read stays its content
                loaded = Loaded(None, [Problem(1, 1, f"cannot read {path}: {exc}")])
            else:
                loaded = await asyncio.to_thread(configmod.parse, text, deck.config_sections())
            if text == deck.text and loaded.problems == deck.problems:
                if loaded.config is not None and self._sections is None:
                    self._sections = loaded.sections  # checked here, in a thread: `section` need not
                return  # our own Save, or a touch
            await self.apply(text, loaded)

    async def apply(self, text: str, loaded: Loaded) -> None:
        """Make `loaded` the deck's config if it is valid; report it either way. Call with the lock held."""
        deck = self.deck
        deck.text, deck.problems = text, loaded.problems
        if loaded.config is not None:
            await self._apply_config(loaded.config)
            self._sections = loaded.sections
        self._changed()

    async def _apply_config(self, new: DeckConfig) -> None:
        deck = self.deck
        removed = [agent for name, agent in deck.agents.items() if name not in new.agents]
        for agent in removed:
            if agent.name in deck.chat.conversations:
                with contextlib.suppress(ServiceError):
                    deck.chat.cancel(agent.name)  # so no queued message starts it again
            agent.retired = True  # nothing may start it again while it stops
        deck.agents = {name: agent for name, agent in deck.agents.items() if name in new.agents}
        await asyncio.gather(*(agent.stop() for agent in removed), return_exceptions=True)
        deck.config = new
        old, touched = deck.agents, []
        deck.agents = {}
        for name, definition in new.agents.items():
            kept = old.get(name)
            if kept is None:
                kept = Agent(deck, name, definition)
                touched.append(kept)
            elif _redefine(kept, definition):
                touched.append(kept)
            deck.agents[name] = kept
        for agent in touched:
            agent.emit_state()

    def _changed(self) -> None:
        deck = self.deck
        valid = not any(not p.warning for p in deck.problems)
        path = str(deck.config_path) if deck.config_path else ""
        deck.emit(ConfigChanged(path, valid, [p.to_dict() for p in deck.problems]))

    # -- saving and opening -----------------------------------------------------------------

    async def save(self, text: str, base: str | None = None) -> Loaded:
        """Write `text` atomically and apply it, if it is valid; else change nothing.

        With `base` (the `baseHash` the caller read), the file must still be the one it read.
        """
        loaded = await asyncio.to_thread(configmod.parse, text, self.deck.config_sections())
        if loaded.config is None:
            return loaded
        async with self.lock:
            deck = self.deck
            path = deck.config_path
            if path is None:  # the built-in config: saved as the user's own
                path = configmod.xdg_config_file()
                if path.exists():
                    raise ServiceError(f"{path} exists already: open it to change it")
                base = None  # no file was read: the check above is the one that counts
            await asyncio.to_thread(_write, path, text, base)
            if deck.config_path is None:
                deck.config_path, deck.config_source, deck.config_created = path, "xdg", True
                self.start()
            await self.apply(text, loaded)
        return loaded

    async def open(self, path: Path) -> None:
        """Stop every agent, forget the conversations, then follow `path` (created if missing)."""
        deck = self.deck
        path = path.expanduser().absolute()
        async with self.lock:
            created = False
            if not path.exists():
                if not path.parent.is_dir():
                    raise ServiceError(f"cannot create {path}: no such directory {path.parent}")
                await asyncio.to_thread(_write, path, configmod.embedded_default())
                created = True
            text, loaded = await asyncio.to_thread(configmod.load_file, path, deck.config_sections())
            if loaded.config is None:
                first = loaded.errors[0].format(str(path))
                raise ServiceError(f"not a valid config: {first}", {"problems": [p.to_dict() for p in loaded.problems]})
            await self.stop()
            deck.chat.cancel_pending_asks()
            old = list(deck.agents.values())
            for agent in old:
                agent.retired = True
            deck.agents = {}
            await asyncio.gather(*(agent.stop() for agent in old), return_exceptions=True)
            deck.chat.forget()
            deck.config_path, deck.config_source, deck.config_created = path, "open", created
            deck.config, deck.text, deck.problems = loaded.config, text, loaded.problems
            self._sections = loaded.sections
            deck.agents = {name: Agent(deck, name, cfg) for name, cfg in loaded.config.agents.items()}
            self.start()
            self._changed()
            await asyncio.to_thread(remember, path)


def remember(path: Path) -> None:
    """Put `path` first in the recent config files; a failure is only logged (a convenience, never a failure)."""
    try:
        configmod.remember(path)
    except OSError as exc:
        log.warning("cannot remember %s in the recent files: %s", path, exc)


def _write(path: Path, text: str, base: str | None = None) -> None:
    try:
        configmod.write_atomic(path, text, base=base)
    except configmod.Changed as exc:
        raise ServiceError("the config file changed since it was read; reload it") from exc
    except OSError as exc:  # a read-only directory, a full disk, a pipe: the caller's error, not deck's
        raise ServiceError(f"cannot write {path}: {exc.strerror or exc}") from exc


DISPLAY_ONLY = ("title", "icon", "description")


def _redefine(agent: Agent, definition: Any) -> bool:
    """Give `agent` its new definition, or flag it outdated while it runs. True if anything changed."""
    if definition == (agent.pending_config or agent.config):
        return False
    shown = {key: getattr(definition, key) for key in DISPLAY_ONLY}
    if agent.config.model_copy(update=shown) == definition:  # only how it is shown: no restart needed
        agent.config, agent.pending_config, agent.outdated = definition, None, False
        return True
    if agent.state in (AgentState.STOPPED, AgentState.ERROR):
        agent.config, agent.pending_config, agent.outdated = definition, None, False
    elif definition == agent.config:  # edited back to what it runs with
        agent.pending_config, agent.outdated = None, False
    else:
        agent.pending_config, agent.outdated = definition, True
    return True
