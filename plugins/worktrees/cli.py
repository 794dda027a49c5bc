"""`deck worktrees`, `deck diff`, `deck merge`, `deck land`, `deck worktree remove`: the worktrees of the config in
use (or `--config PATH`), whether a deck runs it or not.

Each command calls the `WorktreeService` of the deck server running that config (`deck serve`),
so that a busy or running agent's worktree is refused as in the console; with no server, of a
deck of that config made for the call, which starts no agent: the same answers and refusals.
A refusal is one line on stderr and exit 1; an agent the config does not have (and with no worktree
kept) is said as every command says it (`check_agent`), exit 2. A diff holds what agents wrote: on a
terminal it is coloured and shown through `deck.tty.printable`; in a pipe it is data and stays as
git wrote it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from deck import Command, check_agent, config_agents
from deck.errors import ExitCode, ServiceError, UsageError
from deck.tty import json_printable, printable

ConfigOption = typer.Option(None, "--config", "-c", metavar="PATH", help="Config file (else the one in use).")
AgentArgument = typer.Argument(..., metavar="AGENT", help="The agent whose worktree it is.")

worktree_app = typer.Typer(help="Manage the agents' worktrees.", rich_markup_mode=None)

#: The style of a diff line by how it starts (the first that matches).
STYLES = (("+++", "bold"), ("---", "bold"), ("diff --git", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


def register(app: typer.Typer) -> None:
    app.command("worktrees", cls=Command)(worktrees)
    app.command("diff", cls=Command)(diff)
    app.command("merge", cls=Command)(merge)
    app.command("land", cls=Command)(land)
    worktree_app.command("remove", cls=Command)(remove)
    app.add_typer(worktree_app, name="worktree")


def worktrees(
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
) -> None:
    """List the agents' worktrees.

    Each with its branch, base branch, commits ahead, changed files and whether it has
    uncommitted work; those of agents gone from the config too. A host that cannot be
    reached is named on stderr (its worktrees are not listed) and the exit code is 1.
    """
    listed = call(config, "WorktreeService.List", {})
    rows = [row for row in listed if "unreachable" not in row]
    missed = [row for row in listed if "unreachable" in row]
    if as_json:
        typer.echo(json_printable(json.dumps(rows, indent=2, ensure_ascii=False)))
    elif rows or not missed:
        show(rows, [] if rows else worktree_agents(call(config, "ConfigService.Content", {})))
    for row in missed:  # not "no worktrees": those there were not looked at
        of = f" (of {', '.join(row['agents'])})" if row.get("agents") else ""
        typer.echo(printable(f"deck: {row['host']} could not be reached, so the worktrees there{of} are not listed, "
                             f"not gone: {row['unreachable']}"), err=True)  # fmt: skip
    if missed:
        raise typer.Exit(ExitCode.ERROR)


def worktree_agents(text: str) -> list[str]:
    """The agents of config text `text` with `worktree = true`."""
    import tomllib

    try:
        agents = tomllib.loads(text).get("agents", {})
    except tomllib.TOMLDecodeError:
        return []
    return [name for name, table in agents.items() if isinstance(table, dict) and table.get("worktree") is True]


def show(rows: list[dict[str, Any]], waiting: Sequence[str] = ()) -> None:
    """The worktrees' rows; none, with the `waiting` agents (`worktree = true`, not started yet) named."""
    if not rows and waiting:
        gets = "gets one at its" if len(waiting) == 1 else "get theirs at their"
        typer.echo(printable(f"no worktrees yet: {', '.join(waiting)} (worktree = true) {gets} first start"))
    elif not rows:
        typer.echo("no worktrees (give an agent worktree = true; its worktree is made at its first start)")
    for row in rows:
        if "error" in row:
            typer.echo(printable(f"{row['agent']:<16} {row['error']}"))
            continue
        gone = "" if row.get("configured", True) else "  (not in the config)"
        state = "uncommitted work" if row["dirty"] else "clean"
        typer.echo(printable(f"{row['agent']:<16} {row['branch']} → {row['base']}: {count(row['ahead'], 'commit')} ahead, "
                             f"{count(row['changedFiles'], 'changed file')}, {state}  {where(row)}{gone}"))  # fmt: skip


def diff(agent: str = AgentArgument, config: Optional[Path] = ConfigOption) -> None:
    """Show an agent's work as a diff.

    Its commits, uncommitted and untracked files, against the merge-base with its base branch.
    """
    text = call(config, "WorktreeService.Diff", {"agent": agent}, refused=lambda: _unknown(config, agent))
    if not sys.stdout.isatty():
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False)
    for line in printable(text).splitlines():
        style = next((s for start, s in STYLES if line.startswith(start)), "")
        console.print(Text(line, style=style), soft_wrap=True)


