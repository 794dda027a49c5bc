"""`deck usage`: context used and cost of each agent of a running deck server, and their total."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from deck.cli.inbox import AttachOption, call, server


def usage(
    attach: Optional[str] = AttachOption,
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="The config whose server to ask."),
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
) -> None:
    """Show each agent's context used and cost, and the total.

    An agent that reports no cost says "cost unknown" and is not in the total.
    """
    from deck.tty import printable

    found = call(server(attach, config), "DeckService.Usage")
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    for name, row in found["agents"].items():
        context = f"{row['used']:,}/{row['size']:,} tokens" if row["size"] else f"{row['used']:,} tokens"
        typer.echo(printable(f"{name:<16} {context:<24} {_money(row['cost'])}"))
    total = " + ".join(_money({"amount": amount, "currency": currency}) for currency, amount in found["total"].items())
    line = f"total: {total or 'no cost reported'}"
    if found["notCounted"]:
        line += f" (not counted, cost unknown: {', '.join(found['notCounted'])})"
    typer.echo(printable(line))


def _money(cost: dict[str, Any] | None) -> str:
    return "cost unknown" if cost is None else f"{cost['amount']:.2f} {cost['currency']}"


def register(app: typer.Typer, command_cls: Any) -> None:
    app.command(cls=command_cls)(usage)
