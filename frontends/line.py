"""The line frontend (rich): one `[agent] …` line per meaningful event; `@agent text` and `/commands` on stdin.

On a terminal, lines are coloured (one colour per agent), wrap to the terminal's width, and an
answer is rendered as Markdown block by block as its paragraphs complete. With `NO_COLOR` no
escape code is written; when stdout is not a terminal the answer streams as raw text, a line at
a time, wrapped only when `$COLUMNS` asks for it. Either way every line goes through `emit`,
which makes the control characters of the text it is given visible: an agent's output never
reaches the terminal as a control sequence. Output is batched and flushed when the event loop
goes idle, as in the jsonl frontend.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shlex
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deck import hookimpl
from deck.diffs import compare
from deck.errors import INVALID_PARAMS, ServiceError
from deck.events import (
    AgentStateChanged,
    ConfigChanged,
    ConversationChanged,
    ConversationReset,
    MessageDelta,
    MessageUpdated,
    Notice,
    PermissionRequested,
    PermissionResolved,
    PluginError,
    QuestionRequested,
    QuestionResolved,
    SubagentChanged,
    TerminalExited,
    TerminalOutput,
    TurnChanged,
    UsageChanged,
    handles,
)
from deck.frontend import ALWAYS, ONCE, REJECT, Frontend, action_usage, choose_option, read_lines, stdout_failed
from deck.frontends.line_text import StreamedText
from deck.frontends.subagents import NESTED, Subagents
from deck.frontends.words import money, state_word, stderr_of, word
from deck.states import AgentState
from deck.tty import alert, one_line, printable, sgr_spans, terminal_text

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.segment import Segment

PALETTE = ("cyan", "magenta", "green", "yellow", "blue", "bright_cyan", "bright_magenta", "bright_green")
DECK = "deck"
#: Messages between sessions whose streamed lines line mode still labels; the oldest is let go first.
BETWEEN_KEPT = 1_000
#: Width used when nothing asks for wrapping (a pipe without $COLUMNS).
UNBOUNDED = 100_000
#: The longest piece of a command's output line shown at once (a line that never ends is cut in such pieces).
TERMINAL_LINE = 4096
PLAN_MARKS = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}
STATUS_STYLES = {"completed": "green", "failed": "red", "in_progress": "yellow"}
#: A line built of differently styled pieces: (text, style).
Pieces = list[tuple[str, str]]

#: How long an /allow or /deny typed while no request is waiting waits for one, in seconds,
#: and how many of them may wait for one agent.
ANSWER_WAIT = 60.0
#: How a notice of each level is shown.
NOTICE_STYLES = {"info": "dim", "warning": "yellow", "error": "red"}
#: The source of the `deck:notice` an agent's own notice makes (shown once, as its conversation's note).
AGENT_NOTICE = "agent"
ANSWERS_MAX = 100
#: (command, what it does): the /help table.
COMMANDS = (
    ("@AGENT TEXT", "send TEXT to AGENT, which becomes the current agent"),
    ("TEXT", "send TEXT to the current agent; end a line with \\ to go on to the next"),
    ("/start [AGENT]", "start an agent (default: the current one)"),
    ("/stop [AGENT]", "stop it"),
    ("/restart [AGENT]", "restart it"),
    ("/cancel [AGENT]", "stop its answer, drop its queue and its waiting /allow and /deny"),
    ("/allow [N]", "answer the current agent's permission request with option N (default: allow once)"),
    ("/allow always", "answer it with the agent's allow-always option"),
    ("/deny", "answer it with its first reject option"),
    ("", f"with no request waiting, /allow and /deny answer the next one (within {ANSWER_WAIT:g} s)"),
    ("/answer K=V ...", 'answer the waiting question (or /answer {"k": "v"})'),
    ("/decline", "decline it"),
    ("/agents", "list the agents and their states"),
    ("/inbox", "what waits for you in every agent, oldest first"),
    ("/next", "go to the oldest: its agent becomes the current one, its request is shown again"),
    ("/logs [AGENT]", "an agent's last stderr lines"),
    ("/new [AGENT]", "a new conversation for the agent (the old one stays in the history)"),
    ("/fork [AGENT]", "a new conversation that starts as a copy of the agent's, in a fork of its session"),
    ("/mode [ID]", "the current agent's session modes, or switch to mode ID"),
    ("/model [ID]", "the models it offers (its config option of category model), or choose one"),
    ("/set [ID VALUE]", "its config options and their values, or set option ID (on/off for a boolean one)"),
    ("/queue", "the current agent's messages waiting to be sent, numbered"),
    ("/unqueue N", "take message N out of the queue: it is not sent"),
    ("/edit N TEXT", "replace the text of queued message N"),
    ("/help", "this help, then the plugins' commands, then the current agent's own"),
    ("//NAME ...", "the agent's own command NAME, even where deck has one of that name (else /NAME reaches it)"),
    ("/quit", "stop the agents and leave"),
    ("", "attached to a server (deck attach), /quit only detaches: the server and its agents go on"),
    ("/shutdown", "stop the server attached to and its agents, then leave (else as /quit)"),
)
#: deck's own command names: an agent's command of the same name is reached as //NAME.
DECK_COMMANDS = frozenset(c[1:].split()[0] for c, _ in COMMANDS if c.startswith("/") and not c.startswith("//"))
HELP = "\n".join(f"{command:<{max(len(c) for c, _ in COMMANDS)}}  {text}" for command, text in COMMANDS)


#: What /set takes for a boolean config option.
BOOLEAN_WORDS = {"on": True, "off": False, "true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def _option_line(option: dict[str, Any]) -> str:
    """`ID = VALUE (NAME: a, b, c)`: a config option, its value and what it may be."""
    value = option.get("currentValue")
    shown = ("on" if value else "off") if option.get("type") == "boolean" else str(value)
    values: list[str] = []
    for item in option.get("options") or []:
        if isinstance(item, dict):
            inner = item.get("options") if "group" in item else [item]
            values += [str(v.get("value")) for v in inner or [] if isinstance(v, dict)]
    what = one_line(str(option.get("name") or option.get("id")), 60)
    choices = "on, off" if option.get("type") == "boolean" else ", ".join(values[:20])
    return one_line(f"{option.get('id')} = {shown} ({what}: {choices})", 300)


@dataclass
class _EarlyAnswer:
    """An /allow or /deny typed while its agent had no request waiting: it answers the agent's next one."""

    agent: str
    command: str  # as typed, for the messages
    number: int | None  # /allow N
    deny: bool
    timer: asyncio.TimerHandle | None = None
    always: bool = False  # /allow always


