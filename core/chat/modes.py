"""Session settings: an agent's modes and config options (ACP `session/set_mode`, `session/set_config_option`).

The agent starts if it must; its answer is folded into the conversation as the matching
`session/update` would be, so every frontend sees the change as a `conversation:changed`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from deck.chat.conversation import option_values
from deck.errors import AcpError, ConnectionClosed, ServiceError

if TYPE_CHECKING:
    from deck.agent.session import Session
    from deck.chat.book import Conversations
    from deck.chat.host import ChatHost


class SessionSettings:
    """Change the modes and config options of each agent's conversation session."""

    def __init__(self, deck: ChatHost, conversations: Conversations) -> None:
        self._deck = deck
        self._conversations = conversations
        #: Agent name → its choices being set again on its new session (`again`).
        self._again_tasks: dict[str, asyncio.Task[None]] = {}

    def again(self, agent: str) -> None:
        """Set the user's choices again on `agent`'s new session, once it is ready (`settled` waits)."""
        task = self._deck.spawn(self.set_again(agent), f"choices {agent}")
        self._again_tasks[agent] = task
        task.add_done_callback(lambda done: self._again_tasks.pop(agent, None) if self._again_tasks.get(agent) is done else None)

    async def settled(self, agent: str) -> None:
        """Return once the choices being set again on `agent`'s session are set: a prompt goes after them."""
        task = self._again_tasks.get(agent)
        if task is not None and task is not asyncio.current_task():
            await asyncio.wait({task})

    async def set_mode(self, agent: str, mode_id: str) -> dict[str, Any]:
        session = await self._session(agent)
        conv = self._conversations.of(agent)
        offered = [m.get("id") for m in (conv.modes or {}).get("availableModes") or [] if isinstance(m, dict)]
        if offered and mode_id not in offered:
            raise ServiceError(f"{agent} offers no mode {mode_id!r} (modes: {', '.join(str(m) for m in offered)})")
        await _asked(agent, session.request("session/set_mode", {"modeId": mode_id}), f"mode {mode_id}")
        conv.apply_update({"sessionUpdate": "current_mode_update", "currentModeId": mode_id})
        conv.chose(mode=mode_id)
        return {"modes": conv.modes}

    async def set_config_option(self, agent: str, config_id: str, value: str | bool) -> dict[str, Any]:
        session = await self._session(agent)
        conv = self._conversations.of(agent)
        _check_choice(agent, conv.config_options, config_id, value)
        params: dict[str, Any] = {"configId": config_id, "value": value}
        if isinstance(value, bool):
            params["type"] = "boolean"
        result = await _asked(agent, session.request("session/set_config_option", params), f"{config_id} = {value}")
        if isinstance(result, dict) and isinstance(result.get("configOptions"), list):
            conv.apply_update({"sessionUpdate": "config_option_update", "configOptions": result["configOptions"]})
        conv.chose(option=config_id, value=value)
        return {"configOptions": conv.config_options}

    async def set_again(self, agent: str) -> None:
        """The user's choices for `agent`'s conversation, set on its new session where it differs from
        them and still offers them (after a resume, or a restart). One the agent refuses is logged."""
        conv = self._conversations.of(agent)
        options = {o.get("id"): o for o in conv.config_options}
        for config_id, value in (conv.choices.get("options") or {}).items():
            option = options.get(config_id)
            if option is None or option.get("currentValue") == value:
                continue
            offered = isinstance(value, bool) if option.get("type") == "boolean" else value in option_values(option)
            if offered:
                await self._again(agent, self.set_config_option(agent, config_id, value), f"{config_id} = {value}")
        mode = conv.choices.get("mode")
        modes = conv.modes or {}
        available = [m.get("id") for m in modes.get("availableModes") or [] if isinstance(m, dict)]
        if isinstance(mode, str) and mode != modes.get("currentModeId") and mode in available:
            await self._again(agent, self.set_mode(agent, mode), f"mode {mode}")

    async def _again(self, agent: str, setting: Any, what: str) -> None:
        try:
            await setting
        except (ServiceError, AcpError, ConnectionClosed) as exc:
            self._deck.agent(agent).log(f"deck: could not set {what} again on the new session: {exc}")

    async def _session(self, name: str) -> Session:
        agent = self._deck.agent(name)
        await agent.start()
        if agent.conn is None or agent.session is None or agent.session.id is None:
            raise ServiceError(f"{name} has no session")
        return agent.session


def _check_choice(agent: str, options: list[dict[str, Any]], config_id: str, value: str | bool) -> None:
    """Refuse a value the agent's option does not offer, before anything is sent: a select takes
    one of its values, a boolean true or false. An agent that lists no options is asked as is."""
    option = next((o for o in options if o.get("id") == config_id), None)
    if option is None:
        if options:
            ids = ", ".join(str(o.get("id")) for o in options)
            raise ServiceError(f"{agent} offers no option {config_id!r} (options: {ids})")
        return
    if option.get("type") == "boolean":
        if not isinstance(value, bool):
            raise ServiceError(f"{config_id} of {agent} is true or false, not {value!r}")
    elif option.get("type") == "select":
        values = option_values(option)
        if isinstance(value, bool) or value not in values:
            shown = ", ".join(str(v) for v in values[:20]) + (", …" if len(values) > 20 else "")
            raise ServiceError(f"{config_id} of {agent} offers no value {value!r} (values: {shown})")


async def _asked(agent: str, request: Any, what: str) -> Any:
    """The agent's answer to a setting; its error answer is the caller's error, with its message."""
    try:
        return await request
    except AcpError as exc:
        raise ServiceError(f"{agent} refused {what}: {exc.args[0] or f'error {exc.code}'}") from None
