"""The console application: layout, keys and mouse, events → model → widgets, coalesced redraws.

Events only update the model and mark it dirty; a frame timer turns the changes into
widgets and draws at most FPS times a second, however fast the agents stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import urwid
from deck.client import Client, start
from deck.errors import ServiceError
from deck.events import (
    AgentLog,
    AgentStateChanged,
    ClientsChanged,
    ConfigChanged,
    ConversationChanged,
    ConversationReset,
    Event,
    Handlers,
    Notice,
    PermissionRequested,
    QuestionRequested,
    handles,
)
from deck.tty import TerminalLog, alert, one_line

from .actions import Actions
from .agents import SANDBOX_MARK, AgentsPanel
from .asks import Asks
from .common import Binding, HintBar, LineBox, Text, keys_label, palette, run_binding
from .conversation import ConversationView
from .dialogs import (
    ACTION_FORM_KEYS,
    ACTIONS_KEYS,
    DIALOG_WIDTH,
    PERMISSION_KEYS,
    QUESTION_KEYS,
    ChoiceDialog,
    ConfirmDialog,
    FilePicker,
    HelpDialog,
    InConversation,
    Lowered,
    OverConversation,
    PermissionDialog,
    QuestionDialog,
)
from .diff import DiffView
from .history import HistoryDialog
from .i18n import Strings
from .model import Model
from .views import ConfigView, LogsView, ResultView
from .worktrees import WORKTREE_ACTIONS, Worktrees

log = logging.getLogger(__name__)

FPS = 30
SPIN_EVERY = 0.12
NOTICE_FOR = 6.0
#: The widest a question's dialog (quit, merge, remove) is.
#: The widest an action's parameters are asked in.
#: The worktree view's keys (F9), and what each asks for once confirmed.
#: The agents panel's share of the screen's width, and its narrowest and widest.
PANEL_SHARE, PANEL_MIN, PANEL_MAX = 0.22, 18, 40
#: The hint bar's hints in the order shown, each with its rank: the highest ranks are left out first
#: when the screen is narrow (at 80 columns: help, send, agent, cancel, scroll, logs, quit).
HINTS = [("hint_help", 1), ("hint_send", 1), ("hint_newline", 7), ("hint_agent", 2), ("hint_actions", 5), ("hint_cancel", 3),
         ("hint_new", 5), ("hint_settings", 7), ("hint_scroll", 3), ("hint_logs", 4), ("hint_config", 4), ("hint_history", 6), ("hint_diff", 6), ("hint_plugin_actions", 7), ("hint_quit", 1)]  # fmt: skip
#: A file written at exit when set: draws and their times (time.monotonic), for scripts/bench_urwid.py.
STATS_ENV = "DECK_URWID_STATS"


def panel_width(cols: int) -> int:
    """The agents panel's width on a screen `cols` wide."""
    return max(PANEL_MIN, min(PANEL_MAX, round(cols * PANEL_SHARE)))


def config_problem(path: str, problems: list[dict[str, Any]], strings: Strings) -> str:
    """The line that says the config file is broken: `deck.toml:17:6: message`, its first error
    (the path relative to the current folder when it is in it, else as deck was given it); "" when
    there is none (warnings are for the config view)."""
    errors = [p for p in problems if not p.get("warning")]
    shown = errors or [p for p in problems if p.get("warning")]  # a typo is said too, until it is fixed
    if not shown:
        return ""
    where = path or "<config>"
    with contextlib.suppress(ValueError):
        where = str(Path(path).absolute().relative_to(Path.cwd()))
    first = shown[0]
    more = strings("config_more", n=len(shown) - 1) if len(shown) > 1 else ""
    kind = "" if errors else "warning: "
    problem = f"{where}:{first.get('line', '?')}:{first.get('column', '?')}: {kind}{first.get('message', '')}"
    return strings("config_banner" if errors else "config_warning_banner", problem=problem, more=more)