class LineFrontend(Frontend):
    name = "line"
    description = "plain scrolling lines for a terminal, a log or a pipe"

    def __init__(
        self, client: Any, *, stdin_fd: int | None = None, stdout_fd: int | None = None, **options: Any
    ) -> None:
        super().__init__(client, **options)
        self._stdin_fd = stdin_fd if stdin_fd is not None else sys.stdin.fileno()
        self._fd = stdout_fd if stdout_fd is not None else sys.stdout.fileno()
        self.tty = os.isatty(self._fd)
        self.color = self.tty and not os.environ.get("NO_COLOR")
        self.markdown = self.tty
        self._buffer = io.StringIO()
        from rich.console import Console  # rich loads with the first line frontend, not with the plugin

        self.console = Console(
            file=self._buffer,
            force_terminal=self.color,
            color_system="auto" if self.color else None,
            no_color=not self.color,
            width=self._width() or UNBOUNDED,
            highlight=False,
            markup=False,
            emoji=False,
            legacy_windows=False,
        )
        #: The config's agents in order, its theme and language: from the snapshot, then each config change.
        self.agents: list[str] = []
        #: Each agent's own slash commands (ACP available_commands_update), by name.
        self.agent_commands: dict[str, dict[str, str]] = {}
        #: What the plugins offer to do (`DeckService.Actions()`, in the snapshot): `/NAME ARGS`, by name.
        self.actions: dict[str, dict[str, Any]] = {}
        self.theme = "dark"
        self.language = "en"
        self.current: str | None = None
        #: The permission requests and questions waiting, oldest first: id → (kind, payload).
        self._asks: dict[str, tuple[str, dict[str, Any]]] = {}
        self.text = StreamedText(self.emit, self._width, self.markdown)
        #: The agents' subagents: their lines show as `[agent › child]`.
        self.subagents = Subagents()
        self._between: dict[str, str] = {}  # id of a message between sessions → where its lines show
        self._seen: dict[tuple[str, str], Any] = {}  # what was last shown per thing, to skip repeats
        self._permission_options: dict[str, list[dict[str, Any]]] = {}
        self._early: dict[str, list[_EarlyAnswer]] = {}  # per agent, oldest first
        self._continued: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()
        #: Input piped in: each line is handled once what the one before asked is answered (a listing
        #: shown, a message queued), so what is shown follows the input's order.
        self._in_order = not os.isatty(self._stdin_fd)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_scheduled = False
        self._closed = False
        self._quit = False
        self._terminal_lines: dict[str, str] = {}  # terminal id → its last line, not ended yet

    # -- output ------------------------------------------------------------------------------

    def _width(self) -> int | None:
        """The terminal's width; with no terminal, $COLUMNS or no wrapping at all."""
        if self.tty:
            try:
                return os.get_terminal_size(self._fd).columns
            except OSError:
                return 80
        columns = os.environ.get("COLUMNS", "")
        return int(columns) if columns.isdigit() and int(columns) > 0 else None

    def colour(self, agent: str) -> str:
        agent = agent.partition(NESTED)[0]  # a subagent's lines take its agent's colour
        names = self.agents
        index = names.index(agent) if agent in names else sum(map(ord, agent))
        return "bold" if agent == DECK else PALETTE[index % len(PALETTE)]

    def emit(self, agent: str, body: str | Pieces, style: str = "", *, markdown: bool = False) -> None:
        """Print `body` with `[agent] ` before each of its lines, wrapped to the width left.

        `body` is text, or styled pieces of it, or (`markdown`) Markdown source: the one way
        text reaches rich, so the one place its control characters are made visible, those
        of `agent` too, before rich renders it (rich's own styling still comes out).
        """
        if self._closed:
            return
        from rich.segment import Segment, Segments
        from rich.text import Text

        renderable: RenderableType
        if isinstance(body, str) and markdown:
            code_theme = "friendly" if self.theme == "light" else "monokai"
            from rich.markdown import Markdown  # on a terminal only: markdown-it and pygments load with it

            renderable = Markdown(printable(body), code_theme=code_theme)
        elif isinstance(body, str):
            renderable = Text(printable(body), style=style)
        else:
            renderable = Text.assemble(*((printable(text), piece_style) for text, piece_style in body), style=style)
        width = self._width()
        self.console.width = width or UNBOUNDED
        console = self.console
        prefix = console.render_lines(Text(f"[{printable(agent)}] ", style=self.colour(agent)), pad=False)[0]
        room = max(20, (width or UNBOUNDED) - Segment.get_line_length(prefix))
        lines = console.render_lines(renderable, console.options.update(width=room), pad=False)
        if markdown:  # blocks are spaced by `_render_block`, not by rich's margins
            while lines and not Segment.get_line_length(_rstrip(lines[-1])):
                lines.pop()
            while lines and not Segment.get_line_length(_rstrip(lines[0])):
                lines.pop(0)
        segments: list[Segment] = []
        bare = _rstrip(prefix)
        for line in lines:
            line = _rstrip(line)
            segments += (prefix + line if line else bare) + [Segment.line()]
        console.print(Segments(segments), end="", soft_wrap=True, crop=False)
        self._schedule_flush()

    def error(self, agent: str, message: str) -> None:
        for line in message.replace("\r\n", "\n").split("\n"):  # not splitlines(): a lone CR is shown
            self.emit(agent, line, "red")

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        data = self._buffer.getvalue()
        if not data or self._closed:
            return
        self._buffer.seek(0)
        self._buffer.truncate()
        try:
            view = memoryview(data.encode(errors="backslashreplace"))  # a lone surrogate, shown, never fatal
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            self._closed = True
            self.client.request_exit(stdout_failed(exc))

    # -- events ------------------------------------------------------------------------------

    def _load(self, snapshot: dict[str, Any]) -> None:
        """Where deck is as this frontend starts: its agents, its config, what waits for an answer."""
        self.agents = [info["name"] for info in snapshot["agents"]]
        self.actions = {a["name"]: a for a in snapshot.get("actions") or [] if a["name"] not in DECK_COMMANDS}
        self._settings(snapshot["config"])
        self.current = self.agents[0] if self.agents else None
        for name, conversation in (snapshot.get("conversations") or {}).items():
            self._agent_commands(name, conversation.get("commands"))
        self.subagents.load(snapshot.get("conversations") or {})
        self._asks = {}
        for pending in snapshot["pending"]:  # what waits already (this frontend attached to a server) is shown
            if pending.get("kind") == "permission":
                self._show_permission(pending)
            elif pending.get("kind") == "question":
                self._show_question(pending)
        config = snapshot.get("config") or {}
        for problem in config.get("warnings") or []:  # a typo in the config is said where the user looks
            where = f"{config.get('path') or 'config'}:{problem.get('line')}:{problem.get('column')}"
            self.emit(DECK, f"{where}: warning: {problem.get('message')}", "yellow")

    def _settings(self, config: dict[str, Any]) -> None:
        self.theme, self.language = config.get("theme") or "dark", config.get("language") or "en"

    async def _reload_config(self) -> None:
        """The config changed: its agents and settings, as the services now say."""
        self.agents = [info["name"] for info in await self.client.call("AgentService.List")]
        self._settings(await self.client.call("ConfigService.Current"))

    def _changed(self, key: tuple[str, str], value: Any) -> bool:
        """True when `value` differs from what was last shown for `key` (and remember it)."""
        if self._seen.get(key) == value:
            return False
        self._seen[key] = value
        return True

    @handles(AgentStateChanged)
    def _agent_state(self, e: AgentStateChanged) -> None:
        agent, state, error = e.agent, e.state, e.error
        if not self._changed((agent, "state"), (state, e.outdated, error)):
            return
        language = self.language
        shown = state_word(state, language)
        if e.outdated:
            shown += f" · {word('outdated', language)}"
        if state == AgentState.ERROR.value:
            self.error(agent, f"{shown}: {error}" if error else shown)
            self._spawn(self._logs_hint(agent), agent)
        else:
            self.emit(agent, shown, "dim" if state in ("busy", "starting") else "")

    @handles(SubagentChanged)
    def _subagent_changed(self, e: SubagentChanged) -> None:
        """A subagent announced, renamed or at another state: one line each time."""
        if self.subagents.changed(e):
            label, state = self.subagents.label(e.agent, e.session), f": {e.state}" if e.state else ""
            self.text.end(label)
            self.emit(label, f"subagent{state}", "dim")

    @handles(MessageUpdated)
    def _message_updated(self, e: MessageUpdated) -> None:
        agent, message = e.agent, e.message
        between = self.subagents.between(agent, message)
        if between is not None:  # a message between sessions: its lines under `agent · sender → recipient`
            if message["id"] not in self._between and len(self._between) >= BETWEEN_KEPT:
                del self._between[next(iter(self._between))]  # the oldest: its chunks came long ago
            self._between[message["id"]] = between
            if message.get("parts") and self._changed((message["id"], "between"), _text_of(message)):
                self.emit(between, _text_of(message))
            return
        if message.get("session"):
            agent = self.subagents.label(agent, message["session"])
        role = message.get("role")
        if role == "user":
            self._user_message(agent, message)
        elif role == "system":
            if message.get("code") == "agent-unavailable":
                reason = str(message.get("error") or "").partition("\n")[0]  # the state line showed the rest
                self.error(agent, f"unavailable: {reason}")
            elif message.get("code") == "notice":  # the agent's notice: its `deck:notice` is not shown again
                level = str(message.get("level") or "info")
                self.emit(agent, f"{'notice' if level == 'info' else level}: {_text_of(message)}", NOTICE_STYLES.get(level, "dim"))
            else:
                self.emit(agent, _text_of(message), "yellow")
        elif message.get("done"):
            self.text.end(agent)
            if message.get("session") is None and self.text:
                self.text.end_family(agent)  # the turn is over: its subagents' last words are shown too
            self._finished(agent, message)

    def _user_message(self, agent: str, message: dict[str, Any]) -> None:
        text = _text_of(message)
        first, _, more = text.partition("\n")
        shown = "> " + first + (" …" if more else "")
        if message.get("error") == "cancelled":
            if self._changed((message["id"], "user"), "cancelled"):
                self.emit(agent, f"dropped from the queue: {first}", "yellow")
        elif self._changed((message["id"], "user"), "shown"):
            self.emit(agent, shown + ("  (queued)" if message.get("queued") else ""), "bold")

    def _finished(self, agent: str, message: dict[str, Any]) -> None:
        if message.get("error"):
            self.error(agent, f"error: {message['error']}")
        elif message.get("stopReason") not in (None, "end_turn"):
            self.emit(agent, f"stopped: {message['stopReason']}", "yellow")
        usage = message.get("usage")
        if isinstance(usage, dict):
            names = (("inputTokens", "in"), ("outputTokens", "out"), ("thoughtTokens", "thought"), ("totalTokens", "total"))
            counts = [f"{usage[key]:,} {word}" for key, word in names if isinstance(usage.get(key), int)]
            if counts:
                self.emit(agent, "tokens: " + " · ".join(counts), "dim")

    @handles(MessageDelta)
    def _message_delta(self, e: MessageDelta) -> None:
        agent, kind = e.agent, e.kind
        if e.session is not None or self._between:
            agent = self._between.get(e.message_id) or self.subagents.label(agent, e.session)
        if kind in ("text", "thought"):
            self.text.delta(agent, e.message_id, e.index, kind, e.text or "")
            return
        self.text.end(agent)
        part = e.part or {}
        if kind == "tool":
            self._tool(agent, part)
        elif kind == "plan":
            self._plan(agent, e.message_id, part)
        elif kind == "compaction":
            self._compaction(agent, part)

    def _compaction(self, agent: str, part: dict[str, Any]) -> None:
        """A context compaction: once as it starts, once as it ends (with its summary's first line)."""
        status = str(part.get("status") or "")
        summary = str(part.get("summary") or "").strip().partition("\n")[0]
        error = str(part.get("error") or "").partition("\n")[0]
        shown = {
            "in_progress": ("compacting…", "dim"),
            "completed": (f"compacted: {summary}" if summary else "compacted", "green"),
            "failed": ("compaction failed" + (f": {error}" if error else ""), "red"),
            "cancelled": ("compaction cancelled", "yellow"),
        }.get(status, (f"compaction: {status}", "dim"))  # a status deck does not know: said as it is
        if shown is not None and self._changed((agent, "compaction " + str(part.get("id"))), shown[0]):
            self.emit(agent, *shown)

    def _tool(self, agent: str, part: dict[str, Any]) -> None:
        title = part.get("title") or part.get("kind") or "tool"
        status = part.get("status", "")
        summary = diff_summary(part.get("diffs") or [])
        name = part.get("name") if isinstance(part.get("name"), str) else ""
        if not self._changed((agent, "tool " + str(part.get("id"))), (title, name, status, summary)):
            return
        line = [(f"{title} ", "")]
        if name and name != title:
            line.append((f"({name}) ", "dim"))
        line.append((f"[{status}]", STATUS_STYLES.get(status, "dim")))
        if summary:
            line.append(("  " + summary, "cyan"))
        self.emit(agent, line)

    @handles(TerminalOutput)
    def _terminal_output(self, e: TerminalOutput) -> None:
        """A command's output, line by line, indented under its tool call."""
        self.text.end(e.agent)
        text = self._terminal_lines.pop(e.terminal_id, "") + str(e.text)
        *lines, rest = text.split("\n")
        if len(rest) > TERMINAL_LINE:  # a line that never ends is shown in pieces
            lines.append(rest)
            rest = ""
        if rest:
            self._terminal_lines[e.terminal_id] = rest
        for line in lines:
            self._terminal_line(e.agent, line)

    @handles(TerminalExited)
    def _terminal_exited(self, e: TerminalExited) -> None:
        rest = self._terminal_lines.pop(e.terminal_id, "")
        if rest:
            self._terminal_line(e.agent, rest)
        status = e.exit_status if isinstance(e.exit_status, dict) else {}
        code, sig = status.get("exitCode"), status.get("signal")
        ended = f"killed by {sig}" if sig else f"exit code {code}"
        self.emit(e.agent, [("    └ ", "dim"), (ended, "green" if code == 0 else "red")])

    def _terminal_line(self, agent: str, line: str) -> None:
        """One line of a command's output: its colours kept (SGR only), every other escape sequence dropped."""
        pieces: Pieces = [("    │ ", "dim")]
        for colour, bold, text in sgr_spans(terminal_text(line, keep_sgr=True)):
            style = ("bold " if bold else "") + (colour.replace("light ", "bright_") if colour else "")
            pieces.append((text, style.strip()))
        self.emit(agent, pieces)

    def _plan(self, agent: str, message_id: str, part: dict[str, Any]) -> None:
        entries = part.get("entries") or []
        if not self._changed((agent, "plan " + message_id), entries):
            return
        self.emit(agent, "plan:", "bold")
        for entry in entries:
            status = entry.get("status", "pending")
            self.emit(agent, f"  {PLAN_MARKS.get(status, '[ ]')} {entry.get('content', '')}", STATUS_STYLES.get(status, ""))

    @handles(Notice)
    def _notice(self, e: Notice) -> None:
        """What a plugin tells the user, as it words it; a sticky one taken back says nothing. An alert
        is the bell and a terminal notification, on a terminal."""
        if e.bell or e.desktop:
            sound = alert(e.agent or "", e.text, e.bell is True, e.desktop is True) if self.tty else ""
            if sound:
                self._buffer.write(sound)  # in order with what is printed, never in the middle of a line's escapes
                self._schedule_flush()
        elif e.text and not (e.source == AGENT_NOTICE and e.agent):  # an agent's: shown as its conversation's note
            self.emit(e.agent or DECK, e.text, NOTICE_STYLES.get(e.level, ""))

    @handles(UsageChanged)
    def _usage_changed(self, e: UsageChanged) -> None:
        usage = e.usage or {}
        used, size = int(usage.get("used") or 0), int(usage.get("size") or 0)
        cost = cost_text(usage.get("cost"))
        if not self._changed((e.agent, "usage"), (used, size, cost)):
            return
        shown = f"context: {used:,} tokens"
        if size:
            shown = f"context: {used:,} / {size:,} tokens ({context_share(used, size)})"
        self.emit(e.agent, f"{shown} · {cost}", "dim")

    @handles(TurnChanged)
    def _turn_changed(self, e: TurnChanged) -> None:
        if self._changed((e.agent, "queued"), e.queued) and e.queued:
            self.emit(e.agent, f"{e.queued} message{'' if e.queued == 1 else 's'} queued", "dim")

    @handles(PermissionRequested)
    def _permission_requested(self, e: PermissionRequested) -> None:
        self._show_permission(e.payload())

    def _show_permission(self, p: dict[str, Any]) -> None:
        """A permission request that waits: its tool call, its options, how to answer."""
        agent, call = self.subagents.label(str(p["agent"]), p.get("session")), p.get("toolCall") or {}
        self._asks[p["id"]] = ("permission", p)
        self.text.end(agent)
        self._permission_options[p["id"]] = p["options"]
        line = [("permission? ", "bold yellow"), (str(call.get("title") or call.get("kind") or "a tool"), "")]
        summary = diff_summary(call.get("diffs") or [])
        if summary:
            line.append(("  " + summary, "cyan"))
        if p.get("rejections"):
            times = "once" if p["rejections"] == 1 else f"{p['rejections']} times"
            line.append((f"  (refused {times} this turn)", "dim"))
        self.emit(agent, line)
        choices = "   ".join(f"{n}. {o.get('name') or o['optionId']}" for n, o in enumerate(p["options"], 1))
        once = any(o.get("kind") == "allow_once" for o in p["options"])
        always = any(o.get("kind") == "allow_always" for o in p["options"])
        keys = ["/allow (once)"] * once + ["/allow always"] * always + ["/allow N", "/deny"]
        self.emit(agent, f"  {choices}   → {', '.join(keys)}", "yellow")
        name = str(p["agent"])
        early = self._early.get(name)
        if early:  # typed before the request came: it answers it now, before end of input could cancel it
            answer = early.pop(0)
            if not early:
                del self._early[name]
            if answer.timer is not None:
                answer.timer.cancel()
            self._give(name, p["id"], p["options"], answer.number, answer.deny, answer.always)

    @handles(PermissionResolved)
    def _permission_resolved(self, e: PermissionResolved) -> None:
        self._asks.pop(e.id, None)
        options = self._permission_options.pop(e.id, [])
        chosen = next((o.get("name") or o["optionId"] for o in options if o["optionId"] == e.option_id), None)
        self.emit(e.agent, f"permission: {chosen or 'cancelled'}", "dim")

    @handles(QuestionRequested)
    def _question_requested(self, e: QuestionRequested) -> None:
        self._show_question(e.payload())

    def _show_question(self, p: dict[str, Any]) -> None:
        """A question that waits: its fields, how to answer."""
        self._asks[p["id"]] = ("question", p)
        asker = self.subagents.label(str(p["agent"]), p.get("session"))
        self.emit(asker, f"question: {p['message']}", "bold yellow")
        schema = p.get("schema") or {}
        required = set(schema.get("required") or [])
        for key, prop in (schema.get("properties") or {}).items():
            kind = prop.get("type", "string") if isinstance(prop, dict) else "string"
            title = (prop.get("title") or prop.get("description") or "") if isinstance(prop, dict) else ""
            mark = " (required)" if key in required else ""
            self.emit(p["agent"], f"  {key}: {kind}{mark}{' — ' + title if title else ''}", "yellow")
        if p.get("url"):
            self.emit(p["agent"], "→ open the address above, then /answer to go on, or /decline", "yellow")
        else:
            self.emit(p["agent"], "→ /answer KEY=VALUE ..., /decline", "yellow")

    @handles(QuestionResolved)
    def _question_resolved(self, e: QuestionResolved) -> None:
        self._asks.pop(e.id, None)

    @handles(ConfigChanged)
    def _config_changed(self, e: ConfigChanged) -> None:
        self._spawn(self._reload_config(), DECK)
        if e.valid:
            self.emit(DECK, f"config reloaded: {e.path}", "dim")
            return
        self.error(DECK, f"config {e.path} is invalid; the last valid one stays in use:")
        for problem in e.problems:
            self.error(DECK, f"  {problem.get('line')}:{problem.get('column')}: {problem.get('message')}")

    @handles(ConversationReset)
    def _conversation_reset(self, e: ConversationReset) -> None:
        self.text.end(e.agent)
        if e.conversation_id is None:
            self.emit(e.agent, "new conversation", "dim")
        else:
            self.emit(e.agent, f"conversation {e.conversation_id} opened", "dim")

    def _agent_commands(self, agent: str, commands: Any) -> None:
        self.agent_commands[agent] = {
            str(c["name"]): str(c.get("description") or "")
            for c in commands or []
            if isinstance(c, dict) and isinstance(c.get("name"), str) and c["name"]
        }

    @handles(ConversationChanged)
    def _conversation_changed(self, e: ConversationChanged) -> None:
        if e.field == "commands":
            self._agent_commands(e.agent, e.value)
        if e.field == "cut" and isinstance(e.value, dict):
            count = e.value.get("messageIds") or ()
            self.emit(e.agent, f"{len(count)} earlier message(s) let go to keep the conversation under its"
                      " cap ([limits] conversationSize): the history keeps them", "dim")  # fmt: skip

    @handles(PluginError)
    def _plugin_error(self, e: PluginError) -> None:
        self.error(DECK, f"plugin {e.plugin} failed in {e.hook}: {e.error}")

    # -- input -------------------------------------------------------------------------------

    async def run(self) -> int:
        self._loop = asyncio.get_running_loop()
        await self.client.follow(self.dispatch, self._load)
        lines = read_lines(self._stdin_fd)
        try:
            if self.client.attached:
                await self._attached()
            if self.current is not None:
                self.emit(DECK, f"talking to {self.current}; /help lists the commands", "dim")
            while not self._quit and (line := await lines.get()) is not None:
                self.handle_line(line.decode(errors="replace").rstrip("\r\n"))
                if self._in_order:
                    await self._line_done()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            # End of input: finish the work in hand; nobody is left to answer questions, and a
            # permission request is cancelled unless an /allow or /deny typed earlier waits for it.
            # /quit: leave now, the agents' answers are cut short when they stop.
            await self.client.end_of_input(drain=not self._quit)
            self._drop_early(None, "unused: no permission request came from {agent}")
            await self.client.close()
            return 0
        finally:
            self._drop_early(None, None)
            self.text.end_all()
            self.flush()
            self.client.unsubscribe(self.dispatch)


    async def _attached(self) -> None:
        """Say which server this is and how many clients it has: leaving only detaches from it."""
        try:
            clients = len(await self.client.call("DeckService.Clients"))
        except ServiceError as exc:
            self.error(DECK, str(exc))
            return
        server = getattr(self.client, "name", "") or "a deck server"
        self.emit(DECK, f"attached to {server}: {_clients(clients)}; /quit detaches, /shutdown stops the server", "dim")

    def handle_line(self, line: str) -> None:
        if line.endswith("\\"):  # a message goes on over the next line
            self._continued.append(line[:-1])
            return
        if self._continued:
            line = "\n".join([*self._continued, line])
            self._continued.clear()
        if not line.strip():
            return
        if line.startswith("/"):
            self._command(line)
        elif line.startswith("@"):
            agent, _, text = line[1:].partition(" ")
            self._send(agent, text.lstrip(" "))
        elif self.current is None:
            self.error(DECK, "there is no agent in the config")
        else:
            self._send(self.current, line)

    def _send(self, agent: str, text: str) -> None:
        if agent not in self.agents:
            self.error(DECK, f"unknown agent {agent!r} (agents: {', '.join(self.agents) or 'none'})")
            return
        self.current = agent
        if not text.strip():
            self.emit(DECK, f"talking to {agent}", "dim")
            return
        self._spawn(self.client.call("ChatService.Send", {"agent": agent, "text": text}), agent)

    def _command(self, line: str) -> None:
        name, *args = line[1:].split() or [""]
        ours = name in DECK_COMMANDS or name in self.actions  # deck's and its plugins' commands come first
        if line.startswith("//") or (not ours and name in self.agent_commands.get(self.current or "", {})):
            # The agent's own command: sent as its message. `//NAME` reaches one named as deck's is.
            if self.current is not None:
                self._send(self.current, line[1:] if line.startswith("//") else line)
            return
        if name in ("start", "stop", "restart", "logs", "cancel"):
            agent = args[0] if args else self.current
            if agent is None or agent not in self.agents:
                self.error(DECK, f"unknown agent {agent!r} (agents: {', '.join(self.agents) or 'none'})")
                return
            if name == "cancel":
                self._cancel(agent)
            elif name == "logs":
                self._spawn(self._logs(agent), agent)
            else:
                self._spawn(self.client.call(f"AgentService.{name.title()}", {"name": agent}), agent)
        elif name == "allow":
            always = args[:1] == ["always"]
            self._answer(None if always or not args else args[0], always=always)
        elif name == "deny":
            self._answer(None, deny=True)
        elif name in ("answer", "decline"):
            self._answer_question(line[len(name) + 1 :].strip() if name == "answer" else None)
        elif name == "agents":
            self._spawn(self._agents(), DECK)
        elif name == "inbox":
            self._spawn(self._inbox(), DECK)
        elif name == "next":
            self._next()
        elif name in ("new", "fork"):
            agent = args[0] if args else self.current
            if agent is None or agent not in self.agents:
                self.error(DECK, f"unknown agent {agent!r} (agents: {', '.join(self.agents) or 'none'})")
                return
            self.current = agent
            if name == "fork":
                self._spawn(self._fork(agent), agent)
            else:
                self._spawn(self.client.call("ChatService.NewConversation", {"agent": agent}), agent)
        elif name in ("mode", "model", "set"):
            if self.current is None:
                self.error(DECK, "there is no agent in the config")
                return
            self._spawn(self._choose(self.current, name, args), self.current)
        elif name in ("queue", "unqueue", "edit"):
            if self.current is None:
                self.error(DECK, "there is no agent in the config")
                return
            number, _, text = line[len(name) + 1 :].strip().partition(" ")
            if name != "queue" and not number.isdigit():
                self.error(DECK, f"/{name} N{' TEXT' if name == 'edit' else ''}: N is the message's number in /queue")
                return
            if name == "edit" and not text.strip():
                self.error(DECK, f"/edit {number} TEXT: the new text (to drop message {number}: /unqueue {number})")
                return
            self._spawn(self._queue(self.current, name, int(number) if number.isdigit() else 0, text), self.current)
        elif name in self.actions:
            self._action(self.actions[name], line[len(name) + 1 :].strip())
        elif name == "help":
            self._help()
        elif name == "quit":
            self._quit = True
            if self._asks and not self.client.attached:  # said first: what follows is their end
                n = len(self._asks)
                self.emit(DECK, f"quitting: {n} request{'s' if n > 1 else ''} waiting cancelled as the agents stop", "dim")
        elif name == "shutdown":
            if self.client.attached:
                self._spawn(self.client.call("DeckService.Shutdown"), DECK)
            self._quit = True
        else:
            self.error(DECK, f"unknown command: /{name}")
            self._help()

    def _answer_question(self, text: str | None) -> None:
        """/answer K=V ... or /answer {json}: the oldest pending question; /decline (text None) declines it."""
        question = next((p for kind, p in self._asks.values() if kind == "question"), None)
        if question is None:
            self.error(DECK, "no question is waiting for an answer")
            return
        values = None
        if text is not None:
            try:
                values = question_values(text, question.get("schema") or {})
            except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
                self.error(question["agent"], f"cannot read that answer: {exc}")
                return
        del self._asks[question["id"]]  # answered: the next /answer is for the next question
        answering = self.client.call("ChatService.AnswerQuestion", {"id": question["id"], "values": values})
        self._spawn(self._answered(question, answering), question["agent"])

    async def _answered(self, question: dict[str, Any], answering: Awaitable[Any]) -> None:
        """An answer refused (it does not fit the form) leaves the question waiting: the next
        /answer is for it again."""
        try:
            await answering
        except ServiceError as exc:
            if exc.code == INVALID_PARAMS:
                self._asks = {question["id"]: ("question", question), **self._asks}
            raise

    def _help(self) -> None:
        for line in HELP.splitlines():
            self.emit(DECK, line)
        if self.actions:
            self.emit(DECK, "the plugins' commands:")
            usages = {name: action_usage(action) for name, action in self.actions.items()}
            width = max(len(COMMANDS[0][0]), *(len(u) for u in usages.values()))
            for name, action in self.actions.items():
                self.emit(DECK, one_line(f"{usages[name]:<{width}}  {action['help']}", 300))
        commands = self.agent_commands.get(self.current or "", {})
        if commands:
            self.emit(DECK, f"{self.current}'s own commands (sent to it as a message; //NAME for one that deck's hides):")
            width = max(len(n) for n in commands) + 1
            for name, description in sorted(commands.items()):
                hidden = " (//" + name + ": deck has a /" + name + ")" if name in DECK_COMMANDS or name in self.actions else ""
                self.emit(DECK, one_line(f"/{name:<{width}} {description}{hidden}", 300))

    async def _line_done(self) -> None:
        """What the last line asked is answered: a listing shown, an error said, a message in the
        conversation (its answer streams meanwhile: the next lines may queue more, or cancel it)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, work: Awaitable[Any], agent: str) -> None:
        """Await `work` (a call, or a coroutine of calls); an error it raises is shown under `agent`."""
        task = asyncio.get_running_loop().create_task(self._report(work, agent))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _report(self, work: Awaitable[Any], agent: str) -> None:
        try:
            await work
        except ServiceError as exc:
            self.error(agent, str(exc))
        except Exception as exc:  # a bug must not end the frontend
            self.error(agent, f"{type(exc).__name__}: {exc}")

    async def _fork(self, agent: str) -> None:
        result = await self.client.call("ChatService.Fork", {"agent": agent})
        self.emit(agent, f"forked session {result.get('forkedFrom')} as {result.get('sessionId')}", "dim")

    def _cancel(self, agent: str) -> None:
        dropped = self._drop_early(agent, "dropped: it waited for a permission request")
        self._spawn(self._cancelled(agent, self.client.call("ChatService.Cancel", {"agent": agent}), dropped), agent)

    async def _cancelled(self, agent: str, call: Awaitable[dict[str, Any]], dropped: int) -> None:
        result = await call
        if not result["cancelled"] and not result["abandoned"] and not dropped:
            self.emit(agent, "nothing to cancel", "dim")

    async def _logs_hint(self, agent: str) -> None:
        """`/logs AGENT` is offered only when the agent wrote something on stderr: a start that
        failed before it ran (its command missing, no bubblewrap) has no line to show."""
        lines = await self.client.call("AgentService.Logs", {"name": agent})
        if stderr_of(lines):
            self.emit(agent, f"/logs {agent} shows its last stderr lines", "dim")

    async def _logs(self, agent: str) -> None:
        lines = await self.client.call("AgentService.Logs", {"name": agent})
        if not lines:
            self.emit(agent, "no log lines", "dim")
        for line in lines:
            self.emit(agent, f"| {line}", "dim")

    async def _inbox(self) -> None:
        rows = await self.client.call("DeckService.Inbox")
        if not rows:
            self.emit(DECK, "nothing waits for you", "dim")
            return
        self.emit(DECK, f"{len(rows)} waiting for you, oldest first (/next goes to it):", "bold")
        for row in rows:
            self.emit(row["agent"], f"{row['id']}  {row['title']}  since {row['since']}")

    def _next(self) -> None:
        """The oldest request that waits: its agent becomes the current one, and it is shown again."""
        oldest = next(iter(self._asks.values()), None)
        if oldest is None:
            self.emit(DECK, "nothing waits for you", "dim")
            return
        kind, ask = oldest
        self.current = str(ask["agent"])
        (self._show_permission if kind == "permission" else self._show_question)(ask)

    async def _agents(self) -> None:
        language = self.language
        for info in await self.client.call("AgentService.List"):
            shown = f"{info['title']} · {state_word(info['state'], language)}"
            if info["outdated"]:
                shown += f" · {word('outdated', language)}"
            waiting = [kind for kind, p in self._asks.values() if p.get("agent") == info["name"]]
            if waiting:
                kinds = " and ".join(sorted({"a permission request" if k == "permission" else "a question" for k in waiting}))
                shown += f" · waits for your answer: {kinds} ({len(waiting)})"
            boxed = info.get("sandbox") or {}
            if boxed.get("enabled"):
                shown += " · sandboxed" + ("" if boxed.get("network", True) else " (no network)")
            for notice in info.get("notices") or []:
                shown += f" · {notice['text']}"
            if info["name"] == self.current:
                shown += "  (current)"
            if info["error"]:
                self.error(info["name"], f"{shown}: {info['error'].splitlines()[0]}")
            else:
                self.emit(info["name"], shown)

    def _action(self, action: dict[str, Any], text: str) -> None:
        """A plugin's command, `/NAME ARGS`: its parameters from the words typed (an agent's name, the
        current one by default), its method called, its result shown as the action says it reads."""
        words, params, said = text.split(), {}, DECK
        for n, param in enumerate(action["params"]):
            value: str | None = text.split(None, n)[n] if param.get("rest") and len(words) > n else None
            value = value if value is not None else (words[n] if len(words) > n else None)
            if value is None and param.get("agent") and param.get("required"):
                value = self.current  # an agent it must name: the current one
            if value is None and param.get("required"):
                self.error(DECK, f"{action_usage(action)}: {param['help'] or param['name']}")
                return
            if value is not None:
                params[param["name"]] = value
            if param.get("agent") and value is not None:
                said = value
        self._spawn(self._acted(action, params, said), said)

    async def _acted(self, action: dict[str, Any], params: dict[str, Any], said: str) -> None:
        result = await self.client.call(action["method"], params)
        if not result and action.get("empty"):
            self.emit(said, action["empty"], "dim")
            return
        show = {"conversations": self._conversations, "messages": self._messages, "diff": self._diff,
                "table": self._table, "conversation": self._opened}.get(action["shows"], self._text)  # fmt: skip
        show(said, result)

    def _text(self, said: str, result: Any) -> None:
        if isinstance(result, dict) and isinstance(result.get("summary"), str):
            result = result["summary"]
        self.emit(said, result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))

    def _table(self, said: str, rows: Any) -> None:
        for row in rows if isinstance(rows, list) else [rows]:
            shown = " · ".join(f"{k}: {v}" for k, v in row.items()) if isinstance(row, dict) else str(row)
            self.emit(said, one_line(shown, 500))

    def _opened(self, said: str, result: Any) -> None:
        if isinstance(result, dict) and result.get("agent") in self.agents:
            self.current = result["agent"]

    def _conversations(self, said: str, rows: Any) -> None:
        for row in rows:
            count = f"{row['messages']} message{'' if row['messages'] == 1 else 's'}"
            title = " ".join((row["title"] or "").split())
            self.emit(row["agent"], f"{row['id']}  {_local(row['updatedAt'])}  {count}  {title}")

    async def _choose(self, agent: str, command: str, args: list[str]) -> None:
        """/mode [ID], /model [ID], /set [ID VALUE]: list the agent's choices, or make one. A mode is
        set through the agent's config option of category mode when it offers one, else as a
        session mode (`session/set_mode`)."""
        await self.client.call("AgentService.Start", {"name": agent})  # its choices come with its session
        conv = await self.client.call("ChatService.Conversation", {"agent": agent})
        options = [o for o in conv.get("configOptions") or [] if isinstance(o, dict) and isinstance(o.get("id"), str)]
        modes = conv.get("modes") or {}
        category = {"mode": "mode", "model": "model"}.get(command)
        option = next((o for o in options if o.get("category") == category), None) if category else None
        if command == "set":
            if not args:
                if not options:
                    self.emit(agent, f"{agent} offers no config options", "dim")
                for o in options:
                    self.emit(agent, _option_line(o))
                return
            if len(args) < 2:
                self.error(agent, "/set ID VALUE: an option's id and its new value (/set lists them)")
                return
            option = next((o for o in options if o["id"] == args[0]), None)
            if option is None:
                self.error(agent, f"no config option {args[0]!r} (options: {', '.join(o['id'] for o in options) or 'none'})")
                return
            await self._set_option(agent, option, " ".join(args[1:]))
        elif option is not None:
            if not args:
                self.emit(agent, _option_line(option))
                return
            await self._set_option(agent, option, args[0])
        elif command == "mode" and modes.get("availableModes"):
            available = [m for m in modes["availableModes"] if isinstance(m, dict)]
            if not args:
                for m in available:
                    mark = "*" if m.get("id") == modes.get("currentModeId") else " "
                    self.emit(agent, f"{mark} {m.get('id')}  {one_line(str(m.get('name') or ''), 80)}")
                return
            await self.client.call("ChatService.SetMode", {"agent": agent, "modeId": args[0]})
            self.emit(agent, f"mode: {args[0]}", "dim")
        else:
            self.error(agent, f"{agent} offers no {command} to choose (its config options: /set)")

    async def _set_option(self, agent: str, option: dict[str, Any], text: str) -> None:
        value: str | bool = text
        if option.get("type") == "boolean":
            if text.lower() not in BOOLEAN_WORDS:
                self.error(agent, f"{option['id']} is on or off: /set {option['id']} on|off")
                return
            value = BOOLEAN_WORDS[text.lower()]
        result = await self.client.call("ChatService.SetConfigOption", {"agent": agent, "configId": option["id"], "value": value})
        now = next((o for o in result.get("configOptions") or [] if isinstance(o, dict) and o.get("id") == option["id"]), None)
        self.emit(agent, _option_line(now or option), "dim")

    async def _queue(self, agent: str, command: str, number: int, text: str) -> None:
        """/queue, /unqueue N, /edit N TEXT: the agent's queue, numbered from 1 in the order it goes."""
        waiting = await self.client.call("ChatService.Queue", {"agent": agent})
        if command == "queue":
            if not waiting:
                self.emit(agent, "nothing waits to be sent", "dim")
            for n, message in enumerate(waiting, 1):
                self.emit(agent, f"{n}. {one_line(message['text'], 200)}")
            return
        if not 1 <= number <= len(waiting):
            self.error(agent, f"no message {number} in the queue ({len(waiting)} waiting: /queue lists them)")
            return
        message_id = waiting[number - 1]["id"]
        if command == "unqueue":
            await self.client.call("ChatService.Unqueue", {"agent": agent, "id": message_id})
            self.emit(agent, f"message {number} taken out of the queue: it will not be sent", "dim")
        else:
            await self.client.call("ChatService.EditQueued", {"agent": agent, "id": message_id, "text": text})
            self.emit(agent, f"message {number} edited", "dim")

    def _messages(self, said: str, hits: Any) -> None:
        for hit in hits:
            snippet = " ".join(hit["snippet"].split())
            pieces: Pieces = [(f"{hit['conversationId']}  {hit['role']}: ", "")]
            for n, piece in enumerate(snippet.split("**")):  # the words found are between ** marks: bold
                if piece:
                    pieces.append((piece, "bold" if n % 2 else ""))
            self.emit(hit["agent"], pieces)

    def _diff(self, agent: str, text: Any) -> None:
        styles = (("+++", "bold"), ("---", "bold"), ("diff --git", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))
        self.emit(agent, [(line + "\n", next((s for start, s in styles if line.startswith(start)), ""))
                          for line in text.removesuffix("\n").split("\n")])  # fmt: skip

    def _answer(self, number: str | None, deny: bool = False, always: bool = False) -> None:
        """/allow [N], /deny: the current agent's oldest waiting request, else its next one.

        A script types its answers before the requests come: each waits ANSWER_WAIT seconds
        for a request of the agent that is current when it is typed, and answers one request.
        """
        agent = self.current
        if agent is None:
            self.error(DECK, "there is no agent in the config")
            return
        waiting = [p for kind, p in self._asks.values() if kind == "permission"]
        ask = next((p for p in waiting if p["agent"] == agent), None)
        chosen = _option_number(number) if number is not None else None
        if number is not None and chosen is None:
            self.error(agent, "/allow N: N is an option number" + (f", 1 to {len(ask['options'])}" if ask else ""))
            return
        if ask is not None:
            self._give(agent, ask["id"], ask["options"], chosen, deny, always)
            return
        command = "/deny" if deny else "/allow always" if always else f"/allow {number}" if number is not None else "/allow"
        if len(self._early.get(agent, [])) >= ANSWERS_MAX:
            self.error(agent, f"{command} refused: {ANSWERS_MAX} answers already wait for {agent}'s requests")
            return
        early = _EarlyAnswer(agent, command, chosen, deny, always=always)
        early.timer = asyncio.get_running_loop().call_later(ANSWER_WAIT, self._expire, early)
        self._early.setdefault(agent, []).append(early)
        shown = f"waiting up to {ANSWER_WAIT:g} s for a permission request from {agent}: {command} answers it"
        others = sorted({p["agent"] for p in waiting})
        if others:
            shown += f" ({others[0]} has one waiting: @{others[0]}, then {command})"
        self.emit(agent, shown, "dim")

    def _give(
        self, agent: str, pending_id: str, options: list[dict[str, Any]], number: int | None, deny: bool,
        always: bool = False,
    ) -> None:
        """Answer request `pending_id` with the option /deny, /allow always or /allow [N] picks among
        `options` (`choose_option`): a bare /allow allows once wherever the agent offers it, never always."""
        choice = REJECT if deny else ALWAYS if always else number if number is not None else ONCE
        try:
            option = choose_option(options, choice)
        except ValueError as exc:
            if isinstance(choice, int):
                self.error(agent, f"/allow N: {exc}")
                return
            has_always = any(o.get("kind") == "allow_always" for o in options)
            hint = {REJECT: f"/allow N (1-{len(options)}) or /cancel {agent}", ALWAYS: f"/allow N (1-{len(options)})",
                    ONCE: f"{'/allow always or ' if has_always else ''}/allow N (1-{len(options)})"}  # fmt: skip
            self.error(agent, f"{exc}: {hint[choice]}")
            return
        self._asks.pop(pending_id, None)  # answered: the next /allow or /deny is for the next request
        params = {"id": pending_id, "optionId": str(option["optionId"])}
        self._spawn(self.client.call("ChatService.AnswerPermission", params), agent)

    def _expire(self, early: _EarlyAnswer) -> None:
        waiting = self._early.get(early.agent, [])
        if early in waiting:
            waiting.remove(early)
            if not waiting:
                del self._early[early.agent]
            shown = f"{early.command} expired: no permission request came from {early.agent} within {ANSWER_WAIT:g} s"
            self.emit(early.agent, shown, "yellow")

    def _drop_early(self, agent: str | None, why: str | None) -> int:
        """Forget the early answers of `agent` (of all agents: None), each saying `why` with its
        `{agent}` filled in (None: quietly); returns how many."""
        dropped = 0
        for name in [agent] if agent is not None else list(self._early):
            for early in self._early.pop(name, []):
                if early.timer is not None:
                    early.timer.cancel()
                if why is not None:
                    self.emit(name, f"{early.command} {why.format(agent=name)}", "yellow")
                dropped += 1
        return dropped


