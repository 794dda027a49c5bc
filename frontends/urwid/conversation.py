"""The selected agent's conversation: messages as a flat list of small widgets, built once and reused.

A message becomes a header, then its parts: the agent's text as Markdown in blocks (the user's
as typed), thoughts dimmed and collapsible, tool calls with kind, status and an expandable diff,
the plan as a checklist. Blocks are cached by content, so a streaming answer re-lays out only
its last block.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeGuard

import urwid
from deck.diffs import compare, unified_lines
from deck.frontends.subagents import Subagents
from deck.tty import sgr_spans, terminal_text

from . import markdown
from .common import Clickable, LineBox, Text
from .i18n import Strings
from .model import AgentModel, MessageModel, Part
from .paths import relative_tool

if TYPE_CHECKING:
    from urwid.widget import AbstractFlowWidget

INDENT = 2
OUTPUT_LINES = 8
#: The last lines of a command's output a tool call shows, until it is expanded (then all that is kept).
TERMINAL_LINES = 10
#: System messages the console words itself, in its language: the core's English text of them is not shown again.
WORDED_CODES = ("agent-restarted", "agent-unavailable")
#: The colour of a notice said on the agent, beside its conversation, by its level.
SAID_ATTRS = {"info": "text", "warning": "warning", "error": "error"}
#: The colour of a context compaction's line, by its status.
COMPACTION_ATTRS = {"in_progress": "dim", "completed": "ok", "failed": "error", "cancelled": "warning"}
PLAN_MARKS = {"completed": ("ok", "[x]"), "in_progress": ("status in_progress", "[~]"), "pending": ("dim", "[ ]")}


def _texts(diff: dict[str, Any]) -> tuple[str, str]:
    """A tool diff's old and new text."""
    return str(diff.get("oldText") or ""), str(diff.get("newText") or "")


def diff_lines(diff: dict[str, Any]) -> list[tuple[str, str]]:
    """A tool diff as (attribute, line) pairs of a unified diff (`deck.diffs`: compared once, in bounded time)."""
    path = str(diff.get("path") or "")
    before, after = (f"a{path}", f"b{path}") if path.startswith("/") else (f"a/{path}", f"b/{path}")
    out = []
    for line in unified_lines(*_texts(diff), before, after, context=2):
        if line.startswith(("+++", "---")):
            out.append(("dim", line))
        elif line.startswith("+"):
            out.append(("diff add", line))
        elif line.startswith("-"):
            out.append(("diff del", line))
        elif line.startswith("@@"):
            out.append(("diff hunk", line))
        else:
            out.append(("text", line))
    return out


def _diff_widgets(
    diff: dict[str, Any], strings: Strings, show_diff: bool, on_toggle: Callable[[], None] | None
) -> list[AbstractFlowWidget]:
    """A tool diff: its lines when shown, else a line counting them; one line saying so when too large to compare."""
    path = diff.get("path", "")
    comparison = compare(*_texts(diff))
    if not comparison.compared:
        words = strings("diff_too_large", path=path, old=comparison.old_lines, new=comparison.new_lines)
        return [_pad(Clickable(("diff hunk", words), on_toggle), INDENT + 2)]
    if not show_diff:
        summary = strings("diff_hidden", path=path, added=comparison.added, removed=comparison.removed)
        return [_pad(Clickable(("diff hunk", summary), on_toggle), INDENT + 2)]
    out: list[AbstractFlowWidget] = []
    if diff.get("newFile"):
        out.append(_pad(Text(("dim", f"{strings('diff_new')}: {path}")), INDENT + 2))
    markup: list[Any] = [(attr, ("\n" if i else "") + line) for i, (attr, line) in enumerate(diff_lines(diff))]
    out.append(_pad(Clickable(markup or "", on_toggle), INDENT + 2))
    return out


