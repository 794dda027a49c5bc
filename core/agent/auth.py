"""ACP authentication as an agent offers it (`authMethods` of its initialize result): the
method ids deck may pass to `authenticate`, and what the user can do for each one."""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING, Any

from deck.errors import ServiceError

if TYPE_CHECKING:
    from deck.config.models import AgentConfig


def methods(init_result: dict[str, Any]) -> list[dict[str, Any]]:
    """The authentication methods the agent offers (each a dict with an `id`)."""
    found = init_result.get("authMethods")
    return [m for m in found if isinstance(m, dict) and "id" in m] if isinstance(found, list) else []


def check(name: str, config: AgentConfig, init_result: dict[str, Any], method: str) -> None:
    """Refuse a method id agent `name` did not offer, or one deck cannot pass to `authenticate`."""
    offered = methods(init_result)
    found = next((m for m in offered if m["id"] == method), None)
    if found is None:
        listed = ", ".join(repr(m["id"]) for m in offered) or "none"
        raise ServiceError(f"unknown authentication method {method!r} for {name}: it offers {listed}")
    if found.get("type") == "terminal":  # ACP: the client never passes these to authenticate
        raise ServiceError(f"{method!r} is a terminal login, not for authenticate: {hint(name, config, found)}")


def help_text(name: str, config: AgentConfig, init_result: dict[str, Any], only: str | None = None) -> str:
    """What the user can do to authenticate agent `name`: one line per method it offers."""
    offered = [m for m in methods(init_result) if only is None or m["id"] == only]
    if not offered:
        return f"{name} lists no authentication methods: log in with the agent's own tool, or set its key in env."
    head = "To authenticate:" if only else f"{name} offers these authentication methods:"
    return "\n".join([head, *(f"- {hint(name, config, m)}" for m in offered)])


def hint(name: str, config: AgentConfig, method: dict[str, Any]) -> str:
    """One authentication method and how to use it with deck.

    Besides ACP's `agent` and `terminal` kinds, agents send `env_var` methods (codex-acp:
    `{"type": "env_var", "vars": [{"name": "OPENAI_API_KEY"}]}`): the key must be in the
    agent's environment and the method still goes through `authenticate`.
    """
    method_id, kind = str(method["id"]), method.get("type")
    label = f"{method_id!r} ({method['name']})" if method.get("name") else repr(method_id)
    use = f'authMethod = "{method_id}" in [agents.{name}], or AgentService.Authenticate("{name}", "{method_id}")'
    if kind == "terminal":
        words = [*config.command, *(str(a) for a in method.get("args") or [])]
        assignments = [f"{k}={shlex.quote(str(v))}" for k, v in (method.get("env") or {}).items()]
        return f"{label}: run `{' '.join([*assignments, shlex.join(words)])}` once in a terminal, then restart {name}"
    if kind == "env_var":
        raw = method.get("vars") or [{"name": method.get("varName")}]
        names = [str(v["name"]) for v in raw if isinstance(v, dict) and v.get("name")]
        env = {**os.environ, **config.env}
        missing = [n for n in names if not env.get(n)]
        keys = ", ".join(f'{n} = "…"' for n in missing)
        step = f"set env = {{ {keys} }} in [agents.{name}] (or in deck's environment), then " if missing else ""
        return f"{label}: {step}{use}"
    return f"{label}: {use}"
