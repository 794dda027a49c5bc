"""`deck send AGENT [TEXT]`: one prompt, the answer streamed to stdout, the exit code from the stop reason.

The answer's text goes to stdout as it streams; thoughts, tool calls, plans and deck's notes go
to stderr, each on a line of its own that says what it is (`[thought] …`, `[tool] …`, `[plan] …`,
`deck: …`), so `deck send a "…" > answer.md` keeps only the answer. When stdout and stderr are
the same terminal, a line of stderr starts on a line of its own and the answer goes on below
it: the newlines that takes go to stderr, and stdout keeps the answer's text as it came.
With `--json` every event is one JSON line on stdout instead, encoded by the jsonl bridge's
encoder (`deck.wire`, re-exported by `deck.frontend`). Nobody can answer a permission request here: `--approve PATTERN`
or the agent's `permissions` policy may approve it (ChatService does that before asking), any
other request is rejected with a note on stderr; questions are declined.

The prompt goes to a conversation of its own, unless the frontend is told to continue the
agent's current conversation (`keep`) or a stored one (`conversation`, an id or its start).
Interrupted before the turn ends (Ctrl-C), it cancels the turn where it runs, with a note.

A stdout that is a terminal gets the agent's text with its control characters made
visible (`deck.tty.printable`; JSON lines get `\\u` escapes instead, the same JSON);
written to a pipe or a file, the answer is data and stays exactly as the agent sent it.
stderr is for reading, wherever it goes (a terminal, often, even when stdout is piped):
what goes there is always made visible so.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, TextIO

from deck.errors import ExitCode, ServiceError, refused_prompt
from deck.events import Event, MessageDelta, MessageUpdated, PermissionRequested, QuestionRequested, handles
from deck.frontend import REJECT, Frontend, choose_option, encode_event  # the jsonl bridge's encoder (`deck.wire`)
from deck.frontends.words import stderr_of
from deck.tty import json_printable, printable

#: The exit code of each stop reason; an agent message that ended with an error exits 1.
STOP_CODES: dict[str, int] = {
    "end_turn": ExitCode.OK,
    "max_tokens": ExitCode.MAX_TOKENS,
    "max_turn_requests": ExitCode.MAX_TURN_REQUESTS,
    "refusal": ExitCode.REFUSAL,
    "cancelled": ExitCode.CANCELLED,
}
#: What starts each kind of line on stderr.
LABELS = {"thought": "[thought] ", "tool": "[tool] ", "plan": "[plan] ", "note": "deck: "}
#: How long an interrupted send waits for its turn's cancellation to be taken.
INTERRUPT_SECONDS = 3.0
#: The most of a crashed agent's last stderr lines shown.
STDERR_SHOWN = 10
#: The most stored conversations of the agent looked through for `conversation`.
CONVERSATIONS_LISTED = 1_000_000


class SendFrontend(Frontend):
    """Sends one prompt and follows that one turn; `run` returns the exit code."""

    name = "send"
    description = "one prompt, the answer on stdout"
    follows_config = False

    def __init__(
        self,
        client: Any,
        *,
        agent: str,
        text: str,
        as_json: bool = False,
        keep: bool = False,
        conversation: str | None = None,
        attached: bool = False,
        out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> None:
        super().__init__(client, agent=agent, text=text, as_json=as_json, keep=keep, conversation=conversation)
        self.agent = agent
        self.text = text
        self.as_json = as_json
        self.keep = keep  # the agent's current conversation, rather than one of its own
        self.conversation = conversation  # a stored conversation to continue: its id, or the start of it
        self.attached = attached  # a client of a deck server: `keep` is the conversation its clients show
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        for stream in (self.out, self.err):
            # A lone surrogate from an agent is written as its escape, never a UnicodeEncodeError.
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="backslashreplace")
        self.reply_id: str | None = None
        self.tools: dict[str, tuple[str, str]] = {}  # tool id → (title, status) last shown
        self._done: asyncio.Future[int] | None = None
        self._failing: asyncio.Future[None] | None = None  # a failed turn's last lines, being fetched
        self._sending: asyncio.Future[Any] | None = None  # the Send call, once made
        self._calls: set[asyncio.Future[Any]] = set()
        self._flush_scheduled = False
        self._stdout_closed = False
        self._out_tty = _isatty(self.out)
        self._held_cr = False  # stdout is a terminal and the last text ended with a CR: the start of a CR LF?
        self._shared = _same_terminal(self.out, self.err)  # one screen: the lines of both streams interleave
        self._out_open = False  # the answer's text so far does not end with a newline
        self._screen_open = False  # shared: the screen's cursor is at the end of an answer's line
        self._thought: tuple[str, int] | None = None  # (message id, part) of the thought line left open on stderr

    async def run(self) -> int:
        self._done = asyncio.get_running_loop().create_future()
        self.client.subscribe(self.on_event)
        try:
            try:
                await self._start_turn()
            except ServiceError as exc:  # deck refused the prompt (a budget), else the command's mistake
                self.note(str(exc))
                return ExitCode.REFUSAL if refused_prompt(exc) else ExitCode.USAGE
            return await asyncio.shield(self._done)  # shielded: a cancelled run leaves it unresolved
        except asyncio.CancelledError:  # a signal (Ctrl-C): the command ends before the turn
            await self._interrupted()
            raise
        finally:
            self.client.unsubscribe(self.on_event)
            self._end_lines()
            self.flush()

    async def _start_turn(self) -> None:
        """Choose the conversation, then send the prompt. A blank prompt changes nothing: Send refuses it."""
        if self.text.strip():
            await self._choose_conversation()
        self._sending = self.client.call("ChatService.Send", {"agent": self.agent, "text": self.text})
        await asyncio.shield(self._sending)  # an interruption meanwhile waits for its answer

    async def _choose_conversation(self) -> None:
        """A conversation of the send's own (kept apart: `deck run` does not come back to it), unless it
        continues a stored one or (`keep`) the agent's latest one: through a server, its current one."""
        if self.conversation is not None:
            found = await self._stored(self.conversation)
            await self.client.call("ChatService.OpenConversation", {"id": found, "apart": not self.attached})
        elif not self.keep:
            await self.client.call("ChatService.NewConversation", {"agent": self.agent, "apart": True})
        elif not self.attached:
            latest = await self._latest()
            if latest is not None:
                await self.client.call("ChatService.OpenConversation", {"id": latest, "apart": True})

    async def _latest(self) -> str | None:
        """The id of the agent's latest stored conversation, one-shot ones included; None with no history."""
        try:
            rows = await self.client.call("ChatService.History", {"agent": self.agent, "limit": 1})
        except ServiceError:
            return None  # the history is off: the conversation the deck holds is the one
        return str(rows[0]["id"]) if rows else None

    async def _stored(self, wanted: str) -> str:
        """The id of the agent's stored conversation that `wanted` is, or starts (a unique start will do)."""
        rows = await self.client.call("ChatService.History", {"agent": self.agent, "limit": CONVERSATIONS_LISTED})
        ids = [row["id"] for row in rows]
        found = [wanted] if wanted in ids else [i for i in ids if wanted and i.startswith(wanted)]
        if not found:
            raise ServiceError(f"no conversation {wanted!r} of {self.agent} in the history of this config")
        if len(found) > 1:
            shown = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
            raise ServiceError(f"{wanted!r} starts {len(found)} conversations of {self.agent}: give more of it ({shown})")
        return found[0]

    async def _interrupted(self) -> None:
        """The command was interrupted while the turn was on: the turn is cancelled where it runs, and a
        note says so. A server's agent busy with another turn keeps it, and the message stays queued."""
        if self._done is None or self._done.done() or self._sending is None:
            return
        step = asyncio.ensure_future(self._cancel_turn())
        await asyncio.wait({step}, timeout=INTERRUPT_SECONDS)  # not asyncio.timeout: this task is being cancelled
        if not step.done():
            step.cancel()
            self.note("interrupted: the turn may go on: its cancellation was not confirmed")
        elif not step.cancelled() and step.exception() is None:
            self.note(f"interrupted: {step.result()}")
        # else the call failed: the deck is gone (a server that went away says so itself)

    async def _cancel_turn(self) -> str:
        """Cancel this send's turn, unless its message waits behind another; what was done, in words."""
        assert self._sending is not None
        message_id = await self._sending
        if self.reply_id is None:
            conversation = await self.client.call("ChatService.Conversation", {"agent": self.agent})
            if any(m["id"] == message_id and m.get("queued") for m in conversation["messages"]):
                return f"the message stays queued behind {self.agent}'s turn in progress, which goes on"
        await self.client.call("ChatService.Cancel", {"agent": self.agent})
        return "the turn was cancelled"

    # -- events -----------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if self.as_json:
            self.write(encode_event(event) + "\n")
        if getattr(event, "agent", None) == self.agent:
            self.dispatch(event)

    def _call(self, method: str, params: dict[str, Any]) -> None:
        """A call whose answer nobody waits for; its error, if any, is a note."""
        call = self.client.call(method, params)
        self._calls.add(call)
        call.add_done_callback(self._called)

    def _called(self, call: asyncio.Future[Any]) -> None:
        self._calls.discard(call)
        if not call.cancelled() and call.exception() is not None:
            self.note(str(call.exception()))

    @handles(MessageUpdated)
    def _message_updated(self, event: MessageUpdated) -> None:
        message = event.message
        if self.reply_id is None and message["role"] == "agent" and not message["done"]:
            self.reply_id = message["id"]  # the reply opened by our turn (stray updates come done)
        elif message["id"] == self.reply_id and message["done"]:
            self._end_turn(message)
        elif self.reply_id is None and message["role"] == "system":
            self._system_message(message)

    def _system_message(self, message: dict[str, Any]) -> None:
        """What deck says in the conversation before the reply: the agent is unavailable (the turn
        ends), or it was restarted and does not remember the conversation continued."""
        code = message.get("code")
        if code == "agent-unavailable":
            first, *stderr = (message.get("error") or f"{self.agent} is unavailable").split("\n")
            self.note(first)
            self._stderr_tail(stderr)  # what the agent wrote as it failed to start: as after a crash
            self._finish(ExitCode.ERROR)
        elif code == "agent-restarted" and self._sending is not None:
            text = " ".join(p.get("text", "") for p in message.get("parts") or [] if p.get("type") == "text")
            self.note(f"{self.agent}: {text or 'restarted'}")

    def _end_turn(self, message: dict[str, Any]) -> None:
        stop = message.get("stopReason")
        if stop is None:
            self.note(f"{self.agent}: {message.get('error') or 'the turn ended without a stop reason'}")
            self._failing = asyncio.ensure_future(self._failed())
            return
        if stop != "end_turn":
            self.note(f"{self.agent} stopped: {stop}")
        self._finish(STOP_CODES.get(stop, ExitCode.ERROR))

    async def _failed(self) -> None:
        """The turn ended with an error: when the agent is in error (it crashed), its last stderr
        lines, which say why and which `deck send` has no `/logs` to show later; then exit 1."""
        try:
            listed = await self.client.call("AgentService.List")
            crashed = any(a["name"] == self.agent and a["state"] == "error" for a in listed)
            lines = stderr_of(await self.client.call("AgentService.Logs", {"name": self.agent})) if crashed else []
        except Exception:  # a help only: the error said stands without them
            lines = []
        self._stderr_tail(lines)
        self._finish(ExitCode.ERROR)

    def _stderr_tail(self, lines: list[str]) -> None:
        """The agent's last stderr `lines`, under a note that says whose they are, each marked `| `."""
        lines = [line for line in lines if line.strip()]
        if lines:
            self.note(f"{self.agent}'s last stderr lines:")
            self._to_stderr("".join(f"| {line}\n" for line in lines[-STDERR_SHOWN:]))

    @handles(MessageDelta)
    def _message_delta(self, event: MessageDelta) -> None:
        if event.message_id != self.reply_id or self.as_json:
            return
        kind = event.kind
        if kind == "text":
            self.write(event.text or "")
        elif kind == "thought":
            self.thought((event.message_id, event.index), event.text or "")
        elif kind == "tool" and event.part is not None:
            part = event.part
            shown = (part["title"], part["status"])
            if self.tools.get(part["id"]) != shown:
                self.tools[part["id"]] = shown
                self.control("tool", f"{part['title'] or part['id']} ({part['kind']}): {part['status']}")
        elif kind == "plan" and event.part is not None:
            entries = event.part["entries"]
            done = sum(1 for e in entries if e["status"] == "completed")
            self.control("plan", f"{done}/{len(entries)} done")

    @handles(PermissionRequested)
    def _permission_requested(self, event: PermissionRequested) -> None:
        title = event.tool_call.get("title") or "a tool"
        try:
            reject: dict[str, Any] | None = choose_option(event.options, REJECT)
        except ValueError:
            reject = None
        if reject is None:
            self.note(f"permission for {title} requested with no way to refuse it: the turn is cancelled")
            self._call("ChatService.Cancel", {"agent": self.agent})
            return
        kind = event.tool_call.get("kind") or "other"
        self.note(
            f"permission for {title} ({kind}) refused: deck send cannot ask "
            f'(--approve {kind} or the agent\'s `permissions = "allow"` approves such requests)'
        )
        self._call("ChatService.AnswerPermission", {"id": event.id, "optionId": reject["optionId"]})

    @handles(QuestionRequested)
    def _question_requested(self, event: QuestionRequested) -> None:
        self.note(f"question declined: deck send cannot ask ({event.message})")
        self._call("ChatService.AnswerQuestion", {"id": event.id, "values": None})

    def _finish(self, code: int) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(code)

    # -- stderr: lines of their own ---------------------------------------------------------

    def note(self, line: str) -> None:
        self.control("note", line)

    def control(self, kind: str, line: str) -> None:
        """One line of `kind` (a key of LABELS) on stderr, on a line of its own."""
        self._fresh_line()
        self._to_stderr(LABELS[kind] + line + "\n")

    def thought(self, key: tuple[str, int], text: str) -> None:
        """A piece of the thought `key` (message id, part): it goes on on its line, or starts one; each
        line it holds is labelled."""
        if not text:
            return
        label = LABELS["thought"]
        if self._thought != key:
            self._fresh_line()
            self._to_stderr(label)
        ended = text.endswith("\n")
        self._to_stderr((text[:-1] if ended else text).replace("\n", "\n" + label) + ("\n" if ended else ""))
        self._thought = None if ended else key

    def _fresh_line(self) -> None:
        """End the line left open where the next stderr line goes: a thought's, or, on a screen stdout
        shares, the answer's (the newline goes to stderr: the answer's text stays as it came)."""
        if not self.as_json:
            self.flush()  # keep stdout and stderr in order on a shared terminal
        if self._thought is not None or (self._shared and self._screen_open):
            self._to_stderr("\n")
            self._thought = None
            self._screen_open = False

    def _to_stderr(self, text: str) -> None:
        self.err.write(printable(text))
        self.err.flush()

    def _end_lines(self) -> None:
        """At the end: the line left open is ended, a thought's on stderr, the answer's on stdout."""
        if self._thought is not None:
            self._to_stderr("\n")
            self._thought = None
        if not self.as_json and (self._screen_open if self._shared else self._out_open):
            self.write("\n")

    # -- stdout: the answer -----------------------------------------------------------------

    def write(self, text: str) -> None:
        """Buffered stdout, flushed once the loop goes idle: no system call per chunk."""
        if self._stdout_closed or not text:
            return
        if self._shared and self._thought is not None:  # the answer goes on below the thought's line
            self._to_stderr("\n")
            self._thought = None
        self._out_open = self._screen_open = not text.endswith("\n")
        try:
            self.out.write(self._shown(text) if self._out_tty else text)
        except BrokenPipeError:
            self._closed()
            return
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def _shown(self, text: str) -> str:
        """`text` for a terminal: printable; a CR that ends a chunk waits for the next, which may start
        with LF (the answer then does not end with a newline: `run` writes one, so the CR is never left)."""
        if self.as_json:
            return json_printable(text)
        if self._held_cr:
            text = "\r" + text
        self._held_cr = text.endswith("\r")
        return printable(text[:-1] if self._held_cr else text)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self._stdout_closed:
            return
        try:
            self.out.flush()
        except BrokenPipeError:
            self._closed()

    def _closed(self) -> None:
        """stdout was closed (`deck send … | head -1`): end quietly."""
        self._stdout_closed = True
        try:  # what is still buffered must not fail again at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.out.fileno())
        except (OSError, ValueError):
            pass
        self._finish(ExitCode.OK)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or file-like stream
        return False


def _same_terminal(out: TextIO, err: TextIO) -> bool:
    """Whether `out` and `err` are the one terminal, where their lines interleave."""
    if not (_isatty(out) and _isatty(err)):
        return False
    try:
        return os.path.samestat(os.fstat(out.fileno()), os.fstat(err.fileno()))
    except (AttributeError, OSError, ValueError):
        return False
