"""Frontends are clients: each runs against a client that only relays JSON, and imports nothing else of deck.

`wire_client(deck)` holds the deck out of the frontend's reach: every call and its answer
go through `json.dumps`/`json.loads`, every event through its wire line and
`deck.events.from_wire`, as at the end of a socket. A frontend that read the deck's
state, called a service by its Python name or kept an event object of the core would
fail here.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from deck.client import Client, service_error
from deck.errors import INVALID_PARAMS, METHOD_NOT_FOUND, ServiceError
from deck.events import (
    ALL_EVENTS,
    AgentLog,
    Event,
    Handlers,
    MessageDelta,
    UnknownEvent,
    from_wire,
    handles,
    register_events,
)
from deck.frontends.jsonl import JsonlFrontend
from deck.frontends.line import LineFrontend
from deck.frontends.send import SendFrontend
from deck.frontends.urwid.app import ConsoleApp
from deck.frontends.urwid.common import canvas_text
from deck.plugins.announcements.events import EVENTS as ANNOUNCEMENT_EVENTS
from deck.plugins.budget.events import EVENTS as BUDGET_EVENTS
from deck.plugins.notify.events import EVENTS as NOTIFY_EVENTS
from deck.plugins.worktrees.events import EVENTS as WORKTREE_EVENTS
from deck.runtime.deck import Deck
from deck.runtime.local import LocalClient
from deck.runtime.plugins import make_manager

from tests.conftest import ROOT, agent_block

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PLUGIN_EVENTS = (*ANNOUNCEMENT_EVENTS, *WORKTREE_EVENTS, *NOTIFY_EVENTS, *BUDGET_EVENTS)
#: What a frontend may import of deck: the client, the events (the core's and the built-in plugins'),
#: the states, the terminal helpers, the diffs of tool calls, its own base, the errors and `hookimpl`
#: (from `deck` itself, nothing else from there).
ALLOWED = {
    "deck.client", "deck.events", "deck.states", "deck.tty", "deck.diffs", "deck.frontend", "deck.errors",
    "deck.plugins.announcements.events", "deck.plugins.worktrees.events", "deck.plugins.notify.events",
    "deck.plugins.budget.events",
}  # fmt: skip
#: Names a frontend must not reach the core's objects through.
INTERNALS = {"deck", "chat", "agent_service", "config_service", "services", "supervisor"}


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def wire_client(deck: Deck) -> Client:
    """A client of `deck` that has only JSON: calls, answers and events all cross as text.

    Calls are made at once (their answers come on a later turn of the loop, as over a socket);
    events arrive in order, each rebuilt from its wire line. The deck lives in a closure: the
    frontend gets no reference to it."""
    local = LocalClient(deck)
    listeners: list[Any] = []

    def relay(event: Event) -> None:
        line = json.dumps(event.to_dict())
        for listener in list(listeners):
            listener(from_wire(json.loads(line)))

    class WireClient(Client):
        def call(self, method: str, params: Any = None) -> asyncio.Future[Any]:
            request = _json({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            made = local.call(request["method"], request["params"])
            answer = asyncio.get_running_loop().create_future()

            def answered(done: asyncio.Future[Any]) -> None:
                if done.cancelled():
                    answer.cancel()
                elif isinstance(done.exception(), ServiceError):
                    error = _json({"code": done.exception().code, "message": str(done.exception())})  # type: ignore[union-attr]
                    answer.set_exception(service_error(error["code"], error["message"]))
                elif done.exception() is not None:
                    answer.set_exception(done.exception())  # type: ignore[arg-type]
                else:
                    answer.set_result(_json(done.result()))

            made.add_done_callback(answered)
            return answer

        def subscribe(self, listener: Any) -> None:
            if not listeners:
                local.subscribe(relay)
            listeners.append(listener)

        def unsubscribe(self, listener: Any) -> None:
            listeners.remove(listener)
            if not listeners:
                local.unsubscribe(relay)

        async def end_of_input(self, *, drain: bool = True) -> None:
            await local.end_of_input(drain=drain)

        async def close(self) -> None:
            await local.close()

        def request_exit(self, code: int) -> None:
            local.request_exit(code)

    return WireClient()


def holds_no_deck(frontend: Any) -> bool:
    return not any(isinstance(value, (Deck, LocalClient)) for value in vars(frontend).values())


class Pipe:
    """A pipe the frontend writes to, read line by line on the loop."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self.lines: list[str] = []
        self._partial = b""
        self._changed = asyncio.Event()
        self._ended = asyncio.Event()
        asyncio.get_running_loop().add_reader(self.read_fd, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.read_fd, 1 << 16)
        except BlockingIOError:
            return
        if not data:
            asyncio.get_running_loop().remove_reader(self.read_fd)
            self._ended.set()
        *whole, self._partial = (self._partial + data).split(b"\n")
        self.lines += [line.decode() for line in whole]
        self._changed.set()

    async def expect(self, pattern: str, timeout: float = 15.0) -> str:
        """The first line (whole, a regex) that matches `pattern`."""
        async with asyncio.timeout(timeout):
            while True:
                found = next((line for line in self.lines if re.fullmatch(pattern, line)), None)
                if found is not None:
                    return found
                self._changed.clear()
                await self._changed.wait()

    async def all_lines(self) -> list[str]:
        """Every line written, once the writing end is closed."""
        os.close(self.write_fd)
        await asyncio.wait_for(self._ended.wait(), 10)
        return self.lines

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.read_fd)
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