def merge(
    agent: str = AgentArgument,
    squash: bool = typer.Option(False, "--squash", help="One commit on the base branch instead of a merge commit."),
    message: Optional[str] = typer.Option(None, "--message", "-m", metavar="MSG", help="The commit message."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Merge an agent's work into its base branch.

    What it has not committed is committed in its worktree first. Refused, with nothing
    changed, when the main checkout has uncommitted changes or the merge conflicts.
    """
    # `started`: the agent's conversation back from the history, for the commit messages.
    params = {"agent": agent, "squash": squash, "message": message}
    result = call(config, "WorktreeService.Merge", params, refused=lambda: _unknown(config, agent), started=True)
    how = "squashed" if squash else "merged"
    typer.echo(printable(f"{agent}: {how} into {result['base']} as {result['commit'][:12]} "
                         f"({count(len(result['files']), 'file')} changed)"))  # fmt: skip


#: `deck land`'s exit code when some agents' work was skipped (a conflict, a failed check, busy).
SKIPPED = 3


def land(
    agents: Optional[list[str]] = typer.Argument(None, metavar="AGENT…", help="The agents, in order (else every one with work ahead)."),
    check: Optional[str] = typer.Option(None, "--check", metavar="CMD", help="The command a merge must pass (else [land] check; \"\" for none)."),
    squash: bool = typer.Option(False, "--squash", help="One commit per agent on the base branch instead of a merge commit."),
    as_json: bool = typer.Option(False, "--json", help="JSON output: one result per agent."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Land the agents' work on their base branches.

    Each agent's work is merged onto the tip the ones before it left and, with a check
    ([land] check or --check), checked on the merge result in a scratch worktree; only then
    does the base branch move. One that conflicts or fails its check is skipped, its worktree
    untouched, and the others go on. Progress goes to stderr. Exit code 0: all landed; 3:
    some skipped; 1: refused, nothing landed (a dirty main checkout).
    """  # fmt: skip
    params = {"agents": agents or None, "check": check, "squash": squash}
    results = call(config, "WorktreeService.Land", params, refused=lambda: _unknown_of(config, agents or []),
                   started=True, listener=_progress)  # fmt: skip
    if as_json:
        typer.echo(json_printable(json.dumps(results, indent=2, ensure_ascii=False)))
    elif not results:
        typer.echo("nothing to land: no worktree has work ahead of its base branch")
    for row in [] if as_json else results:
        typer.echo(printable(f"{row['agent']:<16} {row['summary']}"))
        for line in row.get("check") or []:
            typer.echo(printable(f"{'':<16}   | {line}"))
    if any(row["result"] not in ("landed", "nothing") for row in results):
        raise typer.Exit(SKIPPED)


def _progress(event: Any) -> None:
    """A train's progress as it goes, on stderr: each step in words, the check's output as it comes."""
    if getattr(event, "name", "") != "land:progress":
        return
    found = event.payload()
    text = str(found.get("text") or "")
    if found.get("result") == "output":
        typer.echo(printable(text), err=True, nl=False)
    elif found.get("step") != "done":
        typer.echo(printable(f"deck: {found.get('agent')}: {text}"), err=True)


def _unknown_of(config: Optional[Path], agents: list[str]) -> None:
    for agent in agents:
        _unknown(config, agent)


def remove(
    agent: str = AgentArgument,
    force: bool = typer.Option(False, "--force", help="Even with uncommitted or unmerged work: it is lost."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Remove an agent's worktree and its branch.

    Refused while it has uncommitted work or commits not merged into its base, unless --force.
    """
    params = {"agent": agent, "force": force}
    result = call(config, "WorktreeService.Remove", params, refused=lambda: _unknown(config, agent))
    kept = "" if result["branchDeleted"] else f" (branch {result['branch']} kept)"
    typer.echo(printable(f"{agent}: removed {where(result)}{kept}"))


def _unknown(config: Optional[Path], agent: str) -> None:
    """A refusal for an agent the config does not have (and that has no worktree kept): said as every
    command says it, and exit 2 (`check_agent`); else None, and the refusal says why."""
    names = config_agents(config)
    if names is not None:
        check_agent(agent, names)
    return None


def where(row: dict[str, Any]) -> str:
    """A worktree's path, `HOST:PATH` when it is on an agent's host."""
    return f"{row['host']}:{row['path']}" if row.get("host") else row["path"]


def count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def call(
    config: Optional[Path], method: str, params: dict[str, Any], refused: Callable[[], str | None] | None = None,
    started: bool = False, listener: Callable[[Any], None] | None = None,
) -> Any:
    """`method` of the deck server running the config in use, else of a deck of it that runs no
    agent (`started`: its plugins started, see `call_deck`); a refusal exits 1, saying what
    `refused` says (if anything) or else the refusal."""
    from deck import call_deck, find_config  # here: adding the commands to the command line stays cheap

    path, source = find_config(str(config) if config else None)
    if path is not None and not path.exists():
        _fail(f"config file not found: {path}", ExitCode.USAGE)
    # A running server's agents may be at work in their worktrees: then it says what may be done.
    try:
        return asyncio.run(call_deck(path, source, method, params, started=started, listener=listener))
    except UsageError as exc:
        for line in exc.lines():
            typer.echo(printable(f"deck: {line}"), err=True)
        raise typer.Exit(ExitCode.USAGE) from None
    except ServiceError as exc:
        _fail((refused() if refused is not None else None) or str(exc), ExitCode.ERROR)


def _fail(message: str, code: ExitCode) -> NoReturn:
    typer.echo(printable(f"deck: {message}"), err=True)
    raise typer.Exit(code)