def _clients(count: int) -> str:
    """`1 client`, `2 clients`."""
    return f"{count} client{'' if count == 1 else 's'}"


def _local(iso: str) -> str:
    """A wire time (ISO 8601, UTC) as the local date and minute."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return iso


def diff_summary(tool_diffs: list[dict[str, Any]]) -> str:
    """`+N -M path` for each diff of a tool call (`path changed: N → M lines, too large to compare`
    for one `deck.diffs` does not compare). Each is compared once, however often its call is updated."""
    shown = []
    for diff in tool_diffs:
        comparison = compare(str(diff.get("oldText") or ""), str(diff.get("newText") or ""))
        path = diff.get("path", "")
        words = f"{comparison.summary()} {path}" if comparison.compared else f"{path} {comparison.summary()}"
        shown.append(words + (" (new)" if diff.get("newFile") else ""))
    return ", ".join(shown)


def cost_text(cost: Any) -> str:
    """`0.75 USD`, or `cost unknown (not counted)` when the agent reports none: never 0."""
    return money(cost) or "cost unknown (not counted)"


def context_share(used: int, size: int) -> str:
    """`used` tokens of a `size`-token context as a whole percentage; "<1%" when some is used but
    it rounds to 0 (the console's gauge rounds the same way)."""
    share = round(100 * used / size)
    return "<1%" if share == 0 and used > 0 else f"{share}%"


def _option_number(text: str) -> int | None:
    """/allow N's N, or None when it is not a (reasonable) number."""
    return int(text) if text.isdecimal() and len(text) <= 6 else None


def _text_of(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message.get("parts") or [] if p.get("type") == "text")


def _rstrip(line: list[Segment]) -> list[Segment]:
    """Drop the padding rich adds after the words (trailing blanks without a background)."""
    from rich.segment import Segment

    line = list(line)
    while line and not line[-1].text.strip() and not (line[-1].style and line[-1].style.bgcolor):
        line.pop()
    if line and not (line[-1].style and line[-1].style.bgcolor):
        last = line[-1]
        line[-1] = Segment(last.text.rstrip(), last.style, last.control)
    return line


@hookimpl
def deck_register_frontends() -> dict[str, type[Frontend]]:
    return {"line": LineFrontend}


def question_values(text: str, schema: dict[str, Any]) -> dict[str, Any]:
    """`{"k": 1}` or `k=v k2="two words"` → the answer object, typed by the question's schema."""
    if text.startswith("{"):
        answer = json.loads(text)
        if not isinstance(answer, dict):
            raise ValueError("the answer must be an object")
        return answer
    properties = schema.get("properties") or {}
    values: dict[str, Any] = {}
    for item in shlex.split(text):
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"{item!r} is not KEY=VALUE")
        kind = (properties.get(key) or {}).get("type", "string")
        if kind == "boolean":
            values[key] = raw.lower() in ("1", "true", "yes", "y", "on", "oui")
        elif kind in ("integer", "number"):
            values[key] = int(raw) if kind == "integer" else float(raw)
        elif kind == "array":  # a list of strings: a,b,c
            values[key] = [item.strip() for item in raw.split(",") if item.strip()]
        else:
            values[key] = raw
    return values