# -- the frontends, on JSON alone ------------------------------------------------------------------


async def test_the_line_frontend_runs_on_a_wire_client(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    stdin_read, stdin_write = os.pipe()
    out = Pipe()
    frontend = LineFrontend(wire_client(deck), stdin_fd=stdin_read, stdout_fd=out.write_fd)
    assert holds_no_deck(frontend)
    running = asyncio.create_task(frontend.run())
    try:
        await out.expect(r"\[deck\] talking to a; /help lists the commands")
        os.write(stdin_write, b"@a stream 3\n")
        await out.expect(r"\[a\] c0 c1 c2")
        os.write(stdin_write, b"/agents\n")
        await out.expect(r"\[a\] a · ready  \(current\)")
        await out.expect(r"\[b\] b · stopped")
        os.write(stdin_write, b"@a perm\n")
        await out.expect(r"\[a\] permission\? Edit file.*")
        os.write(stdin_write, b"/allow\n")
        await out.expect(r"\[a\] permission: Allow")
        await out.expect(r"\[a\] permission: yes")
        os.write(stdin_write, b"@b question\n")
        await out.expect(r"\[b\] question: Your name\?")
        os.write(stdin_write, b"/answer name=Ann\n")
        await out.expect(r'\[b\] \{"action": "accept", "content": \{"name": "Ann"\}\}')
        os.write(stdin_write, b"/logs nope\n")
        await out.expect(r"\[deck\] unknown agent 'nope' \(agents: a, b\)")
        os.write(stdin_write, b"@a perm\n/deny\n")  # a permission answered in advance, then end of input
        os.close(stdin_write)
        stdin_write = -1
        assert await asyncio.wait_for(running, 30) == 0
        await out.expect(r"\[a\] permission: no")
        await out.expect(r"\[a\] stopped")
    finally:
        running.cancel()
        out.close()
        for fd in (stdin_read, stdin_write):
            if fd >= 0:
                os.close(fd)
    assert rec.states("b")[-1] == "stopped"


async def test_the_jsonl_bridge_runs_on_a_wire_client(make_deck):
    deck, rec = make_deck(agent_block("a"))
    stdin_read, stdin_write = os.pipe()
    out = Pipe()
    frontend = JsonlFrontend(wire_client(deck), stdin_fd=stdin_read, stdout_fd=out.write_fd)
    assert holds_no_deck(frontend)
    running = asyncio.create_task(frontend.run())
    try:
        requests = [
            {"jsonrpc": "2.0", "id": 1, "method": "ChatService.Send", "params": {"agent": "a", "text": "stream 3"}},
            {"jsonrpc": "2.0", "id": 2, "method": "No.Such"},
        ]
        os.write(stdin_write, b"".join(json.dumps(r).encode() + b"\n" for r in requests))
        await out.expect(r'\{"jsonrpc":"2.0","id":2,"error":\{"code":-32601,.*')
        await out.expect(r'\{"event":"message:updated","seq":\d+,"agent":"a",.*"stopReason":"end_turn".*')
        os.write(stdin_write, json.dumps({"jsonrpc": "2.0", "id": 3, "method": "DeckService.Snapshot"}).encode() + b"\n")
        snapshot = json.loads(await out.expect(r'\{"jsonrpc":"2.0","id":3,.*'))["result"]
        os.close(stdin_write)
        stdin_write = -1
        assert await asyncio.wait_for(running, 30) == 0
        lines = await out.all_lines()
    finally:
        running.cancel()
        out.close()
        for fd in (stdin_read, stdin_write):
            if fd >= 0:
                os.close(fd)
    events = [json.loads(line) for line in lines if line.startswith('{"event"')]
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # every event, in the deck's one order
    deltas = [e["text"] for e in events if e["event"] == "message:delta"]
    assert deltas == ["c0 ", "c1 ", "c2 "]
    reply = snapshot["conversations"]["a"]["messages"][-1]
    assert reply["parts"] == [{"type": "text", "text": "c0 c1 c2 "}] and snapshot["pending"] == []
    assert snapshot["seq"] in seqs and [a["name"] for a in snapshot["agents"]] == ["a"]
    assert events[-1]["event"] == "agent:state" and events[-1]["state"] == "stopped"


async def test_deck_send_runs_on_a_wire_client(make_deck):
    deck, rec = make_deck(agent_block("a"))
    out, err = io.StringIO(), io.StringIO()
    frontend = SendFrontend(wire_client(deck), agent="a", text="perm", out=out, err=err)
    assert holds_no_deck(frontend)
    assert await asyncio.wait_for(frontend.run(), 30) == 0
    assert out.getvalue() == "permission: no\n"
    assert "permission for Edit file (edit) refused: deck send cannot ask" in err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    frontend = SendFrontend(wire_client(deck), agent="a", text="question", out=out, err=err)
    assert await asyncio.wait_for(frontend.run(), 30) == 0
    assert out.getvalue() == '{"action": "decline"}\n' and "question declined" in err.getvalue()
    refused = SendFrontend(wire_client(deck), agent="zz", text="hi", out=io.StringIO(), err=(err := io.StringIO()))
    assert await refused.run() == 2 and "unknown agent 'zz'" in err.getvalue()


async def test_the_console_runs_on_a_wire_client(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    deck.chat.send("b", "perm")  # asked before the console starts: the snapshot has it
    await rec.wait_event("permission:requested", agent="b")
    client = wire_client(deck)
    app = ConsoleApp(client, await client.call("ConfigService.Current"))
    assert holds_no_deck(app)
    await app.attach(asyncio.get_running_loop())
    size = (120, 40)
    try:
        screen = canvas_text(app.root, *size)
        assert "1 A a" in screen and "2 B b" in screen and "1 permission request waiting" in screen
        for ch in "stream 5":
            app.root.keypress(size, ch)
        app.root.keypress(size, "enter")
        await rec.wait_event("turn:changed", agent="a", busy=False)
        await asyncio.gather(*app._tasks)  # the Send's answer
        app.refresh()
        assert "c0 c1 c2 c3 c4" in canvas_text(app.root, *size) and app.edit.edit_text == ""
        app.root.keypress(size, "tab")
        app.root.keypress(size, "f4")
        screen = canvas_text(app.root, *size)
        assert app.dialog_kind == "ask" and "Permission requested by b" in screen
        app.root.keypress(size, "1")
        await rec.wait_event("permission:resolved", agent="b")
        await rec.wait_event("turn:changed", agent="b", busy=False)
        app.refresh()
        screen = canvas_text(app.root, *size)
        assert app.dialog_kind == "" and "waiting" not in screen and "permission: yes" in screen
        app.root.keypress(size, "esc")
        await asyncio.gather(*app._tasks)  # the Cancel's answer
        assert "b is not answering" in canvas_text(app.root, *size)
    finally:
        app.detach()


# -- what frontends may import -----------------------------------------------------------------------


def _frontend_files() -> list[tuple[Path, str]]:
    """Each frontend module and its package name (for its relative imports)."""
    files = []
    for path in sorted((ROOT / "frontends").rglob("*.py")):
        package = ".".join(["deck", "frontends", *path.relative_to(ROOT / "frontends").parent.parts])
        files.append((path, package))
    return files


def _imports(tree: ast.AST, package: str) -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            module = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module or ""  # fmt: skip
            found.append((module, [alias.name for alias in node.names]))
    return found


def test_frontends_import_nothing_of_deck_but_its_public_modules():
    wrong = []
    for path, package in _frontend_files():
        for module, names in _imports(ast.parse(path.read_text()), package):
            if module == "deck":
                if set(names) - {"hookimpl"}:
                    wrong.append(f"{path.name}: from deck import {', '.join(names)}")
            elif module.startswith("deck.") and module not in ALLOWED and not module.startswith("deck.frontends."):
                wrong.append(f"{path.relative_to(ROOT)}: {module}")
            elif module.startswith("deck.frontends.") and not package.startswith("deck.frontends"):
                wrong.append(f"{path.relative_to(ROOT)}: {module}")
    assert wrong == []


def test_frontends_reach_no_core_object_by_attribute():
    """No `self.deck`, `deck.chat`, `….agent_service`…: what a frontend knows comes over its client."""
    wrong = []
    for path, _ in _frontend_files():
        tree = ast.parse(path.read_text())
        classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
        for node in (n for cls in classes for n in ast.walk(cls)):
            if isinstance(node, ast.Attribute) and node.attr in INTERNALS:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert wrong == []


def test_the_import_check_sees_what_the_frontends_used_to_import():
    """The check above would have caught the imports the frontends had (deck.acp, deck.agent, …)."""
    old = "from deck.acp import TooDeep, decode_line\nfrom deck.agent import LOG_LINES\nfrom ..conversation import TextPart\n"
    assert [m for m, _ in _imports(ast.parse(old), "deck.frontends.urwid")] == [
        "deck.acp", "deck.agent", "deck.frontends.conversation"]  # fmt: skip
    assert [m for m, _ in _imports(ast.parse("from .conversation import Conversation\n"), "deck.chat")] == ["deck.chat.conversation"]


# -- typed events ----------------------------------------------------------------------------------------


def _example(cls: type[Event]) -> Event:
    """An instance of `cls` with a value of the right JSON type in every field."""
    values: dict[str, Any] = {}
    for number, field in enumerate(dataclasses.fields(cls)):  # type: ignore[arg-type]
        kind = str(field.type)
        values[field.name] = (
            f"text {number}" if kind.startswith("str") else number if kind.startswith("int")
            else True if kind.startswith("bool") else {"key": [number]} if kind.startswith("dict")
            else [{"n": number}] if kind.startswith("list") else {"any": number}
        )  # fmt: skip
    return cls(**values)


def test_every_event_comes_back_from_its_wire_line_as_itself():
    make_manager()  # the built-in plugins register their events
    for seq, cls in enumerate((*ALL_EVENTS, *PLUGIN_EVENTS), 1):
        event = _example(cls)
        object.__setattr__(event, "seq", seq)
        line = json.dumps(event.to_dict())
        assert line.startswith(json.dumps({"event": cls.name, "seq": seq})[:-1] + ", ")
        again = from_wire(json.loads(line))
        assert type(again) is cls and again == event and again.seq == seq
    optional = from_wire({"event": "message:delta", "seq": 3, "agent": "a", "messageId": "m", "index": 0, "kind": "tool"})
    assert optional == MessageDelta("a", "m", 0, "tool") and optional.text is None
    unknown = from_wire({"event": "future:thing", "seq": 9, "x": 1})
    assert isinstance(unknown, UnknownEvent) and unknown.name == "future:thing" and unknown.to_dict() == {
        "event": "future:thing", "seq": 9, "x": 1}  # fmt: skip
    with pytest.raises(ValueError, match="agent:log lacks line"):
        from_wire({"event": "agent:log", "agent": "a"})


def test_a_handler_names_an_event_class_and_a_wrong_one_fails_when_the_class_is_made():
    class Seen(Handlers):
        def __init__(self) -> None:
            self.lines: list[str] = []

        @handles(AgentLog)
        def _log(self, event: AgentLog) -> None:
            self.lines.append(event.line)

    seen = Seen()
    seen.dispatch(AgentLog("a", "one"))
    seen.dispatch(from_wire({"event": "agent:log", "seq": 1, "agent": "a", "line": "two"}))
    seen.dispatch(MessageDelta("a", "m", 0, "text", text="ignored"))
    assert seen.lines == ["one", "two"]
    with pytest.raises(TypeError, match="event classes"):
        handles("agent:log")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="both handle agent:log"):

        class Twice(Handlers):
            @handles(AgentLog)
            def first(self, event: Event) -> None: ...

            @handles(AgentLog)
            def second(self, event: Event) -> None: ...

    with pytest.raises((TypeError, RuntimeError)) as outside:  # Python 3.11 wraps it in a RuntimeError

        class NotAHandler:
            @handles(AgentLog)
            def never_called(self, event: Event) -> None: ...

    assert "must derive from deck.events.Handlers" in f"{outside.value} {outside.value.__cause__}"


def test_a_plugins_events_are_known_to_from_wire_only_once_the_plugin_is_registered():
    """In a process that has not made the plugin manager, a plugin's event is an UnknownEvent; once
    the plugins are registered (`deck_register_events`, a historic hook), the same line is the class."""
    script = (
        "from deck.events import from_wire, UnknownEvent\n"
        "line = {'event': 'worktree:changed', 'seq': 4, 'agent': 'a', 'changedFiles': 2, 'ahead': 1, 'dirty': False}\n"
        "before = type(from_wire(line)).__name__\n"
        "from deck.runtime.plugins import make_manager\n"
        "make_manager(['announcements'])\n"
        "after = from_wire(line)\n"
        "ask = from_wire({'event': 'ask:changed', 'requester': 'a', 'target': 'b', 'ticketId': 't', 'active': True})\n"
        "print(before, type(after).__name__, after.changed_files, type(ask).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["UnknownEvent", "WorktreeChanged", "2", "UnknownEvent"]  # announcements: disabled


def test_an_event_name_is_one_classes():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Impostor(Event):
        name: ClassVar[str] = "worktree:changed"
        agent: str

    register_events(*WORKTREE_EVENTS)  # the same classes again: nothing changes
    with pytest.raises(ValueError, match=r"^event worktree:changed is already deck\.plugins\.worktrees\.events\.WorktreeChanged$"):
        register_events(Impostor)
    with pytest.raises(ValueError, match="is not an event class"):
        register_events(dict)  # type: ignore[arg-type]
    assert from_wire({"event": "worktree:changed", "agent": "a", "changedFiles": 0, "ahead": 0, "dirty": True}) \
        == WORKTREE_EVENTS[0]("a", 0, 0, True)  # fmt: skip


def test_every_frontend_handler_is_of_a_known_event():
    for cls in (LineFrontend, SendFrontend, ConsoleApp, sys.modules["deck.frontends.urwid.model"].Model):
        assert cls._handlers and set(cls._handlers) <= {*ALL_EVENTS, *PLUGIN_EVENTS}, cls
        assert all(callable(getattr(cls, attr)) for attr in cls._handlers.values())


# -- seq and the snapshot ----------------------------------------------------------------------------------


async def test_events_are_numbered_and_a_snapshot_plus_the_later_events_is_the_deck(make_deck):
    """A client that joins in the middle of a turn ends up with the text the agent sent, exactly."""
    deck, rec = make_deck(agent_block("a"))
    client = LocalClient(deck)
    deck.chat.send("a", "stream 400")
    await rec.wait(lambda r: len(r.named("message:delta", "a")) >= 50)
    later: list[Event] = []
    client.subscribe(later.append)
    snapshot = await client.snapshot()
    assert snapshot["seq"] == deck.seq == rec.events[-1].seq  # answered at once, in this process
    await rec.wait_event("turn:changed", agent="a", busy=False)
    assert [e.seq for e in rec.events] == list(range(1, len(rec.events) + 1))
    reply = snapshot["conversations"]["a"]["messages"][-1]
    text = "".join(p["text"] for p in reply["parts"]) + "".join(
        e.text or "" for e in later if isinstance(e, MessageDelta) and e.seq > snapshot["seq"]
    )
    final = (await client.call("ChatService.Conversation", {"agent": "a"}))["messages"][-1]
    assert text == final["parts"][0]["text"] == "".join(f"c{i} " for i in range(400))
    assert 50 <= len(reply["parts"][0]["text"].split()) < 400  # taken mid-turn


async def test_the_snapshot_lists_what_waits_for_an_answer(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    client = LocalClient(deck)
    deck.chat.send("a", "perm")
    await rec.wait_event("permission:requested", agent="a")
    deck.chat.send("b", "question")
    await rec.wait_event("question:requested", agent="b")
    snapshot = await client.snapshot()
    assert [(p["kind"], p["agent"]) for p in snapshot["pending"]] == [("permission", "a"), ("question", "b")]
    assert snapshot["pending"][0]["options"][0]["optionId"] == "yes"
    assert snapshot["config"]["path"] == str(deck.config_path)
    await client.call("ChatService.AnswerPermission", {"id": snapshot["pending"][0]["id"], "optionId": "yes"})
    await client.call("ChatService.AnswerQuestion", {"id": snapshot["pending"][1]["id"], "values": None})
    await rec.wait(lambda r: len(r.named("turn:changed")) and all(not p["busy"] for p in r.named("turn:changed")[-2:]))
    assert (await client.snapshot())["pending"] == []


async def test_a_call_is_made_at_once_and_refusals_carry_the_wire_code(make_deck):
    deck, rec = make_deck(agent_block("a"))
    client = LocalClient(deck)
    sent = client.call("ChatService.Send", {"agent": "a", "text": "hello"})
    assert sent.done() and rec.named("message:updated", "a")  # the message is in before any await
    unknown = client.call("No.Such")
    with pytest.raises(ServiceError) as refused:
        await unknown
    assert refused.value.code == METHOD_NOT_FOUND and "unknown method" in str(refused.value)
    with pytest.raises(ServiceError) as invalid:
        await client.call("ChatService.Send", {"agent": "a"})
    assert invalid.value.code == INVALID_PARAMS
    await rec.wait_event("turn:changed", agent="a", busy=False)
    started = client.call("AgentService.Restart", {"name": "a"})  # this one waits: it finishes as a task
    assert not started.done()
    assert (await started)["state"] == "ready"


async def test_a_call_started_at_once_finishes_or_is_cancelled_as_a_task_would():
    from deck.client import start

    gate = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def waits() -> str:
        seen.append("started")
        try:
            return f"got {await gate}"
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    call = start(waits())
    assert seen == ["started"] and not call.done()  # ran up to its wait before start returned
    gate.set_result(1)
    assert await call == "got 1"
    gate = asyncio.get_running_loop().create_future()
    call = start(waits())
    await asyncio.sleep(0)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert seen == ["started", "started", "cancelled"] and gate.cancelled()


async def test_a_call_started_at_once_is_its_own_task_from_its_first_step():
    """A timeout entered before the call's first wait bounds the call, never the task that made it, and works
    outside any task too (a socket's callback); a call done in its first step gives its result or error at once."""
    from deck.client import start

    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[Any] | None] = []

    async def bounded() -> str:
        tasks.append(asyncio.current_task())
        async with asyncio.timeout(0.05):
            await asyncio.sleep(10)
        return "not reached"

    me = asyncio.current_task()
    call = start(bounded())
    with pytest.raises(TimeoutError):
        await call
    assert tasks[0] is not me and tasks[0] is call
    assert me is not None and me.cancelling() == 0  # the caller was never cancelled
    from_callback: asyncio.Future[asyncio.Future[str]] = loop.create_future()
    loop.call_soon(lambda: from_callback.set_result(start(bounded())))
    with pytest.raises(TimeoutError):
        await (await from_callback)
    assert asyncio.current_task() is me

    async def at_once(fail: bool) -> str:
        if fail:
            raise ServiceError("refused")
        return "done"

    done = start(at_once(False))
    assert done.done() and done.result() == "done"
    refused = start(at_once(True))
    assert refused.done() and isinstance(refused.exception(), ServiceError)


async def test_a_call_started_at_once_and_cancelled_before_its_task_ran_is_told_of_it():
    """The cancellation reaches the call itself (its `except CancelledError` and `finally` run), and a
    context variable set in its first step is the call's own, before and after its first wait."""
    import contextvars

    from deck.client import start

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="caller")
    seen: list[str] = []

    async def call() -> None:
        var.set("call")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append(f"cancelled, var={var.get()}")
            raise
        finally:
            seen.append("finally")

    future = start(call())
    assert var.get() == "caller"  # the call's first step set its own
    future.cancel()
    with pytest.raises(asyncio.CancelledError):
        await future
    assert seen == ["cancelled, var=call", "finally"]

    async def cancelled_at_once() -> None:
        raise asyncio.CancelledError

    assert start(cancelled_at_once()).cancelled()


def test_one_reading_of_a_users_choice_among_a_permissions_options():
    from deck.frontend import choose_option, default_option

    claude = [{"optionId": "allow_always", "name": "Always Allow", "kind": "allow_always"},
              {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
              {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]  # fmt: skip
    assert choose_option(claude)["optionId"] == "allow"  # once: never always, whatever comes first
    assert choose_option(claude, "always")["optionId"] == "allow_always"
    assert choose_option(claude, "reject")["optionId"] == "reject"
    assert choose_option(claude, 3)["optionId"] == "reject" and choose_option(claude, "allow")["optionId"] == "allow"
    assert default_option(claude) == 1
    only_always = [{"optionId": "a", "kind": "allow_always"}, {"optionId": "r", "kind": "reject_always"}]
    for choice, said in (("once", "no allow-once option"), (4, "N is an option number, 1 to 2"), ("x", "unknown option 'x': a, r")):
        with pytest.raises(ValueError, match=said):
            choose_option(only_always, choice)
    assert choose_option(only_always, "reject")["optionId"] == "r" and default_option(only_always) == 0
