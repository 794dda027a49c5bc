"""The config file: pydantic models, discovery, TOML loading with line/column problems."""

from __future__ import annotations

import os
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

DEFAULT_NAME = "deck.toml"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """"30s", "10m", "1h", "250ms" or a number of seconds → seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like \"30s\", \"10m\", \"1h\"")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str) and (m := _DURATION.match(value)):
        return float(m.group(1)) * _UNITS[m.group(2)]
    raise ValueError(f"bad duration {value!r}: use a number of seconds or a string like \"30s\", \"10m\", \"1h\"")


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)


class Limits(_Model):
    max_running_agents: int = Field(4, alias="maxRunningAgents", ge=1, description="Agents running at once.")
    stop_idle_agents_after: float = Field(
        600.0, alias="stopIdleAgentsAfter", description='Stop a ready agent unused this long ("10m"; 0 = never).'
    )
    handshake_timeout: float = Field(30.0, alias="handshakeTimeout", description="Longest ACP handshake (\"30s\").")

    _durations = field_validator("stop_idle_agents_after", "handshake_timeout", mode="before")(
        lambda cls, v: parse_duration(v)
    )


class Plugins(_Model):
    disabled: list[str] = Field(default_factory=list, description="Plugins switched off by name.")


class AgentConfig(_Model):
    title: str = ""
    icon: str = ""
    description: str = ""
    command: list[str] = Field(..., min_length=1, description="The agent's command line.")
    cwd: str = Field("", description="Working directory; default: the directory deck runs in.")
    env: dict[str, str] = Field(default_factory=dict, description="Merged over deck's environment.")
    permissions: Literal["ask", "allow-reads", "allow"] = Field(
        "ask", description='"ask" (default), "allow-reads" (auto-approve reads) or "allow" (auto-approve all).'
    )
    auth_method: str | None = Field(None, alias="authMethod", description="ACP authenticate method id.")

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = shlex.split(value)
        if isinstance(value, list) and (not value or not str(value[0]).strip()):
            raise ValueError("command must not be empty")
        return value

    def resolved_cwd(self) -> str:
        return str(Path(os.path.expanduser(self.cwd or ".")).resolve())


class DeckConfig(_Model):
    language: Literal["en", "fr"] = "en"
    theme: str = "dark"
    frontend: str | None = None
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    plugins: Plugins = Field(default_factory=Plugins)  # type: ignore[arg-type]
    agents: dict[str, AgentConfig] = Field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    line: int
    column: int
    message: str
    warning: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "column": self.column, "message": self.message, "warning": self.warning}


@dataclass
class Loaded:
    """A config text read and checked: the model when valid, and every problem found."""

    config: DeckConfig | None
    problems: list[Problem] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if not p.warning]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.warning]


def embedded_default() -> str:
    """The config used when there is no file anywhere: the demo agent only."""
    python = sys.executable.replace("\\", "\\\\").replace('"', '\\"')
    return (
        "# deck's built-in config: the demo agent shipped with deck.\n"
        "[agents.demo]\n"
        'title = "Demo agent"\n'
        'icon = "D"\n'
        'description = "A scripted agent that shows what deck can display"\n'
        f'command = ["{python}", "-m", "deck.demo"]\n'
    )


def find_config(flag: str | None = None) -> tuple[Path | None, str]:
    """The config file in use and how it was found: flag, env, cwd, xdg or embedded."""
    if flag:
        return Path(flag).expanduser(), "flag"
    if env := os.environ.get("DECK_CONFIG"):
        return Path(env).expanduser(), "env"
    local = Path(DEFAULT_NAME)
    if local.is_file():
        return local.resolve(), "cwd"
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "deck" / DEFAULT_NAME
    if xdg.is_file():
        return xdg, "xdg"
    return None, "embedded"


def parse(text: str, sections: dict[str, type[BaseModel]] | None = None) -> Loaded:
    """Check `text`; problems carry the line and column they point at."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return Loaded(None, [_toml_problem(exc)])
    problems: list[Problem] = []
    locate = _Locator(text)
    sections = sections or {}
    try:
        config = DeckConfig.model_validate({k: v for k, v in raw.items() if k not in sections})
    except ValidationError as exc:
        config = None
        for err in exc.errors():
            loc = tuple(str(p) for p in err["loc"])
            line, col = locate(loc)
            problems.append(Problem(line, col, f"{'.'.join(loc)}: {_message(err)}"))
    for name, model in sections.items():
        if name in raw:
            try:
                model.model_validate(raw[name])
            except ValidationError as exc:
                config = None
                for err in exc.errors():
                    loc = (name, *(str(p) for p in err["loc"]))
                    line, col = locate(loc)
                    problems.append(Problem(line, col, f"{'.'.join(loc)}: {_message(err)}"))
    if config is not None:
        for loc in _unknown_keys(config, ()):
            if loc[0] in sections:
                continue
            line, col = locate(loc)
            problems.append(Problem(line, col, f"unknown key {'.'.join(loc)}", warning=True))
    return Loaded(config, sorted(problems, key=lambda p: (p.line, p.column)), raw)