def tool_widgets(
    part: dict[str, Any], strings: Strings, show_diff: bool, on_toggle: Callable[[], None] | None
) -> list[AbstractFlowWidget]:
    """A tool call: header with kind, title and status; input; output; diffs (summary or full)."""
    status = str(part.get("status") or "pending")
    kind = str(part.get("kind") or "other")
    title = str(part.get("title") or "")
    name = part.get("name") if isinstance(part.get("name"), str) else ""
    header: list[Any] = [("tool", f"⚙ {strings.tool_word(kind)}"), " ", ("strong", title)]
    if name and name != title:  # the tool's programmatic name, beside the title the agent words
        header += [" ", ("dim", f"({name})")]
    header += [" · ", (f"status {status}", strings.tool_word(status))]
    out: list[AbstractFlowWidget] = [_pad(Clickable(header, on_toggle))]
    if part.get("input"):
        out.append(_pad(Text(("dim", "  " + _clip(str(part["input"]), 300))), INDENT + 2))
    for location in part.get("locations") or []:
        where = str(location.get("path", "")) + (f":{location['line']}" if location.get("line") else "")
        out.append(_pad(Text(("dim", "  @ " + where)), INDENT + 2))
    output = tool_output(str(part.get("output") or ""))
    if output:
        lines = output.splitlines()
        shown = "\n".join(lines[:OUTPUT_LINES]) + (f"\n… ({len(lines) - OUTPUT_LINES} more)" if len(lines) > OUTPUT_LINES else "")
        out.append(_pad(Text(("output", shown)), INDENT + 2))
    for terminal in part.get("terminals") or []:
        if isinstance(terminal, dict):
            out += terminal_widgets(terminal, strings, show_diff, on_toggle)
    for diff in part.get("diffs") or []:
        out += _diff_widgets(diff, strings, show_diff, on_toggle)
    return out


#: What an adapter adds to a tool's result for the model, not for the user (Claude Code's reminders).
_FOR_THE_MODEL = re.compile(r"<system-reminder>.*?(</system-reminder>|\Z)", re.DOTALL)
_FENCE = re.compile(r"\A\s*(`{3,}|~{3,})[^\n]*\n(.*?)\n?\1\s*\Z", re.DOTALL)


def tool_output(text: str) -> str:
    """A tool's result as the user reads it: the notes an adapter adds for the model left out, and
    the Markdown fence it wraps the result in taken off (the box shows it as code already)."""
    if "<system-reminder>" in text:
        text = _FOR_THE_MODEL.sub("", text)
    fenced = _FENCE.match(text)
    return (fenced.group(2) if fenced else text).strip("\n")


def terminal_widgets(
    terminal: dict[str, Any], strings: Strings, expanded: bool, on_toggle: Callable[[], None] | None
) -> list[AbstractFlowWidget]:
    """A command's live output in a tool call: its last TERMINAL_LINES lines (all that is kept when
    expanded), in its own colours (SGR only; every other escape sequence is dropped), then how it ended."""
    text = terminal_text(str(terminal.get("output") or ""), keep_sgr=True)
    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()
    hidden = 0 if expanded else max(0, len(lines) - TERMINAL_LINES)
    out: list[AbstractFlowWidget] = []
    if hidden:
        out.append(_pad(Clickable(("dim", "│ " + strings("terminal_hidden", n=hidden)), on_toggle), INDENT + 2))
    markup: list[Any] = []
    for i, line in enumerate(lines[hidden:]):
        markup.append(("dim", ("\n" if i else "") + "│ "))
        markup += [(f"sgr {colour}" if colour else "output", piece) for colour, _bold, piece in sgr_spans(line)]
    if markup:
        out.append(_pad(Text(markup), INDENT + 2))
    status = terminal.get("exitStatus")
    if isinstance(status, dict):
        code, sig = status.get("exitCode"), status.get("signal")
        words = strings("terminal_killed", signal=sig) if sig else strings("terminal_exited", code=code)
        out.append(_pad(Text([("dim", "└ "), ("ok" if code == 0 else "error", words)]), INDENT + 2))
    return out


def plan_widgets(part: dict[str, Any], strings: Strings) -> list[AbstractFlowWidget]:
    markup: list[Any] = [("strong", strings("plan"))]
    for entry in part.get("entries") or []:
        attr, mark = PLAN_MARKS.get(str(entry.get("status")), PLAN_MARKS["pending"])
        markup += ["\n", (attr, mark), " ", ("dim" if entry.get("status") == "completed" else "text", str(entry.get("content", "")))]
    return [_pad(Text(markup))]


def compaction_widgets(part: dict[str, Any], strings: Strings) -> list[AbstractFlowWidget]:
    """A context compaction, one line: in progress, done (its summary's first line), failed (why), cancelled."""
    status = str(part.get("status") or "in_progress")
    summary = str(part.get("summary") or "").strip().partition("\n")[0]
    error = str(part.get("error") or "").strip().partition("\n")[0]
    if status == "completed":
        words = strings("compacted", summary=summary) if summary else strings("compacted_bare")
    elif status == "failed":
        words = strings("compaction_failed", error=error) if error else strings("compaction_failed_bare")
    elif status == "cancelled":
        words = strings("compaction_cancelled")
    elif status == "in_progress":
        words = strings("compacting")
    else:  # a status deck does not know: said as it is, nothing read into it
        words = f"{strings('compaction')}: {status}"
    return [_pad(Text((COMPACTION_ATTRS.get(status, "dim"), words)))]


