"""The config as deck writes it out: its JSON Schema (with the plugins' sections), the effective
config with every default, and TOML."""

from __future__ import annotations

import json
from typing import Any

from deck.config.check import _dotted
from deck.config.models import AGENT_KEYS, CORE_TABLES, DeckConfig
from deck.config.registry_url import effective_url
from pydantic import (
    BaseModel,
)

# -- schema and output ------------------------------------------------------------------------


def json_schema(sections: dict[str, type[BaseModel]] | None = None) -> dict[str, Any]:
    """The config file's JSON Schema, with the sections plugins contribute."""
    schema = DeckConfig.model_json_schema(by_alias=True)
    schema["title"] = "deck config"
    schema.setdefault("$schema", "https://json-schema.org/draft/2020-12/schema")
    for name, model in (sections or {}).items():
        own = model.model_json_schema(by_alias=True)
        if name in CORE_TABLES:  # keys a plugin adds to a table of deck's: theirs first, as documented
            table = schema["$defs"][schema["properties"][name]["$ref"].rsplit("/", 1)[-1]]
            table["properties"] = {**own.get("properties", {}), **table.get("properties", {})}
            schema["$defs"].update(own.get("$defs", {}))
        elif name == AGENT_KEYS:  # keys a plugin adds to every agent's table
            table = schema["$defs"]["AgentConfig"]
            table["properties"] = {**own.get("properties", {}), **table.get("properties", {})}
            schema["$defs"].update(own.get("$defs", {}))
        elif name not in DeckConfig.model_fields:
            schema.setdefault("properties", {})[name] = own
    return schema


def effective(config: DeckConfig, sections: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config as deck uses it, every default filled in, keys spelled as in the file."""
    data = config.model_dump(by_alias=True, exclude_none=True)
    for name, agent in config.agents.items():
        data["agents"][name]["cwd"] = agent.resolved_cwd()  # the folder it runs in, not "" for "here"
    data["registry"]["url"] = effective_url(config.registry.url or None)  # the one read, not "" for the default
    for name, model in (sections or {}).items():
        if name == AGENT_KEYS:
            for agent, keys in model.items():
                if agent in data["agents"]:
                    own = keys.model_dump(by_alias=True, exclude_none=True, mode="json")
                    data["agents"][agent] = {**data["agents"][agent], **own}
            continue
        own = model.model_dump(by_alias=True, exclude_none=True, mode="json")
        data[name] = {**own, **data[name]} if name in CORE_TABLES else own
    return data


def to_toml(data: dict[str, Any]) -> str:
    """A TOML document for `data` (scalars first, then tables; None values left out)."""
    lines: list[str] = []
    _toml_table(data, (), lines)
    return "\n".join(lines).strip() + "\n"


def _toml_table(data: dict[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict) and v is not None}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    if path and (scalars or not tables):
        lines += ["", f"[{_dotted(path)}]"]
    lines += [f"{_dotted((k,))} = {_toml_value(v)}" for k, v in scalars.items()]
    for key, value in tables.items():
        if not value and scalars:  # an empty table beside values (`env = {}`): inline
            lines.append(f"{_dotted((key,))} = {{}}")
        else:
            _toml_table(value, (*path, key), lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_dotted((k,))} = {_toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")