class CountingLoop(urwid.MainLoop):
    """A MainLoop that records when it draws the screen (input, resize and our frames alike)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.draw_times: list[float] = []

    def draw_screen(self) -> None:
        self.draw_times.append(time.monotonic())
        super().draw_screen()


class Root(urwid.WidgetPlaceholder):
    """The top widget: global keys first, then the focused widget; dialogs are overlays on it."""

    def __init__(self, app: ConsoleApp, body: urwid.Widget) -> None:
        self.app = app
        super().__init__(body)

    def render(self, size: Any, focus: bool = False) -> urwid.Canvas:
        self.app.fit(size[0])
        return super().render(size, focus)

    def keypress(self, size: Any, key: str) -> str | None:
        self.app.fit(size[0])
        if self.app.global_key(key):
            return None
        return super().keypress(size, key)

    def mouse_event(self, size: Any, event: str, button: int, col: int, row: int, focus: bool) -> bool:
        self.app.fit(size[0])
        handled = bool(super().mouse_event(size, event, button, col, row, focus))
        self.app.keep_focus()
        return handled


class ConsoleApp(Handlers):
    """The console of the deck that `client` reaches; `config` is what `ConfigService.Current()` said
    as it started (its language and theme stay for the console's life)."""

    def __init__(self, client: Client, config: dict[str, Any], screen: Any = None) -> None:
        self.client = client
        self.strings = Strings(str(config.get("language") or "en"))
        self.palette = palette(str(config.get("theme") or "dark"))
        self.model = Model()
        self.selected = ""
        self.view = "chat"
        #: "", "ask" (a permission request or a question), "quit", "picker", "history", "actions" (the
        #: menu), "action" (an action's parameters)…
        self.dialog_kind = ""
        self.shown_dialog: urwid.Widget | None = None
        self.notice = ""
        self.notice_attr = "notice"
        self.notice_until = 0.0
        #: The config file's first problem while it is broken (`config_problem`), "" while it is valid.
        self.config_problem = ""
        self.pasting = False
        self._live_logs: list[str] = []
        self.spin_frame = 0
        self.frames = 0
        self._screen = screen
        self.loop: CountingLoop | None = None
        self._config_path = str(config.get("path") or "")
        self._reloading = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._frame_handle: asyncio.TimerHandle | None = None
        self._spin_handle: asyncio.TimerHandle | None = None
        self._last_frame = 0.0
        self._tasks: set[asyncio.Future[Any]] = set()  # the service calls in flight
        self._done: asyncio.Future[int] | None = None
        self._attached = False
        #: The agents with `worktree = true`: their folder is known once their worktree is made.
        self.worktrees = Worktrees(self)
        self.asks = Asks(self)
        #: The clients of the server this console is attached to, as it last said (0: not known yet),
        #: and how many `clients:changed` have come: a count asked for is older than one that came since.
        self.clients = 0
        self._clients_changes = 0
        #: The user left the server it is attached to running (Ctrl-Q, detach).
        self.detached = False
        #: What the plugins offer to do (`DeckService.Actions()`, in the snapshot): the menu's (Ctrl-P).
        self.actions = Actions(self)
        self._build()

    # -- layout ----------------------------------------------------------------------------

    def _build(self) -> None:
        s = self.strings
        self.panel = AgentsPanel(s, self.select, self.agent_action, self.server_name)
        self.conversation = ConversationView(s)
        self.conversation.renderer.subagents = lambda: self.model.subagents
        self.conversation.on_toggled = self.schedule
        self.logs_view = LogsView(s)
        self.config_view = ConfigView(s, self.choose_config, self.open_config)
        self.diff_view = DiffView(s, self.worktrees.key)
        #: What an action gave, in the conversation's place: text or a table, or a diff.
        self.result_view = ResultView(s)
        self.result_diff = DiffView(s, lambda key: None)
        self.result: ResultView | DiffView = self.result_view
        #: The conversation, or the view shown in its place.
        self.main: urwid.WidgetPlaceholder[ConversationView | LogsView | ConfigView | DiffView | ResultView]
        self.main = urwid.WidgetPlaceholder(self.conversation)
        self.lowered = Lowered(self.main)  # below an ask's dialog while one is open
        self.columns = urwid.Columns([(panel_width(80), self.panel), self.lowered], focus_column=1)
        self.edit = urwid.Edit(multiline=True)
        self.input_box = LineBox(self.edit, title="", title_align="left")
        self.banner = urwid.AttrMap(Text(""), "config error")  # in the footer while the config is broken
        self.status = Text("")  # notices and waiting asks, in the status bar while there are any
        quit_hint = "hint_detach" if self.client.attached else "hint_quit"  # attached, Ctrl-Q leaves the server on
        self.hint_bar = HintBar([(s(quit_hint if key == "hint_quit" else key), rank) for key, rank in HINTS])
        self.status_bar = urwid.Pile([self.hint_bar])
        self.status_line = urwid.AttrMap(self.status_bar, "status bar")
        self.footer = urwid.Pile([self.input_box, self.status_line], focus_item=0)
        self.frame: urwid.Frame[urwid.Columns, None, urwid.Pile]
        self.frame = urwid.Frame(self.columns, footer=self.footer, focus_part="footer")
        self.root = Root(self, self.frame)

    def fit(self, cols: int) -> None:
        """Size the agents panel for a screen `cols` wide."""
        width = panel_width(cols)
        if self.columns.contents[0][1] != self.columns.options("given", width):
            self.columns.contents[0] = (self.panel, self.columns.options("given", width))

    def conversation_area(self, cols: int, rows: int) -> tuple[int, int, int]:
        """Where the conversation (or the view in its place) is: its first column, its width, its rows."""
        left = panel_width(cols)
        return left, cols - left, max(1, rows - self.footer.rows((cols,)))

    # -- running ---------------------------------------------------------------------------

    def load(self, snapshot: dict[str, Any], fresh: bool = False) -> None:
        """Agents, conversations and pending asks as a snapshot of the deck has them. `fresh` (or
        another config file): start afresh, else agents already shown keep their logs and the notices said on them."""
        config = snapshot["config"]
        path = str(config.get("path") or "")
        if fresh or path != self._config_path:
            self.model = Model()
            self._config_path = path
        self.model.load(snapshot)
        self.actions.load(snapshot.get("actions"))
        if self.selected not in self.model.agents:
            self.selected = next(iter(self.model.agents), "")
        problems = [*(config.get("problems") or []), *(config.get("warnings") or [])]
        self.config_problem = config_problem(path, problems, self.strings)
        self.refresh()
        self.worktrees.load()

    async def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Show the deck as it is and follow its events, on `loop`."""
        self._loop = loop
        await self.client.follow(self.on_event, self.load)
        self._attached = True
        if self.client.attached:
            self.count_clients()

    def count_clients(self) -> None:
        """Ask the server how many clients it has; `clients:changed` events keep the count after that."""
        changes = self._clients_changes

        def counted(clients: list[Any]) -> None:
            if self._clients_changes == changes:
                self.clients = len(clients)

        self.spawn(self.client.call("DeckService.Clients"), counted)

    def reload(self, fresh: bool = False) -> None:
        """Take the deck's state again (its config changed, or was opened again) and follow on from there.

        In a task of its own, never at once: it is asked while an event is delivered, and it
        changes who listens."""
        assert self._loop is not None
        task = self._loop.create_task(self._reload(fresh))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reload(self, fresh: bool) -> None:
        async with self._reloading:
            if not self._attached:
                return
            self.client.unsubscribe(self.on_event)
            self._attached = False
            try:
                await self.client.follow(self.on_event, lambda snapshot: self.load(snapshot, fresh))
            except Exception as exc:  # the console follows what comes, at least
                if not isinstance(exc, ServiceError):
                    log.exception("reload failed")
                self.client.subscribe(self.on_event)
                self.say(str(exc))
            self._attached = True

    def detach(self) -> None:
        """Stop following events; cancel the timers and the service calls in flight."""
        if self._attached:
            self.client.unsubscribe(self.on_event)
            self._attached = False
        for handle in (self._frame_handle, self._spin_handle):
            if handle is not None:
                handle.cancel()
        self._frame_handle = self._spin_handle = None
        for task in list(self._tasks):
            task.cancel()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        started = time.monotonic()
        await self.attach(loop)
        screen = self._screen or urwid.display.raw.Screen(bracketed_paste_mode=True)
        self.loop = CountingLoop(
            self.root, self.palette, screen=screen, event_loop=urwid.AsyncioEventLoop(loop=loop), handle_mouse=True,
            input_filter=self._input_filter,
        )  # fmt: skip
        # While the console owns the screen, deck's problems are notices in its status bar, not lines over it.
        def say(line: str) -> None:
            loop.call_soon_threadsafe(self.say, line)

        with TerminalLog.diverted(say):
            self.loop.start()
            try:
                # Ctrl-C, Ctrl-\ and Ctrl-S/Ctrl-Q become keys: deck never quits or freezes by accident.
                screen.tty_signal_keys(intr="undefined", quit="undefined", start="undefined", stop="undefined")
                return await self._done
            finally:
                self.detach()
                self.loop.stop()  # leaves the alternate screen and restores the terminal modes
                self._write_stats(time.monotonic() - started)

    def _write_stats(self, seconds: float) -> None:
        path = os.environ.get(STATS_ENV)
        if path and self.loop is not None:
            with open(path, "w") as f:
                json.dump({"draws": len(self.loop.draw_times), "frames": self.frames, "seconds": seconds,
                           "drawTimes": self.loop.draw_times}, f)  # fmt: skip

    def finish(self, code: int = 0) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(code)

    def spawn(self, awaitable: Awaitable[Any], then: Any = None) -> None:
        """Run a service call; its ServiceError becomes a notice, its result goes to `then`.

        Started at once: a call already answered (most are, on a deck in this process) is shown
        at once, in the frame being drawn."""

        async def call() -> None:
            try:
                result = await awaitable
            except ServiceError as exc:
                self.say(str(exc))
            except Exception as exc:  # a failing call must not take the console down
                log.exception("service call failed")
                self.say(f"{type(exc).__name__}: {exc}")
            else:
                if then is not None:
                    then(result)
            self.schedule()

        task = start(call())
        if not task.done():
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # -- events and frames -------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if isinstance(event, AgentStateChanged):
            self._crashed(event)
            self._started(event)
            self._redefined(event)
        self.model.apply(event)
        self.dispatch(event)
        self.schedule()

    def _started(self, e: AgentStateChanged) -> None:
        """An agent with a worktree is ready: its worktree is made now, and its folder is known."""
        agent = self.model.agents.get(e.agent)
        if agent is not None and e.state == "ready" and agent.state == "starting" and e.agent in self.worktrees.agents:
            self.worktrees.load()

    def _redefined(self, e: AgentStateChanged) -> None:
        """An agent takes the config's changes (it started again, or stopped): the sandbox it runs in,
        or will, may be another one now."""
        agent = self.model.agents.get(e.agent)
        if agent is not None and agent.outdated and not e.outdated:
            self.spawn(self.client.call("AgentService.List"), self.model.set_sandboxes)

    def _crashed(self, e: AgentStateChanged) -> None:
        """An agent that was running ends in error (before the model has it): it crashed, and the
        status line points to its log (F2), where its last lines on stderr are."""
        agent = self.model.agents.get(e.agent)
        if agent is not None and e.state == "error" and agent.state in ("ready", "busy"):
            self.say(self.strings("crashed", agent=agent.title))

    @handles(ConfigChanged)
    def _config_changed(self, e: ConfigChanged) -> None:
        self.config_problem = config_problem(str(e.path or ""), list(e.problems or []), self.strings)
        self.reload()  # the agents may have changed; another file starts afresh
        if self.view == "config":
            self.show_config()

    @handles(ConversationReset)
    def _conversation_reset(self, e: ConversationReset) -> None:
        self.reload()  # no message events say what went or came back: the snapshot does

    @handles(ConversationChanged)
    def _conversation_changed(self, e: ConversationChanged) -> None:
        if e.field == "cut":  # earlier messages were let go to keep the conversation under its cap
            self.reload()

    @handles(PermissionRequested, QuestionRequested)
    def _asked(self, e: PermissionRequested | QuestionRequested) -> None:
        if e.agent == self.selected and not self.dialog_kind:
            self.asks.asked(str(e.id))

    @handles(Notice)
    def _notice(self, e: Notice) -> None:
        """What a plugin tells the user, as it words it: said in the status line in its level's colour;
        a sticky one on an agent stays on it in the panel instead (the model keeps it), and one taken
        back says nothing. An alert (`bell`, `desktop`) is rung instead: the bell, and a terminal
        notification, through the screen."""
        if e.bell or e.desktop:
            self._alert(e.agent or "", e.text, e.bell is True, e.desktop is True)
            return
        agent = self.model.agents.get(e.agent) if e.agent is not None else None
        if not e.text or (e.sticky and agent is not None):
            return
        self.say(f"{agent.title}: {e.text}" if agent is not None else e.text, NOTICE_ATTRS.get(e.level, "notice"))

    def _alert(self, agent: str, text: str, bell: bool, desktop: bool) -> None:
        sound = alert(agent, text, bell, desktop)
        screen = self.loop.screen if self.loop is not None else None
        write, flush = getattr(screen, "write", None), getattr(screen, "flush", None)
        if sound and callable(write) and callable(flush):  # a real terminal's screen (raw_display)
            write(sound)
            flush()

    @handles(ClientsChanged)
    def _clients_changed(self, e: ClientsChanged) -> None:
        self.clients = e.clients
        self._clients_changes += 1

    @handles(AgentLog)
    def _agent_log(self, e: AgentLog) -> None:
        if self.view == "logs" and e.agent == self.logs_view.agent:
            self._live_logs.append(str(e.line))

    def schedule(self) -> None:
        """Draw soon: at the next frame, at most FPS frames a second."""
        if self._frame_handle is not None or self._loop is None:
            return
        delay = max(0.0, self._last_frame + 1 / FPS - self._loop.time())
        self._frame_handle = self._loop.call_later(delay, self._frame)

    def _frame(self) -> None:
        self._frame_handle = None
        self._last_frame = self._loop.time() if self._loop else 0.0
        self.frames += 1
        try:
            self.refresh()
        except Exception:
            log.exception("refresh failed")
        if self.loop is not None and self.loop.screen.started:
            self.loop.draw_screen()

    def _spin(self) -> None:
        self._spin_handle = None
        self.spin_frame += 1
        for agent in self.model.agents.values():
            if agent.working:
                self.model.changes.agents.add(agent.name)
        self.schedule()

    def refresh(self) -> None:
        """Turn the model's changes into widgets."""
        changes = self.model.take_changes()
        agents = self.model.agents
        if changes.roster:
            if self.selected not in agents:
                self.selected = next(iter(agents), "")
            self.panel.set_roster(list(agents))
            changes.agents |= set(agents)
            if self.selected:
                self.conversation.show(agents[self.selected])
        for number, agent in enumerate(agents.values(), 1):
            if agent.name in changes.agents:
                self.panel.update(agent, number, agent.name == self.selected, self.spin_frame)
        current = agents.get(self.selected)
        if current is not None and not changes.roster:
            ids = changes.messages.get(self.selected)
            if ids:
                self.conversation.rebuild(ids)
            if self.selected in changes.side or self.selected in changes.agents:
                self.conversation.update_side()
        if self._live_logs:
            self.logs_view.append(self._live_logs)
            self._live_logs = []
        if changes.folders:  # a permission request's paths are shown relative to its agent's folder
            changes.asks |= self.asks.folders_changed(set(changes.folders))
        if changes.asks and self.dialog_kind == "ask":
            self.asks.open()
        self._update_footer(current)
        if self._spin_handle is None and self._loop is not None and any(a.working for a in agents.values()):
            self._spin_handle = self._loop.call_later(SPIN_EVERY, self._spin)

    def _update_footer(self, current: Any) -> None:
        s = self.strings
        if current is not None:
            key = "input_title_queued" if current.queued else "input_title"
            title = s(key, agent=current.title, n=current.queued)
            if self.input_box.title_widget.text.strip() != title:
                self.input_box.set_title(title)
        parts: list[Any] = []
        if self.notice and (self._loop is None or self._loop.time() < self.notice_until):
            parts += [(self.notice_attr, f" {self.notice} "), " "]
        else:
            self.notice = ""
        perms = sum(a.waiting("permission") for a in self.model.agents.values())
        questions = sum(a.waiting("question") for a in self.model.agents.values())
        if perms or questions:
            if perms and questions:
                hint = s("hints_asks", perms=s("n_perms", n=perms), questions=s("n_questions", n=questions))
            else:
                hint = s("hints_perm", n=perms) if perms else s("hints_question", n=questions)
            parts += [("needs input", f" {hint} ")]
        if self.client.attached and self.clients:
            parts += [" " if parts else "", f" {s('clients', n=self.clients)} "]
        self.status.set_text(parts)
        _show(self.status_bar, [self.status] if parts else [], self.hint_bar)
        self.banner.original_widget.set_text(f" {self.config_problem} ")
        _show(self.footer, [self.banner] if self.config_problem else [], self.input_box, self.status_line)

    @property
    def server_name(self) -> str:
        """The name of the server this console is attached to ("" when it is not, or it is not known)."""
        return str(getattr(self.client, "name", "") or "") if self.client.attached else ""

    def say(self, text: str, attr: str = "notice") -> None:
        """A one-line notice in the status bar for a few seconds, in `attr`'s colours."""
        self.notice, self.notice_attr = text, attr
        self.notice_until = (self._loop.time() if self._loop else 0.0) + NOTICE_FOR
        if self._loop is not None:
            self._loop.call_later(NOTICE_FOR + 0.05, self.schedule)
        self._update_footer(self.model.agents.get(self.selected))
        self.schedule()

    # -- keys --------------------------------------------------------------------------------

    def _input_filter(self, keys: list[Any], raw: list[int]) -> list[Any]:
        out = []
        for key in keys:
            if key == "begin paste":
                self.pasting = True
            elif key == "end paste":
                self.pasting = False
            elif self.pasting and key == "enter" and not self.dialog_kind and self.view == "chat":
                self.edit.insert_text("\n")
            elif self.pasting and key == "enter" and self.dialog_kind:
                continue  # a pasted line break never answers a dialog
            else:
                out.append(key)
        return out

    def global_key(self, key: str) -> bool:
        """Keys that act wherever the focus is (KEYS); True when handled."""
        return run_binding(IN_DIALOGS if self.dialog_kind else KEYS, self, key)

    def escape(self) -> None:
        """Esc: back to the conversation from a view; in it, cancel the selected agent's turn."""
        if self.view != "chat":
            self.show_view("chat")
        else:
            self.cancel_turn()

    def toggle_view(self, view: str) -> None:
        """F2, F3, F9: `view`, or back to the conversation when it is shown."""
        self.show_view("chat" if self.view == view else view)

    def _main_size(self) -> tuple[int, int]:
        cols, rows = self.loop.screen.get_cols_rows() if self.loop is not None else (120, 40)
        _left, width, body = self.conversation_area(cols, rows)
        return (max(1, width), body)

    def keep_focus(self) -> None:
        """Typing goes to the input in the conversation view, to the view otherwise."""
        self.frame.focus_position = "footer" if self.view == "chat" else "body"
        self.columns.focus_position = 1

    # -- agents ------------------------------------------------------------------------------

    def select(self, name: str) -> None:
        if name not in self.model.agents:
            return
        previous, self.selected = self.selected, name
        for number, agent in enumerate(self.model.agents.values(), 1):
            if agent.name in (previous, name):
                self.panel.update(agent, number, agent.name == name, self.spin_frame)
        self.conversation.show(self.model.agents[name])
        if self.view == "logs":
            self.show_logs()
        elif self.view == "diff":
            self.worktrees.show_diff()
        self._update_footer(self.model.agents[name])
        self.keep_focus()
        self.schedule()

    def select_by_offset(self, step: int) -> None:
        names = list(self.model.agents)
        if names:
            at = names.index(self.selected) if self.selected in names else 0
            self.select(names[(at + step) % len(names)])

    def select_by_number(self, number: int) -> None:
        names = list(self.model.agents)
        if 1 <= number <= len(names):
            self.select(names[number - 1])

    def agent_action(self, action: str) -> None:
        if not self.selected:
            return
        method = {"start": "AgentService.Start", "stop": "AgentService.Stop", "restart": "AgentService.Restart"}[action]
        self.spawn(self.client.call(method, {"name": self.selected}))

    def send(self) -> None:
        """Send what was typed; the input is cleared at once, and given back if the message is refused."""
        text = self.edit.edit_text
        if not text.strip() or not self.selected:
            return
        self.edit.set_edit_text("")
        call = self.client.call("ChatService.Send", {"agent": self.selected, "text": text})

        async def sending() -> None:
            try:
                await call
            except ServiceError:
                if not self.edit.edit_text:
                    self.edit.set_edit_text(text)
                    self.edit.set_edit_pos(len(text))
                raise

        self.spawn(sending())

    def complete_command(self) -> None:
        """Tab after `/` in the input: the selected agent's slash command that begins so, completed;
        several: the longest common start, and the list in the status line."""
        agent = self.model.agents.get(self.selected) if self.selected else None
        typed = self.edit.edit_text[1:]
        names = sorted(n for n in (agent.commands if agent else {}) if n.startswith(typed))
        if not names:
            self.say(self.strings("no_commands", agent=agent.title if agent else ""))
            return
        common = os.path.commonprefix(names)
        done = f"/{common} " if len(names) == 1 else f"/{common}"
        self.edit.set_edit_text(done)
        self.edit.set_edit_pos(len(done))
        if len(names) > 1:
            self.say(one_line("  ".join(f"/{n}" for n in names), 400))
        elif agent is not None:  # the agent's words: one line of printable characters
            self.say(one_line(f"/{names[0]}: {agent.commands[names[0]]}", 400))

    def new_conversation(self) -> None:
        """Ctrl-N: a fresh conversation for the selected agent (the old one stays in the history)."""
        if not self.selected:
            return
        title = self.model.agents[self.selected].title
        self.spawn(
            self.client.call("ChatService.NewConversation", {"agent": self.selected}),
            lambda _result: self.say(self.strings("new_conversation", agent=title)),
        )

    def _last_queued(self) -> Any:
        """The selected agent's last message that waits to be sent, if any."""
        agent = self.model.agents.get(self.selected) if self.selected else None
        if agent is None:
            return None
        return next((m for m in reversed(agent.messages) if m.role == "user" and m.queued), None)

    def take_back_queued(self) -> None:
        """↑ on an empty input: the last queued message comes out of the queue into the input, to be
        edited and sent again (or dropped)."""
        message = self._last_queued()
        if message is None or not self.selected:
            return
        text = "".join(p.text for p in message.parts if p.type == "text")
        title = self.model.agents[self.selected].title

        def taken(_result: Any) -> None:
            if not self.edit.edit_text:
                self.edit.set_edit_text(text)
                self.edit.set_edit_pos(len(text))
            self.say(self.strings("unqueued", agent=title))

        self.spawn(self.client.call("ChatService.Unqueue", {"agent": self.selected, "id": message.id}), taken)

    def cancel_turn(self) -> None:
        if not self.selected:
            return
        title = self.model.agents[self.selected].title

        def cancelled(result: dict[str, Any]) -> None:
            busy = result.get("cancelled") or result.get("abandoned")
            self.say(self.strings("cancelled_turn" if busy else "nothing_to_cancel", agent=title))

        self.spawn(self.client.call("ChatService.Cancel", {"agent": self.selected}), cancelled)

    # -- views -------------------------------------------------------------------------------

    def show_view(self, view: str) -> None:
        self.view = view
        if view == "logs":
            self.show_logs()
            self.main.original_widget = self.logs_view
        elif view == "config":
            self.show_config()
            self.main.original_widget = self.config_view
        elif view == "diff":
            self.worktrees.show_diff()
            self.main.original_widget = self.diff_view
        elif view == "result":
            self.main.original_widget = self.result
        else:
            self.main.original_widget = self.conversation
        self.keep_focus()
        self.schedule()

    def show_logs(self) -> None:
        agent = self.model.agents.get(self.selected)
        if agent is None:
            return
        self._live_logs = []
        self.logs_view.show(agent.name, agent.title, agent.logs)
        self.spawn(
            self.client.call("AgentService.Logs", {"name": agent.name}),
            lambda lines: self._logs_loaded(agent.name, agent.title, lines),
        )

    def _logs_loaded(self, name: str, title: str, lines: list[str]) -> None:
        if self.view == "logs" and self.logs_view.agent == name:
            self._live_logs = []
            self.logs_view.show(name, title, lines)

    def show_config(self) -> None:
        async def fetch() -> tuple[dict[str, Any], list[str]]:
            return await self.client.call("ConfigService.Current"), await self.client.call("ConfigService.Recent")

        self.spawn(fetch(), lambda result: self.config_view.show(*result))

    # Opening a config emits config:changed, which reloads the console (_config_changed).

    def choose_config(self) -> None:
        if self.client.attached:  # a server has no screen: the picker is this console's, the file the server's
            self.spawn(self.choose_file(), lambda chosen: self.open_config(chosen) if chosen else None)
            return
        self.spawn(self.client.call("ConfigService.Choose"), self._opened)  # "" when the picker was cancelled

    def open_config(self, path: str) -> None:
        opening = self.client.call("ConfigService.Open", {"path": path})
        self.spawn(opening, lambda current: self._opened(current["path"]))

    def _opened(self, path: str) -> None:
        if path:
            self.reload(fresh=True)  # Open forgot every conversation, even when the same file was opened again
            self.say(self.strings("opened", path=path))
            if self.view == "config":  # once Open is done, the recent files have the file opened first
                self.show_config()

    # -- dialogs -----------------------------------------------------------------------------

    def show_dialog(self, kind: str, dialog: urwid.Widget, width: int = 0) -> None:
        """`dialog` in the conversation's place: centred in it, `width` at most and as tall as its
        content (`width` 0: all of it); an ask's over its top, as small as it can be."""
        self.dialog_kind = kind
        self.shown_dialog = dialog
        if isinstance(dialog, (PermissionDialog, QuestionDialog)):
            self.root.original_widget = OverConversation(dialog, self.frame, self.conversation_area, self.lowered)
        else:
            self.lowered.lower(0)
            self.root.original_widget = InConversation(dialog, self.frame, self.conversation_area, width)
        self.schedule()

    def close_dialog(self) -> None:
        self.dialog_kind = ""
        self.shown_dialog = None
        self.lowered.lower(0)
        self.root.original_widget = self.frame
        self.keep_focus()
        self.schedule()

    def ask_quit(self) -> None:
        busy = [a.title for a in self.model.agents.values() if a.working]
        if self.client.attached:
            self.ask_leave(busy)
            return
        if not busy:
            self.finish(0)
            return
        text = self.strings("quit_busy", n=len(busy), names=", ".join(busy))

        def answered(yes: bool) -> None:
            self.close_dialog()
            if yes:
                self.finish(0)

        self.show_dialog("quit", ConfirmDialog(self.strings, self.strings("quit_title"), text, answered), DIALOG_WIDTH)

    def ask_leave(self, busy: list[str]) -> None:
        """Attached to a server: detach (the default: the server and its agents go on), stop the
        server, or stay."""
        s = self.strings
        text = s("leave_text") + ("\n\n" + s("leave_busy", n=len(busy), names=", ".join(busy)) if busy else "")
        choices = [("d", s("leave_detach"), "detach"), ("s", s("leave_shutdown"), "shutdown"), ("esc", s("leave_stay"), "")]

        def answered(choice: str) -> None:
            self.close_dialog()
            if choice == "detach":
                self.detached = True
                self.finish(0)
            elif choice == "shutdown":
                self.spawn(self.client.call("DeckService.Shutdown"), lambda _stopped: self.finish(0))

        self.show_dialog("quit", ChoiceDialog(s("leave_title"), text, choices, answered), DIALOG_WIDTH)

    def open_settings(self) -> None:
        """Ctrl-O: the selected agent's settings (its config options: model, mode, thought level…; its
        session modes where no option stands for them), one picked, then its value."""
        if not self.selected:
            return
        name = self.selected
        title = self.model.agents[name].title
        self.spawn(self.client.call("ChatService.Conversation", {"agent": name}), lambda conv: self._settings(name, title, conv))

    def _settings(self, name: str, title: str, conv: dict[str, Any]) -> None:
        s = self.strings
        settings = setting_choices(conv)
        if not settings:
            self.say(s("settings_none", agent=title))
            return
        choices = [numbered(n, one_line(label, 60)) for n, (label, _setting) in enumerate(settings, 1)]
        choices.append(("esc", s("leave_stay"), ""))

        def picked(index: str) -> None:
            self.close_dialog()
            if index:
                self._setting_values(name, title, settings[int(index)][1])

        self.show_dialog("settings", ChoiceDialog(s("settings_title", agent=title), s("settings_text"), choices, picked), DIALOG_WIDTH)

    def _setting_values(self, name: str, title: str, setting: dict[str, Any]) -> None:
        values = setting["values"]
        choices = [numbered(n, one_line(label, 60)) for n, (_value, label) in enumerate(values, 1)]
        choices.append(("esc", self.strings("leave_stay"), ""))
        current = next((str(i) for i, (value, _label) in enumerate(values) if value == setting["current"]), None)

        def picked(index: str) -> None:
            self.close_dialog()
            if not index:
                return
            value = values[int(index)][0]
            if setting["id"] is None:
                call = self.client.call("ChatService.SetMode", {"agent": name, "modeId": value})
            else:
                call = self.client.call("ChatService.SetConfigOption", {"agent": name, "configId": setting["id"], "value": value})
            self.spawn(call, lambda _done: self.say(self.strings("setting_set", agent=title, setting=setting["name"], value=str(values[int(index)][1]))))

        dialog = ChoiceDialog(one_line(f"{title} · {setting['name']}", 60), self.strings("settings_value"), choices, picked, default=current)
        self.show_dialog("settings", dialog, DIALOG_WIDTH)

    def help_sections(self) -> list[tuple[str, list[tuple[str, str]]]]:
        """What the help (F1) lists: the keys of each table the handling reads, then what the agents
        panel's marks mean."""
        s = self.strings
        does = {"key_quit": "key_detach"} if self.client.attached else {}

        def rows(table: list[Any]) -> list[tuple[str, str]]:
            return [(b.shown or keys_label(b.keys, s.key_names), s(does.get(b.does, b.does))) for b in table]

        worktree = [(key, s(f"key_worktree_{what}")) for key, what in WORKTREE_ACTIONS.items()]
        legend = [(s(mark) if mark in s.table else mark, s(meaning)) for mark, meaning in LEGEND]
        return [(s("help_console"), rows(KEYS)), (s("help_permission"), rows(PERMISSION_KEYS)),
                (s("help_question"), rows(QUESTION_KEYS)), (s("help_worktree"), worktree),
                (s("help_actions"), rows(ACTIONS_KEYS) + rows(ACTION_FORM_KEYS)), (s("help_panel"), legend)]  # fmt: skip

    def show_help(self) -> None:
        """F1: every key, in the conversation's place; Esc closes it."""
        self.show_dialog("help", HelpDialog(self.strings("help_title"), self.help_sections(), self.close_dialog))

    def open_history(self) -> None:
        """The selected agent's past conversations and a search over every agent's (`history.py`)."""
        agent = self.model.agents.get(self.selected)
        if agent is not None:
            dialog = HistoryDialog(self.strings, self.client, self.spawn, agent.name, agent.title, self.reopen, self.close_dialog)
            self.show_dialog("history", dialog)

    def reopen(self, conversation_id: str) -> None:
        """A stored conversation made its agent's current one again; the console shows that agent."""
        self.close_dialog()

        def opened(result: dict[str, Any]) -> None:
            agent = self.model.agents.get(str(result.get("agent")))
            if agent is not None:
                self.select(agent.name)
                self.say(self.strings("history_reopened", agent=agent.title))

        self.spawn(self.client.call("ChatService.OpenConversation", {"id": conversation_id}), opened)

    def choose_file(self) -> asyncio.Future[str]:
        """The file picker; a future of the chosen path ("" if cancelled)."""
        assert self._loop is not None
        future: asyncio.Future[str] = self._loop.create_future()
        start = Path(self._config_path).parent if self._config_path else Path.cwd()

        def done(path: str) -> None:
            self.close_dialog()
            if not future.done():
                future.set_result(path)

        self.show_dialog("picker", FilePicker(self.strings, start, done))
        return future


def _in_chat(app: ConsoleApp, key: str) -> bool:
    return app.view == "chat"


def _in_view(app: ConsoleApp, key: str) -> bool:
    return app.view != "chat"


def _typing_command(app: ConsoleApp, key: str) -> bool:
    text = app.edit.edit_text
    return app.view == "chat" and text.startswith("/") and " " not in text


def _can_take_back(app: ConsoleApp, key: str) -> bool:
    return app.view == "chat" and not app.edit.edit_text and app._last_queued() is not None


#: The console's keys wherever the focus is, with no dialog open (the first that applies acts):
#: what `ConsoleApp.global_key` does, and what the help (F1) lists, in this order.
KEYS: list[Binding[ConsoleApp]] = [
    Binding(("f1",), "key_help", lambda app, key: app.show_help()),
    Binding(("?",), "key_help_view", lambda app, key: app.show_help(), _in_view),
    Binding(("enter",), "key_send", lambda app, key: app.send(), _in_chat),
    Binding(("meta enter",), "key_newline", lambda app, key: app.edit.insert_text("\n"), _in_chat),
    Binding(("up",), "key_unqueue", lambda app, key: app.take_back_queued(), _can_take_back),
    Binding(("tab",), "key_complete", lambda app, key: app.complete_command(), _typing_command),
    Binding(("tab",), "key_next_agent", lambda app, key: app.select_by_offset(1)),
    Binding(("shift tab",), "key_previous_agent", lambda app, key: app.select_by_offset(-1)),
    Binding(tuple(f"meta {n}" for n in range(1, 10)), "key_agent_number", lambda app, key: app.select_by_number(int(key[-1]))),
    Binding(tuple(str(n) for n in range(1, 10)), "key_agent_digit", lambda app, key: app.select_by_number(int(key)), _in_view),
    Binding(("ctrl n",), "key_new", lambda app, key: app.new_conversation()),
    Binding(("ctrl o",), "key_settings", lambda app, key: app.open_settings()),
    Binding(("f5",), "key_start", lambda app, key: app.agent_action("start")),
    Binding(("f6",), "key_stop", lambda app, key: app.agent_action("stop")),
    Binding(("f7",), "key_restart", lambda app, key: app.agent_action("restart")),
    Binding(("esc",), "key_esc", lambda app, key: app.escape()),
    Binding(("page up", "page down"), "key_scroll", lambda app, key: app.conversation.scroll(app._main_size(), key), _in_chat),
    Binding(("ctrl t",), "key_thoughts", lambda app, key: app.conversation.toggle_all("thoughts")),
    Binding(("ctrl e",), "key_diffs", lambda app, key: app.conversation.toggle_all("diffs")),
    Binding(("ctrl f",), "key_subagents", lambda app, key: app.conversation.toggle_all("children")),
    Binding(("f4",), "key_asks", lambda app, key: app.asks.open_oldest()),
    Binding(("f2",), "key_logs", lambda app, key: app.toggle_view("logs")),
    Binding(("f3",), "key_config", lambda app, key: app.toggle_view("config")),
    Binding(("f8",), "key_history", lambda app, key: app.open_history()),
    Binding(("f9",), "key_worktree", lambda app, key: app.toggle_view("diff")),
    Binding(("ctrl p",), "key_plugin_actions", lambda app, key: app.actions.open()),
    Binding(("ctrl q", "f10"), "key_quit", lambda app, key: app.ask_quit()),
    Binding(("ctrl c", "meta ctrl c"), "key_ctrl_c", lambda app, key: app.say(app.strings("ctrl_c")), shown="Ctrl-C"),
]  # fmt: skip
#: Those of KEYS that act while a dialog is open too (a dialog has every other key).
IN_DIALOGS = [binding for binding in KEYS if binding.does == "key_ctrl_c"]
#: What the agents panel's marks mean, for the help: (the mark, or the string key of it; the string key of its meaning).
LEGEND = [("cost_unknown_short", "legend_cost"), ("⟳", "legend_outdated"), ("!", "legend_needs_input"),
          ("± ⚠", "legend_files"), ("↔", "legend_talking"), (SANDBOX_MARK, "legend_sandbox")]  # fmt: skip
#: The colours of a plugin's notice in the status line, by its level.
NOTICE_ATTRS = {"info": "notice info", "warning": "notice warning", "error": "notice error"}


def _show(pile: urwid.Pile, first: list[urwid.Widget], *rest: urwid.Widget) -> None:
    """Make `pile` hold `first` (a line shown only at times), then `rest`; nothing changes when it already does."""
    widgets: list[urwid.AbstractWidget] = [*first, *rest]
    if [w for w, _options in pile.contents] != widgets:
        focus = pile.focus
        pile.contents[:] = [(w, pile.options()) for w in widgets]
        if focus in widgets:
            pile.focus_position = widgets.index(focus)


def numbered(n: int, label: str) -> tuple[str, str, str]:
    """The `n`th answer of a picker (from 1), as a ChoiceDialog's choice: its number picks it and is
    written before it (1 to 9; the others are picked with the arrows and Enter), its value `n - 1`."""
    key = str(n) if n < 10 else ""
    return key, f"{key:<3}{label}", str(n - 1)


def setting_choices(conv: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """What the settings picker offers for a conversation (`ChatService.Conversation`): each config
    option as `(label, {id, name, current, values: [(value, label)]})`, and the session modes (id
    None) where no option of category mode stands for them."""
    out: list[tuple[str, dict[str, Any]]] = []
    options = [o for o in conv.get("configOptions") or [] if isinstance(o, dict) and isinstance(o.get("id"), str)]
    for option in options:
        name = str(option.get("name") or option["id"])
        current = option.get("currentValue")
        if option.get("type") == "boolean":
            values: list[tuple[Any, str]] = [(True, "on"), (False, "off")]
        else:
            values = []
            for item in option.get("options") or []:
                if isinstance(item, dict):
                    inner = item.get("options") if "group" in item else [item]
                    values += [(v.get("value"), str(v.get("name") or v.get("value"))) for v in inner or [] if isinstance(v, dict)]
        shown = next((label for value, label in values if value == current), str(current))
        out.append((f"{name}: {shown}", {"id": option["id"], "name": name, "current": current, "values": values}))
    modes = conv.get("modes") or {}
    available = [m for m in modes.get("availableModes") or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]
    if available and not any(o.get("category") == "mode" for o in options):
        values = [(m["id"], str(m.get("name") or m["id"])) for m in available]
        current = modes.get("currentModeId")
        shown = next((label for value, label in values if value == current), str(current))
        out.append((f"Mode: {shown}", {"id": None, "name": "Mode", "current": current, "values": values}))
    return out
