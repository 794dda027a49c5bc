"""`deck history`, `deck search`, `deck export`: the history read (and pruned by hand) with no deck running.

They open the database file directly. A missing file is no history yet; one that cannot be
used (corrupt, locked, another program's) is one line on stderr and exit 1, the file untouched.
By default they show the conversations of the config in use (found as `deck run` finds it, or
`--config PATH`); `--all` shows every config's.

What an agent wrote may carry control characters: the lines of `deck history` and `deck search`
are for reading, and show them through `deck.tty.printable` wherever they go; `deck export` does
so on a terminal, while written to a pipe or a file it is data and stays as stored (JSON escapes
what a terminal could run either way).
"""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from deck import Command, check_agent, config_agents, diffs
from deck.errors import ExitCode
from deck.tty import json_printable, printable

from .recorder import config_key
from .store import HistoryStore, HistoryUnavailable, default_path

__all__ = ["register", "to_markdown"]

#: Marks around the matches of a snippet: bold on a terminal; `**` in JSON (Markdown, like the text).
BOLD = ("\x1b[1m", "\x1b[22m")
JSON_MARKS = ("**", "**")
# Placeholders the database puts around matches, turned into BOLD once the text is made printable.
_OPEN, _CLOSE = "\ue000", "\ue001"


class Format(str, Enum):
    markdown = "markdown"
    json = "json"


ConfigOption = typer.Option(
    None, "--config", "-c", metavar="PATH", help="Conversations of this config file (else the one in use)."
)
AllOption = typer.Option(False, "--all", help="Conversations of every config file.")
JsonOption = typer.Option(False, "--json", help="JSON output.")


def register(app: typer.Typer) -> None:
    app.command("history", cls=Command)(history)
    app.command("search", cls=Command)(search)
    app.command("export", cls=Command)(export)


# -- the commands ---------------------------------------------------------------------------------


def history(
    agent: Optional[str] = typer.Argument(None, metavar="AGENT", help="Only this agent's conversations."),
    config: Optional[Path] = ConfigOption,
    every: bool = AllOption,
    as_json: bool = JsonOption,
    limit: int = typer.Option(50, "--limit", "-n", metavar="N", help="At most N conversations."),
    forget: Optional[str] = typer.Option(None, "--forget", metavar="ID", help="Delete conversation ID from the history."),
) -> None:
    """List the stored conversations, newest first.

    Each with its id, agent, last update, message count and title; those of the
    config in use unless --all. --forget ID deletes one conversation.
    """
    if forget is not None:
        _forget(forget)
        return
    _check_limit(limit)
    store = _open()
    rows = [] if store is None else _closing(store, lambda: store.list(_scope(config, every), agent, limit))
    if not rows and agent is not None:
        _known(config, agent)
    if as_json:
        keys = ("id", "agent", "title", "createdAt", "updatedAt", "messages", "configPath")
        _echo_json([{key: row[key] for key in keys} for row in rows])
        return
    if not rows:
        typer.echo(_nothing(store, "no conversations", agent, every))
        return
    for line in _aligned([_fields(row, every) for row in rows], right={3}):
        typer.echo(line)


def _fields(row: dict[str, Any], every: bool) -> list[str]:
    """A conversation's cells in `deck history`: id, agent, update, messages, (config,) title."""
    count = f"{row['messages']} message{'' if row['messages'] == 1 else 's'}"
    fields = [row["id"], row["agent"], _local(row["updatedAt"]), count]
    if every:
        fields.append(row["configPath"] or "(built-in config)")
    fields.append(_one_line(row["title"] or ""))
    return [printable(field) for field in fields]


