"""The config file's model: deck's tables and keys as pydantic models, with the types of their
values (durations, sizes, commands) and the limits deck keeps.

Finding and reading the file is `files.py`, checking a text `check.py`, writing it out
`output.py`, following a running deck's file `watch.py`.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from pathlib import Path
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)

DEFAULT_NAME = "deck.toml"


#: An agent's `registry` key: the ACP registry's id, and the version pinned (`deck.registry.catalog`'s rules).
REGISTRY_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}(@[A-Za-z0-9][A-Za-z0-9.+_-]{0,63})?")


#: `[limits] messageSize`: the text (and tool calls) one message keeps from its start.
MESSAGE_MAX = 8 << 20


#: `[limits] conversationSize`: what a conversation keeps in memory.
CONVERSATION_MAX = 32 << 20


#: How many config files `ConfigService.Recent` remembers.
RECENT_MAX = 8


#: The largest config deck reads or saves: far above any real one, small enough that a wrong
#: path (a log, a disk image) is refused at once instead of filling memory.
MAX_SIZE = 1 << 20


#: How deep tables, arrays and dotted keys may nest. The TOML parser and what reads its result
#: recurse once per level, and some of its work grows with the square of a key's length.
MAX_NESTING = 100


#: How long a pipe given as the config at start (`--config <(…)`) has to send all of it.
PIPE_TIMEOUT = 10.0


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


_DURATION_HINT = 'use a number of seconds or a string like "30s", "10m", "1h"'


def parse_duration(value: Any) -> float:
    """"30s", "10m", "1h", "90d", "250ms" or a number of seconds → seconds."""
    if isinstance(value, bool):
        raise ValueError(f"bad duration {json.dumps(value)}: {_DURATION_HINT}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"bad duration {value}: {_DURATION_HINT}")
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str) and (m := _DURATION.match(value)):
        return float(m.group(1)) * _UNITS[m.group(2)]
    raise ValueError(f"bad duration {json.dumps(value)}: {_DURATION_HINT}")


def format_duration(seconds: float) -> str:
    """600 → "10m", 30 → "30s", 0.25 → "250ms", 0 → "0s": the shortest exact spelling."""
    if seconds == 0:
        return "0s"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{int(seconds / size)}{unit}"
    if seconds < 1 and (seconds * 1000).is_integer():
        return f"{int(seconds * 1000)}ms"
    return f"{seconds:g}s"


#: Seconds in Python; "30s", "10m" or a number in the file and in `deck config show`.
Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$"},
            ]
        }
    ),
]


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$", re.IGNORECASE)


_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1 << 10, "mb": 1000**2, "mib": 1 << 20, "gb": 1000**3, "gib": 1 << 30}


_SIZE_HINT = 'use a number of bytes or a string like "512 KiB", "8 MiB", "1 GiB"'


def parse_size(value: Any) -> int:
    """"8 MiB", "512KiB", "2 GB" or a number of bytes → bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    if isinstance(value, str) and (m := _SIZE.match(value)):
        return int(float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()])
    raise ValueError(f"bad size {json.dumps(value)}: {_SIZE_HINT}")


def format_size(size: int) -> str:
    """8388608 → "8 MiB", 1500 → "1500": the shortest exact spelling."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return str(size)


#: Bytes in Python; "8 MiB" or a number in the file and in `deck config show`.
Size = Annotated[
    int,
    BeforeValidator(parse_size),
    PlainSerializer(format_size, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*([KMG]i?B|B)?\s*$"},
            ]
        }
    ),
]


def split_command(value: Any) -> Any:
    """A command line given as one string → its arguments, split as a shell does (`shlex`, no
    expansion); anything else as it is, for the list's own validation."""
    return shlex.split(value) if isinstance(value, str) else value


def _split_command(value: Any) -> Any:
    value = split_command(value)
    if isinstance(value, list) and (not value or (isinstance(value[0], str) and not value[0].strip())):
        raise ValueError("command must not be empty")
    return value


#: A list of arguments, or one string split like a shell does (an agent's `command`).
Command = Annotated[
    list[str],
    BeforeValidator(_split_command),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
                {"type": "string", "minLength": 1},
            ]
        }
    ),
]

