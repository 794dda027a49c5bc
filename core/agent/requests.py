"""What an agent asks of deck, each for the session it names: fs/* (confined beneath its cwd,
away from deck's own files), terminal/* (off when its config says so; both off for an agent on
another host), permission requests
and questions (handed to the deck above, which asks the user). A refusal is logged."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from deck.acp.connection import Connection
from deck.agent import fs, interop
from deck.agent.session import CONVERSATION, Session
from deck.errors import METHOD_NOT_FOUND, AcpError, ConnectionClosed

if TYPE_CHECKING:
    from deck.agent.agent import Agent


class AgentRequests:
    """The requests of one agent's connection (`register`), served for `agent`."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def register(self, conn: Connection) -> None:
        conn.on_request("session/request_permission", self._permission)
        conn.on_request("elicitation/create", self._question)
        conn.on_request("fs/read_text_file", lambda p: self._fs("fs/read_text_file", fs.read_text_file, p))
        conn.on_request("fs/write_text_file", lambda p: self._fs("fs/write_text_file", fs.write_text_file, p))
        for method in ("create", "output", "wait_for_exit", "kill", "release"):
            conn.on_request(f"terminal/{method}", functools.partial(self._terminal, method))

    async def _fs(self, method: str, serve: Callable[..., dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        """An fs/* request, inside the agent's cwd and away from deck's own files; a refusal is logged.

        An agent listed in interop.py may get an error answered in the shape it needs."""
        private = fs.Private(self.agent.deck.config_path, tuple(self.agent.deck.private_folders))
        try:
            self._refuse_remote(method, "fs")
            # In a thread: a big file, or a slow disk, must not stall every other agent.
            root = fs.root_for(params, self.agent.cwd, self.agent.directories)
            return await asyncio.to_thread(serve, root, params, private)
        except AcpError as exc:
            if (answer := interop.fs_answer(interop.quirks_for(self.agent.init_result), method, exc)) is not None:
                return answer
            if exc.code != fs.RESOURCE_NOT_FOUND:
                self.agent.log(f"deck: {method} refused: {exc.args[0]}")
            raise

    async def _terminal(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A terminal/* request: refused when the config turns terminals off; a refusal is logged."""
        try:
            self._refuse_remote(f"terminal/{method}", "terminal")
            if not self.agent.config.terminals:
                raise AcpError(METHOD_NOT_FOUND, f"terminals are off for {self.agent.name} (terminals = false in its config)")
            session = self._session_for(params)
            found = self.agent.terminals
            if found is None:
                raise ConnectionClosed("the agent is not running")
            if method == "create":
                view = self.agent.view  # a sandboxed agent's commands run in its sandbox, with its env only
                env = {**os.environ, **self.agent.config.env} if view is None else dict(os.environ)
                created = await found.create(params, self._command_dir, env, view)
                if session.origin == CONVERSATION:
                    self.agent.deck.conversations.of(self.agent.name).terminal_started(created["terminalId"])
                return created
            if method == "output":
                return found.output(params)
            return await getattr(found, method)(params)  # type: ignore[no-any-return]
        except AcpError as exc:
            self.agent.log(f"deck: terminal/{method} refused: {exc.args[0]}")
            raise

    def _refuse_remote(self, method: str, what: str) -> None:
        """An agent on another host is told fs and terminals are off: deck serves neither from this
        machine, whatever its paths share with the host's (they would be the user's files here)."""
        if self.agent.config.host:
            raise AcpError(METHOD_NOT_FOUND, f"{method}: {what} is off for {self.agent.name}, an agent on host {self.agent.config.host!r}")

    def _command_dir(self, path: str | None) -> tuple[int, str]:
        """The directory a command runs in, opened beneath the agent's cwd (in a thread: a slow disk)."""
        private = fs.Private(self.agent.deck.config_path, tuple(self.agent.deck.private_folders))
        root = fs.root_for({"path": path}, self.agent.cwd, self.agent.directories) if path else self.agent.cwd
        return fs.open_directory(root, path or self.agent.cwd, private), path or self.agent.cwd

    def _session_for(self, params: dict[str, Any]) -> Session:
        session_id = params.get("sessionId")
        session = self.agent.sessions.get(session_id) if isinstance(session_id, str) else None  # a list is no key
        if session is None:
            raise AcpError(-32002, f"unknown session: {str(session_id)[:100]}")
        return session

    async def _permission(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self.agent.deck.asks.ask_permission(self._session_for(params), params)

    async def _question(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self.agent.deck.asks.ask_question(self._session_for(params), params)
