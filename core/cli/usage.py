"""`deck usage`: context used and cost of each agent of a running deck server, and their total;
per day, from the history, with or without a server."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer
from deck.cli.common import echo, echo_json, fail
from deck.cli.inbox import AttachOption, ServerConfigOption, call, server
from deck.errors import ExitCode

#: What an agent that never said its context shows in the context column, and a count never reported.
NOT_REPORTED = "not reported"
NONE_REPORTED = "—"
#: What a sum of nothing reads as.
NOTHING = "nothing spent yet"


class By(str, Enum):
    agent = "agent"
    day = "day"


def usage(
    attach: Optional[str] = AttachOption,
    config: Optional[Path] = ServerConfigOption,
    by: By = typer.Option(
        By.agent, "--by", metavar="[agent|day]",
        help="agent: each agent's context and cost (a running server); day: what each day cost (the history).",
    ),  # fmt: skip
    as_json: bool = typer.Option(False, "--json", help="JSON output (DeckService.Usage)."),
) -> None:
    """Show what the agents used and spent.

    Each agent's context and the cost of its conversation, since the server started and
    today (--by agent: a running server's), or per day (--by day, from the history: with
    no server running, read from the history file).

    An agent that reports no cost says "cost unknown" and is not in the totals.
    """
    if by is By.day and attach is None:
        found, live = _days_of(config)
    else:
        name = server(attach, config, "; `deck usage --by day` reads the history without one")
        found, live = call(name, "DeckService.Usage", {"by": by.value}), True
    if as_json:
        echo_json(found)
        return
    lines = _by_day(found, live) if by is By.day else _by_agent(found)
    for line in lines:
        echo(line)


def _days_of(config: Optional[Path]) -> tuple[dict[str, Any], bool]:
    """`DeckService.Usage(by="day")` of the server running the config in use, and True; with none
    running, `{days}` as the history keeps them (read by a deck of the config made for the call,
    which starts no agent), and False."""
    import asyncio

    from deck.config.files import find_config
    from deck.errors import ServiceError, UsageError
    from deck.remote.socket_client import call_deck, server_of

    path, source = find_config(str(config) if config else None)
    if path is not None and not path.exists():
        fail(f"config file not found: {path}")
    name = server_of(path) if path is not None else None
    if name is not None:
        return call(name, "DeckService.Usage", {"by": "day"}), True
    try:  # started: the history plugin opens its store, as a server's start does
        found = asyncio.run(call_deck(path, source, "DeckService.Usage", {"by": "day"}, started=True))
    except UsageError as exc:
        *first, last = exc.lines()
        for line in first:
            echo(f"deck: {line}", err=True)
        fail(last)
    except ServiceError as exc:
        fail(str(exc), ExitCode.ERROR)
    return {"days": found.get("days") or []}, False


#: The columns of `deck usage`, each at least as wide as given: a longer value widens its column.
COLUMNS = (
    ("agent", 16), ("context", 24), ("tokens (reported)", 18), ("conversation", 14), ("since start", 18), ("today", 0),
)  # fmt: skip


def _by_agent(found: dict[str, Any]) -> list[str]:
    rows = [[title for title, _width in COLUMNS]]
    for name, row in found["agents"].items():
        if row["size"]:
            context = f"{row['used']:,}/{row['size']:,} tokens"
        else:
            context = f"{row['used']:,} tokens" if row["used"] else NOT_REPORTED
        used = f"{row['tokens']['conversation']:,}" if row["tokens"]["conversation"] else NONE_REPORTED
        if row["cost"] is None and not row["spent"]:  # every column filled all the same: none shifts left
            rows.append([name, context, used, "cost unknown (not counted)", NONE_REPORTED, NONE_REPORTED])
        else:
            rows.append([name, context, used, _money(row["cost"]), _sum(row["spent"]), _sum(row["today"])])
    lines = _table(rows)
    if found["sinceStart"] or found["today"]:
        line = f"total: {_sum(found['sinceStart'])} since the server started, {_sum(found['today'])} today"
    else:
        line = f"total: {NOTHING}"
    if found["tokens"]["sinceStart"]:
        tokens = found["tokens"]
        line += f"; {tokens['sinceStart']:,} tokens reported since the server started, {tokens['today']:,} today"
    if found["notCounted"]:
        line += f" (not counted, cost unknown: {', '.join(found['notCounted'])})"
    return [*lines, line]


def _table(rows: list[list[str]]) -> list[str]:
    """`rows` in columns, each as wide as `COLUMNS` says or as its widest value, one space apart:
    a value longer than its column's width (a sum in two currencies) moves no other column."""
    widths = [max(minimum, *(len(row[i]) for row in rows)) for i, (_title, minimum) in enumerate(COLUMNS)]
    widths[-1] = 0  # the last column: no padding at the end of a line
    return [" ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def _by_day(found: dict[str, Any], live: bool) -> list[str]:
    days = found.get("days") or []
    if not days:
        return ["no cost reported yet" if live else "no cost kept in the history yet"]
    lines = []
    for day in days:
        agents = ", ".join(f"{name} {_sum(totals)}" for name, totals in sorted(day["agents"].items()))
        spent = f"{_sum(day['total'])}  ({agents})" if agents else _sum(day["total"])
        tokens = f"  {day['tokens']:,} tokens reported" if day.get("tokens") else ""
        lines.append(f"{day['day']}  {spent}{tokens}")
    if found.get("notCounted"):
        lines.append(f"not counted, cost unknown: {', '.join(found['notCounted'])}")
    return lines


def _money(cost: dict[str, Any] | None) -> str:
    return "cost unknown" if cost is None else f"{cost['amount']:.2f} {cost['currency']}"


def _sum(totals: dict[str, Any]) -> str:
    """`3.00 EUR + 1.25 USD`, or `nothing spent yet` when nothing was spent."""
    shown = [f"{a:.2f} {c}" if isinstance(a, (int, float)) else f"? {c}" for c, a in sorted(totals.items())]
    return " + ".join(shown) or NOTHING


def register(app: typer.Typer, command_cls: Any) -> None:
    app.command(cls=command_cls)(usage)
