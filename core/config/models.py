"""The config file: pydantic models, discovery, reading (regular files of 1 MiB at most), TOML
checking with line/column problems, atomic saving, recent files.

Watching the file and applying a change to a running deck live in `watch.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import selectors
import shlex
import stat
import sys
import time
import tomllib
import typing
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from deck.proc.storage import state_dir
from deck.proc.storage import write_atomic as replace_file
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

DEFAULT_NAME = "deck.toml"
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
    """600 → "10m", 30 → "30s", 0.25 → "250ms": the shortest exact spelling."""
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


def _split_command(value: Any) -> Any:
    if isinstance(value, str):
        value = shlex.split(value)
    if isinstance(value, list) and (not value or (isinstance(value[0], str) and not value[0].strip())):
        raise ValueError("command must not be empty")
    return value


#: A list of arguments, or one string split like a shell does.
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
    worktree: bool = Field(
        False, description="Run in a git worktree of its own (branch deck/NAME) of the repository its cwd is in."
    )

    def resolved_cwd(self) -> str:
        return str(Path(os.path.expanduser(self.cwd or ".")).resolve())


class DeckConfig(_Model):
    language: Literal["en", "fr"] = Field("en", description="en | fr")
    theme: Literal["dark", "light"] = Field("dark", description="dark | light: the colours of the console and of highlighted code")
    frontend: str | None = Field(None, description="Default frontend for `deck run`: urwid, line or jsonl.")
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    plugins: Plugins = Field(default_factory=Plugins)  # type: ignore[arg-type]
    agents: dict[str, AgentConfig] = Field(default_factory=dict, description="Agents, in the order shown.")


#: deck's tables a plugin may add keys to, with a section of the same name.
CORE_TABLES = frozenset({"limits"})
#: The section name under which a plugin adds keys to every `[agents.NAME]` table (budget's `budget`):
#: its model validates each agent's keys, and `Loaded.sections["agents"]` maps each agent to the result.
AGENT_KEYS = "agents"


@dataclass(frozen=True)
class Problem:
    line: int
    column: int
    message: str
    warning: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "column": self.column, "message": self.message, "warning": self.warning}

    def format(self, where: str) -> str:
        """`where:line:col: message`, the form compilers and editors understand."""
        kind = "warning: " if self.warning else ""
        return f"{where}:{self.line}:{self.column}: {kind}{self.message}"


@dataclass
class Loaded:
    """A config text read and checked: the model when valid, and every problem found."""

    config: DeckConfig | None
    problems: list[Problem] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    #: Plugin sections, validated by their own models (absent ones at their defaults when they have any);
    #: `agents` (AGENT_KEYS): agent name → the keys a plugin adds to its table.
    sections: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if not p.warning]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.warning]


def embedded_default() -> str:
    """The config used when there is no file anywhere: the demo agent only (run with -P: a
    `deck` folder in the current folder is not taken for deck)."""
    python = sys.executable.replace("\\", "\\\\").replace('"', '\\"')
    return (
        "# deck's built-in config: the demo agent shipped with deck.\n"
        "[agents.demo]\n"
        'title = "Demo agent"\n'
        'icon = "D"\n'
        'description = "A scripted agent that shows what deck can display"\n'
        f'command = ["{python}", "-P", "-m", "deck.demo"]\n'
    )


def xdg_config_file() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "deck" / DEFAULT_NAME


def find_config(flag: str | None = None) -> tuple[Path | None, str]:
    """The config file in use and how it was found: flag, env, cwd, xdg or embedded."""
    if flag:
        return Path(flag).expanduser(), "flag"
    if env := os.environ.get("DECK_CONFIG"):
        return Path(env).expanduser(), "env"
    local = Path(DEFAULT_NAME)
    if local.is_file():
        return local.resolve(), "cwd"
    xdg = xdg_config_file()
    if xdg.is_file():
        return xdg, "xdg"
    return None, "embedded"


# -- reading ----------------------------------------------------------------------------------

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO or pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class Unreadable(OSError):
    """A path deck does not read as a config: not a regular file, too large, or a pipe too slow."""


def read_text(path: Path, *, pipe: bool = False) -> str:
    """The text of config file `path`, exactly as written: no newline is translated, so `digest` of it
    is the hash of the file's bytes.

    Only a regular file of MAX_SIZE bytes at most is read, or with `pipe` (the config deck starts
    with, `--config <(…)`) what a pipe sends within PIPE_TIMEOUT. The path is opened without
    blocking: a FIFO nobody writes to, or a device, is refused at once instead of hanging deck.
    """
    return read_bytes(path, pipe=pipe).decode("utf-8")


def read_bytes(path: Path, *, pipe: bool = False) -> bytes:
    """The bytes of config file `path` (see `read_text`); `Unreadable` when deck refuses it."""
    _check_kind(os.stat(path).st_mode, pipe)  # a device is not even opened: opening some does something
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        info = os.fstat(fd)  # what was opened, should the path have been replaced meanwhile
        _check_kind(info.st_mode, pipe)
        return _read_regular(fd, info.st_size) if stat.S_ISREG(info.st_mode) else _read_pipe(fd)
    finally:
        os.close(fd)


def _check_kind(mode: int, pipe: bool) -> None:
    if not (stat.S_ISREG(mode) or (pipe and stat.S_ISFIFO(mode))):
        raise Unreadable(f"not a regular file ({_mode_kind(mode)})")


def _too_big(size: int) -> str:
    return f"{size} bytes: a config file has {MAX_SIZE} (1 MiB) at most"


def _read_regular(fd: int, size: int) -> bytes:
    if size > MAX_SIZE:
        raise Unreadable(_too_big(size))
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, MAX_SIZE + 1 - total):  # the file may grow while it is read
        chunks.append(chunk)
        total += len(chunk)
        if total > MAX_SIZE:
            raise Unreadable(_too_big(total))
    return b"".join(chunks)


def _read_pipe(fd: int) -> bytes:
    """What a pipe sends until its writer closes it, within PIPE_TIMEOUT and MAX_SIZE."""
    deadline = time.monotonic() + PIPE_TIMEOUT
    chunks: list[bytes] = []
    total = 0
    with selectors.DefaultSelector() as ready:
        ready.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not ready.select(left):
                raise Unreadable(f"the pipe did not send the whole config within {PIPE_TIMEOUT:g}s")
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:  # woken without data
                continue
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_SIZE:
                raise Unreadable(f"the pipe sent more than {MAX_SIZE} bytes: a config file has 1 MiB at most")


def _mode_kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _current_digest(path: Path) -> str | None:
    """The sha256 of what `path` holds now; None when it cannot be read as a config (gone, a FIFO, too large)."""
    try:
        return hashlib.sha256(read_bytes(path)).hexdigest()
    except OSError:
        return None


def is_pipe(path: Path) -> bool:
    """Whether `path` is a pipe (`--config <(…)`): read once at start, never watched, written or remembered."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def digest(text: str) -> str:
    """The sha256 (hex) of `text` in UTF-8: the hash of a config file's bytes when `text` was read from it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- checking ---------------------------------------------------------------------------------


def parse(
    text: str, sections: dict[str, type[BaseModel]] | None = None, frontends: Collection[str] | None = None
) -> Loaded:
    """Check `text`; problems carry the line and column they point at.

    `sections` are the plugins' (`deck_config_sections`): a top-level table of the plugin's own,
    or, under the name of one of deck's tables (`limits`), keys the plugin adds to that table,
    or, under `agents` (AGENT_KEYS), keys the plugin adds to each agent's table. Either way its
    model validates what it declares; `Loaded.sections` holds the result (for `agents`, agent
    name → the model's instance).
    `frontends`, when given, are the frontends there are: another `frontend` is warned of."""
    if (unfit := _unfit(text)) is not None:
        return Loaded(None, [unfit])
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return Loaded(None, [_toml_problem(exc, text)])
    locate = _Locator(text)
    extensions = {k: v for k, v in (sections or {}).items() if k in CORE_TABLES}
    per_agent = (sections or {}).get(AGENT_KEYS)
    sections = {k: v for k, v in (sections or {}).items() if k not in DeckConfig.model_fields}
    core = {k: v for k, v in raw.items() if k not in sections}
    given: dict[str, Any] = {name: raw.get(name, {}) for name in sections}
    for name, model in extensions.items():  # the plugin's keys of a core table are the plugin's to check
        table, keys = raw.get(name), _keys(model)
        if isinstance(table, dict):
            core[name] = {k: v for k, v in table.items() if k not in keys}
            given[name] = {k: v for k, v in table.items() if k in keys}
        else:
            given[name] = {}
    agent_keys: dict[str, dict[str, Any]] = {}
    if per_agent is not None and isinstance(raw.get("agents"), dict):
        keys = _keys(per_agent)
        core["agents"] = dict(raw["agents"])
        for name, table in raw["agents"].items():
            if isinstance(table, dict):
                core["agents"][name] = {k: v for k, v in table.items() if k not in keys}
                agent_keys[name] = {k: v for k, v in table.items() if k in keys}
    problems: list[Problem] = []
    config: DeckConfig | None = None
    try:
        # by_name=False: the file spells keys as documented (maxRunningAgents), nothing else.
        config = DeckConfig.model_validate(core, by_name=False)
    except ValidationError as exc:
        problems += _problems(exc, (), locate)
    validated: dict[str, Any] = {}
    for name, model in {**sections, **extensions}.items():
        try:
            validated[name] = model.model_validate(given[name])
        except ValidationError as exc:
            if name in raw:
                problems += _problems(exc, (name,), locate)
    if per_agent is not None:
        validated[AGENT_KEYS] = each_agent = {}
        for name, given_keys in agent_keys.items():
            try:
                each_agent[name] = per_agent.model_validate(given_keys)
            except ValidationError as exc:
                problems += _problems(exc, ("agents", name), locate)
    unknown = _unknown_keys(DeckConfig, core, ())
    for name, model in sections.items():
        unknown += _unknown_keys(model, raw.get(name), (name,))
    for loc, close in unknown:
        hint = f" (did you mean {close}?)" if close else ""
        problems.append(Problem(*locate.key(loc), f"unknown key {_dotted(loc)}{hint}", warning=True))
    if config is not None:
        problems += _worktree_problems(config, locate)
        if frontends is not None and config.frontend is not None and config.frontend not in frontends:
            known = ", ".join(sorted(frontends)) or "none"
            message = f"frontend: unknown frontend {config.frontend!r} (available: {known}), so `deck run` refuses it"
            problems.append(Problem(*locate.value(("frontend",)), message, warning=True))
    if any(not p.warning for p in problems):
        config = None
    return Loaded(config, sorted(problems, key=lambda p: (p.line, p.column)), raw, validated)


def _worktree_problems(config: DeckConfig, locate: _Locator) -> list[Problem]:
    """A warning for each `worktree = true` agent whose name cannot be a worktree's, or whose cwd is
    in no git repository: it cannot start."""
    found = []
    for name, agent in config.agents.items():
        if not agent.worktree:
            continue
        loc = ("agents", name, "worktree")
        if (why := worktree_name_problem(name)) is not None:
            found.append(Problem(*locate.value(loc), f"{_dotted(loc)}: {why}, so the agent cannot start", warning=True))
        if not in_git_repository(agent.resolved_cwd()):
            message = f"{_dotted(loc)}: {agent.resolved_cwd()} is in no git repository, so the agent cannot start"
            found.append(Problem(*locate.value(loc), message, warning=True))
    return found


#: Agent names a worktree can have: its branch (`deck/NAME`) and its folder are named so as they are.
_WORKTREE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def worktree_name_problem(name: str) -> str | None:
    """Why a `worktree = true` agent cannot be named `name` (None when it can): git refuses it in a
    branch, or its folder would be another agent's `NAME.json` record beside the worktrees."""
    if _WORKTREE_NAME.fullmatch(name) and not name.endswith((".", ".lock", ".json")) and ".." not in name:
        return None
    return (f"agent name {name!r} cannot name a branch and a folder: use letters, digits, '-', '_', '.', "
            "starting with a letter, a digit or '_', not ending in '.', '.lock' or '.json'")  # fmt: skip


def in_git_repository(folder: str) -> bool:
    """Whether `folder` or a folder above it holds a `.git` (a repository, or a worktree's link file)."""
    path = Path(folder)
    return any((p / ".git").exists() for p in (path, *path.parents))


def _keys(model: type[BaseModel]) -> set[str]:
    """The keys `model` reads, as the file spells them."""
    return {info.alias or name for name, info in model.model_fields.items()}


def disabled_plugins(text: str) -> list[str]:
    """`plugins.disabled` of a config text, read before it is checked (the check needs the enabled
    plugins' sections); [] when the text cannot be read."""
    if _unfit(text) is not None:
        return []
    try:
        disabled = tomllib.loads(text).get("plugins", {}).get("disabled", [])
    except (tomllib.TOMLDecodeError, AttributeError):
        return []
    return [d for d in disabled if isinstance(d, str)] if isinstance(disabled, list) else []


def load_file(
    path: Path, sections: dict[str, type[BaseModel]] | None = None, *, pipe: bool = False
) -> tuple[str, Loaded]:
    """Read (see `read_text`) and check config file `path`; a file deck cannot read is one problem."""
    text, unreadable = read_file(path, pipe=pipe)
    return text, Loaded(None, [unreadable]) if unreadable is not None else parse(text, sections)


def read_file(path: Path, *, pipe: bool = False) -> tuple[str, Problem | None]:
    """The text of config file `path` (see `read_text`), or "" and the problem that it cannot be read."""
    try:
        return read_text(path, pipe=pipe), None
    except FileNotFoundError:
        return "", Problem(1, 1, f"no such file: {path}")
    except (OSError, UnicodeDecodeError) as exc:
        return "", Problem(1, 1, f"cannot read {path}: {exc}")


def _unfit(text: str) -> Problem | None:
    """Why `text` is not even given to the TOML parser: its size, what UTF-8 cannot hold, its nesting."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # from JSON ("\ud800"): it could be neither saved nor read back
        return Problem(*_position(text, exc.start), f"not UTF-8 text: a lone surrogate (U+{ord(text[exc.start]):04X})")
    if size > MAX_SIZE:
        return Problem(1, 1, _too_big(size))
    if (at := _too_deep(text)) is not None:
        return Problem(*_position(text, at), f"nested more than {MAX_NESTING} levels deep")
    return None


def _position(text: str, index: int) -> tuple[int, int]:
    """The line and column of `text[index]` (TOML lines end at \\n only)."""
    return text.count("\n", 0, index) + 1, index - text.rfind("\n", 0, index)


#: The rest of a string after its opening quotes; possessive, so a string left open costs one scan.
_STRING_REST = {
    '"""': re.compile(r'(?:[^"\\]|\\.|"(?!""))*+"{3,5}', re.DOTALL),
    "'''": re.compile(r"(?:[^']|'(?!''))*+'{3,5}"),
    '"': re.compile(r'(?:[^"\\\n]|\\.)*+"'),
    "'": re.compile(r"[^'\n]*+'"),
}
_NESTING_MARK = re.compile(r'["\'#\[\]{}=,.\n]')


def _too_deep(text: str) -> int | None:
    """Where `text` first nests deeper than MAX_NESTING (its index), in one pass before any parser recurses.

    The level of a value is the number of tables and arrays around it: a header `[a.b]` opens
    level 2, a key `c.d = …` in it writes level 4, an array there holds level 5 (and so on inside
    inline tables). Strings and comments are skipped; a string left open ends the scan (the parser
    reports it).
    """
    stack: list[tuple[str, int]] = []  # the open arrays and inline tables, with their levels
    table = 0  # the level of the table the current header opened
    mode = "key"  # reading a key, a header, a value, or the rest of a header line
    dots = 0  # in the key being read
    value = 0  # the level of the next value
    pos = 0
    while (mark := _NESTING_MARK.search(text, pos)) is not None:
        at, ch = mark.start(), mark.group()
        pos = at + 1
        if ch in "\"'":
            quotes = text[at : at + 3] if text.startswith(ch * 3, at) else ch
            rest = _STRING_REST[quotes].match(text, at + len(quotes))
            if rest is None:
                return None
            pos = rest.end()
        elif ch == "#":
            end = text.find("\n", at)
            pos = len(text) if end < 0 else end
        elif ch == "\n":
            if not stack:
                mode, dots = "key", 0
        elif mode == "rest":
            continue
        elif ch in ".=" and mode in ("key", "header"):
            # A key's parts nest from the table it is written in (none for a header: it starts at the top).
            base = 0 if mode == "header" else stack[-1][1] if stack else table
            if ch == ".":
                dots += 1
            elif mode == "key":
                mode, value = "value", base + dots + 1
            if base + dots + 1 > MAX_NESTING:
                return at
        elif ch == "[" and mode == "key" and not stack:
            mode, dots = "header", 0
            if text.startswith("[", pos):  # [[array.of.tables]]: one level more
                pos, dots = pos + 1, 1
        elif ch == "]" and mode == "header":
            mode, table = "rest", dots + 1
            if table > MAX_NESTING:
                return at
        elif ch in "[{" and mode == "value":
            if value > MAX_NESTING:
                return at
            stack.append((ch, value))
            if ch == "{":
                mode, dots = "key", 0
            else:
                value += 1
        elif ch in "]}" and stack:
            stack.pop()
            mode = "value"
            if stack and stack[-1][0] == "[":
                value = stack[-1][1] + 1
        elif ch == "," and stack:
            if stack[-1][0] == "{":
                mode, dots = "key", 0
            else:
                value = stack[-1][1] + 1
    return None


def _problems(exc: ValidationError, prefix: tuple[str, ...], locate: _Locator) -> list[Problem]:
    found = []
    for err in exc.errors():
        loc = (*prefix, *(str(p) for p in err["loc"]))
        where = locate.key(loc) if err["type"] == "missing" else locate.value(loc)
        found.append(Problem(*where, f"{_dotted(loc)}: {_message(err)}"))
    return found


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "an array",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}


