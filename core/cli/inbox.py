"""`deck inbox` and `deck answer`: what waits for the user in a running deck server, answered from a shell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from deck.cli.common import echo, echo_json, fail
from deck.errors import ExitCode
from deck.frontend import ALWAYS, ONCE, REJECT, choose_option

AttachOption = typer.Option(None, "--attach", metavar="NAME", help="The running deck server NAME (default: the config's).")
ServerConfigOption = typer.Option(None, "--config", "-c", metavar="PATH", help="The config whose server to ask.")


def server(attach: Optional[str], config: Optional[Path], otherwise: str = "") -> str:
    """The server to ask: NAME, or the one running the config in use; a clear error when none runs
    (`otherwise`: what the command can do without one)."""
    from deck.config.files import find_config
    from deck.remote.socket_client import server_of

    if attach is not None:
        return attach
    path, _source = find_config(str(config) if config else None)
    name = server_of(path) if path is not None and path.exists() else None
    if name is None:
        fail(f"no deck server runs {path or 'a config file here'}: start one with `deck serve`, or name one with --attach"
             f"{otherwise}", ExitCode.ERROR)  # fmt: skip
    return name


def call(name: str, method: str, params: Any = None) -> Any:
    import asyncio

    from deck.errors import ServiceError
    from deck.remote.socket_client import call_server

    try:
        return asyncio.run(call_server(name, method, params))
    except ServiceError as exc:
        fail(str(exc), ExitCode.ERROR)


def inbox(
    attach: Optional[str] = AttachOption,
    config: Optional[Path] = ServerConfigOption,
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
) -> None:
    """List what waits for you: permission requests and questions.

    Oldest first, across the agents of a running deck server, each permission request with its
    options: answer one with `deck answer ID OPTION` (a question: `deck answer ID --json VALUES`).
    --json: the rows of DeckService.Inbox, a permission's `options` ({optionId, name, kind}) included.
    """
    rows = call(server(attach, config), "DeckService.Inbox")
    if as_json:
        echo_json(rows)
        return
    if not rows:
        echo("nothing waits for you")
        return
    for row in rows:
        who = f"{row['agent']} › {row['subagent']}" if row.get("subagent") else row["agent"]  # a subagent's request
        echo(f"{row['id']:<12} {who:<16} {row['since']:<24} {row['title']}")
        if row["kind"] == "permission" and row.get("options"):
            echo(f"{'':<12} options: {_choices(row['options'])}  (deck answer {row['id']} OPTION)")
        elif row["kind"] == "question":
            echo(f"{'':<12} answer with --json VALUES, or --decline")


def _choices(options: list[dict[str, Any]]) -> str:
    """`allow_once (Allow), reject_once (Reject)`: each option's id, to type, and its name."""
    return ", ".join(f"{o.get('optionId')} ({o.get('name') or o.get('kind') or '?'})" for o in options)


def answer(
    request: str = typer.Argument(..., metavar="ID", help="The request's id, as `deck inbox` lists it."),
    option: Optional[str] = typer.Argument(
        None, metavar="OPTION", help="A permission's optionId, or once, always, reject (its option of that kind)."
    ),
    values: Optional[str] = typer.Option(None, "--json", metavar="VALUES", help="A question's answer: a JSON object."),
    decline: bool = typer.Option(False, "--decline", help="Decline a question (answer none of its fields)."),
    attach: Optional[str] = AttachOption,
    config: Optional[Path] = ServerConfigOption,
) -> None:
    """Answer a permission request or a question that waits.

    A permission: one of its options (OPTION); a question: its fields (--json VALUES), or --decline.
    """
    name = server(attach, config)
    waiting = {row["id"]: row for row in call(name, "DeckService.Inbox")}
    row = waiting.get(request)
    if row is None:
        fail(f"nothing waits as {request!r}: `deck inbox` lists what does", ExitCode.ERROR)
    if row["kind"] == "permission":
        if option is None or values is not None or decline:
            known = ", ".join(str(o.get("optionId")) for o in row.get("options") or [])
            fail(f"{request} is a permission request: answer it with one of its options ({known})")
        offered = [o for o in row.get("options") or [] if isinstance(o, dict)]
        if option in (ONCE, ALWAYS, REJECT) and option not in {o.get("optionId") for o in offered}:
            try:  # a word for the option, read as every frontend reads it
                option = str(choose_option(offered, option)["optionId"])
            except ValueError as exc:
                fail(f"{request}: {exc} ({', '.join(str(o.get('optionId')) for o in offered)})")
        call(name, "ChatService.AnswerPermission", {"id": request, "optionId": option})
    elif decline:
        if option is not None or values is not None:
            fail(f"--decline answers {request} with nothing: give no OPTION nor --json with it")
        call(name, "ChatService.AnswerQuestion", {"id": request, "values": None})
    else:
        if option is not None or values is None:
            fail(f"{request} is a question: answer it with --json VALUES (a JSON object of its fields), or --decline")
        try:
            parsed = json.loads(values)
        except ValueError as exc:
            fail(f"--json: not JSON: {exc}")
        if not isinstance(parsed, dict):
            fail("--json: a JSON object of the question's fields, such as '{\"name\": \"x\"}'")
        call(name, "ChatService.AnswerQuestion", {"id": request, "values": parsed})
    echo(f"answered {request} ({row['agent']})")


def register(app: typer.Typer, command_cls: Any) -> None:
    app.command(cls=command_cls)(inbox)
    app.command(cls=command_cls)(answer)
