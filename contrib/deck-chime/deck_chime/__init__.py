"""deck-chime: a bell, a desktop notification or a command when an agent needs input or finishes."""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from deck import hookimpl


class ChimeSettings(BaseModel):
    """`[chime]`: strict, as deck's own tables are (`bell = "yes"` is an error, not true)."""

    model_config = ConfigDict(strict=True)

    bell: bool = True
    desktop: bool = False
    command: list[str] = Field(default_factory=list)
    on: list[Literal["input", "done"]] = Field(default_factory=lambda: ["input", "done"])


def settings(deck: Any) -> ChimeSettings:
    """`[chime]` of the config in force, as deck checked it (the defaults while it is invalid)."""
    return deck.config_service.section("chime") or ChimeSettings()


def moment(event: Any) -> tuple[str, str] | None:
    """(agent, what) when `event` is worth a notification, else None."""
    payload = event.payload()
    if event.name in ("permission:requested", "question:requested"):
        return payload["agent"], "input"
    if event.name == "turn:changed" and not payload["busy"]:
        return payload["agent"], "done"
    return None


MESSAGES = {"input": "needs your input", "done": "finished its turn"}


@hookimpl
def deck_config_sections() -> dict[str, type[BaseModel]]:
    return {"chime": ChimeSettings}


@hookimpl
def deck_event(deck: Any, event: Any) -> Any:
    found = moment(event)
    if found is None:
        return None
    config = settings(deck)
    agent, what = found
    if what not in config.on:
        return None
    if config.bell:
        ring_bell()
    commands = []
    if config.desktop and shutil.which("notify-send"):
        commands.append(["notify-send", "deck", f"{agent} {MESSAGES[what]}"])
    if config.command:
        commands.append([part.format(agent=agent, what=MESSAGES[what]) for part in config.command])
    return run_all(commands) if commands else None


def ring_bell() -> None:
    try:
        fd = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY)
    except OSError:
        return  # no terminal: nothing to ring
    try:
        os.write(fd, b"\a")
    finally:
        os.close(fd)


async def run_all(commands: list[list[str]]) -> None:
    for command in commands:
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL
        )
        await process.wait()