def _pad(widget: urwid.Widget, left: int = INDENT) -> AbstractFlowWidget:
    return urwid.Padding(widget, left=left)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class MessageRenderer:
    """Widgets of messages, with a cache of text blocks per part so unchanged blocks are reused."""

    def __init__(self, strings: Strings, on_toggle: Callable[[tuple[str, int]], None]) -> None:
        self.strings = strings
        self.on_toggle = on_toggle
        self.show_thoughts = True
        self.show_diffs = False
        #: The folder of the agent whose messages these are: tool calls show the paths beneath it relative to it.
        self.folder = ""
        self.flipped: set[tuple[str, int]] = set()  # parts shown opposite to the global setting
        #: The agents' subagents (the console's model's), and the agent whose messages these are.
        self.subagents: Callable[[], Subagents] = Subagents
        self.agent = ""
        #: Subagents' messages are folded to their head line (`fold_children`), but those in `unfolded`.
        self.fold_children = False
        self.folded_flipped: set[str] = set()
        self.on_fold: Callable[[str], None] = lambda session: None
        self._blocks: dict[tuple[str, int], dict[tuple[str, bool, str, bool], AbstractFlowWidget]] = {}

    def forget(self) -> None:
        self._blocks.clear()

    def widgets(self, message: MessageModel, agent_title: str) -> list[AbstractFlowWidget]:
        if message.session is not None or message.sender is not None or message.recipient is not None:
            return self._nested(message, agent_title)
        s = self.strings
        out: list[AbstractFlowWidget] = []
        if message.role == "user":
            head: list[Any] = [("user", f"▸ {s('you')}")]
            if message.queued:
                head += [" ", ("warning", f"({s('queued')})")]
            if message.error == "cancelled":
                head += [" ", ("dim", f"({s('message_cancelled')})")]
            elif message.error:  # not sent: taken out of the queue, or the agent stopped first
                head += [" ", ("dim", f"({message.error})")]
            out.append(Text(head))
        elif message.role == "system" and message.code == "notice":  # an agent's notice, in its level's colour
            level = str(message.level or "info")
            attr = SAID_ATTRS.get(level, "text")
            out.append(Text([("system", f"! {s('system')}"), " · ", (attr, s(f"notice_{level}") if level in SAID_ATTRS else level)]))
            out += [_pad(Text((attr, part.text))) for part in message.parts if part.type == "text" and part.text]
            out.append(urwid.Divider())
            return out
        elif message.role == "system":
            out.append(Text(("system", f"! {s('system')}")))
            if self._worded(message.code):
                out.append(_pad(Text(("warning", s(message.code, error=message.error or "")))))
            elif message.error:
                out.append(_pad(Text(("error", message.error))))
        else:
            out.append(Text(("agent", f"◆ {agent_title}")))
        if not (message.role == "system" and self._worded(message.code)):
            for index, part in enumerate(message.parts):
                out += self._part(message, index, part)
        if message.role == "agent" and message.done:
            if message.stop_reason and message.stop_reason != "end_turn":
                out.append(_pad(Text(("warning", s("stop_reason", reason=s.stop_reason(message.stop_reason))))))
            if message.error:
                out.append(_pad(Text(("error", s("message_error", error=message.error)))))
        out.append(urwid.Divider())
        return out

    def _nested(self, message: MessageModel, agent_title: str) -> list[AbstractFlowWidget]:
        """A subagent's message, indented under its parent by how deep it nests, headed by
        `agent › child` (a click folds or unfolds that child); a message between sessions headed
        `sender → recipient`."""
        subagents, session = self.subagents(), message.session
        depth = subagents.depth(self.agent, session)
        head = f"{agent_title} › {subagents.name(self.agent, session)}" if session else agent_title
        if message.sender is not None or message.recipient is not None:
            sender, recipient = (subagents.name(self.agent, who) for who in (message.sender, message.recipient))
            head += f" · ✉ {sender} → {recipient}"
        folded = session is not None and (session in self.folded_flipped) != self.fold_children
        out: list[AbstractFlowWidget] = []
        if session is None:
            out.append(Text(("agent", f"◆ {head}")))
        else:
            fold = self.on_fold
            out.append(Clickable(("agent", f"{'▸' if folded else '▾'} {head}"), lambda: fold(session)))
        if not folded:
            for index, part in enumerate(message.parts):
                out += self._part(message, index, part)
        out.append(urwid.Divider())
        return [_pad(widget, 2 * depth) for widget in out] if depth else out  # type: ignore[arg-type]

    def _worded(self, code: str | None) -> TypeGuard[str]:
        """Whether a system message with this code is shown in the console's own words: in English
        the core's note says more (why the agent could not resume its session), so it is shown as it is."""
        if code == "agent-restarted":
            return self.strings.language != "en"
        return code in WORDED_CODES

    def _part(self, message: MessageModel, index: int, part: Part) -> list[AbstractFlowWidget]:
        key = (message.id, index)
        toggle = lambda: self.on_toggle(key)  # noqa: E731
        if part.type == "tool":
            show = self.show_diffs != (key in self.flipped)
            return tool_widgets(relative_tool(part.data, self.folder), self.strings, show, toggle)
        if part.type == "plan":
            return plan_widgets(part.data, self.strings)
        if part.type == "compaction":
            return compaction_widgets(part.data, self.strings)
        text = part.text
        if part.type == "thought":
            if self.show_thoughts == (key in self.flipped):
                count = text.count("\n") + 1
                return [_pad(Clickable(("thought", "∴ " + self.strings("thought_hidden", n=count)), toggle))]
            widgets = self._text_blocks(key, text, "thought")
            return [_pad(Clickable(("thought", "∴ " + self.strings("thought")), toggle)), *widgets]
        if part.type == "text" and message.role == "user":
            return [_pad(Text(("text", text)))]  # as typed: Markdown is the agent's
        if part.type == "text":
            return self._text_blocks(key, text, "text")
        return []

    def _text_blocks(self, key: tuple[str, int], text: str, base: str) -> list[AbstractFlowWidget]:
        old = self._blocks.get(key, {})
        new: dict[tuple[str, bool, str, bool], AbstractFlowWidget] = {}
        out = []
        for block, is_code, paragraph in markdown.blocks(text):
            cache_key = (block, is_code, base, paragraph)
            widget = old.get(cache_key) or new.get(cache_key)
            if widget is None:
                markup = markdown.render(block, is_code, base)
                widget = _pad(Text([(base, "\n"), *markup] if paragraph else markup))
            new[cache_key] = widget
            out.append(widget)
        self._blocks[key] = new
        return out