def _message(err: Any) -> str:
    kind = err["type"]
    if kind == "missing":
        return "required key is missing"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {_toml_type(err.get('input'))}"
    if kind == "literal_error":
        expected = str(err["ctx"]["expected"]).replace("'", '"')
        return f"unknown value {json.dumps(err.get('input'))}: use {expected}"
    if kind in ("greater_than_equal", "too_short"):
        least = err["ctx"].get("ge", err["ctx"].get("min_length"))
        return f"must be at least {least}, got {json.dumps(err.get('input'))}"
    if kind == "less_than_equal":
        return f"must be at most {err['ctx']['le']}, got {json.dumps(err.get('input'))}"
    return str(err["msg"]).removeprefix("Value error, ")


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value:g})"
    if isinstance(value, str):
        return f"a string ({json.dumps(value)})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def _dotted(loc: tuple[str, ...]) -> str:
    """A key path as TOML writes it: `agents."é a".permissions` (a key that is not all printable
    characters with its escapes, `\\u202e`, never the character)."""
    return ".".join(
        part if _BARE.fullmatch(part) else json.dumps(part, ensure_ascii=not part.isprintable()) for part in loc
    )


def _toml_problem(exc: tomllib.TOMLDecodeError, text: str) -> Problem:
    message = str(exc)
    m = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if m:
        return Problem(int(m.group(1)), int(m.group(2)), "TOML syntax: " + message[: m.start()])
    m = re.search(r"\s*\(at end of document\)$", message)
    if m:
        message = message[: m.start()]
        if message == "Cannot overwrite a value" and (dup := _Locator(text).duplicate):
            return Problem(*dup, "TOML syntax: " + message)
        lines = text.removesuffix("\n").split("\n")  # TOML lines end at \n only; splitlines() also splits at U+2028
        return Problem(len(lines), len(lines[-1]) + 1, "TOML syntax: " + message + " (at end of file)")
    return Problem(1, 1, "TOML syntax: " + message)


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds, and whether it holds a table of them (`dict[str, Model]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if typing.get_origin(annotation) is dict:
        args = typing.get_args(annotation)
        if len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], BaseModel):
            return args[1], True
    return None, False


def _unknown_keys(
    model: type[BaseModel], raw: Any, prefix: tuple[str, ...]
) -> list[tuple[tuple[str, ...], str | None]]:
    """Keys written in `raw` that `model` does not know, each with the known key it is closest to
    (a typo's), found in the raw TOML so errors do not hide them."""
    if not isinstance(raw, dict) or model.model_config.get("extra") == "forbid":
        return []  # a wrong type is an error already; "forbid" models report extras themselves
    by_key = {(info.alias or name): info for name, info in model.model_fields.items()}
    found: list[tuple[tuple[str, ...], str | None]] = []
    for key, value in raw.items():
        info = by_key.get(key)
        if info is None:
            found.append(((*prefix, key), _closest(key, by_key)))
            continue
        sub, is_table = _model_in(info.annotation)
        if sub is not None and is_table and isinstance(value, dict):
            for name, item in value.items():
                found += _unknown_keys(sub, item, (*prefix, key, name))
        elif sub is not None:
            found += _unknown_keys(sub, value, (*prefix, key))
    return found


def _closest(key: str, known: Collection[str]) -> str | None:
    """The known key `key` is most likely a typo of (letters swapped, missing or doubled), or None."""
    import difflib

    if len(key) > 64:  # no typo of a real key
        return None
    lowered = {k.lower(): k for k in known}
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.75)
    return lowered[close[0]] if close else None


# -- locating keys in the text ----------------------------------------------------------------

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_PART = r'(?:"(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_-]+)'
_KEY = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_KEY})\s*\]\]?\s*(#.*)?$")
_ASSIGN = re.compile(rf"\s*({_KEY})\s*=\s*")


def _split_key(key: str) -> tuple[str, ...]:
    parts = re.findall(_PART, key)
    return tuple(json.loads(p) if p.startswith('"') else p.strip("'") for p in parts)


class _Locator:
    """Where each key (`agents.claude.command`) is written in TOML text: its line, key column and value column."""

    def __init__(self, text: str) -> None:
        self.keys: dict[tuple[str, ...], tuple[int, int]] = {}
        self.values: dict[tuple[str, ...], tuple[int, int]] = {}
        #: Every prefix of a written key → where the first key under it is written: a table written
        #: only through its sub-keys (`agents.a.title = …`) is found in one look-up, not a scan.
        self.first: dict[tuple[str, ...], tuple[int, int]] = {}
        self.duplicate: tuple[int, int] | None = None
        table: tuple[str, ...] = ()
        in_string: str | None = None  # the quotes of a multi-line string being read
        lines = text.split("\n")
        for number, line in enumerate(lines, start=1):
            if in_string:
                if line.count(in_string) % 2 == 1:
                    in_string = None
                continue
            if m := _HEADER.match(line):
                table = _split_key(m.group(2))
                self._add(table, number, m.start(1) + 1, None)
                continue
            if m := _ASSIGN.match(line):
                start = m.end()
                self._add((*table, *_split_key(m.group(1))), number, m.start(1) + 1, start + 1)
                if line.startswith("{", start):
                    self._inline(line, start, (*table, *_split_key(m.group(1))), number)
                elif line.startswith("[", start):
                    self._array(lines, number - 1, start, (*table, *_split_key(m.group(1))))
                for quotes in ('"""', "'''"):
                    if line.startswith(quotes, start) and line.count(quotes) == 1:
                        in_string = quotes

    def _add(self, path: tuple[str, ...], line: int, key_col: int, value_col: int | None) -> None:
        if path in self.keys and value_col is not None and self.duplicate is None:
            self.duplicate = (line, key_col)
        self.keys.setdefault(path, (line, key_col))
        self.values.setdefault(path, (line, value_col or key_col))
        for size in range(len(path), 0, -1):
            if path[:size] in self.first:
                break  # and so are its shorter prefixes
            self.first[path[:size]] = (line, key_col)

    def _inline(self, line: str, start: int, prefix: tuple[str, ...], number: int) -> None:
        """Keys of an inline table `{ A = 1, B = { C = 2 } }` that starts at `line[start]`."""
        stack = [prefix]
        pos, expect_key = start + 1, True
        while pos < len(line) and stack:
            ch = line[pos]
            if expect_key and (m := _ASSIGN.match(line, pos)):
                path = (*stack[-1], *_split_key(m.group(1)))
                self._add(path, number, m.start(1) + 1, m.end() + 1)
                pos, expect_key = m.end(), False
                if line.startswith("{", pos):
                    stack.append(path)
                    pos, expect_key = pos + 1, True
                continue
            if ch in "\"'":
                end = line.find(ch, pos + 1)
                while ch == '"' and end > 0 and line[end - 1] == "\\":
                    end = line.find(ch, end + 1)
                pos = len(line) if end < 0 else end + 1
                continue
            if ch == ",":
                expect_key = True
            elif ch == "}":
                stack.pop()
            pos += 1

    def _array(self, lines: list[str], row: int, col: int, path: tuple[str, ...]) -> None:
        """Where each element of the array at `lines[row][col]` starts (`command.1`), across lines too."""
        stack: list[list[Any]] = [[path, 0, True]]  # per open array: its path, element index, expecting one
        col += 1
        while row < len(lines) and stack:
            line = lines[row]
            while col < len(line) and stack:
                ch, frame = line[col], stack[-1]
                if ch in " \t\r":
                    col += 1
                    continue
                if ch == "#":
                    break
                if ch == ",":
                    frame[1], frame[2] = frame[1] + 1, True
                elif ch == "]":
                    stack.pop()
                elif frame[2]:
                    element = (*frame[0], str(frame[1]))
                    self._add(element, row + 1, col + 1, col + 1)
                    frame[2] = False
                    if ch == "[":
                        stack.append([element, 0, True])
                if ch in "\"'":
                    end = line.find(ch, col + 1)
                    while ch == '"' and end > 0 and line[end - 1] == "\\":
                        end = line.find(ch, end + 1)
                    col = len(line) if end < 0 else end + 1
                    continue
                col += 1
            row, col = row + 1, 0

    def _find(self, table: dict[tuple[str, ...], tuple[int, int]], loc: tuple[str, ...]) -> tuple[int, int]:
        # The longest prefix of `loc` written in the file: the key itself, else the first key under it.
        for size in range(len(loc), 0, -1):
            found = table.get(loc[:size]) or self.first.get(loc[:size])
            if found is not None:
                return found
        return 1, 1

    def key(self, loc: tuple[str, ...]) -> tuple[int, int]:
        return self._find(self.keys, loc)

    def value(self, loc: tuple[str, ...]) -> tuple[int, int]:
        return self._find(self.values, loc)


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


# -- saving and recent files ------------------------------------------------------------------


class Changed(Exception):
    """The file is no longer the one a write was based on."""


def write_atomic(path: Path, text: str, *, base: str | None = None) -> None:
    """Replace config file `path` with `text` at once (`files.write_atomic`): readers see the old or the new file, never half.

    Only a regular file is replaced. With `base` (the `digest` of the text the new one was made
    from), `Changed` is raised instead when the file holds anything else: it is hashed again just
    before the rename, so only a write landing between that read and the rename can still be lost.
    """
    target = Path(os.path.realpath(path))  # a symlinked config keeps its link
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(mode := os.stat(path).st_mode):  # a pipe, a device: never replaced by a file
            raise Unreadable(f"not a regular file ({_mode_kind(mode)})")
    target.parent.mkdir(parents=True, exist_ok=True)

    def unchanged() -> None:
        if base is not None and _current_digest(target) != base:
            raise Changed(str(path))

    # An existing file keeps its mode, a new one gets what open() would give it.
    replace_file(target, text.encode("utf-8"), check=unchanged)


def recent_files() -> list[str]:
    """Config files opened, most recent first."""
    try:
        data = json.loads((state_dir() / "recent.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [p for p in data if isinstance(p, str)][:RECENT_MAX] if isinstance(data, list) else []


def remember(path: Path) -> list[str]:
    """Put `path` first in the recent files; return the new list."""
    entry = str(Path(path).expanduser().absolute())
    files = [entry, *(p for p in recent_files() if p != entry)][:RECENT_MAX]
    write_atomic(state_dir() / "recent.json", json.dumps(files, indent=2) + "\n")
    return files
