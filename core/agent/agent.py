"""One configured agent at run time: its process, ACP connection, sessions and state."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from deck._version import __version__
from deck.acp.connection import PROTOCOL_VERSION, Connection
from deck.agent import auth, inuse, listing, remote, sandbox, terminals
from deck.agent.early import EarlyUpdates
from deck.agent.requests import AgentRequests
from deck.agent.session import CONVERSATION, TOOL_UPDATES, Session, SessionSink
from deck.config.models import AgentConfig
from deck.errors import AcpError, ConnectionClosed, ServiceError, StartFailed
from deck.events import AgentLog, AgentStateChanged
from deck.proc.supervisor import Process, SpawnError
from deck.proc.tasks import TaskGroup
from deck.states import AgentState, transition

if TYPE_CHECKING:
    from deck.agent.host import Host, Replay

log = logging.getLogger(__name__)

T = TypeVar("T")

LOG_LINES = 200
STDERR_TAIL = 10
#: Config keys that only change how an agent is shown: a change to them needs no restart.
DISPLAY_ONLY = ("title", "icon", "description")
#: How long an agent that closed its stdout has to exit before it counts as having
#: closed its output while running (an exiting agent closes its stdout first).
STDOUT_CLOSED_GRACE = 1.0
#: What the note says when a new session serves a conversation that had one, after why.
FORGETS = "it starts a new one and does not remember what came before."
#: How long an agent has to answer `session/close` before deck stops it anyway, in seconds.
CLOSE_TIMEOUT = 2.0


class Agent:
    def __init__(self, deck: Host, name: str, config: AgentConfig) -> None:
        self.deck = deck
        self.name = name
        self.config = config
        self.state = AgentState.STOPPED
        self.error: str | None = None
        self.outdated = False
        self.pending_config: AgentConfig | None = None
        #: Removed from the config (or another config was opened): it may only stop.
        self.retired = False
        self.logs: deque[str] = deque(maxlen=LOG_LINES)
        self.process: Process | None = None
        self.conn: Connection | None = None
        self.init_result: dict[str, Any] = {}
        #: The session of its conversation (opened in the handshake; the last one once it stopped).
        self.session: Session | None = None
        #: Every session attached on the current connection, by id: where updates and requests go.
        self.sessions: dict[str, Session] = {}
        #: The current connection's tasks (its request handlers, its exit watch): closed when it ends.
        self.tasks = TaskGroup(f"agent {name}")
        self.users = 0
        self.last_used = deck.clock()
        #: Updates that came for a session before its session/new reply (early.py).
        self.early = EarlyUpdates(self.log)
        self._detached: deque[str] = deque(maxlen=64)
        self._said_closed: deque[str] = deque(maxlen=64)  # closed sessions whose late update was logged
        self._start_task: asyncio.Task[None] | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self._stop_after_start = False
        self._handshake_task: asyncio.Future[None] | None = None
        self._run_stderr: deque[str] = deque(maxlen=STDERR_TAIL)  # this run's last stderr lines
        self._auth_method: str | None = None
        self._with_session = True  # this start opens the conversation's session (`start(session=False)`)
        self._bare_run_over = asyncio.Event()  # set when a run with no session ends
        self._hook_failures: dict[str, str] = {}  # what the plugins failed to do before this start: plugin → why
        self._exit_watch: asyncio.Task[None] | None = None
        self._why_new = ""  # why the last start could not continue the conversation's earlier session
        #: A session the agent exited during (or closed its output during) resuming or loading it, and
        #: the note that says so: its next start opens a new session rather than try that one again.
        self._broken_session: tuple[str, str] | None = None
        #: (session id, method) while the start resumes or loads a session: a timeout then breaks it.
        self._continuing: tuple[str, str] | None = None
        #: The lock of the session it runs in (inuse.py), for the current run.
        self._held: inuse.Held | None = None
        #: The commands it runs through deck (ACP terminal/*), for the current run.
        self.terminals: terminals.Terminals | None = None
        #: Where this run of the agent works, set by a plugin's `deck_before_start` (its worktree);
        #: None: its config's cwd. Cleared before each start's hooks.
        self.workdir: str | None = None
        #: The sandbox this run is in (`sandbox.py`): what it sees, for its terminals too; None when it is in none.
        self.view: sandbox.View | None = None

    # -- what the outside sees -------------------------------------------------------------

    @property
    def title(self) -> str:
        return self.config.title or self.name

    @property
    def icon(self) -> str:
        return self.config.icon or self.name[:1].upper()

    @property
    def running(self) -> bool:
        return self.state in (AgentState.READY, AgentState.BUSY)

    @property
    def cwd(self) -> str:
        """The folder the agent runs in, opens its sessions in, and is confined to (fs/*)."""
        return self.workdir or self.config.resolved_cwd()

    @property
    def directories(self) -> list[str]:
        """The folders besides its cwd it may read and write through fs/* (`additionalDirectories`)."""
        return self.config.resolved_directories()

    def session_directories(self) -> dict[str, Any]:
        """`additionalDirectories` for its session requests, where it lists the capability (else nothing)."""
        if self.directories and self._session_capability("additionalDirectories"):
            return {"additionalDirectories": self.directories}
        return {}

    @property
    def session_id(self) -> str | None:
        """The id of its conversation's session."""
        return self.session.id if self.session is not None else None

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "icon": self.icon,
            "description": self.config.description,
            "state": self.state.value,
            "error": self.error,
            "outdated": self.outdated,
            "sandbox": self.sandbox_info(),
        }

    def sandbox_info(self) -> dict[str, Any]:
        """`{enabled, network, write}`: the sandbox it runs in (or will, at its next start)."""
        if self.view is not None and self.running:
            return self.view.sandbox.describe(self.view.writable)
        wanted = sandbox.resolve(self.config, self.deck.config.sandbox)
        if wanted is None:
            return {"enabled": False, "network": True, "write": []}
        return wanted.describe([self.cwd, *self.directories, *wanted.write])

    def redefine(self, definition: AgentConfig) -> None:
        """Take the definition the config now gives; `agent:state` says what changed, if anything.

        A change to how it is shown applies at once; any other applies at once to a stopped
        agent, and to a running one at its next start: it is `outdated` until then."""
        if definition == (self.pending_config or self.config):
            return
        shown = {key: getattr(definition, key) for key in DISPLAY_ONLY}
        if self.config.model_copy(update=shown) == definition or self.state in (AgentState.STOPPED, AgentState.ERROR):
            self.config, self.pending_config, self.outdated = definition, None, False
        elif definition == self.config:  # edited back to what it runs with
            self.pending_config, self.outdated = None, False
        else:
            self.pending_config, self.outdated = definition, True
        self.emit_state()

    def retire(self) -> None:
        """Removed from the config, or another config was opened: nothing may start it again."""
        self.retired = True

    def emit_state(self) -> None:
        self.deck.emit(AgentStateChanged(self.name, self.state.value, self.outdated, self.error))

    def log(self, line: str) -> None:
        """A line for the agent's log: its stderr, and deck's own notes about it."""
        self.logs.append(line)
        self.deck.emit(AgentLog(self.name, line))

    # -- use ------------------------------------------------------------------------------

    def acquire(self) -> None:
        """One more user (a turn, an ask): ready → busy."""
        self.users += 1
        self.touch()
        if self.state is AgentState.READY:
            transition(self, AgentState.BUSY)

    def release(self) -> None:
        """One user less: busy → ready when it was the last."""
        self.users = max(0, self.users - 1)
        self.touch()
        if self.users == 0 and self.state is AgentState.BUSY:
            transition(self, AgentState.READY)

    def touch(self) -> None:
        self.last_used = self.deck.clock()

    # -- start ----------------------------------------------------------------------------

    async def start(self, auth_method: str | None = None, *, session: bool = True) -> None:
        """Start the agent if it is not running; raise ServiceError when it cannot start.

        `session=False` stops the handshake after `initialize` (and `authenticate`): the agent runs
        with no session of deck's, for a request about its sessions (`delete_session`), never a
        prompt; a start that needs a session waits for the end of such a run, then starts anew."""
        if self.retired:
            raise ServiceError(f"{self.name} is no longer in the config")
        while session and self.state is not AgentState.STOPPED and not self._with_session:
            await self._bare_run_over.wait()
        if self._stop_task is not None:
            await asyncio.shield(self._stop_task)
            if self.retired:
                raise ServiceError(f"{self.name} is no longer in the config")
        if self.running:
            return
        if self.state is not AgentState.STARTING:
            self.workdir = None
            self._take_pending_config()  # the plugins prepare the start as the config in force has it
            try:
                self._hook_failures = await self.deck.hooks.before_start(self)
            except StartFailed as exc:  # not a refusal: the start was tried and cannot succeed
                if self.state is AgentState.STARTING or self.running:
                    raise
                transition(self, AgentState.STARTING)
                transition(self, AgentState.ERROR, str(exc))
                raise ServiceError(f"{self.name} could not start: {exc}") from exc
            if self.running or self.state is AgentState.STARTING:
                return await self.start(auth_method, session=session)
            self._auth_method = auth_method
            self._with_session = session
            if not session:
                self._bare_run_over.clear()
            self._stop_after_start = False
            transition(self, AgentState.STARTING)
            self._start_task = self.deck.spawn(self._start(), f"start {self.name}")
        assert self._start_task is not None
        await asyncio.shield(self._start_task)
        if self.state is AgentState.ERROR:
            raise ServiceError(f"{self.name} could not start: {self.error}")
        if self.state is AgentState.STOPPED:
            raise ServiceError(f"{self.name} was stopped while starting")

    async def _start(self) -> None:
        limit = self.deck.config.limits.handshake_timeout
        self._continuing = None
        try:
            await self._spawn()
            self._handshake_task = self.tasks.spawn(self._handshake(), f"handshake {self.name}", log_errors=False)
            async with asyncio.timeout(limit):
                await self._handshake_task
        except TimeoutError:
            during = self._continuing
            if during is not None:  # its next start does not wait for that session again
                self._broken_session = (during[0], f"The agent did not answer {during[1]} within {limit:g}s: {FORGETS}")
            await self._fail(f"handshake timed out after {limit:g}s" + (f" during {during[1]}" if during else ""))
            return
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            # stop() cut the handshake short: no need to wait for an agent that may never answer.
            await self._end_process("stopped while starting")
            transition(self, AgentState.STOPPED)
            return
        except (SpawnError, AcpError, ServiceError) as exc:
            await self._fail(str(exc) if not isinstance(exc, ConnectionClosed) else exc.args[0])
            return
        except Exception as exc:  # a bug, or an agent deck cannot make sense of: an error, not a stuck start
            log.exception("%s: start failed", self.name)
            await self._fail(f"start failed: {type(exc).__name__}: {exc}")
            return
        finally:
            self._handshake_task = None
        if self.session is not None and self.session.id is not None:
            self._held = await inuse.hold(self.name, self.session.id)  # no other deck deletes it meanwhile
        if self._stop_after_start:
            await self._end_process("stopped while starting")
            transition(self, AgentState.STOPPED)
            return
        if self.session is not None:
            self.deck.conversations.session_opened(self)
        self.last_used = self.deck.clock()  # idle time counts from the start
        if self.process is not None:
            self.process.remember_descendants()  # found again after a crash, when the agent is gone
        transition(self, AgentState.READY)
        self._exit_watch = self.tasks.spawn(self._watch_exit(), f"watch {self.name}")

    async def _spawn(self) -> None:
        self._run_stderr.clear()
        cfg = self.config
        env = {**os.environ, **cfg.env}
        for plugin, key in self.deck.relied_on(self.name).items():  # never without it (in the main checkout)
            if (how := self.deck.plugin_off(plugin)) is not None:
                raise SpawnError(f"{key} is set, but the {plugin} plugin, which reads it, is off ({how})")
            if plugin in self._hook_failures:
                why = self._hook_failures[plugin]
                raise SpawnError(f"{key} is set, but the {plugin} plugin failed before the start: {why}")
        cwd = self.cwd
        command = list(cfg.command)
        wanted = sandbox.resolve(cfg, self.deck.config.sandbox)
        self.view = None
        if cfg.host:  # its cwd and env are the host's: here, ssh runs in deck's own folder, with deck's env
            command = remote.ssh_command(
                cfg.host, list(cfg.ssh), cwd, command, dict(cfg.env), remote.control_dir(), sandboxed=wanted
            )  # fmt: skip
            cwd, env = os.getcwd(), dict(os.environ)
        elif not os.path.isdir(cwd):
            raise SpawnError(f"working directory does not exist: {cwd}")
        elif wanted is not None:  # never run unsandboxed instead: SpawnError says why and what to do
            sandbox.required()
            self.view = sandbox.view(
                wanted, cwd, self.directories, dict(cfg.env), self.deck.sandbox_hidden(), self.deck.reachable_folders,
                command,
            )  # fmt: skip
            command = self.view.command(command)
        await self.tasks.close()  # the last connection's: cancelled as it ended, done by now
        self.tasks = tasks = self.deck.tasks.group(f"agent {self.name}")
        conn = Connection(
            self._write, on_bad_line=lambda line: self.log(f"deck: {line}"),
            spawn=lambda coro, name: tasks.spawn(coro, f"{self.name}: {name}"),
        )  # fmt: skip
        if self.deck.trace_acp:
            conn.trace = self._trace
        conn.on_notification("session/update", self._on_update)
        AgentRequests(self).register(conn)  # fs/*, terminal/*, permissions and questions
        self.conn = conn
        conv = self.deck.conversations.of(self.name)
        self.terminals = terminals.Terminals(
            lambda coro, name: tasks.spawn(coro, f"{self.name}: {name}"), conv.terminal_output, conv.terminal_exited,
            lambda line: self.log(f"deck: {line}"), grace=self.deck.timings.after_sigterm,
        )  # fmt: skip
        self.sessions.clear()
        self.early = EarlyUpdates(self.log)
        self.process = await Process.spawn(
            command, cwd=cwd, env=env, on_stdout=conn.feed, on_stderr_line=self._stderr,
            log=lambda line: self.log(f"deck: {line}"),
        )  # fmt: skip

    def _stderr(self, line: str) -> None:
        self._run_stderr.append(line)
        self.log(line)

    def _write(self, data: bytes) -> None:
        if self.process is None:
            raise ConnectionClosed("the agent is not running")
        try:
            self.process.write(data)
        except BrokenPipeError as exc:
            raise ConnectionClosed("the agent's stdin is closed") from exc

    def _trace(self, direction: str, message: dict[str, Any]) -> None:
        self.deck.hooks.acp_message(self, direction, message)

    async def _handshake(self) -> None:
        conn = self.conn
        assert conn is not None and self.process is not None
        exited = self.process
        init = await self._unless_exited(
            conn.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": {
                        # An agent on another host works on that host's files and runs its commands there.
                        "fs": {"readTextFile": not self.config.host, "writeTextFile": not self.config.host},
                        "terminal": self.config.terminals and not self.config.host,
                        # The Claude Code and Codex adapters then stream their own commands' output.
                        "_meta": {"terminal_output": True},
                        "elicitation": {"form": {}, "url": {}},
                        # Boolean config options are shown and set as the select ones are; a context
                        # compaction is a part of the conversation; an agent's notice is shown (ACP v1
                        # has it sent only to a client that says so).
                        "session": {"configOptions": {"boolean": {}}, "compaction": {}, "notices": {}},
                        # A subagent's work is a child conversation nested in the agent's.
                        "subagents": {},
                    },
                    "clientInfo": {"name": "deck", "title": "deck", "version": __version__},
                },
            ),
            exited,
        )
        if not isinstance(init, dict):
            raise ServiceError("initialize returned no result object")
        version = init.get("protocolVersion")
        if "protocolVersion" not in init:
            raise ServiceError(f"the agent's initialize answer has no protocolVersion; deck speaks version {PROTOCOL_VERSION}")
        if version != PROTOCOL_VERSION:
            raise ServiceError(f"agent speaks ACP protocol version {version!r}; deck speaks version {PROTOCOL_VERSION}")
        self.init_result = init
        method = self._auth_method or self.config.auth_method
        if method:
            self.check_auth_method(method)
            try:
                await self._unless_exited(conn.request("authenticate", {"methodId": method}), exited)
            except AcpError as exc:
                raise ServiceError(f"authenticate with {method!r} failed: {exc}\n{self.auth_help(only=method)}") from exc
        if not self._with_session:
            self.session = None
            return
        earlier = self.deck.conversations.of(self.name).session_id
        session = await self._continue_session(earlier, exited) if earlier else None
        if session is None:
            session = Session(self, CONVERSATION)
            try:
                await self._unless_exited(session.open(), exited)
            except AcpError as exc:
                if not exc.auth_required:
                    raise
                raise ServiceError(f"session/new: {exc}\n{self.auth_help()}") from exc
            if earlier:
                session.restarted = self._why_new
        self._broken_session = None
        self.session = session

    async def _continue_session(self, session_id: str, exited: Process) -> Session | None:
        """The conversation's earlier session again, where the agent can: `session/resume` if its
        `sessionCapabilities` list `resume`, else `session/load` if it has `loadSession`. An empty
        conversation (an agent's own session opened in deck, `ChatService.OpenConversation`) is
        loaded where the agent can, so that its replay forms the conversation.

        None when it cannot or refuses (an error answer): `_why_new` then says why, for the note
        the conversation shows, and the caller opens a new session. An agent that exits (or closes
        its output) during the resume or load fails this start, and its next start does not try
        that session again: it gets a new one, with a note that says why."""
        if self._broken_session is not None and self._broken_session[0] == session_id:
            self._why_new = self._broken_session[1]
            return None
        conv = self.deck.conversations.of(self.name)
        replay = self.deck.conversations.replay_into(self.name, matched=False) if not conv.messages and self.can_load_sessions else None
        matched: Replay | None = None
        if replay is None and self.can_resume_sessions:
            method, step = "session/resume", Session.resume
        elif self.can_load_sessions:
            matched = self.deck.conversations.replay_into(self.name, matched=True) if replay is None else None
            method, step = "session/load", functools.partial(Session.load, replay=replay or matched)
        else:
            self._why_new = f"The agent cannot resume sessions: {FORGETS}"
            return None
        session = Session(self, CONVERSATION)
        self._continuing = (session_id, method)
        try:
            await self._unless_exited(step(session, session_id), exited)
            self._continuing = None
        except AcpError as exc:
            self._continuing = None
            self.log(f"deck: {method} {session_id} failed: {exc}")
            self._why_new = f"{method} failed: {str(exc)[:300]}: {FORGETS}"  # the agent's words: kept short
            return None
        except ServiceError:
            if not (exited.exited.done() or exited.stdout_closed.done()):
                raise
            why = f"the agent {_how_it_ended(exited, method)}"
            self._broken_session = (session_id, f"{why[0].upper()}{why[1:]}: {FORGETS}")
            raise ServiceError(why) from None
        finally:
            if replay is not None:
                replay.finish()
        if matched is not None and (added := matched.finish()):
            self.log(f"deck: {method} {session_id} replayed {len(added)} message(s) deck did not hold: added")
        return session

    # -- the agent's own sessions (ACP sessionCapabilities, loadSession) ------------------------

    def _session_capability(self, name: str) -> bool:
        caps = self.init_result.get("agentCapabilities")
        session_caps = caps.get("sessionCapabilities") if isinstance(caps, dict) else None
        return isinstance(session_caps, dict) and isinstance(session_caps.get(name), dict)

    async def close_session(self) -> None:
        """ACP `session/close` of its current session, when deck will not come back to it (a new
        conversation, another one opened, the agent removed from the config) and the agent lists
        `sessionCapabilities.close`: its resources go now, not when it is stopped. Best effort: a
        refusal or no answer within CLOSE_TIMEOUT is logged, and the stop goes on."""
        session = self.session
        if self.conn is None or session is None or session.id is None or not self._session_capability("close"):
            return
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self.conn.request("session/close", {"sessionId": session.id})
        except (AcpError, ConnectionClosed, TimeoutError) as exc:
            self.log(f"deck: session/close of {session.id} failed: {str(exc) or 'no answer'}")

    async def delete_session(self, session_id: str) -> None:
        """ACP `session/delete` of one of its sessions (gone from its `session/list` too), where the
        running agent lists `sessionCapabilities.delete`; a ServiceError says why it was not deleted."""
        if self.conn is None or not self.running:
            raise ServiceError(self.error or f"{self.name} is not running")
        if not self._session_capability("delete"):
            raise ServiceError(f"{self.name} does not delete sessions (its initialize answer has no sessionCapabilities.delete)")
        with inuse.unused(self.name, session_id):
            async with self._answered("session/delete"):
                await self.conn.request("session/delete", {"sessionId": session_id})
        self.log(f"deck: session {session_id} deleted (session/delete)")

    @contextlib.asynccontextmanager
    async def _answered(self, method: str) -> AsyncIterator[None]:
        """A request of `method` to the agent, answered within the handshake's time limit; a
        ServiceError says why not (no answer in time, the agent ended, or it refused)."""
        limit = self.deck.config.limits.handshake_timeout
        try:
            async with asyncio.timeout(limit):
                yield
        except TimeoutError:
            raise ServiceError(f"{self.name} did not answer {method} within {limit:g}s") from None
        except ConnectionClosed as exc:
            raise ServiceError(f"{self.name} ended before answering {method}: {exc}") from exc
        except AcpError as exc:
            raise ServiceError(f"{self.name} refused {method}: {exc}") from exc

    @property
    def can_fork_sessions(self) -> bool:
        """Its last `initialize` answer lists `sessionCapabilities.fork`."""
        return self._session_capability("fork")

    async def fork_session(self) -> Session:
        """ACP `session/fork` of its conversation's session, where the running agent lists
        `sessionCapabilities.fork`: the new session, not serving anything yet (`serve`)."""
        current = self.session
        if self.conn is None or not self.running or current is None or current.id is None:
            raise ServiceError(self.error or f"{self.name} is not running")
        if not self.can_fork_sessions:
            raise ServiceError(f"{self.name} cannot fork its session: its initialize answer has no sessionCapabilities.fork")
        session = Session(self, CONVERSATION)
        async with self._answered("session/fork"):
            await session.fork(current.id)
        self.log(f"deck: session {current.id} forked as {session.id} (session/fork)")
        return session

    async def serve(self, session: Session) -> None:
        """`session` (a fork) serves its conversation from now on; the one before is left, open, to the agent."""
        old = self.session
        if old is not None and old.id is not None:
            self.detach(old)
        self.session = session
        assert session.id is not None
        if self._held is not None:
            self._held.release()
        self._held = await inuse.hold(self.name, session.id)
        self.deck.conversations.session_opened(self)

    @property
    def can_resume_sessions(self) -> bool:
        """Its last `initialize` answer lists `sessionCapabilities.resume`."""
        return self._session_capability("resume")

    @property
    def can_load_sessions(self) -> bool:
        """Its last `initialize` answer has `loadSession: true`."""
        caps = self.init_result.get("agentCapabilities")
        return isinstance(caps, dict) and caps.get("loadSession") is True

    async def list_sessions(self) -> list[dict[str, Any]]:
        """The sessions the running agent keeps in its cwd (ACP `session/list`), other clients' too:
        `[{sessionId, cwd, title, updatedAt}]` as the agent orders them.

        What the agent answers is untrusted (listing.py): pages, sessions and strings are
        bounded, malformed entries skipped; each page must come within the handshake timeout."""
        if self.conn is None or not self.running:
            raise ConnectionClosed(self.error or "the agent is not running")
        if not self._session_capability("list"):
            raise ServiceError(
                f"{self.name} cannot list its sessions: its initialize answer has no sessionCapabilities.list"
            )
        return await listing.list_sessions(self.conn, self.cwd, self.name, self.deck.config.limits.handshake_timeout)

    # -- authentication (ACP authMethods from the initialize result: auth.py) -------------------

    @property
    def auth_methods(self) -> list[dict[str, Any]]:
        return auth.methods(self.init_result)

    def check_auth_method(self, method: str) -> None:
        """Refuse a method id the agent did not offer, or one deck cannot pass to `authenticate`."""
        auth.check(self.name, self.config, self.init_result, method)

    def auth_help(self, only: str | None = None) -> str:
        """What the user can do to authenticate: one line per method the agent offers."""
        return auth.help_text(self.name, self.config, self.init_result, only)

    async def open_session(self, sink: SessionSink, origin: str) -> Session:
        """A new session of the running agent, its updates to `sink`; `origin` names it for the
        plugins that give it MCP servers (`deck_session_mcp_servers`). Close it when done."""
        if self.conn is None or not self.running:
            raise ConnectionClosed(self.error or "the agent is not running")
        session = Session(self, origin)
        await session.open()
        session.attach(sink)
        return session

    async def _unless_exited(self, coro: Coroutine[Any, Any, T], process: Process) -> T:
        """Await `coro`, but fail at once if the process exits, or closes its stdout, first. On another
        host, ssh's own failure (exit 255: unreachable, refused, an unknown host key) names the host."""
        try:
            return await _unless_exited(self.tasks.spawn(coro, f"handshake step {self.name}", log_errors=False), process)
        except ServiceError:
            code = process.exited.result() if process.exited.done() else None
            lost = remote.connection_lost(self.config.host, code) if self.config.host else None
            if lost is not None:
                raise ServiceError(lost) from None
            raise

    async def _fail(self, reason: str) -> None:
        """The start failed: the agent is in error at once (the caller is answered), and a process
        still running, which may take the whole stop escalation to end, is stopped after, in the
        background; `stop` and the next start wait for that. One that exited is ended first, so
        that the last lines it wrote to stderr are in the error."""
        process = self.process
        if process is not None and not process.exited.done():
            self._stop_task = self.deck.spawn(self._end_failed_start(reason), f"stop {self.name}")
        else:
            await self._end_process(reason)
        transition(self, AgentState.ERROR, "\n".join([reason, *self._run_stderr]))

    async def _end_failed_start(self, reason: str) -> None:
        try:
            await self._end_process(reason)
        finally:
            self._stop_task = None

    # -- sessions and requests from the agent ---------------------------------------------------

    def attach(self, session: Session) -> None:
        """Route the session's updates and requests to it, replaying any that came early."""
        assert session.id is not None
        self.sessions[session.id] = session
        for update in self.early.take(session.id):
            self._deliver(session, update)
        self.early.flood_over()  # a real session turned up

    def detach(self, session: Session) -> None:
        assert session.id is not None
        if self.sessions.get(session.id) is session:
            del self.sessions[session.id]
        self.early.take(session.id)
        self._detached.append(session.id)  # its late updates are dropped, not kept for nobody

    def _on_update(self, params: dict[str, Any]) -> None:
        update = params.get("update")
        if not isinstance(update, dict):
            self.log(f"deck: session/update without an update object, skipped: {str(params)[:200]}")
            return
        session_id = params.get("sessionId")
        if not isinstance(session_id, str):
            self.log(f"deck: session/update with a sessionId that is no string, skipped: {str(session_id)[:100]}")
            return
        kind = update.get("sessionUpdate")
        if not isinstance(kind, str):  # first: a list or an object would fail every look-up by kind
            self.log(f"deck: session/update whose sessionUpdate is no string ({type(kind).__name__}), skipped")
            return
        session = self.sessions.get(session_id)
        if session is not None:
            if kind in TOOL_UPDATES:
                session.track(update)
            elif kind == "subagent_update":
                session.adopt(update)
            elif kind == "usage_update" and session.origin != CONVERSATION and session.parent is None:
                self.deck.conversations.session_cost(session, update)  # an ask's cost is the agent's too
                # (a subagent's never: ACP has its parent's cost hold it already, if it is to count)
            session.on_update(update)
            return
        if session_id in self._detached:
            if session_id not in self._said_closed:
                self._said_closed.append(session_id)
                self.log(f"deck: updates for closed session {session_id[:100]!r} dropped")
            return
        self.early.keep(str(session_id), update, self.conn.line_bytes if self.conn is not None else 0)

    def _deliver(self, session: Session, update: dict[str, Any]) -> None:
        try:
            session.receive(update)
        except Exception as exc:  # as for a live update (acp.Connection): logged, skipped
            log.exception("%s: bad early update", self.name)
            self.log(f"deck: error while handling an update, skipped: {exc!r}: {str(update)[:200]}")

    # -- stop and exit --------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop the agent; a start in progress ends first, then the agent stops. A stop already
        under way (a failed start's process, being ended) is waited for."""
        if self._stop_task is not None:
            await asyncio.shield(self._stop_task)
        if self.state is AgentState.STARTING:
            self._stop_after_start = True
            if self._handshake_task is not None:
                self._handshake_task.cancel()
            if self._start_task is not None:
                await asyncio.shield(self._start_task)
            return
        if not self.running:
            return
        if self._stop_task is None:
            self._stop_task = self.deck.spawn(self._stop(), f"stop {self.name}")
        await asyncio.shield(self._stop_task)

    async def _stop(self) -> None:
        try:
            await self._end_process("agent stopped")
            if self.running:
                self._take_pending_config()
                transition(self, AgentState.STOPPED)
        finally:
            self._stop_task = None

    async def _end_process(self, reason: str) -> None:
        if self._exit_watch is not None:
            self._exit_watch.cancel()
            self._exit_watch = None
        process, self.process = self.process, None
        commands, self.terminals = self.terminals, None
        try:
            # Its commands end with it, at the same time: a stop waits for the slower of the two.
            ends = [process.stop(self.deck.timings)] if process is not None else []
            results = await asyncio.gather(*ends, *([commands.close()] if commands else []), return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        finally:
            if not self._with_session:
                self._with_session = True
                self._bare_run_over.set()
            if self._held is not None:
                self._held.release()
                self._held = None
            if self.conn is not None:
                self.conn.close(reason)
            self.tasks.cancel()  # what the connection still runs; the next start waits for the end of it
            if kept := self.early.clear():
                self.log(f"deck: {kept} update(s) for sessions never opened dropped: the agent stopped")

    def _take_pending_config(self) -> None:
        """No process any more: a definition changed in the config applies now."""
        if self.pending_config is not None:
            self.config, self.pending_config = self.pending_config, None
        self.outdated = False

    async def _watch_exit(self) -> None:
        """The connection's end: the agent exits, or closes its stdout (no answer can come any more)."""
        process = self.process
        assert process is not None
        ends: set[asyncio.Future[Any]] = {process.exited, process.stdout_closed}
        await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        if not process.exited.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STDOUT_CLOSED_GRACE):
                    await asyncio.shield(process.exited)
        if process.exited.done():
            # Let the last lines it wrote arrive before the connection closes.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await asyncio.shield(process.stdout_closed)
        if self.process is not process:
            return
        self._exit_watch = None
        if not process.exited.done():
            reason = "the agent closed its output (stdout) but kept running"
        elif self.config.host and (lost := remote.connection_lost(self.config.host, process.exited.result())):
            reason = lost
        elif (code := process.exited.result()) >= 0:
            reason = f"the agent exited on its own with code {code}"
        else:
            reason = f"the agent was killed by signal {-code}"
        self.log(f"deck: {reason}")
        await self._end_process(reason)
        if self.running:
            self._take_pending_config()
            transition(self, AgentState.ERROR, reason)


def _how_it_ended(process: Process, during: str) -> str:
    """What the agent did during `during`, said after "the agent": exited, was killed, or closed its stdout."""
    if not process.exited.done():
        return f"closed its output (stdout) during {during}"
    code = process.exited.result()
    return f"exited during {during} (code {code})" if code >= 0 else f"was killed by signal {-code} during {during}"


async def _unless_exited(task: asyncio.Task[T], process: Process) -> T:
    """Await `task`, but fail at once if the process exits, or closes its stdout, first (`task` is cancelled then)."""
    answer: asyncio.Future[Any] = task
    try:
        done, _ = await asyncio.wait({answer, process.exited, process.stdout_closed}, return_when=asyncio.FIRST_COMPLETED)
        if task not in done:
            if process.exited.done():  # the answer may be in the last bytes written before the exit
                await asyncio.wait({answer, process.stdout_closed}, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            else:  # nothing more can come; an exit on its way still tells its code
                await asyncio.wait({answer, process.exited}, timeout=STDOUT_CLOSED_GRACE, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.sleep(0)
        if task.done():
            return task.result()
        if not process.exited.done():
            raise ServiceError("the agent closed its output (stdout) during the handshake")
        raise ServiceError(f"the agent exited during the handshake with code {process.exited.result()}")
    finally:
        task.cancel()