def _aligned(rows: list[list[str]], right: set[int]) -> list[str]:
    """`rows` as the lines of a table, two spaces between columns: each column but the last as wide
    as its widest cell on a terminal (a wide character takes two columns), those in `right`
    aligned to the right."""
    from rich.cells import cell_len

    widths = [max(cell_len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        pads = [" " * (width - cell_len(cell)) for cell, width in zip(row, widths)]
        cells = [pad + cell if i in right else cell + pad for i, (cell, pad) in enumerate(zip(row, pads))]
        lines.append("  ".join([*cells, row[-1]]))
    return lines


def search(
    query: str = typer.Argument(..., metavar="QUERY", help="Words that must all appear; word* for a prefix."),
    agent: Optional[str] = typer.Option(None, "--agent", "-a", metavar="AGENT", help="Only this agent's messages."),
    config: Optional[Path] = ConfigOption,
    every: bool = AllOption,
    as_json: bool = JsonOption,
    limit: int = typer.Option(20, "--limit", "-n", metavar="N", help="At most N messages."),
) -> None:
    """Find messages in the history, newest first.

    Each with its conversation, agent, role, time, and a snippet around the
    words found (in bold on a terminal).
    """
    if not query.strip():
        _fail("the search query is empty: give the words to find", ExitCode.USAGE)
    _check_limit(limit)
    store = _open()
    tty = _is_terminal() and not as_json
    marks = JSON_MARKS if as_json else (_OPEN, _CLOSE) if tty and not os.environ.get("NO_COLOR") else ("", "")
    scope = _scope(config, every)
    found, kept = [], False
    if store is not None:
        found, kept = _closing(store, lambda: _found(store, query, agent, scope, limit, marks))
    if agent is not None and not kept:
        _known(config, agent)
    if as_json:
        _echo_json(found)
        return
    if not found:
        typer.echo(_nothing(store, "nothing found", agent, every))
        return
    for hit in found:
        head = f"{hit['conversationId']}  {hit['agent']}  {hit['role']}  {_local(hit['at'] or '')}"
        snippet = printable("  " + _one_line(hit["snippet"])).replace(_OPEN, BOLD[0]).replace(_CLOSE, BOLD[1])
        typer.echo(printable(head))
        typer.echo(snippet)


def _found(
    store: HistoryStore, query: str, agent: str | None, scope: str | None, limit: int, marks: tuple[str, str]
) -> tuple[list[dict[str, Any]], bool]:
    """The messages found, and whether `agent` (if given) has a conversation in `scope` at all."""
    found = store.search(query, agent, scope, limit, marks)
    return found, bool(found) or agent is None or bool(store.list(scope, agent, 1))


def _known(config: Optional[Path], agent: str) -> None:
    """An agent with no conversation kept (in the scope asked) must be one of the config's: else it is
    said as every command says it, and exit 2 (`check_agent`). One gone from the config, with its
    conversations still kept, is listed as they are."""
    names = config_agents(config)
    if names is not None:
        check_agent(agent, names)


def export(
    conversation_id: str = typer.Argument(..., metavar="ID", help="The conversation: an id from `deck history`, or a unique start of it."),
    output: str = typer.Option("markdown", "--format", "-f", metavar="markdown|json", help="markdown (or md): a readable transcript; json: as stored."),
) -> None:
    """Print one conversation as Markdown or JSON.

    As a Markdown transcript (messages, thoughts, tool calls and their diffs),
    or as JSON with its messages as stored.
    """
    chosen = _format(output)
    store = _open()
    conversation = None if store is None else _closing(store, lambda: _conversation(store, conversation_id))
    if conversation is None:
        _fail(f"no conversation {conversation_id!r} in the history" + ("" if store else " (no history yet)"))
    if chosen is Format.json:
        _echo_json(conversation)
        return
    text = to_markdown(conversation)
    typer.echo(printable(text) if _is_terminal() else text, nl=False)


#: The `--format` of `deck export` by its names.
FORMATS = {"markdown": Format.markdown, "md": Format.markdown, "json": Format.json}
#: How many of the conversations an ambiguous id starts are named.
CANDIDATES_SHOWN = 10


def _format(name: str) -> Format:
    """The format `--format` names; another name is a usage error that lists them."""
    if name not in FORMATS:
        _fail(f"unknown --format {name!r}: use markdown (or md) or json", ExitCode.USAGE)
    return FORMATS[name]


def _conversation(store: HistoryStore, wanted: str) -> dict[str, Any] | None:
    """The stored conversation whose id is `wanted`, or starts with it, as git takes a commit's
    (a start of several is an error that lists them); None when there is none."""
    found = store.get(wanted)
    if found is not None or not wanted:
        return found
    ids = store.ids_starting(wanted, CANDIDATES_SHOWN + 1)
    if len(ids) > 1:
        shown = ids[:CANDIDATES_SHOWN] + (["…"] if len(ids) > CANDIDATES_SHOWN else [])
        typer.echo(f"deck: {wanted!r} is the start of several conversation ids: give more of it", err=True)
        typer.echo(printable("\n".join(f"  {i}" for i in shown)), err=True)
        raise typer.Exit(ExitCode.USAGE)
    return store.get(ids[0]) if ids else None


def _forget(conversation_id: str) -> None:
    """Delete a conversation from the history, then its session on the agent where it has one."""
    shown = repr(conversation_id if len(conversation_id) <= 80 else conversation_id[:80] + "…")
    if not conversation_id.strip() or conversation_id.startswith("-"):  # `--forget --all` took the next option
        _fail(f"--forget needs a conversation ID (from `deck history`), not {shown}", ExitCode.USAGE)
    store = _open()
    if store is None:
        _fail(f"no conversation {shown} in the history (no history yet)")
    stored, starts = _closing(store, lambda: _take(store, conversation_id))
    if stored is None:
        _fail(f"no conversation {shown} in the history" + _whole_id_hint(conversation_id, starts))
    typer.echo(f"forgot conversation {conversation_id}")
    if stored["sessionId"]:
        _delete_session(stored["agent"], stored["sessionId"], stored["configPath"])


def _take(store: HistoryStore, conversation_id: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The conversation as it was stored (no messages), deleted from the history; else None, and
    the ids `conversation_id` starts (`--forget` takes a whole id only)."""
    stored = store.get(conversation_id, tail=0)
    if stored is None:
        return None, store.ids_starting(conversation_id, CANDIDATES_SHOWN + 1)
    store.forget(conversation_id)
    return stored, []


def _whole_id_hint(wanted: str, ids: list[str]) -> str:
    if not ids:
        return ""
    shown = ", ".join(ids[:CANDIDATES_SHOWN]) + (", …" if len(ids) > CANDIDATES_SHOWN else "")
    return f"; --forget takes a whole id, and {wanted!r} starts {shown}"


def _delete_session(agent: str, session_id: str, config_path: str) -> None:
    """The agent's own copy of a forgotten conversation: ACP `session/delete` where the agent lists
    it (`AgentService.DeleteSession`, through the config's running server, else an agent started
    for it). What cannot be deleted is said on stderr; the history's copy is gone either way."""
    import asyncio

    from deck import call_deck
    from deck.errors import ServiceError, UsageError

    path = Path(config_path) if config_path else None
    why = None
    if path is not None and not path.is_file():
        why = f"its config {path} is gone"
    else:
        params = {"name": agent, "sessionId": session_id}
        try:
            asyncio.run(call_deck(path, "history", "AgentService.DeleteSession", params))
        except (ServiceError, UsageError) as exc:
            why = str(exc)
    if why is None:
        typer.echo(printable(f"deleted its session {session_id} on {agent} (session/delete)"))
    else:
        typer.echo(printable(f"deck: its session {session_id} on {agent} stays: {why}"), err=True)


# -- helpers --------------------------------------------------------------------------------------


def _open() -> HistoryStore | None:
    """The history database; None when there is none yet (nothing is created); an unusable one exits 1."""
    path = default_path()
    if not path.exists():
        return None
    try:
        return HistoryStore(path)
    except HistoryUnavailable as e:
        _fail(f"cannot read the history: {e.reason}")


def _closing(store: HistoryStore, read: Any) -> Any:
    try:
        return read()
    except HistoryUnavailable as e:
        _fail(f"cannot read the history: {e.reason}")
    finally:
        store.close()


def _scope(config: Optional[Path], every: bool) -> str | None:
    """The config key to filter by: the one `--config` names or the one in use; None with --all."""
    if every:
        return None
    from deck import find_config

    path, _source = find_config(str(config) if config else None)
    return config_key(path)


def _nothing(store: HistoryStore | None, what: str, agent: str | None, every: bool) -> str:
    if store is None:
        return "no history yet"
    scope = ("" if agent is None else f" for {agent}") + ("" if every else " in this config (--all: every config)")
    return what + scope


def _check_limit(limit: int) -> None:
    if limit < 1:
        _fail(f"--limit must be 1 or more, not {limit}", ExitCode.USAGE)


def _fail(message: str, code: ExitCode = ExitCode.ERROR) -> NoReturn:
    typer.echo(printable(f"deck: {message}"), err=True)
    raise typer.Exit(code)


def _echo_json(value: Any) -> None:
    typer.echo(json_printable(json.dumps(value, ensure_ascii=False, indent=2)))


def _is_terminal() -> bool:
    return sys.stdout.isatty()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _local(iso: str) -> str:
    """A wire time (UTC ISO 8601) in local time, to the minute; as given if it is not one."""
    try:
        return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return iso


# -- Markdown -------------------------------------------------------------------------------------

_ROLES = {"user": "User", "agent": "Agent", "system": "System"}
_PLAN_BOXES = {"completed": "[x]", "in_progress": "[-]", "pending": "[ ]"}


def to_markdown(conversation: dict[str, Any]) -> str:
    """A stored conversation as a readable Markdown transcript."""
    agent = conversation.get("agent") or ""
    lines = [f"# {_one_line(conversation.get('title') or '') or f'Conversation with {agent}'}", ""]
    lines += [f"- Agent: {agent}", f"- Config: {conversation.get('configPath') or '(built-in config)'}"]
    lines += [f"- Started: {_local(conversation.get('createdAt') or '')}", f"- Updated: {_local(conversation.get('updatedAt') or '')}"]
    lines += [f"- Conversation: {conversation.get('id')}"]
    if conversation.get("sessionId"):
        lines.append(f"- Agent session: {_one_line(str(conversation['sessionId']))}")
    children = [c for c in conversation.get("children") or [] if isinstance(c, dict) and c.get("session")]
    names = {str(c["session"]): _one_line(str(c.get("title") or c["session"])) for c in children}
    if conversation.get("sessionId"):
        names[str(conversation["sessionId"])] = agent
    lines += _subagents(children, names)
    lines.append("")
    for message in conversation.get("messages") or []:
        if isinstance(message, dict):
            lines += _message(message, names)
    return "\n".join(lines).rstrip("\n") + "\n"


def _subagents(children: list[dict[str, Any]], names: dict[str, str]) -> list[str]:
    """The conversation's subagents as a nested list, each under the session that announced it."""
    if not children:
        return []
    below: dict[str, list[dict[str, Any]]] = {}
    for child in children:
        below.setdefault(str(child.get("parent") or ""), []).append(child)
    known = {str(c["session"]) for c in children}
    lines, todo = ["- Subagents:"], [(c, 1) for c in reversed(children) if str(c.get("parent") or "") not in known]
    while todo:  # depth first, without recursion: a chain of children may be long
        child, depth = todo.pop()
        session = str(child["session"])
        lines.append(f"{'  ' * depth}- {names[session]} ({_one_line(session)}) · {_one_line(str(child.get('state') or 'unknown'))}")
        todo += [(c, depth + 1) for c in reversed(below.pop(session, []))]
    return lines


def _message(message: dict[str, Any], names: dict[str, str] | None = None) -> list[str]:
    role = str(message.get("role") or "")
    head = _ROLES.get(role, role.title() or "Message")
    names = names or {}
    if message.get("session"):  # a subagent's: nested under its parent's name
        head += f" › {names.get(str(message['session'])) or _one_line(str(message['session']))}"
    if message.get("sender") or message.get("recipient"):
        sender, recipient = (names.get(str(message.get(k) or "")) or _one_line(str(message.get(k) or "?")) for k in ("sender", "recipient"))
        head += f" · message {sender} → {recipient}"
    if message.get("code"):
        head += f": {_one_line(str(message['code']))}"
        if message.get("code") == "notice" and message.get("level"):
            head += f" ({_one_line(str(message['level']))})"
    lines = [f"## {head} · {_local(str(message.get('createdAt') or ''))}", ""]
    for part in message.get("parts") or []:
        if isinstance(part, dict):
            lines += _part(part, role)
    notes = []
    if message.get("queued"):
        notes.append("queued, not sent yet")
    if not message.get("done", True):
        notes.append("unfinished")
    if message.get("stopReason") not in (None, "end_turn"):
        notes.append(f"stopped: {_one_line(str(message['stopReason']))}")
    if message.get("error"):
        notes.append(f"error: {_one_line(str(message['error']))}")
    if notes:
        lines += [f"*({'; '.join(notes)})*", ""]
    return lines


def _part(part: dict[str, Any], role: str) -> list[str]:
    """One part of a message: an agent's text is its Markdown (`_contained`), the rest anyone but deck
    wrote is fenced: a line of it is never the transcript's."""
    kind = part.get("type")
    if kind == "text":
        text = str(part.get("text") or "")
        if not text:
            return []
        return [*_contained(text), ""] if role == "agent" else [*_fenced(text, "text"), ""]
    if kind == "thought":
        text = str(part.get("text") or "")
        return ["> **Thought**", ">", *(f"> {line}".rstrip() for line in _fenced(text, "text")), ""] if text else []
    if kind == "tool":
        return _tool(part)
    if kind == "plan":
        entries = [e for e in part.get("entries") or [] if isinstance(e, dict)]
        return ["**Plan**", "", *(f"- {_PLAN_BOXES.get(str(e.get('status')), '[ ]')} {_one_line(str(e.get('content', '')))}" for e in entries), ""]
    if kind == "compaction":
        return _compaction(part)
    return []


def _compaction(part: dict[str, Any]) -> list[str]:
    """A context compaction: its status, the summary it keeps (fenced), why it failed."""
    lines = [f"**Compaction** · {_one_line(str(part.get('status') or '')) or 'in_progress'}", ""]
    if part.get("summary"):
        lines += [*_fenced(str(part["summary"]), "text"), ""]
    if part.get("error"):
        lines += [f"Error: {_one_line(str(part['error']))}", ""]
    return lines


def _tool(part: dict[str, Any]) -> list[str]:
    title = _one_line(str(part.get("title") or "")) or "(untitled)"
    name = _one_line(str(part.get("name") or "")) if isinstance(part.get("name"), str) else ""
    if name and name != title:
        title += f" ({name})"
    lines = [f"### Tool: {title}", "", f"{part.get('kind') or 'other'} · {part.get('status') or 'pending'}", ""]
    if part.get("permission"):
        lines += [f"Permission: {_one_line(str(part['permission']))}", ""]
    for location in part.get("locations") or []:
        if isinstance(location, dict) and location.get("path"):
            line = f":{location['line']}" if location.get("line") is not None else ""
            lines += [f"- `{_one_line(str(location['path']))}{line}`"]
    if part.get("locations"):
        lines.append("")
    if part.get("input"):
        lines += ["Input:", "", *_fenced(str(part["input"]), "json"), ""]
    if part.get("output"):
        lines += ["Output:", "", *_fenced(str(part["output"]), ""), ""]
    for diff in part.get("diffs") or []:
        if isinstance(diff, dict):
            lines += [*_fenced(_unified(diff), "diff"), ""]
    return lines


def _unified(diff: dict[str, Any]) -> str:
    """A tool diff as a unified diff (`deck.diffs`: in bounded time, or a line saying it is too large to compare)."""
    path = _one_line(str(diff.get("path") or ""))
    old = "" if diff.get("newFile") else str(diff.get("oldText") or "")
    new = str(diff.get("newText") or "")
    before = "/dev/null" if diff.get("newFile") else path
    return "\n".join(diffs.unified_lines(old, new, before, path)) or f"--- {before}\n+++ {path}"


#: A line that Markdown reads as structure of the transcript's own kind: a heading (ATX or a setext
#: underline), a thematic break, an HTML block.
_STRUCTURE = re.compile(r"^ {0,3}(#|<|=+\s*$|(?:[-*_]\s*){3,}$|-+\s*$)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _contained(text: str) -> list[str]:
    """An agent's Markdown as Markdown (lists, emphasis, links, code blocks), kept inside its message:
    a line that would be a heading, a rule or HTML starts with a backslash (read as the text it is),
    and a code block it leaves open is closed."""
    lines, fence = [], ""
    for line in text.splitlines():
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence) and not line.strip(" `~"):
                fence = ""
        elif opened:
            fence = opened.group(1)
        elif _STRUCTURE.match(line):
            stripped = line.lstrip(" ")
            line = line[: len(line) - len(stripped)] + "\\" + stripped
        lines.append(line)
    if fence:
        lines.append(fence)
    return lines


def _fenced(text: str, language: str) -> list[str]:
    """`text` in a code fence longer than any run of backticks in it: nothing in it can close the
    fence, so nothing in it is Markdown structure (a heading, a list, another fence)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + language, *text.splitlines(), fence]
