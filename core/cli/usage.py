"""`deck usage`: context used and cost of each agent of a running deck server, and their total."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from deck.cli.common import echo, echo_json
from deck.cli.inbox import AttachOption, call, server


def usage(
    attach: Optional[str] = AttachOption,
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="The config whose server to ask."),
    by: str = typer.Option("agent", "--by", help="agent: each agent's context and cost; day: what each day cost."),
    as_json: bool = typer.Option(False, "--json", help="JSON output (DeckService.Usage)."),
) -> None:
    """Show what the agents of a running server used and spent.

    Each agent's context and the cost of its conversation, since the server started and
    today (--by agent), or per day (--by day, from the history).

    An agent that reports no cost says "cost unknown" and is not in the totals.
    """
    if by not in ("agent", "day"):
        raise typer.BadParameter(f"{by!r}: use agent or day", param_hint="--by")
    found = call(server(attach, config), "DeckService.Usage", {"by": by})
    if as_json:
        echo_json(found)
        return
    lines = _by_day(found) if by == "day" else _by_agent(found)
    for line in lines:
        echo(line)


def _by_agent(found: dict[str, Any]) -> list[str]:
    lines = [f"{'agent':<16} {'context':<24} {'tokens':<12} {'conversation':<14} {'since start':<14} today"]
    for name, row in found["agents"].items():
        context = f"{row['used']:,}/{row['size']:,} tokens" if row["size"] else f"{row['used']:,} tokens"
        used = f"{row['tokens']['conversation']:,}" if row["tokens"]["conversation"] else "-"
        if row["cost"] is None and not row["spent"]:
            lines.append(f"{name:<16} {context:<24} {used:<12} cost unknown (not counted)")
            continue
        lines.append(
            f"{name:<16} {context:<24} {used:<12} {_money(row['cost']):<14} {_sum(row['spent']):<14} {_sum(row['today'])}"
        )
    line = f"total: {_sum(found['sinceStart'])} since the server started, {_sum(found['today'])} today"
    if found["tokens"]["sinceStart"]:
        line += f"; {found['tokens']['sinceStart']:,} tokens since the server started, {found['tokens']['today']:,} today"
    if found["notCounted"]:
        line += f" (not counted, cost unknown: {', '.join(found['notCounted'])})"
    return [*lines, line]


def _by_day(found: dict[str, Any]) -> list[str]:
    days = found.get("days") or []
    if not days:
        return ["no cost reported yet"]
    lines = []
    for day in days:
        agents = ", ".join(f"{name} {_sum(totals)}" for name, totals in sorted(day["agents"].items()))
        tokens = f"  {day['tokens']:,} tokens" if day.get("tokens") else ""
        lines.append(f"{day['day']}  {_sum(day['total'])}  ({agents}){tokens}")
    if found["notCounted"]:
        lines.append(f"not counted, cost unknown: {', '.join(found['notCounted'])}")
    return lines


def _money(cost: dict[str, Any] | None) -> str:
    return "cost unknown" if cost is None else f"{cost['amount']:.2f} {cost['currency']}"


def _sum(totals: dict[str, Any]) -> str:
    """`3.00 EUR + 1.25 USD`, or `nothing` when nothing was spent."""
    shown = [f"{a:.2f} {c}" if isinstance(a, (int, float)) else f"? {c}" for c, a in sorted(totals.items())]
    return " + ".join(shown) or "nothing"


def register(app: typer.Typer, command_cls: Any) -> None:
    app.command(cls=command_cls)(usage)