#: The same, where none may be given: `[]` or `""` (a plugin's optional command, `[notify] command`).
CommandLine = Annotated[
    list[str],
    BeforeValidator(split_command),
    WithJsonSchema({"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}]}),
]


class _Model(BaseModel):
    # strict: TOML values are typed, so "4" for a number or true for a count is a mistake.
    # extra="allow": an unknown key is a warning (found in `parse`), not an error.
    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True, strict=True)


# The `[limits]` table. Plugins add keys of their own to it (idle_stop: `maxRunningAgents`,
# `stopIdleAgentsAfter`) by contributing a section named "limits" (see `parse`). A comment, not a
# docstring: pydantic would put a docstring in the JSON Schema.
class Limits(_Model):
    handshake_timeout: Duration = Field(
        30.0, alias="handshakeTimeout", gt=0, description='Longest ACP handshake ("30s"); more than 0.'
    )
    message_size: Size = Field(
        MESSAGE_MAX, alias="messageSize", ge=4096,
        description='What one message keeps from its start ("8 MiB"); past it, its last eighth of that more.',
    )  # fmt: skip
    conversation_size: Size = Field(
        CONVERSATION_MAX, alias="conversationSize", ge=8192,
        description='What a conversation keeps in memory ("32 MiB"); past it, its oldest messages are let go.',
    )  # fmt: skip

    @model_validator(mode="after")
    def _room_for_a_message(self) -> Limits:
        if self.conversation_size < 2 * self.message_size:
            raise ValueError("conversationSize must be at least twice messageSize")
        return self


class Plugins(_Model):
    disabled: list[str] = Field(default_factory=list, description="Plugins switched off by name (read at start).")


def absolute_paths(paths: list[str]) -> list[str]:
    """`paths`, each absolute once `~` is expanded; ValueError naming the first that is not."""
    for path in paths:
        if not os.path.isabs(os.path.expanduser(path)):
            raise ValueError(f"{path!r} is not an absolute path (give /… or ~/…)")
    return paths


class SandboxTable(_Model):
    write: list[str] = Field(
        default_factory=list, description="More folders the agent may write in its sandbox (absolute, or ~/…): its own state, e.g. ~/.claude."
    )
    hide: list[str] = Field(
        default_factory=list, description="More paths its sandbox hides (absolute, or ~/…), besides the secret folders hidden by default."
    )
    network: bool | None = Field(None, description="false: no network but a loopback of its own. Default: [sandbox] network (true).")

    @field_validator("write", "hide")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        return absolute_paths(paths)


class SandboxDefaults(SandboxTable):
    default: bool = Field(False, description="true: every agent that does not say sandbox = false runs in a sandbox.")


class AgentConfig(_Model):
    title: str = Field("", description="Shown name; default: the agent's name.")
    icon: str = Field("", description="One character; default: the name's first letter.")
    description: str = ""
    command: Command = Field(..., description="The agent's command line: a list, or one string split like a shell.")
    cwd: str = Field("", description="Working directory; default: the directory deck runs in.")
    env: dict[str, str] = Field(default_factory=dict, description="Merged over deck's environment.")
    permissions: Literal["ask", "allow-reads", "allow"] = Field(
        "ask", description='"ask" (default), "allow-reads" (auto-approve reads) or "allow" (auto-approve all).'
    )
    auth_method: str | None = Field(None, alias="authMethod", description="ACP authenticate method id.")
    terminals: bool = Field(True, description="Let the agent run commands in deck's terminals (ACP terminal/*).")
    host: str = Field(
        "", description="Run the agent on that machine through ssh (a name of ~/.ssh/config, or user@host); "
        "its cwd and command are the host's. Default (or \"\"): this machine."
    )
    ssh: list[str] = Field(
        default_factory=list, description='More arguments for ssh before the host, e.g. ["-p", "2222"] (with host).'
    )
    sandbox: bool | SandboxTable | None = Field(
        None, description="Run the agent in a sandbox (bubblewrap): true, false, or a table of write, hide and network. "
        "Default: [sandbox] default."
    )
    additional_directories: list[str] = Field(
        default_factory=list,
        alias="additionalDirectories",
        description="More folders the agent may read and write through fs/*, besides its cwd (absolute, or ~/…); "
        "given to the agent's sessions where it takes them (ACP additionalDirectories).",
    )
    registry: str = Field(
        "", description='Its id in the ACP registry, with the version pinned by `deck agents add`: "gemini@0.37.1" '
        '(or the id alone: a preset of an agent the registry has). Written by `deck agents add|update`.'
    )

    @field_validator("additional_directories")
    @classmethod
    def _absolute_directories(cls, folders: list[str]) -> list[str]:
        return absolute_paths(folders)

    @field_validator("registry")
    @classmethod
    def _registry_id(cls, value: str) -> str:
        if value and not REGISTRY_ID.fullmatch(value):  # it names folders deck installs into and removes
            raise ValueError(f"registry {value!r} is not ID or ID@VERSION (as `deck agents add` writes it)")
        return value

    @model_validator(mode="after")
    def _remote(self) -> AgentConfig:
        if self.host:
            if self.host.startswith("-") or any(c.isspace() for c in self.host):
                raise ValueError(f"host {self.host!r} is not a host name (no leading '-', no spaces)")
            if not self.cwd:
                raise ValueError(f"an agent on {self.host} needs cwd, an absolute path there (its sessions open in it)")
            if not self.cwd.startswith("/"):
                raise ValueError(f"cwd {self.cwd!r} is not an absolute path on {self.host} (~ is not expanded there)")
        elif self.ssh:
            raise ValueError("ssh arguments are for an agent with a host: add host = \"…\"")
        return self

    def resolved_cwd(self) -> str:
        if self.host:  # the host's own path, taken as written
            return self.cwd
        return str(Path(os.path.expanduser(self.cwd or ".")).resolve())

    def resolved_directories(self) -> list[str]:
        """The additional directories, `~` expanded and resolved, in the config's order."""
        return [str(Path(os.path.expanduser(folder)).resolve()) for folder in self.additional_directories]


# The `[registry]` table: where `deck agents search|add|update` read the ACP registry.
class RegistrySource(_Model):
    url: str = Field(
        "", description="The ACP registry's URL (http, https or file); default: the registry's CDN. "
        "$DECK_REGISTRY_URL wins over it."
    )


class DeckConfig(_Model):
    language: Literal["en", "fr"] = Field("en", description="en | fr")
    theme: Literal["dark", "light"] = Field("dark", description="dark | light: the colours of the console and of highlighted code")
    frontend: str | None = Field(None, description="Default frontend for `deck run`: urwid, line or jsonl.")
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    plugins: Plugins = Field(default_factory=Plugins)  # type: ignore[arg-type]
    sandbox: SandboxDefaults = Field(default_factory=SandboxDefaults)  # type: ignore[arg-type]
    agents: dict[str, AgentConfig] = Field(default_factory=dict, description="Agents, in the order shown.")
    registry: RegistrySource = Field(default_factory=RegistrySource)  # type: ignore[arg-type]


#: deck's tables a plugin may add keys to, with a section of the same name.
CORE_TABLES = frozenset({"limits"})


#: The section name under which a plugin adds keys to every `[agents.NAME]` table (budget's `budget`):
#: its model validates each agent's keys, and `Loaded.sections["agents"]` maps each agent to the result.
AGENT_KEYS = "agents"


def config_keys(model: type[BaseModel]) -> set[str]:
    """The keys `model` reads, as the file spells them."""
    return {info.alias or name for name, info in model.model_fields.items()}


def keys_set(keys: BaseModel) -> list[str]:
    """The keys, as the file spells them, to which `keys` (a model's instance, validated) gives a value
    other than the key's default (both as validated: `"10m"` is 600 seconds, a table its model)."""
    fields = type(keys).model_fields
    return [info.alias or name for name, info in fields.items() if getattr(keys, name) != info.get_default(call_default_factory=True)]


def keys_of_off(model: type[BaseModel], table: dict[str, Any]) -> list[str]:
    """The keys of `model` (a plugin's that is off) that an agent's `table`, as the file has it, gives
    other than their default; all it gives of them when they are not even valid."""
    given = {k: v for k, v in table.items() if k in config_keys(model)}
    if not given:
        return []
    try:
        return [key for key in keys_set(model.model_validate(given)) if key in given]
    except ValidationError:
        return list(given)


def joined(name: str, models: Sequence[type[BaseModel]]) -> type[BaseModel]:
    """One model for section `name` holding the keys of each of `models` (several plugins adding keys
    to every agent's table): an instance of it is an instance of each. Each plugin's model validates
    its own keys, by its own rules (`validate_joined`); the joined model only holds the results."""
    models = [m for m in dict.fromkeys(models) if not any(o is not m and issubclass(o, m) for o in models)]
    if len(models) == 1:
        return models[0]
    made = create_model(f"Joined_{name}", __base__=tuple(models))
    made.deck_parts = tuple(models)  # type: ignore[attr-defined]
    return made


def validate_joined(model: type[BaseModel], given: dict[str, Any]) -> tuple[BaseModel | None, list[ValidationError]]:
    """`given` validated by `model` (None, and why, when invalid): a `joined` one's parts each validate
    their own keys (a plugin's model is never made strict, nor frozen, by another's), then their
    values make one instance."""
    parts: tuple[type[BaseModel], ...] = getattr(model, "deck_parts", (model,))
    values: dict[str, Any] = {}
    errors = []
    for part in parts:
        try:
            mine = part.model_validate({k: v for k, v in given.items() if k in config_keys(part)})
        except ValidationError as exc:
            errors.append(exc)
            continue
        if part is model:
            return mine, []
        values.update({name: getattr(mine, name) for name in part.model_fields})
    return (None, errors) if errors else (model.model_construct(**values), [])


def agent_warnings(keys: BaseModel, agent: str, config: AgentConfig) -> list[tuple[str, str]]:
    """What the plugins whose keys `keys` holds (a `joined` model's: each of them) find wrong with
    agent `agent` that is not invalid: (key, why) from each one's `config_warnings(agent, config)`."""
    found = []
    for cls in type(keys).__mro__:
        check = vars(cls).get("config_warnings")
        if check is not None:
            found += check(keys, agent, config)
    return found
