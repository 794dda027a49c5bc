"""Checking a config text: TOML, then deck's models and the plugins' sections, every problem with
the line and column it points at (a hand-written locator: tomllib gives none), an unknown key
with the key it is likely a typo of, and nesting too deep refused before any parse."""

from __future__ import annotations

import json
import re
import tomllib
import typing
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deck.config.files import read_text, too_big
from deck.config.models import (
    AGENT_KEYS,
    CORE_TABLES,
    MAX_NESTING,
    MAX_SIZE,
    DeckConfig,
    agent_warnings,
    config_keys,
    keys_of_off,
    validate_joined,
)
from pydantic import (
    BaseModel,
    ValidationError,
)


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


@dataclass(frozen=True)
class Plugins:
    """What a check knows of the plugins besides the sections of those on: the sections of those that
    are off, by plugin (what the file sets of them does nothing, and is said so, not "unknown"), and
    the name of every plugin there is (a `[plugins] disabled` name of none is warned of)."""

    off: dict[str, dict[str, Any]] = field(default_factory=dict)
    names: frozenset[str] | None = None
    #: Those of `off` switched off by the command line (`-p no:NAME`), not by the file.
    by_option: frozenset[str] = frozenset()


# -- checking ---------------------------------------------------------------------------------


def parse(
    text: str,
    sections: dict[str, type[BaseModel]] | None = None,
    frontends: Collection[str] | None = None,
    plugins: Plugins | None = None,
) -> Loaded:
    """Check `text`; problems carry the line and column they point at.

    `sections` are the plugins' (`deck_config_sections`): a top-level table of the plugin's own,
    or, under the name of one of deck's tables (`limits`), keys the plugin adds to that table,
    or, under `agents` (AGENT_KEYS), keys the plugin adds to each agent's table. Either way its
    model validates what it declares; `Loaded.sections` holds the result (for `agents`, agent
    name → the model's instance).
    `frontends`, when given, are the frontends there are: another `frontend` is warned of.
    `plugins` (`Plugins`): the keys of the plugins that are off, and the plugins there are."""
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
        table, keys = raw.get(name), config_keys(model)
        if isinstance(table, dict):
            core[name] = {k: v for k, v in table.items() if k not in keys}
            given[name] = {k: v for k, v in table.items() if k in keys}
        else:
            given[name] = {}
    agent_keys: dict[str, dict[str, Any]] = {}
    if per_agent is not None and isinstance(raw.get("agents"), dict):
        keys = config_keys(per_agent)
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
        found, invalid = validate_joined(model, given[name])
        if found is not None:
            validated[name] = found
        for error in invalid if name in raw else ():
            problems += _problems(error, (name,), locate)
    if per_agent is not None:
        validated[AGENT_KEYS] = each_agent = {}
        for name, given_keys in agent_keys.items():
            found, invalid = validate_joined(per_agent, given_keys)
            if found is not None:
                each_agent[name] = found
            for error in invalid:
                problems += _problems(error, ("agents", name), locate)
    unknown = _unknown_keys(DeckConfig, core, ())
    for name, model in sections.items():
        unknown += _unknown_keys(model, raw.get(name), (name,))
    plugins = plugins or Plugins()
    for loc, close in unknown:
        if (off := _off_key(plugins, loc, raw)) is not None:
            problems.append(Problem(*locate.key(loc), f"{_dotted(loc)}: {off}", warning=True))
            continue
        hint = f" (did you mean {close}?)" if close else ""
        problems.append(Problem(*locate.key(loc), f"unknown key {_dotted(loc)}{hint}", warning=True))
    if plugins.names is not None:
        problems += _unknown_plugins(raw, plugins.names, locate)
    if config is not None:
        for name, keys in validated.get(AGENT_KEYS, {}).items():
            if name in config.agents:
                for key, why in agent_warnings(keys, name, config.agents[name]):
                    loc = ("agents", name, key)
                    problems.append(Problem(*locate.value(loc), f"{_dotted(loc)}: {why}", warning=True))
        if frontends is not None and config.frontend is not None and config.frontend not in frontends:
            known = ", ".join(sorted(frontends)) or "none"
            message = f"frontend: unknown frontend {config.frontend!r} (available: {known}), so `deck run` refuses it"
            problems.append(Problem(*locate.value(("frontend",)), message, warning=True))
    if any(not p.warning for p in problems):
        config = None
    return Loaded(config, sorted(problems, key=lambda p: (p.line, p.column)), raw, validated)


def _off_key(plugins: Plugins, loc: tuple[str, ...], raw: dict[str, Any]) -> str | None:
    """What a key unknown to the plugins on (at `loc`) is, when it is the key of one that is off."""
    for plugin, sections in plugins.off.items():
        how = f"-p no:{plugin}" if plugin in plugins.by_option else "[plugins] disabled"
        said = f"a {'section' if len(loc) == 1 else 'key'} of the {plugin} plugin, which is off ({how})"
        per_agent = sections.get(AGENT_KEYS)
        if loc[0] == "agents" and len(loc) == 3 and per_agent is not None and loc[2] in config_keys(per_agent):
            if keys_of_off(per_agent, raw["agents"][loc[1]]):  # never without it: `Deck.relied_on`
                return f"{said}: the agent does not start while it is set"
            return f"{said}: it does nothing"
        if loc[0] in CORE_TABLES and len(loc) == 2 and loc[0] in sections and loc[1] in config_keys(sections[loc[0]]):
            return f"{said}: it does nothing"
        if len(loc) == 1 and loc[0] in sections and loc[0] not in CORE_TABLES and loc[0] != AGENT_KEYS:
            return f"{said}: it does nothing"
    return None


def _unknown_plugins(raw: dict[str, Any], names: frozenset[str], locate: _Locator) -> list[Problem]:
    """A warning for each name in `[plugins] disabled` that no plugin has: a misspelt one leaves its plugin on."""
    disabled = raw.get("plugins", {}).get("disabled") if isinstance(raw.get("plugins"), dict) else None
    if not isinstance(disabled, list):
        return []
    found = []
    for name in disabled:
        if isinstance(name, str) and name not in names:
            import difflib

            close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else f" (plugins: {', '.join(sorted(names))})"
            message = f"plugins.disabled: no plugin is named {name!r}{hint}, so it switches nothing off"
            found.append(Problem(*locate.value(("plugins", "disabled")), message, warning=True))
    return found


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
        return Problem(1, 1, too_big(size))
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
            found.append(((*prefix, key), closest(key, by_key)))
            continue
        sub, is_table = _model_in(info.annotation)
        if sub is not None and is_table and isinstance(value, dict):
            for name, item in value.items():
                found += _unknown_keys(sub, item, (*prefix, key, name))
        elif sub is not None:
            found += _unknown_keys(sub, value, (*prefix, key))
    return found


def closest(key: str, known: Collection[str]) -> str | None:
    """The known key (or name) `key` is most likely a typo of (letters swapped, missing or doubled), or None."""
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