def load_file(path: Path, sections: dict[str, type[BaseModel]] | None = None) -> tuple[str, Loaded]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "", Loaded(None, [Problem(1, 1, f"no such file: {path}")])
    except (OSError, UnicodeDecodeError) as exc:
        return "", Loaded(None, [Problem(1, 1, f"cannot read {path}: {exc}")])
    return text, parse(text, sections)


def _message(err: Any) -> str:
    msg = str(err["msg"])
    if err["type"] == "missing":
        return "required key is missing"
    return msg.removeprefix("Value error, ")


def _toml_problem(exc: tomllib.TOMLDecodeError) -> Problem:
    text = str(exc)
    m = re.search(r"\(at line (\d+), column (\d+)\)", text)
    if m:
        return Problem(int(m.group(1)), int(m.group(2)), "TOML syntax: " + text[: m.start()].strip())
    return Problem(1, 1, "TOML syntax: " + text)


def _unknown_keys(model: BaseModel, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    found = [(*prefix, key) for key in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        key = type(model).model_fields[name].alias or name
        if isinstance(value, BaseModel):
            found += _unknown_keys(value, (*prefix, key))
        elif isinstance(value, dict):
            for sub, item in value.items():
                if isinstance(item, BaseModel):
                    found += _unknown_keys(item, (*prefix, key, sub))
    return found


class _Locator:
    """Finds where a key path (`agents.claude.command`) is written in TOML text."""

    _header = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
    _key = re.compile(r"^\s*([A-Za-z0-9_\-\"'. ]+?)\s*=")

    def __init__(self, text: str) -> None:
        self.entries: list[tuple[tuple[str, ...], int, int]] = []
        table: tuple[str, ...] = ()
        for number, line in enumerate(text.splitlines(), start=1):
            if m := self._header.match(line):
                table = _split_key(m.group(1))
                self.entries.append((table, number, line.index("[") + 1))
            elif m := self._key.match(line):
                key = _split_key(m.group(1))
                self.entries.append(((*table, *key), number, len(line) - len(line.lstrip()) + 1))

    def __call__(self, loc: tuple[str, ...]) -> tuple[int, int]:
        # The longest prefix of `loc` written in the file: the key itself, else its table.
        for size in range(len(loc), 0, -1):
            for path, line, col in self.entries:
                if path == loc[:size]:
                    return line, col
        return 1, 1


def _split_key(key: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in key.split("."))


def json_schema(sections: dict[str, type[BaseModel]] | None = None) -> dict[str, Any]:
    """The config file's JSON Schema, with the sections plugins contribute."""
    schema = DeckConfig.model_json_schema(by_alias=True)
    schema["title"] = "deck config"
    schema.setdefault("$schema", "https://json-schema.org/draft/2020-12/schema")
    for name, model in (sections or {}).items():
        schema.setdefault("properties", {})[name] = model.model_json_schema(by_alias=True)
    return schema
