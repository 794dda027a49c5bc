"""Keeping a running deck in step with its config file: watching it, reading a change, saving, opening another.

A valid change applies at once (`Deck.apply_config`): new agents appear (in file order),
removed ones stop and go, a changed running agent is flagged `outdated` and keeps running
until restarted (`Agent.redefine`; `Agent.start` applies its `pending_config`), a changed
stopped agent takes its new definition, and the new limits are in force. An invalid
change, or a deleted file, keeps the last valid config running. Either way
`config:changed {path, valid, problems}` is sent. This module reads and writes the file;
the deck and its agents change their own state.

Reading and checking a file run in a thread: a big config never stalls the event loop, and
the lock keeps the changes in order (`config:changed` comes once the change is applied).
Only regular files are read (`config.read_text`); a pipe given at start is not followed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from deck.config import check as config_check
from deck.config import files as config_files
from deck.config.check import Loaded, Problem
from deck.errors import ServiceError

if TYPE_CHECKING:
    import asyncio as _asyncio
    from collections.abc import Coroutine

    from deck.config.models import DeckConfig


class ConfigHost(Protocol):
    """The deck whose config file is followed, as the watch uses it: the one way up from it."""

    config: DeckConfig
    config_path: Path | None
    text: str
    problems: list[Problem]

    def check_config(self, text: str) -> Loaded: ...

    def sections_checked(self, loaded: Loaded) -> None: ...

    async def apply_config(self, text: str, loaded: Loaded) -> None: ...

    def set_config_file(self, path: Path, source: str, created: bool) -> None: ...

    async def switch_config(self, path: Path, text: str, loaded: Loaded, *, created: bool) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, log_errors: bool = True) -> _asyncio.Task[Any]: ...

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

    def __init__(self, deck: ConfigHost) -> None:
        self.deck = deck
        self.lock = asyncio.Lock()
        #: Set once the file is watched: a change after this is seen.
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- watching ---------------------------------------------------------------------------

    def start(self) -> None:
        """Watch `deck.config_path` (nothing to watch for the built-in config, or a pipe read at start)."""
        if self._task is not None:
            self._task.cancel()
        self.ready = asyncio.Event()
        path = self.deck.config_path
        if path is None or config_files.is_pipe(path):
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
        from watchfiles import Change, awatch

        # Watch the directory, not the file: editors that save by writing a new file and
        # renaming it over the old one (vim, VS Code) replace the inode a file watch follows.
        wanted = {str(path.absolute()), os.path.realpath(path)}
        folders = {os.path.dirname(p) for p in wanted}
        # A watch follows its folder's inode: one removed (and made again) is seen by no watch of it,
        # so the folder's own removal is a change to look at too.
        changes = awatch(
            *folders, watch_filter=lambda _change, p: p in wanted or p in folders, step=STEP_MS, recursive=False
        )

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
                    found = await batch
                except StopAsyncIteration:
                    return
                await self._reload_logged()
                removed = sorted(p for change, p in found if p in folders and change is Change.deleted)
                if removed or not all(os.path.isdir(folder) for folder in folders):
                    # The folder went away: a watch on it sees nothing more, even once it is back
                    # (made again at once, it may even have the inode number it had).
                    raise FileNotFoundError(f"{', '.join(removed or sorted(folders))} was removed")
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
                text = await asyncio.to_thread(config_files.read_text, path)
                if not text.strip() and deck.text.strip():
                    # An editor that truncates then writes may be caught in between: an empty
                    # file would stop every agent. Read it again once it had time to finish.
                    await asyncio.sleep(SETTLE)
                    text = await asyncio.to_thread(config_files.read_text, path)
            except FileNotFoundError:
                if [p.message for p in deck.problems] != [DELETED]:
                    await deck.apply_config(deck.text, Loaded(None, [Problem(1, 1, DELETED)]))
                return
            except (OSError, UnicodeDecodeError) as exc:
                text = deck.text  # what deck last read stays its content
                loaded = Loaded(None, [Problem(1, 1, f"cannot read {path}: {exc}")])
            else:
                loaded = await asyncio.to_thread(deck.check_config, text)
            if text == deck.text and loaded.problems == deck.problems:
                if loaded.config is not None:
                    deck.sections_checked(loaded)  # checked here, in a thread: `Deck.section` need not
                return  # our own Save, or a touch
            await self.apply(text, loaded)

    async def apply(self, text: str, loaded: Loaded) -> None:
        """Make `loaded` the deck's config if it is valid; report it either way. Call with the lock held."""
        await self.deck.apply_config(text, loaded)

    # -- saving and opening -----------------------------------------------------------------

    async def save(self, text: str, base: str | None = None) -> Loaded:
        """Write `text` atomically and apply it, if it is valid; else change nothing.

        With `base` (the `baseHash` the caller read), the file must still be the one it read.
        """
        loaded = await asyncio.to_thread(self.deck.check_config, text)
        if loaded.config is None:
            return loaded
        async with self.lock:
            deck = self.deck
            path = deck.config_path
            if path is None:  # the built-in config: saved as the user's own
                path = config_files.xdg_config_file()
                if path.exists():
                    raise ServiceError(f"{path} exists already: open it to change it")
                base = None  # no file was read: the check above is the one that counts
            await asyncio.to_thread(_write, path, text, base)
            if deck.config_path is None:
                deck.set_config_file(path, "xdg", True)
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
                await asyncio.to_thread(_write, path, config_files.embedded_default())
                created = True
            text, unreadable = await asyncio.to_thread(config_check.read_file, path)
            loaded = config_check.Loaded(None, [unreadable]) if unreadable else await asyncio.to_thread(deck.check_config, text)
            if loaded.config is None:
                first = loaded.errors[0].format(str(path))
                raise ServiceError(f"not a valid config: {first}", {"problems": [p.to_dict() for p in loaded.problems]})
            await self.stop()
            await deck.switch_config(path, text, loaded, created=created)
            self.start()
            await asyncio.to_thread(remember, path)


def remember(path: Path) -> None:
    """Put `path` first in the recent config files; a failure is only logged (a convenience, never a failure)."""
    try:
        config_files.remember(path)
    except OSError as exc:
        log.warning("cannot remember %s in the recent files: %s", path, exc)


def _write(path: Path, text: str, base: str | None = None) -> None:
    try:
        config_files.write_atomic(path, text, base=base)
    except config_files.Changed as exc:
        raise ServiceError("the config file changed since it was read; reload it") from exc
    except OSError as exc:  # a read-only directory, a full disk, a pipe: the caller's error, not deck's
        raise ServiceError(f"cannot write {path}: {exc.strerror or exc}") from exc
