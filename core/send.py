"""`deck send AGENT TEXT`: one prompt, the answer streamed to stdout, the exit code from the stop reason.

The answer's text goes to stdout as it streams; thoughts, tool calls, plans and
deck's notes go to stderr, so `deck send a "…" > answer.md` keeps only the answer.
With `--json` every event is one JSON line on stdout instead (as the jsonl bridge
writes them). Nobody can answer a permission request here: `--approve PATTERN`
or the agent's `permissions` policy may approve it (ChatService does that before
asking), any other request is rejected with a note on stderr; questions are declined.

A stdout that is a terminal gets the agent's text with its control characters made
visible (`deck.tty.printable`; JSON lines get `\\u` escapes instead, the same JSON);
written to a pipe or a file, the answer is data and stays exactly as the agent sent it.
stderr is for reading, wherever it goes (a terminal, often, even when stdout is piped):
what goes there is always made visible so.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, TextIO

from .errors import ExitCode, ServiceError
from .events import Event, MessageDelta, MessageUpdated, PermissionRequested, QuestionRequested, handles
from .frontend import Frontend
from .tty import json_printable, printable

#: The exit code of each stop reason; an agent message that ended with an error exits 1.
STOP_CODES: dict[str, int] = {
    "end_turn": ExitCode.OK,
    "max_tokens": ExitCode.MAX_TOKENS,
    "max_turn_requests": ExitCode.MAX_TURN_REQUESTS,
    "refusal": ExitCode.REFUSAL,
    "cancelled": ExitCode.CANCELLED,
}
REJECT_KINDS = ("reject_once", "reject_always")


class SendFrontend(Frontend):
    """Sends one prompt and follows that one turn; `run` returns the exit code."""

    name = "send"
    description = "one prompt, the answer on stdout"

    def __init__(
        self,
        client: Any,
        *,
        agent: str,
        text: str,
        as_json: bool = False,
        out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> None:
        super().__init__(client, agent=agent, text=text, as_json=as_json)
        self.agent = agent
        self.text = text
        self.as_json = as_json
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
        self._calls: set[asyncio.Future[Any]] = set()
        self._flush_scheduled = False
        self._stdout_closed = False
        self._ends_with_newline = True
        self._err_kind = ""  # what the last stderr write was, to start a new line between kinds
        self._out_tty = _isatty(self.out)
        self._held_cr = False  # stdout is a terminal and the last text ended with a CR: the start of a CR LF?

    async def run(self) -> int:
        self._done = asyncio.get_running_loop().create_future()
        self.client.subscribe(self.on_event)
        try:
            try:
                await self.client.call("ChatService.Send", {"agent": self.agent, "text": self.text})
            except ServiceError as exc:
                self.note(str(exc))
                return ExitCode.USAGE
            return await self._done
        finally:
            self.client.unsubscribe(self.on_event)
            if not self.as_json and not self._ends_with_newline:
                self.write("\n")
            self.flush()

    # -- events -----------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if self.as_json:
            self.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
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
        elif self.reply_id is None and message["role"] == "system" and message.get("code") == "agent-unavailable":
            self.note(message.get("error") or f"{self.agent} is unavailable")
            self._finish(ExitCode.ERROR)

    def _end_turn(self, message: dict[str, Any]) -> None:
        stop = message.get("stopReason")
        if stop is None:
            self.note(f"{self.agent}: {message.get('error') or 'the turn ended without a stop reason'}")
            self._finish(ExitCode.ERROR)
            return
        if stop != "end_turn":
            self.note(f"{self.agent} stopped: {stop}")
        self._finish(STOP_CODES.get(stop, ExitCode.ERROR))

    @handles(MessageDelta)
    def _message_delta(self, event: MessageDelta) -> None:
        if event.message_id != self.reply_id or self.as_json:
            return
        kind = event.kind
        if kind == "text":
            self.write(event.text or "")
        elif kind == "thought":
            self.to_stderr("thought", event.text or "")
        elif kind == "tool" and event.part is not None:
            part = event.part
            shown = (part["title"], part["status"])
            if self.tools.get(part["id"]) != shown:
                self.tools[part["id"]] = shown
                self.to_stderr("tool", f"[tool] {part['title'] or part['id']} ({part['kind']}): {part['status']}\n")
        elif kind == "plan" and event.part is not None:
            entries = event.part["entries"]
            done = sum(1 for e in entries if e["status"] == "completed")
            self.to_stderr("plan", f"[plan] {done}/{len(entries)} done\n")

    @handles(PermissionRequested)
    def _permission_requested(self, event: PermissionRequested) -> None:
        title = event.tool_call.get("title") or "a tool"
        reject = next((o for kind in REJECT_KINDS for o in event.options if o.get("kind") == kind), None)
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

    # -- output -----------------------------------------------------------------------------

    def note(self, line: str) -> None:
        self.to_stderr("note", f"deck: {line}\n")

    def to_stderr(self, kind: str, text: str) -> None:
        if not self.as_json:
            self.flush()  # keep stdout and stderr in order on a shared terminal
        if kind != self._err_kind and self._err_kind == "thought":
            text = "\n" + text
        self._err_kind = kind
        self.err.write(printable(text))
        self.err.flush()

    def write(self, text: str) -> None:
        """Buffered stdout, flushed once the loop goes idle: no system call per chunk."""
        if self._stdout_closed or not text:
            return
        self._ends_with_newline = text.endswith("\n")
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