class ConversationView(urwid.WidgetWrap):
    """The conversation list that follows new output unless the user scrolled up,
    the notices said on the agent beside it, and the "an agent is talking to it" overlay."""

    def __init__(self, strings: Strings) -> None:
        self.strings = strings
        self.renderer = MessageRenderer(strings, self._toggle)
        self.renderer.on_fold = self._fold
        self.walker: urwid.SimpleFocusListWalker[AbstractFlowWidget] = urwid.SimpleFocusListWalker([])
        self.listbox = urwid.ListBox(self.walker)
        self.segments: dict[str, list[AbstractFlowWidget]] = {}
        self.order: list[str] = []
        self.agent: AgentModel | None = None
        self.following = True
        #: Shown while the conversation is empty: how to begin.
        self.empty = _pad(Text(("dim", strings("empty_conversation"))))
        self.said: urwid.SimpleFocusListWalker[AbstractFlowWidget] = urwid.SimpleFocusListWalker([])
        self.side = LineBox(urwid.ListBox(self.said), title=strings("said"), title_align="left")
        self.banner = Text("", align="center")
        self.columns = urwid.Columns([self.listbox])
        self.frame: urwid.Frame[urwid.Columns, Text, None] = urwid.Frame(self.columns)
        self.on_toggled: Callable[[], None] = lambda: None
        super().__init__(self.frame)

    # -- content ----------------------------------------------------------------------------

    def show(self, agent: AgentModel) -> None:
        """Show `agent`'s conversation from scratch (agent switched, config reopened)."""
        self.agent = agent
        self.segments.clear()
        self.order = []
        self.renderer.forget()
        self.following = True
        self.rebuild(None)
        self.update_side()

    def rebuild(self, message_ids: set[str] | None) -> None:
        """Rebuild the widgets of `message_ids` (None: all) and put them in the list.

        Messages are only ever added at the end, so when the list already shows the messages
        in the same order, only the changed messages' widgets are replaced (in place) and the
        new ones appended; anything else refills the whole list."""
        agent = self.agent
        if agent is None:
            self.segments.clear()
            self.order = []
            self.walker[:] = []
            return
        old_order, old_lengths = self.order, {mid: len(self.segments[mid]) for mid in self.order}
        self.renderer.folder = agent.folder
        self.renderer.agent = agent.name
        changed: set[str] = set()
        for message in agent.messages:
            if message_ids is None or message.id in message_ids or message.id not in self.segments:
                self.segments[message.id] = self.renderer.widgets(message, agent.title)
                changed.add(message.id)
        self.order = [m.id for m in agent.messages]
        focus_widget = self.listbox.focus if not self.following else None
        walker = self.walker
        if message_ids is not None and old_order and self.order[: len(old_order)] == old_order:
            start = 0
            for mid in old_order:
                length = old_lengths[mid]
                if mid in changed:
                    walker[start : start + length] = self.segments[mid]
                start += len(self.segments[mid])
            walker.extend(w for mid in self.order[len(old_order) :] for w in self.segments[mid])
        else:
            walker[:] = [w for mid in self.order for w in self.segments[mid]] or [self.empty]
        if not self.order:
            return
        if self.following:
            self.listbox.set_focus(len(walker) - 1)
            self.listbox.set_focus_valign("bottom")
        elif focus_widget is not None:
            try:
                self.listbox.set_focus(walker.index(focus_widget))
            except ValueError:  # its message was rebuilt
                pass

    def update_side(self) -> None:
        """The notices said on this agent beside the list (another agent's announcements to it among
        them), each as its plugin words it; the banner while another agent talks to it."""
        agent = self.agent
        if agent is not None and agent.said:
            self.said[:] = [
                Text([("dim", f"{n['at']} · {n['source']}"), "\n", (SAID_ATTRS.get(n["level"], "text"), n["text"])])
                for n in agent.said
            ]
            self.said.set_focus(len(self.said) - 1)
            if len(self.columns.contents) == 1:
                self.columns.contents.append((self.side, self.columns.options("weight", 1)))
                self.columns.contents[0] = (self.listbox, self.columns.options("weight", 2))
        elif len(self.columns.contents) > 1:
            del self.columns.contents[1:]
        if agent is not None and agent.asks:
            who = ", ".join(sorted(set(agent.asks.values())))
            self.banner.set_text(("talking", f" {self.strings('talking', who=who)} "))
            self.frame.header = self.banner
        else:
            self.frame.header = None

    def _toggle(self, key: tuple[str, int]) -> None:
        self.renderer.flipped ^= {key}
        self.rebuild({key[0]})
        self.on_toggled()

    def _fold(self, session: str) -> None:
        """Fold or unfold one subagent's messages."""
        self.renderer.folded_flipped ^= {session}
        self.rebuild(None)
        self.on_toggled()

    def toggle_all(self, what: str) -> None:
        if what == "children":
            self.renderer.fold_children = not self.renderer.fold_children
            self.renderer.folded_flipped.clear()
            self.rebuild(None)
            return
        if what == "thoughts":
            self.renderer.show_thoughts = not self.renderer.show_thoughts
        else:
            self.renderer.show_diffs = not self.renderer.show_diffs
        self.renderer.flipped.clear()
        self.rebuild(None)

    # -- scrolling -------------------------------------------------------------------------

    def keypress(self, size: Any, key: str) -> str | None:
        if key in ("page up", "page down", "up", "down", "home", "end"):
            self.scroll(size, key)
            return None
        return key

    def scroll(self, size: Any, key: str) -> None:
        if not self.walker:
            return
        if key == "home":
            self.listbox.set_focus(0)
            self.listbox.set_focus_valign("top")
            self.following = False
            return
        if key == "end":
            self.following = True
            self.rebuild(set())
            return
        self.frame.keypress(size, key)
        self.following = "bottom" in self.listbox.ends_visible(self._list_size(size))

    def _list_size(self, size: Any) -> tuple[int, int]:
        cols, rows = size
        if len(self.columns.contents) > 1:
            cols = cols * 2 // 3
        if self.frame.header is not None:
            rows -= 1
        return (max(1, cols), max(1, rows))

    def mouse_event(self, size: Any, event: str, button: int, col: int, row: int, focus: bool) -> bool:
        if event == "mouse press" and button in (4, 5):
            for _ in range(3):
                self.scroll(size, "up" if button == 4 else "down")
            return True
        return bool(super().mouse_event(size, event, button, col, row, focus))
